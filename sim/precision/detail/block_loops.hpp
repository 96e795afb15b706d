#pragma once
// Internal to the precision layer: the vectorized loops of the block-scaled write-back kernels (block_writeback.cpp).
//
// A block is handled in two loops. The scan reads w and u once for the block's maxima (the old and new scales) and
// tells whether w + u is exact in double for every element (fp32 values more than 29 binades apart are not; such a
// block goes to the exact scalar path). The rounding loop then re-quantizes every element at the new scale in
// double lanes (y = (w + u) / X is exact for a power-of-two X; NVFP4 compares |w + u| with the decoded grid and its
// midpoints, all exact in double), writes w' in place and counts the events; it *flags* the elements it cannot
// decide (a full-width SR draw whose 32 random bits tie with the exact probability; NVFP4 SR near a tie), leaving
// w[k] unchanged there, and the caller redoes them with detail::round_element (the same random words). So the
// kernel's results are exactly the scalar reference's, which tests/sim/precision/test_block_writeback.cpp checks
// element by element under every implementation.
//
// Each loop is compiled three times from one source: for AVX-512 (x86-64-v4), AVX2 (x86-64-v3) and the portable
// baseline (SSE2), picked per launch by the precision layer's block-loop ISA (detail::active_block_isa(), which
// tests and benchmarks force with detail::force_block_isa). All use plain IEEE double and integer operations in the
// same order, so they give identical bits. Under the AVX2 ISA three loops are intrinsics instead (namespace avx2
// below, block_loops_avx2.cpp: MX nearest, NVFP4 nearest and NVFP4's span scan), with the same results.
#include <bit>
#include <cstdint>

#include "sim/precision/block_format.hpp"
#include "sim/precision/writeback_blocks.hpp"

namespace wbaudit::sim::detail {

// The largest block a loop takes: a 16x16 nvfp4:2d tile.
inline constexpr std::int64_t kMaxBlockElements = 256;

struct BlockScan {
  std::uint32_t amax_w_bits = 0;    // fp32 bits of max |w|
  std::uint32_t amax_v32_bits = 0;  // fp32 bits of max |fl32(w + u)| (NVFP4's block amax)
  std::uint64_t amax_v_bits = 0;    // double bits of max |w + u| (exact when `exact`)
  bool exact = true;                // w + u exact in double for every element
  bool any_nonzero = false;         // some u != 0
};

// Per-launch constants of the rounding loops.
struct LoopConfig {
  BlockFamily family = BlockFamily::mx;
  bool integer = false;  // mxint8
  int mode = 0;          // 0 nearest, 1 stochastic, 2 deadzone-sr
  int sr_bits = 0;       // 0: full-width SR
  int r_shift = 0;       // 32 - sr_bits
  double r_scale = 0;    // 2^(sr_bits - 32)
  double span = 1;       // full-width SR: the values of U * 2^32 a first word leaves open (2^16: philox-packed)
  double max_elem = 0;
  double min_normal = 0;   // floating elements: the element format's min normal
  double unit_factor = 0;  // floating elements: 2^-M
  double unit = 0;         // mxint8: 2^-6
  double inv_unit = 0;     // mxint8: 2^6
  // The fused MX nearest loop (mx_nearest; MX under nearest): for floating elements the per-tensor loop's fp32
  // bit-pattern rounding to the element's significand width (BlockParams' mask, half_m1, lsb_mask, tie_bits); the
  // block exponents E it covers: fused_emin <= E <= fused_emax (an empty range where the loop does not apply).
  std::uint32_t mask = 0, half_m1 = 0, lsb_mask = 0, tie_bits = 0;
  int fused_emin = 1, fused_emax = 0;
};
LoopConfig loop_config(const BlockFormatParams& p, const WritebackPolicy& policy);

// Per-block constants of the rounding loop.
struct LoopBlock {
  double X = 1, inv_X = 1;  // MX: the new scale and its inverse
  double grid[8] = {};      // NVFP4: the new decoded magnitudes
  double top_old = 0;       // the old largest decoded magnitude (|w| == top_old: w at +-max of its block)
};

// Event counts of the elements a rounding loop decided (flagged ones excluded).
struct LoopCounts {
  std::int64_t nonzero = 0, erased = 0, collateral = 0, flushed = 0;
  std::int64_t erased_changed = 0;         // erased in a block whose scale changed (cause scale)
  std::int64_t erased_at_max_outward = 0;  // erased in a block whose scale did not change, with |w| == top_old and u
                                           // pointing away from zero (cause saturation)
  std::int64_t saturated = 0, random = 0, truncated = 0, flagged = 0;
};

using ScanFn = void (*)(const float* w, const float* u, std::int64_t len, BlockScan& scan);
// words: the first random word of each element (SR policies; may be null under nearest). flags is written only
// under SR policies (and read by the caller only when counts.flagged > 0).
using RoundFn = void (*)(const LoopConfig& cfg, const LoopBlock& lb, std::uint64_t changed, float* w, const float* u,
                         const std::uint32_t* words, unsigned char* flags, std::int64_t len, LoopCounts& counts);

// ---- Spans: up to kMaxSpanBlocks whole blocks of B elements (B = 32 for MX, 16 for NVFP4), contiguous ----
inline constexpr std::int64_t kSpanElements = 1024;
inline constexpr std::int64_t kMaxSpanBlocks = kSpanElements / 16;

struct SpanScan {  // per block, as BlockScan
  std::uint32_t amax_w_bits[kMaxSpanBlocks];
  std::uint32_t amax_v32_bits[kMaxSpanBlocks];
  std::uint64_t amax_v_bits[kMaxSpanBlocks];
  std::uint8_t exact[kMaxSpanBlocks];
  std::uint8_t nonzero[kMaxSpanBlocks];
};
struct SpanBlocks {                       // per block constants of the rounding loop
  std::uint8_t active[kMaxSpanBlocks];    // 0: skipped, or left to the exact path
  std::uint64_t changed[kMaxSpanBlocks];  // 1: the block's scale changed
  double X[kMaxSpanBlocks], inv_X[kMaxSpanBlocks], top_old[kMaxSpanBlocks];
  double grid[kMaxSpanBlocks][8];      // NVFP4
  std::uint8_t fused[kMaxSpanBlocks];  // MX: the block runs the fused loop (mx_nearest), not the active blocks' loops
};
using SpanScanFn = void (*)(const float* w, const float* u, std::int64_t blocks, SpanScan& scan);
using SpanRoundFn = void (*)(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u,
                             const std::uint32_t* words, unsigned char* flags, std::int64_t blocks, LoopCounts& counts);

// NVFP4: the decoded grids fl32(q_k * s_b / s_enc) (q_k = kE2M1Magnitudes) of `blocks` block scales, as doubles.
using GridFn = void (*)(const float* s_b, std::int64_t blocks, float s_enc, double (*grid)[8]);

// The check pass over a chunk: counts coordinates whose w or u (master variant: master, u, w, or fl32(master + u))
// is NaN/inf; the fp32 bits of max |w| and of max |fl32(value)| with value w + u (or master + u). u may be null
// (all zero).
struct CheckChunk {
  std::uint32_t bad = 0;
  std::uint32_t amax_w_bits = 0;
  std::uint32_t amax_v_bits = 0;
};
using CheckFn = void (*)(const float* w, const float* u, const float* master, std::int64_t len, CheckChunk& out);

// MX spans through the precision layer's per-tensor write-back loops (detail::writeback_block): since X = 2^E, the
// element-unit values w / X and u / X are exact fp32 values wherever they are representable, and the per-tensor
// loops round their exact sum into the element format (with their own exact path for what they flag).
// mx_scan: per block max |w|, max |fl32(w + u)| (fp32 bits) and whether some u != 0 (exact/amax_v_bits unused).
using MxScanFn = void (*)(const float* w, const float* u, std::int64_t blocks, SpanScan& scan);
// mx_scale_in: ws = w / X, us = u / X for active blocks (zeros for the others); exact[b] = 0 where some element does
// not scale back exactly (fp32 underflow or overflow: the block goes to the exact path).
using MxScaleInFn = void (*)(const SpanBlocks& sb, const float* w, const float* u, float* ws, float* us,
                             std::uint8_t* exact, std::int64_t blocks);
// mx_scale_out: w' = ws * X for active blocks, counting the events the per-tensor loops do not (collateral, flushed,
// erased_changed, erased_at_max_outward).
using MxScaleOutFn = void (*)(const SpanBlocks& sb, const float* ws, float* w, const float* u, std::int64_t blocks,
                              LoopCounts& counts);

// mx_nearest: the fused MX nearest loop over the blocks with sb.fused[b] (fused_emin <= E <= fused_emax), in place:
// w' = q(w + u) on the element grid at scale X = 2^E straight from fp32 (no scaling into element units), with every
// event of the block (sb.changed[b] != 0: the scale changed). For floating elements the grid is fp32's bit pattern
// rounded to the element's significand width where |w + u| >= min_normal * X (independent of X), multiples of
// X * 2^(emin - M) below (after adding min_normal * X, a normal fp32 value); for mxint8 multiples of X * 2^-6 (a
// magic-number add); saturating at max_elem * X (finite). The TwoSum error of fl32(w + u) decides the exact ties, so
// nothing is flagged: with E <= fused_emax every |w + u| of the block lies below 2^127 (the scale rules give
// |w + u| < 2^(E + emax + 1)). Null for the portable compilation (slower there than the scale-in path).
using MxNearestFn = void (*)(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u, std::int64_t blocks,
                             LoopCounts& counts);

// The AVX2 ISA's intrinsics loops (block_loops_avx2.cpp): mx_nearest, NVFP4's nearest span loop and its span scan, with
// the generic loops' results (the scan's `exact` is conservative: see below).
namespace avx2 {
void mx_nearest_float(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u, std::int64_t blocks,
                      LoopCounts& counts);
void mx_nearest_integer(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u, std::int64_t blocks,
                        LoopCounts& counts);
// NVFP4 under nearest: a SpanRoundFn (words and flags unused: nothing is flagged).
void nvfp4_nearest_span(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u,
                        const std::uint32_t* words, unsigned char* flags, std::int64_t blocks, LoopCounts& counts);
// NVFP4's span scan (16-element blocks): `exact` decided on the exponent fields (conservative), amax_v_bits left 0.
void nvfp4_span_scan(const float* w, const float* u, std::int64_t blocks, SpanScan& scan);
}  // namespace avx2

struct BlockLoops {
  MxNearestFn mx_nearest = nullptr;  // null where the fused loop does not apply (see LoopConfig::fused_emin)
  MxScanFn mx_scan = nullptr;
  MxScaleInFn mx_scale_in = nullptr;
  MxScaleOutFn mx_scale_out = nullptr;
  ScanFn scan = nullptr;
  RoundFn round = nullptr;
  SpanScanFn span_scan = nullptr;
  SpanRoundFn span_round = nullptr;
  GridFn grids = nullptr;
  CheckFn check = nullptr;
  BlockIsa isa = BlockIsa::portable;
};
// The loops for cfg under isa (an ISA the CPU lacks is not chosen: callers pass active_block_isa()).
BlockLoops block_loops(const LoopConfig& cfg, BlockIsa isa);

// RNE_e4m3_saturating(x) for a finite x >= 0, on the fp32 bit pattern (equal to round_nearest with the e4m3
// parameters, which tests/sim/precision/test_block_writeback.cpp checks): normal results keep 3 significand bits
// (ties to even), results below 2^-6 are multiples of 2^-9, and everything from 464 (the tie with 480) saturates to
// 448.
inline float e4m3_nearest_saturating(float x) {
  if (x < 0x1p-6f) {
    return (x + 24576.0f) - 24576.0f;  // 24576 = 1.5 * 2^14 has ulp 2^-9: rounds to multiples of 2^-9, ties to even
  }
  const std::uint32_t b = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t r = (b + 0x7ffffu + ((b >> 20) & 1u)) & ~0xfffffu;
  const float v = std::bit_cast<float>(r);
  return v > 448.0f ? 448.0f : v;
}

}  // namespace wbaudit::sim::detail
