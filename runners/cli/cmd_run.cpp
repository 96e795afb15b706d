// wbaudit run SPEC.toml [--out DIR] [--resume]: the main job. Under mpirun the cells are spread over the ranks.
#include <iostream>

#include "runners/cli/commands.hpp"
#include "runners/executor.hpp"
#include "runners/spec.hpp"
#include "runners/sweep_run.hpp"

namespace wbaudit::cli {

void add_run_command(CLI::App& app) {
  struct Args {
    std::string spec;
    std::string out;
    bool resume = false;
    bool no_report = false;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run",
                                 "Run a sweep here: every cell with Kokkos threads, spread over MPI ranks "
                                 "when started by mpirun; then write summary.csv and the report");
  cmd->add_option("spec", args->spec, "Sweep spec (TOML), e.g. examples/two_layer_grid.toml")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", args->out, "Sweep directory to create (default: runs/<sweep name>)");
  cmd->add_flag("--resume", args->resume,
                "Reopen an existing sweep directory and run only cells without a canonical complete attempt");
  cmd->add_flag("--no-report", args->no_report, "Skip summary.csv and the report");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress output");
  cmd->footer(
      "Examples:\n  wbaudit run examples/two_layer_grid.toml --out runs/grid\n"
      "  mpirun -n 2 --bind-to none wbaudit run examples/two_layer_grid.toml --out runs/grid --kokkos-threads=1\n"
      "Threads: --kokkos-threads=N (or OMP_NUM_THREADS).");
  cmd->callback([args] {
    runners::SweepSpec spec = runners::load_sweep_spec(args->spec);
    runners::RunOptions options;
    options.out = args->out.empty() ? std::filesystem::path("runs") / spec.name : std::filesystem::path(args->out);
    options.resume = args->resume;
    options.report = !args->no_report;
    options.progress = !args->quiet;
    runners::MpiSession mpi(nullptr, nullptr);
    auto summary = runners::run_sweep(spec, options, mpi.active() ? MPI_COMM_WORLD : MPI_COMM_NULL);
    if (!summary.ok()) {
      if (mpi.rank() == 0) {
        std::cerr << "wbaudit run: " << summary.failed << " cell(s) failed; see `wbaudit status "
                  << options.out.string() << "`, then rerun with --resume\n";
      }
      throw ExitStatus{3};
    }
  });
}

}  // namespace wbaudit::cli
