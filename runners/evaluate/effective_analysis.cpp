#include "runners/evaluate/effective_analysis.hpp"

#include <algorithm>

#include "forecast/crossing.hpp"
#include "runners/store/identity.hpp"

namespace wbaudit::runners::evaluation {
namespace {

BurnIn burn_in_of(const SweepInputs& in, const ScoredCells& sc) {
  const AnalysisSpec& analysis = in.analysis;
  if (in.store || analysis.burn_in) {
    BurnIn b = crossing_burn_in(in.spec, analysis.burn_in, "declared in the analysis' [crossing]");
    if (in.store && analysis.burn_in) {
      // Say where this analysis' crossings part from the sweep report's (issue 31: the same runs gave two
      // headlines, and nothing said why).
      const BurnIn sweep = crossing_burn_in(in.spec);
      if (sweep.steps != b.steps) {
        b.how += "; the sweep report counts crossings from t0 = " + std::to_string(sweep.steps) + " (" + sweep.how +
                 "), so its crossing headline differs from this one";
      }
    }
    return b;
  }
  // External runs: no spec, so the shortest imported target run's length.
  std::int64_t steps = -1;
  for (const auto& c : sc.cells) {
    steps = steps < 0 ? c.target_trace->steps : std::min(steps, c.target_trace->steps);
  }
  return default_crossing_burn_in(steps, "external target run");
}

}  // namespace

void resolve_effective_analysis(const SweepInputs& in, const ScoredCells& sc, EvaluationResult& result) {
  const AnalysisSpec& analysis = in.analysis;
  auto& crossing = result.crossing_options;
  crossing.threshold = analysis.threshold.value_or(in.spec.evaluation.threshold);
  const BurnIn burn_in = burn_in_of(in, sc);
  crossing.burn_in = burn_in.steps;
  result.burn_in_how = burn_in.how;
  crossing.min_group_size = analysis.min_group_size.value_or(in.spec.evaluation.min_group_size);
  // The analysis is identified by its complete effective text (every default explicit), not by the text given.
  std::vector<std::string> groups = analysis.groups.empty() ? in.spec.evaluation.groups : analysis.groups;
  if (groups.empty()) {
    for (const auto& g : result.groups) {
      if (std::find(groups.begin(), groups.end(), g) == groups.end()) {
        groups.push_back(g);
      }
    }
  }
  // The tolerance is resolved before the text is written, so that the text records the declared tolerance (it
  // recorded forecast::CrossingOptions' default before: evaluating the effective text did not repeat an evaluation
  // that declared another tolerance).
  crossing.tolerance = analysis.tolerance.value_or(in.spec.evaluation.tolerance);
  result.effective_analysis = effective_analysis_toml(
      analysis, groups, {crossing.threshold, *crossing.burn_in, crossing.tolerance, crossing.min_group_size});
  result.analysis_sha256 = sha256_hex(result.effective_analysis);
}

}  // namespace wbaudit::runners::evaluation
