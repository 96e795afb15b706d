#pragma once
// What the skill report of `wbaudit evaluate` says, shared by its three writers (report_writers.hpp): one row per
// (predictor, statistic) in the statistic table's order (stats/statistic_table.hpp decides each row's definition and
// how it is shown), the label of each predictor (forecast/predictor_registry.hpp), and the settings in words.
#include <string>
#include <vector>

#include "runners/evaluate/evaluate.hpp"

namespace wbaudit::runners::evaluation {

// "forecast", "privileged" or "post-outcome": the registry's label of the predictor.
std::string predictor_label(const PredictorEvaluation& p);

struct StatisticRow {
  std::string predictor;  // "(outcome)" for the outcome's statistics
  std::string label;      // the predictor's label, or "outcome"
  std::string statistic;  // "(all)" for a predictor that was not scored
  double estimate = NAN;
  const stats::Interval* ci = nullptr;  // into the result; null when the statistic has no interval
  std::string note;                     // why it has no interval, what it is a copy of, the test's verdict, ...
};

// The outcome's statistics, then every predictor's, each in the statistic table's order (skill once per baseline
// other than the predictor itself).
std::vector<StatisticRow> statistic_rows(const EvaluationResult& r);

// The scored primary predictor: the first scored forecast (not post-outcome) one; nullptr when none.
const PredictorEvaluation* primary_predictor(const EvaluationResult& r);

// Which projection `source` (and matched-reference) read per cell, in words.
std::string projection_summary(const EvaluationResult& r);
// "threshold 0.5, burn-in 5 (default: ...), tolerance 0.15, minimum group size 0 coordinates".
std::string crossing_settings(const EvaluationResult& r);
// "[0.01, 0.02]" (shown numbers); "" without an interval.
std::string ci_text(const stats::Interval* ci);

}  // namespace wbaudit::runners::evaluation
