#pragma once
// Internal to the precision layer: the exact per-block scale and per-element rounding of a block-scaled write-back,
// by the definitions of docs/formats.md ("Block-scaled formats"). The scalar reference (block_reference.cpp) is built
// from these; the kernels (block_writeback.cpp) use them for the coordinates their vectorized loops leave open.
#include <Kokkos_Core.hpp>
#include <bit>
#include <cstdint>
#include <limits>

#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"

namespace wbaudit::sim::detail {

// The decode scale of one block.
struct BlockScale {
  int exp = kE8M0MinExponent;  // MX: X = 2^exp
  float s_b = 0;               // NVFP4: the block scale (an E4M3 value; 0: a zero block)
  float s_enc = 1;             // NVFP4: the tensor's encode scale S_enc
  float grid[8] = {};          // NVFP4: the decoded magnitudes fl32(q_k * s_b / S_enc), q_k = kE2M1Magnitudes[k]
};

KOKKOS_INLINE_FUNCTION BlockScale mx_scale_of(const BlockFormatParams& p, const ExactSum& amax) {
  BlockScale s;
  s.exp = mx_scale_exponent(p, amax);
  return s;
}

// amax_b: the block's largest |value| in fp32; s_enc: the tensor's encode scale.
KOKKOS_INLINE_FUNCTION BlockScale nvfp4_scale_of(const BlockFormatParams& p, float amax_b, float s_enc) {
  BlockScale s;
  s.s_enc = s_enc;
  s.s_b = nvfp4_block_scale(p.e4m3, amax_b, s_enc);
  for (int k = 0; k < 8; ++k) {
    s.grid[k] = nvfp4_decode(kE2M1Magnitudes[k], s.s_b, s_enc);
  }
  return s;
}

// +1 when b's decode scale is larger than a's, -1 when smaller, 0 when equal (NVFP4: s_b / S_enc, compared exactly as
// b.s_b * a.s_enc against a.s_b * b.s_enc, products of fp32 values exact in double).
KOKKOS_INLINE_FUNCTION int scale_order(const BlockFormatParams& p, const BlockScale& a, const BlockScale& b) {
  if (p.family == BlockFamily::mx) {
    return b.exp > a.exp ? 1 : (b.exp < a.exp ? -1 : 0);
  }
  const double lhs = static_cast<double>(b.s_b) * static_cast<double>(a.s_enc);
  const double rhs = static_cast<double>(a.s_b) * static_cast<double>(b.s_enc);
  return lhs > rhs ? 1 : (lhs < rhs ? -1 : 0);
}

// The largest decoded magnitude of a block at scale s (the value of +-max_elem).
KOKKOS_INLINE_FUNCTION double largest_decoded(const BlockFormatParams& p, const BlockScale& s) {
  return p.family == BlockFamily::mx ? p.max_elem * pow2(s.exp) : static_cast<double>(s.grid[7]);
}

// Whether an MX block with exact amax fits at exponent exp: exp <= 127 (E8M0) and the element grid value at or above
// amax / 2^exp (capped at max_elem), times 2^exp, is a finite fp32 value, so no policy can decode beyond fp32.
KOKKOS_INLINE_FUNCTION bool mx_block_in_range(const BlockFormatParams& p, const ExactSum& amax, int exp) {
  if (exp > kE8M0MaxExponent) {
    return false;
  }
  const double inv = pow2(-exp);
  const Bracket b = bracket_of(p.elem, ExactSum{amax.hi * inv, amax.lo * inv});
  const double top = b.exact ? b.tz : b.away;  // saturated: tz == away == max_elem
  return top * pow2(exp) <= static_cast<double>(std::numeric_limits<float>::max());
}

// ---- Exact stochastic decisions against a gap of an odd integer up to 2^37 (NVFP4's decoded grid) ----

// rem in [0, gap), gap > 0 the difference of two fp32 values: rewrites gap = G * 2^k with G odd (G < 2^25) and
// scales rem by 2^-k (exact).
KOKKOS_INLINE_FUNCTION void normalize_gap(double gap, ExactSum& rem, double& G) {
  const std::uint64_t m =
      (std::bit_cast<std::uint64_t>(gap) & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
  const int tz = std::countr_zero(m);
  G = static_cast<double>(m >> tz);
  const double scale = pow2(-(exponent_of(gap) - 52 + tz));
  rem = ExactSum{rem.hi * scale, rem.lo * scale};
}

// Decides U < rem / G for U uniform on [0, 1) from the stream's bits, rem in (0, G), G an odd integer < 2^37: true
// with probability rem / G exactly. U's bits are taken 16 at a time (the top half of each word first; the first word
// holds stream.first_bits() random bits), so d * G stays exact in double; a further digit is drawn only while the
// drawn prefix ties with rem / G's expansion. It decides exactly as the 32-bit comparison of the write-back's
// vectorized loops wherever those decide.
KOKKOS_INLINE_FUNCTION bool draw_below_gap(ExactSum rem, double G, PhiloxStream& stream) {
  std::uint32_t word = 0;
  int digits_left = 0;
  bool first_word = true;
  for (int round = 0; round < 96; ++round) {
    if (digits_left == 0) {
      const int bits = first_word ? stream.first_bits() : 32;
      word = stream.next();
      digits_left = bits >= 32 ? 2 : 1;
      first_word = false;
    }
    const double d = static_cast<double>(word >> 16);
    word <<= 16;
    --digits_left;
    const ExactSum z{rem.hi * 65536.0, rem.lo * 65536.0};
    const double a = d * G;  // exact: < 2^53
    if (!dd_greater(z, a)) {
      return false;  // z <= d * G: U * G >= rem
    }
    if (!dd_less(z, a + G)) {
      return true;  // z >= (d + 1) * G: U * G < rem
    }
    rem = two_sum(z.hi - a, z.lo);  // exact: Sterbenz (a >= G) or a == 0
  }
  return false;
}

// floor(rem / G * 2^r) for rem in [0, G), G an odd integer < 2^37, r in 1..32 (exact, 16 bits at a time).
KOKKOS_INLINE_FUNCTION std::uint64_t leading_bits(ExactSum rem, double G, int r) {
  std::uint64_t D = 0;
  for (int have = 0; have < r;) {
    const int take = r - have < 16 ? r - have : 16;
    const double scale = pow2(take);
    double level;
    ExactSum next;
    divmod_exact(ExactSum{rem.hi * scale, rem.lo * scale}, G, 1.0 / G, level, next);
    D = (D << take) | static_cast<std::uint64_t>(level);
    rem = next;
    have += take;
  }
  return D;
}

// ---- One element ----

struct ElementOutcome {
  float value = 0;         // the decoded result w'
  bool saturated = false;  // |v| / scale beyond max_elem
  bool random = false;     // SR: the random draw decided (v strictly between two neighbours, both possible)
  bool truncated = false;  // r-bit SR: away-from-zero probability truncated to zero
};

// The neighbours of |v| on an NVFP4 block's decoded grid: grid[k] <= |v| < grid[k + 1] (k = 7: |v| >= grid[7]).
struct GridBracket {
  double sign = 1;
  int k = 0;
  ExactSum a{};  // |v|
  bool exact = false;
  bool saturated = false;
};
KOKKOS_INLINE_FUNCTION GridBracket grid_bracket(const float* grid, const ExactSum& v) {
  GridBracket b;
  const bool negative = std::signbit(v.hi);
  b.sign = negative ? -1.0 : 1.0;
  b.a = negative ? ExactSum{-v.hi, -v.lo} : v;
  if (grid[7] == 0.0f) {
    b.exact = true;  // a zero block (s_b = 0): every element decodes to zero
    return b;
  }
  while (b.k < 7 && !dd_less(b.a, static_cast<double>(grid[b.k + 1]))) {
    ++b.k;
  }
  b.saturated = dd_greater(b.a, static_cast<double>(grid[7]));
  b.exact = b.saturated || (b.a.hi == static_cast<double>(grid[b.k]) && b.a.lo == 0);
  return b;
}

// Nearest on the decoded grid: the nearer neighbour, ties to the even code (k even: grid[k]).
KOKKOS_INLINE_FUNCTION double grid_nearest(const float* grid, const GridBracket& b) {
  if (b.exact) {
    return b.sign * static_cast<double>(grid[b.k]);
  }
  const double lo = grid[b.k], hi = grid[b.k + 1];
  const ExactSum twice{2 * b.a.hi, 2 * b.a.lo};
  const double sum = lo + hi;  // exact: two fp32 values
  const bool up = dd_greater(twice, sum) || (!dd_less(twice, sum) && (b.k % 2) == 1);
  return b.sign * (up ? hi : lo);
}

// SR on the decoded grid: away from zero (grid[k + 1]) with probability (|v| - grid[k]) / (grid[k + 1] - grid[k]).
KOKKOS_INLINE_FUNCTION double grid_stochastic(const float* grid, const GridBracket& b, int sr_bits,
                                              PhiloxStream& stream, ElementOutcome& out) {
  const double lo = grid[b.k], hi = grid[b.k + 1];
  ExactSum rem = two_sum(b.a.hi - lo, b.a.lo);  // exact: Sterbenz (grid[k + 1] <= 2 grid[k]) or lo == 0
  double G;
  normalize_gap(hi - lo, rem, G);
  bool away;
  if (sr_bits == 0) {
    away = draw_below_gap(rem, G, stream);
    out.random = true;
  } else {
    const std::uint64_t D = leading_bits(rem, G, sr_bits);
    const std::uint32_t word = stream.next();
    const std::uint64_t R = sr_bits == 32 ? word : (word >> (32 - sr_bits));
    away = R < D;
    out.random = D > 0;
    out.truncated = D == 0;
  }
  return b.sign * (away ? hi : lo);
}

// The decoded neighbours of v at scale s (signed; toward_zero == away when v is on the grid or saturates) and its
// nearest value: what nearest and SR choose from (round_element uses the same brackets).
struct ElementNeighbours {
  double nearest = 0, toward_zero = 0, away = 0;
  bool saturated = false;
};
KOKKOS_INLINE_FUNCTION ElementNeighbours element_neighbours(const BlockFormatParams& p, const BlockScale& s,
                                                            const ExactSum& v) {
  ElementNeighbours n;
  if (p.family == BlockFamily::mx) {
    const double X = pow2(s.exp), inv = pow2(-s.exp);
    const Bracket b = bracket_of(p.elem, ExactSum{v.hi * inv, v.lo * inv});
    n.nearest = nearest_of(b) * X;
    n.toward_zero = b.sign * b.tz * X;
    n.away = b.sign * b.away * X;
    n.saturated = b.saturated;
    return n;
  }
  const GridBracket b = grid_bracket(s.grid, v);
  n.nearest = grid_nearest(s.grid, b);
  n.toward_zero = b.sign * static_cast<double>(s.grid[b.k]);
  n.away = b.exact ? n.toward_zero : b.sign * static_cast<double>(s.grid[b.k + 1]);
  n.saturated = b.saturated;
  return n;
}

// q^policy(v) at scale s for one element with old value w and proposal u (v = w + u exactly, or the master value);
// coordinate keys the SR stream. Policy::master rounds to nearest (the master copy lives outside).
KOKKOS_INLINE_FUNCTION ElementOutcome round_element(const BlockFormatParams& p, const BlockScale& s,
                                                    const WritebackPolicy& policy, const RngKey& key,
                                                    std::uint64_t coordinate, const ExactSum& v, float w, float u) {
  ElementOutcome out;
  const bool sr_policy = policy.policy == Policy::stochastic || policy.policy == Policy::deadzone_sr;
  if (p.family == BlockFamily::mx) {
    const double X = pow2(s.exp), inv = pow2(-s.exp);
    const Bracket b = bracket_of(p.elem, ExactSum{v.hi * inv, v.lo * inv});  // exact: a power-of-two scaling
    out.saturated = b.saturated;
    const double nearest = nearest_of(b) * X;
    const bool use_sr = policy.policy == Policy::stochastic ||
                        (policy.policy == Policy::deadzone_sr && u != 0 && nearest == static_cast<double>(w));
    if (!sr_policy || !use_sr || b.exact) {
      out.value = static_cast<float>(nearest);
      return out;
    }
    PhiloxStream stream = sr_stream_of(policy, key, coordinate);
    const StochasticOutcome r = stochastic_of(b, policy.sr_bits, stream);
    out.value = static_cast<float>(r.value * X);
    out.random = r.random;
    out.truncated = r.truncated;
    return out;
  }
  const GridBracket b = grid_bracket(s.grid, v);
  out.saturated = b.saturated;
  const double nearest = grid_nearest(s.grid, b);
  const bool use_sr = policy.policy == Policy::stochastic ||
                      (policy.policy == Policy::deadzone_sr && u != 0 && nearest == static_cast<double>(w));
  if (!sr_policy || !use_sr || b.exact) {
    out.value = static_cast<float>(nearest);
    return out;
  }
  PhiloxStream stream = sr_stream_of(policy, key, coordinate);
  out.value = static_cast<float>(grid_stochastic(s.grid, b, policy.sr_bits, stream, out));
  return out;
}

// P(w' == w) for one element with old value w and proposal u != 0 under an SR policy (stochastic or deadzone-sr, any
// sr_bits), with the block's new scale s fixed (it depends on v only, not on the draws): the closed form of
// round_element's choice. v / scale lies between its neighbours toward zero a and away from zero b; P(b) is
// rem / gap exactly (sr_bits == 0, the exact ratio rounded to double) or floor(2^r rem / gap) / 2^r (r-bit SR, exact);
// P(erased) = [a == w] (1 - P(b)) + [b == w] P(b), decoded values compared in fp32 as the write-back's events are.
// deadzone-sr takes nearest where nearest moves w (P = 0); v on the grid or saturated: [nearest == w].
KOKKOS_INLINE_FUNCTION double element_erasure_probability(const BlockFormatParams& p, const BlockScale& s,
                                                          const WritebackPolicy& policy, const ExactSum& v, float w) {
  double nearest, toward, away, p_away;
  if (p.family == BlockFamily::mx) {
    const double X = pow2(s.exp), inv = pow2(-s.exp);
    const Bracket b = bracket_of(p.elem, ExactSum{v.hi * inv, v.lo * inv});  // exact: a power-of-two scaling
    nearest = nearest_of(b) * X;
    const bool use_sr = policy.policy == Policy::stochastic || nearest == static_cast<double>(w);
    if (!use_sr || b.exact) {
      return static_cast<float>(nearest) == w ? 1.0 : 0.0;
    }
    if (policy.sr_bits == 0) {
      p_away = (b.rem.hi + b.rem.lo) / b.S;  // as erasure_probability (expected_erasure.hpp)
    } else {
      double d;  // D = floor(rem / S * 2^r), as stochastic_of
      ExactSum unused;
      const double two_r = pow2(policy.sr_bits);
      divmod_exact(ExactSum{b.rem.hi * two_r, b.rem.lo * two_r}, b.S, 1.0 / b.S, d, unused);
      p_away = d / two_r;
    }
    toward = b.sign * b.tz * X;
    away = b.sign * b.away * X;
  } else {
    const GridBracket b = grid_bracket(s.grid, v);
    nearest = grid_nearest(s.grid, b);
    const bool use_sr = policy.policy == Policy::stochastic || nearest == static_cast<double>(w);
    if (!use_sr || b.exact) {
      return static_cast<float>(nearest) == w ? 1.0 : 0.0;
    }
    const double lo = s.grid[b.k], hi = s.grid[b.k + 1];
    ExactSum rem = two_sum(b.a.hi - lo, b.a.lo);  // as grid_stochastic
    double G;
    normalize_gap(hi - lo, rem, G);
    p_away = policy.sr_bits == 0 ? (rem.hi + rem.lo) / G
                                 : static_cast<double>(leading_bits(rem, G, policy.sr_bits)) / pow2(policy.sr_bits);
    toward = b.sign * lo;
    away = b.sign * hi;
  }
  return (static_cast<float>(toward) == w ? 1.0 - p_away : 0.0) + (static_cast<float>(away) == w ? p_away : 0.0);
}

// The events of one element (docs/formats.md): scale_changed for its block; w_at_max: |w| is the block's largest
// decoded magnitude at its (unchanged) scale.
KOKKOS_INLINE_FUNCTION void add_element_events(BlockWritebackCounts& c, float w, float u, const ElementOutcome& o,
                                               bool scale_changed, bool w_at_max) {
  const bool changed = o.value != w;
  c.saturated += o.saturated;
  c.sr_applied += o.random;
  c.sr_truncated += o.truncated;
  if (u != 0) {
    c.nonzero += 1;
    if (changed) {
      c.applied += 1;
      return;
    }
    c.erased += 1;
    if (scale_changed) {
      c.erased_scale += 1;
    } else if (w_at_max && ((u > 0 && w > 0) || (u < 0 && w < 0))) {  // u points outward
      c.erased_saturation += 1;
    } else {
      c.erased_grid += 1;
    }
  } else if (changed) {
    c.collateral += 1;
    c.flushed += w != 0 && o.value == 0;
  }
}

}  // namespace wbaudit::sim::detail
