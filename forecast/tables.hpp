#pragma once
// Outcome and predictor tables (stats::CellTable, cells x recorded steps) for a list of evaluation cells, aligned on
// one step grid. Independent of the sweep directory layout: the caller (runners) reads traces and fills
// EvaluationCell; everything here works on values in memory.
//
// Predictors (docs/science.md §2): `source` (projection from the predeclared reference trace), `analytic-grid` (the
// histogram projection for the cell's mantissa width and learning-rate scale; optional), `template` (historical,
// outcome-blind, leave-run-out; template_predictor.hpp), `matched-reference` (privileged: a reference matched to the
// target's own seed and data order, never a forecast) and `common-time` (post-outcome, descriptive: the mean over
// cells at each step of the outcomes themselves).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "forecast/alignment.hpp"
#include "forecast/source.hpp"
#include "forecast/template_predictor.hpp"
#include "sim/trace/trace.hpp"
#include "stats/table.hpp"

namespace wbaudit::forecast {

struct EvaluationCell {
  std::string run_id;                  // the target run (unit of independence, leave-run-out key)
  std::string group;                   // parameter group, e.g. "layer1.weight"
  std::string format;                  // target format name: selects the reference's projected series
  std::string projection = "nearest";  // which projection of that format: the target's policy (projected_series)
  std::string template_class;          // e.g. "e4m3/layer1.weight"
  Series outcome;                      // measured erased fraction on the target's recorded steps
  std::shared_ptr<const sim::Trace> reference;  // `source`: the predeclared fp32 reference (may be shared)
  // The file `reference` was read from, or empty. When set, the analytic grid (the analytic-grid predictor, `source`
  // with method analytic-grid) reads the histograms from it a block of recorded steps at a time, keeping only the
  // series it computes, so `reference` may be read without them (sim::TraceReadOptions::histograms false): the same
  // values as from the histograms in memory.
  std::filesystem::path reference_file;
  std::shared_ptr<const sim::Trace> matched_reference;  // `matched-reference` (optional, privileged)
  int man_bits = -1;      // M for the analytic-grid predictor; -1: the format's (sim::format_from_name)
  double lr_scale = 1.0;  // target learning rate / reference learning rate, for the analytic grid

  std::string label() const { return run_id + "/" + group; }
};

// One value per predictor of the registry (predictor_registry.hpp, which names and describes each).
enum class PredictorKind { source, analytic_grid, template_mean, matched_reference, common_time };
const char* predictor_name(PredictorKind kind);  // the registry's name: "source", "analytic-grid", "template", ...

struct PredictorTable {
  PredictorKind kind = PredictorKind::source;
  std::string name;           // predictor_name(kind)
  bool privileged = false;    // matched-reference: needs one fp32 run per target; a comparison, not a forecast
  bool post_outcome = false;  // common-time: built from the outcomes being scored; descriptive only
  stats::CellTable table;
  std::vector<std::string> missing_cells;  // template rows whose class had no history (declared policy)
};

struct TableOptions {
  std::vector<std::int64_t> grid;               // empty: the steps common to every cell's outcome
  OutOfRange out_of_range = OutOfRange::error;  // series not covering the grid
  bool source = true;                           // requires every cell's reference
  // How `source` reads the reference: the exact projection the trace recorded (default), or the analytic grid across
  // the exponent range (forecast/joint_grid.hpp: analytic_series at the cell's format and lr_scale; needs a schema-2
  // reference with the joint histogram; round-to-nearest only).
  enum class SourceMethod { projection, analytic_grid } source_method = SourceMethod::projection;
  bool analytic_grid = false;  // requires every cell's reference and a floating format
  bool template_mean = true;   // requires history for every class (or missing_class = missing)
  MissingClass missing_class = MissingClass::error;
  bool common_time = true;
  // matched-reference is built when any cell has one; then every cell must.
};
using SourceMethod = TableOptions::SourceMethod;

struct EvaluationTables {
  stats::CellTable outcome;
  std::vector<PredictorTable> predictors;

  // Throws ForecastError listing the predictors present when `name` is absent.
  const PredictorTable& predictor(std::string_view name) const;
};

// Builds the table of every predictor of the registry (predictor_registry.hpp) that `options` (or, for
// matched-reference, the cells) ask for, in registry order.
// Throws ForecastError for: no cells, duplicate cell labels, empty run id/group, a series length mismatch, a missing
// reference or projection, a matched reference on some cells only, a grid step outside a series' range
// (OutOfRange::error), and a template class without history (MissingClass::error).
EvaluationTables build_evaluation_tables(const std::vector<EvaluationCell>& cells,
                                         const std::vector<HistoryRun>& history, const TableOptions& options = {});

// A projection predictor's table (source, analytic-grid, matched-reference): each cell's reference
// (matched_reference for matched-reference) projected for the cell's format and policy, or by the analytic grid,
// aligned on `grid`. Throws ForecastError naming the predictor and the cell.
stats::CellTable projection_table(PredictorKind kind, const std::vector<EvaluationCell>& cells,
                                  const std::vector<std::int64_t>& grid, OutOfRange policy,
                                  SourceMethod method = SourceMethod::projection);

// The descriptive common-time predictor: at each step, the mean over cells of the present (non-NaN) values; NaN
// where no cell has a value. Every row of the result is that mean.
stats::CellTable common_time_table(const stats::CellTable& outcome);

}  // namespace wbaudit::forecast
