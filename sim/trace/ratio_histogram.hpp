#pragma once
// The bin of one coordinate in the reference trace's log2-ratio histogram (docs/trace-format.md): d =
// floor(log2|w|) - log2|u| in bins of RatioHistogramLayout, clamped into the first and last bins. The same rule
// as the simulator's reference recording (sim/engine.cpp), one function the engine and the Python recorder share.
#include <Kokkos_Core.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

inline constexpr int kRatioBinZeroProposal = -1;  // u == 0: not a proposal
inline constexpr int kRatioBinZeroWeight = -2;    // u != 0 and w == 0: counted in zero_weight, not binned
inline constexpr int kRatioBinNonFinite = -3;     // w or u NaN/inf

// The rule as written: d in double through std::log2, then the bin.
KOKKOS_INLINE_FUNCTION int ratio_bin_by_log2(double d_min, double bin_width, int bins, float w, float u) {
  const double d = static_cast<double>(std::ilogb(w)) - std::log2(std::fabs(static_cast<double>(u)));
  const double b = std::floor((d - d_min) / bin_width);
  return b < 0 ? 0 : (b >= bins ? bins - 1 : static_cast<int>(b));
}

namespace detail {
// |x| = (1 + f 2^-23) 2^e for finite nonzero x, subnormals normalized: e and the 23-bit fraction f.
KOKKOS_INLINE_FUNCTION void exponent_and_fraction(float x, int& e, std::uint32_t& f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x) & 0x7fffffffu;
  const std::uint32_t field = bits >> 23;
  f = bits & 0x7fffffu;
  if (field != 0) {
    e = static_cast<int>(field) - 127;
    return;
  }
  const int shift = __builtin_clz(f) - 8;  // the leading bit of a subnormal's fraction moved to bit 23
  f = (f << shift) & 0x7fffffu;
  e = -126 - shift;
}

// For bins of 1/8 binade: 1 + kEighthBinadeFraction[j - 1] 2^-23 is the least float in [1, 2) above 2^(j/8)
// (floor((2^(j/8) - 1) 2^23) + 1; each 2^(j/8) lies at least 0.067 of a float step from the floats around it, so
// double rounding in ratio_bin_by_log2 never puts a float on the other side: tests/sim/model/test_trace.cpp checks
// every fraction).
inline constexpr std::uint32_t kEighthBinadeFraction[7] = {759234,  1587185, 2490071, 3474676,
                                                           4548395, 5719293, 6996167};
}  // namespace detail

// True when the layout's bins are 1/8 binade from an integer d_min (the default layout): ratio_bin_eighth applies.
KOKKOS_INLINE_FUNCTION bool ratio_bins_are_eighths(double d_min, double bin_width) {
  return bin_width == 0.125 && d_min == std::floor(d_min) && std::fabs(d_min) <= 1024.0;
}

// The bin of finite nonzero w, u for 1/8-binade bins from the integer d_min, exactly ratio_bin_by_log2 from the
// bits: log2|u| = e_u + lambda with lambda = log2(1 + f 2^-23) in [0, 1), so floor(8 (e_w - e_u - lambda - d_min)) =
// 8 (e_w - e_u - d_min) - ceil(8 lambda), and ceil(8 lambda) counts the thresholds 2^(j/8) below 1 + f 2^-23 (plus
// one when f != 0).
KOKKOS_INLINE_FUNCTION int ratio_bin_eighth(int d_min, int bins, float w, float u) {
  int ew = 0, eu = 0;
  std::uint32_t fw = 0, fu = 0;
  detail::exponent_and_fraction(w, ew, fw);
  detail::exponent_and_fraction(u, eu, fu);
  int ceil8 = fu != 0 ? 1 : 0;
  for (std::uint32_t t : detail::kEighthBinadeFraction) {
    ceil8 += fu >= t ? 1 : 0;
  }
  const int b = 8 * (ew - eu - d_min) - ceil8;
  return b < 0 ? 0 : (b >= bins ? bins - 1 : b);
}

// The bin of finite nonzero w, u: ratio_bin_eighth for the default layout's bins, else ratio_bin_by_log2.
KOKKOS_INLINE_FUNCTION int ratio_bin_finite(double d_min, double bin_width, int bins, float w, float u) {
  if (!ratio_bins_are_eighths(d_min, bin_width)) {
    return ratio_bin_by_log2(d_min, bin_width, bins, w, u);
  }
  return ratio_bin_eighth(static_cast<int>(d_min), bins, w, u);
}

KOKKOS_INLINE_FUNCTION int ratio_bin(double d_min, double bin_width, int bins, float w, float u) {
  if (!std::isfinite(u) || !std::isfinite(w)) {
    return kRatioBinNonFinite;
  }
  if (u == 0.0f) {
    return kRatioBinZeroProposal;
  }
  if (w == 0.0f) {
    return kRatioBinZeroWeight;
  }
  return ratio_bin_finite(d_min, bin_width, bins, w, u);
}

// Nothing more to do per coordinate (RatioHistogramReduce's default).
struct NoPerCoordinate {
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t, float, float) const {}
};

inline constexpr std::size_t kRatioHistogramChunk = 4096;  // coordinates per work item of RatioHistogramReduce

// One recorded step's d histogram of (w, u) in a single pass: counts[0, bins) the bins, then counts[bins] the
// proposals (u != 0, finite), counts[bins + 1] those with w == 0 (not binned), counts[bins + 2] the coordinates with a
// non-finite w or u. An integer array reduction over chunks of kRatioHistogramChunk coordinates (the three totals
// kept in registers within a chunk: incrementing them in the reduction array chained every coordinate through
// memory), so the counts do not depend on the thread count. `each(i, w, u)` runs on every coordinate in the same pass
// (unused by the recording since the margin histogram: sim/trace/reference_histograms.hpp computes both at once).
template <class ExecSpace, class Each = NoPerCoordinate>
struct RatioHistogramReduce {
  using value_type = std::int64_t[];
  using size_type = std::size_t;
  size_type value_count;
  Kokkos::View<const float*, typename ExecSpace::memory_space> w, u;
  double d_min, bin_width;
  int bins;
  Each each;

  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t chunk, value_type counts) const {
    const std::size_t lo = chunk * kRatioHistogramChunk, n = w.extent(0);
    const std::size_t hi = n - lo < kRatioHistogramChunk ? n : lo + kRatioHistogramChunk;
    const bool eighths = ratio_bins_are_eighths(d_min, bin_width);
    const int d_min_int = eighths ? static_cast<int>(d_min) : 0;
    std::int64_t proposals = 0, zero_weight = 0, bad = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      const float wi = w(i), ui = u(i);
      each(i, wi, ui);
      if (!std::isfinite(ui) || !std::isfinite(wi)) {
        ++bad;
        continue;
      }
      if (ui == 0.0f) {
        continue;
      }
      ++proposals;
      if (wi == 0.0f) {
        ++zero_weight;
        continue;
      }
      ++counts[eighths ? ratio_bin_eighth(d_min_int, bins, wi, ui) : ratio_bin_by_log2(d_min, bin_width, bins, wi, ui)];
    }
    counts[bins] += proposals;
    counts[bins + 1] += zero_weight;
    counts[bins + 2] += bad;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type counts) const {
    for (size_type k = 0; k < value_count; ++k) {
      counts[k] = 0;
    }
  }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type dst, const volatile value_type src) const {
    for (size_type k = 0; k < value_count; ++k) {
      {
        {
          {
            dst[k] = dst[k] + src[k];  // no compound assignment on volatile (C++20)
          }
        }
      }
    }
  }
};

template <class ExecSpace, class Each = NoPerCoordinate>
std::vector<std::int64_t> ratio_histogram_counts(const ExecSpace& space, const RatioHistogramLayout& layout,
                                                 Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                                 Each each = {}) {
  const std::size_t n = static_cast<std::size_t>(layout.bins) + 3;
  std::vector<std::int64_t> counts(n, 0);
  Kokkos::View<std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> result(counts.data(), n);
  const std::size_t chunks = (w.extent(0) + kRatioHistogramChunk - 1) / kRatioHistogramChunk;
  Kokkos::parallel_reduce(
      "wbaudit::sim::trace::ratio_histogram", Kokkos::RangePolicy<ExecSpace>(space, 0, chunks),
      RatioHistogramReduce<ExecSpace, Each>{n, w, u, layout.d_min, layout.bin_width, layout.bins, each}, result);
  space.fence();
  return counts;
}

}  // namespace wbaudit::sim
