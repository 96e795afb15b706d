#include "forecast/template_predictor.hpp"

#include <cmath>
#include <limits>
#include <map>
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

namespace {
// One class's history aligned once onto the grid, with the per-step sums and counts of its runs from the left
// (prefix) and from the right (suffix), so that the template leaving run j out is prefix[j] + suffix[j + 1]: linear
// in the number of runs for all rows together (the leave-run-out template was quadratic, re-walking the whole history
// for every scored cell), and the left-out run's value never enters its own template, not even through rounding
// (total - value would let it in at the last bit).
class ClassHistory {
 public:
  ClassHistory(const std::vector<HistoryRun>& history, const std::string& template_class,
               const std::vector<std::int64_t>& grid, const TemplateOptions& options)
      : m_grid(grid.size()) {
    for (const auto& h : history) {
      if (h.template_class != template_class) {
        continue;
      }
      m_run_ids.push_back(h.run_id);
      try {
        m_aligned.push_back(
            align_series(h.erased_fraction.steps, h.erased_fraction.values, grid, options.out_of_range));
        m_errors.emplace_back();
      } catch (const ForecastError& e) {  // thrown only where the run is used (it may be the one left out)
        m_aligned.emplace_back();
        m_errors.push_back(std::string(e.what()) + " (history run \"" + h.run_id + "\", class \"" + template_class +
                           "\")");
      }
    }
    const std::size_t n = m_run_ids.size();
    for (std::size_t i = 0; i < n; ++i) {
      m_position.emplace(m_run_ids[i], i);
      if (!m_errors[i].empty()) {
        m_unaligned.push_back(i);
      }
    }
    m_prefix.assign((n + 1) * m_grid, 0.0);
    m_suffix.assign((n + 1) * m_grid, 0.0);
    m_prefix_count.assign((n + 1) * m_grid, 0);
    m_suffix_count.assign((n + 1) * m_grid, 0);
    for (std::size_t i = 0; i < n; ++i) {
      accumulate(m_prefix, m_prefix_count, i, i + 1, i);
    }
    for (std::size_t i = n; i-- > 0;) {
      accumulate(m_suffix, m_suffix_count, i + 1, i, i);
    }
  }

  // The template leaving `exclude_run_id` out (empty or not in the class: leaving none out).
  std::vector<double> series(const std::string& exclude_run_id, int& used) const {
    const std::size_t n = m_run_ids.size();
    std::size_t j = n;  // the left-out run's position; n: none
    if (const auto it = m_position.find(exclude_run_id); !exclude_run_id.empty() && it != m_position.end()) {
      j = it->second;
    }
    for (const std::size_t i : m_unaligned) {  // the first run that could not be aligned and is used
      if (i != j) {
        throw ForecastError(m_errors[i]);
      }
    }
    used = static_cast<int>(j < n ? n - 1 : n);
    std::vector<double> mean(m_grid, kNaN);
    const std::size_t right = j < n ? j + 1 : n;
    for (std::size_t t = 0; t < m_grid; ++t) {
      const int count = m_prefix_count[j * m_grid + t] + m_suffix_count[right * m_grid + t];
      if (count > 0) {
        mean[t] = (m_prefix[j * m_grid + t] + m_suffix[right * m_grid + t]) / count;
      }
    }
    return mean;
  }

 private:
  // sums[to] = sums[from] + run i's aligned values (NaN and unaligned runs add nothing)
  void accumulate(std::vector<double>& sums, std::vector<int>& counts, std::size_t from, std::size_t to,
                  std::size_t i) {
    for (std::size_t t = 0; t < m_grid; ++t) {
      sums[to * m_grid + t] = sums[from * m_grid + t];
      counts[to * m_grid + t] = counts[from * m_grid + t];
      if (!m_errors[i].empty() || std::isnan(m_aligned[i][t])) {
        continue;
      }
      sums[to * m_grid + t] += m_aligned[i][t];
      ++counts[to * m_grid + t];
    }
  }

  std::size_t m_grid;
  std::vector<std::string> m_run_ids;             // history order
  std::map<std::string, std::size_t> m_position;  // run id -> its position in m_run_ids (a lookup per scored row)
  std::vector<std::size_t> m_unaligned;           // positions of the runs with an error, in history order
  std::vector<std::vector<double>> m_aligned;
  std::vector<std::string> m_errors;  // per run: why it could not be aligned (empty: aligned)
  std::vector<double> m_prefix, m_suffix;
  std::vector<int> m_prefix_count, m_suffix_count;
};

std::vector<double> finish(std::vector<double> mean, int used, const std::string& template_class,
                           const std::string& exclude_run_id, const TemplateOptions& options) {
  if (used > 0) {
    return mean;
  }
  if (options.missing_class == MissingClass::error) {
    throw ForecastError(
        "template: class \"" + template_class + "\" has no history run" +
        (exclude_run_id.empty() ? std::string() : " other than the scored run \"" + exclude_run_id + "\""));
  }
  return std::vector<double>(mean.size(), kNaN);
}
}  // namespace

std::vector<double> template_series(const std::vector<HistoryRun>& history, const std::string& template_class,
                                    const std::string& exclude_run_id, const std::vector<std::int64_t>& grid,
                                    const TemplateOptions& options, int* runs_used) {
  check_strictly_increasing(grid, "template_series (grid)");
  check_unique(history);
  int used = 0;
  auto mean = ClassHistory(history, template_class, grid, options).series(exclude_run_id, used);
  if (runs_used) {
    *runs_used = used;
  }
  return finish(std::move(mean), used, template_class, exclude_run_id, options);
}

TemplateTable template_table(const std::vector<TemplateRow>& rows, const std::vector<HistoryRun>& history,
                             const std::vector<std::int64_t>& grid, const TemplateOptions& options) {
  if (rows.empty()) {
    throw ForecastError("template_table: no cells");
  }
  check_strictly_increasing(grid, "template_series (grid)");
  check_unique(history);
  std::map<std::string, ClassHistory> classes;  // built once per class, on first use
  TemplateTable out;
  out.table.steps = grid;
  out.table.values.resize(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(grid.size()));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].run_id.empty()) {
      throw ForecastError("template_table: cell \"" + rows[r].cell + "\" has no run id");
    }
    auto it = classes.find(rows[r].template_class);
    if (it == classes.end()) {
      it = classes.emplace(rows[r].template_class, ClassHistory(history, rows[r].template_class, grid, options)).first;
    }
    int used = 0;
    auto mean = it->second.series(rows[r].run_id, used);  // sets used
    const auto series = finish(std::move(mean), used, rows[r].template_class, rows[r].run_id, options);
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
