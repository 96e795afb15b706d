#pragma once
// The fourth step of `wbaudit evaluate` (evaluate.cpp): the history the `template` predictor averages, outcome-blind.
// Three sources (docs/evaluate.md): the sweep's own target runs, leave-run-out (default); runs of this sweep declared
// historical and never scored (history = "declared"); or the canonical target runs of an earlier sweep
// (history = "sweep"), never a run with a scored run's configuration.
#include <memory>
#include <string>
#include <vector>

#include "forecast/template_predictor.hpp"
#include "runners/evaluate/cells.hpp"
#include "runners/evaluate/inputs.hpp"

namespace wbaudit::runners::evaluation {

struct TemplateHistory {
  std::vector<forecast::HistoryRun> runs;
  // An earlier sweep's store, traces and cells, kept alive with the history read from them.
  std::unique_ptr<SweepStore> store;
  std::unique_ptr<TraceCache> traces;
  std::unique_ptr<SweepEvaluationCells> read;
};

// A cell's template class, "format=e4m3/group=layer1.weight": analysis.template_class keys in order, each the cell's
// format, group, policy, grid parameter or configuration path (AnalysisError naming the key otherwise).
std::string template_class_of(const AnalysisSpec& analysis, const SweepEvaluationCell& cell);

// Sets result.template_history (which runs, in words). Throws AnalysisError when the history would contain a scored
// outcome, matches nothing, or lacks a class a scored cell needs (unless template.missing_class = "inconclusive").
TemplateHistory build_template_history(const SweepInputs& in, const ScoredCells& sc, EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
