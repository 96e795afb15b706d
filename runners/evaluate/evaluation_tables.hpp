#pragma once
// The fifth step of `wbaudit evaluate` (evaluate.cpp): the tables. The outcome and every predictor the analysis
// names (forecast/predictor_registry.hpp), cells x recorded steps on one step grid, and what each table row is: its
// target run, group, format, projection, group size and grid factors.
#include "forecast/tables.hpp"
#include "runners/evaluate/cells.hpp"
#include "runners/evaluate/inputs.hpp"
#include "runners/evaluate/templates.hpp"

namespace wbaudit::runners::evaluation {

// Sets result.outcome, cells, steps, tables, source_method and the per-row runs, groups, formats, projections,
// group_sizes, factors and projection_notes. Throws AnalysisError when a table cannot be built (naming the sweep and
// the target runs left out).
forecast::EvaluationTables build_tables(const SweepInputs& in, const ScoredCells& sc, const TemplateHistory& history,
                                        EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
