// The vectorized block loops of the write-back kernels (see writeback_blocks.hpp for the contract).
//
// How the loops are written: no branches; every decision is a comparison stored as a 0/1 integer of the lane width
// (std::uint32_t in fp32 lanes, std::uint64_t in fp64 lanes) and every choice a select, which GCC turns into mask
// registers (AVX-512) or compare masks (AVX2, SSE2). This file is compiled with -fno-trapping-math (see
// sim/precision/sources.cmake): without it GCC does not if-convert selects between floating-point results and the
// loops stay scalar; it changes no value, only the promise about floating-point exception flags, which nothing here
// reads. Every floating-point operation is a correctly rounded IEEE operation (no FMA: the project compiles with
// -ffp-contract=off), so the SSE2, AVX2 and AVX-512 versions give identical bits.
#include "sim/precision/writeback_blocks.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

namespace wbaudit::sim::detail {
namespace {

inline std::uint32_t bits32(float x) {
  return std::bit_cast<std::uint32_t>(x);
}
inline float float_of(std::uint32_t b) {
  return std::bit_cast<float>(b);
}

inline std::uint64_t bits64(double x) {
  return std::bit_cast<std::uint64_t>(x);
}
inline double double_of(std::uint64_t b) {
  return std::bit_cast<double>(b);
}

constexpr std::uint32_t kSign32 = 0x80000000u;
constexpr std::uint64_t kSign64 = 0x8000000000000000ull;
constexpr double kRound52 = 0x1.8p52;  // (y + kRound52) - kRound52 == nearbyint(y) (ties to even) for 0 <= y < 2^51

// The exact sum w + u as the fp32 sum s and its error (TwoSum; exact unless s overflows): the magnitude bits and
// sign of s, the error in the direction of |s| (positive: the exact sum is farther from zero than s), and whether s
// is non-finite (non-finite input, or an fp32 overflow of the sum).
struct Sum32 {
  std::uint32_t ab, sign, bad;
  float em;
};
[[gnu::always_inline]] inline Sum32 sum32(float wf, float uf) {
  const float s = wf + uf;
  const float bb = s - wf;
  const float e = (wf - (s - bb)) + (uf - bb);
  const std::uint32_t sb = bits32(s);
  Sum32 r;
  r.ab = sb & ~kSign32;
  r.sign = sb & kSign32;
  r.em = float_of(bits32(e) ^ r.sign);
  r.bad = r.ab > 0x7f7fffffu;
  return r;
}

// Event counts of the lanes a block loop decides (`flag` lanes are left out). Lanes hold U (std::uint32_t in fp32
// loops, std::uint64_t in fp64 loops: the lane width of the loop's decisions); 32 bits suffice as a block has at
// most kWritebackBlock coordinates. v is the written-back value, compared as a value (+0 == -0; NaN only in flag
// lanes).
template <class U, class F>
struct Events {
  U nonzero = 0, erased = 0, applied = 0, saturated = 0, random = 0, truncated = 0, flagged = 0;
  [[gnu::always_inline]] void add(U flag, F wf, F uf, F v, U sat) {
    const U changed = v != wf;
    const U nz = uf != F(0);
    const U ok = flag ^ U(1);
    nonzero += ok & nz;
    erased += ok & nz & (changed ^ U(1));
    applied += ok & changed;
    saturated += ok & sat;
    flagged += flag;
  }
  std::int64_t flush(BlockCounts& counts) const {
    counts.nonzero += static_cast<std::int64_t>(nonzero);
    counts.erased += static_cast<std::int64_t>(erased);
    counts.applied += static_cast<std::int64_t>(applied);
    counts.saturated += static_cast<std::int64_t>(saturated);
    counts.random += static_cast<std::int64_t>(random);
    counts.truncated += static_cast<std::int64_t>(truncated);
    return static_cast<std::int64_t>(flagged);
  }
};
using Events32 = Events<std::uint32_t, float>;
using Events64 = Events<std::uint64_t, double>;

// ---- Nearest, fp32 lanes, floating formats ----
// The format's grid values are fp32 values and so are the midpoints between them (the significand has at most
// M + 1 <= 23 bits; fp32 itself has no midpoints). Rounding is monotonic, so the fp32 sum s = fl(w + u) rounds to
// the same format value as the exact sum s + e (TwoSum) unless s is itself a midpoint and e != 0: then e says on
// which side the exact sum lies. Rounding s: ties to even on the bit pattern (a carry moves into the exponent
// correctly); in the format's own subnormal range where fp32 is still normal (E < 8), after adding min_normal.
// Non-finite s (non-finite input, or an fp32 overflow of the sum) is flagged.
template <bool Subnormals>
[[gnu::always_inline]] inline std::int64_t nearest_float_body(const BlockParams& bp, float* __restrict w,
                                                              const float* __restrict u,
                                                              unsigned char* __restrict flags, std::int64_t len,
                                                              BlockCounts& counts) {
  // 32-bit lanes: comparisons stored as std::uint32_t 0/1 vectorize (AVX-512 mask registers, AVX2 compares).
  Events32 events;
  const std::uint32_t mask = bp.mask, keep = ~bp.mask, half_m1 = bp.half_m1, lsb_bit = bp.lsb_mask;
  const std::uint32_t tie_bits = bp.tie_bits, max_bits = bp.max_bits, sub_limit = bits32(bp.sub_limit);
  const float sub_limit_f = bp.sub_limit;
  for (std::int64_t k = 0; k < len; ++k) {
    const float wf = w[k], uf = u[k];
    const auto [ab, sign, bad, em] = sum32(wf, uf);
    std::uint32_t ab_in = ab;
    float em_in = em;
    std::uint32_t in_sub = 0;
    if constexpr (Subnormals) {
      // The format's subnormal range (fp32 is normal there): |s| + min_normal lies in the format's first normal
      // binade, whose spacing is min_subnormal too, so it rounds like |s| (shifted by min_normal). The addition's
      // own error e2 (exact) decides a tie before e does: when nonzero it is at least one ulp of |s|, more than |e|.
      in_sub = ab < sub_limit;
      const float ax = float_of(ab);
      const float a2 = ax + sub_limit_f;
      const float e2 = ax - (a2 - sub_limit_f);
      ab_in = in_sub ? bits32(a2) : ab;
      em_in = (in_sub & (e2 != 0.0f)) ? e2 : em;
    }
    // When s is a midpoint and e != 0, s is first moved one fp32 step toward the exact sum, which is then no
    // midpoint (the formats drop 13 or more bits) and rounds right.
    const std::uint32_t tie = (ab_in & mask) == tie_bits;
    const std::uint32_t ab_adj = ab_in + (tie & (em_in > 0.0f)) - (tie & (em_in < 0.0f));
    std::uint32_t r = (ab_adj + half_m1 + ((ab_adj & lsb_bit) != 0)) & keep;
    if constexpr (Subnormals) {
      r = in_sub ? bits32(float_of(r) - sub_limit_f) : r;  // exact
    }
    // saturation: |w + u| > max finite (s == max with e pointing away is beyond it too)
    const std::uint32_t sat = (ab > max_bits) | ((ab == max_bits) & (em > 0.0f));
    r = r > max_bits ? max_bits : r;
    const float v = float_of(r | sign);
    w[k] = bad ? wf : v;
    flags[k] = static_cast<unsigned char>(bad);
    events.add(bad, wf, uf, v, sat);
  }
  return events.flush(counts);
}

// ---- Nearest, fp32 lanes, intK (values n * scale, each exact in fp32) ----
// n = nearbyint(|s| / scale) in fp32 is right unless |s| / scale is near a half-integer; the distance
// d = |s| - n * scale is exact (Sterbenz), d + e is the distance of the exact sum up to a tiny rounding, and any
// coordinate with |d + e| at or beyond tie_guard (just under scale / 2) is flagged for the exact path.
[[gnu::always_inline]] inline std::int64_t nearest_integer_body(const BlockParams& bp, float* __restrict w,
                                                                const float* __restrict u,
                                                                unsigned char* __restrict flags, std::int64_t len,
                                                                BlockCounts& counts) {
  Events32 events;
  const std::uint32_t max_bits = bp.max_bits;
  const float scale = bp.scale, inv_scale = bp.inv_scale, tie_guard = bp.tie_guard;
  for (std::int64_t k = 0; k < len; ++k) {
    const float wf = w[k], uf = u[k];
    const auto [ab, sign, bad, ed] = sum32(wf, uf);
    const float ax = float_of(ab);
    float y = ax * inv_scale;
    y = y < 0x1p22f ? y : 0x1p22f;  // saturated anyway beyond; keeps the rounding constant valid
    const float n = (y + 0x1.8p23f) - 0x1.8p23f;
    const float r = n * scale;
    const float dist = std::fabs((ax - r) + ed);  // ax - r is exact
    const std::uint32_t sat = (ab > max_bits) | ((ab == max_bits) & (ed > 0.0f));
    const std::uint32_t flag = bad | ((dist >= tie_guard) & (sat ^ 1u));
    const float v = float_of((sat ? max_bits : bits32(r)) | sign);
    w[k] = flag ? wf : v;
    flags[k] = static_cast<unsigned char>(flag);
    events.add(flag, wf, uf, v, sat);
  }
  return events.flush(counts);
}

// ---- fp64 lanes ----
// w + u in double (exact unless the exponents are more than 29 apart: err != 0, flagged), rounded to the grid
// spacing with the 1.5 * 2^(q + 52) constant (floating formats) or via |s| / scale (intK, near-ties flagged).

// The nearest magnitude of |s| (not yet saturated) and, for the SR loops, the grid spacing `unit` and |s| / unit.
template <bool Integer>
inline void grid64(const BlockParams& bp, double ax, double& nearest_mag, double& unit, double& y,
                   std::uint64_t& near_tie) {
  if constexpr (Integer) {
    y = ax * bp.inv_scale64;  // not exact (odd scale factors): near-ties are flagged
    const double level = (y + kRound52) - kRound52;
    near_tie = std::fabs(std::fabs(y - level) - 0.5) < 0x1p-30;
    nearest_mag = level * bp.scale64;
    unit = bp.scale64;
  } else {
    double pw = double_of(bits64(ax) & 0x7ff0000000000000ull);  // 2^floor(log2 |s|) (0 for s == 0)
    pw = pw < bp.min_normal ? bp.min_normal : pw;
    const double c = pw * bp.c_factor;  // 1.5 * 2^(q + 52) with 2^q the grid spacing
    nearest_mag = (ax + c) - c;
    unit = pw * bp.unit_factor;                                // 2^q, a normal double
    y = ax * double_of(0x7fe0000000000000ull - bits64(unit));  // |s| / 2^q, exact
    near_tie = 0;
  }
}

template <bool Integer>
[[gnu::always_inline]] inline std::int64_t nearest_fp64_body(const BlockParams& bp, float* __restrict w,
                                                             const float* __restrict u, unsigned char* __restrict flags,
                                                             std::int64_t len, BlockCounts& counts) {
  Events64 events;
  const std::uint64_t max_bits = bits64(bp.max_finite);
  for (std::int64_t k = 0; k < len; ++k) {
    const float wf = w[k];
    const double wd = wf, ud = u[k];
    const double s = wd + ud;  // TwoSum: err == 0 iff s is the exact sum
    const double bb = s - wd;
    const double err = (wd - (s - bb)) + (ud - bb);
    const std::uint64_t sb = bits64(s), ab = sb & ~kSign64;
    double mag, unit, y;
    std::uint64_t near_tie;
    grid64<Integer>(bp, double_of(ab), mag, unit, y, near_tie);
    const std::uint64_t sat = ab > max_bits;
    const std::uint64_t bad =
        ab > 0x7fefffffffffffffull;  // non-finite input (a double sum of floats does not overflow)
    const std::uint64_t flag = bad | (err != 0.0) | (near_tie & (sat ^ 1));
    const double v = double_of((mag > bp.max_finite ? max_bits : bits64(mag)) | (sb & kSign64));
    w[k] = flag ? wf : static_cast<float>(v);
    flags[k] = static_cast<unsigned char>(flag);
    events.add(flag, wd, ud, v, sat);
  }
  return events.flush(counts);
}

// ---- Stochastic rounding (mode 1) and deadzone-sr (mode 2), fp64 lanes ----
// |s| = (fl + frac) * unit with frac exact (floating formats). Full-width SR moves away from zero iff U < frac for
// U uniform on [0, 1): the first 32 bits `word` decide unless word == floor(frac * 2^32) (flagged: the exact path
// draws more bits). r-bit SR compares the r-bit integer word >> (32 - r) with D = floor(frac * 2^r). For intK,
// |s| / scale is not exact: fractions within 2^-20 of 0 or 1 and draws within 2^-8 of the threshold are flagged.
template <bool Integer, int Mode, bool RBits>
[[gnu::always_inline]] inline std::int64_t stochastic_body(const BlockParams& bp, float* __restrict w,
                                                           const float* __restrict u,
                                                           const std::uint32_t* __restrict words,
                                                           unsigned char* __restrict flags, std::int64_t len,
                                                           BlockCounts& counts) {
  Events64 events;
  const std::uint64_t max_bits = bits64(bp.max_finite);
  const double two_r = RBits ? std::ldexp(1.0, bp.sr_bits) : 0x1p32;
  const int drop = RBits ? 32 - bp.sr_bits : 0;
  constexpr double kMargin = Integer ? 0x1p-8 : 0.0;
  const double span = bp.sr_span;
  for (std::int64_t k = 0; k < len; ++k) {
    const float wf = w[k];
    const double wd = wf, ud = u[k];
    const double s = wd + ud;
    const double bb = s - wd;
    const double err = (wd - (s - bb)) + (ud - bb);
    const std::uint64_t sb = bits64(s), sign = sb & kSign64, ab = sb & ~kSign64;
    const double ax = double_of(ab);
    const std::uint64_t err_nz = err != 0.0;
    const std::uint64_t bad = ab > 0x7fefffffffffffffull;
    double nearest_mag, unit, y;
    std::uint64_t slow;
    grid64<Integer>(bp, ax, nearest_mag, unit, y, slow);
    const std::uint64_t sat = ab > max_bits;
    slow = (slow & (sat ^ 1)) | err_nz;
    // floor(y) and the fraction
    const double ry = (y + kRound52) - kRound52;
    const double fl = ry > y ? ry - 1.0 : ry;
    const double frac = y - fl;  // exact for floating formats
    std::uint64_t on_grid;
    if constexpr (Integer) {
      on_grid = nearest_mag == ax;  // exact product level * scale == |s|
      slow |= (on_grid ^ 1) & (sat ^ 1) & ((frac < 0x1p-20) | (frac > 1 - 0x1p-20));
    } else {
      on_grid = frac == 0.0;
    }
    const std::uint64_t off = (on_grid ^ 1) & (sat ^ 1);
    std::uint64_t away, random;
    if constexpr (!RBits) {
      const double word = static_cast<double>(words[k]);
      const double z = frac * two_r;
      away = word + span <= z - kMargin;  // every U * 2^32 the word leaves open, [word, word + span), lies below z
      const std::uint64_t below = word >= z + kMargin;
      slow |= off & (away ^ 1) & (below ^ 1);
      random = 1;
    } else {
      const double zr = frac * two_r;
      const double rz = (zr + kRound52) - kRound52;
      const double d = rz > zr ? rz - 1.0 : rz;  // D = floor(frac * 2^r)
      if constexpr (Integer) {
        const double dz = zr - d;
        slow |= off & ((dz < 0x1p-20) | (dz > 1 - 0x1p-20));
      }
      away = static_cast<double>(words[k] >> drop) < d;  // R < D
      random = d > 0.0;
    }
    const double stepped = (away ? fl + 1.0 : fl) * unit;
    const double v_sr = double_of((sat ? max_bits : (on_grid ? ab : bits64(stepped))) | sign);
    const double v_nearest = double_of((sat ? max_bits : bits64(nearest_mag)) | sign);
    std::uint64_t use_sr;
    if constexpr (Mode == 1) {
      use_sr = 1;
    } else {
      use_sr = (ud != 0.0) & (v_nearest == wd);
    }
    const std::uint64_t flag = bad | (slow & (use_sr | err_nz | static_cast<std::uint64_t>(Integer)));
    const std::uint64_t take = 0 - use_sr;  // a bit select: GCC does not vectorize this double select otherwise
    const double v = double_of((bits64(v_sr) & take) | (bits64(v_nearest) & ~take));
    w[k] = flag ? wf : static_cast<float>(v);
    flags[k] = static_cast<unsigned char>(flag);
    events.add(flag, wd, ud, v, sat);
    const std::uint64_t drawn = (flag ^ 1) & use_sr & off;
    events.random += drawn & random;
    if constexpr (RBits) {
      events.truncated += drawn & (random ^ 1);
    }
  }
  return events.flush(counts);
}

// ---- Stochastic rounding, fp32 lanes, floating formats (M <= 22) ----
// With s + e == w + u (TwoSum in fp32), the magnitude being rounded lies in the fp32 binade of |s| (or, in the
// format's subnormal range, of |s| + min_normal, as for nearest, with that addition's exact error e2 in front of e).
// The format drops D = 23 - M significand bits there, so the fraction of the grid step is
//   frac * 2^32 = low * 2^K + T,  low = the dropped bits of |s|,  K = 32 - D,  T = err * 2^K / ulp32,
// where err (e, or e2 then e) is below half an fp32 ulp: |T| <= 2^(K-1) <= 2^21, exact in fp32 (power-of-two scaling;
// where it would underflow only its sign matters). With z = floor(frac * 2^32) computed exactly in 32-bit integers,
// full-width SR moves away from zero iff word < z, and is undecided (flagged: the exact path draws more bits) iff
// word == z and frac * 2^32 is not an integer; r-bit SR compares word >> (32 - r) with z >> (32 - r). When |s| is on
// the grid and err < 0 the exact sum lies in the step below |s| (at a binade edge: a step half as wide, T doubled;
// at the format's min normal, above its subnormal range: a step as wide).
// Mode 1: stochastic; Mode 2: deadzone-sr, which also rounds to nearest (exactly as nearest_float_body, from the same
// shifted magnitude and error) and takes the SR value where nearest erases a nonzero proposal.
template <bool Subnormals, bool RBits, int Mode>
[[gnu::always_inline]] inline std::int64_t stochastic_float_body(const BlockParams& bp, float* __restrict w,
                                                                 const float* __restrict u,
                                                                 const std::uint32_t* __restrict words,
                                                                 unsigned char* __restrict flags, std::int64_t len,
                                                                 BlockCounts& counts) {
  Events32 events;
  const std::uint32_t mask = bp.mask, keep = ~bp.mask, unit_bit = bp.mask + 1, max_bits = bp.max_bits;
  const std::uint32_t half_m1 = bp.half_m1, lsb_bit = bp.lsb_mask, tie_bits = bp.tie_bits;
  const std::uint32_t sub_limit = bits32(bp.sub_limit), emin_field = bp.emin_field;
  const std::uint32_t k_shift = bp.k_shift, r_drop = RBits ? 32u - static_cast<std::uint32_t>(bp.sr_bits) : 0u;
  const std::int32_t x_base = static_cast<std::int32_t>(bp.k_shift) + 150;  // K + 23 + 127
  const std::uint32_t span = bp.sr_span;
  const float sub_limit_f = bp.sub_limit;
  for (std::int64_t k = 0; k < len; ++k) {
    const float wf = w[k], uf = u[k];
    const auto [ab, sign, bad, em] = sum32(wf, uf);
    std::uint32_t ab_in = ab;
    float err = em;         // the part of the error that sets T
    float tiny_src = 0.0f;  // a further error below T's resolution: only its sign counts
    std::uint32_t in_sub = 0;
    if constexpr (Subnormals) {
      in_sub = ab < sub_limit;
      const float ax = float_of(ab);
      const float a2 = ax + sub_limit_f;
      const float e2 = ax - (a2 - sub_limit_f);  // exact; a multiple of ulp(|s|) > 2 |e| when nonzero
      ab_in = in_sub ? bits32(a2) : ab;
      const std::uint32_t two = in_sub & (e2 != 0.0f);
      err = two ? e2 : em;
      tiny_src = two ? em : 0.0f;
    }
    const std::uint32_t low = ab_in & mask;
    const std::uint32_t field = ab_in >> 23;
    const std::uint32_t below = (low == 0) & (err < 0.0f);  // the exact sum lies in the step below |s|
    const std::uint32_t halving = below & (field > emin_field) & ((ab_in & 0x7fffffu) == 0);
    // T = err * 2^X with X = K + 23 - exponent(ulp) (+1 for a half-width step), as two representable factors
    const std::int32_t ef = field > 1u ? static_cast<std::int32_t>(field) : 1;
    const std::int32_t x = x_base - ef + static_cast<std::int32_t>(halving);
    const std::int32_t xa = x < 100 ? x : 100;
    const float pa = float_of(static_cast<std::uint32_t>(xa + 127) << 23);
    const float pb = float_of(static_cast<std::uint32_t>(x - xa + 127) << 23);
    const float t_main = (err * pa) * pb;    // a multiple of g = ulp(|s|) * 2^X when `tiny_src` is set
    float t_tiny = (tiny_src * pa) * pb;     // then |t_tiny| < g / 2: exact, but t_main + t_tiny need not be
    t_tiny = t_main == 0.0f ? err : t_tiny;  // t_main underflowed (|err| < 1 there): err's sign is what counts
    // floor(T) and whether T is an integer, for T = t_main + t_tiny: when t_main has a fractional part it exceeds
    // |t_tiny| (g < 1 and a multiple of g); otherwise floor(T) = t_main + floor(t_tiny).
    const float r_main = (t_main + 0x1.8p23f) - 0x1.8p23f;  // nearbyint, |t| <= 2^21
    const float f_main = r_main > t_main ? r_main - 1.0f : r_main;
    const float r_tiny = (t_tiny + 0x1.8p23f) - 0x1.8p23f;
    const float f_tiny = r_tiny > t_tiny ? r_tiny - 1.0f : r_tiny;
    const std::uint32_t frac_main = f_main != t_main;
    const std::int32_t floor_t =
        static_cast<std::int32_t>(f_main) + (frac_main ? 0 : static_cast<std::int32_t>(f_tiny));
    const std::uint32_t inexact = frac_main | (f_tiny != t_tiny);                    // frac * 2^32 is not an integer
    const std::uint32_t z = (low << k_shift) + static_cast<std::uint32_t>(floor_t);  // floor(frac * 2^32), mod 2^32
    // the grid value below: one step down; from the format's min normal (E < 8 formats) down into its subnormal
    // range the step is as wide as above it, which in fp32 bits (the next binade down) is two units
    std::uint32_t step_down = unit_bit;
    if constexpr (Subnormals) {
      step_down = ((field == emin_field) & ((ab_in & 0x7fffffu) == 0)) ? 2 * unit_bit : unit_bit;
    }
    const std::uint32_t tz = (ab_in & keep) - (below ? step_down : 0u);
    const std::uint32_t word = words[k];
    std::uint32_t away, random, undecided;
    const std::uint32_t off = (z != 0) | inexact;
    if constexpr (RBits) {
      const std::uint32_t d = z >> r_drop;  // D = floor(frac * 2^r)
      away = (word >> r_drop) < d;
      random = d != 0;
      undecided = 0;
    } else {
      // every U * 2^32 the word leaves open, [word, word + span), lies below the threshold (span 1: word < z)
      away = (z >= span) & (word <= z - span);
      random = 1;
      undecided = (away ^ 1) & ((word < z) | ((word == z) & inexact));
    }
    std::uint32_t r = tz + (away ? (below ? step_down : unit_bit) : 0u);  // the step up from tz, in fp32 bits
    if constexpr (Subnormals) {
      r = in_sub ? bits32(float_of(r) - sub_limit_f) : r;  // exact
    }
    const std::uint32_t sat = (ab > max_bits) | ((ab == max_bits) & (em > 0.0f));
    r = sat ? max_bits : r;
    float v = float_of(r | sign);
    std::uint32_t use_sr = 1;
    if constexpr (Mode == 2) {
      const std::uint32_t tie = low == tie_bits;
      const std::uint32_t ab_adj = ab_in + (tie & (err > 0.0f)) - (tie & (err < 0.0f));
      std::uint32_t rn = (ab_adj + half_m1 + ((ab_adj & lsb_bit) != 0)) & keep;
      if constexpr (Subnormals) {
        rn = in_sub ? bits32(float_of(rn) - sub_limit_f) : rn;  // exact
      }
      rn = rn > max_bits ? max_bits : rn;
      const float v_near = float_of(rn | sign);
      use_sr = (uf != 0.0f) & (v_near == wf);
      const std::uint32_t take = 0u - use_sr;  // a bit select: GCC does not vectorize this float select otherwise
      v = float_of((bits32(v) & take) | (bits32(v_near) & ~take));
    }
    const std::uint32_t flag = bad | (undecided & use_sr & (sat ^ 1u));
    w[k] = flag ? wf : v;
    flags[k] = static_cast<unsigned char>(flag);
    events.add(flag, wf, uf, v, sat);
    const std::uint32_t drawn = (flag ^ 1u) & use_sr & off & (sat ^ 1u);
    events.random += drawn & random;
    if constexpr (RBits) {
      events.truncated += drawn & (random ^ 1u);
    }
  }
  return events.flush(counts);
}

// ---- Philox4x32-10 over the groups of a block ----
[[gnu::always_inline]] inline void philox_groups_body(std::uint32_t k0, std::uint32_t k1, std::uint32_t step,
                                                      std::uint32_t tensor, std::uint64_t g0, std::int64_t groups,
                                                      std::uint32_t* __restrict out) {
  // 64-bit lanes holding 32-bit values: the 32 x 32 -> 64 products are then single vpmuludq instructions.
  constexpr std::uint64_t kLow = 0xffffffffull;
  for (std::int64_t j = 0; j < groups; ++j) {
    const std::uint64_t g = g0 + static_cast<std::uint64_t>(j);
    std::uint64_t c0 = g & kLow, c1 = (g >> 32) & 0x3fffu, c2 = step, c3 = tensor;
    std::uint64_t ka = k0, kb = k1;
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
      const std::uint64_t p0 = (c0 & kLow) * std::uint64_t{0xD2511F53u};
      const std::uint64_t p1 = (c2 & kLow) * std::uint64_t{0xCD9E8D57u};
      c0 = ((p1 >> 32) ^ c1 ^ ka) & kLow;
      c1 = p1 & kLow;
      c2 = ((p0 >> 32) ^ c3 ^ kb) & kLow;
      c3 = p0 & kLow;
      ka = (ka + 0x9E3779B9u) & kLow;
      kb = (kb + 0xBB67AE85u) & kLow;
    }
    out[4 * j] = static_cast<std::uint32_t>(c0);
    out[4 * j + 1] = static_cast<std::uint32_t>(c1);
    out[4 * j + 2] = static_cast<std::uint32_t>(c2);
    out[4 * j + 3] = static_cast<std::uint32_t>(c3);
  }
}

// Each loop compiled for x86-64 (SSE2), AVX2 and AVX-512 and picked at load time (GCC function multi-versioning).
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

WBAUDIT_BLOCK_CLONES [[gnu::noinline]] void philox_groups(std::uint32_t k0, std::uint32_t k1, std::uint32_t step,
                                                          std::uint32_t tensor, std::uint64_t g0, std::int64_t groups,
                                                          std::uint32_t* __restrict out) {
  philox_groups_body(k0, k1, step, tensor, g0, groups, out);
}

template <bool Subnormals>
WBAUDIT_BLOCK_CLONES [[gnu::noinline]] std::int64_t nearest_float_clones(const BlockParams& bp, float* __restrict w,
                                                                         const float* __restrict u,
                                                                         unsigned char* __restrict flags,
                                                                         std::int64_t len, BlockCounts& counts) {
  return nearest_float_body<Subnormals>(bp, w, u, flags, len, counts);
}

WBAUDIT_BLOCK_CLONES [[gnu::noinline]] std::int64_t nearest_integer_clones(const BlockParams& bp, float* __restrict w,
                                                                           const float* __restrict u,
                                                                           unsigned char* __restrict flags,
                                                                           std::int64_t len, BlockCounts& counts) {
  return nearest_integer_body(bp, w, u, flags, len, counts);
}

template <bool Integer>
WBAUDIT_BLOCK_CLONES [[gnu::noinline]] std::int64_t nearest_fp64_clones(const BlockParams& bp, float* __restrict w,
                                                                        const float* __restrict u,
                                                                        unsigned char* __restrict flags,
                                                                        std::int64_t len, BlockCounts& counts) {
  return nearest_fp64_body<Integer>(bp, w, u, flags, len, counts);
}

template <bool Subnormals, bool RBits, int Mode>
WBAUDIT_BLOCK_CLONES [[gnu::noinline]] std::int64_t stochastic_float_clones(const BlockParams& bp, float* __restrict w,
                                                                            const float* __restrict u,
                                                                            const std::uint32_t* __restrict words,
                                                                            unsigned char* __restrict flags,
                                                                            std::int64_t len, BlockCounts& counts) {
  return stochastic_float_body<Subnormals, RBits, Mode>(bp, w, u, words, flags, len, counts);
}

template <bool Integer, int Mode, bool RBits>
WBAUDIT_BLOCK_CLONES [[gnu::noinline]] std::int64_t stochastic_clones(const BlockParams& bp, float* __restrict w,
                                                                      const float* __restrict u,
                                                                      const std::uint32_t* __restrict words,
                                                                      unsigned char* __restrict flags, std::int64_t len,
                                                                      BlockCounts& counts) {
  return stochastic_body<Integer, Mode, RBits>(bp, w, u, words, flags, len, counts);
}

}  // namespace

BlockParams block_params(const FormatParams& p, int sr_bits) {
  BlockParams bp;
  bp.max_finite = p.max_finite;
  bp.min_normal = p.min_normal;
  bp.sr_bits = sr_bits;
  bp.max_bits = std::bit_cast<std::uint32_t>(static_cast<float>(p.max_finite));
  if (p.integer) {
    bp.scale = static_cast<float>(p.scale);
    bp.inv_scale = 1.0f / bp.scale;
    bp.tie_guard = static_cast<float>(p.scale * 0.5 * (1 - 0x1p-12));
    bp.scale64 = p.scale;
    bp.inv_scale64 = 1.0 / p.scale;
    bp.sr_fp32_lanes = p.scale >= 0x1p-90 && p.scale <= 0x1p90;  // 2^32 / scale is a normal fp32 value
    bp.scale_c32 = std::ldexp(bp.inv_scale, 32);
    return bp;
  }
  const int drop = 23 - p.man_bits;  // fp32 significand bits the format drops (0 for fp32)
  bp.mask = (1u << drop) - 1u;
  bp.half_m1 = drop > 0 ? (1u << (drop - 1)) - 1u : 0u;
  bp.lsb_mask = drop > 0 ? 1u << drop : 0u;
  bp.tie_bits = drop > 0 ? 1u << (drop - 1) : 0xffffffffu;
  if (p.min_normal > 0x1p-126) {  // the format's subnormals lie in fp32's normal range
    bp.sub_limit = static_cast<float>(p.min_normal);
  }
  bp.sr_fp32_lanes = drop >= 10;  // every floating format but fp32 (|T| <= 2^(K-1) must stay below 2^22)
  bp.k_shift = static_cast<std::uint32_t>(32 - drop);
  bp.emin_field = static_cast<std::uint32_t>(std::max(p.emin + 127, 1));
  bp.c_factor = 1.5 * std::ldexp(1.0, 52 - p.man_bits);
  bp.unit_factor = std::ldexp(1.0, -p.man_bits);
  return bp;
}

bool fp32_lanes_cover(const FormatParams& p) {
  return !p.integer || (p.scale >= 0x1p-100 && p.scale <= 0x1p100);
}

namespace {
BlockIsa detect_block_isa() {
  return avx512_blocks_supported() ? BlockIsa::avx512 : avx2_blocks_supported() ? BlockIsa::avx2 : BlockIsa::portable;
}
// Both are constant-initialized or function-local, so that they are right when another translation unit's static
// initializer (a benchmark's registration) forces an ISA before this file's dynamic initializers would have run.
// g_isa: the forced implementation, or -1 for the best supported one.
constinit std::atomic<int> g_isa{-1};
BlockIsa best_isa() {
  static const BlockIsa best = detect_block_isa();
  return best;
}
inline BlockIsa isa_now() {
  const int forced = g_isa.load(std::memory_order_relaxed);
  return forced < 0 ? best_isa() : static_cast<BlockIsa>(forced);
}

// The portable loops run over a block in chunks of kChunk coordinates, prefetching w and u one block ahead of each
// chunk (a loop the compiler vectorizes cannot hold the prefetches itself; the AVX-512 loops prefetch inside the
// loop). Prefetches never fault, past the arrays' ends included. loop(offset, n) returns its flagged count.
template <class Loop>
std::int64_t in_chunks(const float* w, const float* u, std::int64_t len, Loop&& loop) {
  constexpr std::int64_t kChunk = 128, kLine = 64 / sizeof(float);
  std::int64_t flagged = 0;
  for (std::int64_t o = 0; o < len; o += kChunk) {
    for (std::int64_t k = o + kWritebackBlock; k < o + kWritebackBlock + kChunk; k += kLine) {
      __builtin_prefetch(w + k);
      __builtin_prefetch(u + k);
    }
    flagged += loop(o, std::min(kChunk, len - o));
  }
  return flagged;
}
}  // namespace

const char* block_isa_name(BlockIsa isa) {
  switch (isa) {
    case BlockIsa::avx512:
      return "avx512";
    case BlockIsa::avx2:
      return "avx2";
    default:
      return "portable";
  }
}

bool block_isa_supported(BlockIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(best_isa());
}

BlockIsa best_block_isa() {
  return best_isa();
}

BlockIsa force_block_isa(BlockIsa isa) {
  const int chosen = std::min(static_cast<int>(isa), static_cast<int>(best_isa()));
  g_isa.store(chosen, std::memory_order_relaxed);
  return static_cast<BlockIsa>(chosen);
}

BlockIsa active_block_isa() {
  return isa_now();
}

bool force_portable_blocks(bool on) {
  force_block_isa(on ? BlockIsa::portable : best_isa());
  return avx512_blocks_active();
}

bool avx512_blocks_active() {
  return isa_now() == BlockIsa::avx512;
}

std::int64_t nearest_block_float(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                 std::int64_t len, BlockCounts& counts) {
  switch (isa_now()) {
    case BlockIsa::avx512:
      return avx512::nearest_block_float(bp, w, u, flags, len, counts);
    case BlockIsa::avx2:
      return avx2::nearest_block_float(bp, w, u, flags, len, counts);
    default:
      break;
  }
  return in_chunks(w, u, len, [&](std::int64_t o, std::int64_t n) {
    return bp.sub_limit > 0 ? nearest_float_clones<true>(bp, w + o, u + o, flags + o, n, counts)
                            : nearest_float_clones<false>(bp, w + o, u + o, flags + o, n, counts);
  });
}

std::int64_t nearest_block_integer(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                   std::int64_t len, BlockCounts& counts) {
  switch (isa_now()) {
    case BlockIsa::avx512:
      return avx512::nearest_block_integer(bp, w, u, flags, len, counts);
    case BlockIsa::avx2:
      return avx2::nearest_block_integer(bp, w, u, flags, len, counts);
    default:
      break;
  }
  return in_chunks(w, u, len, [&](std::int64_t o, std::int64_t n) {
    return nearest_integer_clones(bp, w + o, u + o, flags + o, n, counts);
  });
}

std::int64_t nearest_block_fp64(const BlockParams& bp, bool integer, float* w, const float* u, unsigned char* flags,
                                std::int64_t len, BlockCounts& counts) {
  return in_chunks(w, u, len, [&](std::int64_t o, std::int64_t n) {
    return integer ? nearest_fp64_clones<true>(bp, w + o, u + o, flags + o, n, counts)
                   : nearest_fp64_clones<false>(bp, w + o, u + o, flags + o, n, counts);
  });
}

namespace {
// The portable master-copy loop (up to a block): m = master + u, the nearest loop on a copy of m (u = 0: m is exact),
// then the decided coordinates written back and counted in a loop the compiler vectorizes (selects on bit masks).
template <class Nearest>
std::int64_t master_portable(const BlockParams& bp, Nearest&& nearest, float* __restrict master, float* __restrict w,
                             const float* __restrict u, unsigned char* __restrict flags, std::int64_t len,
                             BlockCounts& counts) {
  static constexpr float kZeros[kWritebackBlock] = {};
  alignas(64) float m[kWritebackBlock];
  alignas(64) float q[kWritebackBlock];
  for (std::int64_t k = 0; k < len; ++k) {
    m[k] = master[k] + u[k];
    q[k] = m[k];
  }
  BlockCounts unused;
  if (nearest(q, kZeros, flags, len, unused) == 0) {  // flags hold nothing then; NaN/inf m is always flagged
    std::memset(flags, 0, static_cast<std::size_t>(len));
  }
  // |m| > max finite <=> |m| > the largest float at or below it
  float max_float = std::bit_cast<float>(bp.max_bits);
  if (static_cast<double>(max_float) > bp.max_finite) {
    max_float = std::nextafter(max_float, 0.0f);
  }
  Events32 events;
  for (std::int64_t k = 0; k < len; ++k) {
    const float wi = w[k], mi = m[k], qi = q[k];
    const std::uint32_t bad_w = ((std::bit_cast<std::uint32_t>(wi) & 0x7f800000u) + 0x00800000u) >> 31;
    const std::uint32_t flag = static_cast<std::uint32_t>(flags[k] != 0) | bad_w;
    events.add(flag, wi, u[k], qi, static_cast<std::uint32_t>(std::fabs(mi) > max_float));
    flags[k] = static_cast<unsigned char>(flag);
    const std::uint32_t keep = 0u - flag;  // all ones where the coordinate is left unchanged
    master[k] = std::bit_cast<float>((std::bit_cast<std::uint32_t>(mi) & ~keep) |
                                     (std::bit_cast<std::uint32_t>(master[k]) & keep));
    w[k] = std::bit_cast<float>((std::bit_cast<std::uint32_t>(qi) & ~keep) | (std::bit_cast<std::uint32_t>(wi) & keep));
  }
  return events.flush(counts);
}
}  // namespace

std::int64_t master_block(const BlockParams& bp, bool integer, bool lanes_fp64, float* master, float* w, const float* u,
                          unsigned char* flags, std::int64_t len, BlockCounts& counts) {
  if (!lanes_fp64 && isa_now() == BlockIsa::avx512) {
    return integer ? avx512::master_block_integer(bp, master, w, u, flags, len, counts)
                   : avx512::master_block_float(bp, master, w, u, flags, len, counts);
  }
  if (!lanes_fp64 && isa_now() == BlockIsa::avx2) {
    return integer ? avx2::master_block_integer(bp, master, w, u, flags, len, counts)
                   : avx2::master_block_float(bp, master, w, u, flags, len, counts);
  }
  auto nearest = [&](float* x, const float* zeros, unsigned char* f, std::int64_t n, BlockCounts& c) {
    if (lanes_fp64) {
      return integer ? nearest_fp64_clones<true>(bp, x, zeros, f, n, c)
                     : nearest_fp64_clones<false>(bp, x, zeros, f, n, c);
    }
    if (integer) {
      return nearest_integer_clones(bp, x, zeros, f, n, c);
    }
    return bp.sub_limit > 0 ? nearest_float_clones<true>(bp, x, zeros, f, n, c)
                            : nearest_float_clones<false>(bp, x, zeros, f, n, c);
  };
  return in_chunks(w, u, len, [&](std::int64_t o, std::int64_t n) {
    for (std::int64_t k = o + kWritebackBlock; k < o + kWritebackBlock + n; k += 64 / sizeof(float)) {
      __builtin_prefetch(master + k);  // the third stream (in_chunks prefetches w and u)
    }
    return master_portable(bp, nearest, master + o, w + o, u + o, flags + o, n, counts);
  });
}

namespace {
// The portable SR loops: fp32 lanes for floating formats (but fp32), fp64 lanes for intK and fp32.
std::int64_t stochastic_portable(const BlockParams& bp, bool integer, int mode, float* w, const float* u,
                                 const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                 BlockCounts& counts) {
  const bool rbits = bp.sr_bits > 0;
  if (integer) {
    if (mode == 1) {
      return rbits ? stochastic_clones<true, 1, true>(bp, w, u, words, flags, len, counts)
                   : stochastic_clones<true, 1, false>(bp, w, u, words, flags, len, counts);
    }
    return rbits ? stochastic_clones<true, 2, true>(bp, w, u, words, flags, len, counts)
                 : stochastic_clones<true, 2, false>(bp, w, u, words, flags, len, counts);
  }
  if (bp.sr_fp32_lanes) {
    auto run = [&]<bool Sub, bool RB>() {
      return mode == 1 ? stochastic_float_clones<Sub, RB, 1>(bp, w, u, words, flags, len, counts)
                       : stochastic_float_clones<Sub, RB, 2>(bp, w, u, words, flags, len, counts);
    };
    if (bp.sub_limit > 0) {
      return rbits ? run.template operator()<true, true>() : run.template operator()<true, false>();
    }
    return rbits ? run.template operator()<false, true>() : run.template operator()<false, false>();
  }
  if (mode == 1) {
    return rbits ? stochastic_clones<false, 1, true>(bp, w, u, words, flags, len, counts)
                 : stochastic_clones<false, 1, false>(bp, w, u, words, flags, len, counts);
  }
  return rbits ? stochastic_clones<false, 2, true>(bp, w, u, words, flags, len, counts)
               : stochastic_clones<false, 2, false>(bp, w, u, words, flags, len, counts);
}
}  // namespace

std::int64_t stochastic_block(const BlockParams& bp, bool integer, int mode, float* w, const float* u,
                              const std::uint32_t* words, unsigned char* flags, std::int64_t len, BlockCounts& counts) {
  const BlockIsa isa = isa_now();
  if (bp.sr_fp32_lanes && isa == BlockIsa::avx512) {
    return integer ? avx512::stochastic_block_integer(bp, mode, w, u, words, flags, len, counts)
                   : avx512::stochastic_block_float(bp, mode, w, u, words, flags, len, counts);
  }
  if (isa == BlockIsa::avx2 && (integer ? bp.sr_fp32_lanes : avx2::stochastic_float_covers(bp))) {
    return integer ? avx2::stochastic_block_integer(bp, mode, w, u, words, flags, len, counts)
                   : avx2::stochastic_block_float(bp, mode, w, u, words, flags, len, counts);
  }
  return in_chunks(w, u, len, [&](std::int64_t o, std::int64_t n) {
    return stochastic_portable(bp, integer, mode, w + o, u + o, words + o, flags + o, n, counts);
  });
}

const std::uint32_t* philox_first_words_in(const RngKey& key, std::uint64_t first, std::int64_t len,
                                           std::uint32_t* scratch) {
  if (len <= 0) {
    return scratch;
  }
  const std::uint64_t g0 = first >> 2;
  const auto groups = static_cast<std::int64_t>(((first + static_cast<std::uint64_t>(len) - 1) >> 2) - g0 + 1);
  const auto k0 = static_cast<std::uint32_t>(key.seed), k1 = static_cast<std::uint32_t>(key.seed >> 32);
  const auto step = static_cast<std::uint32_t>(key.step);
  switch (isa_now()) {  // each rounds groups up to whole batches (at most 32 groups), which scratch has room for
    case BlockIsa::avx512:
      avx512::philox_groups(k0, k1, step, key.tensor_id, g0, groups, scratch);
      break;
    case BlockIsa::avx2:
      avx2::philox_groups(k0, k1, step, key.tensor_id, g0, groups, scratch);
      break;
    default:
      philox_groups(k0, k1, step, key.tensor_id, g0, groups, scratch);
      break;
  }
  return scratch + (first & 3u);
}

const std::uint32_t* sr_first_words_in(const RngKey& key, const WritebackPolicy& policy, std::uint64_t first,
                                       std::int64_t len, std::uint32_t* scratch) {
  if (policy.stream != SrStream::philox_packed || len <= 0) {
    return philox_first_words_in(key, first, len, scratch);
  }
  const auto r = static_cast<std::uint32_t>(sr_packed_bits(policy));
  const std::uint64_t per = 32u / r;
  const std::uint64_t j0 = first / per, j1 = (first + static_cast<std::uint64_t>(len) - 1) / per;
  alignas(64) std::uint32_t raw[kPhiloxScratch];
  const std::uint32_t* src = philox_first_words_in(key, j0, static_cast<std::int64_t>(j1 - j0 + 1), raw);
  const auto offset = static_cast<std::int64_t>(first - j0 * per);  // coordinate first's chunk within src's words
  if constexpr (std::endian::native == std::endian::little) {
    // r = 8 and 16: chunk i of a word is its i-th byte / half-word in memory, so chunk number offset + k of src is
    // coordinate first + k's (a zero extension and a shift per coordinate: in AVX2 lanes, or loops the compiler
    // vectorizes)
    if ((r == 8 || r == 16) && isa_now() == BlockIsa::avx2) {
      avx2::expand_chunks(src, offset, len, static_cast<int>(r), scratch);
      return scratch;
    }
    if (r == 8) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(src);
      for (std::int64_t k = 0; k < len; ++k) {
        scratch[k] = static_cast<std::uint32_t>(bytes[offset + k]) << 24;
      }
      return scratch;
    }
    if (r == 16) {
      std::uint16_t halves[2 * (kWritebackBlock / 2 + 2)];
      std::memcpy(halves, src, static_cast<std::size_t>(4 * (j1 - j0 + 1)));
      for (std::int64_t k = 0; k < len; ++k) {
        scratch[k] = static_cast<std::uint32_t>(halves[offset + k]) << 16;
      }
      return scratch;
    }
  }
  const std::uint32_t mask = (1u << r) - 1u;
  for (std::int64_t k = 0; k < len; ++k) {
    const std::uint64_t chunk = static_cast<std::uint64_t>(offset + k);
    scratch[k] = ((src[chunk / per] >> ((chunk % per) * r)) & mask) << (32u - r);
  }
  return scratch;
}

void philox_first_words(const RngKey& key, std::uint64_t first, std::int64_t len, std::uint32_t* words) {
  if (len <= 0) {
    return;
  }
  alignas(64) std::uint32_t scratch[kPhiloxScratch];
  std::memcpy(words, philox_first_words_in(key, first, len, scratch),
              static_cast<std::size_t>(len) * sizeof(std::uint32_t));
}

}  // namespace wbaudit::sim::detail
