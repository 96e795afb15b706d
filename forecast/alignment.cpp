#include "forecast/alignment.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "forecast/error.hpp"

namespace wbaudit::forecast {

void check_strictly_increasing(std::span<const std::int64_t> steps, const char* what) {
  if (steps.empty()) {
    throw ForecastError(std::string(what) + ": empty step list");
  }
  for (std::size_t i = 1; i < steps.size(); ++i) {
    if (steps[i] <= steps[i - 1]) {
      throw ForecastError(std::string(what) + ": steps not strictly increasing at index " + std::to_string(i) + " (" +
                          std::to_string(steps[i - 1]) + " then " + std::to_string(steps[i]) + ")");
    }
  }
}

std::vector<double> align_series(std::span<const std::int64_t> steps, std::span<const double> values,
                                 std::span<const std::int64_t> grid, OutOfRange policy) {
  if (steps.size() != values.size()) {
    throw ForecastError("align_series: " + std::to_string(steps.size()) + " steps but " +
                        std::to_string(values.size()) + " values");
  }
  check_strictly_increasing(steps, "align_series (recorded steps)");
  if (!grid.empty()) {
    check_strictly_increasing(grid, "align_series (grid)");
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isinf(values[i])) {
      throw ForecastError("align_series: infinite value at step " + std::to_string(steps[i]));
    }
  }
  constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> out(grid.size(), kMissing);
  for (std::size_t g = 0; g < grid.size(); ++g) {
    const std::int64_t t = grid[g];
    if (t < steps.front() || t > steps.back()) {
      if (policy == OutOfRange::error) {
        throw ForecastError("align_series: grid step " + std::to_string(t) + " outside the recorded range [" +
                            std::to_string(steps.front()) + ", " + std::to_string(steps.back()) +
                            "] (extrapolation refused)");
      }
      continue;
    }
    const auto it = std::lower_bound(steps.begin(), steps.end(), t);
    const auto k = static_cast<std::size_t>(it - steps.begin());
    if (*it == t) {
      out[g] = values[k];
      continue;
    }
    // steps[k-1] < t < steps[k]; a NaN neighbour propagates through the arithmetic.
    const double t0 = static_cast<double>(steps[k - 1]);
    const double t1 = static_cast<double>(steps[k]);
    const double a = (static_cast<double>(t) - t0) / (t1 - t0);
    out[g] = values[k - 1] + a * (values[k] - values[k - 1]);
  }
  return out;
}

std::vector<std::int64_t> common_steps(const std::vector<std::vector<std::int64_t>>& step_lists) {
  if (step_lists.empty()) {
    throw ForecastError("common_steps: no step lists given");
  }
  for (std::size_t i = 0; i < step_lists.size(); ++i) {
    check_strictly_increasing(step_lists[i], ("common_steps (list " + std::to_string(i) + ")").c_str());
  }
  std::vector<std::int64_t> common = step_lists.front();
  for (std::size_t i = 1; i < step_lists.size(); ++i) {
    std::vector<std::int64_t> next;
    std::set_intersection(common.begin(), common.end(), step_lists[i].begin(), step_lists[i].end(),
                          std::back_inserter(next));
    common.swap(next);
  }
  if (common.empty()) {
    throw ForecastError("common_steps: the step lists have no step in common");
  }
  return common;
}

}  // namespace wbaudit::forecast
