#include "runners/exec/slurm/submit.hpp"

#include <linux/magic.h>
#include <sys/statfs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runners/store/identity.hpp"
#include "runners/store/journal.hpp"
#include "sim/model_registry.hpp"
#include "sim/run.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::slurm {
namespace fs = std::filesystem;
namespace {

fs::path next_submission_dir(const fs::path& sweep_dir) {
  const fs::path root = sweep_dir / "slurm";
  fs::create_directories(root);
  for (int n = 1;; ++n) {
    fs::path dir = root / ("submit-" + std::to_string(n));
    std::error_code ec;
    if (fs::create_directory(dir, ec)) {
      return dir;  // atomic: two concurrent submits never share a directory
    }
    if (ec) {
      throw SlurmError("cannot create " + dir.string() + ": " + ec.message());
    }
  }
}

// The paths the scripts of a submission in `submission_dir` name.
ScriptPaths script_paths(const fs::path& sweep_dir, const fs::path& submission_dir, const ScriptIdentity& identity) {
  return ScriptPaths{fs::absolute(sweep_dir), fs::absolute(submission_dir) / "tasks.json",
                     fs::absolute(submission_dir) / "logs", identity.key_file, identity.frozen};
}

std::string sbatch(const std::vector<std::string>& extra, const fs::path& script) {
  std::vector<std::string> argv{"sbatch", "--parsable"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(script.string());
  const CommandResult r = run_command(argv);
  if (r.exit_code != 0) {
    throw SlurmError("sbatch " + script.string() + " failed (exit " + std::to_string(r.exit_code) + "): " + r.output);
  }
  // --parsable prints "<jobid>" or "<jobid>;<cluster>"
  std::string id = r.output.substr(0, r.output.find_first_of(";\n"));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    throw SlurmError("sbatch " + script.string() + " printed no job id: " + r.output);
  }
  return id;
}

// The first sbatch of a submission: when sbatch refuses it nothing was submitted, so the submission's directory
// (scripts and logs/ that no job will use) is removed before the error goes on.
std::string sbatch_or_discard(const std::vector<std::string>& extra, const fs::path& script, const fs::path& dir) {
  try {
    return sbatch(extra, script);
  } catch (const SlurmError&) {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
    fs::remove(dir.parent_path(), ignored);  // DIR/slurm, when this was its only submission
    throw;
  }
}

}  // namespace

double estimate_cell_seconds(const nlohmann::json& cell_config) {
  sim::RunConfig c;
  try {
    c = sim::run_config_from_json(cell_config);
  } catch (const std::exception&) {
    return 60;
  }
  // Projections per step: a reference projects every target format under nearest and each projected policy.
  const double projections =
      c.mode == sim::RunMode::reference
          ? static_cast<double>(c.project_formats.size()) * (1.0 + static_cast<double>(c.project_policies.size()))
          : 1.0;
  const sim::ModelSeconds model = sim::find_model(c.model.kind).seconds(c, projections);
  const double step = model.step;        // seconds per training step
  const double forward = model.forward;  // seconds of one forward pass of one batch (validation)
  const double steps = static_cast<double>(c.steps);
  double seconds = 0.05 + steps * step;
  if (c.validation.every > 0) {
    seconds += (steps / static_cast<double>(c.validation.every) + 1) * c.validation.batches * forward;
  }
  if (c.replay.checkpoints > 0) {
    seconds += static_cast<double>(c.replay.checkpoints) * static_cast<double>(c.replay.steps) *
               static_cast<double>(c.replay.policies.size()) * step;
  }
  return seconds;
}

double estimate_cell_seconds(const nlohmann::json& cell_config, int cpus) {
  return estimate_cell_seconds(cell_config) / (1.0 + 0.5 * (std::max(cpus, 1) - 1));
}

TaskPlan plan_for(const std::vector<std::string>& cell_ids, const std::vector<nlohmann::json>& configs,
                  const SlurmOptions& options, std::optional<long> max_array_size) {
  TaskPlan plan;
  if (options.mpi_ranks > 0) {
    plan.cells_per_task = static_cast<int>(cell_ids.size());
    if (!cell_ids.empty()) {
      plan.tasks.push_back(cell_ids);
    }
    return plan;
  }
  if (options.cells_per_task > 0) {
    return plan_tasks(cell_ids, options.cells_per_task, max_array_size);
  }
  if (options.cells_per_task < 0) {
    throw std::invalid_argument("--cells-per-task must be auto or >= 1, not " + std::to_string(options.cells_per_task));
  }
  if (configs.size() != cell_ids.size()) {
    throw std::invalid_argument("plan_for: " + std::to_string(cell_ids.size()) + " cells but " +
                                std::to_string(configs.size()) + " configurations");
  }
  std::vector<double> seconds;
  seconds.reserve(configs.size());
  for (const auto& config : configs) {
    seconds.push_back(estimate_cell_seconds(config, options.cpus_per_task));
  }
  return plan_tasks_by_cost(cell_ids, seconds, auto_task_seconds(options), max_array_size);
}

namespace {

// Node-local storage: a temporary directory, or a tmpfs (the nearest existing ancestor's file system).
bool on_node_local_storage(const fs::path& dir) {
  const fs::path absolute = fs::absolute(dir).lexically_normal();
  std::vector<fs::path> local = {"/tmp", "/var/tmp", "/dev/shm"};
  if (const char* tmp = std::getenv("TMPDIR"); tmp && *tmp) {
    local.emplace_back(fs::path(tmp).lexically_normal());
  }
  for (const auto& root : local) {
    const auto [end, ignored] = std::mismatch(root.begin(), root.end(), absolute.begin(), absolute.end());
    if (end == root.end()) {
      return true;
    }
  }
  fs::path probe = absolute;
  while (!probe.empty() && !fs::exists(probe) && probe != probe.root_path()) {
    probe = probe.parent_path();
  }
  struct statfs info {};
  return ::statfs(probe.c_str(), &info) == 0 && info.f_type == TMPFS_MAGIC;
}

}  // namespace

std::vector<std::string> submission_warnings(const fs::path& sweep_dir, const std::vector<std::string>& names,
                                             const std::vector<nlohmann::json>& configs, const SlurmOptions& options) {
  std::vector<std::string> out;
  if (options.time.empty()) {
    out.emplace_back(
        "no --time: the partition's default time limit applies (wbaudit cannot check the cells against it); "
        "give --time so that tasks stop and requeue before their limit");
  } else if (const auto limit = slurm_time_seconds(options.time); limit && names.size() == configs.size()) {
    std::size_t over = 0;
    double longest = -1;
    std::string longest_name;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const double seconds = estimate_cell_seconds(configs[i], options.cpus_per_task);
      if (seconds > double(*limit)) {
        ++over;
        if (seconds > longest) {
          longest = seconds;
          longest_name = names[i];
        }
      }
    }
    if (over > 0) {
      out.push_back(std::to_string(over) + " cell(s) are estimated to take longer than --time " + options.time + " (" +
                    std::to_string(*limit) + " s; the longest, " + longest_name + ", about " +
                    util::format_duration(longest) + " at --cpus-per-task " + std::to_string(options.cpus_per_task) +
                    "): each is stopped at the limit and requeued up to --max-requeues times, and fails after that; "
                    "raise --time or shorten the cells");
    }
  }
  if (on_node_local_storage(sweep_dir)) {
    out.push_back("the sweep directory " + fs::absolute(sweep_dir).string() +
                  " is on node-local storage (a temporary directory or a tmpfs): compute nodes may not see it; put "
                  "it on a file system the nodes share");
  }
  return out;
}

std::optional<long> query_max_array_size() {
  const CommandResult r = run_command({"scontrol", "show", "config"});
  if (r.exit_code != 0) {
    return std::nullopt;
  }
  return parse_max_array_size(r.output);
}

ScriptIdentity script_identity(const SweepStore& store) {
  ScriptIdentity identity;
  identity.key_file = store.key_path().empty() ? fs::path() : fs::absolute(store.key_path());
  identity.frozen.emplace_back("wbaudit", store.binary_sha256());
  for (const auto& [name, sha] : store.libraries()) {
    identity.frozen.emplace_back("lib/" + name, sha);
  }
  return identity;
}

ScriptIdentity new_sweep_script_identity() {
  ScriptIdentity identity;
  const fs::path example = sweep_key_path(random_uuid());
  if (!example.empty()) {
    const char* named = std::getenv("WBAUDIT_KEY_FILE");
    identity.key_file = fs::absolute(named && *named ? example : example.parent_path() / "<sweep uuid>");
  }
  identity.frozen.emplace_back("wbaudit", self_executable_sha256());
  for (const auto& library : non_system_libraries()) {
    identity.frozen.emplace_back("lib/" + library.name, library.sha256);
  }
  return identity;
}

fs::path next_submission_path(const fs::path& sweep_dir) {
  for (int n = 1;; ++n) {
    fs::path dir = sweep_dir / "slurm" / ("submit-" + std::to_string(n));
    if (!fs::exists(dir)) {
      return dir;
    }
  }
}

Submission plan_submission(const fs::path& sweep_dir, const std::vector<std::string>& cell_ids,
                           const std::vector<nlohmann::json>& configs, const SlurmOptions& options,
                           std::optional<long> max_array_size, const ScriptIdentity& identity) {
  Submission s;
  s.cell_ids = cell_ids;
  const ScriptPaths paths = script_paths(sweep_dir, next_submission_path(sweep_dir), identity);
  s.plan = plan_for(cell_ids, configs, options, max_array_size);
  if (!cell_ids.empty()) {
    s.cells_script = options.mpi_ranks > 0 ? render_mpi_script(paths, options)
                                           : render_array_script(paths, s.plan.tasks.size(), options);
  }
  s.report_script = render_report_script(paths, options);
  return s;
}

Submission submit(const SweepStore& store, const SlurmOptions& options) {
  store.require_key("submit");
  std::vector<std::string> todo;
  std::vector<nlohmann::json> configs;
  for (const auto& status : store.status()) {
    if (status.needs_run()) {
      todo.push_back(status.cell->id);
      configs.push_back(status.cell->config);
    }
  }
  const std::optional<long> max_array = options.mpi_ranks > 0 ? std::nullopt : query_max_array_size();
  Submission s;
  s.cell_ids = todo;
  if (const auto problems = store.check_frozen_inputs(); !problems.empty()) {
    throw SlurmError("cannot submit " + store.dir().string() + ": " + problems.front() +
                     " (`wbaudit run SPEC --out DIR --resume` with the registered binary restores the frozen copies)");
  }
  store.require_no_links("submit");
  s.dir = next_submission_dir(store.dir());
  const ScriptPaths paths = script_paths(store.dir(), s.dir, script_identity(store));
  fs::create_directories(paths.log_dir);
  s.plan = plan_for(todo, configs, options, max_array);
  nlohmann::json tasks = {{"schema", "wbaudit.slurm-tasks/1"},
                          {"sweep_spec_sha256", store.spec_sha256()},
                          {"cells_per_task", s.plan.cells_per_task},
                          {"tasks", s.plan.tasks}};
  if (s.plan.automatic) {
    tasks["packing"] = {
        {"kind", "auto"}, {"target_seconds", s.plan.target_seconds}, {"estimated_task_seconds", s.plan.task_seconds}};
  }
  write_file_atomic(paths.tasks_file, tasks.dump(1) + "\n");
  s.report_script = render_report_script(paths, options);
  write_file_atomic(s.dir / "report.sbatch", s.report_script);
  nlohmann::json jobs = {{"submitted", utc_now()}, {"cells", todo.size()}, {"tasks", s.plan.tasks.size()}};
  if (!todo.empty()) {
    s.cells_script = options.mpi_ranks > 0 ? render_mpi_script(paths, options)
                                           : render_array_script(paths, s.plan.tasks.size(), options);
    write_file_atomic(s.dir / "cells.sbatch", s.cells_script);
    s.cells_job_id = sbatch_or_discard({}, s.dir / "cells.sbatch", s.dir);
    jobs["cells_job_id"] = s.cells_job_id;
    jobs["kind"] = options.mpi_ranks > 0 ? "mpi" : "array";
    write_file_atomic(s.dir / "jobs.json", jobs.dump(1) + "\n");  // recorded before the report job: never lost
    try {
      s.report_job_id = sbatch({"--dependency=afterany:" + s.cells_job_id}, s.dir / "report.sbatch");
    } catch (const SlurmError& e) {
      throw PartlySubmitted(std::string(e.what()) + "; the cells job " + s.cells_job_id + " was submitted (" +
                                (s.dir / "jobs.json").string() + ") and runs without a report job: after it ends, " +
                                "run `wbaudit report " + store.dir().string() + "` and `wbaudit " +
                                options.report_command + " " + store.dir().string() + "`",
                            s.cells_job_id, s.dir);
    }
  } else {
    s.report_job_id = sbatch_or_discard({}, s.dir / "report.sbatch", s.dir);
  }
  jobs["report_job_id"] = s.report_job_id;
  write_file_atomic(s.dir / "jobs.json", jobs.dump(1) + "\n");
  return s;
}

nlohmann::json scheduler_view(const fs::path& sweep_dir) {
  nlohmann::json view = {{"available", false}, {"jobs", nlohmann::json::array()}};
  const fs::path root = sweep_dir / "slurm";
  std::vector<std::string> ids;
  if (fs::exists(root)) {
    for (const auto& entry : fs::directory_iterator(root)) {
      const fs::path file = entry.path() / "jobs.json";
      if (!fs::exists(file)) {
        continue;
      }
      try {
        std::ifstream in(file);
        const auto jobs = nlohmann::json::parse(in);
        for (const char* key : {"cells_job_id", "report_job_id"}) {
          if (jobs.contains(key)) {
            ids.push_back(jobs[key].get<std::string>());
          }
        }
      } catch (const nlohmann::json::exception& e) {
        view["message"] = file.string() + ": " + e.what();
      }
    }
  }
  if (ids.empty()) {
    view["message"] = "no submissions";
    return view;
  }
  std::string list;
  for (const auto& id : ids) {
    list += (list.empty() ? "" : ",") + id;
  }
  const CommandResult q = run_command({"squeue", "-h", "-r", "-o", "%i %T %r", "-j", list});
  if (q.exit_code == 127) {
    view["message"] = "squeue not available";
    return view;
  }
  view["available"] = true;
  std::istringstream lines(q.exit_code == 0 ? q.output : "");
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string id, state, reason;
    if (!(words >> id >> state)) {
      continue;
    }
    std::getline(words, reason);
    if (!reason.empty() && reason.front() == ' ') {
      reason.erase(0, 1);
    }
    view["jobs"].push_back({{"job", id}, {"state", state}, {"reason", reason}, {"source", "squeue"}});
  }
  const CommandResult a = run_command({"sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", list});
  if (a.exit_code == 0) {
    std::istringstream rows(a.output);
    while (std::getline(rows, line)) {
      const auto bar1 = line.find('|'), bar2 = line.rfind('|');
      if (bar1 == std::string::npos || bar2 == bar1) {
        continue;
      }
      view["jobs"].push_back({{"job", line.substr(0, bar1)},
                              {"state", line.substr(bar1 + 1, bar2 - bar1 - 1)},
                              {"exit_code", line.substr(bar2 + 1)},
                              {"source", "sacct"}});
    }
  } else {
    view["accounting"] = "unavailable";
  }
  return view;
}

}  // namespace wbaudit::runners::slurm
