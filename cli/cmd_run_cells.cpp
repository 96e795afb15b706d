// wbaudit run-cells DIR --tasks FILE [--task-index N]: internal; what the sbatch scripts run. Runs one array task's
// chunk of cells (or all of them, spread over MPI ranks under mpirun), skipping cells that are already canonical
// and complete, so a requeued or resubmitted task only does what is missing.
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "runners/exec/executor.hpp"
#include "runners/exec/sweep_run.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {
namespace {

// A task stopped at its time limit once more after `cap` requeues: the attempts it left running (its own job's, or
// those whose process is gone) are marked failed with the reason, so that `status` shows it; the cells it never
// started stay pending.
void give_up(const runners::SweepStore& store, const std::vector<std::string>& ids, int cap,
             const std::string& time_limit) {
  const char* restarts_env = std::getenv("SLURM_RESTART_COUNT");
  const char* job_env = std::getenv("SLURM_JOB_ID");
  const std::string restarts = restarts_env && *restarts_env ? restarts_env : "0";
  const std::string job = job_env ? job_env : "";
  const std::string reason =
      "stopped at the time limit" + (time_limit.empty() ? std::string() : " (--time " + time_limit + ")") + " after " +
      restarts + " requeue(s) (SLURM_RESTART_COUNT=" + restarts + ", the cap of wbaudit submit --max-requeues " +
      std::to_string(cap) +
      "): the cell does not finish within the task's time limit; resubmit with a longer --time (wbaudit submit "
      "--resume --time ...)";
  std::size_t marked = 0, pending = 0;
  for (const auto& id : ids) {
    const runners::CellStatus status = store.cell_status(id);
    if (status.state == runners::CellState::done) {
      continue;
    }
    // The newest attempt is the one this task was running when it stopped (older ones were stopped by the
    // requeues before it and say so: "interrupted").
    bool ours = false;
    if (!status.attempts.empty()) {
      const auto& attempt = status.attempts.back();
      const auto slurm = attempt.manifest.is_object() ? attempt.manifest.value("slurm", nlohmann::json::object())
                                                      : nlohmann::json::object();
      const bool same_job = !job.empty() && slurm.value("job_id", std::string()) == job;
      const bool gone = !attempt.reasons.empty() && attempt.reasons.front().rfind("interrupted", 0) == 0;
      if (attempt.manifest_valid && attempt.status == runners::AttemptStatus::running && (same_job || gone)) {
        (void)store.fail_abandoned_attempt(id, attempt.uuid, reason);
        std::cerr << "wbaudit run-cells: cell " << status.cell->name << " (" << id << ") failed: " << reason << "\n";
        ours = true;
        ++marked;
      }
    }
    if (!ours && status.state == runners::CellState::pending) {
      ++pending;
    }
  }
  std::cerr << "wbaudit run-cells: gave up after " << restarts << " requeue(s) (cap " << cap << "): " << marked
            << " cell(s) marked failed, " << pending << " not started (still pending; wbaudit submit --resume)\n";
}

}  // namespace

void add_run_cells_command(CLI::App& app) {
  struct Args {
    std::string dir;
    std::string tasks;
    int task_index = -1;
    bool quiet = false;
    int give_up = -1;
    std::string time_limit;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run-cells", "Internal: run one task's cells of a submitted sweep");
  cmd->group("");  // hidden from --help
  cmd->add_option("dir", args->dir, "Sweep directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--tasks", args->tasks, "tasks.json of the submission")->required()->check(CLI::ExistingFile);
  cmd->add_option("--task-index", args->task_index, "Array task index (default: every task)");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress output");
  cmd->add_option("--give-up", args->give_up,
                  "The task reached its time limit after this many requeues (the cap): mark the attempts it was "
                  "running failed, naming the count, and run nothing")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--time-limit", args->time_limit, "With --give-up: the task's --time, for the message");
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
    if (args->give_up >= 0) {
      give_up(store, ids, args->give_up, args->time_limit);
      throw ExitStatus{3};
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

namespace {
[[maybe_unused]] const bool registered = register_command(70, add_run_cells_command);
}  // namespace

}  // namespace wbaudit::cli
