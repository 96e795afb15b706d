#pragma once
// The predictors of a target cell's erased fraction (docs/science.md section 2), one entry each: its name, how it
// is labelled and scored (a forecast; privileged: needs one fp32 run per target, a comparison, never a forecast;
// post-outcome: built from the outcomes being scored, descriptive only), whether it may be a skill baseline, the
// TableOptions switch that asks for it, its colour in every figure, and how its table is built. The analysis parser
// (known predictors, baselines), build_evaluation_tables and the skill report read this registry and nothing else;
// adding a predictor is one entry in predictor_registry.cpp, its PredictorKind value and, when it is optional, its
// TableOptions switch (docs/architecture.md, "Extension points").
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "forecast/tables.hpp"
#include "forecast/template_predictor.hpp"
#include "stats/table.hpp"

namespace wbaudit::forecast {

// What a predictor's table is built from (build_evaluation_tables).
struct TableInputs {
  const std::vector<EvaluationCell>& cells;
  const std::vector<HistoryRun>& history;
  const std::vector<std::int64_t>& grid;
  const TableOptions& options;
  const stats::CellTable& outcome;  // the outcome aligned on the grid
};

struct PredictorInfo {
  PredictorKind kind = PredictorKind::source;
  std::string_view name;   // as analyses, tables and reports spell it: "source", "matched-reference", ...
  std::string_view label;  // "forecast", "privileged" or "post-outcome" (the report's predictor_label)
  bool privileged = false;
  bool post_outcome = false;
  bool baseline = false;  // may be a skill baseline (analysis.baselines)
  // The TableOptions switch that asks for the table; nullptr: asked for by giving every cell its matched reference
  // (EvaluationCell::matched_reference), which a caller does when needs_matched_reference is set.
  bool TableOptions::*option = nullptr;
  bool needs_matched_reference = false;
  std::string_view colour;  // gnuplot colour in every figure of the skill report
  // Whether build_evaluation_tables builds the table (may throw ForecastError on inconsistent input); nullptr: when
  // `option` is set. And how, with the cells whose rows could not be built (missing_cells, e.g. template classes
  // without history under MissingClass::missing).
  bool (*wanted)(const TableInputs&) = nullptr;
  stats::CellTable (*build)(const TableInputs&, std::vector<std::string>& missing_cells) = nullptr;
};

// Every predictor, in the order build_evaluation_tables builds them and reports list them.
const std::vector<PredictorInfo>& predictor_registry();
// The entry of `name`; nullptr when unknown.
const PredictorInfo* find_predictor(std::string_view name);
// The entry of `name`; throws ForecastError listing the known names when unknown.
const PredictorInfo& predictor_info(std::string_view name);
const PredictorInfo& predictor_info(PredictorKind kind);
// The names in registry order; with baselines_only, those that may be a skill baseline.
std::vector<std::string> predictor_names(bool baselines_only = false);
// The colour of `name` in figures; a fixed fallback for names not in the registry.
std::string predictor_colour(std::string_view name);

}  // namespace wbaudit::forecast
