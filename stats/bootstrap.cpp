#include "stats/bootstrap.hpp"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <cstdio>

#include "stats/summation.hpp"

namespace wbaudit::stats {

IntervalMethod interval_method_from_name(std::string_view name) {
  if (name == "percentile") {
    return IntervalMethod::percentile;
  }
  if (name == "bca") {
    return IntervalMethod::bca;
  }
  throw StatsError("interval_method_from_name: unknown interval method \"" + std::string(name) +
                   "\" (known: percentile, bca)");
}

Resampling resampling_from_name(std::string_view name) {
  if (name == "units") {
    return Resampling::units;
  }
  if (name == "moving_block") {
    return Resampling::moving_block;
  }
  throw StatsError("resampling_from_name: unknown resampling \"" + std::string(name) +
                   "\" (known: units, moving_block)");
}

std::string_view to_string(IntervalMethod method) {
  return method == IntervalMethod::bca ? "bca" : "percentile";
}

std::string_view to_string(Resampling resampling) {
  return resampling == Resampling::units ? "units" : "moving_block";
}

std::string Interval::describe() const {
  char buf[256];
  std::string scheme(to_string(resampling));
  if (resampling == Resampling::moving_block) {
    scheme += " L=" + std::to_string(block_length);
  }
  std::snprintf(buf, sizeof buf, "%.6g [%.6g, %.6g] (%g%% %s, %s n=%lld, %d resamples, seed %llu)", estimate, lower,
                upper, 100.0 * confidence, std::string(to_string(method)).c_str(), scheme.c_str(),
                static_cast<long long>(n_units), resamples, static_cast<unsigned long long>(seed));
  return buf;
}

void check_bootstrap_spec(BootstrapSpec const& spec, std::int64_t n_units) {
  if (n_units < 2) {
    throw StatsError("bootstrap: needs at least 2 units, got " + std::to_string(n_units));
  }
  if (n_units >= (std::int64_t(1) << 31)) {
    throw StatsError("bootstrap: too many units: " + std::to_string(n_units));
  }
  if (spec.resamples < 2) {
    throw StatsError("bootstrap: resamples must be >= 2, got " + std::to_string(spec.resamples));
  }
  if (!(spec.confidence > 0 && spec.confidence < 1)) {
    throw StatsError("bootstrap: confidence must be in (0, 1), got " + value_text(spec.confidence));
  }
  if (spec.resampling == Resampling::moving_block && (spec.block_length < 1 || spec.block_length >= n_units)) {
    throw StatsError("bootstrap: moving_block block_length must be in [1, " + std::to_string(n_units - 1) + "] for " +
                     std::to_string(n_units) + " time points, got " + std::to_string(spec.block_length));
  }
}

void resample_indices(BootstrapSpec const& spec, std::int64_t n_units, std::uint64_t resample,
                      std::span<std::int64_t> out) {
  if (n_units < 1 || out.size() != std::size_t(n_units)) {
    throw StatsError("resample_indices: output has " + std::to_string(out.size()) + " slots for " +
                     std::to_string(n_units) + " units");
  }
  auto const n = std::uint64_t(n_units);
  if (spec.resampling == Resampling::units) {
    for (std::uint64_t d = 0; d < n; ++d) {
      out[d] = std::int64_t(uniform_index(spec.seed, resample, d, n));
    }
    return;
  }
  auto const block = std::uint64_t(spec.block_length);
  std::uint64_t const n_starts = n - block + 1;
  std::uint64_t filled = 0;
  for (std::uint64_t d = 0; filled < n; ++d) {
    std::uint64_t const start = uniform_index(spec.seed, resample, d, n_starts);
    for (std::uint64_t k = 0; k < block && filled < n; ++k) {
      out[filled++] = std::int64_t(start + k);
    }
  }
}

namespace {

// Type-7 quantile of sorted values.
double quantile_sorted(std::vector<double> const& sorted, double q) {
  double const h = double(sorted.size() - 1) * q;
  auto const lo = std::size_t(std::floor(h));
  if (lo + 1 >= sorted.size()) {
    return sorted.back();
  }
  double const frac = h - double(lo);
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

}  // namespace

namespace detail {
void throw_statistic_failure(std::string_view what, std::uint64_t index, std::string_view message) {
  throw StatsError("bootstrap: the statistic failed on " + std::string(what) + " " + std::to_string(index) + ": " +
                   std::string(message));
}
}  // namespace detail

Interval make_interval(double estimate, std::vector<double> replicates, std::vector<double> const& jackknife,
                       BootstrapSpec const& spec, std::int64_t n_units) {
  if (!std::isfinite(estimate)) {
    throw StatsError("bootstrap: the statistic is not finite on the original sample");
  }
  for (std::size_t b = 0; b < replicates.size(); ++b) {
    if (!std::isfinite(replicates[b])) {
      throw StatsError("bootstrap: the statistic is not finite (" + value_text(replicates[b]) + ") on resample " +
                       std::to_string(b));
    }
  }
  if (replicates.size() < 2) {
    throw StatsError("bootstrap: fewer than 2 replicates");
  }
  Interval r;
  r.estimate = estimate;
  r.confidence = spec.confidence;
  r.method = spec.method;
  r.resampling = spec.resampling;
  r.block_length = spec.resampling == Resampling::moving_block ? spec.block_length : 1;
  r.seed = spec.seed;
  r.resamples = int(replicates.size());
  r.n_units = n_units;
  std::sort(replicates.begin(), replicates.end());
  double const alpha = 1.0 - spec.confidence;
  if (spec.method == IntervalMethod::percentile) {
    r.lower = quantile_sorted(replicates, alpha / 2);
    r.upper = quantile_sorted(replicates, 1 - alpha / 2);
    return r;
  }
  boost::math::normal_distribution<double> const normal;
  auto const below = std::lower_bound(replicates.begin(), replicates.end(), estimate) - replicates.begin();
  auto const equal = std::upper_bound(replicates.begin(), replicates.end(), estimate) - replicates.begin() - below;
  double const p0 = (double(below) + 0.5 * double(equal)) / double(replicates.size());
  if (!(p0 > 0 && p0 < 1)) {
    throw StatsError("bootstrap: BCa undefined: all " + std::to_string(replicates.size()) +
                     " replicates lie on one side of the estimate " + value_text(estimate) +
                     " (use the percentile method or more units)");
  }
  r.bias_correction = boost::math::quantile(normal, p0);
  if (jackknife.size() < 2) {
    throw StatsError("bootstrap: BCa needs at least 2 jackknife values");
  }
  for (std::size_t i = 0; i < jackknife.size(); ++i) {
    if (!std::isfinite(jackknife[i])) {
      throw StatsError("bootstrap: the statistic is not finite on jackknife sample " + std::to_string(i));
    }
  }
  double const jack_mean = compensated_sum(jackknife) / double(jackknife.size());
  NeumaierSum s2, s3;
  for (double v : jackknife) {
    double const d = jack_mean - v;
    s2.add(d * d);
    s3.add(d * d * d);
  }
  r.acceleration = s2.value() > 0 ? s3.value() / (6.0 * std::pow(s2.value(), 1.5)) : 0.0;
  auto adjusted = [&](double z) {
    double const w = r.bias_correction + z;
    double const denom = 1.0 - r.acceleration * w;
    if (!(denom > 0)) {
      throw StatsError("bootstrap: BCa undefined: 1 - a (z0 + z) = " + value_text(denom) + " <= 0 (acceleration " +
                       value_text(r.acceleration) + ")");
    }
    return boost::math::cdf(normal, r.bias_correction + w / denom);
  };
  double const z_lo = boost::math::quantile(normal, alpha / 2);
  double const z_hi = boost::math::quantile(normal, 1 - alpha / 2);
  r.lower = quantile_sorted(replicates, adjusted(z_lo));
  r.upper = quantile_sorted(replicates, adjusted(z_hi));
  return r;
}

}  // namespace wbaudit::stats
