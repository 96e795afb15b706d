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
#include "runners/evaluate/loss_study.hpp"
#include "runners/evaluate/sweep_cells.hpp"
#include "runners/report/block_report.hpp"
#include "runners/report/crossing_report.hpp"
#include "runners/report/loss_report.hpp"
#include "sim/trace/trace.hpp"
#include "util/csv.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace {

// The skill reports already written into DIR/evaluations/ (by name), for the crossing report's links.
std::vector<std::string> fs_list_evaluations(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "evaluations", ec)) {
    if (entry.is_directory() && entry.path().filename().string().front() != '.' &&
        std::filesystem::exists(entry.path() / "report.html")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// One evaluation cell's trajectories on the target's recorded steps: measured, and projected from the reference.
struct CellSeries {
  std::vector<std::int64_t> steps;
  std::vector<double> measured, predicted;
};

// The evaluation cells of the sweep with their trajectories and crossings, under the spec's crossing settings.
struct CrossingStudy {
  SweepEvaluationCells read;
  std::vector<CellSeries> series;
  forecast::CrossingOptions options;
  BurnIn burn_in;
  std::vector<forecast::CellCrossing> crossings;
  forecast::CrossingSummary summary;
};

CrossingStudy crossing_study(const SweepStore& store, const SweepSpec& spec, TraceCache& cache) {
  CrossingStudy s{read_sweep_evaluation_cells(store, spec, cache), {}, {}, crossing_burn_in(spec), {}, {}};
  for (const auto& c : s.read.cells) {
    const forecast::Series projected = forecast::projected_series(*c.reference_trace, c.group, c.format, c.projection);
    CellSeries cs;
    cs.steps = c.target_trace->recorded_steps;
    cs.measured = c.target_trace->group(c.group).erased_fraction;
    cs.predicted = forecast::align_series(projected.steps, projected.values, cs.steps, forecast::OutOfRange::missing);
    s.series.push_back(std::move(cs));
  }
  s.options.threshold = spec.evaluation.threshold;
  s.options.burn_in = s.burn_in.steps;
  s.options.min_group_size = spec.evaluation.min_group_size;
  s.options.tolerance = spec.evaluation.tolerance;
  const auto& cells = s.read.cells;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const auto& cs = s.series[i];
    s.crossings.push_back(forecast::compare_cell_crossing(cells[i].label, cs.steps, cs.predicted, cs.steps, cs.measured,
                                                          s.options,
                                                          cells[i].target_trace->group(cells[i].group).size));
  }
  s.summary = forecast::summarize_crossings(s.crossings, s.options);
  return s;
}

report::CrossingTotals crossing_totals(const CrossingStudy& s) {
  const auto& summary = s.summary;
  report::CrossingTotals t;
  t.cells = summary.cells;
  t.both = summary.both_cross;
  t.within = summary.within_tolerance;
  t.differ = summary.differ_in_category;
  t.neither = summary.neither;
  t.above_at_init = summary.measured_above_at_init + summary.both_above_at_init;
  t.span = summary.measured_span;
  t.threshold = s.options.threshold;
  t.tolerance = s.options.tolerance;
  t.burn_in = s.burn_in.steps;
  t.burn_in_how = s.burn_in.how;
  t.min_group_size = summary.min_group_size;
  t.below_min_group_size = summary.below_min_group_size;
  t.measured_recrossing = summary.measured_recrossing;
  t.predicted_recrossing = summary.predicted_recrossing;
  for (const auto& d : summary.by_decade) {
    t.decades.push_back({d.lo, d.hi, d.measured_crossing, d.both_cross, d.within_tolerance, d.median_relative_error});
  }
  return t;
}

std::vector<report::CrossingRow> crossing_rows(const CrossingStudy& s) {
  std::vector<report::CrossingRow> rows;
  for (std::size_t i = 0; i < s.crossings.size(); ++i) {
    const auto& c = s.crossings[i];
    const bool measured = c.measured.status == forecast::CrossingStatus::crossed;
    report::CrossingRow row;
    row.cell = s.read.cells[i].label;
    row.format = s.read.cells[i].format;
    row.category = forecast::to_string(c.category);
    row.measured = measured ? c.measured.time : NAN;
    row.predicted = c.predicted.status == forecast::CrossingStatus::crossed ? c.predicted.time : NAN;
    row.relative_error = c.relative_error;
    row.within_tolerance = c.within_tolerance;
    row.group_size = c.group_size;
    row.below_min_group_size = c.below_min_group_size;
    row.measured_recrossings = measured ? c.measured.recrossings : 0;
    rows.push_back(row);
  }
  return rows;
}

// summary.csv: one row per evaluation cell, with every grid parameter and the crossing comparison.
std::string summary_csv(const CrossingStudy& s, const std::vector<report::CrossingRow>& rows) {
  const auto& cells = s.read.cells;
  std::set<std::string> param_keys;
  for (const auto& cell : cells) {
    for (const auto& [k, v] : cell.params.items()) {
      param_keys.insert(k);
    }
  }
  std::vector<std::string> header = {"cell",  "target", "target_id", "reference", "reference_id",
                                     "group", "format", "policy",    "projection"};
  header.insert(header.end(), param_keys.begin(), param_keys.end());
  for (const auto* h :
       {"category", "measured_status", "predicted_status", "measured_crossing", "predicted_crossing", "relative_error",
        "within_tolerance", "measured_at_burn_in", "predicted_at_burn_in", "measured_final", "predicted_final"}) {
    header.emplace_back(h);
  }
  util::CsvWriter csv(header);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const auto& cell = cells[i];
    const auto& cs = s.series[i];
    const auto& c = s.crossings[i];
    csv.field(cell.label).field(cell.target->name).field(cell.target->id).field(cell.reference->name);
    csv.field(cell.reference->id).field(cell.group).field(cell.format).field(cell.policy).field(cell.projection);
    for (const auto& k : param_keys) {
      const auto& v = cell.params.contains(k) ? cell.params[k] : nlohmann::json();
      csv.field(v.is_null() ? std::string() : v.is_string() ? v.get<std::string>() : v.dump());
    }
    csv.field(std::string(forecast::to_string(c.category))).field(std::string(forecast::to_string(c.measured.status)));
    csv.field(std::string(forecast::to_string(c.predicted.status)));
    csv.number(rows[i].measured).number(rows[i].predicted).number(c.relative_error);
    csv.field(c.within_tolerance ? "true" : "false").number(c.measured.value_at_burn_in);
    csv.number(c.predicted.value_at_burn_in).number(cs.measured.back()).number(cs.predicted.back()).end_row();
  }
  return csv.text();
}

// trajectories.csv: long format (cell, step, measured, predicted).
std::string trajectories_csv(const CrossingStudy& s) {
  util::CsvWriter csv({"cell", "step", "measured", "predicted"});
  for (std::size_t i = 0; i < s.read.cells.size(); ++i) {
    const auto& cs = s.series[i];
    for (std::size_t k = 0; k < cs.steps.size(); ++k) {
      csv.field(s.read.cells[i].label).integer(cs.steps[k]).number(cs.measured[k]).number(cs.predicted[k]).end_row();
    }
  }
  return csv.text();
}

// Trajectory panels, chosen by a stated rule: the earliest, median and latest measured crossings, the kWorst
// worst-predicted both-cross cells (largest relative error), and every category disagreement up to kDisagreements
// (in cell order). Cells below the minimum group size are not chosen.
constexpr std::size_t kWorst = 3, kDisagreements = 8;

std::vector<std::pair<std::size_t, std::string>> panel_picks(const std::vector<forecast::CellCrossing>& crossings) {
  std::vector<std::size_t> crossing_order;
  std::vector<std::size_t> worst;
  for (std::size_t i = 0; i < crossings.size(); ++i) {
    if (crossings[i].below_min_group_size) {
      continue;
    }
    if (crossings[i].measured.status == forecast::CrossingStatus::crossed) {
      crossing_order.push_back(i);
    }
    if (crossings[i].category == forecast::CrossingCategory::both_cross) {
      worst.push_back(i);
    }
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
    if (!crossings[i].differs || crossings[i].below_min_group_size) {
      continue;
    }
    picks.push_back({i, "category disagreement"});
    ++disagreements;
  }
  return picks;
}

// One panel per chosen cell, naming every rule that chose it.
std::vector<report::TrajectoryPanel> trajectory_panels(const CrossingStudy& s) {
  std::map<std::size_t, std::string> reasons;
  std::vector<std::size_t> order;
  for (const auto& [i, why] : panel_picks(s.crossings)) {
    if (reasons.contains(i)) {
      reasons[i] += "; " + why;
    } else {
      reasons[i] = why;
      order.push_back(i);
    }
  }
  std::vector<report::TrajectoryPanel> panels;
  for (auto i : order) {
    report::TrajectoryPanel panel;
    panel.title = s.read.cells[i].label + " [" + forecast::to_string(s.crossings[i].category) + "]";
    panel.why = reasons[i];
    panel.steps.assign(s.series[i].steps.begin(), s.series[i].steps.end());
    panel.measured = s.series[i].measured;
    panel.predicted = s.series[i].predicted;
    panels.push_back(std::move(panel));
  }
  return panels;
}

std::string panel_rule(const CrossingStudy& s) {
  return "the earliest, median and latest measured crossings; the " + std::to_string(kWorst) +
         " worst-predicted cells that both cross (largest relative error); and every cell whose measured "
         "and predicted categories differ, up to " +
         std::to_string(kDisagreements) + " (in cell order; " + std::to_string(s.summary.differ_in_category) +
         " differ in all). Cells below the minimum group size are not chosen.";
}

// The facts at the top of the crossing report: provenance, sizes, the predictor and its projections.
std::vector<std::pair<std::string, std::string>> report_facts(const SweepStore& store, const SweepSpec& spec,
                                                              const CrossingStudy& s) {
  const auto& cells = s.read.cells;
  std::vector<std::pair<std::string, std::string>> facts = {
      {"sweep directory", store.dir().string()},
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
  std::map<std::string, int> counts;
  std::string notes;
  for (const auto& c : cells) {
    ++counts[c.projection];
    if (!c.projection_note.empty()) {
      notes += (notes.empty() ? "" : "; ") + c.label + ": " + c.projection_note;
    }
  }
  std::string text;
  for (const auto& [name, n] : counts) {
    text += (text.empty() ? "" : ", ") + name + " for " + std::to_string(n) + " cells";
  }
  facts.emplace_back("projections", text + (notes.empty() ? "" : "; " + notes));
  if (!s.read.missing.empty()) {
    facts.emplace_back("target runs left out (no canonical complete trace)", util::join(s.read.missing, "; "));
  }
  return facts;
}

}  // namespace

void print_outputs(std::ostream& out, const SweepOutputs& outputs) {
  out << "crossings: " << outputs.crossing_summary << "\n";
  if (!outputs.loss_headline.empty()) {
    out << outputs.loss_headline << "\n";
  }
  if (!outputs.blocks_headline.empty()) {
    out << outputs.blocks_headline << "\n";
  }
  out << "summary:   " << outputs.summary_csv.string() << "\n"
      << "report:    " << outputs.report_html.string() << "\n";
  if (!outputs.loss_html.empty()) {
    out << "losses:    " << outputs.loss_html.string() << "\n";
  }
  if (!outputs.blocks_html.empty()) {
    out << "blocks:    " << outputs.blocks_html.string() << "\n";
  }
}

SweepOutputs write_sweep_outputs(const SweepStore& store, const SweepSpec& spec) {
  store.require_no_links("write the report of");
  SweepOutputs outputs;
  TraceCache cache(store, /*histograms=*/false);  // the report reads counts and projections only
  const CrossingStudy study = crossing_study(store, spec, cache);
  outputs.evaluation_cells = study.read.cells.size();
  outputs.missing_targets = study.read.missing.size();
  outputs.crossing_summary = study.summary.to_string();

  report::CrossingReport rep;
  rep.sweep_name = spec.name;
  rep.description = spec.description;
  rep.totals = crossing_totals(study);
  rep.rows = crossing_rows(study);
  outputs.summary_csv = store.dir() / "summary.csv";
  outputs.trajectories_csv = store.dir() / "trajectories.csv";
  write_file_atomic(outputs.summary_csv, summary_csv(study, rep.rows));
  write_file_atomic(outputs.trajectories_csv, trajectories_csv(study));
  rep.panel_rule = panel_rule(study);
  rep.panels = trajectory_panels(study);
  rep.links = {{"summary.csv", "../summary.csv"}, {"trajectories.csv", "../trajectories.csv"}};
  for (const auto& entry : fs_list_evaluations(store.dir())) {
    rep.links.push_back({"skill report " + entry, "../evaluations/" + entry + "/report.html"});
  }
  rep.facts = report_facts(store, spec, study);
  // Loss studies (studies 2, 5 and 6): written when any run has validation losses; the main report links them.
  const std::vector<report::LossCell> runs = loss_cells(store, spec, cache);
  const report::LossStudy losses = analyze_losses(runs);
  if (!losses.empty()) {
    const auto files = report::write_loss_report(losses, runs, spec.name, store.dir(), store.dir() / "report");
    outputs.loss_html = files.html;
    outputs.loss_headline = report::loss_headline(losses);
    rep.links.push_back({"loss report (studies 2, 5, 6)", "loss.html"});
  }
  // Block-scaled formats (study 7): written when some target run holds a group in a block format.
  const report::BlockStudy blocks = report::analyze_blocks(runs, loss_bootstrap_spec());
  if (!blocks.empty()) {
    const auto files = report::write_block_report(blocks, spec.name, store.dir(), store.dir() / "report");
    outputs.blocks_html = files.html;
    outputs.blocks_headline = report::block_headline(blocks);
    rep.links.push_back({"block-scaled formats (study 7)", "blocks.html"});
  }
  outputs.report_html = report::write_crossing_report(rep, store.dir() / "report");
  store.record_outputs();  // their hashes, signed: status names an edited summary.csv or report
  return outputs;
}

}  // namespace wbaudit::runners
