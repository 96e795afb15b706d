#include "runners/evaluate/gates.hpp"

namespace wbaudit::runners::evaluation {

std::string distinct_resamples_text(std::size_t n) {
  // C(2n - 1, n): multisets of n units drawn from n, in exact integer arithmetic while it fits, else ">= 10^18".
  constexpr unsigned __int128 kLimit = 1000000000000000000ULL;
  unsigned __int128 c = 1;
  for (std::size_t k = 1; k <= n; ++k) {
    c = c * (n - 1 + k) / k;  // exact: the running product is C(n - 1 + k, k), at most 10^18 x 2n here
    if (c > kLimit) {
      return "more than 10^18";
    }
  }
  return std::to_string(static_cast<unsigned long long>(c));
}

namespace {

GateEvaluation judge_gate(const GateSpec& g, const std::vector<std::string>& required, const EvaluationResult& result) {
  GateEvaluation ge;
  ge.spec = g;
  ge.spec.gate.required_cells = required;
  const std::map<std::string, stats::Interval>* intervals = &result.outcome_intervals;
  const std::map<std::string, std::string>* undefined = &result.outcome_undefined;
  std::string unavailable;
  if (!g.predictor.empty()) {
    const auto& p = result.predictor(g.predictor);
    intervals = &p.intervals;
    undefined = &p.undefined;
    unavailable = p.unavailable;
  }
  if (!g.predictor.empty() && unavailable.empty()) {
    const auto& failed = result.predictor(g.predictor).failed;
    if (auto f = failed.find(g.gate.statistic); f != failed.end()) {
      // A statistic the predictor cannot have (no run-specific signal): the gate fails for that reason.
      ge.result.gate = ge.spec.gate;
      ge.result.verdict = stats::Verdict::fail;
      ge.result.reasons.push_back(g.predictor + ": " + f->second);
      return ge;
    }
  }
  auto it = intervals->find(g.gate.statistic);
  if (unavailable.empty() && it != intervals->end()) {
    ge.result = stats::evaluate_gate(ge.spec.gate, it->second, result.required);
    ge.has_interval = true;
    if (result.resampling_units < result.analysis.min_units) {
      // Too few units for an interval to mean much: inconclusive whatever it says (docs/statistics.md); the
      // interval is still shown.
      ge.result.verdict = stats::Verdict::inconclusive;
      ge.result.reasons.insert(ge.result.reasons.begin(),
                               "n = " + std::to_string(result.resampling_units) + " resampling units give only " +
                                   distinct_resamples_text(result.resampling_units) +
                                   " distinct bootstrap resamples, below the analysis' minimum of " +
                                   std::to_string(result.analysis.min_units) + " units ([bootstrap] min_units)");
    }
    return ge;
  }
  // No interval: inconclusive, with the reason (and the required-cell reasons).
  ge.result.gate = ge.spec.gate;
  ge.result.verdict = stats::Verdict::inconclusive;
  std::string why = !unavailable.empty() ? "predictor " + g.predictor + " not scored: " + unavailable
                    : undefined->contains(g.gate.statistic)
                        ? g.gate.statistic + " has no interval: " + undefined->at(g.gate.statistic)
                        : g.gate.statistic + " was not computed";
  ge.result.reasons.push_back(why);
  for (const auto& c : result.required) {
    if (!c.canonical) {
      ge.result.reasons.push_back("required cell " + c.cell + ": " + c.reason);
    }
  }
  return ge;
}

}  // namespace

void judge_gates(const AnalysisSpec& analysis, const std::vector<std::string>& required, EvaluationResult& result) {
  for (const auto& g : analysis.gates) {
    result.gates.push_back(judge_gate(g, required, result));
  }
}

}  // namespace wbaudit::runners::evaluation
