// Driver for the MPI executor tests (tests/mpi/mpi_executor_test.sh): runs a 16-cell sweep of uneven, deterministic
// cells through execute_sweep, locally or over MPI_COMM_WORLD when started by mpirun, then (rank 0) prints one line
// per cell: "<name> <state> <sha256 of out.bin of the canonical attempt>" and a summary line.
//   executor_mpi_probe DIR [--resume] [--fail-seed N] [--kill-seed N]
// --fail-seed: that cell throws (recorded failure). --kill-seed: the process running that cell SIGKILLs itself.
#include <Kokkos_Core.hpp>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "runners/exec/executor.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/store.hpp"

namespace wr = wbaudit::runners;

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  wr::MpiSession mpi(&argc, &argv);
  if (argc < 2) {
    std::cerr << "usage: executor_mpi_probe DIR [--resume] [--fail-seed N] [--kill-seed N]\n";
    return 64;
  }
  const std::filesystem::path dir = argv[1];
  bool resume = false, status_only = false;
  int fail_seed = -1, kill_seed = -1;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--resume"))
      resume = true;
    else if (!std::strcmp(argv[i], "--status-only"))
      status_only = true;
    else if (!std::strcmp(argv[i], "--fail-seed") && i + 1 < argc)
      fail_seed = std::stoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--kill-seed") && i + 1 < argc)
      kill_seed = std::stoi(argv[++i]);
  }
  std::vector<wr::StoredCell> cells;
  for (int seed = 0; seed < 16; ++seed)
    cells.push_back({"",
                     "cell/seed=" + std::to_string(seed),
                     "target",
                     "",
                     {{"schema", "wbaudit.cell/1"}, {"seed", seed}, {"work", 1 + (seed % 4) * 3}}});
  try {
    if (mpi.rank() == 0 && !status_only) {
      wr::CreateOptions create;
      create.resume = resume;
      (void)wr::SweepStore::create(dir, "probe spec\n", cells, create);
    }
    if (mpi.active()) MPI_Barrier(MPI_COMM_WORLD);
    const auto store = wr::SweepStore::open(dir);
    // Uneven cost: `work` rounds of a xorshift stream; the output depends only on the configuration.
    auto fn = [&](const wr::CellTask& task, const std::filesystem::path& attempt) -> std::vector<std::string> {
      const int seed = task.config.at("seed").get<int>();
      if (seed == kill_seed) std::raise(SIGKILL);
      std::uint64_t x = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(seed + 1);
      std::ofstream out(attempt / "out.bin", std::ios::binary);
      const int rounds = task.config.at("work").get<int>() * 200000;
      for (int r = 0; r < rounds; ++r) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (r % 1000 == 0) out.write(reinterpret_cast<const char*>(&x), sizeof x);
      }
      out.close();
      if (seed == fail_seed) throw std::runtime_error("seed " + std::to_string(seed) + " failed on purpose");
      return {"out.bin"};
    };
    wr::ExecOptions opts;
    opts.resume = resume;
    opts.comm = mpi.active() ? MPI_COMM_WORLD : MPI_COMM_NULL;
    const auto summary = status_only ? wr::ExecSummary{} : wr::execute_sweep(store, wr::tasks_of(store), fn, opts);
    if (mpi.rank() == 0) {
      for (const auto& s : store.status()) {
        std::cout << s.cell->name << " " << wr::to_string(s.state) << " "
                  << (s.canonical_attempt
                          ? s.attempts[*s.canonical_attempt].manifest["files"]["out.bin"].get<std::string>()
                          : std::string("-"))
                  << "\n";
      }
      if (!status_only)
        std::cout << "summary total=" << summary.total << " completed=" << summary.completed
                  << " failed=" << summary.failed << " skipped=" << summary.skipped << " ranks=" << mpi.size()
                  << " wall=" << summary.wall_seconds << "\n";
    }
    // Every rank must agree on the summary.
    return summary.ok() ? 0 : 3;
  } catch (const std::exception& e) {
    std::cerr << "executor_mpi_probe (rank " << mpi.rank() << "): " << e.what() << "\n";
    return 1;
  }
}
