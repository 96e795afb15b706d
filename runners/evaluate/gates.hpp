#pragma once
// The last step of `wbaudit evaluate` (evaluate.cpp): every preregistered gate judged on its statistic's interval
// (stats/gates.hpp) — pass, fail or inconclusive — and inconclusive with the reason when the statistic has no
// interval, its predictor was not scored, or a required cell is missing or not canonical.
#include <string>
#include <vector>

#include "runners/evaluate/evaluate.hpp"

namespace wbaudit::runners::evaluation {

// Sets result.gates, one per gate of the analysis in order; `required`: the analysis' required cells.
void judge_gates(const AnalysisSpec& analysis, const std::vector<std::string>& required, EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
