#pragma once
// Rendering of sbatch scripts for a sweep: a job array whose tasks each run a chunk of cells (or one MPI job that
// runs them all), and a report job submitted with --dependency=afterany on it. Pure text: no file or scheduler
// access here, so the scripts are golden-tested.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "util/shell.hpp"

namespace wbaudit::runners::slurm {

// Defaults of `wbaudit submit` (docs/slurm.md): at most 32 array tasks at once, tasks filled with about 10 minutes of
// estimated work, and a task that reaches its time limit requeued at most 3 times.
inline constexpr int kDefaultArrayThrottle = 32;
inline constexpr double kDefaultTaskMinutes = 10;
inline constexpr int kDefaultMaxRequeues = 3;

struct SlurmOptions {
  std::string job_name = "wbaudit";
  std::string partition;  // empty: the cluster default (no #SBATCH line)
  std::string time;       // e.g. "01:00:00"
  std::string account;
  std::string qos;
  std::string mem;  // e.g. "4G"
  int cpus_per_task = 1;
  int array_throttle = kDefaultArrayThrottle;  // >0: at most this many array tasks at once (--array=0-N%K)
  int cells_per_task = 0;  // cells per array task (raised to respect MaxArraySize); 0: auto, packed by estimated cost
  double task_minutes = kDefaultTaskMinutes;  // auto: the estimated run time to fill each array task with
  int max_requeues = kDefaultMaxRequeues;     // requeues at the time limit before a task gives up (SLURM_RESTART_COUNT)
  int mpi_ranks = 0;                          // >0: one MPI job with this many ranks instead of an array
  // How the MPI job starts its ranks: "mpirun" (Open MPI's, -x WBAUDIT_KEY_FILE) or "srun" (Slurm's own launcher,
  // --export=ALL,WBAUDIT_KEY_FILE; the MPI plugin is the cluster's MpiDefault or SLURM_MPI_TYPE, e.g. pmix).
  std::string launcher = "mpirun";
  int signal_seconds = 120;  // USR1 this long before the time limit: stop, requeue; the requeued task resumes
  std::string report_command = "evaluate";  // wbaudit subcommand the report job runs on the sweep directory
  // Further sbatch options for the cells job(s), one "#SBATCH" line each, e.g. "--gres=gpu:1", "--constraint=avx2",
  // "--exclusive", "--nodes=1", "--mail-type=END"; not the report job. Those wbaudit sets itself, or has its own
  // option for, are refused.
  std::vector<std::string> sbatch_options;
};

// Cells chunked into array tasks, in the given order. When ceil(cells / cells_per_task) exceeds max_array_size
// (Slurm's MaxArraySize: indices 0..max-1), cells_per_task is raised to ceil(cells / max_array_size).
struct TaskPlan {
  int cells_per_task = 1;                       // the most cells in one task
  std::vector<std::vector<std::string>> tasks;  // cell ids per task index
  bool automatic = false;                       // packed by estimated cost (--cells-per-task auto)
  double target_seconds = 0;                    // automatic: the estimated seconds each task was filled up to
  std::vector<double> task_seconds;             // automatic: estimated seconds per task
};
TaskPlan plan_tasks(const std::vector<std::string>& cell_ids, int cells_per_task, std::optional<long> max_array_size);

// --cells-per-task auto: consecutive cells (in the given order) packed into tasks whose estimated seconds sum to at
// most target_seconds; a cell estimated above the target gets a task of its own. When that makes more tasks than
// max_array_size, the bound is raised to the smallest one whose packing fits (greedy packing under a bound gives the
// fewest consecutive tasks for that bound, so the bound is found by bisection).
TaskPlan plan_tasks_by_cost(const std::vector<std::string>& cell_ids, const std::vector<double>& cell_seconds,
                            double target_seconds, std::optional<long> max_array_size);

// The estimated seconds an automatic task is filled up to: task_minutes, but at most half of what --time leaves
// after --signal-seconds (room for an estimate that is 2x short before the task requeues).
double auto_task_seconds(const SlurmOptions& options);

// MaxArraySize from the output of `scontrol show config`, if present.
std::optional<long> parse_max_array_size(const std::string& scontrol_show_config);

// The paths a submission uses; logs go to log_dir as %A_%a.out/.err (array) or %j.out/.err.
struct ScriptPaths {
  std::filesystem::path sweep_dir;
  std::filesystem::path tasks_file;
  std::filesystem::path log_dir;
  // The sweep's signing key (runners/store/journal.hpp) as seen from the submitting host: exported as WBAUDIT_KEY_FILE
  // (unless the job's environment already sets it) and passed to every MPI rank. Empty: not exported.
  std::filesystem::path key_file;
  // The frozen binary's files as registered in sweep.json (path relative to DIR/bin: "wbaudit", "lib/<name>"; and
  // SHA-256). When not empty, every script first checks that DIR/bin holds exactly these files, no links, with these
  // hashes, and exits 1 otherwise, before the key is exported or anything from DIR/bin runs.
  std::vector<std::pair<std::string, std::string>> frozen;
};

std::string render_array_script(const ScriptPaths& paths, std::size_t task_count, const SlurmOptions& options);
std::string render_mpi_script(const ScriptPaths& paths, const SlurmOptions& options);
std::string render_report_script(const ScriptPaths& paths, const SlurmOptions& options);

// POSIX shell single-quoting (util/shell.hpp), the one quoter of every script.
using util::shell_quote;

// A Slurm time limit in seconds, in sbatch's formats: "minutes", "minutes:seconds", "hours:minutes:seconds",
// "days-hours", "days-hours:minutes", "days-hours:minutes:seconds" (seconds and minutes < 60 and hours < 24 wherever
// a larger unit precedes them), or "UNLIMITED" / "INFINITE" (LONG_MAX). nullopt when malformed or zero.
std::optional<long> slurm_time_seconds(const std::string& text);

}  // namespace wbaudit::runners::slurm
