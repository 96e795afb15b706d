// wbaudit run SPEC.toml [--out DIR] [--resume] [--jobs N]: the main job. Locally, whole cells run concurrently in
// worker processes of this executable; under mpirun the cells are spread over the ranks instead.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <iostream>

#include "cli/commands.hpp"
#include "runners/evaluate/sweep_outputs.hpp"
#include "runners/exec/executor.hpp"
#include "runners/exec/sweep_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "util/text.hpp"

namespace wbaudit::cli {
namespace {

// What `wbaudit run` does after its cells (on rank 0): when some target run is complete, writes summary.csv and the
// reports (runners/evaluate/sweep_outputs.hpp) and (with progress) prints the run's summary line and the outputs;
// otherwise says why there is no report yet.
void report_run(const runners::SweepStore& store, const runners::SweepSpec& spec, const runners::ExecSummary& summary,
                bool progress) {
  bool any_target_done = false;
  for (const auto& st : store.status()) {
    any_target_done = any_target_done || (st.cell->role == "target" && !st.needs_run());
  }
  const std::string line = "wbaudit run: " + std::to_string(summary.completed) + " run, " +
                           std::to_string(summary.skipped) + " already complete, " + std::to_string(summary.failed) +
                           " failed in " + util::format_duration(summary.wall_seconds);
  if (!any_target_done) {
    // E.g. `--cells 'reference/*'`: nothing to compare yet.
    if (progress) {
      std::cerr << line << "; no target run is complete, so no summary or report yet (`wbaudit report "
                << store.dir().string() << "` once one is)\n";
    }
    return;
  }
  const runners::SweepOutputs outputs = runners::write_sweep_outputs(store, spec);
  if (progress) {
    std::cerr << line << "\n";
    runners::print_outputs(std::cerr, outputs);
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  struct Args {
    std::string spec;
    std::string out;
    bool resume = false;
    bool extend = false;
    bool no_report = false;
    bool quiet = false;
    bool create_only = false;
    std::vector<std::string> cells;
    int jobs = 0;  // set only with --jobs
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run",
                                 "Run a sweep here: cells concurrently in worker processes (Kokkos threads inside "
                                 "each), spread over MPI ranks when started by mpirun; then write summary.csv and "
                                 "the report");
  cmd->add_option("spec", args->spec, "Sweep spec (TOML), e.g. examples/two_layer_grid.toml")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", args->out, "Sweep directory to create (default: runs/<sweep name>)");
  cmd->add_flag("--resume", args->resume,
                "Reopen an existing sweep directory and run only cells without a canonical complete attempt");
  cmd->add_flag("--extend", args->extend,
                "Extend an existing sweep directory by the cells a changed spec adds (more seeds, grid values or "
                "formats), journaled and signed; every existing cell keeps its identity and attempts, a spec that "
                "changes one is refused naming what changed; then run what needs running (docs/contracts.md)");
  cmd->add_option("--jobs,-j", args->jobs,
                  "Run N cells at a time, each in a worker process of this executable with max(1, T/N) of the T "
                  "Kokkos threads (default: N = T); 1: one cell after another in this process with all T threads. "
                  "Ignored under mpirun, where the ranks already run cells concurrently")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            try {
              if (std::stoll(value) >= 1) {
                return "";
              }
            } catch (const std::exception&) {
              return "not a number: \"" + value + "\"";
            }
            return "the number of worker processes must be at least 1, not " + value;
          },
          "N>=1"));
  cmd->add_option("--cells", args->cells,
                  "Run only the cells whose names match these shell patterns (comma-separated or repeated), e.g. "
                  "'reference/*'; the others stay pending for a later --resume")
      ->delimiter(',');
  cmd->add_flag("--create-only", args->create_only,
                "Create the sweep directory (frozen spec and executable) and run nothing, e.g. to register an "
                "analysis with `wbaudit register` before any outcome exists");
  cmd->add_flag("--no-report", args->no_report, "Skip summary.csv and the report");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress output");
  cmd->footer(
      "Examples:\n  wbaudit run examples/tiny.toml --out runs/tiny --threads 2\n"
      "  wbaudit run examples/tiny.toml --out runs/tiny-serial --threads 2 --jobs 1   # one cell at a time\n"
      "  mpirun -n 2 --bind-to none wbaudit run examples/tiny.toml --out runs/tiny-mpi --threads 1\n"
      "  wbaudit run examples/tiny_more_seeds.toml --out runs/tiny-serial --extend   # one more seed\n"
      "(examples/tiny.toml is a 4-target smoke test; the studies' specs are listed in the README)\n"
      "Threads: --threads T (or OMP_NUM_THREADS). Traces are bitwise identical for any T, N and rank count.");
  cmd->callback([args, cmd] {
    runners::SweepSpec spec = runners::load_sweep_spec(args->spec);
    runners::RunOptions options;
    options.out = args->out.empty() ? std::filesystem::path("runs") / spec.name : std::filesystem::path(args->out);
    options.resume = args->resume;
    options.extend = args->extend;
    options.progress = !args->quiet;
    options.only = args->cells;
    options.create_only = args->create_only;
    const int threads = std::max(1, Kokkos::DefaultHostExecutionSpace::concurrency());
    options.jobs = cmd->count("--jobs") > 0 ? args->jobs : threads;
    options.worker_threads = std::max(1, threads / options.jobs);
    runners::MpiSession mpi(nullptr, nullptr);
    if (mpi.active() && cmd->count("--jobs") > 0 && mpi.rank() == 0 && !args->quiet) {
      std::cerr << "wbaudit run: --jobs is ignored under mpirun (every rank runs whole cells already)\n";
    }
    auto summary = runners::run_sweep(spec, options, mpi.active() ? MPI_COMM_WORLD : MPI_COMM_NULL);
    if (!args->no_report && !args->create_only && mpi.rank() == 0) {
      report_run(runners::SweepStore::open(options.out), spec, summary, options.progress);
    }
    if (!summary.ok()) {
      if (mpi.rank() == 0) {
        std::cerr << "wbaudit run: " << summary.failed << " cell(s) failed; see `wbaudit status "
                  << options.out.string() << "`, then rerun with --resume\n";
      }
      throw ExitStatus{3};
    }
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(10, add_run_command);
}  // namespace

}  // namespace wbaudit::cli
