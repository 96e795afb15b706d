#include "runners/evaluate/evaluation_tables.hpp"

#include <algorithm>

#include "forecast/error.hpp"
#include "forecast/predictor_registry.hpp"
#include "forecast/source.hpp"
#include "util/json_path.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace {

bool scores(const AnalysisSpec& analysis, std::string_view predictor) {
  return std::find(analysis.predictors.begin(), analysis.predictors.end(), predictor) != analysis.predictors.end();
}

// The forecast's view of one scored cell: its outcome, the reference `source` projects (and the matched reference
// when a predictor needs it), and the learning-rate scale of the target against that reference.
forecast::EvaluationCell evaluation_cell(const SweepInputs& in, const ScoredCells& sc, const SweepEvaluationCell& c) {
  forecast::EvaluationCell e;
  e.run_id = c.target->name;
  e.group = c.group;
  e.format = c.format;
  e.projection = c.projection;
  e.template_class = template_class_of(in.analysis, c);
  e.outcome = forecast::measured_series(*c.target_trace, c.group);
  auto src = sc.source_of.find(c.target->name);
  e.reference = src == sc.source_of.end() ? c.reference_trace : sc.source_traces->trace(src->second->id);
  // The analytic grid reads the reference's histograms from its file (the traces are held without them).
  e.reference_file = src == sc.source_of.end() ? c.reference_file : sc.source_traces->file(src->second->id);
  for (const auto& info : forecast::predictor_registry()) {
    if (info.needs_matched_reference && scores(in.analysis, info.name)) {
      e.matched_reference = c.reference_trace;
    }
  }
  const auto* lr_t = util::json_at(c.target->config, "optimizer.lr");
  const StoredCell* src_cell = src == sc.source_of.end() ? c.reference : src->second;
  const auto* lr_r = util::json_at(src_cell->config, "optimizer.lr");
  if (lr_t && lr_r && lr_t->is_number() && lr_r->is_number() && lr_r->get<double>() > 0) {
    e.lr_scale = lr_t->get<double>() / lr_r->get<double>();
  }
  return e;
}

// What row `c` of every table is.
void describe_row(const SweepEvaluationCell& c, EvaluationResult& result) {
  result.runs.push_back(c.target->name);
  result.groups.push_back(c.group);
  result.formats.push_back(c.format);
  result.projections.push_back(c.projection);
  result.group_sizes.push_back(c.target_trace->group(c.group).size);
  std::map<std::string, std::string> factors = {{"format", c.format}, {"group", c.group}};
  for (const auto& [k, v] : c.params.items()) {
    factors[k] = value_text(v);
  }
  result.factors.push_back(std::move(factors));
  if (!c.projection_note.empty()) {
    result.projection_notes.push_back(evaluation_cell_label(c.target->name, c.group) + ": " + c.projection_note);
  }
}

// The tables the analysis asks for: each registered predictor's switch, the source method and the missing-class
// policy of the template.
forecast::TableOptions table_options(const AnalysisSpec& analysis) {
  forecast::TableOptions topt;
  for (const auto& info : forecast::predictor_registry()) {
    if (info.option != nullptr) {
      topt.*info.option = scores(analysis, info.name);
    }
  }
  if (analysis.source_method == "analytic-grid") {
    topt.source_method = forecast::TableOptions::SourceMethod::analytic_grid;
  }
  topt.missing_class =
      analysis.template_missing_inconclusive ? forecast::MissingClass::missing : forecast::MissingClass::error;
  return topt;
}

}  // namespace

forecast::EvaluationTables build_tables(const SweepInputs& in, const ScoredCells& sc, const TemplateHistory& history,
                                        EvaluationResult& result) {
  std::vector<forecast::EvaluationCell> ecells;
  for (const auto& c : sc.cells) {
    ecells.push_back(evaluation_cell(in, sc, c));
    describe_row(c, result);
  }
  result.source_method = in.analysis.source_method;
  forecast::EvaluationTables tables;
  try {
    tables = forecast::build_evaluation_tables(ecells, history.runs, table_options(in.analysis));
  } catch (const forecast::ForecastError& e) {
    std::string left_out;
    if (!result.missing_targets.empty()) {
      left_out = " (target runs left out: " + util::join(result.missing_targets, "; ") + ")";
    }
    throw AnalysisError(std::string("building the predictor tables of ") + in.sweep_dir.string() + ": " + e.what() +
                        left_out);
  }
  result.outcome = tables.outcome;
  result.cells = tables.outcome.cells;
  result.steps = tables.outcome.steps;
  result.tables = tables.predictors;
  return tables;
}

}  // namespace wbaudit::runners::evaluation
