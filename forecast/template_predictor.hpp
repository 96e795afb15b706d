#pragma once
// The historical `template` predictor (docs/science.md §2, "Predictors"): for a scored cell of template class k, the
// mean at each step of the erased fractions of past target runs in class k.
//
// Outcome-blind by construction: the template is built only from `history` — the runs the analysis declares
// historical — and from the scored cell's run id and class, never from its outcome. When the sweep itself provides
// the history (its own target runs are listed as historical), the scored cell's own run is left out
// (leave-run-out, by run id), so its outcome never enters its template.
//
// Each history series is aligned onto the grid (alignment.hpp rules). At a step where some history runs are
// missing (NaN), the mean is over those present; where none is present, NaN. A class with no history run after
// leave-run-out is an error (TemplateOptions::missing_class = error) or, when the analysis declares it, a NaN row
// listed in TemplateTable::missing — never a silent number.
//
// Cost: each class's history is aligned once and summed from both ends, so a table of R rows over H history runs costs
// O((R + H) x grid); the template leaving run j out is (sum of the runs before j) + (sum of the runs after j), so run
// j's value never enters it, not even through rounding.
#include <cstdint>
#include <string>
#include <vector>

#include "forecast/alignment.hpp"
#include "forecast/source.hpp"
#include "stats/table.hpp"

namespace wbaudit::forecast {

struct HistoryRun {
  std::string run_id;          // the past target run (leave-run-out key)
  std::string template_class;  // e.g. "e4m3/layer1.weight"
  Series erased_fraction;      // its measured erased fraction
};

struct TemplateRow {   // what the template of one scored cell may know about it
  std::string cell;    // row label
  std::string run_id;  // left out of the history
  std::string template_class;
};

enum class MissingClass { error, missing };

struct TemplateOptions {
  OutOfRange out_of_range = OutOfRange::error;  // history series not covering the grid
  MissingClass missing_class = MissingClass::error;
};

struct TemplateTable {
  stats::CellTable table;
  std::vector<int> runs_used;        // per row: history runs averaged (after leave-run-out)
  std::vector<std::string> missing;  // rows (cell labels) whose class had no history (MissingClass::missing)
};

// The template mean of class `template_class` on `grid`, leaving out `exclude_run_id` (empty: leave none out).
// `runs_used` receives the number of history runs averaged. Throws ForecastError for duplicated (run, class)
// history entries, and when no run remains and missing_class is error.
std::vector<double> template_series(const std::vector<HistoryRun>& history, const std::string& template_class,
                                    const std::string& exclude_run_id, const std::vector<std::int64_t>& grid,
                                    const TemplateOptions& options, int* runs_used = nullptr);

TemplateTable template_table(const std::vector<TemplateRow>& rows, const std::vector<HistoryRun>& history,
                             const std::vector<std::int64_t>& grid, const TemplateOptions& options = {});

}  // namespace wbaudit::forecast
