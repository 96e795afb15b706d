#pragma once
// The scoring step of `wbaudit evaluate` (evaluate.cpp): the outcome's common-time decomposition, then each
// predictor the analysis names against the outcome — accuracy (bias, mae, rmse_macro, rmse_pooled), skill against
// each baseline, directional specificity, the decomposition of its error, crossings, rmse by step — each statistic
// with its bootstrap interval over the resampling units or the reason it has none; then the breakdown by grid factor.
// Definitions: stats/statistic_table.hpp, docs/statistics.md.
#include <map>
#include <string>
#include <vector>

#include "forecast/tables.hpp"
#include "runners/evaluate/evaluate.hpp"

namespace wbaudit::runners::evaluation {

struct ScoringContext {
  const AnalysisSpec& analysis;
  const forecast::EvaluationTables& tables;
  std::vector<std::string> unit_of_cell;   // per row: its resampling unit, the target run (empty: unit = cell)
  std::vector<std::string> group_of_cell;  // per row: its parameter group (run-level directional statistics)
  // Baselines whose table has rows without history (template classes declared inconclusive): why, by name.
  std::map<std::string, std::string> baseline_unavailable;
  const forecast::CrossingOptions& crossing;
  const std::vector<std::int64_t>& group_sizes;
};

// Sets result.resampling_units.
ScoringContext scoring_context(const AnalysisSpec& analysis, const forecast::EvaluationTables& tables,
                               EvaluationResult& result);

// Sets result.outcome_decomposition, outcome_estimates, outcome_intervals and outcome_undefined.
void decompose_outcome(const ScoringContext& ctx, EvaluationResult& result);

// One predictor: unavailable (a baseline without history), a copy of an identical table's statistics (`done`: the
// predictors scored before it), or scored. Throws stats::StatsError when its directional test cannot be computed.
PredictorEvaluation score_predictor(const ScoringContext& ctx, const std::string& name,
                                    const std::vector<PredictorEvaluation>& done);

// Every predictor of the analysis in order (result.predictors, and what each dropped under the missing policy in
// result.dropped), then the breakdown by grid factor and the outcome's kept cells and steps.
void score_predictors(const ScoringContext& ctx, EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
