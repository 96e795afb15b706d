#pragma once
// Paired comparisons of per-unit statistics a_i and b_i, i = 1..n, paired by unit (e.g. recoveries of two
// policies paired by seed).
//   differences d_i = a_i - b_i; mean_difference = (1/n) sum d_i
//   paired t interval: mean_difference +- t_{1 - alpha/2, n-1} s_d / sqrt(n), s_d the sample standard deviation
//     (n - 1 denominator) of the d_i (one-sample t on the differences; Boost.Math students_t)
//   ratios r_i = a_i / b_i; mean_ratio = (1/n) sum r_i, with the same one-sample t interval on the r_i
//   ratio_of_means = (sum a_i) / (sum b_i), with a bootstrap interval only (no t interval exists for it)
// Every bootstrap interval resamples the pairs (units), keeping a_i and b_i together.
#include <Kokkos_Core.hpp>
#include <optional>
#include <string>
#include <vector>

#include "stats/bootstrap.hpp"

namespace wbaudit::stats {

struct TInterval {
  double estimate = 0;
  double lower = 0;
  double upper = 0;
  double confidence = 0.95;
  double standard_error = 0;   // s / sqrt(n)
  int degrees_of_freedom = 0;  // n - 1
};

// One-sample t interval for the mean of `values` (n >= 2, all finite).
TInterval t_interval(std::vector<double> const& values, double confidence = 0.95);

struct PairedDifference {
  std::vector<std::string> units;
  std::vector<double> differences;  // d_i = a_i - b_i
  TInterval t;                      // paired t interval for mean_difference
  Interval bootstrap;               // bootstrap interval for mean_difference
};

struct PairedRatio {
  std::vector<std::string> units;
  std::vector<double> ratios;  // r_i = a_i / b_i
  TInterval mean_ratio_t;      // t interval for mean_ratio
  Interval mean_ratio_bootstrap;
  Interval ratio_of_means_bootstrap;  // estimate = sum a / sum b
};

namespace detail {
void check_pairs(std::vector<std::string> const& units, std::vector<double> const& a, std::vector<double> const& b,
                 std::string_view context, bool nonzero_b);
double mean_of(std::vector<double> const& v, std::span<std::int64_t const> idx);
double ratio_of_sums(std::vector<double> const& a, std::vector<double> const& b, std::span<std::int64_t const> idx);
}  // namespace detail

// The bootstrap interval of the mean of `values`, each value one unit (e.g. one seed's), resampling the units; nullopt
// for fewer than two values.
inline std::optional<Interval> bootstrap_mean(std::vector<double> const& values, BootstrapSpec const& spec) {
  if (values.size() < 2) {
    return std::nullopt;
  }
  return bootstrap(
      std::int64_t(values.size()), [&](std::span<std::int64_t const> idx) { return detail::mean_of(values, idx); },
      spec);
}

// Throws StatsError on mismatched lengths, fewer than 2 pairs, repeated unit labels or non-finite values.
template <class ExecSpace>
PairedDifference paired_difference(ExecSpace const& space, std::vector<std::string> const& units,
                                   std::vector<double> const& a, std::vector<double> const& b,
                                   BootstrapSpec const& spec) {
  detail::check_pairs(units, a, b, "paired_difference", /*nonzero_b=*/false);
  PairedDifference r;
  r.units = units;
  for (std::size_t i = 0; i < a.size(); ++i) {
    r.differences.push_back(a[i] - b[i]);
  }
  r.t = t_interval(r.differences, spec.confidence);
  auto const& d = r.differences;
  r.bootstrap = bootstrap(
      space, std::int64_t(d.size()), [&](std::span<std::int64_t const> idx) { return detail::mean_of(d, idx); }, spec);
  return r;
}

inline PairedDifference paired_difference(std::vector<std::string> const& units, std::vector<double> const& a,
                                          std::vector<double> const& b, BootstrapSpec const& spec) {
  return paired_difference(Kokkos::DefaultHostExecutionSpace{}, units, a, b, spec);
}

// Additionally throws StatsError when some b_i is 0.
template <class ExecSpace>
PairedRatio paired_ratio(ExecSpace const& space, std::vector<std::string> const& units, std::vector<double> const& a,
                         std::vector<double> const& b, BootstrapSpec const& spec) {
  detail::check_pairs(units, a, b, "paired_ratio", /*nonzero_b=*/true);
  PairedRatio r;
  r.units = units;
  for (std::size_t i = 0; i < a.size(); ++i) {
    r.ratios.push_back(a[i] / b[i]);
  }
  r.mean_ratio_t = t_interval(r.ratios, spec.confidence);
  auto const& ratios = r.ratios;
  auto const n = std::int64_t(a.size());
  r.mean_ratio_bootstrap = bootstrap(
      space, n, [&](std::span<std::int64_t const> idx) { return detail::mean_of(ratios, idx); }, spec);
  r.ratio_of_means_bootstrap = bootstrap(
      space, n, [&](std::span<std::int64_t const> idx) { return detail::ratio_of_sums(a, b, idx); }, spec);
  return r;
}

inline PairedRatio paired_ratio(std::vector<std::string> const& units, std::vector<double> const& a,
                                std::vector<double> const& b, BootstrapSpec const& spec) {
  return paired_ratio(Kokkos::DefaultHostExecutionSpace{}, units, a, b, spec);
}

}  // namespace wbaudit::stats
