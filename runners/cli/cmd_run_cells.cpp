// wbaudit run-cells DIR --tasks FILE [--task-index N]: internal; what the sbatch scripts run. Runs one array task's
// chunk of cells (or all of them, spread over MPI ranks under mpirun), skipping cells that are already canonical
// and complete, so a requeued or resubmitted task only does what is missing.
#include <fstream>
#include <iostream>

#include "runners/cli/commands.hpp"
#include "runners/executor.hpp"
#include "runners/store.hpp"
#include "runners/sweep_run.hpp"

namespace wbaudit::cli {

void add_run_cells_command(CLI::App& app) {
  struct Args {
    std::string dir;
    std::string tasks;
    int task_index = -1;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run-cells", "Internal: run one task's cells of a submitted sweep");
  cmd->group("");  // hidden from --help
  cmd->add_option("dir", args->dir, "Sweep directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--tasks", args->tasks, "tasks.json of the submission")->required()->check(CLI::ExistingFile);
  cmd->add_option("--task-index", args->task_index, "Array task index (default: every task)");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress output");
  cmd->callback([args] {
    const auto store = runners::SweepStore::open(args->dir);
    nlohmann::json tasks;
    try {
      std::ifstream in(args->tasks);
      tasks = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(args->tasks + ": corrupt task list: " + e.what());
    }
    if (tasks.at("sweep_spec_sha256").get<std::string>() != store.spec_sha256()) {
      throw std::runtime_error(args->tasks + " belongs to another sweep (spec hash differs)");
    }
    const auto& list = tasks.at("tasks");
    std::vector<std::string> ids;
    if (args->task_index >= 0) {
      if (static_cast<std::size_t>(args->task_index) >= list.size()) {
        throw std::runtime_error(args->tasks + ": task index " + std::to_string(args->task_index) + " out of range (" +
                                 std::to_string(list.size()) + " tasks)");
      }
      ids = list[static_cast<std::size_t>(args->task_index)].get<std::vector<std::string>>();
    } else {
      for (const auto& t : list) {
        for (const auto& id : t) {
          ids.push_back(id.get<std::string>());
        }
      }
    }
    for (const auto& problem : store.check_frozen_inputs()) {
      std::cerr << "wbaudit run-cells: warning: " << problem << "\n";
    }
    runners::MpiSession mpi(nullptr, nullptr);
    runners::ExecOptions opts;
    opts.resume = true;
    opts.comm = mpi.active() ? MPI_COMM_WORLD : MPI_COMM_NULL;
    if (!args->quiet) {
      opts.progress = [](const runners::ProgressEvent& e) {
        if (e.kind == runners::ProgressEvent::Kind::started) {
          return;
        }
        std::cerr << "[rank " << e.rank << "] "
                  << (e.kind == runners::ProgressEvent::Kind::completed ? "done   " : "FAILED ") << e.name << " ("
                  << e.seconds << " s)" << (e.message.empty() ? "" : ": " + e.message) << "\n";
      };
    }
    const auto summary =
        runners::execute_sweep(store, runners::tasks_of(store, ids), runners::simulator_cell_fn(), opts);
    if (mpi.rank() == 0) {
      std::cerr << "wbaudit run-cells: " << summary.completed << " run, " << summary.skipped << " already complete, "
                << summary.failed << " failed\n";
    }
    if (!summary.ok()) {
      throw ExitStatus{3};
    }
  });
}

}  // namespace wbaudit::cli
