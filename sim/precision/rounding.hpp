#pragma once
// Exact rounding into a number format: decode/encode of codes, succ/pred, directional gaps, and the write-back
// rounding q_F^pi(x) for nearest (ties to even), exact stochastic rounding, r-bit stochastic rounding and
// saturation. All functions are usable inside Kokkos kernels (host execution spaces) and on the host.
//
// How exactness is obtained (see docs/formats.md):
// - The value to round is carried as an unevaluated double-double x = hi + lo (exact). For w + u with w, u in
//   fp32, TwoSum in double gives it exactly, whatever the exponent distance (so an fp32 target is rounded once).
// - |x| is scaled by a power of two into units of the local grid spacing (exact), where the grid levels are the
//   multiples of S (S = 1 for floating formats; S = the odd factor of the scale for intK). The level below |x| and
//   the remainder in [0, S) follow exactly from floor and one Sterbenz-exact subtraction.
// - Nearest compares 2 * remainder with S (ties: even level). Stochastic rounding compares a lazily drawn uniform
//   U (32 bits at a time, continuing only while the drawn prefix ties) with remainder / S, so
//   P(away from zero) = (|x| - tz) / (away - tz) exactly, for every discarded bit.
// - r-bit SR emulates hardware: the magnitude's discarded fraction is truncated to r bits, D = floor(f * 2^r), and
//   the value moves away from zero iff an r-bit random integer R < D. Fractions below 2^-r never move (dead zone).
#include <Kokkos_Core.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "sim/precision/format.hpp"
#include "sim/precision/rng.hpp"

namespace wbaudit::sim {

// Kernel-side parameters derived once from a FormatSpec (see format_params()).
struct FormatParams {
  bool integer = false;
  int bits = 32;
  int exp_bits = 8;
  int man_bits = 23;
  int bias = 127;
  int emin = -126;  // exponent of the smallest normal binade (1 - bias)
  bool ieee_specials = true;
  bool has_nan = true;
  double max_finite = 0;
  double min_normal = 0;
  double min_subnormal = 0;
  // integer formats: value = n * scale, scale = scale_odd * 2^scale_exp, |n| <= max_level
  int max_level = 0;
  double scale = 1;
  double scale_odd = 1;
  int scale_exp = 0;
};

// Host-side: derive the kernel parameters. Throws FormatError for an integer scale that is not a positive
// finite float.
FormatParams format_params(const FormatSpec& fmt);

// An exact value hi + lo with |lo| <= ulp(hi) / 2 (an unevaluated double-double).
struct ExactSum {
  double hi = 0;
  double lo = 0;
};

namespace detail {

KOKKOS_INLINE_FUNCTION double pow2(int k) {  // 2^k for k in [-1022, 1023]
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

KOKKOS_INLINE_FUNCTION int exponent_of(double a) {  // floor(log2 a) for a normal double a > 0
  return static_cast<int>((std::bit_cast<std::uint64_t>(a) >> 52) & 0x7ff) - 1023;
}

// Knuth's TwoSum: s + e == a + b exactly (needs round-to-nearest and no FP contraction or reassociation).
KOKKOS_INLINE_FUNCTION ExactSum two_sum(double a, double b) {
  const double s = a + b;
  const double bb = s - a;
  const double e = (a - (s - bb)) + (b - bb);
  return {s, e};
}

// Comparisons of a normalized double-double with a double are decided by hi, then by the sign of lo.
KOKKOS_INLINE_FUNCTION bool dd_less(const ExactSum& a, double c) {
  return a.hi < c || (a.hi == c && a.lo < 0);
}
KOKKOS_INLINE_FUNCTION bool dd_greater(const ExactSum& a, double c) {
  return a.hi > c || (a.hi == c && a.lo > 0);
}

// z >= 0 (normalized), S >= 1 an odd integer or 1: level = floor(z / S), rem = z - level * S in [0, S), exactly.
// z.hi - level * S is exact by Sterbenz' lemma (level >= 1 and z.hi within [level*S - ulp, (level+1)*S]) or
// trivially (level == 0).
KOKKOS_INLINE_FUNCTION void divmod_exact(const ExactSum& z, double S, double inv_S, double& level, ExactSum& rem) {
  level = std::floor(z.hi * inv_S);
  rem = two_sum(z.hi - level * S, z.lo);
  if (dd_less(rem, 0.0)) {
    level -= 1;
    rem = two_sum(z.hi - level * S, z.lo);
  } else if (!dd_less(rem, S)) {
    level += 1;
    rem = two_sum(z.hi - level * S, z.lo);
  }
}

// Decides U * S < rem for U uniform on [0, 1) drawn lazily from the stream, rem in (0, S): true with probability
// rem / S exactly. The first round consumes the first word's random bits (stream.first_bits(): 32, or 16 for the
// packed stream), each further round 32 bits; a further round happens only when the drawn prefix ties with rem's
// expansion (probability 2^-bits per round). 48 rounds bound the loop.
KOKKOS_INLINE_FUNCTION bool draw_below(ExactSum rem, double S, PhiloxStream& stream) {
  const int first = stream.first_bits();
  for (int round = 0; round < 48; ++round) {
    const int bits = round == 0 ? first : 32;
    const double r = static_cast<double>(stream.next() >> (32 - bits));
    const double scale = bits == 32 ? 0x1p32 : pow2(bits);
    const ExactSum z{rem.hi * scale, rem.lo * scale};
    const double a = r * S;  // exact (< 2^48)
    if (!dd_greater(z, a)) {
      return false;  // z <= r*S: U*S >= rem
    }
    if (!dd_less(z, a + S)) {
      return true;  // z >= (r+1)*S: U*S < rem
    }
    rem = two_sum(z.hi - a, z.lo);  // exact: Sterbenz (a >= S) or a == 0
  }
  return false;
}

}  // namespace detail

// Where |x| lies on the grid of a format: toward-zero neighbour `tz`, away-from-zero neighbour `away`, and the
// exact fraction rem / S = (|x| - tz) / (away - tz). `exact` when x is a grid value (or saturated).
struct Bracket {
  double sign = 1;   // +1 or -1 (the sign of x; of a zero x, its sign bit)
  double tz = 0;     // magnitude of the toward-zero neighbour
  double away = 0;   // magnitude of the away-from-zero neighbour
  double level = 0;  // tz = level * S * unit (even level <=> even last significand bit / even integer level)
  ExactSum rem{};    // in [0, S)
  double S = 1;
  bool exact = true;
  bool saturated = false;  // |x| > max finite: the value is sign * max finite
};

KOKKOS_INLINE_FUNCTION Bracket bracket_of(const FormatParams& p, const ExactSum& x) {
  Bracket b;
  const bool negative = std::signbit(x.hi);
  b.sign = negative ? -1.0 : 1.0;
  const double ax = negative ? -x.hi : x.hi;
  const double ae = negative ? -x.lo : x.lo;
  if (ax == 0) {
    return b;  // x == 0 exactly (lo == 0 too)
  }
  if (ax > p.max_finite || (ax == p.max_finite && ae > 0)) {
    b.saturated = true;
    b.tz = b.away = p.max_finite;
    return b;
  }
  double unit;
  if (p.integer) {
    unit = detail::pow2(p.scale_exp);
    b.S = p.scale_odd;
  } else {
    const int e = ax < p.min_normal ? p.emin : detail::exponent_of(ax);
    int qe = (e > p.emin ? e : p.emin) - p.man_bits;
    // Binade edge: just below |x| = 2^e the spacing is half the spacing above it.
    if (ae < 0 && e > p.emin && ax == detail::pow2(e)) {
      qe -= 1;
    }
    unit = detail::pow2(qe);
  }
  const double inv = 1.0 / unit;  // exact: a power of two
  const ExactSum z{ax * inv, ae * inv};
  detail::divmod_exact(z, b.S, p.integer ? 1.0 / b.S : 1.0, b.level, b.rem);
  b.tz = b.level * b.S * unit;
  b.away = (b.level + 1) * b.S * unit;
  b.exact = b.rem.hi == 0 && b.rem.lo == 0;
  if (b.exact) {
    b.away = b.tz;
  }
  return b;
}

// Round to nearest, ties to the even level. Returns the signed value.
KOKKOS_INLINE_FUNCTION double nearest_of(const Bracket& b) {
  if (b.exact) {
    return b.sign * b.tz;
  }
  const double twice = 2 * b.rem.hi;  // exact
  bool away;
  if (twice != b.S) {
    away = twice > b.S;
  } else if (b.rem.lo != 0) {
    away = b.rem.lo > 0;
  } else {
    away = std::fmod(b.level, 2.0) != 0;  // tie: the even level
  }
  return b.sign * (away ? b.away : b.tz);
}

struct StochasticOutcome {
  double value = 0;        // signed result
  bool random = false;     // the random draw decided (0 < P(away) < 1)
  bool truncated = false;  // r-bit SR: a nonzero exact probability truncated to zero (the r-bit dead zone)
};

// Stochastic rounding of a bracketed value: exact probabilities (sr_bits == 0) or r-bit hardware emulation.
KOKKOS_INLINE_FUNCTION StochasticOutcome stochastic_of(const Bracket& b, int sr_bits, PhiloxStream& stream) {
  StochasticOutcome out;
  if (b.exact) {
    out.value = b.sign * b.tz;
    return out;
  }
  bool away;
  if (sr_bits == 0) {
    away = detail::draw_below(b.rem, b.S, stream);
    out.random = true;
  } else {
    const double two_r = detail::pow2(sr_bits);
    double d;  // D = floor(rem / S * 2^r)
    ExactSum unused;
    detail::divmod_exact(ExactSum{b.rem.hi * two_r, b.rem.lo * two_r}, b.S, 1.0 / b.S, d, unused);
    const std::uint32_t word = stream.next();
    const double r = static_cast<double>(sr_bits == 32 ? word : word >> (32 - sr_bits));
    away = r < d;
    out.random = d > 0;
    out.truncated = d == 0;
  }
  out.value = b.sign * (away ? b.away : b.tz);
  return out;
}

// q_F(x) under nearest for a double x (exact input). Saturates.
KOKKOS_INLINE_FUNCTION double round_nearest(const FormatParams& p, double x) {
  return nearest_of(bracket_of(p, ExactSum{x, 0.0}));
}

// The exact sum w + u of two floats as a double-double.
KOKKOS_INLINE_FUNCTION ExactSum exact_sum(float w, float u) {
  return detail::two_sum(static_cast<double>(w), static_cast<double>(u));
}

// ---- Codes, neighbours and gaps ----

// Value of a code (low `bits` bits). NaN codes and, for intK, the unused code -2^(K-1) decode to NaN;
// IEEE infinity codes to +-inf.
KOKKOS_INLINE_FUNCTION double decode_code(const FormatParams& p, std::uint32_t code) {
  if (p.integer) {
    const std::uint32_t mask = (1u << p.bits) - 1u;
    code &= mask;
    const std::uint32_t sign_bit = 1u << (p.bits - 1);
    if (code == sign_bit) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    const int n = (code & sign_bit) ? static_cast<int>(code) - static_cast<int>(1u << p.bits) : static_cast<int>(code);
    return n * p.scale;
  }
  const std::uint32_t man_mask = (1u << p.man_bits) - 1u;
  const std::uint32_t exp_mask = (1u << p.exp_bits) - 1u;
  const bool negative = (code >> (p.bits - 1)) & 1u;
  const std::uint32_t ef = (code >> p.man_bits) & exp_mask;
  const std::uint32_t mf = code & man_mask;
  double mag;
  if (p.ieee_specials && ef == exp_mask) {
    mag = mf == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!p.ieee_specials && p.has_nan && ef == exp_mask && mf == man_mask) {
    mag = std::numeric_limits<double>::quiet_NaN();  // OCP e4m3 "fn": S.1111.111 is NaN
  } else if (ef == 0) {
    mag = mf * p.min_subnormal;
  } else {
    mag =
        (static_cast<double>(mf) + detail::pow2(p.man_bits)) * detail::pow2(static_cast<int>(ef) - p.bias - p.man_bits);
  }
  return negative ? -mag : mag;
}

// Code of a value exactly representable in the format (or +-inf / NaN where the format has them).
KOKKOS_INLINE_FUNCTION std::uint32_t encode_value(const FormatParams& p, double v) {
  if (p.integer) {
    const double n = std::nearbyint(v / p.scale);
    return static_cast<std::uint32_t>(static_cast<std::int32_t>(n)) & ((1u << p.bits) - 1u);
  }
  const std::uint32_t sign = std::signbit(v) ? (1u << (p.bits - 1)) : 0u;
  const std::uint32_t exp_mask = (1u << p.exp_bits) - 1u;
  const double a = std::fabs(v);
  if (std::isnan(v)) {
    return p.ieee_specials ? ((exp_mask << p.man_bits) | (1u << (p.man_bits - 1)))
                           : ((exp_mask << p.man_bits) | ((1u << p.man_bits) - 1u));
  }
  if (std::isinf(v)) {
    return sign | (exp_mask << p.man_bits);
  }
  if (a == 0) {
    return sign;
  }
  if (a < p.min_normal) {
    return sign | static_cast<std::uint32_t>(a / p.min_subnormal);
  }
  const int e = detail::exponent_of(a);
  const auto mf = static_cast<std::uint32_t>(a * detail::pow2(p.man_bits - e) - detail::pow2(p.man_bits));
  return sign | (static_cast<std::uint32_t>(e + p.bias) << p.man_bits) | mf;
}

namespace detail {
// Next larger magnitude after a >= 0 (a representable); +inf when a is max finite.
KOKKOS_INLINE_FUNCTION double next_up_magnitude(const FormatParams& p, double a) {
  if (a >= p.max_finite) {
    return std::numeric_limits<double>::infinity();
  }
  if (p.integer) {
    return a + p.scale;
  }
  if (a == 0) {
    return p.min_subnormal;
  }
  const int e = a < p.min_normal ? p.emin : exponent_of(a);
  return a + pow2((e > p.emin ? e : p.emin) - p.man_bits);
}
// Next smaller magnitude before a > 0 (a representable).
KOKKOS_INLINE_FUNCTION double next_down_magnitude(const FormatParams& p, double a) {
  if (p.integer) {
    return a - p.scale;
  }
  const int e = a < p.min_normal ? p.emin : exponent_of(a);
  int qe = (e > p.emin ? e : p.emin) - p.man_bits;
  if (e > p.emin && a == pow2(e)) {
    qe -= 1;  // binade edge: the gap toward zero is half
  }
  return a - pow2(qe);
}
}  // namespace detail

// Smallest format value greater than v (v representable); +inf when v is max finite. -0 and +0 are both zero.
KOKKOS_INLINE_FUNCTION double succ(const FormatParams& p, double v) {
  if (v >= 0) {
    return detail::next_up_magnitude(p, std::fabs(v));
  }
  return -detail::next_down_magnitude(p, -v) + 0.0;  // + 0.0: the successor of -min is +0
}

// Largest format value smaller than v (v representable); -inf when v is -max finite.
KOKKOS_INLINE_FUNCTION double pred(const FormatParams& p, double v) {
  return -succ(p, -v) + 0.0;
}

// Directional gaps g+ = succ(w) - w and g- = w - pred(w) (inf at the ends of the range).
KOKKOS_INLINE_FUNCTION double gap_up(const FormatParams& p, double w) {
  return succ(p, w) - w;
}
KOKKOS_INLINE_FUNCTION double gap_down(const FormatParams& p, double w) {
  return w - pred(p, w);
}

}  // namespace wbaudit::sim
