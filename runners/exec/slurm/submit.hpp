#pragma once
// Submitting a sweep to Slurm and asking Slurm about it. A submission lives in DIR/slurm/submit-<n>/:
// tasks.json (cell ids per array task), cells.sbatch, report.sbatch, logs/, and jobs.json (the job ids, written
// after sbatch accepted them). Completion is never taken from the scheduler: `status` only adds its view.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runners/exec/slurm/script.hpp"
#include "runners/store/store.hpp"
#include "util/process.hpp"

namespace wbaudit::runners::slurm {

class SlurmError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Running sbatch, scontrol, squeue, sacct: util::run_command (argv straight to posix_spawnp, no shell).
using util::CommandResult;
using util::run_command;

// The estimated run time of one cell at one thread, in seconds, from its configuration alone (--cells-per-task
// auto): steps x a per-step cost from the model's shape, plus validation and replay passes and a fixed 0.05 s per
// cell (identity, manifest, trace write). The per-step constants were measured on this project's 2-core machine at
// one thread (docs/slurm.md): two-layer 30 us + 0.3 ns per multiply-add FLOP of the forward and backward pass
// (teacher included) + 5 us + 10 ns per coordinate per projected format and policy; decoder 0.02 ns per FLOP (it runs
// on BLAS) (6 x tokens x matrix parameters + attention) + 50 ns per coordinate per projection. Expect it within 2-3x
// elsewhere. A configuration that does not parse costs 60 s (its own validation names the problem).
double estimate_cell_seconds(const nlohmann::json& cell_config);
// The same for a task run with `cpus` threads: the threads are taken to share the work at half efficiency
// (speed-up 1 + (cpus - 1) / 2).
double estimate_cell_seconds(const nlohmann::json& cell_config, int cpus);

// MaxArraySize from `scontrol show config`, or nullopt when scontrol is unavailable or does not say.
std::optional<long> query_max_array_size();

// What a user should hear before a submission (`wbaudit submit` prints them on stderr, dry run or not): no --time
// (the partition's default limit applies, unknown here); cells whose estimated time (estimate_cell_seconds at
// --cpus-per-task) exceeds --time, naming the longest; a sweep directory on node-local storage (under /tmp, /var/tmp,
// /dev/shm or $TMPDIR, or on a tmpfs), which the compute nodes may not see. `names` and `configs` are aligned.
std::vector<std::string> submission_warnings(const std::filesystem::path& sweep_dir,
                                             const std::vector<std::string>& names,
                                             const std::vector<nlohmann::json>& configs, const SlurmOptions& options);

struct Submission {
  std::filesystem::path dir;  // DIR/slurm/submit-<n> (empty for a dry run)
  TaskPlan plan;
  std::vector<std::string> cell_ids;  // the cells submitted (those without a canonical complete attempt)
  std::string cells_script;
  std::string report_script;
  std::string cells_job_id;  // empty for a dry run or when nothing needed running
  std::string report_job_id;
};

// What the scripts name besides the sweep: its signing key and its frozen binary (ScriptPaths::key_file, frozen).
struct ScriptIdentity {
  std::filesystem::path key_file;
  std::vector<std::pair<std::string, std::string>> frozen;
};
// From an existing sweep's record.
ScriptIdentity script_identity(const SweepStore& store);
// For a sweep the submission will create: this executable and its libraries, and the key location with a stand-in
// for the sweep uuid chosen at creation ("<sweep uuid>"; exact when WBAUDIT_KEY_FILE names the key).
ScriptIdentity new_sweep_script_identity();
// DIR/slurm/submit-<n> of the next submission (the lowest n not taken), without creating it.
std::filesystem::path next_submission_path(const std::filesystem::path& sweep_dir);

// Plans and renders a submission for the cells of `cell_ids` (already filtered by the caller) without writing or
// submitting anything: the dry run. The scripts are rendered exactly as submit() renders them for the same sweep
// (same submission directory, key and frozen binary).
// configs: each cell's configuration (for the cost estimate of --cells-per-task auto), parallel to cell_ids.
Submission plan_submission(const std::filesystem::path& sweep_dir, const std::vector<std::string>& cell_ids,
                           const std::vector<nlohmann::json>& configs, const SlurmOptions& options,
                           std::optional<long> max_array_size, const ScriptIdentity& identity);

// The task plan of a submission: one task of every cell for --mpi-ranks, fixed chunks for --cells-per-task N, and
// cells packed by estimated cost (estimate_cell_seconds at --cpus-per-task) for auto (cells_per_task 0).
TaskPlan plan_for(const std::vector<std::string>& cell_ids, const std::vector<nlohmann::json>& configs,
                  const SlurmOptions& options, std::optional<long> max_array_size);

// A submission that failed after sbatch accepted its cells job (the report job was refused): the job is queued and
// recorded in submission_dir/jobs.json, so nothing may be rolled back.
class PartlySubmitted : public SlurmError {
 public:
  PartlySubmitted(const std::string& what, std::string cells_job, std::filesystem::path submission_dir)
      : SlurmError(what), cells_job_id(std::move(cells_job)), dir(std::move(submission_dir)) {}
  std::string cells_job_id;
  std::filesystem::path dir;
};

// Writes the submission files and submits them with sbatch (cells first, then the report job with
// --dependency=afterany:<cells job>). Only cells without a canonical complete attempt are submitted; when there
// are none, only the report job is submitted. Throws SlurmError with sbatch's message; when sbatch refused the first
// job, nothing was submitted and DIR/slurm/submit-<n> is removed again; PartlySubmitted when it accepted the cells
// job but refused the report job.
Submission submit(const SweepStore& store, const SlurmOptions& options);

// Scheduler view of the sweep's submissions: per job id, the squeue state (and reason), or the sacct state when
// accounting exists. Never throws for a missing scheduler: {"available": false, "message": ...}.
nlohmann::json scheduler_view(const std::filesystem::path& sweep_dir);

}  // namespace wbaudit::runners::slurm
