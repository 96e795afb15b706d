#include "runners/exec/slurm/script.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace wbaudit::runners::slurm {

std::optional<long> slurm_time_seconds(const std::string& text) {
  if (text == "UNLIMITED" || text == "INFINITE") {
    return LONG_MAX;
  }
  static const std::regex kForm(R"(^(?:(\d{1,5})-)?(\d{1,9})(?::(\d{1,2}))?(?::(\d{1,2}))?$)");
  std::smatch m;
  if (!std::regex_match(text, m, kForm)) {
    return std::nullopt;
  }
  auto num = [&](int i) { return m[i].matched ? std::stol(m[i].str()) : 0L; };
  const bool days = m[1].matched;
  long seconds = 0;
  if (days) {  // days-hours[:minutes[:seconds]]
    if (num(2) >= 24 || num(3) >= 60 || num(4) >= 60) {
      return std::nullopt;
    }
    seconds = ((num(1) * 24 + num(2)) * 60 + num(3)) * 60 + num(4);
  } else if (m[4].matched) {  // hours:minutes:seconds
    if (num(3) >= 60 || num(4) >= 60) {
      return std::nullopt;
    }
    seconds = (num(2) * 60 + num(3)) * 60 + num(4);
  } else if (m[3].matched) {  // minutes:seconds
    if (num(3) >= 60) {
      return std::nullopt;
    }
    seconds = num(2) * 60 + num(3);
  } else {  // minutes
    seconds = num(2) * 60;
  }
  if (seconds <= 0) {
    return std::nullopt;
  }
  return seconds;
}

namespace {

void common_directives(std::ostringstream& s, const SlurmOptions& o) {
  if (!o.partition.empty()) {
    s << "#SBATCH --partition=" << o.partition << "\n";
  }
  if (!o.time.empty()) {
    s << "#SBATCH --time=" << o.time << "\n";
  }
  if (!o.account.empty()) {
    s << "#SBATCH --account=" << o.account << "\n";
  }
  if (!o.qos.empty()) {
    s << "#SBATCH --qos=" << o.qos << "\n";
  }
  if (!o.mem.empty()) {
    s << "#SBATCH --mem=" << o.mem << "\n";
  }
}

void check_options(const SlurmOptions& o) {
  if (o.cpus_per_task < 1) {
    throw std::invalid_argument("--cpus-per-task must be >= 1, not " + std::to_string(o.cpus_per_task));
  }
  if (o.array_throttle < 0) {
    throw std::invalid_argument("--array-throttle must be >= 0, not " + std::to_string(o.array_throttle));
  }
  if (o.max_requeues < 0) {
    throw std::invalid_argument("--max-requeues must be >= 0, not " + std::to_string(o.max_requeues));
  }
  if (o.launcher != "mpirun" && o.launcher != "srun") {
    throw std::invalid_argument("--launcher \"" + o.launcher + "\" is neither mpirun nor srun");
  }
  if (o.signal_seconds < 1) {
    throw std::invalid_argument("the requeue signal lead time must be >= 1 s");
  }
  if (!o.time.empty()) {
    const auto limit = slurm_time_seconds(o.time);
    if (!limit) {
      throw std::invalid_argument("--time \"" + o.time +
                                  "\" is not a Slurm time limit (minutes, minutes:seconds, hours:minutes:seconds, "
                                  "days-hours, days-hours:minutes or days-hours:minutes:seconds, e.g. 01:30:00 or "
                                  "2-00:00:00)");
    }
    // The task stops and requeues signal_seconds before its limit: a limit not above that would requeue at once,
    // forever.
    if (*limit <= o.signal_seconds) {
      throw std::invalid_argument("--time " + o.time + " (" + std::to_string(*limit) +
                                  " s) leaves no time to run: tasks stop and requeue --signal-seconds " +
                                  std::to_string(o.signal_seconds) + " s before their limit");
    }
  }
  for (const auto* value : {&o.partition, &o.time, &o.account, &o.qos, &o.mem, &o.job_name}) {
    if (value->find_first_of(" \t\n'\"$`\\") != std::string::npos) {
      throw std::invalid_argument("sbatch option value \"" + *value + "\" contains whitespace or shell characters");
    }
  }
  static const std::vector<std::pair<std::string, std::string>> kManaged = {
      {"--array", "--cells-per-task, --array-throttle"},
      {"--output", ""},
      {"--error", ""},
      {"--open-mode", ""},
      {"--signal", "--signal-seconds"},
      {"--requeue", ""},
      {"--no-requeue", ""},
      {"--ntasks", "--mpi-ranks"},
      {"--job-name", "--job-name"},
      {"--dependency", ""},
      {"--parsable", ""},
      {"--wrap", ""},
      {"--partition", "--partition"},
      {"--time", "--time"},
      {"--account", "--account"},
      {"--qos", "--qos"},
      {"--mem", "--mem"},
      {"--cpus-per-task", "--cpus-per-task"}};
  for (const auto& extra : o.sbatch_options) {
    const std::string name = extra.substr(0, extra.find('='));
    if (extra.size() < 3 || extra.rfind("--", 0) != 0 ||
        extra.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=:,./%@+") !=
            std::string::npos) {
      throw std::invalid_argument("--sbatch \"" + extra +
                                  "\": an sbatch option is --name or --name=value (letters, digits, -_=:,./%@+)");
    }
    for (const auto& [managed, instead] : kManaged) {
      if (name == managed) {
        throw std::invalid_argument("--sbatch " + extra + ": wbaudit sets " + managed + " itself" +
                                    (instead.empty() ? std::string() : "; use wbaudit submit " + instead));
      }
    }
  }
  if (o.report_command.empty() ||
      o.report_command.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _=./-") !=
          std::string::npos) {
    throw std::invalid_argument("report command \"" + o.report_command +
                                "\" must be plain words (letters, digits, -_=./)");
  }
}

// Requeue on USR1: the chunk runner is stopped (finished cells each sit in their own complete attempt) and the job
// goes back to the queue; on restart it skips every cell that is already canonical and complete. After
// max_requeues requeues (Slurm counts them in SLURM_RESTART_COUNT) the task gives up instead: run-cells --give-up
// marks the attempt that was stopped (the cell that does not fit in --time) failed, naming the count, so `status`
// says why, and the task exits 1. task_index: the run-cells arguments selecting this task's cells.
std::string requeue_handler(const SlurmOptions& o, const std::string& task_index) {
  const std::string cap = std::to_string(o.max_requeues);
  std::ostringstream s;
  s << "requeue() {\n"
    << "  if [ -n \"$child\" ]; then\n"
    << "    kill -TERM \"$child\" 2>/dev/null\n"
    << "    wait \"$child\"\n"
    << "  fi\n"
    << "  restarts=\"${SLURM_RESTART_COUNT:-0}\"\n"
    << "  if [ \"$restarts\" -ge " << cap << " ]; then\n"
    << "    echo \"wbaudit: time limit near after $restarts requeue(s) (--max-requeues " << cap
    << "); $job gives up\" >&2\n"
    << "    \"$sweep/bin/wbaudit\" run-cells \"$sweep\" --tasks \"$tasks\"" << task_index << " --give-up " << cap
    << (o.time.empty() ? std::string() : " --time-limit " + o.time) << "\n"
    << "    exit 1\n"
    << "  fi\n"
    << "  echo \"wbaudit: time limit near; requeueing $job (requeue $((restarts + 1)) of at most " << cap << ")\" >&2\n"
    << "  scontrol requeue \"$job\"\n"
    << "  exit 0\n"
    << "}\n"
    << "trap requeue USR1\n"
    << "if [ \"$usr1_early\" -eq 1 ]; then requeue; fi\n";
  return s.str();
}

// The first commands of a cells script: a USR1 that arrives before the requeue handler is set (Slurm can send it as
// a requeued task starts, while the script still verifies the frozen binary) is kept and handled once the handler
// is set, instead of killing the shell (USR1's default action), which left the cell's attempt "running" with no
// process and no exit reason.
std::string early_usr1() {
  return "usr1_early=0\n"
         "trap 'usr1_early=1' USR1\n"
         "child=\n";
}

}  // namespace

TaskPlan plan_tasks(const std::vector<std::string>& cell_ids, int cells_per_task, std::optional<long> max_array_size) {
  if (cells_per_task < 1) {
    throw std::invalid_argument("--cells-per-task must be >= 1, not " + std::to_string(cells_per_task));
  }
  if (max_array_size && *max_array_size < 1) {
    throw std::invalid_argument("MaxArraySize " + std::to_string(*max_array_size) + " leaves no array index");
  }
  TaskPlan plan;
  const long n = static_cast<long>(cell_ids.size());
  long per = cells_per_task;
  if (max_array_size && (n + per - 1) / per > *max_array_size) {
    per = (n + *max_array_size - 1) / *max_array_size;
  }
  plan.cells_per_task = static_cast<int>(per);
  for (long i = 0; i < n; i += per) {
    plan.tasks.emplace_back(cell_ids.begin() + i, cell_ids.begin() + std::min(n, i + per));
  }
  return plan;
}

namespace {

// Greedy consecutive packing under a bound: a task takes cells while their sum stays within the bound (at least one).
std::vector<std::pair<std::size_t, std::size_t>> pack_under(const std::vector<double>& seconds, double bound) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // [begin, end)
  std::size_t begin = 0;
  double sum = 0;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    if (i > begin && sum + seconds[i] > bound) {
      ranges.emplace_back(begin, i);
      begin = i;
      sum = 0;
    }
    sum += seconds[i];
  }
  if (begin < seconds.size()) {
    ranges.emplace_back(begin, seconds.size());
  }
  return ranges;
}

}  // namespace

TaskPlan plan_tasks_by_cost(const std::vector<std::string>& cell_ids, const std::vector<double>& cell_seconds,
                            double target_seconds, std::optional<long> max_array_size) {
  if (cell_seconds.size() != cell_ids.size()) {
    throw std::invalid_argument("plan_tasks_by_cost: " + std::to_string(cell_ids.size()) + " cells but " +
                                std::to_string(cell_seconds.size()) + " estimates");
  }
  if (!(target_seconds > 0) || !std::isfinite(target_seconds)) {
    throw std::invalid_argument("the target task duration must be a positive number of seconds");
  }
  if (max_array_size && *max_array_size < 1) {
    throw std::invalid_argument("MaxArraySize " + std::to_string(*max_array_size) + " leaves no array index");
  }
  double total = 0, largest = 0;
  for (const double s : cell_seconds) {
    if (!(s >= 0) || !std::isfinite(s)) {
      throw std::invalid_argument("plan_tasks_by_cost: a negative estimate");
    }
    total += s;
    largest = std::max(largest, s);
  }
  double bound = target_seconds;
  auto ranges = pack_under(cell_seconds, bound);
  if (max_array_size && static_cast<long>(ranges.size()) > *max_array_size) {
    // Every cell in one task always fits; bisect between the largest cell and the total.
    double lo = std::max(largest, target_seconds), hi = std::max(total, lo);
    for (int i = 0; i < 200 && hi - lo > 1e-9 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      if (static_cast<long>(pack_under(cell_seconds, mid).size()) <= *max_array_size) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    bound = hi;
    ranges = pack_under(cell_seconds, bound);
  }
  TaskPlan plan;
  plan.automatic = true;
  plan.target_seconds = bound;
  plan.cells_per_task = 0;
  for (const auto& [b, e] : ranges) {
    plan.tasks.emplace_back(cell_ids.begin() + static_cast<long>(b), cell_ids.begin() + static_cast<long>(e));
    double sum = 0;
    for (std::size_t i = b; i < e; ++i) {
      sum += cell_seconds[i];
    }
    plan.task_seconds.push_back(sum);
    plan.cells_per_task = std::max(plan.cells_per_task, static_cast<int>(e - b));
  }
  return plan;
}

double auto_task_seconds(const SlurmOptions& o) {
  if (!(o.task_minutes > 0) || !std::isfinite(o.task_minutes)) {
    throw std::invalid_argument("--task-minutes must be a positive number of minutes");
  }
  double target = 60.0 * o.task_minutes;
  if (!o.time.empty()) {
    if (const auto limit = slurm_time_seconds(o.time); limit && *limit != LONG_MAX && *limit > o.signal_seconds) {
      target = std::min(target, 0.5 * static_cast<double>(*limit - o.signal_seconds));
    }
  }
  return target;
}

std::optional<long> parse_max_array_size(const std::string& text) {
  static const std::regex line(R"((^|\n)\s*MaxArraySize\s*=\s*(\d+))");
  std::smatch m;
  if (!std::regex_search(text, m, line)) {
    return std::nullopt;
  }
  return std::stol(m[2].str());
}

// Lines that check the frozen binary before anything runs with the key: DIR/bin holds exactly the registered files
// (no others, no links) with the registered hashes. The executable's RUNPATH looks in bin/lib/ first, so a library
// dropped there would otherwise be loaded by the frozen binary, with the key in reach.
static std::string verify_frozen(const ScriptPaths& p) {
  if (p.frozen.empty()) {
    return "";
  }
  std::vector<std::string> listing;
  for (const auto& [path, sha] : p.frozen) {
    listing.push_back("./" + path);
    if (path.rfind("lib/", 0) == 0 && std::find(listing.begin(), listing.end(), "./lib") == listing.end()) {
      listing.emplace_back("./lib");
    }
  }
  std::sort(listing.begin(), listing.end());
  std::string expected;
  for (const auto& entry : listing) {
    expected += entry + " ";
  }
  std::ostringstream s;
  s << "# The frozen binary and its libraries must be exactly those registered in sweep.json (checked before the key\n"
    << "# is exported or anything in bin/ runs).\n"
    << "frozen_intact() {\n"
    << "  [ -d \"$sweep/bin\" ] && [ ! -L \"$sweep/bin\" ] && [ -z \"$(find \"$sweep/bin\" -type l -print -quit)\" ] "
       "&&\n"
    << "    [ \"$(cd \"$sweep/bin\" && find . -mindepth 1 | LC_ALL=C sort | tr '\\n' ' ')\" = " << shell_quote(expected)
    << " ] &&\n"
    << "    (cd \"$sweep/bin\" && sha256sum --quiet --strict --check) <<'WBAUDIT_FROZEN'\n";
  for (const auto& [path, sha] : p.frozen) {
    s << sha << "  " << path << "\n";
  }
  s << "WBAUDIT_FROZEN\n"
    << "}\n"
    << "if ! frozen_intact; then\n"
    << "  echo \"wbaudit: $sweep/bin is not the frozen binary registered in sweep.json (a file added, changed or "
       "linked); nothing was run\" >&2\n"
    << "  exit 1\n"
    << "fi\n";
  return s.str();
}

// Lines giving the job the sweep's signing key, unless its environment already names one.
static std::string key_export(const ScriptPaths& p) {
  if (p.key_file.empty()) {
    return "";
  }
  return "if [ -z \"${WBAUDIT_KEY_FILE:-}\" ]; then export WBAUDIT_KEY_FILE=" + shell_quote(p.key_file.string()) +
         "; fi\n";
}

std::string render_array_script(const ScriptPaths& p, std::size_t task_count, const SlurmOptions& o) {
  check_options(o);
  if (task_count == 0) {
    throw std::invalid_argument("render_array_script: no tasks");
  }
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Generated by wbaudit submit: each array task runs one chunk of cells of the sweep below.\n"
    << "#SBATCH --job-name=" << o.job_name << "\n"
    << "#SBATCH --array=0-" << task_count - 1;
  if (o.array_throttle > 0) {
    s << "%" << o.array_throttle;
  }
  s << "\n"
    << "#SBATCH --output=" << (p.log_dir / "%A_%a.out").string() << "\n"
    << "#SBATCH --error=" << (p.log_dir / "%A_%a.err").string() << "\n"
    << "#SBATCH --open-mode=append\n"
    << "#SBATCH --signal=B:USR1@" << o.signal_seconds << "\n"
    << "#SBATCH --requeue\n"
    << "#SBATCH --ntasks=1\n"
    << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
  common_directives(s, o);
  for (const auto& extra : o.sbatch_options) {
    s << "#SBATCH " << extra << "\n";
  }
  s << "set -u\n"
    << early_usr1() << "sweep=" << shell_quote(p.sweep_dir.string()) << "\n"
    << "tasks=" << shell_quote(p.tasks_file.string()) << "\n"
    << "job=\"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"\n"
    << "export OMP_PROC_BIND=false OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
    << verify_frozen(p) << key_export(p) << requeue_handler(o, " --task-index \"$SLURM_ARRAY_TASK_ID\"")
    << "\"$sweep/bin/wbaudit\" run-cells \"$sweep\" --tasks \"$tasks\" --task-index \"$SLURM_ARRAY_TASK_ID\" "
       "--kokkos-threads=\"${SLURM_CPUS_PER_TASK:-1}\" &\n"
    << "child=$!\n"
    << "wait \"$child\"\n";
  return s.str();
}

// The launcher of the MPI job's ranks, up to the program, giving every rank the sweep's key (WBAUDIT_KEY_FILE): Open
// MPI's mpirun passes it with -x; srun starts the ranks itself (one per task of the allocation, each with its CPUs)
// and passes the job's environment, the key named explicitly.
static std::string mpi_launch(const ScriptPaths& p, const SlurmOptions& o) {
  if (o.launcher == "srun") {
    return std::string(
               "srun --ntasks=\"$SLURM_NTASKS\" --cpus-per-task=\"${SLURM_CPUS_PER_TASK:-1}\" --cpu-bind=none ") +
           (p.key_file.empty() ? "--export=ALL " : "--export=ALL,WBAUDIT_KEY_FILE ");
  }
  return std::string("mpirun -n \"$SLURM_NTASKS\" --bind-to none ") +
         (p.key_file.empty() ? "" : "-x WBAUDIT_KEY_FILE ");
}

std::string render_mpi_script(const ScriptPaths& p, const SlurmOptions& o) {
  check_options(o);
  if (o.mpi_ranks < 1) {
    throw std::invalid_argument("render_mpi_script: --mpi-ranks must be >= 1");
  }
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Generated by wbaudit submit: one MPI job runs every cell of the sweep below, spread over its ranks.\n"
    << "#SBATCH --job-name=" << o.job_name << "\n"
    << "#SBATCH --output=" << (p.log_dir / "%j.out").string() << "\n"
    << "#SBATCH --error=" << (p.log_dir / "%j.err").string() << "\n"
    << "#SBATCH --open-mode=append\n"
    << "#SBATCH --signal=B:USR1@" << o.signal_seconds << "\n"
    << "#SBATCH --requeue\n"
    << "#SBATCH --ntasks=" << o.mpi_ranks << "\n"
    << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
  common_directives(s, o);
  for (const auto& extra : o.sbatch_options) {
    s << "#SBATCH " << extra << "\n";
  }
  s << "set -u\n"
    << early_usr1() << "sweep=" << shell_quote(p.sweep_dir.string()) << "\n"
    << "tasks=" << shell_quote(p.tasks_file.string()) << "\n"
    << "job=\"$SLURM_JOB_ID\"\n"
    << "export OMP_PROC_BIND=false OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
    << verify_frozen(p) << key_export(p) << requeue_handler(o, "") << mpi_launch(p, o)
    << "\"$sweep/bin/wbaudit\" run-cells \"$sweep\" --tasks \"$tasks\" "
       "--kokkos-threads=\"${SLURM_CPUS_PER_TASK:-1}\" &\n"
    << "child=$!\n"
    << "wait \"$child\"\n";
  return s.str();
}

std::string render_report_script(const ScriptPaths& p, const SlurmOptions& o) {
  check_options(o);
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Generated by wbaudit submit: runs after the cells (afterany), whatever their outcome; the report itself\n"
    << "# decides from the sweep directory's content which cells are complete and canonical.\n"
    << "#SBATCH --job-name=" << o.job_name << "-report\n"
    << "#SBATCH --output=" << (p.log_dir / "report_%j.out").string() << "\n"
    << "#SBATCH --error=" << (p.log_dir / "report_%j.err").string() << "\n"
    << "#SBATCH --ntasks=1\n"
    << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
  common_directives(s, o);
  s << "set -u\n"
    << "sweep=" << shell_quote(p.sweep_dir.string()) << "\n"
    << "export OMP_PROC_BIND=false OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
    << verify_frozen(p) << key_export(p) << "\"$sweep/bin/wbaudit\" status \"$sweep\"\n"
    << "# What `wbaudit run` writes after its cells: summary.csv, trajectories.csv, report/ (and the loss report).\n"
    << "\"$sweep/bin/wbaudit\" report \"$sweep\" || echo \"wbaudit report failed (exit $?)\" >&2\n"
    << "exec \"$sweep/bin/wbaudit\" " << o.report_command << " \"$sweep\"\n";
  return s.str();
}

}  // namespace wbaudit::runners::slurm
