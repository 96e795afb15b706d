// Runner cost and MPI scaling on a real sweep (bench/runners_grid.toml by default).
//   runners_sweep_bench SPEC WORKDIR            (also under mpirun -n N)
// At one rank it first runs every cell's simulator function directly into scratch directories (no identity, no
// manifests, no hashing): the baseline measured in the same process. Then it runs the same cells through
// execute_sweep into a fresh sweep directory and reports the wall time, the time inside the cells, and
//   overhead = (ranks x wall - time inside cells) / (ranks x wall)    and    wall / baseline.
// bench/runners_mpi_scaling.sh runs it at 1 and 2 ranks and prints the speedup.
#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "runners/exec/executor.hpp"
#include "runners/exec/sweep_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/store.hpp"

namespace wr = wbaudit::runners;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  wr::MpiSession mpi(&argc, &argv);
  if (argc < 3) {
    std::cerr << "usage: runners_sweep_bench SPEC WORKDIR\n";
    return 64;
  }
  const fs::path work = argv[2];
  const auto spec = wr::load_sweep_spec(argv[1]);
  const auto fn = wr::simulator_cell_fn();
  const fs::path sweep_dir = work / ("sweep-" + std::to_string(mpi.size()) + "ranks");
  try {
    double baseline = 0.0;
    if (mpi.size() == 1) {
      const auto cells = wr::stored_cells(spec);
      const auto start = std::chrono::steady_clock::now();
      std::size_t i = 0;
      for (const auto& cell : cells) {
        const fs::path scratch = work / "direct" / std::to_string(i++);
        fs::create_directories(scratch);
        (void)fn({wr::cell_id(cell.config), cell.name, cell.config}, scratch);
      }
      baseline = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fs::remove_all(work / "direct");
    }
    if (mpi.rank() == 0) {
      fs::remove_all(sweep_dir);
      (void)wr::SweepStore::create(sweep_dir, spec.text, wr::stored_cells(spec));
    }
    if (mpi.active()) MPI_Barrier(MPI_COMM_WORLD);
    const auto store = wr::SweepStore::open(sweep_dir);
    wr::ExecOptions opts;
    opts.comm = mpi.active() ? MPI_COMM_WORLD : MPI_COMM_NULL;
    const auto summary = wr::execute_sweep(store, wr::tasks_of(store), fn, opts);
    if (mpi.rank() == 0) {
      const double capacity = summary.wall_seconds * mpi.size();
      std::printf("cells=%zu ranks=%d wall_s=%.3f cell_s=%.3f overhead=%.4f", summary.total, mpi.size(),
                  summary.wall_seconds, summary.cell_seconds, (capacity - summary.cell_seconds) / capacity);
      if (baseline > 0)
        std::printf(" baseline_s=%.3f wall_over_baseline=%.4f", baseline, summary.wall_seconds / baseline);
      std::printf(" failed=%zu\n", summary.failed);
    }
    return summary.ok() ? 0 : 3;
  } catch (const std::exception& e) {
    std::cerr << "runners_sweep_bench (rank " << mpi.rank() << "): " << e.what() << "\n";
    return 1;
  }
}
