#pragma once
// The last step of `wbaudit evaluate` (evaluate.cpp): every preregistered gate judged on its statistic's interval
// (stats/gates.hpp) — pass, fail or inconclusive — and inconclusive with the reason when the statistic has no
// interval, its predictor was not scored, or a required cell is missing or not canonical.
#include <string>
#include <vector>

#include "runners/evaluate/evaluate.hpp"

namespace wbaudit::runners::evaluation {

// The number of distinct bootstrap resamples of n units, C(2n - 1, n), as text ("10" for n = 3).
std::string distinct_resamples_text(std::size_t n);

// Sets result.gates, one per gate of the analysis in order; `required`: the analysis' required cells.
void judge_gates(const AnalysisSpec& analysis, const std::vector<std::string>& required, EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
