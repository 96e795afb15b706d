// wbaudit worker DIR: internal; one worker process of `wbaudit run --jobs N` (runners/exec/local_workers.hpp). Reads
// cell ids on stdin, runs each into a fresh attempt of the sweep DIR with the simulator, answers one JSON line per
// event on stdout, and exits when stdin is closed. Its Kokkos threads come from --kokkos-threads, as for any
// subcommand.
#include "cli/commands.hpp"
#include "runners/exec/local_workers.hpp"
#include "runners/exec/sweep_run.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {

void add_worker_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("worker", "Internal: a worker process of `wbaudit run --jobs N`");
  cmd->group("");  // hidden from --help
  cmd->add_option("dir", *dir, "Sweep directory")->required()->check(CLI::ExistingDirectory);
  cmd->callback([dir] {
    const auto store = runners::SweepStore::open(*dir);
    if (!runners::serve_cells(store, runners::simulator_cell_fn())) {
      throw ExitStatus{1};  // the error went to the parent, which reports it
    }
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(110, add_worker_command);
}  // namespace

}  // namespace wbaudit::cli
