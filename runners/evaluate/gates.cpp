#include "runners/evaluate/gates.hpp"

namespace wbaudit::runners::evaluation {
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
