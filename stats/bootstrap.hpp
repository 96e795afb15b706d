#pragma once
// Bootstrap confidence intervals over independent units, parallel over resamples with Kokkos.
//
// Resampling (BootstrapSpec::resampling):
//   units         each resample draws n unit indices uniformly with replacement from [0, n) (Efron 1979);
//   moving_block  for a series of n time points: ceil(n / L) blocks of L consecutive indices, each starting
//                 uniformly in [0, n - L], concatenated and cut to n (Kuensch 1989).
// Draw d of resample b uses uniform_index(seed, b, d, .) (stats/rng.hpp); each resample's statistic is computed
// independently into slot b, and quantiles are read from the sorted vector, so the result is bitwise identical
// for any execution space and thread count.
//
// Intervals (BootstrapSpec::method), level 1 - alpha = confidence, replicates theta*_1..theta*_B sorted:
//   quantile(q)  type-7 (linear interpolation): h = (B - 1) q, theta*_(floor h) + (h - floor h) (next - it)
//   percentile   [quantile(alpha/2), quantile(1 - alpha/2)]
//   bca          (Efron 1987) z0 = Phi^-1((#{theta* < theta_hat} + #{theta* == theta_hat} / 2) / B),
//                acceleration a = sum (mean_J - theta_(i))^3 / (6 (sum (mean_J - theta_(i))^2)^(3/2)) over the
//                jackknife values theta_(i) (leave one unit out; for moving_block leave out each block of L
//                consecutive points; above kJackknifeGroups units, the grouped jackknife of Efron & Narasimhan's
//                bcajack: units split into kJackknifeGroups groups of consecutive indices, group g = [floor(g n / G),
//                floor((g + 1) n / G)), each left out in turn), and the interval [quantile(q_lo), quantile(q_hi)] with
//                q = Phi(z0 + (z0 + z) / (1 - a (z0 + z))) for z = Phi^-1(alpha/2), Phi^-1(1 - alpha/2).
// Every Interval records the estimate, the method, the resampling scheme, the seed, the resample count and the
// number of units, so a reported interval can be reproduced exactly.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "stats/error.hpp"
#include "stats/rng.hpp"

namespace wbaudit::stats {

// BCa's jackknife over more units than this leaves out groups of units instead of single units (grouped jackknife),
// so that its cost is G statistics, not n: the plain jackknife made a 10,000-unit evaluation quadratic in the units.
inline constexpr std::int64_t kJackknifeGroups = 1000;

enum class IntervalMethod { percentile, bca };
enum class Resampling { units, moving_block };

// "percentile" / "bca" and "units" / "moving_block"; unknown names throw StatsError listing the known ones.
IntervalMethod interval_method_from_name(std::string_view name);
Resampling resampling_from_name(std::string_view name);
std::string_view to_string(IntervalMethod method);
std::string_view to_string(Resampling resampling);

struct BootstrapSpec {
  std::uint64_t seed = 0;
  int resamples = 2000;
  double confidence = 0.95;  // 1 - alpha
  IntervalMethod method = IntervalMethod::bca;
  Resampling resampling = Resampling::units;
  int block_length = 1;  // L, moving_block only
};

struct Interval {
  double estimate = 0;  // the statistic on the original sample
  double lower = 0;
  double upper = 0;
  double confidence = 0.95;
  IntervalMethod method = IntervalMethod::bca;
  Resampling resampling = Resampling::units;
  int block_length = 1;
  std::uint64_t seed = 0;
  int resamples = 0;
  std::int64_t n_units = 0;    // units (or time points for moving_block) resampled
  double bias_correction = 0;  // z0 (bca only)
  double acceleration = 0;     // a (bca only)

  // e.g. "0.0123 [0.0101, 0.0150] (95% bca, units n=72, 2000 resamples, seed 7)"
  std::string describe() const;
};

struct BootstrapResult {
  Interval interval;
  std::vector<double> replicates;  // theta*_b in resample order b = 0..B-1
  std::vector<double> jackknife;   // theta_(i) (bca only)
};

// Throws StatsError on resamples < 2, confidence outside (0, 1), block_length outside [1, n - 1] for moving_block,
// or n_units < 2.
void check_bootstrap_spec(BootstrapSpec const& spec, std::int64_t n_units);

// The unit indices of resample b (length n). Exposed so that callers and tests can inspect a resample.
void resample_indices(BootstrapSpec const& spec, std::int64_t n_units, std::uint64_t resample,
                      std::span<std::int64_t> out);

// Interval from replicates (any order) and, for bca, jackknife values. Throws StatsError when a replicate is not
// finite or BCa is undefined (all replicates on one side of the estimate, or 1 - a (z0 + z) <= 0).
Interval make_interval(double estimate, std::vector<double> replicates, std::vector<double> const& jackknife,
                       BootstrapSpec const& spec, std::int64_t n_units);

namespace detail {
[[noreturn]] void throw_statistic_failure(std::string_view what, std::uint64_t index, std::string_view message);
}

// Bootstrap of `statistic`, a callable `double(std::span<std::int64_t const> indices) const` evaluated on the unit
// indices of the original sample (0..n-1), of each resample (length n, with repeats), and for bca on each
// jackknife sample (length n - 1, or n - L). It is called concurrently from the threads of `space` (a host
// execution space), so it must be thread-safe (read-only captures). If it throws or returns a non-finite value,
// the bootstrap throws StatsError naming the resample.
template <class ExecSpace, class Statistic>
BootstrapResult bootstrap_replicates(ExecSpace const& space, std::int64_t n_units, Statistic const& statistic,
                                     BootstrapSpec const& spec) {
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible,
                "wbaudit::stats::bootstrap runs host statistics: use a host execution space");
  check_bootstrap_spec(spec, n_units);
  std::vector<std::int64_t> all(static_cast<std::size_t>(n_units));
  for (std::int64_t i = 0; i < n_units; ++i) {
    all[std::size_t(i)] = i;
  }
  double const estimate = statistic(std::span<std::int64_t const>(all));

  BootstrapResult result;
  result.replicates.assign(std::size_t(spec.resamples), 0.0);
  std::vector<char> failed(std::size_t(spec.resamples), 0);
  double* const replicates = result.replicates.data();
  char* const failures = failed.data();
  Kokkos::parallel_for("wbaudit::stats::bootstrap::resamples", Kokkos::RangePolicy<ExecSpace>(space, 0, spec.resamples),
                       [&, replicates, failures](int b) {
                         std::vector<std::int64_t> idx(static_cast<std::size_t>(n_units));
                         try {
                           resample_indices(spec, n_units, std::uint64_t(b), idx);
                           replicates[b] = statistic(std::span<std::int64_t const>(idx));
                         } catch (...) {
                           failures[b] = 1;
                         }
                       });
  space.fence();
  for (int b = 0; b < spec.resamples; ++b) {
    if (failures[b]) {  // rerun serially to report the exception
      std::vector<std::int64_t> idx(static_cast<std::size_t>(n_units));
      resample_indices(spec, n_units, std::uint64_t(b), idx);
      try {
        (void)statistic(std::span<std::int64_t const>(idx));
      } catch (std::exception const& e) {
        detail::throw_statistic_failure("resample", std::uint64_t(b), e.what());
      }
      detail::throw_statistic_failure("resample", std::uint64_t(b), "unknown exception");
    }
  }

  if (spec.method == IntervalMethod::bca) {
    // Leave one unit out (units; above kJackknifeGroups units, one group of consecutive units) or one block of L
    // consecutive points out (moving_block). Jackknife sample i leaves out [first(i), first(i) + left_out(i)).
    bool const grouped = spec.resampling == Resampling::units && n_units > kJackknifeGroups;
    std::int64_t const block = spec.resampling == Resampling::units ? 1 : spec.block_length;
    std::int64_t const n_jack = grouped ? kJackknifeGroups : n_units - block + 1;
    auto const first = [=](std::int64_t i) { return grouped ? i * n_units / kJackknifeGroups : i; };
    auto const left_out = [=](std::int64_t i) { return grouped ? first(i + 1) - first(i) : block; };
    result.jackknife.assign(std::size_t(n_jack), 0.0);
    std::vector<char> jack_failed(std::size_t(n_jack), 0);
    double* const jack = result.jackknife.data();
    char* const jack_failures = jack_failed.data();
    Kokkos::parallel_for("wbaudit::stats::bootstrap::jackknife", Kokkos::RangePolicy<ExecSpace>(space, 0, n_jack),
                         [&, jack, jack_failures](std::int64_t i) {
                           std::vector<std::int64_t> idx;
                           idx.reserve(std::size_t(n_units - left_out(i)));
                           for (std::int64_t u = 0; u < n_units; ++u) {
                             if (u < first(i) || u >= first(i) + left_out(i)) {
                               idx.push_back(u);
                             }
                           }
                           try {
                             jack[i] = statistic(std::span<std::int64_t const>(idx));
                           } catch (...) {
                             jack_failures[i] = 1;
                           }
                         });
    space.fence();
    for (std::int64_t i = 0; i < n_jack; ++i) {
      if (jack_failures[i]) {
        detail::throw_statistic_failure("jackknife sample", std::uint64_t(i), "statistic threw");
      }
    }
  }
  result.interval = make_interval(estimate, result.replicates, result.jackknife, spec, n_units);
  return result;
}

template <class ExecSpace, class Statistic>
Interval bootstrap(ExecSpace const& space, std::int64_t n_units, Statistic const& statistic,
                   BootstrapSpec const& spec) {
  return bootstrap_replicates(space, n_units, statistic, spec).interval;
}

template <class Statistic>
Interval bootstrap(std::int64_t n_units, Statistic const& statistic, BootstrapSpec const& spec) {
  return bootstrap(Kokkos::DefaultHostExecutionSpace{}, n_units, statistic, spec);
}

}  // namespace wbaudit::stats
