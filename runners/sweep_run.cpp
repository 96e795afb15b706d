#include "runners/sweep_run.hpp"

#include <fnmatch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "forecast/alignment.hpp"
#include "forecast/crossing.hpp"
#include "forecast/source.hpp"
#include "runners/identity.hpp"
#include "runners/report/crossing_report.hpp"
#include "runners/report/csv.hpp"
#include "runners/report/loss_report.hpp"
#include "runners/sweep_cells.hpp"
#include "runners/sweep_lock.hpp"
#include "sim/precision/expected_erasure.hpp"
#include "sim/precision/policy.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::runners {
namespace {

using report::csv_field;

// Removes a directory this run made for its lock when nothing else was written into it (a creation that failed).
void remove_if_only_lock(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename() != ".lock") return;
  }
  std::filesystem::remove(dir / ".lock", ec);
  std::filesystem::remove(dir, ec);
}
using report::csv_number;

// The skill reports already written into DIR/evaluations/ (by name), for the crossing report's links.
std::vector<std::string> fs_list_evaluations(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "evaluations", ec))
    if (entry.is_directory() && entry.path().filename().string().front() != '.' &&
        std::filesystem::exists(entry.path() / "report.html"))
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string format_seconds(double s) {
  std::ostringstream out;
  if (s < 90) {
    out << std::fixed << std::setprecision(0) << s << "s";
  } else if (s < 5400) {
    out << std::fixed << std::setprecision(1) << s / 60 << "min";
  } else {
    out << std::fixed << std::setprecision(1) << s / 3600 << "h";
  }
  return out.str();
}

// Progress on stderr: one line per finished cell with done/total, rate and ETA (per rank under MPI).
class ProgressPrinter {
 public:
  ProgressPrinter(std::size_t total, int rank, int ranks) : m_total(total), m_rank(rank), m_ranks(ranks) {}
  void operator()(const ProgressEvent& event) {
    if (event.kind == ProgressEvent::Kind::started) return;
    ++m_done;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    double rate = m_done / std::max(elapsed, 1e-9);
    // Every rank runs about total/ranks cells.
    double remaining = std::max(0.0, static_cast<double>(m_total) / m_ranks - static_cast<double>(m_done));
    std::ostringstream line;
    if (m_ranks > 1) line << "[rank " << m_rank << "] ";
    line << "[" << m_done << (m_ranks > 1 ? " here" : "") << "/" << m_total << "] "
         << (event.kind == ProgressEvent::Kind::failed ? "FAILED " : "") << event.name << " (" << std::fixed
         << std::setprecision(1) << event.seconds << "s)  " << std::setprecision(2) << rate * 60 << " cells/min, ETA "
         << format_seconds(remaining / std::max(rate, 1e-9));
    if (event.kind == ProgressEvent::Kind::failed) line << "\n    reason: " << event.message;
    std::cerr << line.str() << "\n" << std::flush;
  }

 private:
  std::size_t m_total;
  int m_rank, m_ranks;
  std::size_t m_done = 0;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};

// One evaluation cell's trajectories on the target's recorded steps: measured, and projected from the reference.
struct CellSeries {
  std::vector<std::int64_t> steps;
  std::vector<double> measured, predicted;
};

}  // namespace

std::vector<StoredCell> stored_cells(const SweepSpec& spec) {
  std::vector<StoredCell> cells;
  for (auto& c : spec.cells) cells.push_back({"", c.name, role_name(c.role), c.reference, c.config});
  return cells;
}

void check_sweep_directory(const std::filesystem::path& dir, const SweepSpec& spec, bool resume) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::exists(dir / "sweep.json")) {
    // A creation interrupted before sweep.json leaves only what the store writes first (cells/, spec.toml, bin/,
    // temporaries); the store resumes it. Anything else is someone else's directory.
    if (!fs::is_directory(dir, ec))
      throw StoreError(dir.string() + " exists and is not a directory; choose a new --out");
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name != "cells" && name != "bin" && name != "spec.toml" && name.front() != '.') {
        throw StoreError(dir.string() + " exists and is not a sweep directory (no sweep.json, and it holds " + name +
                         "); choose a new --out");
      }
    }
    return;
  }
  const SweepStore store = SweepStore::open(dir);
  const std::string hash = sha256_hex(spec.text);
  if (store.spec_sha256() != hash) {
    throw StoreError("sweep directory " + dir.string() +
                     " was created by another spec (the spec changed since: its frozen " + store.spec_path().string() +
                     " has hash " + store.spec_sha256() + ", " + spec.path.string() + " has hash " + hash +
                     "); choose a new --out for this spec (--resume continues a sweep only "
                     "with the spec that created it)");
  }
  if (!resume) {
    throw StoreError("sweep directory " + dir.string() + " already exists for this spec; use --resume to continue it");
  }
}

CellFn simulator_cell_fn() {
  return [](const CellTask& task, const std::filesystem::path& attempt_dir) -> std::vector<std::string> {
    sim::RunConfig config = sim::run_config_from_json(task.config);
    sim::Trace trace = sim::run_cell(config);
    sim::write_trace(attempt_dir / "trace.h5", trace);
    return {"trace.h5"};
  };
}

LockedSweep create_locked(const SweepSpec& spec, const std::filesystem::path& out, bool resume) {
  check_sweep_directory(out, spec, resume);
  // The lock before anything is written: two runs into one new directory must not both create a sweep (and a key
  // and a journal) there. The directory is made for the lock; a creation that fails removes it again.
  std::error_code ec;
  const bool made = std::filesystem::create_directories(out, ec);
  if (ec) throw StoreError("cannot create " + out.string() + ": " + ec.message());
  try {
    SweepLock lock = SweepLock::acquire(out);
    check_sweep_directory(out, spec, resume);  // again, now that no one else can write
    CreateOptions create;
    create.resume = resume;
    SweepStore store = SweepStore::create(out, spec.text, stored_cells(spec), create);
    return LockedSweep{std::move(lock), std::move(store)};
  } catch (...) {
    if (made) remove_if_only_lock(out);
    throw;
  }
}

ExecSummary run_sweep(const SweepSpec& spec, const RunOptions& options, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  if (comm != MPI_COMM_NULL) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
  }
  // Cell patterns are checked before anything is written.
  std::vector<std::string> only_ids;
  for (const auto& pattern : options.only) {
    bool matched = false;
    for (const auto& cell : spec.cells) {
      if (::fnmatch(pattern.c_str(), cell.name.c_str(), 0) != 0) continue;
      matched = true;
      const std::string id = cell_id(cell.config);
      if (std::find(only_ids.begin(), only_ids.end(), id) == only_ids.end()) only_ids.push_back(id);
    }
    if (!matched) {
      std::string names;
      for (const auto& cell : spec.cells) names += (names.empty() ? "" : ", ") + cell.name;
      throw SpecError(spec.path.string() + ": --cells \"" + pattern +
                      "\" matches no cell of the sweep (its cells: " + names + ")");
    }
  }
  // Refuse before anything is written a cell that cannot fit in this machine's memory with the cells that run
  // beside it (local worker processes; one cell per rank under MPI).
  {
    const double physical =
        static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    const double beside = comm == MPI_COMM_NULL ? std::max(1, options.jobs) : 1;
    for (const auto& cell : spec.cells) {
      double bytes = 0;
      try {
        bytes = sim::estimate_cell_bytes(sim::run_config_from_json(cell.config));
      } catch (const std::exception&) {
        continue;  // its own validation names the problem
      }
      if (physical > 0 && bytes * beside > physical) {
        std::ostringstream msg;
        msg << std::fixed << std::setprecision(1) << "cell " << cell.name << " needs about " << bytes / 1073741824.0
            << " GiB (" << (beside > 1 ? "x " + std::to_string(static_cast<int>(beside)) + " cells at a time, " : "")
            << "model and batch of the spec), more than this machine's " << physical / 1073741824.0
            << " GiB of memory; shrink [model] or [data] batch" << (beside > 1 ? ", or run fewer --jobs" : "");
        throw SpecError(msg.str());
      }
    }
  }
  // Rank 0 creates (or checks) the sweep directory; the others open it once it exists.
  // It also takes the sweep's lock for the whole run (one writer per sweep: a second run refuses, naming the holder).
  std::string create_error;
  std::optional<SweepLock> lock;
  if (rank == 0) {
    try {
      LockedSweep locked = create_locked(spec, options.out, options.resume);
      lock.emplace(std::move(locked.lock));
      const SweepStore& created = locked.store;
      // With the lock held: attempt directories the journal never heard of are moved aside (DIR/foreign/), so
      // they cannot sit beside canonical attempts; repairs of the frozen inputs are said.
      std::vector<std::string> notes = created.repairs();
      for (auto& moved : created.set_aside_foreign()) notes.push_back(std::move(moved));
      for (auto& removed : created.remove_leftover_temporaries()) notes.push_back(std::move(removed));
      for (const auto& note : notes) std::cerr << "wbaudit run: " << note << "\n";
    } catch (const std::exception& e) {
      create_error = e.what();
    }
  }
  if (comm != MPI_COMM_NULL) {
    int failed = create_error.empty() ? 0 : 1;
    MPI_Bcast(&failed, 1, MPI_INT, 0, comm);
    if (failed) throw StoreError(rank == 0 ? create_error : "rank 0 could not create the sweep directory");
  } else if (!create_error.empty()) {
    throw StoreError(create_error);
  }
  SweepStore store = SweepStore::open(options.out);

  ExecOptions exec;
  exec.resume = true;  // the directory was just created (or resume was asked for and checked by create)
  exec.comm = comm;
  if (comm == MPI_COMM_NULL) {
    exec.local_jobs = options.jobs;
    exec.worker_command = {self_executable().string(), "worker",
                           "--kokkos-threads=" + std::to_string(options.worker_threads), "--", options.out.string()};
  }
  ProgressPrinter printer(store.cells().size(), rank, ranks);
  const std::int64_t burn_in = crossing_burn_in(spec).steps;
  std::set<std::string> target_ids;
  for (const auto& cell : store.cells())
    if (cell.role == "target") target_ids.insert(cell.id);
  exec.progress = [&](const ProgressEvent& e) {
    if (options.progress) printer(e);
    if (e.kind != ProgressEvent::Kind::completed || !target_ids.count(e.cell_id) || e.attempt.empty()) return;
    std::string warning;
    try {
      const sim::Trace trace = sim::read_trace(options.out / "cells" / e.cell_id / "attempts" / e.attempt / "trace.h5");
      warning = early_crossing_warning(e.name, trace, spec.evaluation.groups, spec.evaluation.threshold,
                                       spec.evaluation.min_group_size, burn_in);
    } catch (const std::exception&) {
      return;  // the store's checks name an unreadable trace; a warning is no place for it
    }
    if (!warning.empty()) std::cerr << "wbaudit run: warning: " << warning << "\n" << std::flush;
  };
  if (options.progress && rank == 0) {
    std::cerr << "wbaudit run: " << spec.name << ": " << spec.count(CellRole::target) << " target runs, "
              << spec.count(CellRole::reference) << " fp32 reference runs -> " << options.out.string();
    if (comm == MPI_COMM_NULL && options.jobs > 1) {
      std::cerr << " (up to " << options.jobs << " worker processes, " << options.worker_threads << " thread"
                << (options.worker_threads == 1 ? "" : "s") << " each)";
    }
    std::cerr << "\n";
  }
  if (options.create_only) {
    if (options.progress && rank == 0)
      std::cerr << "wbaudit run: created " << options.out.string() << " (" << store.cells().size()
                << " cells, none run: --create-only)\n";
    return ExecSummary{};
  }
  ExecSummary summary = execute_sweep(store, options.only.empty() ? tasks_of(store) : tasks_of(store, only_ids),
                                      simulator_cell_fn(), exec);

  bool any_target_done = false;
  if (options.report && rank == 0)
    for (const auto& st : store.status())
      any_target_done = any_target_done || (st.cell->role == "target" && !st.needs_run());
  if (options.report && rank == 0 && !any_target_done) {
    // E.g. `--cells 'reference/*'`: nothing to compare yet.
    if (options.progress)
      std::cerr << "wbaudit run: " << summary.completed << " run, " << summary.skipped << " already complete, "
                << summary.failed << " failed in " << format_seconds(summary.wall_seconds)
                << "; no target run is complete, so no summary or report yet (`wbaudit report " << options.out.string()
                << "` once one is)\n";
  } else if (options.report && rank == 0) {
    SweepOutputs outputs = write_sweep_outputs(store, spec);
    if (options.progress) {
      std::cerr << "wbaudit run: " << summary.completed << " run, " << summary.skipped << " already complete, "
                << summary.failed << " failed in " << format_seconds(summary.wall_seconds) << "\n";
      print_outputs(std::cerr, outputs);
    }
  }
  return summary;
}

namespace {

// The runs of a sweep as the loss report sees them (runners/report/loss_report.hpp): condition = the grid values
// except the policy, its SR bits and the seed; policy = the write-back policy's projection name ("fp32" for
// references).
std::vector<report::LossCell> loss_cells(const SweepStore& store, const SweepSpec& spec, TraceCache& cache) {
  std::map<std::string, const SweepCell*> spec_cells;
  for (const auto& c : spec.cells) spec_cells[c.name] = &c;
  std::vector<report::LossCell> out;
  for (const auto& stored : store.cells()) {
    report::LossCell cell;
    cell.name = stored.name;
    cell.reference = stored.role == "reference";
    cell.reference_of = stored.reference;
    cell.trace = cache.trace(stored.id);
    cell.problem = cache.problem(stored.id);
    const auto sc = spec_cells.find(stored.name);
    const nlohmann::json params = sc != spec_cells.end() ? sc->second->params : nlohmann::json::object();
    std::string condition;
    for (auto& [k, v] : params.items()) {
      if (k == "target.policy" || k == "target.sr_bits" || k == "target.sr_stream" || k == "seed") continue;
      condition += (condition.empty() ? "" : ", ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    cell.condition = condition;
    if (params.contains("seed")) {
      cell.seed = params["seed"].is_string() ? params["seed"].get<std::string>() : params["seed"].dump();
    } else if (stored.config.contains("seed")) {
      cell.seed = stored.config["seed"].dump();
    }
    if (cell.reference) {
      cell.policy = "fp32";
    } else {
      const auto& target = stored.config.value("target", nlohmann::json::object());
      const std::string policy = target.value("policy", std::string("nearest"));
      const int bits = target.value("sr_bits", 0);
      try {
        cell.policy = sim::projection_name(sim::make_policy(policy, bits));
      } catch (const std::exception&) {
        cell.policy = policy;
      }
      const std::string stream = target.value("sr_stream", std::string("philox"));
      if (stream != "philox") {  // the same policy from another random stream is its own row
        cell.policy += " (" + stream + ")";
      }
    }
    out.push_back(std::move(cell));
  }
  return out;
}

}  // namespace

std::string early_crossing_warning(const std::string& cell_name, const sim::Trace& target,
                                   const std::vector<std::string>& groups, double threshold,
                                   std::int64_t min_group_size, std::int64_t burn_in) {
  std::ostringstream found;
  int count = 0;
  for (const auto& g : target.groups) {
    if (groups.empty() ? g.size < min_group_size : std::find(groups.begin(), groups.end(), g.name) == groups.end())
      continue;
    for (std::size_t t = 0; t < target.recorded_steps.size() && t < g.erased_fraction.size(); ++t) {
      if (t >= kEarlyRecordedSteps && target.recorded_steps[t] > burn_in) break;
      if (!(g.erased_fraction[t] >= threshold)) continue;  // NaN (no proposal) is not a crossing
      found << (count++ ? ", " : "") << g.name << " " << std::setprecision(3) << g.erased_fraction[t] << " at step "
            << target.recorded_steps[t];
      break;
    }
  }
  if (count == 0) return {};
  std::ostringstream out;
  out << cell_name << ": erased fraction at or above the threshold " << threshold << " by the burn-in (step " << burn_in
      << ") or within the first " << kEarlyRecordedSteps << " recorded steps (" << found.str()
      << "): above the threshold at initialization or crossing before its trajectory is resolved, which leaves "
         "little to forecast; lower optimizer.lr_scale, raise the weights' scale (weights below the format's min "
         "normal erase most updates), or record more early steps (docs/specs.md)";
  return out.str();
}

void print_outputs(std::ostream& out, const SweepOutputs& outputs) {
  out << "crossings: " << outputs.crossing_summary << "\n";
  if (!outputs.loss_headline.empty()) out << outputs.loss_headline << "\n";
  out << "summary:   " << outputs.summary_csv.string() << "\n"
      << "report:    " << outputs.report_html.string() << "\n";
  if (!outputs.loss_html.empty()) out << "losses:    " << outputs.loss_html.string() << "\n";
}

SweepOutputs write_sweep_outputs(const SweepStore& store, const SweepSpec& spec) {
  store.require_no_links("write the report of");
  SweepOutputs outputs;
  TraceCache cache(store);
  SweepEvaluationCells read = read_sweep_evaluation_cells(store, spec, cache);
  const std::vector<SweepEvaluationCell>& cells = read.cells;
  const std::vector<std::string>& missing = read.missing;
  std::vector<CellSeries> series;
  for (const auto& c : cells) {
    const forecast::Series projected = forecast::projected_series(*c.reference_trace, c.group, c.format, c.projection);
    CellSeries cs;
    cs.steps = c.target_trace->recorded_steps;
    cs.measured = c.target_trace->group(c.group).erased_fraction;
    cs.predicted = forecast::align_series(projected.steps, projected.values, cs.steps, forecast::OutOfRange::missing);
    series.push_back(std::move(cs));
  }
  outputs.evaluation_cells = cells.size();
  outputs.missing_targets = missing.size();

  // Crossing comparison, one row per evaluation cell.
  forecast::CrossingOptions options;
  options.threshold = spec.evaluation.threshold;
  const BurnIn burn_in = crossing_burn_in(spec);
  options.burn_in = burn_in.steps;
  options.min_group_size = spec.evaluation.min_group_size;
  options.tolerance = spec.evaluation.tolerance;
  std::vector<forecast::CellCrossing> crossings;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const auto& cs = series[i];
    crossings.push_back(forecast::compare_cell_crossing(cells[i].label, cs.steps, cs.predicted, cs.steps, cs.measured,
                                                        options, cells[i].target_trace->group(cells[i].group).size));
  }
  const forecast::CrossingSummary summary = forecast::summarize_crossings(crossings, options);
  report::CrossingReport rep;
  rep.sweep_name = spec.name;
  rep.description = spec.description;
  auto& t = rep.totals;
  t.cells = summary.cells;
  t.both = summary.both_cross;
  t.within = summary.within_tolerance;
  t.differ = summary.differ_in_category;
  t.neither = summary.neither;
  t.above_at_init = summary.measured_above_at_init + summary.both_above_at_init;
  t.span = summary.measured_span;
  t.threshold = options.threshold;
  t.tolerance = options.tolerance;
  t.burn_in = burn_in.steps;
  t.burn_in_how = burn_in.how;
  t.min_group_size = summary.min_group_size;
  t.below_min_group_size = summary.below_min_group_size;
  t.measured_recrossing = summary.measured_recrossing;
  t.predicted_recrossing = summary.predicted_recrossing;
  for (const auto& d : summary.by_decade)
    t.decades.push_back({d.lo, d.hi, d.measured_crossing, d.both_cross, d.within_tolerance, d.median_relative_error});
  for (std::size_t i = 0; i < crossings.size(); ++i) {
    const auto& c = crossings[i];
    report::CrossingRow row;
    row.cell = cells[i].label;
    row.format = cells[i].format;
    row.category = forecast::to_string(c.category);
    row.measured = c.measured.status == forecast::CrossingStatus::crossed ? c.measured.time : NAN;
    row.predicted = c.predicted.status == forecast::CrossingStatus::crossed ? c.predicted.time : NAN;
    row.relative_error = c.relative_error;
    row.within_tolerance = c.within_tolerance;
    row.group_size = c.group_size;
    row.below_min_group_size = c.below_min_group_size;
    row.measured_recrossings = c.measured.status == forecast::CrossingStatus::crossed ? c.measured.recrossings : 0;
    rep.rows.push_back(row);
  }
  outputs.crossing_summary = summary.to_string();

  // summary.csv: one row per evaluation cell; trajectories.csv: long format (cell, step, measured, predicted).
  std::set<std::string> param_keys;
  for (auto& cell : cells)
    for (auto& [k, v] : cell.params.items()) param_keys.insert(k);
  std::ostringstream csv;
  csv << "cell,target,target_id,reference,reference_id,group,format,policy,projection";
  for (auto& k : param_keys) csv << "," << csv_field(k);
  csv << ",category,measured_status,predicted_status,measured_crossing,predicted_crossing,relative_error,"
         "within_tolerance,measured_at_burn_in,predicted_at_burn_in,measured_final,predicted_final\n";
  std::ostringstream traj;
  traj << "cell,step,measured,predicted\n";
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const auto& cell = cells[i];
    const auto& cs = series[i];
    const auto& c = crossings[i];
    csv << csv_field(cell.label) << "," << csv_field(cell.target->name) << "," << cell.target->id << ","
        << csv_field(cell.reference->name) << "," << cell.reference->id << "," << cell.group << "," << cell.format
        << "," << cell.policy << "," << cell.projection;
    for (auto& k : param_keys) {
      csv << ",";
      if (cell.params.contains(k)) {
        const auto& v = cell.params[k];
        csv << csv_field(v.is_string() ? v.get<std::string>() : v.dump());
      }
    }
    csv << "," << forecast::to_string(c.category) << "," << forecast::to_string(c.measured.status) << ","
        << forecast::to_string(c.predicted.status) << "," << csv_number(rep.rows[i].measured) << ","
        << csv_number(rep.rows[i].predicted) << "," << csv_number(c.relative_error) << ","
        << (c.within_tolerance ? "true" : "false") << "," << csv_number(c.measured.value_at_burn_in) << ","
        << csv_number(c.predicted.value_at_burn_in) << "," << csv_number(cs.measured.back()) << ","
        << csv_number(cs.predicted.back()) << "\n";
    for (std::size_t k = 0; k < cs.steps.size(); ++k) {
      traj << csv_field(cell.label) << "," << cs.steps[k] << "," << csv_number(cs.measured[k]) << ","
           << csv_number(cs.predicted[k]) << "\n";
    }
  }
  outputs.summary_csv = store.dir() / "summary.csv";
  outputs.trajectories_csv = store.dir() / "trajectories.csv";
  write_file_atomic(outputs.summary_csv, csv.str());
  write_file_atomic(outputs.trajectories_csv, traj.str());

  // Trajectory panels, chosen by a stated rule: the earliest, median and latest measured crossings, the
  // kWorst worst-predicted both-cross cells (largest relative error), and every category disagreement up to
  // kDisagreements (in cell order). Cells below the minimum group size are not chosen.
  constexpr std::size_t kWorst = 3, kDisagreements = 8;
  rep.panel_rule = "the earliest, median and latest measured crossings; the " + std::to_string(kWorst) +
                   " worst-predicted cells that both cross (largest relative error); and every cell whose measured "
                   "and predicted categories differ, up to " +
                   std::to_string(kDisagreements) + " (in cell order; " + std::to_string(summary.differ_in_category) +
                   " differ in all). Cells below the minimum group size are not chosen.";
  std::vector<std::size_t> crossing_order, worst;
  for (std::size_t i = 0; i < crossings.size(); ++i) {
    if (crossings[i].below_min_group_size) continue;
    if (crossings[i].measured.status == forecast::CrossingStatus::crossed) crossing_order.push_back(i);
    if (crossings[i].category == forecast::CrossingCategory::both_cross) worst.push_back(i);
  }
  std::sort(crossing_order.begin(), crossing_order.end(),
            [&](std::size_t a, std::size_t b) { return crossings[a].measured.time < crossings[b].measured.time; });
  std::stable_sort(worst.begin(), worst.end(), [&](std::size_t a, std::size_t b) {
    return crossings[a].relative_error > crossings[b].relative_error;
  });
  std::vector<std::pair<std::size_t, std::string>> picks;
  if (!crossing_order.empty()) {
    picks.push_back({crossing_order.front(), "earliest measured crossing"});
    picks.push_back({crossing_order[crossing_order.size() / 2], "median measured crossing"});
    picks.push_back({crossing_order.back(), "latest measured crossing"});
  }
  for (std::size_t k = 0; k < worst.size() && k < kWorst; ++k) {
    std::ostringstream why;
    why << "worst predicted #" << k + 1 << ": relative error " << std::fixed << std::setprecision(1)
        << 100 * crossings[worst[k]].relative_error << "%";
    picks.push_back({worst[k], why.str()});
  }
  std::size_t disagreements = 0;
  for (std::size_t i = 0; i < crossings.size() && disagreements < kDisagreements; ++i) {
    if (!crossings[i].differs || crossings[i].below_min_group_size) continue;
    picks.push_back({i, "category disagreement"});
    ++disagreements;
  }
  std::map<std::size_t, std::string> reasons;  // one panel per cell, naming every rule that chose it
  std::vector<std::size_t> order;
  for (auto& [i, why] : picks) {
    if (reasons.contains(i)) {
      reasons[i] += "; " + why;
    } else {
      reasons[i] = why;
      order.push_back(i);
    }
  }
  for (auto i : order) {
    report::TrajectoryPanel panel;
    panel.title = cells[i].label + " [" + forecast::to_string(crossings[i].category) + "]";
    panel.why = reasons[i];
    panel.steps.assign(series[i].steps.begin(), series[i].steps.end());
    panel.measured = series[i].measured;
    panel.predicted = series[i].predicted;
    rep.panels.push_back(std::move(panel));
  }
  rep.links = {{"summary.csv", "../summary.csv"}, {"trajectories.csv", "../trajectories.csv"}};
  for (const auto& entry : fs_list_evaluations(store.dir()))
    rep.links.push_back({"skill report " + entry, "../evaluations/" + entry + "/report.html"});

  rep.facts = {{"sweep directory", store.dir().string()},
               {"spec SHA-256", store.spec_sha256()},
               {"binary SHA-256", store.binary_sha256()},
               {"created", store.created()},
               {"target runs", std::to_string(spec.count(CellRole::target))},
               {"fp32 reference runs", std::to_string(spec.count(CellRole::reference))},
               {"evaluation cells (target run x group)", std::to_string(cells.size())},
               {"predictor",
                "source: the fp32 reference trace (same seed, init and data) projected under each target's own "
                "write-back policy: exact projected events for nearest, the exact expected erased fraction for "
                "stochastic and deadzone-sr (column `projection` of summary.csv)"}};
  {
    std::map<std::string, int> counts;
    std::string notes;
    for (auto& c : cells) {
      ++counts[c.projection];
      if (!c.projection_note.empty()) notes += (notes.empty() ? "" : "; ") + c.label + ": " + c.projection_note;
    }
    std::string text;
    for (auto& [name, n] : counts) text += (text.empty() ? "" : ", ") + name + " for " + std::to_string(n) + " cells";
    rep.facts.emplace_back("projections", text + (notes.empty() ? "" : "; " + notes));
  }
  if (!missing.empty()) {
    std::string list;
    for (auto& m : missing) list += (list.empty() ? "" : "; ") + m;
    rep.facts.emplace_back("target runs left out (no canonical complete trace)", list);
  }
  // Loss studies (studies 2, 5 and 6): written when any run has validation losses; the main report links them.
  const std::vector<report::LossCell> runs = loss_cells(store, spec, cache);
  const report::LossStudy losses = report::analyze_losses(runs);
  if (!losses.empty()) {
    const auto files = report::write_loss_report(losses, runs, spec.name, store.dir(), store.dir() / "report");
    outputs.loss_html = files.html;
    outputs.loss_headline = report::loss_headline(losses);
    rep.links.push_back({"loss report (studies 2, 5, 6)", "loss.html"});
  }
  outputs.report_html = report::write_crossing_report(rep, store.dir() / "report");
  store.record_outputs();  // their hashes, signed: status names an edited summary.csv or report
  return outputs;
}

}  // namespace wbaudit::runners
