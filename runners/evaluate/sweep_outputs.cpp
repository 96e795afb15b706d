#include "runners/evaluate/sweep_outputs.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "forecast/alignment.hpp"
#include "forecast/crossing.hpp"
#include "forecast/source.hpp"
#include "runners/evaluate/sweep_cells.hpp"
#include "runners/report/crossing_report.hpp"
#include "runners/report/loss_report.hpp"
#include "sim/precision/expected_erasure.hpp"
#include "sim/precision/policy.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace.hpp"
#include "util/csv.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace {

using util::csv_field;
using util::csv_number;

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

// One evaluation cell's trajectories on the target's recorded steps: measured, and projected from the reference.
struct CellSeries {
  std::vector<std::int64_t> steps;
  std::vector<double> measured, predicted;
};

}  // namespace

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
