#pragma once
// The third step of `wbaudit evaluate` (evaluate.cpp): the evaluation cells and their source. Every (target run with
// a canonical complete trace, parameter group) of the sweep, or of the external runs of a directory without a sweep;
// only the analysis' scored runs; each with the reference trace `source` projects (its declared fp32 reference, or
// the reference of the declared one's configuration with [source] overrides, of this sweep or of [source] sweep).
// Target runs left out are listed with the reason, and every required cell gets its state for the gates.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runners/evaluate/evaluate.hpp"
#include "runners/evaluate/external_run.hpp"
#include "runners/evaluate/inputs.hpp"
#include "runners/evaluate/sweep_cells.hpp"

namespace wbaudit::runners::evaluation {

struct ScoredCells {
  std::unique_ptr<TraceCache> traces;                 // this sweep's (null without a sweep)
  std::unique_ptr<ExternalEvaluationCells> external;  // a directory of external runs: owns the runs the cells name
  std::unique_ptr<SweepStore> source_store;           // [source] sweep, when declared
  std::unique_ptr<TraceCache> source_store_traces;
  TraceCache* source_traces = nullptr;  // where a source reference's trace is read (null without a sweep)
  // As read, restricted to analysis.scored_runs; missing/missing_names also list targets whose source is incomplete.
  SweepEvaluationCells read;
  // history = "declared": the cells of every target run of the sweep, scored or not (scored ones are refused there).
  std::vector<SweepEvaluationCell> every_target;
  std::vector<SweepEvaluationCell> cells;              // the scored cells
  std::map<std::string, const StoredCell*> source_of;  // by target name, when `source` is not the declared reference
};

// Sets result.missing_targets, source_reference and required (each required cell's state), and, for external runs,
// the standing. Throws AnalysisError when no cell can be scored, a [source] or scored_runs declaration matches
// nothing, or a sweep-only declaration is given for external runs.
ScoredCells read_scored_cells(const SweepInputs& in, const EvaluateOptions& options, EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
