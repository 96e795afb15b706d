// wbaudit submit SPEC --out DIR: a SLURM job array over the sweep's cells (or one MPI job) plus a report job that
// depends on it (afterany). Every job runs the sweep's frozen executable copy, DIR/bin/wbaudit.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "runners/exec/slurm/submit.hpp"
#include "runners/exec/sweep_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {
namespace {

// "; auto: tasks of at most about 9.5 min estimated (target 10 min)" for an automatic plan, "" otherwise.
std::string auto_note(const runners::slurm::TaskPlan& plan) {
  if (!plan.automatic) {
    return "";
  }
  double longest = 0;
  for (const double s : plan.task_seconds) {
    longest = std::max(longest, s);
  }
  auto shown = [](double seconds) {
    std::ostringstream out;
    out << std::setprecision(2);
    if (seconds < 60) {
      out << seconds << " s";
    } else {
      out << seconds / 60 << " min";
    }
    return out.str();
  };
  return " (--cells-per-task auto: the longest task estimated at " + shown(longest) + ", tasks filled up to " +
         shown(plan.target_seconds) + ")";
}

struct SubmitArgs {
  std::string spec;
  std::string out;
  bool resume = false;
  bool dry_run = false;
  std::string cells_per_task = "auto";
  runners::slurm::SlurmOptions slurm;
};

// The validator of --cells-per-task: "" for auto or a positive whole number, else why not.
std::string cells_per_task_problem(const std::string& v) {
  if (v == "auto") {
    return std::string();
  }
  try {
    std::size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size() && n >= 1) {
      return std::string();
    }
  } catch (const std::exception&) {
  }
  return "\"" + v + "\" is neither auto nor a positive whole number";
}

// The options that go into the job scripts (runners/exec/slurm/submit.hpp SlurmOptions), and --cells-per-task.
void add_slurm_options(CLI::App* cmd, SubmitArgs& args) {
  auto& o = args.slurm;
  cmd->add_option("--partition,-p", o.partition, "Slurm partition");
  cmd->add_option("--time,-t", o.time,
                  "Time limit per array task in sbatch's formats (minutes, h:m:s, d-h, d-h:m:s; e.g. 01:00:00), above "
                  "--signal-seconds");
  cmd->add_option("--account,-A", o.account, "Slurm account");
  cmd->add_option("--qos", o.qos, "Slurm quality of service");
  cmd->add_option("--cpus-per-task,-c", o.cpus_per_task, "CPUs (Kokkos threads) per task")->check(CLI::PositiveNumber);
  cmd->add_option("--mem", o.mem, "Memory per node (e.g. 4G)");
  cmd->add_option("--array-throttle", o.array_throttle,
                  "At most this many array tasks at once (--array=0-N%K; 0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--cells-per-task", args.cells_per_task,
                  "Cells per array task, or auto: consecutive cells packed into tasks of about --task-minutes of "
                  "estimated run time (at most half of --time after --signal-seconds), estimated per cell from its "
                  "model shape, steps, projections, validation and replay with per-step costs measured at one "
                  "thread (docs/slurm.md); raised when needed to respect the cluster's MaxArraySize")
      ->check(cells_per_task_problem)
      ->capture_default_str();
  cmd->add_option("--task-minutes", o.task_minutes,
                  "With --cells-per-task auto: the estimated run time to fill each array task with")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-requeues", o.max_requeues,
                  "Requeues of a task that reaches its time limit (SLURM_RESTART_COUNT) before it gives up: the cell "
                  "it was running is marked failed, naming the count, and `status` shows it")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--mpi-ranks", o.mpi_ranks, "Run the whole sweep as one MPI job with this many ranks instead")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--launcher", o.launcher,
                  "With --mpi-ranks: how the job starts its ranks, mpirun (Open MPI) or srun (Slurm; its MPI plugin "
                  "is the cluster's MpiDefault, or SLURM_MPI_TYPE in the submitting environment, e.g. pmix)")
      ->check(CLI::IsMember({"mpirun", "srun"}))
      ->capture_default_str();
  cmd->add_option("--signal-seconds", o.signal_seconds,
                  "Seconds before the time limit at which a task stops and requeues itself (USR1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--job-name", o.job_name, "Job name");
  cmd->add_option("--sbatch", o.sbatch_options,
                  "Another sbatch option for the cells job, as --name=value (repeatable), e.g. "
                  "--sbatch=--constraint=avx2 --sbatch=--exclusive --sbatch=--mail-type=END (wbaudit runs on CPUs: "
                  "no --gres is needed)");
  cmd->add_option("--report-command", o.report_command, "wbaudit subcommand the report job runs on the directory");
}

// --dry-run: the plan and the scripts submit would write, for the cells that need a run (all of a new sweep's).
void print_dry_run(const SubmitArgs& args, const std::filesystem::path& out,
                   const std::vector<runners::StoredCell>& cells) {
  std::vector<std::string> ids;
  std::vector<nlohmann::json> configs;
  runners::slurm::ScriptIdentity identity;
  if (std::filesystem::exists(out / "sweep.json")) {
    const auto store = runners::SweepStore::open(out);
    identity = runners::slurm::script_identity(store);
    for (const auto& s : store.status()) {
      if (s.needs_run()) {
        ids.push_back(s.cell->id);
        configs.push_back(s.cell->config);
      }
    }
  } else {
    identity = runners::slurm::new_sweep_script_identity();
    for (const auto& c : cells) {
      ids.push_back(runners::cell_id(c.config));
      configs.push_back(c.config);
    }
  }
  const auto plan = runners::slurm::plan_submission(
      std::filesystem::absolute(out), ids, configs, args.slurm,
      args.slurm.mpi_ranks > 0 ? std::nullopt : runners::slurm::query_max_array_size(), identity);
  std::cout << "# dry run: " << ids.size() << " cells in " << plan.plan.tasks.size() << " task(s) of up to "
            << plan.plan.cells_per_task << " cells" << auto_note(plan.plan) << "\n";
  if (!std::filesystem::exists(out / "sweep.json")) {
    std::cout << "# the sweep does not exist yet: its key's file name is the sweep uuid that submit chooses when "
                 "it creates the sweep (<sweep uuid> below)\n";
  }
  if (!plan.cells_script.empty()) {
    std::cout << "# ---- cells.sbatch ----\n" << plan.cells_script;
  }
  std::cout << "# ---- report.sbatch (sbatch --dependency=afterany:<cells job>) ----\n" << plan.report_script;
}

// What a user should hear before submitting (runners::slurm::submission_warnings), on stderr, dry run or not.
void warn_before_submitting(const SubmitArgs& args, const std::filesystem::path& out,
                            const std::vector<runners::StoredCell>& cells) {
  std::vector<std::string> names;
  std::vector<nlohmann::json> configs;
  for (const auto& c : cells) {
    names.push_back(c.name);
    configs.push_back(c.config);
  }
  for (const auto& w : runners::slurm::submission_warnings(out, names, configs, args.slurm)) {
    std::cerr << "wbaudit submit: warning: " << w << "\n";
  }
}

// What was there before this submit: a sweep (reopened with --resume), or at least the directory.
struct Before {
  bool sweep = false;
  bool directory = false;
};

// Submits; when that fails before sbatch accepted any job, a sweep this invocation created is removed again with its
// key (a retry then needs no --resume), and one that existed before is left as it was; either way the error says so.
// A cells job that sbatch accepted (PartlySubmitted) keeps everything.
runners::slurm::Submission submit_or_roll_back(runners::LockedSweep& locked, const SubmitArgs& args,
                                               const Before& before) {
  try {
    return runners::slurm::submit(locked.store, args.slurm);
  } catch (const runners::slurm::PartlySubmitted&) {
    throw;
  } catch (const std::exception& e) {
    const std::string dir = locked.store.dir().string();
    if (before.sweep) {
      throw std::runtime_error(std::string(e.what()) + "\nnothing was submitted; the sweep " + dir +
                               " existed before this submit and is left as it was: fix the problem and run the same "
                               "command again (with --resume)");
    }
    std::string removed;
    for (const auto& path : runners::remove_created_sweep(locked, before.directory)) {
      removed += "\n  " + path;
    }
    throw std::runtime_error(std::string(e.what()) +
                             "\nnothing was submitted; this submit created the sweep and removed what it made:" +
                             removed + "\nfix the problem and run the same command again (no --resume needed)");
  }
}

void submit_sweep(SubmitArgs& args) {
  if (args.slurm.launcher != "mpirun" && args.slurm.mpi_ranks == 0) {
    throw std::invalid_argument("--launcher " + args.slurm.launcher +
                                " needs --mpi-ranks N (an array task runs one process, started by sbatch itself)");
  }
  args.slurm.cells_per_task = args.cells_per_task == "auto" ? 0 : std::stoi(args.cells_per_task);
  const runners::SweepSpec spec = runners::load_sweep_spec(args.spec);
  const std::filesystem::path out =
      args.out.empty() ? std::filesystem::path("runs") / spec.name : std::filesystem::path(args.out);
  auto cells = runners::stored_cells(spec);
  if (args.slurm.job_name == "wbaudit") {
    args.slurm.job_name = "wbaudit-" + spec.name;
  }
  runners::check_sweep_directory(out, spec, args.resume);
  warn_before_submitting(args, out, cells);
  if (args.dry_run) {
    print_dry_run(args, out, cells);
    return;
  }
  const Before before{std::filesystem::exists(out / "sweep.json"),
                      std::filesystem::exists(std::filesystem::symlink_status(out))};
  auto locked = runners::create_locked(spec, out, args.resume);
  const auto s = submit_or_roll_back(locked, args, before);
  if (s.cells_job_id.empty()) {
    std::cout << "nothing to run: every cell is canonical and complete\n";
  } else {
    std::cout << "cells job  " << s.cells_job_id << " ("
              << (args.slurm.mpi_ranks > 0
                      ? "one MPI job, " + std::to_string(args.slurm.mpi_ranks) + " ranks"
                      : "array of " + std::to_string(s.plan.tasks.size()) + " tasks, " +
                            (s.plan.automatic ? "up to " : "") + std::to_string(s.plan.cells_per_task) + " cells each" +
                            auto_note(s.plan))
              << ", " << s.cell_ids.size() << " cells)\n";
  }
  std::cout << "report job " << s.report_job_id << (s.cells_job_id.empty() ? "" : " (afterany:" + s.cells_job_id + ")")
            << "\n"
            << "scripts    " << s.dir.string() << "\n";
}

}  // namespace

void add_submit_command(CLI::App& app) {
  auto args = std::make_shared<SubmitArgs>();
  auto* cmd = app.add_subcommand("submit",
                                 "Submit a sweep to SLURM: a job array (cells packed into tasks by estimated run "
                                 "time, docs/slurm.md) and a report job that runs after it; prints the job ids");
  cmd->add_option("spec", args->spec, "Sweep spec (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", args->out, "Sweep directory (default: runs/<sweep name>)");
  cmd->add_flag("--resume", args->resume,
                "Reuse an existing sweep directory (same spec) and submit only cells without a canonical complete "
                "attempt");
  cmd->add_flag("--dry-run", args->dry_run, "Print the scripts; write and submit nothing");
  add_slurm_options(cmd, *args);
  cmd->footer(
      "Examples:\n  wbaudit submit examples/tiny.toml --out runs/tiny-slurm --partition short "
      "--time 00:30:00 --cells-per-task 4\n"
      "  wbaudit submit examples/tiny.toml --out runs/tiny-auto --time 01:00:00 --array-throttle 8 --dry-run   # auto "
      "packing\n"
      "  wbaudit submit examples/tiny.toml --out runs/tiny-slurm --resume   # rerun what is missing\n"
      "  wbaudit submit examples/tiny.toml --out runs/tiny-mpi8 --mpi-ranks 8 --dry-run\n"
      "  wbaudit submit examples/tiny.toml --out runs/tiny-mpi8 --mpi-ranks 8 --launcher srun --dry-run\n"
      "A submit that fails before sbatch accepted a job removes the sweep directory (and key) it created.");
  cmd->callback([args] { submit_sweep(*args); });
}

namespace {
[[maybe_unused]] const bool registered = register_command(30, add_submit_command);
}  // namespace

}  // namespace wbaudit::cli
