#include "forecast/template_predictor.hpp"

#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "forecast/error.hpp"

namespace wbaudit::forecast {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_unique(const std::vector<HistoryRun>& history) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& h : history) {
    if (!seen.emplace(h.run_id, h.template_class).second) {
      throw ForecastError("template: history lists run \"" + h.run_id + "\" twice in class \"" + h.template_class +
                          "\"");
    }
  }
}
}  // namespace

std::vector<double> template_series(const std::vector<HistoryRun>& history, const std::string& template_class,
                                    const std::string& exclude_run_id, const std::vector<std::int64_t>& grid,
                                    const TemplateOptions& options, int* runs_used) {
  check_strictly_increasing(grid, "template_series (grid)");
  check_unique(history);
  std::vector<double> sum(grid.size(), 0.0);
  std::vector<int> count(grid.size(), 0);
  int used = 0;
  for (const auto& h : history) {
    if (h.template_class != template_class) {
      continue;
    }
    if (!exclude_run_id.empty() && h.run_id == exclude_run_id) {
      continue;  // leave-run-out
    }
    std::vector<double> aligned;
    try {
      aligned = align_series(h.erased_fraction.steps, h.erased_fraction.values, grid, options.out_of_range);
    } catch (const ForecastError& e) {
      throw ForecastError(std::string(e.what()) + " (history run \"" + h.run_id + "\", class \"" + template_class +
                          "\")");
    }
    ++used;
    for (std::size_t t = 0; t < grid.size(); ++t) {
      if (std::isnan(aligned[t])) {
        continue;
      }
      sum[t] += aligned[t];
      ++count[t];
    }
  }
  if (runs_used) {
    *runs_used = used;
  }
  if (used == 0) {
    if (options.missing_class == MissingClass::error) {
      throw ForecastError(
          "template: class \"" + template_class + "\" has no history run" +
          (exclude_run_id.empty() ? std::string() : " other than the scored run \"" + exclude_run_id + "\""));
    }
    return std::vector<double>(grid.size(), kNaN);
  }
  std::vector<double> mean(grid.size(), kNaN);
  for (std::size_t t = 0; t < grid.size(); ++t) {
    if (count[t] > 0) {
      mean[t] = sum[t] / count[t];
    }
  }
  return mean;
}

TemplateTable template_table(const std::vector<TemplateRow>& rows, const std::vector<HistoryRun>& history,
                             const std::vector<std::int64_t>& grid, const TemplateOptions& options) {
  if (rows.empty()) {
    throw ForecastError("template_table: no cells");
  }
  TemplateTable out;
  out.table.steps = grid;
  out.table.values.resize(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(grid.size()));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].run_id.empty()) {
      throw ForecastError("template_table: cell \"" + rows[r].cell + "\" has no run id");
    }
    int used = 0;
    const auto series = template_series(history, rows[r].template_class, rows[r].run_id, grid, options, &used);
    out.table.cells.push_back(rows[r].cell);
    out.runs_used.push_back(used);
    if (used == 0) {
      out.missing.push_back(rows[r].cell);
    }
    for (std::size_t t = 0; t < grid.size(); ++t) {
      out.table.values(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(t)) = series[t];
    }
  }
  return out;
}

}  // namespace wbaudit::forecast
