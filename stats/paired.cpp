#include "stats/paired.hpp"

#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <set>

#include "stats/error.hpp"
#include "stats/summation.hpp"

namespace wbaudit::stats {

TInterval t_interval(std::vector<double> const& values, double confidence) {
  if (values.size() < 2) {
    throw StatsError("t_interval: needs at least 2 values, got " + std::to_string(values.size()));
  }
  if (!(confidence > 0 && confidence < 1)) {
    throw StatsError("t_interval: confidence must be in (0, 1), got " + value_text(confidence));
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw StatsError("t_interval: value " + std::to_string(i) + " is not finite (" + value_text(values[i]) + ")");
    }
  }
  double const n = double(values.size());
  double const mean = compensated_sum(values) / n;
  NeumaierSum ss;
  for (double v : values) {
    ss.add((v - mean) * (v - mean));
  }
  TInterval r;
  r.estimate = mean;
  r.confidence = confidence;
  r.degrees_of_freedom = int(values.size()) - 1;
  r.standard_error = std::sqrt(ss.value() / (n - 1)) / std::sqrt(n);
  boost::math::students_t_distribution<double> const t(r.degrees_of_freedom);
  double const half = boost::math::quantile(t, 1 - (1 - confidence) / 2) * r.standard_error;
  r.lower = mean - half;
  r.upper = mean + half;
  return r;
}

namespace detail {

void check_pairs(std::vector<std::string> const& units, std::vector<double> const& a, std::vector<double> const& b,
                 std::string_view context, bool nonzero_b) {
  std::string const ctx(context);
  if (a.size() != b.size() || a.size() != units.size()) {
    throw StatsError(ctx + ": " + std::to_string(units.size()) + " units but " + std::to_string(a.size()) + " and " +
                     std::to_string(b.size()) + " values");
  }
  if (a.size() < 2) {
    throw StatsError(ctx + ": needs at least 2 pairs, got " + std::to_string(a.size()));
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!seen.insert(units[i]).second) {
      throw StatsError(ctx + ": unit \"" + units[i] + "\" appears twice");
    }
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      throw StatsError(ctx + ": unit \"" + units[i] + "\" has a non-finite value (" + value_text(a[i]) + ", " +
                       value_text(b[i]) + ")");
    }
    if (nonzero_b && b[i] == 0) {
      throw StatsError(ctx + ": unit \"" + units[i] + "\" has a zero denominator");
    }
  }
}

double mean_of(std::vector<double> const& v, std::span<std::int64_t const> idx) {
  NeumaierSum s;
  for (auto i : idx) {
    s.add(v[std::size_t(i)]);
  }
  return s.value() / double(idx.size());
}

double ratio_of_sums(std::vector<double> const& a, std::vector<double> const& b, std::span<std::int64_t const> idx) {
  NeumaierSum sa, sb;
  for (auto i : idx) {
    sa.add(a[std::size_t(i)]);
    sb.add(b[std::size_t(i)]);
  }
  if (sb.value() == 0) {
    throw StatsError("ratio_of_means: the denominator sums to 0 on this sample");
  }
  return sa.value() / sb.value();
}

}  // namespace detail

}  // namespace wbaudit::stats
