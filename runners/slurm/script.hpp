#pragma once
// Rendering of sbatch scripts for a sweep: a job array whose tasks each run a chunk of cells (or one MPI job that
// runs them all), and a report job submitted with --dependency=afterany on it. Pure text: no file or scheduler
// access here, so the scripts are golden-tested.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace wbaudit::runners::slurm {

struct SlurmOptions {
  std::string job_name = "wbaudit";
  std::string partition;  // empty: the cluster default (no #SBATCH line)
  std::string time;       // e.g. "01:00:00"
  std::string account;
  std::string qos;
  std::string mem;  // e.g. "4G"
  int cpus_per_task = 1;
  int array_throttle = 0;    // >0: at most this many array tasks at once (--array=0-N%K)
  int cells_per_task = 1;    // cells per array task (raised to respect MaxArraySize)
  int mpi_ranks = 0;         // >0: one MPI job with this many ranks instead of an array
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
  int cells_per_task = 1;
  std::vector<std::vector<std::string>> tasks;  // cell ids per task index
};
TaskPlan plan_tasks(const std::vector<std::string>& cell_ids, int cells_per_task, std::optional<long> max_array_size);

// MaxArraySize from the output of `scontrol show config`, if present.
std::optional<long> parse_max_array_size(const std::string& scontrol_show_config);

// The paths a submission uses; logs go to log_dir as %A_%a.out/.err (array) or %j.out/.err.
struct ScriptPaths {
  std::filesystem::path sweep_dir;
  std::filesystem::path tasks_file;
  std::filesystem::path log_dir;
  // The sweep's signing key (runners/journal.hpp) as seen from the submitting host: exported as WBAUDIT_KEY_FILE
  // (unless the job's environment already sets it) and passed to every MPI rank. Empty: not exported.
  std::filesystem::path key_file;
};

std::string render_array_script(const ScriptPaths& paths, std::size_t task_count, const SlurmOptions& options);
std::string render_mpi_script(const ScriptPaths& paths, const SlurmOptions& options);
std::string render_report_script(const ScriptPaths& paths, const SlurmOptions& options);

// POSIX shell single-quoting.
std::string shell_quote(const std::string& word);

// A Slurm time limit in seconds, in sbatch's formats: "minutes", "minutes:seconds", "hours:minutes:seconds",
// "days-hours", "days-hours:minutes", "days-hours:minutes:seconds" (seconds and minutes < 60 and hours < 24 wherever
// a larger unit precedes them), or "UNLIMITED" / "INFINITE" (LONG_MAX). nullopt when malformed or zero.
std::optional<long> slurm_time_seconds(const std::string& text);

}  // namespace wbaudit::runners::slurm
