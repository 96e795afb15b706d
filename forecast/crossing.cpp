#include "forecast/crossing.hpp"
#include "stats/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "forecast/alignment.hpp"
#include "forecast/error.hpp"

namespace wbaudit::forecast {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_trajectory(std::span<const std::int64_t> steps, std::span<const double> y, const CrossingOptions& o) {
  if (steps.size() != y.size()) {
    throw ForecastError("find_crossing: " + std::to_string(steps.size()) + " steps but " + std::to_string(y.size()) +
                        " values");
  }
  check_strictly_increasing(steps, "find_crossing");
  if (steps.front() < 0) {
    throw ForecastError("find_crossing: negative step " + std::to_string(steps.front()));
  }
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (std::isinf(y[i])) {
      throw ForecastError("find_crossing: infinite value at step " + std::to_string(steps[i]));
    }
  }
  if (!std::isfinite(o.threshold)) {
    throw ForecastError("find_crossing: threshold is not finite");
  }
}
}  // namespace

const char* to_string(CrossingStatus status) {
  switch (status) {
    case CrossingStatus::crossed:
      return "crossed";
    case CrossingStatus::not_crossed:
      return "not_crossed";
    case CrossingStatus::above_at_init:
      return "above_at_init";
    case CrossingStatus::undetermined:
      return "undetermined";
  }
  return "?";
}

const char* to_string(CrossingCategory category) {
  switch (category) {
    case CrossingCategory::both_cross:
      return "both_cross";
    case CrossingCategory::only_predicted:
      return "only_predicted";
    case CrossingCategory::only_measured:
      return "only_measured";
    case CrossingCategory::neither:
      return "neither";
    case CrossingCategory::both_above_at_init:
      return "both_above_at_init";
    case CrossingCategory::measured_above_at_init:
      return "measured_above_at_init";
    case CrossingCategory::predicted_above_at_init:
      return "predicted_above_at_init";
    case CrossingCategory::undetermined:
      return "undetermined";
  }
  return "?";
}

Crossing find_crossing(std::span<const std::int64_t> steps, std::span<const double> y, const CrossingOptions& options) {
  check_trajectory(steps, y, options);
  const double theta = options.threshold;
  const std::int64_t t0 = options.burn_in.value_or(steps.front());

  Crossing result;
  result.status = CrossingStatus::undetermined;
  result.time = kNaN;
  result.censored_at = kNaN;
  result.burn_in = static_cast<double>(t0);
  result.value_at_burn_in = kNaN;

  // Observed (non-missing) points only; NaN is skipped.
  std::vector<std::size_t> obs;
  obs.reserve(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (!std::isnan(y[i])) {
      obs.push_back(i);
    }
  }
  if (obs.empty()) {
    return result;
  }

  // Bracket t0 among the observed points: lo = last observed step <= t0, hi = first observed step >= t0.
  std::size_t hi_pos = 0;
  while (hi_pos < obs.size() && steps[obs[hi_pos]] < t0) {
    ++hi_pos;
  }
  if (hi_pos == obs.size()) {
    return result;  // t0 after the last observed point
  }
  if (steps[obs[hi_pos]] != t0 && hi_pos == 0) {
    return result;  // t0 before the first observed point
  }
  const std::size_t lo_pos = steps[obs[hi_pos]] == t0 ? hi_pos : hi_pos - 1;

  double y0;
  if (lo_pos == hi_pos) {
    y0 = y[obs[lo_pos]];
  } else {
    const double ta = static_cast<double>(steps[obs[lo_pos]]);
    const double tb = static_cast<double>(steps[obs[hi_pos]]);
    const double ya = y[obs[lo_pos]];
    const double yb = y[obs[hi_pos]];
    y0 = ya + (static_cast<double>(t0) - ta) / (tb - ta) * (yb - ya);
  }
  result.value_at_burn_in = y0;
  if (y0 >= theta) {
    result.status = CrossingStatus::above_at_init;
    return result;
  }

  // Walk the observed points after t0. The first segment starts at the observed point at or before t0 (it carries
  // the line y(t0) was read from); if the first point after t0 reaches theta, that line is increasing and meets
  // theta strictly after t0.
  // (If that first point stays below theta, the segment's start is never used.)
  double prev_t = static_cast<double>(steps[obs[lo_pos]]);
  double prev_y = y[obs[lo_pos]];
  for (std::size_t p = (lo_pos == hi_pos ? hi_pos + 1 : hi_pos); p < obs.size(); ++p) {
    const double tk = static_cast<double>(steps[obs[p]]);
    const double yk = y[obs[p]];
    if (yk >= theta) {
      result.status = CrossingStatus::crossed;
      result.time = yk == theta ? tk : prev_t + (theta - prev_y) / (yk - prev_y) * (tk - prev_t);
      bool above = true;  // re-crossings: every later fall from >= theta back below it
      for (std::size_t q = p + 1; q < obs.size(); ++q) {
        const bool now = y[obs[q]] >= theta;
        result.recrossings += above && !now;
        above = now;
      }
      return result;
    }
    prev_t = tk;
    prev_y = yk;
  }
  result.status = CrossingStatus::not_crossed;
  result.censored_at = static_cast<double>(steps[obs.back()]);
  return result;
}

std::int64_t default_burn_in(std::int64_t steps) {
  if (steps < 0) {
    throw ForecastError("default_burn_in: negative step count " + std::to_string(steps));
  }
  return steps * kDefaultBurnInPerMille / 1000;
}

CrossingCategory categorize(CrossingStatus predicted, CrossingStatus measured) {
  using S = CrossingStatus;
  using C = CrossingCategory;
  if (predicted == S::undetermined || measured == S::undetermined) {
    return C::undetermined;
  }
  const bool pa = predicted == S::above_at_init;
  const bool ma = measured == S::above_at_init;
  if (pa && ma) {
    return C::both_above_at_init;
  }
  if (ma) {
    return C::measured_above_at_init;
  }
  if (pa) {
    return C::predicted_above_at_init;
  }
  const bool pc = predicted == S::crossed;
  const bool mc = measured == S::crossed;
  if (pc && mc) {
    return C::both_cross;
  }
  if (pc) {
    return C::only_predicted;
  }
  if (mc) {
    return C::only_measured;
  }
  return C::neither;
}

std::string CrossingSummary::to_string() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d/%d both cross, %d/%d within %g%%, %d/%d differ in category, measured span ",
                both_cross, cells, within_tolerance, both_cross, tolerance * 100.0, differ_in_category, cells);
  std::string s = buf;
  if (std::isnan(measured_span)) {
    s += "n/a (no measured crossing)";
  } else {
    std::snprintf(buf, sizeof buf, measured_span >= 100 ? "%.0fx" : "%.3gx", measured_span);
    s += buf;
  }
  if (measured_recrossing > 0) {
    s += "; " + std::to_string(measured_recrossing) + " measured re-crossing" + (measured_recrossing > 1 ? "s" : "");
  }
  if (below_min_group_size > 0) {
    s += "; " + std::to_string(below_min_group_size) + " cell" + (below_min_group_size > 1 ? "s" : "") + " below " +
         std::to_string(min_group_size) + " coordinates left out";
  }
  return s;
}

namespace {
void check_labels(const stats::CellTable& t, const char* what) {
  if (t.rows() != static_cast<Eigen::Index>(t.cells.size()) || t.cols() != static_cast<Eigen::Index>(t.steps.size())) {
    throw ForecastError(std::string(what) + ": table values are " + std::to_string(t.rows()) + "x" +
                        std::to_string(t.cols()) + " but it labels " + std::to_string(t.cells.size()) + " cells and " +
                        std::to_string(t.steps.size()) + " steps");
  }
}

std::vector<double> row_of(const stats::CellTable& t, std::size_t r) {
  std::vector<double> y(t.steps.size());
  for (std::size_t c = 0; c < y.size(); ++c) {
    y[c] = t.values(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c));
  }
  return y;
}
}  // namespace

std::vector<Crossing> find_crossings(const stats::CellTable& table, const CrossingOptions& options) {
  check_labels(table, "find_crossings");
  std::vector<Crossing> out;
  out.reserve(table.cells.size());
  for (std::size_t r = 0; r < table.cells.size(); ++r) {
    try {
      out.push_back(find_crossing(table.steps, row_of(table, r), options));
    } catch (const ForecastError& e) {
      throw ForecastError(std::string(e.what()) + " (cell " + table.cells[r] + ")");
    }
  }
  return out;
}

CellCrossing compare_cell_crossing(const std::string& cell, std::span<const std::int64_t> predicted_steps,
                                   std::span<const double> predicted, std::span<const std::int64_t> measured_steps,
                                   std::span<const double> measured, const CrossingOptions& options,
                                   std::int64_t group_size) {
  CellCrossing cc;
  cc.cell = cell;
  cc.group_size = group_size;
  cc.below_min_group_size = group_size >= 0 && group_size < options.min_group_size;
  try {
    if (measured_steps.empty()) {
      throw ForecastError("compare_cell_crossing: empty measured series");
    }
    CrossingOptions o = options;
    o.burn_in = options.burn_in.value_or(measured_steps.front());
    cc.predicted = find_crossing(predicted_steps, predicted, o);
    cc.measured = find_crossing(measured_steps, measured, o);
  } catch (const ForecastError& e) {
    throw ForecastError(std::string(e.what()) + " (cell " + cell + ")");
  }
  if (!(options.tolerance >= 0) || std::isinf(options.tolerance)) {
    throw ForecastError("compare_cell_crossing: tolerance must be finite and >= 0, got " +
                        stats::value_text(options.tolerance));
  }
  cc.category = categorize(cc.predicted.status, cc.measured.status);
  cc.relative_error = kNaN;
  if (cc.category == CrossingCategory::both_cross) {
    cc.relative_error = std::abs(cc.predicted.time - cc.measured.time) / cc.measured.time;
    cc.within_tolerance = cc.relative_error <= options.tolerance;
  }
  cc.differs = cc.category != CrossingCategory::undetermined && cc.predicted.status != cc.measured.status;
  return cc;
}

CrossingSummary summarize_crossings(const std::vector<CellCrossing>& cells, const CrossingOptions& options) {
  if (cells.empty()) {
    throw ForecastError("summarize_crossings: no cells");
  }
  CrossingSummary s;
  s.threshold = options.threshold;
  s.tolerance = options.tolerance;
  s.burn_in = cells.front().measured.burn_in;
  s.min_group_size = options.min_group_size;
  std::vector<double> measured_times, predicted_times, rel_errors;
  std::map<int, std::pair<CrossingDecade, std::vector<double>>> decades;  // by floor(log10 t)
  for (const CellCrossing& cc : cells) {
    if (cc.measured.burn_in != s.burn_in) {
      s.burn_in = kNaN;
    }
    if (cc.below_min_group_size) {
      ++s.below_min_group_size;
      continue;
    }
    ++s.cells;
    s.measured_recrossing += cc.measured.status == CrossingStatus::crossed && cc.measured.recrossings > 0;
    s.predicted_recrossing += cc.predicted.status == CrossingStatus::crossed && cc.predicted.recrossings > 0;
    if (cc.measured.status == CrossingStatus::crossed) {
      const int k = static_cast<int>(std::floor(std::log10(cc.measured.time)));
      auto& [d, errors] = decades[k];
      d.lo = std::pow(10.0, k);
      d.hi = std::pow(10.0, k + 1);
      ++d.measured_crossing;
      if (cc.category == CrossingCategory::both_cross) {
        ++d.both_cross;
        d.within_tolerance += cc.within_tolerance;
        errors.push_back(cc.relative_error);
      }
    }
    switch (cc.category) {
      case CrossingCategory::both_cross:
        ++s.both_cross;
        break;
      case CrossingCategory::only_predicted:
        ++s.only_predicted;
        break;
      case CrossingCategory::only_measured:
        ++s.only_measured;
        break;
      case CrossingCategory::neither:
        ++s.neither;
        break;
      case CrossingCategory::both_above_at_init:
        ++s.both_above_at_init;
        break;
      case CrossingCategory::measured_above_at_init:
        ++s.measured_above_at_init;
        break;
      case CrossingCategory::predicted_above_at_init:
        ++s.predicted_above_at_init;
        break;
      case CrossingCategory::undetermined:
        ++s.undetermined;
        break;
    }
    if (cc.category == CrossingCategory::both_cross) {
      rel_errors.push_back(cc.relative_error);
    }
    if (cc.within_tolerance) {
      ++s.within_tolerance;
    }
    if (cc.differs) {
      ++s.differ_in_category;
    }
    if (cc.measured.status == CrossingStatus::crossed) {
      measured_times.push_back(cc.measured.time);
    }
    if (cc.predicted.status == CrossingStatus::crossed) {
      predicted_times.push_back(cc.predicted.time);
    }
  }
  s.measured_crossing = static_cast<int>(measured_times.size());
  const auto span = [](const std::vector<double>& t) {
    if (t.empty()) {
      return kNaN;
    }
    const auto [mn, mx] = std::minmax_element(t.begin(), t.end());
    return *mx / *mn;
  };
  s.measured_span = span(measured_times);
  s.predicted_span = span(predicted_times);
  const auto median = [](std::vector<double> v) {
    if (v.empty()) {
      return kNaN;
    }
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  s.median_relative_error = median(rel_errors);
  for (auto& [k, entry] : decades) {
    entry.first.median_relative_error = median(entry.second);
    s.by_decade.push_back(entry.first);
  }
  if (s.cells == 0) {
    throw ForecastError("summarize_crossings: all " + std::to_string(cells.size()) + " cells are below the minimum " +
                        "group size " + std::to_string(options.min_group_size));
  }
  return s;
}

CrossingComparison compare_crossings(const stats::CellTable& predicted, const stats::CellTable& measured,
                                     const CrossingOptions& options, std::span<const std::int64_t> group_sizes) {
  if (!group_sizes.empty() && group_sizes.size() != predicted.cells.size()) {
    throw ForecastError("compare_crossings: " + std::to_string(group_sizes.size()) + " group sizes for " +
                        std::to_string(predicted.cells.size()) + " cells");
  }
  if (predicted.cells != measured.cells) {
    throw ForecastError("compare_crossings: predicted and measured tables list different cells (" +
                        std::to_string(predicted.cells.size()) + " vs " + std::to_string(measured.cells.size()) +
                        " rows, or a different order)");
  }
  if (predicted.steps != measured.steps) {
    throw ForecastError("compare_crossings: predicted and measured tables have different step grids");
  }
  check_labels(predicted, "compare_crossings (predicted)");
  check_labels(measured, "compare_crossings (measured)");
  if (predicted.cells.empty()) {
    throw ForecastError("compare_crossings: no cells");
  }
  CrossingComparison out;
  for (std::size_t r = 0; r < predicted.cells.size(); ++r) {
    out.cells.push_back(compare_cell_crossing(predicted.cells[r], predicted.steps, row_of(predicted, r), measured.steps,
                                              row_of(measured, r), options, group_sizes.empty() ? -1 : group_sizes[r]));
  }
  out.summary = summarize_crossings(out.cells, options);
  return out;
}

}  // namespace wbaudit::forecast
