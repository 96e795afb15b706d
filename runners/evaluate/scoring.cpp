#include "runners/evaluate/scoring.hpp"

#include <algorithm>
#include <set>

#include "forecast/crossing.hpp"
#include "forecast/error.hpp"
#include "stats/bootstrap_tables.hpp"
#include "stats/error.hpp"
#include "stats/statistic_table.hpp"
#include "stats/table_predicates.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace {

constexpr const char* kShares[3] = {"share_time", "share_cell", "share_residual"};

bool is_baseline(const AnalysisSpec& analysis, const std::string& name) {
  return std::find(analysis.baselines.begin(), analysis.baselines.end(), name) != analysis.baselines.end();
}

// Interval of a bootstrap, or the reason it could not be computed.
template <class F>
void interval_or_reason(const std::string& statistic, PredictorEvaluation& p, F&& compute) {
  try {
    p.intervals[statistic] = compute();
  } catch (const stats::StatsError& e) {
    p.undefined[statistic] = e.what();
  }
}

// The three decomposition shares, each with its own interval or its own reason (prefix "" or "error_").
void share_intervals(const std::string& prefix, const stats::DecompositionShareIntervals& ci,
                     std::map<std::string, stats::Interval>& intervals, std::map<std::string, std::string>& undefined) {
  for (std::size_t k = 0; k < 3; ++k) {
    if (ci.shares[k]) {
      intervals[prefix + kShares[k]] = *ci.shares[k];
    } else {
      undefined[prefix + kShares[k]] = ci.reasons[k];
    }
  }
}

void record_shares(const std::string& prefix, const std::optional<stats::Decomposition>& d,
                   std::map<std::string, double>& estimates) {
  estimates[prefix + "share_time"] = d ? d->share_time : NAN;
  estimates[prefix + "share_cell"] = d ? d->share_cell : NAN;
  estimates[prefix + "share_residual"] = d ? d->share_residual : NAN;
}

// bias, mae, rmse_macro, rmse_pooled (stats/metrics.hpp) with their intervals.
void score_accuracy(const ScoringContext& ctx, const stats::CellTable& P, PredictorEvaluation& p) {
  const auto& Y = ctx.tables.outcome;
  const auto policy = ctx.analysis.missing;
  p.metrics = stats::evaluate_metrics(P, Y, policy);
  p.estimates["bias"] = p.metrics.bias;
  p.estimates["mae"] = p.metrics.mae;
  p.estimates["rmse_macro"] = p.metrics.rmse_macro;
  p.estimates["rmse_pooled"] = p.metrics.rmse_pooled;
  for (const auto* m : {"bias", "mae", "rmse_macro", "rmse_pooled"}) {
    interval_or_reason(m, p, [&] {
      return stats::bootstrap_metric(stats::table_metric_from_name(m), P, Y, ctx.analysis.bootstrap, ctx.unit_of_cell,
                                     policy, stats::PostOutcome{p.post_outcome, false});
    });
  }
}

// skill_vs_<baseline> = 1 - sum MSE_P / sum MSE_B for every baseline other than the predictor itself.
void score_skill(const ScoringContext& ctx, const stats::CellTable& P, PredictorEvaluation& p) {
  const auto& Y = ctx.tables.outcome;
  const auto policy = ctx.analysis.missing;
  for (const auto& b : ctx.analysis.baselines) {
    if (b == p.name) {
      continue;
    }
    const std::string key = stats::skill_statistic(b);
    if (auto it = ctx.baseline_unavailable.find(b); it != ctx.baseline_unavailable.end()) {
      p.undefined[key] = it->second;
      continue;
    }
    const auto& B = ctx.tables.predictor(b).table;
    try {
      p.skill[b] = stats::evaluate_skill(P, B, Y, policy).skill;
    } catch (const stats::StatsError& e) {
      p.undefined[key] = e.what();
      continue;
    }
    p.estimates[key] = p.skill[b];
    interval_or_reason(key, p, [&] {
      return stats::bootstrap_skill(P, B, Y, ctx.analysis.bootstrap, ctx.unit_of_cell, policy,
                                    stats::PostOutcome{p.post_outcome, ctx.tables.predictor(b).post_outcome});
    });
  }
}

// Sign agreement of the cells' mean anomalies, its binomial p-value and the anomaly correlations.
void score_directional(const ScoringContext& ctx, const stats::CellTable& P, PredictorEvaluation& p) {
  stats::DirectionalOptions dopt;
  dopt.missing_policy = ctx.analysis.missing;
  const auto& d = p.directional = stats::directional_specificity(P, ctx.tables.outcome, dopt);
  p.estimates["sign_agreement_rate"] = d.sign_agreement_rate.value_or(NAN);
  p.notes["sign_agreement_rate"] =
      "k=" + std::to_string(d.n_sign_agree) + " of n=" + std::to_string(d.n_directional) + " directional cells";
  p.estimates["binomial_p_value"] = d.binomial_p_value;
  p.notes["binomial_p_value"] =
      d.significant ? "significant at alpha=" + util::number_text(d.alpha, 6) : "not significant";
  p.estimates["anomaly_correlation"] = d.anomaly_correlation.value_or(NAN);
  p.estimates["cell_anomaly_correlation"] = d.cell_anomaly_correlation.value_or(NAN);
  if (stats::anomaly_field_is_zero(P.values)) {
    p.directional_note =
        "its anomaly field is exactly zero (the predictor has the same value for every cell at "
        "each step), so no cell is directional and the anomaly correlations are undefined";
  }
  try {
    auto ci = stats::bootstrap_directional(P, ctx.tables.outcome, ctx.analysis.bootstrap, ctx.unit_of_cell, dopt);
    p.intervals["sign_agreement_rate"] = ci.sign_agreement_rate;
    p.intervals["anomaly_correlation"] = ci.anomaly_correlation;
    p.intervals["cell_anomaly_correlation"] = ci.cell_anomaly_correlation;
  } catch (const stats::StatsError& e) {
    for (const auto* s : {"sign_agreement_rate", "anomaly_correlation", "cell_anomaly_correlation"}) {
      p.undefined[s] = e.what();
    }
  }
}

// The run-level directional statistics: anomalies within each parameter group, across its runs.
void score_run_directional(const ScoringContext& ctx, const stats::CellTable& P, PredictorEvaluation& p) {
  stats::DirectionalOptions dopt;
  dopt.missing_policy = ctx.analysis.missing;
  dopt.groups = ctx.group_of_cell;
  const std::vector<std::string> names = {"run_sign_agreement_rate", "run_anomaly_correlation",
                                          "run_cell_anomaly_correlation"};
  const auto& d = p.run_directional = stats::directional_specificity(P, ctx.tables.outcome, dopt);
  p.estimates["run_sign_agreement_rate"] = d.sign_agreement_rate.value_or(NAN);
  p.notes["run_sign_agreement_rate"] =
      "k=" + std::to_string(d.n_sign_agree) + " of n=" + std::to_string(d.n_directional) + " directional cells";
  p.estimates["run_binomial_p_value"] = d.binomial_p_value;
  p.notes["run_binomial_p_value"] =
      d.significant ? "significant at alpha=" + util::number_text(d.alpha, 6) : "not significant";
  p.estimates["run_anomaly_correlation"] = d.anomaly_correlation.value_or(NAN);
  p.estimates["run_cell_anomaly_correlation"] = d.cell_anomaly_correlation.value_or(NAN);
  if (d.predictor_field_zero) {
    p.run_directional_note =
        "no run-specific signal: its run-level anomaly field (its value minus the mean over the runs of the same "
        "group at each step) is zero, so it cannot tell which runs of a group erase more";
    for (const auto& s : names) {
      p.failed[s] = p.run_directional_note;
    }
    return;
  }
  try {
    auto ci = stats::bootstrap_directional(P, ctx.tables.outcome, ctx.analysis.bootstrap, ctx.unit_of_cell, dopt);
    p.intervals["run_sign_agreement_rate"] = ci.sign_agreement_rate;
    p.intervals["run_anomaly_correlation"] = ci.anomaly_correlation;
    p.intervals["run_cell_anomaly_correlation"] = ci.cell_anomaly_correlation;
  } catch (const stats::StatsError& e) {
    for (const auto& s : names) {
      p.undefined[s] = std::string(e.what()) +
                       " (run level: a resample that draws the same run for every run of a group has no run-level "
                       "contrast; the interval needs more runs, or unit = \"cell\")";
    }
  }
}

// The common-time decomposition of the forecast error P - Y (absent when the error table is constant).
void score_error_decomposition(const ScoringContext& ctx, const stats::CellTable& P, PredictorEvaluation& p) {
  const auto& Y = ctx.tables.outcome;
  const auto policy = ctx.analysis.missing;
  try {
    p.error_decomposition = stats::decompose_forecast_error(P, Y, policy);
    share_intervals("error_",
                    stats::bootstrap_error_decomposition_shares(P, Y, ctx.analysis.bootstrap, ctx.unit_of_cell, policy,
                                                                stats::PostOutcome{p.post_outcome, false}),
                    p.intervals, p.undefined);
  } catch (const stats::StatsError& e) {
    p.error_decomposition_note = e.what();
    for (const auto* s : {"error_share_time", "error_share_cell", "error_share_residual"}) {
      p.undefined[s] = e.what();
    }
  }
  record_shares("error_", p.error_decomposition, p.estimates);
}

// Predicted vs measured crossings of the threshold, per cell and summarized (forecasts only).
void score_crossings(const ScoringContext& ctx, const stats::CellTable& P, PredictorEvaluation& p) {
  if (p.post_outcome) {
    return;
  }
  try {
    auto cmp = forecast::compare_crossings(P, ctx.tables.outcome, ctx.crossing, ctx.group_sizes);
    p.crossing = cmp.summary;
    p.crossings = std::move(cmp.cells);
  } catch (const forecast::ForecastError&) {
    // No crossing summary (e.g. every cell undetermined); the report says so.
  }
}

// A table identical to one already scored (e.g. matched-reference when the source is the declared, same-seed
// reference) has identical statistics: they are reused rather than every bootstrap rerun. Never for baselines.
const PredictorEvaluation* identical_scored(const ScoringContext& ctx, const std::string& name,
                                            const std::vector<PredictorEvaluation>& done) {
  const PredictorEvaluation* twin = nullptr;
  const auto& values = ctx.tables.predictor(name).table.values;
  for (const auto& other : done) {
    if (!other.unavailable.empty() || is_baseline(ctx.analysis, other.name) || is_baseline(ctx.analysis, name)) {
      continue;
    }
    if (stats::same_values(ctx.tables.predictor(other.name).table.values, values)) {
      twin = &other;
    }
  }
  return twin;
}

// The breakdown of rmse_macro and skill by grid factor, over the scored predictors.
std::vector<BreakdownRow> breakdown(const ScoringContext& ctx, const EvaluationResult& result) {
  std::vector<stats::NamedTable> predictors;
  for (const auto& p : result.predictors) {
    if (p.unavailable.empty()) {
      predictors.push_back({p.name, &ctx.tables.predictor(p.name).table});
    }
  }
  std::vector<stats::NamedTable> baselines;
  for (const auto& b : ctx.analysis.baselines) {
    baselines.push_back({b, &ctx.tables.predictor(b).table});
  }
  return stats::breakdown_by_factor(result.factors, ctx.tables.outcome, predictors, baselines);
}

// What the outcome kept and dropped under the missing policy (all of it without a decomposition).
void outcome_drops(EvaluationResult& result) {
  if (!result.outcome_decomposition) {
    result.kept_cells = result.cells.size();
    result.kept_steps = result.steps.size();
    return;
  }
  const auto& d = *result.outcome_decomposition;
  result.kept_cells = d.cells.size();
  result.kept_steps = d.steps.size();
  for (const auto& c : d.dropped_cells) {
    result.dropped.push_back({"outcome", "cell", c});
  }
  for (auto s : d.dropped_steps) {
    result.dropped.push_back({"outcome", "step", std::to_string(s)});
  }
}

}  // namespace

ScoringContext scoring_context(const AnalysisSpec& analysis, const forecast::EvaluationTables& tables,
                               EvaluationResult& result) {
  ScoringContext ctx{analysis, tables, {}, {}, {}, result.crossing_options, result.group_sizes};
  if (analysis.unit == BootstrapUnit::run) {
    ctx.unit_of_cell = result.runs;
  }
  ctx.group_of_cell = result.groups;
  const std::size_t runs = std::set<std::string>(result.runs.begin(), result.runs.end()).size();
  result.resampling_units = analysis.unit == BootstrapUnit::run ? runs : result.cells.size();
  if (analysis.unit == BootstrapUnit::cell && runs < result.cells.size()) {
    result.warnings.push_back(
        "bootstrap unit = \"cell\" resamples the " + std::to_string(result.cells.size()) +
        " cells as if independent, but they come from " + std::to_string(runs) +
        " target runs, and the parameter groups of one run share its trajectory (correlated cells): the intervals "
        "are too narrow; unit = \"run\" resamples the runs");
  }
  for (const auto& t : tables.predictors) {
    if (!t.missing_cells.empty()) {
      ctx.baseline_unavailable[t.name] = "template classes without history (declared inconclusive) for " +
                                         std::to_string(t.missing_cells.size()) +
                                         " cells: " + util::join(t.missing_cells);
    }
  }
  return ctx;
}

void decompose_outcome(const ScoringContext& ctx, EvaluationResult& result) {
  const auto policy = ctx.analysis.missing;
  try {
    result.outcome_decomposition = stats::decompose(ctx.tables.outcome, policy);
    share_intervals(
        "", stats::bootstrap_decomposition_shares(ctx.tables.outcome, ctx.analysis.bootstrap, ctx.unit_of_cell, policy),
        result.outcome_intervals, result.outcome_undefined);
  } catch (const stats::StatsError& e) {
    for (const auto* s : kShares) {
      result.outcome_undefined[s] = e.what();
    }
  }
  record_shares("", result.outcome_decomposition, result.outcome_estimates);
}

PredictorEvaluation score_predictor(const ScoringContext& ctx, const std::string& name,
                                    const std::vector<PredictorEvaluation>& done) {
  const forecast::PredictorTable& pt = ctx.tables.predictor(name);
  PredictorEvaluation p;
  p.name = name;
  p.privileged = pt.privileged;
  p.post_outcome = pt.post_outcome;
  if (auto it = ctx.baseline_unavailable.find(name); it != ctx.baseline_unavailable.end()) {
    p.unavailable = it->second;
    return p;
  }
  if (const PredictorEvaluation* twin = identical_scored(ctx, name, done)) {
    PredictorEvaluation copy = *twin;
    copy.name = p.name;
    copy.privileged = p.privileged;
    copy.post_outcome = p.post_outcome;
    copy.identical_to = twin->name;
    return copy;
  }
  score_accuracy(ctx, pt.table, p);
  score_skill(ctx, pt.table, p);
  score_directional(ctx, pt.table, p);
  score_run_directional(ctx, pt.table, p);
  score_error_decomposition(ctx, pt.table, p);
  score_crossings(ctx, pt.table, p);
  p.by_step = stats::rmse_by_step(pt.table, ctx.tables.outcome, ctx.unit_of_cell, ctx.analysis.bootstrap);
  return p;
}

void score_predictors(const ScoringContext& ctx, EvaluationResult& result) {
  for (const auto& name : ctx.analysis.predictors) {
    PredictorEvaluation p = score_predictor(ctx, name, result.predictors);
    if (p.unavailable.empty() && p.identical_to.empty()) {
      for (const auto& c : p.metrics.dropped_cells) {
        result.dropped.push_back({name, "cell", c});
      }
      for (auto s : p.metrics.dropped_steps) {
        result.dropped.push_back({name, "step", std::to_string(s)});
      }
    }
    result.predictors.push_back(std::move(p));
  }
  result.breakdown = breakdown(ctx, result);
  outcome_drops(result);
}

}  // namespace wbaudit::runners::evaluation
