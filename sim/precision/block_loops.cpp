// The vectorized loops of the block-scaled write-back (see detail/block_loops.hpp for the contract).
//
// How the loops are written (as writeback_blocks.cpp): no branches in the loop bodies; every decision is a comparison
// stored as a 0/1 std::uint64_t (the lane width of double) and every choice a select, which GCC turns into mask
// registers (AVX-512) or compare masks (AVX2, SSE2). This file is compiled with -fno-trapping-math (see
// sim/precision/sources.cmake), which lets GCC if-convert the selects; it changes no value. Every floating-point
// operation is a correctly rounded IEEE double operation (no FMA: -ffp-contract=off), so the three compilations
// (x86-64-v4, x86-64-v3, baseline) give identical bits.
#include "sim/precision/detail/block_loops.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "sim/precision/policy.hpp"

namespace wbaudit::sim::detail {
namespace {

constexpr double kRound52 = 0x1.8p52;  // (y + kRound52) - kRound52 == nearbyint(y) (ties to even) for 0 <= y < 2^51

inline std::uint64_t bits64(double x) {
  return std::bit_cast<std::uint64_t>(x);
}
inline double double_of(std::uint64_t b) {
  return std::bit_cast<double>(b);
}

// floor(y) for 0 <= y < 2^51, exactly.
[[gnu::always_inline]] inline double floor_small(double y) {
  const double n = (y + kRound52) - kRound52;
  return n > y ? n - 1.0 : n;
}

// Prefetches `len` floats of w and u from w + ahead, u + ahead, one per cache line. The loops run one span after
// another through memory, and the hardware prefetchers do not run far enough ahead of a loop that computes between
// its loads (docs/performance.md, "Write-back kernel"); prefetches never fault, past the arrays' ends included. A loop
// the compiler vectorizes cannot hold them itself: callers issue them before each block.
[[gnu::always_inline]] inline void prefetch_ahead(const float* w, const float* u, std::int64_t ahead,
                                                  std::int64_t len) {
  constexpr std::int64_t kLine = 64 / sizeof(float);
  for (std::int64_t k = 0; k < len; k += kLine) {
    __builtin_prefetch(w + ahead + k);
    if (u != nullptr) {
      __builtin_prefetch(u + ahead + k);
    }
  }
}

// ---- The scan: maxima (as bit patterns of non-negative values, which order like unsigned integers) and exactness --
[[gnu::always_inline]] inline void scan_body(const float* __restrict w, const float* __restrict u, std::int64_t len,
                                             BlockScan& scan) {
  std::uint32_t amax_w = 0, amax_v32 = 0;
  std::uint64_t amax_v = 0, inexact = 0, nonzero = 0;
  for (std::int64_t k = 0; k < len; ++k) {
    const float wf = w[k], uf = u[k];
    const double dw = wf, du = uf;
    const double t = dw + du;
    // TwoSum's error term: zero iff t is the exact sum.
    const double bb = t - dw;
    const double e = (dw - (t - bb)) + (du - bb);
    inexact |= static_cast<std::uint64_t>(e != 0.0);
    nonzero |= static_cast<std::uint64_t>(uf != 0.0f);
    const std::uint64_t vb = bits64(t) & 0x7fffffffffffffffull;
    amax_v = vb > amax_v ? vb : amax_v;
    const std::uint32_t wb = std::bit_cast<std::uint32_t>(wf) & 0x7fffffffu;
    amax_w = wb > amax_w ? wb : amax_w;
    const std::uint32_t sb = std::bit_cast<std::uint32_t>(wf + uf) & 0x7fffffffu;
    amax_v32 = sb > amax_v32 ? sb : amax_v32;
  }
  scan.amax_w_bits = amax_w;
  scan.amax_v32_bits = amax_v32;
  scan.amax_v_bits = amax_v;
  scan.exact = inexact == 0;
  scan.any_nonzero = nonzero != 0;
}

// Counting in 0/1 lanes, flagged lanes left out (the caller counts them with the exact path). cs: the element's block
// changed its scale. N > 1: one counter per position k mod N, summed once at the end, so that a loop over many
// short blocks adds vectors instead of reducing them at every block; N == 1: plain counters.
template <int N>
struct Lanes {
  std::uint64_t nonzero[N] = {}, erased[N] = {}, erased_changed[N] = {}, collateral[N] = {}, flushed[N] = {},
                at_max_out[N] = {}, saturated[N] = {}, random[N] = {}, truncated[N] = {}, flagged[N] = {};
  [[gnu::always_inline]] void add(std::int64_t k, std::uint64_t flag, float wf, float uf, float val, double top_old,
                                  std::uint64_t cs, std::uint64_t sat, std::uint64_t rnd, std::uint64_t trunc) {
    const std::int64_t i = N == 1 ? 0 : k;
    const std::uint64_t ok = flag ^ 1u;
    const std::uint64_t changed = val != wf;
    const std::uint64_t nz = uf != 0.0f;
    const std::uint64_t outward =
        (static_cast<std::uint64_t>(uf > 0.0f) & static_cast<std::uint64_t>(wf > 0.0f)) |
        (static_cast<std::uint64_t>(uf < 0.0f) & static_cast<std::uint64_t>(wf < 0.0f));  // no && (branches)
    const std::uint64_t at_max = std::fabs(static_cast<double>(wf)) == top_old;
    const std::uint64_t erased_here = ok & nz & (changed ^ 1u);
    nonzero[i] += ok & nz;
    erased[i] += erased_here;
    erased_changed[i] += erased_here & cs;
    collateral[i] += ok & (nz ^ 1u) & changed;
    flushed[i] +=
        ok & (nz ^ 1u) & changed & static_cast<std::uint64_t>(wf != 0.0f) & static_cast<std::uint64_t>(val == 0.0f);
    at_max_out[i] += erased_here & (cs ^ 1u) & at_max & outward;
    saturated[i] += ok & sat;
    random[i] += ok & rnd;
    truncated[i] += ok & trunc;
    flagged[i] += flag;
  }
  void flush(LoopCounts& c) const {
    for (int i = 0; i < N; ++i) {
      c.nonzero += static_cast<std::int64_t>(nonzero[i]);
      c.erased += static_cast<std::int64_t>(erased[i]);
      c.erased_changed += static_cast<std::int64_t>(erased_changed[i]);
      c.collateral += static_cast<std::int64_t>(collateral[i]);
      c.flushed += static_cast<std::int64_t>(flushed[i]);
      c.erased_at_max_outward += static_cast<std::int64_t>(at_max_out[i]);
      c.saturated += static_cast<std::int64_t>(saturated[i]);
      c.random += static_cast<std::int64_t>(random[i]);
      c.truncated += static_cast<std::int64_t>(truncated[i]);
      c.flagged += static_cast<std::int64_t>(flagged[i]);
    }
  }
};

// The SR decision of a fraction frac = F / 2^32 (F exact) of a grid step against the element's first random word.
// Full width: away from zero iff U < frac; U lies in [word, word + span) / 2^32, so the word decides unless
// word < F < word + span (flagged: the exact path draws further bits). r bits: away iff R < D = floor(frac * 2^r).
template <bool RBits>
[[gnu::always_inline]] inline std::uint64_t sr_away(const LoopConfig& cfg, double F, std::uint32_t word,
                                                    std::uint64_t& tie, std::uint64_t& zero_prob) {
  if constexpr (RBits) {
    const double D = floor_small(F * cfg.r_scale);
    const double R = static_cast<double>(word >> cfg.r_shift);
    tie = 0;
    zero_prob = D == 0.0;
    return R < D;
  } else {
    const double wd = static_cast<double>(word);
    const std::uint64_t away = wd + cfg.span <= F;
    tie = (away ^ 1u) & static_cast<std::uint64_t>(wd < F);
    zero_prob = 0;
    return away;
  }
}

// ---- MX: y = (w + u) / X, exact in double; the element grid's unit at |y| from |y|'s binade (or 2^-6 for INT8) ----
// One element: writes w' (or keeps w where flagged) and counts it.
template <bool Integer, int Mode, bool RBits, int N>
[[gnu::always_inline]] inline void mx_element(const LoopConfig& cfg, double X, double inv_X, double top_old,
                                              std::uint64_t cs, std::int64_t k, float& w, float uf, std::uint32_t word,
                                              unsigned char& flag_out, Lanes<N>& lanes) {
  const float wf = w;
  const double t = static_cast<double>(wf) + static_cast<double>(uf);  // exact (the scan checked)
  const double ay = std::fabs(t * inv_X);
  double unit, inv_unit;
  if constexpr (Integer) {
    unit = cfg.unit;
    inv_unit = cfg.inv_unit;
  } else {
    double pw = double_of(bits64(ay) & 0x7ff0000000000000ull);  // 2^floor(log2 |y|) (0 for y == 0)
    pw = pw < cfg.min_normal ? cfg.min_normal : pw;
    unit = pw * cfg.unit_factor;                                 // the grid step: 2^(e - M)
    inv_unit = double_of(0x7fe0000000000000ull - bits64(unit));  // 1 / unit (exact)
  }
  const double level = ay * inv_unit;  // |y| in grid steps, exact
  const std::uint64_t sat = ay > cfg.max_elem;
  // nearest: ties to the even level (even last significand bit; even INT8 level)
  const double near_mag = sat ? cfg.max_elem : ((level + kRound52) - kRound52) * unit;
  double mag = near_mag;
  std::uint64_t flag = 0, rnd = 0, trunc = 0;
  if constexpr (Mode != 0) {
    const double fl = floor_small(level);
    const double frac = level - fl;  // exact
    std::uint64_t tie, zero_prob;
    const std::uint64_t away = sr_away<RBits>(cfg, frac * 0x1p32, word, tie, zero_prob);
    const double sr_mag = (fl + static_cast<double>(away)) * unit;
    std::uint64_t use = (sat ^ 1u) & static_cast<std::uint64_t>(frac != 0.0);
    if constexpr (Mode == 2) {
      // deadzone-sr: SR only where nearest would erase a nonzero proposal
      const double near_val = std::copysign(near_mag, t) * X;
      use &= static_cast<std::uint64_t>(uf != 0.0f) & static_cast<std::uint64_t>(near_val == static_cast<double>(wf));
    }
    mag = use ? sr_mag : near_mag;
    flag = use & tie;
    rnd = use & (zero_prob ^ 1u);
    trunc = use & zero_prob;
    flag_out = static_cast<unsigned char>(flag);
  }
  const auto val = static_cast<float>(std::copysign(mag, t) * X);  // exact
  w = flag ? wf : val;
  lanes.add(k, flag, wf, uf, val, top_old, cs, sat, rnd, trunc);
}

// ---- NVFP4: |w + u| against the block's decoded grid g_0 < ... < g_7 and the midpoints (g_k + g_k+1) / 2 ----
template <int Mode, bool RBits, int N, bool Count = true>
[[gnu::always_inline]] inline void nvfp4_element(const LoopConfig& cfg, const double* g, double top_old,
                                                 std::uint64_t cs, std::int64_t k, float& w, float uf,
                                                 std::uint32_t word, unsigned char& flag_out, Lanes<N>& lanes) {
  const float wf = w;
  const double t = static_cast<double>(wf) + static_cast<double>(uf);  // exact (the scan checked)
  const double a = std::fabs(t);
  // nearest: above a midpoint, or on one whose lower neighbour has an odd code (ties to even)
  double near_mag = g[0];
#pragma GCC unroll 8
  for (int j = 0; j < 7; ++j) {
    const double mid = (g[j] + g[j + 1]) * 0.5;  // exact: fp32 values in double
    const std::uint64_t up = static_cast<std::uint64_t>(a > mid) |
                             (static_cast<std::uint64_t>(a == mid) & static_cast<std::uint64_t>(j % 2));
    near_mag = up ? g[j + 1] : near_mag;
  }
  const std::uint64_t live = g[7] != 0.0;  // s_b = 0: a zero block, every element decodes to zero
  const std::uint64_t sat = live & static_cast<std::uint64_t>(a > g[7]);
  double mag = near_mag;
  std::uint64_t flag = 0, rnd = 0, trunc = 0;
  if constexpr (Mode != 0) {
    double lo = g[0], hi = g[1];
#pragma GCC unroll 8
    for (int j = 1; j < 7; ++j) {
      const std::uint64_t ge = a >= g[j];
      lo = ge ? g[j] : lo;
      hi = ge ? g[j + 1] : hi;
    }
    // F = (a - lo) / gap * 2^32 with a - lo exact, within 2^-20 of the exact value: decided when the word's window
    // [word, word + span) lies 2^-16 or more below or above F, else flagged for the exact path.
    const double F = (a - lo) / (hi - lo) * 0x1p32;
    std::uint64_t tie, zero_prob, away;
    if constexpr (RBits) {
      const double Dr = F * cfg.r_scale;
      const double D = floor_small(Dr);
      tie = static_cast<std::uint64_t>(Dr - D < 0x1p-16) | static_cast<std::uint64_t>(D + 1.0 - Dr < 0x1p-16);
      zero_prob = D == 0.0;
      away = static_cast<double>(word >> cfg.r_shift) < D;
    } else {
      const double wd = static_cast<double>(word);
      away = wd + cfg.span <= F - 0x1p-16;
      const std::uint64_t toward = wd >= F + 0x1p-16;
      tie = (away | toward) ^ 1u;
      zero_prob = 0;
    }
    const double sr_mag = away ? hi : lo;
    std::uint64_t use = live & (sat ^ 1u) & static_cast<std::uint64_t>(a != lo) & static_cast<std::uint64_t>(a < g[7]);
    if constexpr (Mode == 2) {
      const double near_val = std::copysign(near_mag, t);
      use &= static_cast<std::uint64_t>(uf != 0.0f) & static_cast<std::uint64_t>(near_val == static_cast<double>(wf));
    }
    mag = use ? sr_mag : near_mag;
    flag = use & tie;
    rnd = use & (zero_prob ^ 1u);
    trunc = use & zero_prob;
    if constexpr (Count) {
      flag_out = static_cast<unsigned char>(flag);
    }
  }
  const auto val = static_cast<float>(std::copysign(mag, t));
  if constexpr (Count) {
    w = flag ? wf : val;
    lanes.add(k, flag, wf, uf, val, top_old, cs, sat, rnd, trunc);
  } else {  // the result (the caller counts): w' (w where flagged), and sat, rnd, trunc in the lanes at k
    w = flag ? wf : val;
    lanes.saturated[k] = sat;
    lanes.random[k] = rnd;
    lanes.truncated[k] = trunc;
    lanes.flagged[k] = flag;  // no byte stores here: they would shrink the loop's vectors
    (void)flag_out;
  }
}

// One block of runtime length (short last blocks, 2-D tiles).
template <bool Integer, int Mode, bool RBits>
[[gnu::always_inline]] inline void mx_round_body(const LoopConfig& cfg, const LoopBlock& lb, std::uint64_t cs,
                                                 float* __restrict w, const float* __restrict u,
                                                 const std::uint32_t* __restrict words, unsigned char* __restrict flags,
                                                 std::int64_t len, LoopCounts& counts) {
  Lanes<1> lanes;
  for (std::int64_t k = 0; k < len; ++k) {
    mx_element<Integer, Mode, RBits>(cfg, lb.X, lb.inv_X, lb.top_old, cs, k, w[k], u[k], Mode != 0 ? words[k] : 0u,
                                     flags[k], lanes);
  }
  lanes.flush(counts);
}
template <int Mode, bool RBits>
[[gnu::always_inline]] inline void nvfp4_round_body(const LoopConfig& cfg, const LoopBlock& lb, std::uint64_t cs,
                                                    float* __restrict w, const float* __restrict u,
                                                    const std::uint32_t* __restrict words,
                                                    unsigned char* __restrict flags, std::int64_t len,
                                                    LoopCounts& counts) {
  Lanes<1> lanes;
  for (std::int64_t k = 0; k < len; ++k) {
    nvfp4_element<Mode, RBits>(cfg, lb.grid, lb.top_old, cs, k, w[k], u[k], Mode != 0 ? words[k] : 0u, flags[k], lanes);
  }
  lanes.flush(counts);
}

// A span of whole blocks: the same elements, the block constants taken per block; the counts stay in the lanes over
// the whole span.
template <bool Integer, int Mode, bool RBits>
[[gnu::always_inline]] inline void mx_span_body(const LoopConfig& cfg, const SpanBlocks& sb, float* __restrict w,
                                                const float* __restrict u, const std::uint32_t* __restrict words,
                                                unsigned char* __restrict flags, std::int64_t blocks,
                                                LoopCounts& counts) {
  constexpr std::int64_t B = 32;
  Lanes<B> lanes;
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (!sb.active[b]) {
      continue;
    }
    const double X = sb.X[b], inv_X = sb.inv_X[b], top_old = sb.top_old[b];
    const std::uint64_t cs = sb.changed[b];
    float* wb = w + b * B;
    const float* ub = u + b * B;
    const std::uint32_t* wd = Mode != 0 ? words + b * B : nullptr;
    unsigned char* fb = flags + b * B;
    for (std::int64_t k = 0; k < B; ++k) {
      mx_element<Integer, Mode, RBits>(cfg, X, inv_X, top_old, cs, k, wb[k], ub[k], Mode != 0 ? wd[k] : 0u, fb[k],
                                       lanes);
    }
  }
  lanes.flush(counts);
}
template <int Mode, bool RBits>
[[gnu::always_inline]] inline void nvfp4_span_body(const LoopConfig& cfg, const SpanBlocks& sb, float* __restrict w,
                                                   const float* __restrict u, const std::uint32_t* __restrict words,
                                                   unsigned char* __restrict flags, std::int64_t blocks,
                                                   LoopCounts& counts) {
  constexpr std::int64_t B = 16;
  Lanes<B> lanes;
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(w + b * B, u + b * B, kSpanElements, B);  // the next span (the write pass's first reads)
    if (!sb.active[b]) {
      continue;
    }
    const double* g = sb.grid[b];
    const double top_old = sb.top_old[b];
    const std::uint64_t cs = sb.changed[b];
    float* wb = w + b * B;
    const float* ub = u + b * B;
    const std::uint32_t* wd = Mode != 0 ? words + b * B : nullptr;
    unsigned char* fb = flags + b * B;
    if constexpr (Mode == 0) {
      for (std::int64_t k = 0; k < B; ++k) {
        nvfp4_element<Mode, RBits>(cfg, g, top_old, cs, k, wb[k], ub[k], 0u, fb[k], lanes);
      }
    } else {
      // SR: the rounding and the counting in two loops (one loop with both is too much for GCC's if-conversion, and
      // stays scalar)
      float old[B];
      Lanes<B> element;  // per element: sat, rnd, trunc in saturated, random, truncated
      for (std::int64_t k = 0; k < B; ++k) {
        old[k] = wb[k];
      }
      for (std::int64_t k = 0; k < B; ++k) {
        nvfp4_element<Mode, RBits, B, false>(cfg, g, top_old, cs, k, wb[k], ub[k], wd[k], fb[k], element);
      }
      for (std::int64_t k = 0; k < B; ++k) {
        lanes.add(k, element.flagged[k], old[k], ub[k], wb[k], top_old, cs, element.saturated[k], element.random[k],
                  element.truncated[k]);
      }
      for (std::int64_t k = 0; k < B; ++k) {
        fb[k] = static_cast<unsigned char>(element.flagged[k]);
      }
    }
  }
  lanes.flush(counts);
}

// The scan of whole blocks of B.
template <int B>
[[gnu::always_inline]] inline void span_scan_body(const float* __restrict w, const float* __restrict u,
                                                  std::int64_t blocks, SpanScan& s) {
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(w + b * B, u + b * B, kSpanElements, B);  // the next span
    BlockScan one;
    scan_body(w + b * B, u + b * B, B, one);
    s.amax_w_bits[b] = one.amax_w_bits;
    s.amax_v32_bits[b] = one.amax_v32_bits;
    s.amax_v_bits[b] = one.amax_v_bits;
    s.exact[b] = one.exact;
    s.nonzero[b] = one.any_nonzero;
  }
}

[[gnu::always_inline]] inline void grids_body(const float* __restrict s_b, std::int64_t blocks, float s_enc,
                                              double (*__restrict grid)[8]) {
  for (std::int64_t b = 0; b < blocks; ++b) {
    for (int k = 0; k < 8; ++k) {
      grid[b][k] = static_cast<double>((kE2M1Magnitudes[k] * s_b[b]) / s_enc);  // nvfp4_decode
    }
  }
}

// The check pass runs over a chunk in steps of kCheckStep coordinates, each prefetching kCheckAhead coordinates ahead
// (the next chunk of the pass).
constexpr std::int64_t kCheckStep = 128, kCheckAhead = 1024;

// The check pass's chunk: integer tests of the exponent fields and unsigned maxima of the magnitudes' bits. u may be
// null (all zero: quantization).
template <bool Master, bool HasU>
[[gnu::always_inline]] inline void check_body(const float* __restrict w, const float* __restrict u,
                                              const float* __restrict m, std::int64_t len, CheckChunk& out) {
  std::uint32_t bad = 0, amax_w = 0, amax_v = 0;
  for (std::int64_t i = 0; i < len; ++i) {
    const float ui = HasU ? u[i] : 0.0f;
    const std::uint32_t bw = std::bit_cast<std::uint32_t>(w[i]) & 0x7fffffffu;
    const std::uint32_t bu = std::bit_cast<std::uint32_t>(ui) & 0x7fffffffu;
    std::uint32_t b = static_cast<std::uint32_t>(bw >= 0x7f800000u) | static_cast<std::uint32_t>(bu >= 0x7f800000u);
    std::uint32_t bx;
    if constexpr (Master) {
      const std::uint32_t bm = std::bit_cast<std::uint32_t>(m[i]) & 0x7fffffffu;
      bx = std::bit_cast<std::uint32_t>(m[i] + ui) & 0x7fffffffu;
      b |= static_cast<std::uint32_t>(bm >= 0x7f800000u) | static_cast<std::uint32_t>(bx >= 0x7f800000u);
    } else {
      bx = std::bit_cast<std::uint32_t>(w[i] + ui) & 0x7fffffffu;
    }
    bad += b;
    amax_w = bw > amax_w ? bw : amax_w;
    amax_v = bx > amax_v ? bx : amax_v;
  }
  out.bad += bad;
  out.amax_w_bits = amax_w > out.amax_w_bits ? amax_w : out.amax_w_bits;
  out.amax_v_bits = amax_v > out.amax_v_bits ? amax_v : out.amax_v_bits;
}

// ---- MX spans through the per-tensor loops: scan, scale in, scale out (blocks of 32, fp32 lanes) ----
[[gnu::always_inline]] inline void mx_scan_body(const float* __restrict w, const float* __restrict u,
                                                std::int64_t blocks, SpanScan& s) {
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(w + b * 32, u + b * 32, kSpanElements, 32);  // the next span
    std::uint32_t amax_w = 0, amax_v = 0, nonzero = 0;
    for (std::int64_t k = b * 32; k < b * 32 + 32; ++k) {
      const std::uint32_t bw = std::bit_cast<std::uint32_t>(w[k]) & 0x7fffffffu;
      const std::uint32_t bv = std::bit_cast<std::uint32_t>(w[k] + u[k]) & 0x7fffffffu;
      amax_w = bw > amax_w ? bw : amax_w;
      amax_v = bv > amax_v ? bv : amax_v;
      nonzero |= static_cast<std::uint32_t>(u[k] != 0.0f);
    }
    s.amax_w_bits[b] = amax_w;
    s.amax_v32_bits[b] = amax_v;
    s.nonzero[b] = static_cast<std::uint8_t>(nonzero);
  }
}

[[gnu::always_inline]] inline void mx_scale_in_body(const SpanBlocks& sb, const float* __restrict w,
                                                    const float* __restrict u, float* __restrict ws,
                                                    float* __restrict us, std::uint8_t* __restrict exact,
                                                    std::int64_t blocks) {
  std::uint32_t bad[32] = {};
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(w + b * 32, u + b * 32, kSpanElements, 32);  // the next span (the write pass's first reads)
    const auto inv = static_cast<float>(sb.inv_X[b]), X = static_cast<float>(sb.X[b]);
    const float keep = sb.active[b] ? 1.0f : 0.0f;
    for (std::int64_t k = 0; k < 32; ++k) {
      const float wk = w[b * 32 + k] * keep, uk = u[b * 32 + k] * keep;
      const float a = wk * inv, c = uk * inv;  // exact unless fp32 under- or overflows
      bad[k] |= static_cast<std::uint32_t>(a * X != wk) | static_cast<std::uint32_t>(c * X != uk);
      ws[b * 32 + k] = a;
      us[b * 32 + k] = c;
    }
  }
  std::uint32_t any = 0;
  for (int k = 0; k < 32; ++k) {
    any |= bad[k];
  }
  for (std::int64_t b = 0; b < blocks; ++b) {
    exact[b] = 1;
  }
  if (any) {  // rare: find the blocks
    for (std::int64_t b = 0; b < blocks; ++b) {
      const auto X = static_cast<float>(sb.X[b]);
      for (std::int64_t k = b * 32; k < b * 32 + 32; ++k) {
        const float keep = sb.active[b] ? 1.0f : 0.0f;
        if (ws[k] * X != w[k] * keep || us[k] * X != u[k] * keep) {
          exact[b] = 0;
        }
      }
    }
  }
}

[[gnu::always_inline]] inline void mx_scale_out_body(const SpanBlocks& sb, const float* __restrict ws,
                                                     float* __restrict w, const float* __restrict u,
                                                     std::int64_t blocks, LoopCounts& counts) {
  std::uint32_t collateral[32] = {}, flushed[32] = {}, erased_changed[32] = {}, at_max_out[32] = {};
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (!sb.active[b]) {
      continue;
    }
    const auto X = static_cast<float>(sb.X[b]), top = static_cast<float>(sb.top_old[b]);
    const auto cs = static_cast<std::uint32_t>(sb.changed[b]);
    for (std::int64_t k = 0; k < 32; ++k) {
      const float wf = w[b * 32 + k], uf = u[b * 32 + k];
      const float val = ws[b * 32 + k] * X;  // exact: the range check keeps it finite
      const std::uint32_t changed = val != wf;
      const std::uint32_t nz = uf != 0.0f;
      const std::uint32_t outward = (static_cast<std::uint32_t>(uf > 0.0f) & static_cast<std::uint32_t>(wf > 0.0f)) |
                                    (static_cast<std::uint32_t>(uf < 0.0f) & static_cast<std::uint32_t>(wf < 0.0f));
      const std::uint32_t erased_here = nz & (changed ^ 1u);
      collateral[k] += (nz ^ 1u) & changed;
      flushed[k] +=
          (nz ^ 1u) & changed & static_cast<std::uint32_t>(wf != 0.0f) & static_cast<std::uint32_t>(val == 0.0f);
      erased_changed[k] += erased_here & cs;
      at_max_out[k] += erased_here & (cs ^ 1u) & static_cast<std::uint32_t>(std::fabs(wf) == top) & outward;
      w[b * 32 + k] = val;
    }
  }
  for (int k = 0; k < 32; ++k) {
    counts.collateral += collateral[k];
    counts.flushed += flushed[k];
    counts.erased_changed += erased_changed[k];
    counts.erased_at_max_outward += at_max_out[k];
  }
}

// ---- MX nearest, fused: fl32(w + u) rounded onto the element grid at scale X in fp32 lanes ----
// Floating elements: the per-tensor loop's rounding (writeback_blocks.cpp, nearest_float_body) in the block's own
// units. X = 2^E is a power of two and, for fused_emin <= E <= fused_emax, min_normal * X is a normal fp32 value and
// max_elem * X a finite one, so every step below is that loop's step on the element-unit values times X, exactly. The
// grid's midpoints are fp32 values (the element drops 22 or fewer significand bits; below min_normal * X their spacing
// X * 2^(emin - M - 1) is at least 2^-149), so the fp32 sum s rounds like the exact sum unless s is a midpoint, and the
// TwoSum error e then says on which side the exact sum lies. Below min_normal * X, |s| + min_normal * X lies in the
// grid's first normal binade, whose spacing is the subnormal one; the addition's exact error e2 (Fast2Sum) decides a
// tie before e (nonzero, it is a multiple of ulp(|s|), larger than |e|).
// mxint8: multiples n of step = X * 2^-6: (|s| + C) - C with C = 1.5 * 2^23 * step (ulp(C) == step, fused_emax keeps
// C finite) is the nearest multiple, ties to the even level; d = |s| - n is exact, and where |s| is a midpoint
// (|d| == step / 2) e says on which side the exact sum lies.
// The events are mx_scale_out's and the per-tensor loop's, on the same values.
template <bool Integer>
[[gnu::always_inline]] inline void mx_nearest_body(const LoopConfig& cfg, const SpanBlocks& sb, float* __restrict w,
                                                   const float* __restrict u, std::int64_t blocks, LoopCounts& counts) {
  constexpr std::int64_t B = 32;
  std::uint32_t nonzero[B] = {}, erased[B] = {}, saturated[B] = {}, collateral[B] = {}, flushed[B] = {},
                erased_changed[B] = {}, at_max_out[B] = {};
  const std::uint32_t mask = cfg.mask, keep = ~cfg.mask, half_m1 = cfg.half_m1, lsb_bit = cfg.lsb_mask;
  const std::uint32_t tie_bits = cfg.tie_bits;
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(w + b * B, u + b * B, kSpanElements, B);  // the next span (the write pass's first reads)
    if (!sb.fused[b]) {
      continue;
    }
    const double X = sb.X[b];
    // floating: min_normal * X; integer: the step X * 2^-6, half of it, and C (all exact: powers of two in range)
    const auto sub = static_cast<float>((Integer ? cfg.unit : cfg.min_normal) * X);
    const auto half = static_cast<float>(0.5 * cfg.unit * X);
    const auto magic = static_cast<float>(0x1.8p23 * cfg.unit * X);
    const std::uint32_t sub_bits = std::bit_cast<std::uint32_t>(sub);
    const std::uint32_t max_bits = std::bit_cast<std::uint32_t>(static_cast<float>(cfg.max_elem * X));
    const auto top = static_cast<float>(sb.top_old[b]);
    // the scale changed, as all ones or zero (a 0/1 value here makes GCC build a mask from it lane by lane)
    const std::uint32_t cs = 0u - static_cast<std::uint32_t>(sb.changed[b] != 0);
    float* __restrict wb = w + b * B;
    const float* __restrict ub = u + b * B;
    for (std::int64_t k = 0; k < B; ++k) {
      const float wf = wb[k], uf = ub[k];
      const float s = wf + uf;
      const float bb = s - wf;
      const float e = (wf - (s - bb)) + (uf - bb);  // TwoSum: s + e == w + u exactly
      const std::uint32_t sbits = std::bit_cast<std::uint32_t>(s);
      const std::uint32_t ab = sbits & 0x7fffffffu, sign = sbits & 0x80000000u;
      const float em = std::bit_cast<float>(std::bit_cast<std::uint32_t>(e) ^ sign);  // e in the direction of |s|
      const float ax = std::bit_cast<float>(ab);
      std::uint32_t r;
      if constexpr (Integer) {
        const float n = (ax + magic) - magic;
        const float d = ax - n;  // exact
        const std::uint32_t tie = std::fabs(d) == half;
        const std::uint32_t up = tie & static_cast<std::uint32_t>(d > 0.0f) & static_cast<std::uint32_t>(em > 0.0f);
        const std::uint32_t down = tie & static_cast<std::uint32_t>(d < 0.0f) & static_cast<std::uint32_t>(em < 0.0f);
        r = std::bit_cast<std::uint32_t>(n + ((up ? sub : 0.0f) - (down ? sub : 0.0f)));  // exact
      } else {
        const std::uint32_t in_sub = ab < sub_bits;
        const float a2 = ax + sub;
        const float e2 = ax - (a2 - sub);  // exact
        const std::uint32_t ab_in = in_sub ? std::bit_cast<std::uint32_t>(a2) : ab;
        const float em_in = (in_sub & static_cast<std::uint32_t>(e2 != 0.0f)) ? e2 : em;
        const std::uint32_t tie = (ab_in & mask) == tie_bits;
        const std::uint32_t ab_adj =
            ab_in + (tie & static_cast<std::uint32_t>(em_in > 0.0f)) - (tie & static_cast<std::uint32_t>(em_in < 0.0f));
        r = (ab_adj + half_m1 + static_cast<std::uint32_t>((ab_adj & lsb_bit) != 0)) & keep;
        r = in_sub ? std::bit_cast<std::uint32_t>(std::bit_cast<float>(r) - sub) : r;  // exact
      }
      // saturation: |w + u| > max_elem * X (s == max with e pointing away is beyond it too)
      const std::uint32_t sat = static_cast<std::uint32_t>(ab > max_bits) |
                                (static_cast<std::uint32_t>(ab == max_bits) & static_cast<std::uint32_t>(em > 0.0f));
      r = r > max_bits ? max_bits : r;
      const float val = std::bit_cast<float>(r | sign);
      wb[k] = val;
      const std::uint32_t changed = val != wf;
      const std::uint32_t nz = uf != 0.0f;
      const std::uint32_t outward = (static_cast<std::uint32_t>(uf > 0.0f) & static_cast<std::uint32_t>(wf > 0.0f)) |
                                    (static_cast<std::uint32_t>(uf < 0.0f) & static_cast<std::uint32_t>(wf < 0.0f));
      const std::uint32_t erased_here = nz & (changed ^ 1u);
      nonzero[k] += nz;
      erased[k] += erased_here;
      saturated[k] += sat;
      collateral[k] += (nz ^ 1u) & changed;
      flushed[k] +=
          (nz ^ 1u) & changed & static_cast<std::uint32_t>(wf != 0.0f) & static_cast<std::uint32_t>(val == 0.0f);
      erased_changed[k] += erased_here & cs;
      at_max_out[k] += erased_here & ~cs & static_cast<std::uint32_t>(std::fabs(wf) == top) & outward;
    }
  }
  for (std::int64_t k = 0; k < B; ++k) {
    counts.nonzero += nonzero[k];
    counts.erased += erased[k];
    counts.saturated += saturated[k];
    counts.collateral += collateral[k];
    counts.flushed += flushed[k];
    counts.erased_changed += erased_changed[k];
    counts.erased_at_max_outward += at_max_out[k];
  }
}

// ---- The three compilations ----
// TARGET is a function attribute (target("avx512f,...")) and NS a namespace name: neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define WBAUDIT_BLOCK_LOOPS(NS, TARGET)                                                                           \
  namespace NS {                                                                                                  \
  TARGET void scan(const float* w, const float* u, std::int64_t len, BlockScan& s) {                              \
    scan_body(w, u, len, s);                                                                                      \
  }                                                                                                               \
  template <int B>                                                                                                \
  TARGET void span_scan(const float* w, const float* u, std::int64_t blocks, SpanScan& s) {                       \
    span_scan_body<B>(w, u, blocks, s);                                                                           \
  }                                                                                                               \
  TARGET void mx_scan(const float* w, const float* u, std::int64_t blocks, SpanScan& s) {                         \
    mx_scan_body(w, u, blocks, s);                                                                                \
  }                                                                                                               \
  TARGET void mx_scale_in(const SpanBlocks& sb, const float* w, const float* u, float* ws, float* us,             \
                          std::uint8_t* exact, std::int64_t blocks) {                                             \
    mx_scale_in_body(sb, w, u, ws, us, exact, blocks);                                                            \
  }                                                                                                               \
  TARGET void mx_scale_out(const SpanBlocks& sb, const float* ws, float* w, const float* u, std::int64_t blocks,  \
                           LoopCounts& c) {                                                                       \
    mx_scale_out_body(sb, ws, w, u, blocks, c);                                                                   \
  }                                                                                                               \
  template <bool Integer>                                                                                         \
  TARGET void mx_nearest(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u, std::int64_t n,   \
                         LoopCounts& c) {                                                                         \
    mx_nearest_body<Integer>(cfg, sb, w, u, n, c);                                                                \
  }                                                                                                               \
  TARGET void grids(const float* s_b, std::int64_t blocks, float s_enc, double (*grid)[8]) {                      \
    grids_body(s_b, blocks, s_enc, grid);                                                                         \
  }                                                                                                               \
  TARGET void check(const float* w, const float* u, const float* m, std::int64_t len, CheckChunk& out) {          \
    for (std::int64_t o = 0; o < len; o += kCheckStep) {                                                          \
      const std::int64_t n = len - o < kCheckStep ? len - o : kCheckStep;                                         \
      prefetch_ahead(w + o, u ? u + o : nullptr, kCheckAhead, kCheckStep);                                        \
      if (m) {                                                                                                    \
        prefetch_ahead(m + o, nullptr, kCheckAhead, kCheckStep);                                                  \
        check_body<true, true>(w + o, u + o, m + o, n, out);                                                      \
      } else if (u) {                                                                                             \
        check_body<false, true>(w + o, u + o, m, n, out);                                                         \
      } else {                                                                                                    \
        check_body<false, false>(w + o, u, m, n, out);                                                            \
      }                                                                                                           \
    }                                                                                                             \
  }                                                                                                               \
  template <bool Integer, int Mode, bool RBits>                                                                   \
  TARGET void mx_round(const LoopConfig& cfg, const LoopBlock& lb, std::uint64_t cs, float* w, const float* u,    \
                       const std::uint32_t* words, unsigned char* flags, std::int64_t len, LoopCounts& c) {       \
    mx_round_body<Integer, Mode, RBits>(cfg, lb, cs, w, u, words, flags, len, c);                                 \
  }                                                                                                               \
  template <int Mode, bool RBits>                                                                                 \
  TARGET void nvfp4_round(const LoopConfig& cfg, const LoopBlock& lb, std::uint64_t cs, float* w, const float* u, \
                          const std::uint32_t* words, unsigned char* flags, std::int64_t len, LoopCounts& c) {    \
    nvfp4_round_body<Mode, RBits>(cfg, lb, cs, w, u, words, flags, len, c);                                       \
  }                                                                                                               \
  template <bool Integer, int Mode, bool RBits>                                                                   \
  TARGET void mx_span(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u,                      \
                      const std::uint32_t* words, unsigned char* flags, std::int64_t blocks, LoopCounts& c) {     \
    mx_span_body<Integer, Mode, RBits>(cfg, sb, w, u, words, flags, blocks, c);                                   \
  }                                                                                                               \
  template <int Mode, bool RBits>                                                                                 \
  TARGET void nvfp4_span(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u,                   \
                         const std::uint32_t* words, unsigned char* flags, std::int64_t blocks, LoopCounts& c) {  \
    nvfp4_span_body<Mode, RBits>(cfg, sb, w, u, words, flags, blocks, c);                                         \
  }                                                                                                               \
  }
// NOLINTEND(bugprone-macro-parentheses)

WBAUDIT_BLOCK_LOOPS(portable, )
WBAUDIT_BLOCK_LOOPS(v3, __attribute__((target("arch=x86-64-v3"))))
WBAUDIT_BLOCK_LOOPS(v4, __attribute__((target("arch=x86-64-v4"))))
#undef WBAUDIT_BLOCK_LOOPS

// The function of one compilation for cfg: Pick<Integer, Mode, RBits>::round / ::span (MX) or
// Pick<false, Mode, RBits> with the NVFP4 members.
template <template <bool, int, bool> class Pick>
void pick(const LoopConfig& cfg, BlockLoops& loops) {
  const bool rb = cfg.mode != 0 && cfg.sr_bits > 0;
  auto set = [&]<bool Integer, int Mode, bool RBits>() {
    if (cfg.family == BlockFamily::mx) {
      loops.round = Pick<Integer, Mode, RBits>::mx_round;
      loops.span_round = Pick<Integer, Mode, RBits>::mx_span;
    } else {
      loops.round = Pick<false, Mode, RBits>::nvfp4_round;
      loops.span_round = Pick<false, Mode, RBits>::nvfp4_span;
    }
  };
  auto by_mode = [&]<bool Integer>() {
    switch (cfg.mode) {
      case 0:
        set.template operator()<Integer, 0, false>();
        break;
      case 1:
        rb ? set.template operator()<Integer, 1, true>() : set.template operator()<Integer, 1, false>();
        break;
      default:
        rb ? set.template operator()<Integer, 2, true>() : set.template operator()<Integer, 2, false>();
        break;
    }
  };
  cfg.integer ? by_mode.template operator()<true>() : by_mode.template operator()<false>();
}

#define WBAUDIT_PICKER(NS)                                           \
  template <bool I, int M, bool R>                                   \
  struct NS##_pick {                                                 \
    static constexpr RoundFn mx_round = &NS::mx_round<I, M, R>;      \
    static constexpr SpanRoundFn mx_span = &NS::mx_span<I, M, R>;    \
    static constexpr RoundFn nvfp4_round = &NS::nvfp4_round<M, R>;   \
    static constexpr SpanRoundFn nvfp4_span = &NS::nvfp4_span<M, R>; \
  };
WBAUDIT_PICKER(portable)
WBAUDIT_PICKER(v3)
WBAUDIT_PICKER(v4)
#undef WBAUDIT_PICKER

}  // namespace

LoopConfig loop_config(const BlockFormatParams& p, const WritebackPolicy& policy) {
  LoopConfig cfg;
  cfg.family = p.family;
  cfg.integer = p.integer_elem;
  cfg.mode = policy.policy == Policy::stochastic ? 1 : (policy.policy == Policy::deadzone_sr ? 2 : 0);
  cfg.sr_bits = cfg.mode == 0 ? 0 : policy.sr_bits;
  cfg.r_shift = 32 - cfg.sr_bits;
  cfg.r_scale = std::ldexp(1.0, cfg.sr_bits - 32);
  cfg.span = policy.stream == SrStream::philox_packed && policy.sr_bits == 0 ? 0x1p16 : 1.0;
  cfg.max_elem = p.max_elem;
  cfg.min_normal = p.elem.min_normal;
  cfg.unit_factor = std::ldexp(1.0, -p.elem.man_bits);
  cfg.unit = p.integer_elem ? p.elem.scale : 0.0;
  cfg.inv_unit = p.integer_elem ? 1.0 / p.elem.scale : 0.0;
  if (p.family == BlockFamily::mx && cfg.mode == 0) {
    if (p.integer_elem) {
      int lu = 0;  // unit == 2^lu
      const bool pow2 = std::frexp(cfg.unit, &lu) == 0.5;
      lu -= 1;
      // |w + u| < 2^(E + emax + 1): below 2^22 steps; C = 1.5 * 2^(23 + lu + E) finite
      if (pow2 && p.emax_elem + 1 - lu <= 22) {
        cfg.fused_emin = kE8M0MinExponent;
        cfg.fused_emax = std::min(126 - p.emax_elem, 103 - lu);
      }
    } else if (const int drop = 23 - p.elem.man_bits; drop >= 1 && p.elem.min_normal >= 0x1p-126) {
      const BlockParams bp = block_params(p.elem, 0);  // the per-tensor loops' rounding to the element's width
      cfg.mask = bp.mask;
      cfg.half_m1 = bp.half_m1;
      cfg.lsb_mask = bp.lsb_mask;
      cfg.tie_bits = bp.tie_bits;
      // min_normal * 2^E >= 2^-126 (normal); |w + u| < 2^(E + emax + 1) <= 2^127 (finite sums, max_elem * X finite)
      cfg.fused_emin = -126 - p.elem.emin;
      cfg.fused_emax = 126 - p.emax_elem;
    }
  }
  return cfg;
}

BlockLoops block_loops(const LoopConfig& cfg, BlockIsa isa) {
  BlockLoops loops;
  loops.isa = isa;
  const bool mx = cfg.family == BlockFamily::mx;
  const bool fused = mx && cfg.fused_emin <= cfg.fused_emax;
  switch (isa) {
    case BlockIsa::avx512:
      loops.mx_nearest = !fused ? nullptr : cfg.integer ? &v4::mx_nearest<true> : &v4::mx_nearest<false>;
      loops.mx_scan = &v4::mx_scan;
      loops.mx_scale_in = &v4::mx_scale_in;
      loops.mx_scale_out = &v4::mx_scale_out;
      loops.scan = &v4::scan;
      loops.span_scan = mx ? &v4::span_scan<32> : &v4::span_scan<16>;
      loops.grids = &v4::grids;
      loops.check = &v4::check;
      pick<v4_pick>(cfg, loops);
      break;
    case BlockIsa::avx2:
      loops.mx_nearest = !fused ? nullptr : cfg.integer ? &avx2::mx_nearest_integer : &avx2::mx_nearest_float;
      loops.mx_scan = &v3::mx_scan;
      loops.mx_scale_in = &v3::mx_scale_in;
      loops.mx_scale_out = &v3::mx_scale_out;
      loops.scan = &v3::scan;
      loops.span_scan = mx ? &v3::span_scan<32> : &v3::span_scan<16>;
      loops.grids = &v3::grids;
      loops.check = &v3::check;
      pick<v3_pick>(cfg, loops);
      if (!mx) {
        loops.span_scan = &avx2::nvfp4_span_scan;
        if (cfg.mode == 0) {
          loops.span_round = &avx2::nvfp4_nearest_span;
        }
      }
      break;
    default:
      // No fused loop for the portable (SSE2) compilation: measured 10.8 fp32 passes against 2.9 (AVX-512) and 4.7
      // (AVX2), slower than the scale-in path, whose per-tensor loop is picked for the CPU (writeback_blocks.cpp)
      loops.mx_nearest = nullptr;
      loops.mx_scan = &portable::mx_scan;
      loops.mx_scale_in = &portable::mx_scale_in;
      loops.mx_scale_out = &portable::mx_scale_out;
      loops.scan = &portable::scan;
      loops.span_scan = mx ? &portable::span_scan<32> : &portable::span_scan<16>;
      loops.grids = &portable::grids;
      loops.check = &portable::check;
      pick<portable_pick>(cfg, loops);
      break;
  }
  return loops;
}

}  // namespace wbaudit::sim::detail
