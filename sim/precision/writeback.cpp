// Write-back kernels and their explicit instantiations for the host execution spaces (Serial, OpenMP).
#include "sim/precision/writeback.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace wbaudit::sim {
namespace {

template <class MemorySpace>
using FloatView = Kokkos::View<float*, MemorySpace>;
template <class MemorySpace>
using ConstFloatView = Kokkos::View<const float*, MemorySpace>;

// Integer event counts are summed, so the totals do not depend on the order of the reduction.
struct CountsReducerBase {
  using value_type = WritebackCounts;
  KOKKOS_INLINE_FUNCTION void init(value_type& c) const { c = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
    a.nonzero = a.nonzero + b.nonzero;
    a.erased = a.erased + b.erased;
    a.saturated = a.saturated + b.saturated;
    a.applied = a.applied + b.applied;
    a.sr_applied = a.sr_applied + b.sr_applied;
    a.nonfinite = a.nonfinite + b.nonfinite;
    a.sr_truncated = a.sr_truncated + b.sr_truncated;
  }
};

KOKKOS_INLINE_FUNCTION bool finite(float v) {
  return std::isfinite(v);
}

// ---- Fast path ----
// Branch-light per-element rounding used by the kernel for the common case; it flags the rare cases it cannot decide
// exactly (w + u not exact in double, intK near-ties, SR draws that tie with the first 32 random bits), and those
// coordinates are recomputed with the exact generic path (writeback_value), which consumes the same random words.
// So the kernel's results are exactly writeback_value's, only faster.
struct FastParams {
  double max_finite;
  std::int64_t emin_biased;  // biased exponent (double) of the smallest normal binade
  std::int64_t man_bits;
  double scale, inv_scale;  // intK
  int sr_bits;
};

struct FastResult {
  float value;
  bool saturated, random, truncated, slow;
};

KOKKOS_INLINE_FUNCTION double with_sign(double magnitude, std::uint64_t sign) {
  return std::bit_cast<double>(std::bit_cast<std::uint64_t>(magnitude) | sign);
}

constexpr double kRound52 = 0x1.8p52;  // (y + kRound52) - kRound52 == nearbyint(y) (ties to even) for |y| < 2^51

KOKKOS_INLINE_FUNCTION double floor_small(double y) {  // floor for |y| < 2^51 without a libm call
  const double r = (y + kRound52) - kRound52;
  return r > y ? r - 1 : r;
}

// Mode: 0 nearest, 1 stochastic, 2 deadzone-sr.
template <bool Integer, int Mode>
KOKKOS_INLINE_FUNCTION FastResult fast_writeback(const FastParams& fp, float wi, float ui, std::uint32_t word) {
  FastResult r{};
  const double wd = wi, ud = ui;
  const double s = wd + ud;  // TwoSum: err == 0 iff s is the exact sum
  const double bb = s - wd;
  const double err = (wd - (s - bb)) + (ud - bb);
  bool slow = err != 0;
  const std::uint64_t sbits = std::bit_cast<std::uint64_t>(s);
  const std::uint64_t sign = sbits & 0x8000000000000000ull;
  const double ax = std::bit_cast<double>(sbits ^ sign);
  const bool sat = ax > fp.max_finite;
  double y, unit, nearest_mag;
  if constexpr (Integer) {
    y = ax * fp.inv_scale;  // not exact (odd scale factors): decisions keep a margin, near-ties go slow
    const double level = (y + kRound52) - kRound52;
    const double dist = std::fabs(y - level);
    slow = slow || (!sat && std::fabs(dist - 0.5) < 0x1p-30);
    nearest_mag = level * fp.scale;
    unit = fp.scale;
  } else {
    std::int64_t eb = static_cast<std::int64_t>(sbits >> 52) & 0x7ff;
    eb = eb < fp.emin_biased ? fp.emin_biased : eb;
    const std::int64_t qb = eb - fp.man_bits;  // biased exponent of the grid spacing
    const double c = std::bit_cast<double>((static_cast<std::uint64_t>(qb + 52) << 52) | (std::uint64_t{1} << 51));
    nearest_mag = (ax + c) - c;  // round to a multiple of 2^q, ties to even
    unit = std::bit_cast<double>(static_cast<std::uint64_t>(qb) << 52);
    y = ax * std::bit_cast<double>(static_cast<std::uint64_t>(2046 - qb) << 52);  // ax / unit, exact
  }
  const double nearest = with_sign(sat ? fp.max_finite : nearest_mag, sign);
  if constexpr (Mode == 0) {
    r.value = static_cast<float>(nearest);
    r.saturated = sat;
    r.slow = slow;
    return r;
  } else {
    const double fl = floor_small(y);
    double frac = y - fl;  // exact for floating formats
    bool on_grid;
    if constexpr (Integer) {
      on_grid = nearest_mag == ax;  // exact product
      slow = slow || (!on_grid && !sat && (frac < 0x1p-20 || frac > 1 - 0x1p-20));
    } else {
      on_grid = frac == 0;
    }
    const double word_d = static_cast<double>(word);
    bool away, random, truncated = false;
    if (fp.sr_bits == 0) {
      const double z = frac * 0x1p32;
      const double margin = Integer ? 0x1p-8 : 0.0;
      away = word_d + 1 <= z - margin;
      const bool below = word_d >= z + margin;
      slow = slow || (!on_grid && !sat && !away && !below);
      random = true;
    } else {
      const double zr = frac * std::bit_cast<double>(static_cast<std::uint64_t>(1023 + fp.sr_bits) << 52);
      const double d = floor_small(zr);
      if constexpr (Integer) {
        slow = slow || (!on_grid && !sat && (zr - d < 0x1p-20 || zr - d > 1 - 0x1p-20));
      }
      const double rbits = static_cast<double>(fp.sr_bits == 32 ? word : word >> (32 - fp.sr_bits));
      away = rbits < d;
      random = d > 0;
      truncated = d == 0;
    }
    const double sr_mag = sat ? fp.max_finite : (on_grid ? ax : (away ? fl + 1 : fl) * unit);
    const bool off = !on_grid && !sat;
    const bool use_sr = Mode == 1 || (ui != 0 && nearest == wd);
    r.value = static_cast<float>(use_sr ? with_sign(sr_mag, sign) : nearest);
    r.saturated = sat;
    r.random = use_sr && off && random;
    r.truncated = use_sr && off && truncated;
    r.slow = slow && (use_sr || err != 0 || Integer);
    return r;
  }
}

// 0/1 helpers on 64-bit patterns for the vectorized loops. GCC 12 does not vectorize these loops when a comparison
// result (a bool) is widened to an integer, so every decision is plain 64-bit arithmetic: no compares of integers,
// no bool conversions (selects between doubles, which become max/min, are fine).
KOKKOS_INLINE_FUNCTION std::uint64_t nonzero01(std::uint64_t x) {  // x != 0
  return (x | (0 - x)) >> 63;
}
KOKKOS_INLINE_FUNCTION std::uint64_t less01(std::uint64_t a, std::uint64_t b) {  // a < b for a, b < 2^63
  return (a - b) >> 63;
}
KOKKOS_INLINE_FUNCTION std::uint64_t bits_of(double x) {
  return std::bit_cast<std::uint64_t>(x);
}
constexpr std::uint64_t kSignBit = 0x8000000000000000ull;

// Nearest write-back of a block, written so the compiler vectorizes it (SSE2 suffices, checked with
// -fopt-info-vec): doubles, 64-bit integer arithmetic and max/min selects only. Values: w + u in double (exact
// unless `err` != 0), rounded to the grid spacing with the 1.5 * 2^(q+52) trick (ties to even), saturated by a min.
// Flags the coordinates whose sum is not exact in double (and intK near-ties) in `slow_flags`; their counts are left
// out (the caller recomputes them exactly). out may alias nothing; wp, up are read only.
template <bool Integer>
[[gnu::always_inline]] inline std::int64_t nearest_block_body(const FastParams& fp, double min_normal, double c_factor,
                                                              const float* __restrict wp, const float* __restrict up,
                                                              float* __restrict out,
                                                              unsigned char* __restrict slow_flags, std::int64_t len,
                                                              std::int64_t* __restrict counts) {
  std::uint64_t nonzero = 0, erased = 0, applied = 0, saturated = 0, slow = 0;
  const double max_finite = fp.max_finite;
  const std::uint64_t max_bits = bits_of(max_finite);
  const double scale = fp.scale, inv_scale = fp.inv_scale;
  for (std::int64_t k = 0; k < len; ++k) {
    const double wd = wp[k], ud = up[k];
    const double s = wd + ud;
    const double bb = s - wd;
    const double err = (wd - (s - bb)) + (ud - bb);
    const std::uint64_t sbits = bits_of(s);
    const std::uint64_t sign = sbits & kSignBit;
    const std::uint64_t abits = sbits & ~kSignBit;
    const double ax = std::bit_cast<double>(abits);
    std::uint64_t is_slow = nonzero01(bits_of(err) << 1);  // err != 0 (-0 is 0)
    double mag;
    if constexpr (Integer) {
      const double t = ax * inv_scale;
      const double level = (t + kRound52) - kRound52;
      const double dist = t - level;
      // |dist| within 2^-30 of 1/2 (|dist| - 0.5 is exact where it matters, by Sterbenz)
      const double adist = std::bit_cast<double>(bits_of(dist) & ~kSignBit);
      const std::uint64_t off_half = bits_of(adist - 0.5) & ~kSignBit;
      is_slow |= less01(off_half, bits_of(0x1p-30));
      mag = level * scale;
    } else {
      double pw = std::bit_cast<double>(sbits & 0x7ff0000000000000ull);  // 2^floor(log2|s|) (0 for s == 0)
      pw = pw < min_normal ? min_normal : pw;
      const double c = pw * c_factor;  // 1.5 * 2^(q + 52) with 2^q the grid spacing
      mag = (ax + c) - c;
    }
    const std::uint64_t sat = less01(max_bits, abits);  // |s| > max finite (both non-negative)
    mag = mag > max_finite ? max_finite : mag;          // |s| beyond max finite saturates (mag <= max otherwise)
    const std::uint64_t vbits = bits_of(mag) | sign;
    out[k] = static_cast<float>(std::bit_cast<double>(vbits));
    slow_flags[k] = static_cast<unsigned char>(is_slow);
    // changed: q != w as values (+0 == -0); v and w are both fp32 values, so comparing the doubles is exact
    const std::uint64_t wbits = bits_of(wd);
    const std::uint64_t changed = nonzero01(vbits ^ wbits) & nonzero01((vbits | wbits) << 1);
    const std::uint64_t nz = nonzero01(bits_of(ud) << 1);
    const std::uint64_t ok = is_slow ^ 1;
    nonzero += ok & nz;
    erased += ok & nz & (changed ^ 1);
    applied += ok & changed;
    saturated += ok & sat;
    slow += is_slow;
  }
  counts[0] += static_cast<std::int64_t>(nonzero);
  counts[1] += static_cast<std::int64_t>(erased);
  counts[2] += static_cast<std::int64_t>(applied);
  counts[3] += static_cast<std::int64_t>(saturated);
  return static_cast<std::int64_t>(slow);
}

// The block loop compiled for x86-64 (SSE2), AVX2 and AVX-512 and picked at load time (GCC function
// multi-versioning). Every operation is a correctly rounded IEEE operation (no FMA: -ffp-contract=off) or exact
// integer arithmetic, so all versions give identical bits.
// (Defining WBAUDIT_BLOCK_CLONES on the command line overrides the choice, e.g. empty for one SSE2 version.)
#ifndef WBAUDIT_BLOCK_CLONES
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define WBAUDIT_BLOCK_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#endif
#ifndef WBAUDIT_BLOCK_CLONES
#define WBAUDIT_BLOCK_CLONES
#endif

WBAUDIT_BLOCK_CLONES [[gnu::noinline]] std::int64_t nearest_block_float(
    const FastParams& fp, double min_normal, double c_factor, const float* __restrict wp, const float* __restrict up,
    float* __restrict out, unsigned char* __restrict slow_flags, std::int64_t len, std::int64_t* __restrict counts) {
  return nearest_block_body<false>(fp, min_normal, c_factor, wp, up, out, slow_flags, len, counts);
}

WBAUDIT_BLOCK_CLONES [[gnu::noinline]] std::int64_t nearest_block_integer(
    const FastParams& fp, double min_normal, double c_factor, const float* __restrict wp, const float* __restrict up,
    float* __restrict out, unsigned char* __restrict slow_flags, std::int64_t len, std::int64_t* __restrict counts) {
  return nearest_block_body<true>(fp, min_normal, c_factor, wp, up, out, slow_flags, len, counts);
}

template <bool Integer>
std::int64_t nearest_block(const FastParams& fp, double min_normal, double c_factor, const float* wp, const float* up,
                           float* out, unsigned char* slow_flags, std::int64_t len, std::int64_t* counts) {
  if constexpr (Integer) {
    return nearest_block_integer(fp, min_normal, c_factor, wp, up, out, slow_flags, len, counts);
  } else {
    return nearest_block_float(fp, min_normal, c_factor, wp, up, out, slow_flags, len, counts);
  }
}

template <class MemorySpace, bool Integer, int Mode>
struct BlockKernel : CountsReducerBase {
  static constexpr std::int64_t kBlock = 256;
  FloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  FastParams fp;
  WritebackPolicy policy;
  RngKey key;
  std::uint64_t first_coordinate;
  std::int64_t n;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, value_type& c) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t end = begin + kBlock < n ? begin + kBlock : n;
    std::uint32_t words[kBlock];
    if constexpr (Mode != 0) {
      PhiloxStream::Block group{};
      for (std::int64_t i = begin; i < end; ++i) {
        const std::uint64_t coord = first_coordinate + static_cast<std::uint64_t>(i);
        if (i == begin || (coord & 3u) == 0) {
          group = PhiloxStream::first_words(key, coord >> 2);
        }
        words[i - begin] = group.v[coord & 3u];
      }
    }
    float out[kBlock];
    std::int64_t nonzero = 0, erased = 0, applied = 0, saturated = 0, random = 0, truncated = 0, slow = 0;
    if constexpr (Mode == 0) {
      unsigned char flags[kBlock];
      std::int64_t counts[4] = {0, 0, 0, 0};
      slow = nearest_block<Integer>(fp, p.min_normal, 1.5 * detail::pow2(52 - p.man_bits), w.data() + begin,
                                    u.data() + begin, out, flags, end - begin, counts);
      nonzero = counts[0];
      erased = counts[1];
      applied = counts[2];
      saturated = counts[3];
      if (slow > 0) {
        for (std::int64_t i = begin; i < end; ++i) {
          if (!flags[i - begin]) {
            continue;
          }
          const float wi = w(i), ui = u(i);
          const WritebackOutcome o = writeback_value(p, policy, key, first_coordinate + i, wi, ui);
          out[i - begin] = o.value;
          const bool changed = o.value != wi;
          nonzero += ui != 0;
          erased += ui != 0 && !changed;
          applied += changed;
          saturated += o.saturated;
        }
      }
      slow = 0;
    } else {
      for (std::int64_t i = begin; i < end; ++i) {
        const float wi = w(i), ui = u(i);
        const FastResult r = fast_writeback<Integer, Mode>(fp, wi, ui, Mode != 0 ? words[i - begin] : 0u);
        out[i - begin] = r.value;
        const std::int64_t ok = !r.slow;
        const bool changed = r.value != wi;
        nonzero += ok & (ui != 0);
        erased += ok & (ui != 0 && !changed);
        applied += ok & changed;
        saturated += ok & r.saturated;
        random += ok & r.random;
        truncated += ok & r.truncated;
        slow += r.slow;
      }
      if (slow > 0) {  // rare: redo the flagged coordinates exactly
        for (std::int64_t i = begin; i < end; ++i) {
          const float wi = w(i), ui = u(i);
          if (!fast_writeback<Integer, Mode>(fp, wi, ui, Mode != 0 ? words[i - begin] : 0u).slow) {
            continue;
          }
          const WritebackOutcome o = writeback_value(p, policy, key, first_coordinate + i, wi, ui);
          out[i - begin] = o.value;
          const bool changed = o.value != wi;
          nonzero += ui != 0;
          erased += ui != 0 && !changed;
          applied += changed;
          saturated += o.saturated;
          random += o.random;
          truncated += o.truncated;
        }
      }
    }
    for (std::int64_t i = begin; i < end; ++i) {
      w(i) = out[i - begin];
    }
    c.nonzero += nonzero;
    c.erased += erased;
    c.applied += applied;
    c.saturated += saturated;
    c.sr_applied += random;
    c.sr_truncated += truncated;
  }
};

// Counts the coordinates where a or b (b may be empty) is NaN/inf, over blocks of kBlock coordinates with a loop the
// compiler vectorizes (integer test of the exponent field: all ones <=> not finite).
template <class MemorySpace>
struct NonFiniteCount {
  static constexpr std::int64_t kBlock = 1024;
  ConstFloatView<MemorySpace> a;
  ConstFloatView<MemorySpace> b;  // may be empty
  std::int64_t n;
  static std::uint32_t count(const float* __restrict x, std::int64_t len) {
    std::uint32_t bad = 0;
    for (std::int64_t k = 0; k < len; ++k) {
      bad += ((std::bit_cast<std::uint32_t>(x[k]) & 0x7f800000u) + 0x00800000u) >> 31;
    }
    return bad;
  }
  static std::uint32_t count2(const float* __restrict x, const float* __restrict y, std::int64_t len) {
    std::uint32_t bad = 0;
    for (std::int64_t k = 0; k < len; ++k) {
      const std::uint32_t bx = ((std::bit_cast<std::uint32_t>(x[k]) & 0x7f800000u) + 0x00800000u) >> 31;
      const std::uint32_t by = ((std::bit_cast<std::uint32_t>(y[k]) & 0x7f800000u) + 0x00800000u) >> 31;
      bad += bx | by;
    }
    return bad;
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, std::int64_t& bad) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = (begin + kBlock < n ? begin + kBlock : n) - begin;
    bad += b.extent(0) > 0 ? count2(a.data() + begin, b.data() + begin, len) : count(a.data() + begin, len);
  }
};

template <class MemorySpace>
struct FirstNonFinite {
  ConstFloatView<MemorySpace> a;
  ConstFloatView<MemorySpace> b;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t& first) const {
    if ((!finite(a(i)) || (b.extent(0) > 0 && !finite(b(i)))) && i < first) {
      first = i;
    }
  }
};

std::string float_text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// Throws NonFiniteError naming the context and the first offending coordinate when a or b holds NaN/inf.
template <class ExecSpace>
void require_finite(const ExecSpace& space, const std::string& context, const char* name_a,
                    ConstFloatView<typename ExecSpace::memory_space> a, const char* name_b,
                    ConstFloatView<typename ExecSpace::memory_space> b) {
  using MS = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(a.extent(0));
  std::int64_t bad = 0;
  constexpr std::int64_t block = NonFiniteCount<MS>::kBlock;
  Kokkos::parallel_reduce("wbaudit::sim::precision::require_finite::count",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, (n + block - 1) / block),
                          NonFiniteCount<MS>{a, b, n}, bad);
  if (bad == 0) {
    return;
  }
  std::int64_t first = n;
  Kokkos::parallel_reduce("wbaudit::sim::precision::require_finite::first", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
                          FirstNonFinite<MS>{a, b}, Kokkos::Min<std::int64_t>(first));
  auto ha =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, Kokkos::subview(a, Kokkos::make_pair(first, first + 1)));
  std::string msg = context + ": " + std::to_string(bad) + " non-finite value(s); first at coordinate " +
                    std::to_string(first) + ": " + name_a + " = " + float_text(ha(0));
  if (b.extent(0) > 0) {
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{},
                                                  Kokkos::subview(b, Kokkos::make_pair(first, first + 1)));
    msg += std::string(", ") + name_b + " = " + float_text(hb(0));
  }
  throw NonFiniteError(msg);
}

void require_same_extent(const char* where, std::size_t a, std::size_t b) {
  if (a != b) {
    throw std::invalid_argument(std::string(where) + ": extents differ (" + std::to_string(a) + " vs " +
                                std::to_string(b) + ")");
  }
}

template <class MemorySpace>
struct MasterKernel : CountsReducerBase {
  FloatView<MemorySpace> master;
  FloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, value_type& c) const {
    const float ui = u(i);
    const float m = master(i) + ui;  // the fp32 master update
    const float wi = w(i);
    if (!finite(m)) {  // overflow of the master copy itself
      c.nonfinite += 1;
      return;
    }
    const Bracket b = bracket_of(p, ExactSum{static_cast<double>(m), 0.0});
    const auto value = static_cast<float>(nearest_of(b));
    const bool changed = value != wi;
    c.nonzero += ui != 0;
    c.erased += ui != 0 && !changed;
    c.applied += changed;
    c.saturated += b.saturated;
    master(i) = m;
    w(i) = value;
  }
};

// project_erasure over blocks: wq = q(w) and q(wq + u) with the vectorized nearest block (twice), flagged
// coordinates recomputed exactly (round_nearest, then bracket_of/nearest_of of the exact sum wq + u).
template <class MemorySpace, bool Integer>
struct ProjectBlockKernel : CountsReducerBase {
  static constexpr std::int64_t kBlock = 256;
  static constexpr float kZeros[kBlock] = {};  // u = 0: the first pass rounds w itself
  ConstFloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  FastParams fp;
  std::int64_t n;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, value_type& c) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = (begin + kBlock < n ? begin + kBlock : n) - begin;
    const float* wp = w.data() + begin;
    const float* up = u.data() + begin;
    const double c_factor = 1.5 * detail::pow2(52 - p.man_bits);
    float wq[kBlock];
    float out[kBlock];
    unsigned char flags[kBlock];
    std::int64_t unused[4] = {0, 0, 0, 0};
    if (nearest_block<Integer>(fp, p.min_normal, c_factor, wp, kZeros, wq, flags, len, unused) > 0) {
      for (std::int64_t k = 0; k < len; ++k) {
        if (flags[k]) {
          wq[k] = static_cast<float>(round_nearest(p, static_cast<double>(wp[k])));
        }
      }
    }
    std::int64_t counts[4] = {0, 0, 0, 0};
    if (nearest_block<Integer>(fp, p.min_normal, c_factor, wq, up, out, flags, len, counts) > 0) {
      for (std::int64_t k = 0; k < len; ++k) {
        if (!flags[k]) {
          continue;
        }
        const float ui = up[k];
        const Bracket b = bracket_of(p, exact_sum(wq[k], ui));
        const auto value = static_cast<float>(nearest_of(b));
        const bool changed = value != wq[k];
        counts[0] += ui != 0;
        counts[1] += ui != 0 && !changed;
        counts[2] += changed;
        counts[3] += b.saturated;
      }
    }
    c.nonzero += counts[0];
    c.erased += counts[1];
    c.applied += counts[2];
    c.saturated += counts[3];
  }
};

template <class Kernel, class ExecSpace>
void run_project(const ExecSpace& space, ConstFloatView<typename ExecSpace::memory_space> w,
                 ConstFloatView<typename ExecSpace::memory_space> u, const FormatParams& p, WritebackCounts& counts) {
  Kernel kernel{};
  kernel.w = w;
  kernel.u = u;
  kernel.p = p;
  kernel.fp = FastParams{p.max_finite, p.emin + 1023, p.man_bits, p.scale, 1.0 / p.scale, 0};
  kernel.n = static_cast<std::int64_t>(u.extent(0));
  const std::int64_t blocks = (kernel.n + Kernel::kBlock - 1) / Kernel::kBlock;
  Kokkos::parallel_reduce("wbaudit::sim::precision::project_erasure::kernel",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, blocks), kernel, counts);
}

template <class MemorySpace>
struct QuantizeKernel {
  FloatView<MemorySpace> x;
  FormatParams p;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    x(i) = static_cast<float>(round_nearest(p, static_cast<double>(x(i))));
  }
};

template <class ExecSpace>
Kokkos::RangePolicy<ExecSpace> range(const ExecSpace& space, std::size_t n, int chunk_size) {
  Kokkos::RangePolicy<ExecSpace> policy(space, 0, static_cast<std::int64_t>(n));
  if (chunk_size > 0) {
    policy.set_chunk_size(chunk_size);
  }
  return policy;
}

}  // namespace

template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                          const WritebackOptions& options) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("writeback", w.extent(0), u.extent(0));
  if (policy.policy == Policy::master) {
    throw std::invalid_argument("writeback: policy master needs the master copy; use writeback_master");
  }
  if (policy.sr_bits < 0 || policy.sr_bits > 32) {
    throw std::invalid_argument("writeback: sr_bits = " + std::to_string(policy.sr_bits) + " is outside 0..32");
  }
  if (key.step >= kRngMaxStep) {
    throw std::invalid_argument("writeback: step " + std::to_string(key.step) + " exceeds the RNG counter (< 2^32)");
  }
  if (options.first_coordinate + w.extent(0) > kRngMaxCoordinate) {
    throw std::invalid_argument("writeback: coordinates up to " +
                                std::to_string(options.first_coordinate + w.extent(0)) +
                                " exceed the RNG counter (< 2^48)");
  }
  const FormatParams p = format_params(fmt);
  require_finite(space,
                 "writeback (tensor " + std::to_string(key.tensor_id) + ", step " + std::to_string(key.step) +
                     ", format " + fmt.name + "); w left unchanged",
                 "w", ConstFloatView<MS>(w), "u", u);
  WritebackCounts counts;
  const auto n = static_cast<std::int64_t>(w.extent(0));
  FastParams fp{p.max_finite, p.emin + 1023, p.man_bits, p.scale, 1.0 / p.scale, policy.sr_bits};
  const int mode = policy.policy == Policy::nearest ? 0 : policy.policy == Policy::stochastic ? 1 : 2;
  auto launch = [&](auto kernel) {
    constexpr std::int64_t block = decltype(kernel)::kBlock;
    kernel.w = w;
    kernel.u = u;
    kernel.p = p;
    kernel.fp = fp;
    kernel.policy = policy;
    kernel.key = key;
    kernel.first_coordinate = options.first_coordinate;
    kernel.n = n;
    Kokkos::parallel_reduce("wbaudit::sim::precision::writeback::kernel",
                            range(space, static_cast<std::size_t>((n + block - 1) / block), options.chunk_size), kernel,
                            counts);
  };
  if (p.integer) {
    if (mode == 0) {
      launch(BlockKernel<MS, true, 0>{});
    }
    if (mode == 1) {
      launch(BlockKernel<MS, true, 1>{});
    }
    if (mode == 2) {
      launch(BlockKernel<MS, true, 2>{});
    }
  } else {
    if (mode == 0) {
      launch(BlockKernel<MS, false, 0>{});
    }
    if (mode == 1) {
      launch(BlockKernel<MS, false, 1>{});
    }
    if (mode == 2) {
      launch(BlockKernel<MS, false, 2>{});
    }
  }
  return counts;
}

template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  return writeback(space, fmt, policy, key, w, u, WritebackOptions{});
}

template <class ExecSpace>
WritebackCounts writeback_master(const ExecSpace& space, const FormatSpec& fmt,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> master,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("writeback_master", master.extent(0), u.extent(0));
  require_same_extent("writeback_master", w.extent(0), u.extent(0));
  const FormatParams p = format_params(fmt);
  require_finite(space, std::string("writeback_master (format ") + fmt.name + ")", "master", ConstFloatView<MS>(master),
                 "u", u);
  require_finite(space, std::string("writeback_master (format ") + fmt.name + ")", "w", ConstFloatView<MS>(w), "w",
                 ConstFloatView<MS>());
  WritebackCounts counts;
  Kokkos::parallel_reduce("wbaudit::sim::precision::writeback_master::kernel", range(space, u.extent(0), 0),
                          MasterKernel<MS>{{}, master, w, u, p}, counts);
  if (counts.nonfinite > 0) {
    throw NonFiniteError("writeback_master (format " + std::string(fmt.name) +
                         "): the fp32 master copy overflowed at " + std::to_string(counts.nonfinite) +
                         " coordinate(s); those coordinates were left unchanged");
  }
  return counts;
}

template <class ExecSpace>
WritebackCounts project_erasure(const ExecSpace& space, const FormatSpec& fmt,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("project_erasure", w.extent(0), u.extent(0));
  const FormatParams p = format_params(fmt);
  require_finite(space, std::string("project_erasure (format ") + fmt.name + ")", "w", w, "u", u);
  WritebackCounts counts;
  if (p.integer) {
    run_project<ProjectBlockKernel<MS, true>>(space, w, u, p, counts);
  } else {
    run_project<ProjectBlockKernel<MS, false>>(space, w, u, p, counts);
  }
  return counts;
}

template <class ExecSpace>
void quantize(const ExecSpace& space, const FormatSpec& fmt, Kokkos::View<float*, typename ExecSpace::memory_space> x) {
  using MS = typename ExecSpace::memory_space;
  const FormatParams p = format_params(fmt);
  require_finite(space, std::string("quantize (format ") + fmt.name + ")", "x", ConstFloatView<MS>(x), "x",
                 ConstFloatView<MS>());
  Kokkos::parallel_for("wbaudit::sim::precision::quantize::kernel", range(space, x.extent(0), 0),
                       QuantizeKernel<MS>{x, p});
}

#define WBAUDIT_INSTANTIATE_WRITEBACK(SPACE)                                                                           \
  template WritebackCounts writeback<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey,           \
                                            Kokkos::View<float*, SPACE::memory_space>,                                 \
                                            Kokkos::View<const float*, SPACE::memory_space>);                          \
  template WritebackCounts writeback<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey,           \
                                            Kokkos::View<float*, SPACE::memory_space>,                                 \
                                            Kokkos::View<const float*, SPACE::memory_space>, const WritebackOptions&); \
  template WritebackCounts writeback_master<SPACE>(                                                                    \
      const SPACE&, const FormatSpec&, Kokkos::View<float*, SPACE::memory_space>,                                      \
      Kokkos::View<float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>);                     \
  template WritebackCounts project_erasure<SPACE>(const SPACE&, const FormatSpec&,                                     \
                                                  Kokkos::View<const float*, SPACE::memory_space>,                     \
                                                  Kokkos::View<const float*, SPACE::memory_space>);                    \
  template void quantize<SPACE>(const SPACE&, const FormatSpec&, Kokkos::View<float*, SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_WRITEBACK(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_WRITEBACK(Kokkos::OpenMP)
#endif
#undef WBAUDIT_INSTANTIATE_WRITEBACK

}  // namespace wbaudit::sim
