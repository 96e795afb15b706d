#pragma once
// The settings `wbaudit evaluate` resolves against the sweep, and the analysis' identity: the crossing settings
// (the analysis' [crossing], else the sweep spec's [evaluation], else the defaults; for external runs the burn-in
// defaults to 0.5% of the shortest run) and the complete effective analysis (every default explicit) with its
// SHA-256, by which the evaluation is identified and can be repeated word for word.
#include "runners/evaluate/cells.hpp"
#include "runners/evaluate/inputs.hpp"

namespace wbaudit::runners::evaluation {

// Sets result.crossing_options, burn_in_how, effective_analysis and analysis_sha256 (after the tables: the groups
// default to the scored rows' groups).
void resolve_effective_analysis(const SweepInputs& in, const ScoredCells& sc, EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
