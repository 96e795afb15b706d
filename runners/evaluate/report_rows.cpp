#include "runners/evaluate/report_rows.hpp"

#include <map>

#include "forecast/predictor_registry.hpp"
#include "stats/statistic_table.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace {

std::string find_or_empty(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

double estimate_of(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? NAN : it->second;
}

// The statistics a row of the table stands for in this predictor's rows: the skill family once per baseline other
// than the predictor itself, every other row once.
std::vector<std::string> row_names(const stats::StatisticDefinition& def, const EvaluationResult& r,
                                   const PredictorEvaluation& p) {
  if (!def.name.ends_with("<baseline>")) {
    return {std::string(def.name)};
  }
  std::vector<std::string> names;
  for (const auto& b : r.analysis.baselines) {
    if (b != p.name) {
      names.push_back(stats::skill_statistic(b));
    }
  }
  return names;
}

// One statistic of a scored predictor, shown as the statistic table says.
StatisticRow predictor_row(const PredictorEvaluation& p, const stats::StatisticDefinition& def,
                           const std::string& statistic) {
  StatisticRow row{p.name, predictor_label(p), statistic, estimate_of(p.estimates, statistic), nullptr, {}};
  const bool test = def.shown == stats::StatisticShown::test;
  if (def.run_level && !p.run_directional_note.empty()) {
    // No run-specific signal: a gate on it fails with this reason.
    row.estimate = test ? row.estimate : NAN;
    row.note = p.name + ": " + p.run_directional_note;
    return row;
  }
  if (def.directional && !def.run_level && !p.directional_note.empty()) {
    // The true reason, instead of the bootstrap's "no directional cell" on every resample.
    row.estimate = test ? row.estimate : NAN;
    row.note = p.name + ": " + p.directional_note;
    return row;
  }
  std::string note = find_or_empty(p.notes, statistic);
  if (test) {  // an exact test: its verdict is the note, and it has no interval
    row.note = note;
    return row;
  }
  if (!p.identical_to.empty()) {
    note = "same table as " + p.identical_to + (note.empty() ? "" : "; " + note);
  }
  if (auto it = p.intervals.find(statistic); it != p.intervals.end()) {
    row.ci = &it->second;
  }
  if (auto it = p.undefined.find(statistic); it != p.undefined.end()) {
    note += (note.empty() ? "" : "; ") + it->second;
  }
  row.note = note;
  return row;
}

}  // namespace

std::string predictor_label(const PredictorEvaluation& p) {
  return std::string(forecast::predictor_info(p.name).label);
}

std::vector<StatisticRow> statistic_rows(const EvaluationResult& r) {
  std::vector<StatisticRow> rows;
  for (const auto& def : stats::statistic_table()) {
    if (def.of != stats::StatisticOf::outcome) {
      continue;
    }
    const std::string s(def.name);
    StatisticRow row{"(outcome)", "outcome", s, estimate_of(r.outcome_estimates, s), nullptr, {}};
    if (auto it = r.outcome_intervals.find(s); it != r.outcome_intervals.end()) {
      row.ci = &it->second;
    }
    row.note = find_or_empty(r.outcome_undefined, s);
    rows.push_back(row);
  }
  for (const auto& p : r.predictors) {
    if (!p.unavailable.empty()) {
      rows.push_back({p.name, predictor_label(p), "(all)", NAN, nullptr, "not scored: " + p.unavailable});
      continue;
    }
    for (const auto& def : stats::statistic_table()) {
      if (def.of != stats::StatisticOf::predictor) {
        continue;
      }
      for (const auto& statistic : row_names(def, r, p)) {
        rows.push_back(predictor_row(p, def, statistic));
      }
    }
  }
  return rows;
}

const PredictorEvaluation* primary_predictor(const EvaluationResult& r) {
  for (const auto& p : r.predictors) {
    if (p.unavailable.empty() && !p.post_outcome) {
      return &p;
    }
  }
  return nullptr;
}

std::string projection_summary(const EvaluationResult& r) {
  if (r.source_method == "analytic-grid") {
    return "analytic grid for every cell ([source] method = \"analytic-grid\": the reference's joint (|w|, |u|) "
           "histogram at the target's format and learning-rate scale, round-to-nearest; docs/forecasting.md)";
  }
  std::map<std::string, int> counts;
  for (const auto& p : r.projections) {
    ++counts[p];
  }
  std::string out;
  for (const auto& [name, n] : counts) {
    out += (out.empty() ? "" : ", ") + name + " for " + std::to_string(n) + (n == 1 ? " cell" : " cells");
  }
  out +=
      " (each target scored against the projection of its own write-back policy: nearest = exact projected "
      "events, stochastic / deadzone-sr = expected erased fraction)";
  if (!r.projection_notes.empty()) {
    out += "; " + util::join(r.projection_notes, "; ");
  }
  return out;
}

std::string crossing_settings(const EvaluationResult& r) {
  const auto& o = r.crossing_options;
  return "threshold " + util::number_text(o.threshold, 6) + ", burn-in " + std::to_string(o.burn_in.value_or(0)) +
         " (" + r.burn_in_how + "), tolerance " + util::number_text(o.tolerance, 6) + ", minimum group size " +
         std::to_string(o.min_group_size) + " coordinates";
}

std::string ci_text(const stats::Interval* ci) {
  if (!ci) {
    return "";
  }
  return "[" + util::shown_number(ci->lower) + ", " + util::shown_number(ci->upper) + "]";
}

}  // namespace wbaudit::runners::evaluation
