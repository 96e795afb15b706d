// The block-scaled write-back kernels (block_writeback.hpp) and their explicit instantiations for the host execution
// spaces (Serial, OpenMP).
//
// Every operation is two passes over the tensor. The check pass (a reduction) refuses NaN/inf input and computes the
// tensor's maxima (NVFP4's tensor scales; the range check of MX blocks, run only where some |w + u| reaches 2^127),
// so that bad input is refused before anything is written. block_writeback on 1-D blocks checks span by span with the
// scan loops themselves (ScanCheckKernel) and hands each block's maxima to the write pass, so that w and u are read
// from memory twice in all, and the scan's arithmetic overlaps the check pass's memory traffic. The write pass
// handles one block at a time: the vectorized scan and rounding loops of block_loops.cpp, then
// detail::round_element for the elements they flag (or the whole block when a sum is not exact in double). 1-D blocks
// are taken a span of up to 1024 columns of a row at a time (the SR words of a span come from one vectorized Philox
// batch); nvfp4:2d tiles are gathered into local arrays and scattered back.
#include "sim/precision/block_writeback.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "sim/precision/detail/block_element.hpp"
#include "sim/precision/detail/block_host.hpp"
#include "sim/precision/detail/block_loops.hpp"
#include "sim/precision/writeback_blocks.hpp"

namespace wbaudit::sim {
namespace {

using detail::BlockScale;
using detail::kMaxBlockElements;

template <class MemorySpace>
using FloatView = Kokkos::View<float*, MemorySpace>;
template <class MemorySpace>
using ConstFloatView = Kokkos::View<const float*, MemorySpace>;

constexpr std::int64_t kSpanCols = 1024;  // a multiple of every block size
constexpr std::int64_t kCheckChunk = 1024;

// Integer counts are summed, so the totals do not depend on the order of the reduction.
struct CountsReducer {
  using value_type = BlockWritebackCounts;
  KOKKOS_INLINE_FUNCTION void init(value_type& c) const { c = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
#define WBAUDIT_JOIN(field) a.field = a.field + b.field;
    WBAUDIT_JOIN(nonzero)
    WBAUDIT_JOIN(erased)
    WBAUDIT_JOIN(erased_grid)
    WBAUDIT_JOIN(erased_saturation)
    WBAUDIT_JOIN(erased_scale)
    WBAUDIT_JOIN(applied)
    WBAUDIT_JOIN(collateral)
    WBAUDIT_JOIN(flushed)
    WBAUDIT_JOIN(saturated)
    WBAUDIT_JOIN(sr_applied)
    WBAUDIT_JOIN(sr_truncated)
    WBAUDIT_JOIN(blocks)
    WBAUDIT_JOIN(blocks_skipped)
    WBAUDIT_JOIN(rescaled_up)
    WBAUDIT_JOIN(rescaled_down)
#undef WBAUDIT_JOIN
  }
};

// What a launch needs, derived once on the host.
struct Launch {
  BlockFormatParams p;
  WritebackPolicy policy;
  RngKey key;
  std::uint64_t first_coordinate = 0;
  bool skip = false;
  RowMajorShape shape;
  detail::LoopConfig cfg;
  detail::BlockLoops loops;
  detail::BlockWriteback elem_wb;  // MX: the per-tensor write-back of the element format (element units)
  float s_old = 1, s_new = 1;      // NVFP4: the tensor's encode scales from the old state and from the values to round
  float k_old = 1.0f / 6.0f, k_new = 1.0f / 6.0f;  // fl32(S_enc * fl32(1/6)) for each (nvfp4_block_scale)
  bool sr() const { return cfg.mode != 0; }
  void set_tensor_scales(float old_scale, float new_scale) {
    s_old = old_scale;
    s_new = new_scale;
    k_old = old_scale * (1.0f / 6.0f);
    k_new = new_scale * (1.0f / 6.0f);
  }
};

Launch make_launch(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const RngKey& key,
                   const RowMajorShape& shape, const BlockWritebackOptions& options) {
  Launch L;
  L.p = block_format_params(fmt);
  L.policy = policy;
  L.key = key;
  L.first_coordinate = options.first_coordinate;
  L.skip = options.skip_unchanged_blocks;
  L.shape = shape;
  L.cfg = detail::loop_config(L.p, policy);
  L.loops = detail::block_loops(L.cfg, detail::active_block_isa());
  L.elem_wb = detail::block_writeback(L.p.elem, policy, key);
  return L;
}

inline float float_of_bits(std::uint32_t b) {
  return std::bit_cast<float>(b);
}

// Adds the events of an element decided by the exact path and writes its value.
inline void exact_element(const Launch& L, const BlockScale& news, std::uint64_t coordinate, float* w, float u,
                          const ExactSum& value, bool scale_changed, double top_old, BlockWritebackCounts& c) {
  const float wi = *w;
  const detail::ElementOutcome o = detail::round_element(L.p, news, L.policy, L.key, coordinate, value, wi, u);
  detail::add_element_events(c, wi, u, o, scale_changed, std::fabs(static_cast<double>(wi)) == top_old);
  *w = o.value;
}

// One block by the definition (exact scalar arithmetic), in place. master: null, or the updated master values, which
// are rounded instead of w + u.
void scalar_block(const Launch& L, float* w, const float* u, const float* master, std::uint64_t first,
                  const std::uint64_t* coords, std::int64_t len, BlockWritebackCounts& c) {
  float amax_w = 0, amax32 = 0;
  ExactSum amax{};
  for (std::int64_t k = 0; k < len; ++k) {
    amax_w = std::max(amax_w, std::fabs(w[k]));
    ExactSum v = master ? ExactSum{static_cast<double>(master[k]), 0.0} : exact_sum(w[k], u[k]);
    v = std::signbit(v.hi) ? ExactSum{-v.hi, -v.lo} : v;
    if (v.hi > amax.hi || (v.hi == amax.hi && v.lo > amax.lo)) {
      amax = v;
    }
    amax32 = std::max(amax32, std::fabs(master ? master[k] : w[k] + u[k]));
  }
  const bool mx = L.p.family == BlockFamily::mx;
  const BlockScale olds =
      mx ? detail::mx_scale_of(L.p, ExactSum{amax_w, 0.0}) : detail::nvfp4_scale_of(L.p, amax_w, L.s_old);
  const BlockScale news = mx ? detail::mx_scale_of(L.p, amax) : detail::nvfp4_scale_of(L.p, amax32, L.s_new);
  const int order = detail::scale_order(L.p, olds, news);
  c.rescaled_up += order > 0;
  c.rescaled_down += order < 0;
  const double top_old = detail::largest_decoded(L.p, olds);
  for (std::int64_t k = 0; k < len; ++k) {
    const ExactSum value = master ? ExactSum{static_cast<double>(master[k]), 0.0} : exact_sum(w[k], u[k]);
    exact_element(L, news, coords ? coords[k] : first + static_cast<std::uint64_t>(k), w + k, u[k], value, order != 0,
                  top_old, c);
  }
}

void add_loop_counts(const detail::LoopCounts& lc, BlockWritebackCounts& c) {
  c.nonzero += lc.nonzero;
  c.erased += lc.erased;
  c.applied += lc.nonzero - lc.erased;
  c.erased_scale += lc.erased_changed;
  c.erased_saturation += lc.erased_at_max_outward;
  c.erased_grid += lc.erased - lc.erased_changed - lc.erased_at_max_outward;
  c.collateral += lc.collateral;
  c.flushed += lc.flushed;
  c.saturated += lc.saturated;
  c.sr_applied += lc.random;
  c.sr_truncated += lc.truncated;
}

// A block's old and new scales from the scan's maxima (exact sums), and how they compare. NVFP4's block scales use
// the e4m3 rounding on the bit pattern (equal to nvfp4_block_scale); the new grid is filled by the caller.
struct BlockPlan {
  BlockScale olds, news;
  int order = 0;
  double top_old = 0;
};
inline BlockPlan plan_block(const Launch& L, std::uint32_t amax_w_bits, std::uint64_t amax_v_bits,
                            std::uint32_t amax_v32_bits) {
  BlockPlan plan;
  const float amax_w = float_of_bits(amax_w_bits);
  if (L.p.family == BlockFamily::mx) {
    plan.olds.exp = mx_scale_exponent(L.p, ExactSum{amax_w, 0.0});
    plan.news.exp = mx_scale_exponent(L.p, ExactSum{std::bit_cast<double>(amax_v_bits), 0.0});
    plan.order = plan.news.exp > plan.olds.exp ? 1 : (plan.news.exp < plan.olds.exp ? -1 : 0);
    plan.top_old = L.p.max_elem * detail::pow2(plan.olds.exp);
    return plan;
  }
  plan.olds.s_enc = L.s_old;
  plan.news.s_enc = L.s_new;
  plan.olds.s_b = detail::e4m3_nearest_saturating(amax_w * L.k_old);  // nvfp4_block_scale
  plan.news.s_b = detail::e4m3_nearest_saturating(float_of_bits(amax_v32_bits) * L.k_new);
  // detail::scale_order without branches (rescales come and go from block to block: a branch mispredicts)
  const double lhs = static_cast<double>(plan.news.s_b) * static_cast<double>(L.s_old);
  const double rhs = static_cast<double>(plan.olds.s_b) * static_cast<double>(L.s_new);
  plan.order = static_cast<int>(lhs > rhs) - static_cast<int>(lhs < rhs);
  plan.top_old = nvfp4_decode(6.0f, plan.olds.s_b, L.s_old);
  return plan;
}

// The exact path for the elements a loop flagged in a block at scale news.
void finish_flagged(const Launch& L, const BlockScale& news, const unsigned char* flags, float* w, const float* u,
                    std::uint64_t first, const std::uint64_t* coords, std::int64_t len, bool changed, double top_old,
                    BlockWritebackCounts& c) {
  for (std::int64_t k = 0; k < len; ++k) {
    if (flags[k]) {
      exact_element(L, news, coords ? coords[k] : first + static_cast<std::uint64_t>(k), w + k, u[k],
                    exact_sum(w[k], u[k]), changed, top_old, c);
    }
  }
}

// One block in place (any length up to kMaxBlockElements): the vectorized loops, then the exact path for what they
// flag. words: the first random word of each element (SR); coords: each element's coordinate (null: first + k).
void process_block(const Launch& L, float* w, const float* u, const std::uint32_t* words, std::uint64_t first,
                   const std::uint64_t* coords, std::int64_t len, BlockWritebackCounts& c) {
  detail::BlockScan scan;
  L.loops.scan(w, u, len, scan);
  if (L.skip && !scan.any_nonzero) {
    c.blocks_skipped += 1;
    return;
  }
  if (!scan.exact) {
    scalar_block(L, w, u, nullptr, first, coords, len, c);
    return;
  }
  BlockPlan plan = plan_block(L, scan.amax_w_bits, scan.amax_v_bits, scan.amax_v32_bits);
  c.rescaled_up += plan.order > 0;
  c.rescaled_down += plan.order < 0;
  detail::LoopBlock lb;
  lb.top_old = plan.top_old;
  if (L.p.family == BlockFamily::mx) {
    lb.X = detail::pow2(plan.news.exp);
    lb.inv_X = detail::pow2(-plan.news.exp);
  } else {
    double grid[1][8];
    L.loops.grids(&plan.news.s_b, 1, L.s_new, grid);
    for (int j = 0; j < 8; ++j) {
      lb.grid[j] = grid[0][j];
      plan.news.grid[j] = static_cast<float>(grid[0][j]);
    }
  }
  unsigned char flags[kMaxBlockElements];
  detail::LoopCounts lc;
  L.loops.round(L.cfg, lb, plan.order != 0, w, u, words, flags, len, lc);
  add_loop_counts(lc, c);
  if (lc.flagged > 0) {
    finish_flagged(L, plan.news, flags, w, u, first, coords, len, plan.order != 0, lb.top_old, c);
  }
}

// One block's scan as the check pass keeps it for the write pass (8 bytes): the fp32 bits of max |w| with "some
// u != 0" in bit 31, and of max |fl32(w + u)| with "w + u exact in double" in bit 31 (magnitudes leave bit 31 clear).
// MX scans (mx_scan) do not compute exactness; their bit is unused. amax_v_bits is not kept: only the MX scan path of
// process_block reads it.
inline std::uint64_t pack_scan(const detail::SpanScan& s, std::int64_t b, bool mx) {
  const std::uint32_t lo = s.amax_w_bits[b] | (static_cast<std::uint32_t>(s.nonzero[b] != 0) << 31);
  const std::uint32_t hi = s.amax_v32_bits[b] | (static_cast<std::uint32_t>(!mx && s.exact[b] != 0) << 31);
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
inline void unpack_scans(const std::uint64_t* scans, std::int64_t blocks, detail::SpanScan& s) {
  for (std::int64_t b = 0; b < blocks; ++b) {
    const auto lo = static_cast<std::uint32_t>(scans[b]);
    const auto hi = static_cast<std::uint32_t>(scans[b] >> 32);
    s.amax_w_bits[b] = lo & 0x7fffffffu;
    s.nonzero[b] = static_cast<std::uint8_t>(lo >> 31);
    s.amax_v32_bits[b] = hi & 0x7fffffffu;
    s.exact[b] = static_cast<std::uint8_t>(hi >> 31);
    s.amax_v_bits[b] = 0;
  }
}

// A span of whole blocks of one row, in place (blocks <= kMaxSpanBlocks): one scan and one rounding loop for all of
// them; blocks with an inexact sum go to the exact path, skipped blocks are left.
void process_span(const Launch& L, float* w, const float* u, const std::uint32_t* words, std::uint64_t first,
                  std::int64_t blocks, const std::uint64_t* scans, BlockWritebackCounts& c) {
  const std::int64_t B = L.p.block_size;
  detail::SpanScan scan;
  if (scans != nullptr) {
    unpack_scans(scans, blocks, scan);
  } else {
    L.loops.span_scan(w, u, blocks, scan);
  }
  detail::SpanBlocks sb;
  float s_b_new[detail::kMaxSpanBlocks];
  int exp_new[detail::kMaxSpanBlocks];
  const bool mx = L.p.family == BlockFamily::mx;
  for (std::int64_t b = 0; b < blocks; ++b) {
    sb.active[b] = 0;
    s_b_new[b] = 0;
    if (L.skip && !scan.nonzero[b]) {
      c.blocks_skipped += 1;
      continue;
    }
    if (!scan.exact[b]) {
      scalar_block(L, w + b * B, u + b * B, nullptr, first + static_cast<std::uint64_t>(b * B), nullptr, B, c);
      continue;
    }
    const BlockPlan plan = plan_block(L, scan.amax_w_bits[b], scan.amax_v_bits[b], scan.amax_v32_bits[b]);
    c.rescaled_up += plan.order > 0;
    c.rescaled_down += plan.order < 0;
    sb.active[b] = 1;
    sb.changed[b] = plan.order != 0;
    sb.top_old[b] = plan.top_old;
    exp_new[b] = plan.news.exp;
    if (mx) {
      sb.X[b] = detail::pow2(plan.news.exp);
      sb.inv_X[b] = detail::pow2(-plan.news.exp);
    } else {
      s_b_new[b] = plan.news.s_b;
    }
  }
  if (!mx) {
    L.loops.grids(s_b_new, blocks, L.s_new, sb.grid);
  }
  unsigned char flags[detail::kSpanElements];
  detail::LoopCounts lc;
  L.loops.span_round(L.cfg, sb, w, u, words, flags, blocks, lc);
  add_loop_counts(lc, c);
  if (lc.flagged > 0) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      if (!sb.active[b]) {
        continue;
      }
      BlockScale news;
      news.exp = exp_new[b];
      news.s_b = s_b_new[b];
      news.s_enc = L.s_new;
      for (int j = 0; j < 8; ++j) {
        news.grid[j] = static_cast<float>(sb.grid[b][j]);
      }
      finish_flagged(L, news, flags + b * B, w + b * B, u + b * B, first + static_cast<std::uint64_t>(b * B), nullptr,
                     B, sb.changed[b] != 0, sb.top_old[b], c);
    }
  }
}

// The MX rule's exponent for an fp32 magnitude a (what mx_scale_exponent gives for ExactSum{a, 0}), on the bit pattern;
// `ambiguous` when an exact magnitude that rounds to a in fp32 could have another exponent: a is a power of two (floor:
// the exact value may lie just below it) or a is the rceil boundary max_elem * 2^E itself (the exact value may lie just
// above it). Zero gives -127 under both rules, and so do fp32-subnormal magnitudes under floor (emax_elem >= 0); under
// rceil a subnormal magnitude above max_elem * 2^-127 (itself subnormal where max_elem < 2: mxint8) gives -126.
inline int mx_exponent_fp32(const BlockFormatParams& p, float a, bool& ambiguous) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(a);
  ambiguous = false;
  if (b == 0 || ((b >> 23) == 0 && p.rule == ScaleRule::floor)) {
    return kE8M0MinExponent;
  }
  const int f = (b >> 23) == 0 ? std::ilogb(a) : static_cast<int>(b >> 23) - 127;  // floor(log2 a)
  int E = f - p.emax_elem;
  if (p.rule == ScaleRule::floor) {
    ambiguous = (b & 0x7fffffu) == 0;
  } else {
    const double bound = p.max_elem * detail::pow2(E);
    E += static_cast<double>(a) > bound;
    ambiguous = static_cast<double>(a) == p.max_elem * detail::pow2(E);
  }
  return E < kE8M0MinExponent ? kE8M0MinExponent : E;
}

// The exponent of an MX block's new scale from the fp32 maximum of |fl32(w + u)|, exact: where the fast rule is
// ambiguous, the exact maximum of the elements that reach the fp32 maximum (no other element's exact magnitude can
// exceed theirs) decides.
int mx_new_exponent(const Launch& L, float amax32, const float* w, const float* u, std::int64_t len) {
  bool ambiguous;
  const int E = mx_exponent_fp32(L.p, amax32, ambiguous);
  if (!ambiguous) {
    return E;
  }
  ExactSum amax{};
  for (std::int64_t k = 0; k < len; ++k) {
    if (std::fabs(w[k] + u[k]) != amax32) {
      continue;
    }
    ExactSum v = exact_sum(w[k], u[k]);
    v = std::signbit(v.hi) ? ExactSum{-v.hi, -v.lo} : v;
    if (v.hi > amax.hi || (v.hi == amax.hi && v.lo > amax.lo)) {
      amax = v;
    }
  }
  return mx_scale_exponent(L.p, amax);
}

// A span of whole MX blocks of one row, in place. Under nearest with floating elements, the blocks whose scale lies in
// the fused loop's range (LoopConfig::fused_emin .. fused_emax: all but the extreme ones) are rounded by that loop
// (mx_nearest) in one pass. The other blocks (and every block under the other policies and for mxint8): each block
// scaled exactly into element units (w / X, u / X), one call of the per-tensor write-back loops for the span, then
// scaled back with the block events; blocks whose scaling is not exact in fp32 take the exact path.
void process_span_mx(const Launch& L, float* w, const float* u, std::uint64_t first, std::int64_t blocks,
                     const std::uint64_t* scans, BlockWritebackCounts& c) {
  constexpr std::int64_t B = 32;
  detail::SpanScan scan;
  if (scans != nullptr) {
    unpack_scans(scans, blocks, scan);
  } else {
    L.loops.mx_scan(w, u, blocks, scan);
  }
  detail::SpanBlocks sb;
  const bool fusable = L.loops.mx_nearest != nullptr;
  std::uint8_t any_fused = 0, any_other = 0;
  for (std::int64_t b = 0; b < blocks; ++b) {
    sb.active[b] = 0;
    sb.fused[b] = 0;
    sb.X[b] = sb.inv_X[b] = 1;
    if (L.skip && !scan.nonzero[b]) {
      c.blocks_skipped += 1;
      continue;
    }
    bool unused;
    const int old_exp = mx_exponent_fp32(L.p, float_of_bits(scan.amax_w_bits[b]), unused);  // exact: w is fp32
    const int new_exp = mx_new_exponent(L, float_of_bits(scan.amax_v32_bits[b]), w + b * B, u + b * B, B);
    // 1 up, 2 down (then 0/1 below); no branches: rescales come and go from block to block
    sb.changed[b] =
        static_cast<std::uint64_t>(new_exp > old_exp) | (static_cast<std::uint64_t>(new_exp < old_exp) << 1);
    sb.X[b] = detail::pow2(new_exp);
    sb.inv_X[b] = detail::pow2(-new_exp);
    sb.top_old[b] = L.p.max_elem * detail::pow2(old_exp);
    // no branches on the range: blocks outside it are rare, but which block goes where is data
    const auto fused =
        static_cast<std::uint8_t>(fusable & (new_exp >= L.cfg.fused_emin) & (new_exp <= L.cfg.fused_emax));
    sb.fused[b] = fused;
    sb.active[b] = static_cast<std::uint8_t>(fused ^ 1u);
    any_fused |= fused;
    any_other |= sb.active[b];
    c.rescaled_up += fused & static_cast<std::uint8_t>(new_exp > old_exp);
    c.rescaled_down += fused & static_cast<std::uint8_t>(new_exp < old_exp);
  }
  if (any_fused) {
    detail::LoopCounts lc;
    L.loops.mx_nearest(L.cfg, sb, w, u, blocks, lc);
    add_loop_counts(lc, c);
  }
  if (!any_other) {
    return;
  }
  alignas(64) float ws[detail::kSpanElements];
  alignas(64) float us[detail::kSpanElements];
  std::uint8_t exact[detail::kMaxSpanBlocks];
  L.loops.mx_scale_in(sb, w, u, ws, us, exact, blocks);
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (!sb.active[b]) {
      continue;
    }
    if (!exact[b]) {
      sb.active[b] = 0;  // the exact path below; its element-unit values are zeroed for the per-tensor loops
      std::fill(ws + b * B, ws + b * B + B, 0.0f);
      std::fill(us + b * B, us + b * B + B, 0.0f);
      exact[b] = 2;
      continue;
    }
    c.rescaled_up += sb.changed[b] == 1;
    c.rescaled_down += sb.changed[b] == 2;
    sb.changed[b] = sb.changed[b] != 0;
  }
  detail::BlockCounts bc;
  detail::writeback_block(L.elem_wb, first, ws, us, blocks * B, bc);  // finite input (checked): returns 0
  detail::LoopCounts lc;
  L.loops.mx_scale_out(sb, ws, w, u, blocks, lc);
  c.nonzero += bc.nonzero;
  c.erased += bc.erased;
  c.applied += bc.nonzero - bc.erased;
  c.erased_scale += lc.erased_changed;
  c.erased_saturation += lc.erased_at_max_outward;
  c.erased_grid += bc.erased - lc.erased_changed - lc.erased_at_max_outward;
  c.collateral += lc.collateral;
  c.flushed += lc.flushed;
  c.saturated += bc.saturated;
  c.sr_applied += bc.random;
  c.sr_truncated += bc.truncated;
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (exact[b] == 2) {
      scalar_block(L, w + b * B, u + b * B, nullptr, first + static_cast<std::uint64_t>(b * B), nullptr, B, c);
    }
  }
}

// A row segment of len elements starting at a block boundary (len <= kSpanElements), in place: its whole blocks as a
// span, a short last block alone. scans: the scan of the whole blocks from the check pass (pack_scan), or null.
void process_segment(const Launch& L, float* w, const float* u, std::uint64_t first, std::int64_t len,
                     BlockWritebackCounts& c, const std::uint64_t* scans = nullptr) {
  const std::int64_t B = L.p.block_size;
  const std::int64_t whole = len / B;
  const bool mx = L.p.family == BlockFamily::mx;
  // SR words from element `from` on (the MX spans draw theirs inside writeback_block)
  const std::int64_t from = mx ? whole * B : 0;
  alignas(64) std::uint32_t scratch[detail::kPhiloxScratch];
  const std::uint32_t* words = nullptr;
  if (L.sr() && from < len) {
    words = detail::sr_first_words_in(L.key, L.policy, first + static_cast<std::uint64_t>(from), len - from, scratch);
  }
  if (whole > 0) {
    if (mx) {
      process_span_mx(L, w, u, first, whole, scans, c);
    } else {
      process_span(L, w, u, words, first, whole, scans, c);
    }
  }
  if (whole * B < len) {  // the row's short last block
    const std::int64_t b0 = whole * B;
    process_block(L, w + b0, u + b0, words ? words + (b0 - from) : nullptr, first + static_cast<std::uint64_t>(b0),
                  nullptr, len - b0, c);
  }
}

// ---- The check pass ----

struct CheckValue {
  std::int64_t bad = 0;  // coordinates with non-finite input
  std::int64_t first_bad = std::numeric_limits<std::int64_t>::max();
  std::int64_t first_inf = std::numeric_limits<std::int64_t>::max();  // first |fl32(value)| == inf (finite input)
  std::uint32_t amax_w_bits = 0;                                      // fp32 bits of max |w|
  std::uint32_t amax_v_bits = 0;  // fp32 bits of max |fl32(w + u)| or |fl32(master + u)|
};

inline std::uint32_t abs_bits(float x) {
  return std::bit_cast<std::uint32_t>(x) & 0x7fffffffu;
}

// The check of coordinates begin .. end - 1 into v (up: null for an empty u, all zero; mp: null but in the master
// variant).
inline void check_range(detail::CheckFn check, const float* wp, const float* up, const float* mp, std::int64_t begin,
                        std::int64_t end, CheckValue& v) {
  detail::CheckChunk cc;
  check(wp + begin, up ? up + begin : nullptr, mp ? mp + begin : nullptr, end - begin, cc);
  if (cc.bad > 0 || cc.amax_v_bits >= 0x7f800000u) {  // where: rare, scalar
    for (std::int64_t i = begin; i < end; ++i) {
      const float ui = up ? up[i] : 0.0f;
      const bool input_bad = abs_bits(wp[i]) >= 0x7f800000u || abs_bits(ui) >= 0x7f800000u ||
                             (mp && (abs_bits(mp[i]) >= 0x7f800000u || abs_bits(mp[i] + ui) >= 0x7f800000u));
      if (input_bad && i < v.first_bad) {
        v.first_bad = i;
      }
      if (!input_bad && abs_bits(wp[i] + ui) >= 0x7f800000u && i < v.first_inf) {
        v.first_inf = i;
      }
    }
  }
  v.bad += cc.bad;
  v.amax_w_bits = cc.amax_w_bits > v.amax_w_bits ? cc.amax_w_bits : v.amax_w_bits;
  v.amax_v_bits = cc.amax_v_bits > v.amax_v_bits ? cc.amax_v_bits : v.amax_v_bits;
}

// The reduction of two check passes' values (CheckKernel, ScanCheckKernel).
KOKKOS_INLINE_FUNCTION void join_checks(volatile CheckValue& a, const volatile CheckValue& b) {
  a.bad = a.bad + b.bad;
  a.first_bad = b.first_bad < a.first_bad ? b.first_bad : a.first_bad;
  a.first_inf = b.first_inf < a.first_inf ? b.first_inf : a.first_inf;
  a.amax_w_bits = b.amax_w_bits > a.amax_w_bits ? b.amax_w_bits : a.amax_w_bits;
  a.amax_v_bits = b.amax_v_bits > a.amax_v_bits ? b.amax_v_bits : a.amax_v_bits;
}

// Over chunks of kCheckChunk coordinates: w, u and (master variant) master must be finite; the values to round are
// fl32(w + u), or fl32(master + u) which must be finite too.
template <class MS>
struct CheckKernel {
  using value_type = CheckValue;
  ConstFloatView<MS> w, u, master;  // master may be empty
  std::int64_t n = 0;
  detail::CheckFn check = nullptr;
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const { v = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const { join_checks(a, b); }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t chunk, value_type& v) const {
    const std::int64_t begin = chunk * kCheckChunk;
    check_range(check, w.data(), u.extent(0) > 0 ? u.data() : nullptr, master.extent(0) > 0 ? master.data() : nullptr,
                begin, std::min(n, begin + kCheckChunk), v);
  }
};

// The check pass of block_writeback on 1-D blocks, over the write pass's work items (spans of a row): the scan loops
// of the span's whole blocks, whose maxima also find NaN/inf (a NaN or inf w or u makes max |w| or max |fl32(w + u)|
// reach 0x7f800000; such a span and a short last block go through check_range), keep each block's scan in `scans`
// for the write pass, which then reads w and u once: the scan's arithmetic runs while the pass waits on memory.
template <class MS>
struct ScanCheckKernel {
  using value_type = CheckValue;
  ConstFloatView<MS> w, u;
  Kokkos::View<std::uint64_t*, MS> scans;  // kSpanCols / B per work item
  Launch L;
  std::int64_t spans_per_row = 1;
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const { v = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const { join_checks(a, b); }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t span, value_type& v) const {
    const std::int64_t cols = L.shape.cols;
    const std::int64_t B = L.p.block_size;
    const std::int64_t col0 = (span % spans_per_row) * kSpanCols;
    const std::int64_t base = (span / spans_per_row) * cols + col0;
    const std::int64_t len = std::min(kSpanCols, cols - col0);
    const std::int64_t whole = len / B;
    const float* wp = w.data();
    const float* up = u.data();
    const bool mx = L.p.family == BlockFamily::mx;
    std::uint32_t amax_w = 0, amax_v = 0;
    if (whole > 0) {
      detail::SpanScan s;
      if (mx) {
        L.loops.mx_scan(wp + base, up + base, whole, s);
      } else {
        L.loops.span_scan(wp + base, up + base, whole, s);
      }
      std::uint64_t* out = scans.data() + span * (kSpanCols / B);
      for (std::int64_t b = 0; b < whole; ++b) {
        out[b] = pack_scan(s, b, mx);
        amax_w = s.amax_w_bits[b] > amax_w ? s.amax_w_bits[b] : amax_w;
        amax_v = s.amax_v32_bits[b] > amax_v ? s.amax_v32_bits[b] : amax_v;
      }
    }
    if (whole * B < len || amax_w >= 0x7f800000u || amax_v >= 0x7f800000u) {
      check_range(L.loops.check, wp, up, nullptr, base, base + len, v);  // the short last block, or non-finite values
      return;
    }
    v.amax_w_bits = amax_w > v.amax_w_bits ? amax_w : v.amax_w_bits;
    v.amax_v_bits = amax_v > v.amax_v_bits ? amax_v : v.amax_v_bits;
  }
};

// The exact largest |value| of a block, with value(i) the exact value to round at coordinate i.
template <class Value>
KOKKOS_INLINE_FUNCTION ExactSum block_amax(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::int64_t block,
                                           const Value& value) {
  const BlockLocation where = block_at(fmt, shape, block);
  ExactSum amax{};
  for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
    for (std::int64_t col = where.col_begin; col < where.col_end; ++col) {
      ExactSum v = value(r * shape.cols + col);
      v = std::signbit(v.hi) ? ExactSum{-v.hi, -v.lo} : v;
      if (v.hi > amax.hi || (v.hi == amax.hi && v.lo > amax.lo)) {
        amax = v;
      }
    }
  }
  return amax;
}

// The first MX block out of range (its exponent above 127, or its values beyond fp32), as a minimum over blocks; run
// only where some |value| reaches 2^127. The values are w + u (exact), or fl32(master + u) (master variant).
template <class MS>
struct RangeKernel {
  ConstFloatView<MS> w, u, master;
  BlockFormatSpec fmt;
  BlockFormatParams p;
  RowMajorShape shape;
  KOKKOS_INLINE_FUNCTION ExactSum value(std::int64_t i) const {
    const float ui = u.extent(0) > 0 ? u(i) : 0.0f;  // empty: all zero
    return master.extent(0) > 0 ? ExactSum{static_cast<double>(master(i) + ui), 0.0} : exact_sum(w(i), ui);
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, std::int64_t& first) const {
    const ExactSum amax = block_amax(fmt, shape, block, [&](std::int64_t i) { return value(i); });
    if (!detail::mx_block_in_range(p, amax, mx_scale_exponent(p, amax)) && block < first) {
      first = block;
    }
  }
};

template <class MS>
float host_value(const ConstFloatView<MS>& v, std::int64_t i) {
  if (v.extent(0) == 0) {
    return 0.0f;  // an empty u: all zero
  }
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, Kokkos::subview(v, Kokkos::make_pair(i, i + 1)));
  return h(0);
}

// The check pass: throws NonFiniteError / BlockScaleError as the reference does and, with range_and_scales, checks
// the MX blocks' range and sets the NVFP4 tensor scales.
template <class ExecSpace>
void finish_check(const ExecSpace& space, const BlockFormatSpec& fmt, const std::string& context, Launch& L,
                  const CheckValue& cv, ConstFloatView<typename ExecSpace::memory_space> w,
                  ConstFloatView<typename ExecSpace::memory_space> u,
                  ConstFloatView<typename ExecSpace::memory_space> master, bool range_and_scales) {
  using MS = typename ExecSpace::memory_space;
  if (cv.bad > 0) {
    const std::int64_t i = cv.first_bad;
    std::string values;
    if (master.extent(0) > 0) {
      const float m = host_value(master, i), ui = host_value(u, i);
      values = "master = " + detail::block_float_text(m) + ", u = " + detail::block_float_text(ui) +
               ", w = " + detail::block_float_text(host_value(w, i)) +
               ", master + u = " + detail::block_float_text(m + ui);
    } else {
      values =
          "w = " + detail::block_float_text(host_value(w, i)) + ", u = " + detail::block_float_text(host_value(u, i));
    }
    detail::throw_block_nonfinite(context, fmt, L.shape, cv.bad, i, values);
  }
  if (!range_and_scales) {
    return;
  }
  if (L.p.family == BlockFamily::nvfp4) {
    if (cv.amax_v_bits >= 0x7f800000u) {
      detail::throw_block_range(
          context, fmt, L.shape, block_of_coordinate(fmt, L.shape, cv.first_inf).block,
          "|w + u| at coordinate " + std::to_string(cv.first_inf) + " rounds to infinity in fp32");
    }
    L.set_tensor_scales(nvfp4_tensor_scale(float_of_bits(cv.amax_w_bits)),
                        nvfp4_tensor_scale(float_of_bits(cv.amax_v_bits)));
  } else if (cv.amax_v_bits >= 0x7f000000u) {  // some |value| >= 2^127
    const RangeKernel<MS> range{w, u, master, fmt, L.p, L.shape};
    std::int64_t first = std::numeric_limits<std::int64_t>::max();
    Kokkos::parallel_reduce("wbaudit::sim::precision::block_writeback::range",
                            Kokkos::RangePolicy<ExecSpace>(space, 0, block_count(fmt, L.shape)), range,
                            Kokkos::Min<std::int64_t>(first));
    if (first != std::numeric_limits<std::int64_t>::max()) {
      auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
      auto hu = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, u);
      auto hm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, master);
      const RangeKernel<Kokkos::HostSpace> host{hw, hu, hm, fmt, L.p, L.shape};
      const ExactSum amax = block_amax(fmt, L.shape, first, [&](std::int64_t i) { return host.value(i); });
      detail::throw_block_range(context, fmt, L.shape, first,
                                detail::mx_range_reason(mx_scale_exponent(L.p, amax), amax.hi));
    }
  }
}

template <class ExecSpace>
void check_pass(const ExecSpace& space, const BlockFormatSpec& fmt, const std::string& context, Launch& L,
                ConstFloatView<typename ExecSpace::memory_space> w, ConstFloatView<typename ExecSpace::memory_space> u,
                ConstFloatView<typename ExecSpace::memory_space> master, bool range_and_scales = true) {
  using MS = typename ExecSpace::memory_space;
  const std::int64_t n = L.shape.size();
  CheckValue cv;
  Kokkos::parallel_reduce("wbaudit::sim::precision::block_writeback::check",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, (n + kCheckChunk - 1) / kCheckChunk),
                          CheckKernel<MS>{w, u, master, n, L.loops.check}, cv);
  finish_check(space, fmt, context, L, cv, w, u, master, range_and_scales);
}

// The check pass of block_writeback on 1-D blocks (ScanCheckKernel): as check_pass, and each whole block's scan in
// the returned view (indexed as the write pass's spans).
template <class ExecSpace>
Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> scan_check_pass(
    const ExecSpace& space, const BlockFormatSpec& fmt, const std::string& context, Launch& L,
    ConstFloatView<typename ExecSpace::memory_space> w, ConstFloatView<typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  const std::int64_t spans_per_row = std::max<std::int64_t>(1, (L.shape.cols + kSpanCols - 1) / kSpanCols);
  const std::int64_t items = L.shape.rows * spans_per_row;
  Kokkos::View<std::uint64_t*, MS> scans(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::precision::block_writeback::scans"),
      items * (kSpanCols / L.p.block_size));
  CheckValue cv;
  Kokkos::parallel_reduce("wbaudit::sim::precision::block_writeback::scan_check",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, items),
                          ScanCheckKernel<MS>{w, u, scans, L, spans_per_row}, cv);
  finish_check(space, fmt, context, L, cv, w, u, ConstFloatView<MS>(), true);
  return scans;
}

// ---- The write pass ----

// 1-D blocks: one span of up to kSpanCols columns of a row per work item.
template <class MS>
struct RowSpanKernel : CountsReducer {
  FloatView<MS> w;
  ConstFloatView<MS> u;
  Launch L;
  std::int64_t spans_per_row = 1;
  const std::uint64_t* scans = nullptr;  // scan_check_pass's, or null (the write pass scans)
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t span, value_type& c) const {
    const std::int64_t cols = L.shape.cols;
    const std::int64_t row = span / spans_per_row;
    const std::int64_t col0 = (span % spans_per_row) * kSpanCols;
    const std::int64_t base = row * cols + col0;
    static constexpr float kZeros[kSpanCols] = {};  // an empty u: all zero (quantization)
    process_segment(L, w.data() + base, u.extent(0) > 0 ? u.data() + base : kZeros,
                    L.first_coordinate + static_cast<std::uint64_t>(base), std::min(kSpanCols, cols - col0), c,
                    scans ? scans + span * (kSpanCols / L.p.block_size) : nullptr);
  }
};

// A tile of nvfp4:2d gathered into local arrays (with its coordinates and SR words), for process_block.
struct Tile {
  float w[kMaxBlockElements];
  float u[kMaxBlockElements];
  std::uint32_t words[kMaxBlockElements];
  std::uint64_t coords[kMaxBlockElements];
  std::int64_t len = 0;
};

template <class WView, class UView>
void gather_tile(const Launch& L, const BlockLocation& where, const WView& w, const UView& u, Tile& t) {
  const std::int64_t cols = L.shape.cols, tc = where.col_end - where.col_begin;
  t.len = 0;
  for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
    const std::int64_t base = r * cols + where.col_begin;
    const std::uint64_t first = L.first_coordinate + static_cast<std::uint64_t>(base);
    const std::uint32_t* words = nullptr;
    alignas(64) std::uint32_t scratch[detail::kPhiloxScratch];
    if (L.sr()) {
      words = detail::sr_first_words_in(L.key, L.policy, first, tc, scratch);
    }
    for (std::int64_t j = 0; j < tc; ++j, ++t.len) {
      t.w[t.len] = w(base + j);
      t.u[t.len] = u.extent(0) > 0 ? u(base + j) : 0.0f;
      t.words[t.len] = words ? words[j] : 0u;
      t.coords[t.len] = first + static_cast<std::uint64_t>(j);
    }
  }
}

template <class MS>
struct TileKernel : CountsReducer {
  FloatView<MS> w;
  ConstFloatView<MS> u;
  Launch L;
  BlockFormatSpec fmt;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t tile, value_type& c) const {
    const BlockLocation where = block_at(fmt, L.shape, tile);
    Tile t;
    gather_tile(L, where, w, u, t);
    process_block(L, t.w, t.u, t.words, 0, t.coords, t.len, c);
    std::int64_t k = 0;
    for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
      for (std::int64_t col = where.col_begin; col < where.col_end; ++col) {
        w(r * L.shape.cols + col) = t.w[k++];
      }
    }
  }
};

// Master variant: every block by the exact scalar path (the contrast is not a performance path).
template <class MS>
struct MasterKernel : CountsReducer {
  FloatView<MS> master, w;
  ConstFloatView<MS> u;
  Launch L;
  BlockFormatSpec fmt;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, value_type& c) const {
    const BlockLocation where = block_at(fmt, L.shape, block);
    Tile t;
    float m[kMaxBlockElements] = {};
    std::int64_t k = 0;
    bool any = false;
    for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
      for (std::int64_t col = where.col_begin; col < where.col_end; ++col, ++k) {
        const std::int64_t i = r * L.shape.cols + col;
        t.w[k] = w(i);
        t.u[k] = u(i);
        m[k] = master(i) + u(i);  // the fp32 master update
        t.coords[k] = L.first_coordinate + static_cast<std::uint64_t>(i);
        any = any || u(i) != 0;
      }
    }
    if (L.skip && !any) {
      c.blocks_skipped += 1;
      return;
    }
    scalar_block(L, t.w, t.u, m, 0, t.coords, k, c);
    k = 0;
    for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
      for (std::int64_t col = where.col_begin; col < where.col_end; ++col, ++k) {
        w(r * L.shape.cols + col) = t.w[k];
        master(r * L.shape.cols + col) = m[k];
      }
    }
  }
};

// Projection: per block, q(w) into a local array (nearest with u = 0 at the scales of w itself: Lq), then either the
// maxima of q(w) and fl32(q(w) + u) and the range of q(w) + u (first pass) or the counts of writing back q(w) + u (L).
struct ProjectValue {
  std::uint32_t amax_q_bits = 0, amax_v_bits = 0;
  std::int64_t first_inf = std::numeric_limits<std::int64_t>::max();        // first |fl32(q(w) + u)| == inf
  std::int64_t first_bad_block = std::numeric_limits<std::int64_t>::max();  // MX: first block out of range
};
template <class MS>
struct ProjectKernel {
  ConstFloatView<MS> w, u;
  Launch L, Lq;
  BlockFormatSpec fmt;
  std::int64_t spans_per_row = 1;
  static constexpr float kZeros[detail::kSpanElements] = {};
  // Calls f(q, u, len, first, coords, block0) for work item `item` (a tile, or a row segment of whole blocks and a
  // short last one), with q = q(w) there; first, coords: the elements' coordinates as process_block takes them;
  // block0: the index of the first block.
  template <class F>
  KOKKOS_INLINE_FUNCTION void for_item(std::int64_t item, F&& f) const {
    BlockWritebackCounts unused;
    if (fmt.tiles_2d) {
      Tile t;
      gather_tile(L, block_at(fmt, L.shape, item), w, u, t);
      process_block(Lq, t.w, kZeros, nullptr, 0, t.coords, t.len, unused);
      f(t.w, static_cast<const float*>(t.u), t.len, std::uint64_t{0}, static_cast<const std::uint64_t*>(t.coords),
        item);
      return;
    }
    std::int64_t base = 0, len = 0, block0 = 0;
    segment(item, base, len, block0);
    alignas(64) float q[detail::kSpanElements];
    std::copy(w.data() + base, w.data() + base + len, q);
    const std::uint64_t first = L.first_coordinate + static_cast<std::uint64_t>(base);
    process_segment(Lq, q, kZeros, first, len, unused);
    f(q, u.data() + base, len, first, static_cast<const std::uint64_t*>(nullptr), block0);
  }
  // The row segment of 1-D work item `item`: its first element's index, its length and its first block's index.
  KOKKOS_INLINE_FUNCTION void segment(std::int64_t item, std::int64_t& base, std::int64_t& len,
                                      std::int64_t& block0) const {
    const std::int64_t cols = L.shape.cols;
    const std::int64_t row = item / spans_per_row;
    const std::int64_t col0 = (item % spans_per_row) * kSpanCols;
    const std::int64_t B = L.p.block_size;
    len = std::min(kSpanCols, cols - col0);
    base = row * cols + col0;
    block0 = row * ((cols + B - 1) / B) + col0 / B;
  }
};

template <class MS>
struct ProjectMaxima : ProjectKernel<MS> {
  using value_type = ProjectValue;
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const { v = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
    a.amax_q_bits = b.amax_q_bits > a.amax_q_bits ? b.amax_q_bits : a.amax_q_bits;
    a.amax_v_bits = b.amax_v_bits > a.amax_v_bits ? b.amax_v_bits : a.amax_v_bits;
    a.first_inf = b.first_inf < a.first_inf ? b.first_inf : a.first_inf;
    a.first_bad_block = b.first_bad_block < a.first_bad_block ? b.first_bad_block : a.first_bad_block;
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, value_type& v) const {
    const Launch& L = this->L;
    const std::int64_t B = this->fmt.tiles_2d ? kMaxBlockElements : L.p.block_size;
    this->for_item(item, [&](const float* q, const float* u, std::int64_t len, std::uint64_t first,
                             const std::uint64_t* coords, std::int64_t block0) {
      for (std::int64_t b0 = 0; b0 < len; b0 += B) {  // block by block (a tile is one block)
        ExactSum amax{};
        for (std::int64_t k = b0; k < std::min(len, b0 + B); ++k) {
          const std::uint32_t bq = std::bit_cast<std::uint32_t>(q[k]) & 0x7fffffffu;
          const std::uint32_t bv = std::bit_cast<std::uint32_t>(q[k] + u[k]) & 0x7fffffffu;
          v.amax_q_bits = bq > v.amax_q_bits ? bq : v.amax_q_bits;
          v.amax_v_bits = bv > v.amax_v_bits ? bv : v.amax_v_bits;
          const auto i = static_cast<std::int64_t>((coords ? coords[k] : first + static_cast<std::uint64_t>(k)) -
                                                   L.first_coordinate);
          if (bv >= 0x7f800000u && i < v.first_inf) {
            v.first_inf = i;
          }
          if (L.p.family == BlockFamily::mx) {  // the MX range check needs the exact maximum
            ExactSum x = exact_sum(q[k], u[k]);
            x = std::signbit(x.hi) ? ExactSum{-x.hi, -x.lo} : x;
            if (x.hi > amax.hi || (x.hi == amax.hi && x.lo > amax.lo)) {
              amax = x;
            }
          }
        }
        const std::int64_t block = block0 + b0 / B;
        if (L.p.family == BlockFamily::mx && !detail::mx_block_in_range(L.p, amax, mx_scale_exponent(L.p, amax)) &&
            block < v.first_bad_block) {
          v.first_bad_block = block;
        }
      }
    });
  }
};

template <class MS>
struct ProjectCounts : ProjectKernel<MS>, CountsReducer {
  using value_type = BlockWritebackCounts;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, value_type& c) const {
    this->for_item(item, [&](float* q, const float* u, std::int64_t len, std::uint64_t first,
                             const std::uint64_t* coords, std::int64_t) {
      if (coords) {
        process_block(this->L, q, u, nullptr, first, coords, len, c);
      } else {
        process_segment(this->L, q, u, first, len, c);
      }
    });
  }
};

template <class ExecSpace>
std::int64_t work_items(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::int64_t& spans_per_row) {
  spans_per_row = std::max<std::int64_t>(1, (shape.cols + kSpanCols - 1) / kSpanCols);
  return fmt.tiles_2d ? block_count(fmt, shape) : shape.rows * spans_per_row;
}

// The write pass of block_writeback (the check pass has run).
template <class ExecSpace>
BlockWritebackCounts write_pass(const ExecSpace& space, const BlockFormatSpec& fmt, const Launch& L,
                                FloatView<typename ExecSpace::memory_space> w,
                                ConstFloatView<typename ExecSpace::memory_space> u,
                                const std::uint64_t* scans = nullptr) {
  using MS = typename ExecSpace::memory_space;
  BlockWritebackCounts counts;
  std::int64_t spans_per_row = 1;
  const std::int64_t items = work_items<ExecSpace>(fmt, L.shape, spans_per_row);
  if (fmt.tiles_2d) {
    Kokkos::parallel_reduce("wbaudit::sim::precision::block_writeback::tiles",
                            Kokkos::RangePolicy<ExecSpace>(space, 0, items), TileKernel<MS>{{}, w, u, L, fmt}, counts);
  } else {
    Kokkos::parallel_reduce("wbaudit::sim::precision::block_writeback::spans",
                            Kokkos::RangePolicy<ExecSpace>(space, 0, items),
                            RowSpanKernel<MS>{{}, w, u, L, spans_per_row, scans}, counts);
  }
  counts.blocks = block_count(fmt, L.shape);
  return counts;
}

}  // namespace

template <class ExecSpace>
BlockWritebackCounts block_writeback(const ExecSpace& space, const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                     const RngKey& key, const RowMajorShape& shape,
                                     Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                     Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                     const BlockWritebackOptions& options) {
  using MS = typename ExecSpace::memory_space;
  detail::check_block_shape("block_writeback", shape, w.extent(0), u.extent(0));
  detail::check_block_policy("block_writeback", policy, key, options.first_coordinate, w.extent(0));
  if (shape.size() == 0) {
    return BlockWritebackCounts{};
  }
  Launch L = make_launch(fmt, policy, key, shape, options);
  const std::string context = detail::block_context("block_writeback", key, fmt);
  if (fmt.tiles_2d) {
    check_pass(space, fmt, context, L, ConstFloatView<MS>(w), u, ConstFloatView<MS>());
    return write_pass(space, fmt, L, w, u);
  }
  const auto scans = scan_check_pass(space, fmt, context, L, ConstFloatView<MS>(w), u);
  return write_pass(space, fmt, L, w, u, scans.data());
}

template <class ExecSpace>
BlockWritebackCounts block_writeback_master(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                            const RowMajorShape& shape,
                                            Kokkos::View<float*, typename ExecSpace::memory_space> master,
                                            Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                            Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                            const BlockWritebackOptions& options) {
  using MS = typename ExecSpace::memory_space;
  detail::check_block_shape("block_writeback_master", shape, master.extent(0), u.extent(0));
  detail::check_block_shape("block_writeback_master", shape, w.extent(0), u.extent(0));
  if (shape.size() == 0) {
    return BlockWritebackCounts{};
  }
  Launch L = make_launch(fmt, WritebackPolicy{}, key, shape, options);
  check_pass(space, fmt, detail::block_context("block_writeback_master", key, fmt), L, ConstFloatView<MS>(w), u,
             ConstFloatView<MS>(master));
  BlockWritebackCounts counts;
  Kokkos::parallel_reduce("wbaudit::sim::precision::block_writeback_master::blocks",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, block_count(fmt, shape)),
                          MasterKernel<MS>{{}, master, w, u, L, fmt}, counts);
  counts.blocks = block_count(fmt, shape);
  return counts;
}

namespace {

template <class ExecSpace>
BlockWritebackCounts project_impl(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                  const RowMajorShape& shape,
                                  Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                  Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                  const BlockTensorMaxima* maxima) {
  using MS = typename ExecSpace::memory_space;
  detail::check_block_shape("block_project", shape, w.extent(0), u.extent(0));
  if (shape.size() == 0) {
    return BlockWritebackCounts{};
  }
  const std::string context = detail::block_context("block_project", key, fmt);
  Launch L = make_launch(fmt, WritebackPolicy{}, key, shape, {});
  Launch Lq = L;
  check_pass(space, fmt, context, L, w, u, ConstFloatView<MS>(), false);  // w and u finite
  // q(w): w in range, and its tensor scales (NVFP4)
  check_pass(space, fmt, context, Lq, w, ConstFloatView<MS>(), ConstFloatView<MS>());
  const bool given = maxima != nullptr && L.p.family == BlockFamily::nvfp4;
  if (given) {  // q(w) at the larger tensor's encode scale
    Lq.set_tensor_scales(nvfp4_tensor_scale(maxima->w), nvfp4_tensor_scale(maxima->w));
  }
  std::int64_t spans_per_row = 1;
  const std::int64_t items = work_items<ExecSpace>(fmt, shape, spans_per_row);
  // q(w) + u: its tensor scales (NVFP4) and its range; for MX only where some |w| or |w + u| reaches 2^125 (|q(w)|
  // is at most 2 |w|, so |q(w) + u| stays below 2^127 otherwise)
  CheckValue cv;
  Kokkos::parallel_reduce("wbaudit::sim::precision::block_project::check",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, (shape.size() + kCheckChunk - 1) / kCheckChunk),
                          CheckKernel<MS>{w, u, ConstFloatView<MS>(), shape.size(), L.loops.check}, cv);
  if (L.p.family == BlockFamily::nvfp4 || cv.amax_w_bits >= 0x7e000000u || cv.amax_v_bits >= 0x7e000000u) {
    ProjectValue pv;
    ProjectMaxima<MS> maxima;
    static_cast<ProjectKernel<MS>&>(maxima) = ProjectKernel<MS>{w, u, L, Lq, fmt, spans_per_row};
    Kokkos::parallel_reduce("wbaudit::sim::precision::block_project::maxima",
                            Kokkos::RangePolicy<ExecSpace>(space, 0, items), maxima, pv);
    if (L.p.family == BlockFamily::nvfp4 && pv.amax_v_bits >= 0x7f800000u) {
      detail::throw_block_range(
          context, fmt, shape, block_of_coordinate(fmt, shape, pv.first_inf).block,
          "|w + u| at coordinate " + std::to_string(pv.first_inf) + " rounds to infinity in fp32");
    }
    if (pv.first_bad_block != std::numeric_limits<std::int64_t>::max()) {
      detail::throw_block_range(context, fmt, shape, pv.first_bad_block,
                                "its largest |q(w) + u| needs a scale beyond E8M0 or decodes beyond fp32's range");
    }
    L.set_tensor_scales(nvfp4_tensor_scale(float_of_bits(pv.amax_q_bits)),
                        nvfp4_tensor_scale(float_of_bits(pv.amax_v_bits)));
  }
  if (given) {
    L.set_tensor_scales(nvfp4_tensor_scale(maxima->q), nvfp4_tensor_scale(maxima->v));
  }
  BlockWritebackCounts counts;
  ProjectCounts<MS> kernel;
  static_cast<ProjectKernel<MS>&>(kernel) = ProjectKernel<MS>{w, u, L, Lq, fmt, spans_per_row};
  Kokkos::parallel_reduce("wbaudit::sim::precision::block_project::counts",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, items), kernel, counts);
  counts.blocks = block_count(fmt, shape);
  return counts;
}

}  // namespace

template <class ExecSpace>
BlockWritebackCounts block_project(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                   const RowMajorShape& shape,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  return project_impl(space, fmt, key, shape, w, u, nullptr);
}

namespace {

// ---- block_project_scales: one projection per learning-rate scale, q(w) computed once ----
constexpr std::size_t kMaxProjectScales = 8;

struct ScaleMaxima {
  std::uint32_t amax_q_bits = 0;                       // max |q(w)|
  std::uint32_t amax_qv_bits[kMaxProjectScales] = {};  // max |fl32(q(w) + fl32(s u))| per scale
};
struct ScaleCounts {
  BlockWritebackCounts c[kMaxProjectScales];
};

// ProjectKernel's work items (1-D row segments here: tiles take block_project per scale) with every scale's launch.
template <class MS>
struct ProjectScalesKernel : ProjectKernel<MS> {
  Launch Ls[kMaxProjectScales];  // per scale (NVFP4: its tensor scales)
  double scales[kMaxProjectScales] = {};
  int nscales = 0;
  // NVFP4 with the caller's q(w) requested: written by the maxima pass, read by the counts pass (empty: none)
  FloatView<MS> q;
  // fl32(s u) of a segment, as record_block_projection forms the anchors' proposals
  KOKKOS_INLINE_FUNCTION void scaled(int k, const float* u, std::int64_t len, float* us) const {
    for (std::int64_t i = 0; i < len; ++i) {
      us[i] = static_cast<float>(scales[k] * static_cast<double>(u[i]));
    }
  }
};

template <class MS>
struct ProjectScalesMaxima : ProjectScalesKernel<MS> {
  using value_type = ScaleMaxima;
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const { v = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
    a.amax_q_bits = b.amax_q_bits > a.amax_q_bits ? b.amax_q_bits : a.amax_q_bits;
    for (std::size_t k = 0; k < kMaxProjectScales; ++k) {
      a.amax_qv_bits[k] = b.amax_qv_bits[k] > a.amax_qv_bits[k] ? b.amax_qv_bits[k] : a.amax_qv_bits[k];
    }
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, value_type& v) const {
    this->for_item(item, [&](const float* q, const float* u, std::int64_t len, std::uint64_t first,
                             const std::uint64_t*, std::int64_t) {
      alignas(64) float us[detail::kSpanElements];
      if (this->q.extent(0) > 0) {  // a row segment: coordinates first .. first + len - 1
        const auto base = static_cast<std::int64_t>(first - this->L.first_coordinate);
        std::copy(q, q + len, this->q.data() + base);
      }
      for (std::int64_t i = 0; i < len; ++i) {
        const std::uint32_t bq = std::bit_cast<std::uint32_t>(q[i]) & 0x7fffffffu;
        v.amax_q_bits = bq > v.amax_q_bits ? bq : v.amax_q_bits;
      }
      for (int k = 0; k < this->nscales; ++k) {
        this->scaled(k, u, len, us);
        std::uint32_t m = v.amax_qv_bits[k];
        for (std::int64_t i = 0; i < len; ++i) {
          const std::uint32_t bv = std::bit_cast<std::uint32_t>(q[i] + us[i]) & 0x7fffffffu;
          m = bv > m ? bv : m;
        }
        v.amax_qv_bits[k] = m;
      }
    });
  }
};

template <class MS>
struct ProjectScalesCounts : ProjectScalesKernel<MS> {
  using value_type = ScaleCounts;
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const { v = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
    for (std::size_t k = 0; k < kMaxProjectScales; ++k) {
      CountsReducer{}.join(a.c[k], b.c[k]);
    }
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, value_type& v) const {
    const auto project = [&](const float* q, const float* u, std::int64_t len, std::uint64_t first,
                             const std::uint64_t*, std::int64_t) {
      alignas(64) float qk[detail::kSpanElements];
      alignas(64) float us[detail::kSpanElements];
      for (int k = 0; k < this->nscales; ++k) {
        std::copy(q, q + len, qk);
        this->scaled(k, u, len, us);
        process_segment(this->Ls[k], qk, us, first, len, v.c[k]);
      }
    };
    if (this->q.extent(0) == 0) {
      this->for_item(item, project);
      return;
    }
    // q(w) of the segment from the maxima pass
    std::int64_t base = 0, len = 0, block0 = 0;
    this->segment(item, base, len, block0);
    project(this->q.data() + base, this->u.data() + base, len,
            this->L.first_coordinate + static_cast<std::uint64_t>(base), nullptr, block0);
  }
};

// block_project_scales; q_filled: whether q_out (when not empty) received q(w) from the maxima pass.
template <class ExecSpace>
std::vector<BlockWritebackCounts> project_scales_impl(const ExecSpace& space, const BlockFormatSpec& fmt,
                                                      const RngKey& key, const RowMajorShape& shape,
                                                      Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                                      Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                                      std::span<const double> scales,
                                                      Kokkos::View<float*, typename ExecSpace::memory_space> q_out,
                                                      bool& q_filled) {
  using MS = typename ExecSpace::memory_space;
  detail::check_block_shape("block_project", shape, w.extent(0), u.extent(0));
  const auto n = static_cast<std::size_t>(shape.size());
  // One block_project per scale on fl32(s u): 2-D tiles, too many scales, and the rare inputs whose checks or range
  // decisions could go otherwise (non-finite values, |values| near fp32's top), so that every error is block_project's.
  const auto one_by_one = [&] {
    std::vector<BlockWritebackCounts> out;
    Kokkos::View<float*, MS> us(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::block_project::us"), n);
    for (const double s : scales) {
      Kokkos::parallel_for(
          "wbaudit::sim::precision::block_project_scales::scale", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
          KOKKOS_LAMBDA(const std::size_t i) { us(i) = static_cast<float>(s * static_cast<double>(u(i))); });
      out.push_back(block_project(space, fmt, key, shape, w, Kokkos::View<const float*, MS>(us)));
    }
    return out;
  };
  if (scales.empty()) {
    return {};
  }
  if (n == 0) {
    return std::vector<BlockWritebackCounts>(scales.size());
  }
  if (fmt.tiles_2d || scales.size() > kMaxProjectScales) {
    return one_by_one();
  }
  Launch L = make_launch(fmt, WritebackPolicy{}, key, shape, {});
  CheckValue cv;  // finiteness of w and u, and max |w|
  Kokkos::parallel_reduce("wbaudit::sim::precision::block_project_scales::check",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, (shape.size() + kCheckChunk - 1) / kCheckChunk),
                          CheckKernel<MS>{w, u, ConstFloatView<MS>(), shape.size(), L.loops.check}, cv);
  float amax_u = 0;
  Kokkos::parallel_reduce(
      "wbaudit::sim::precision::block_project_scales::amax_u", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(const std::size_t i, float& m) { m = std::fabs(u(i)) > m ? std::fabs(u(i)) : m; },
      Kokkos::Max<float>(amax_u));
  double s_max = 0;
  for (const double s : scales) {
    s_max = std::max(s_max, std::fabs(s));
  }
  // |fl32(w + fl32(s u))| <= fl32(max |w| + fl32(s_max max |u|)) (rounding is monotonic)
  const float us_max = static_cast<float>(s_max * static_cast<double>(amax_u));
  const float bound = float_of_bits(cv.amax_w_bits) + us_max;
  if (cv.bad > 0 || !(std::bit_cast<std::uint32_t>(bound) < 0x7e000000u)) {
    return one_by_one();
  }
  const std::string context = detail::block_context("block_project", key, fmt);
  Launch Lq = L;
  check_pass(space, fmt, context, Lq, w, ConstFloatView<MS>(), ConstFloatView<MS>());  // q(w): range, scales
  std::int64_t spans_per_row = 1;
  const std::int64_t items = work_items<ExecSpace>(fmt, shape, spans_per_row);
  ProjectScalesKernel<MS> base;
  static_cast<ProjectKernel<MS>&>(base) = ProjectKernel<MS>{w, u, L, Lq, fmt, spans_per_row};
  base.nscales = static_cast<int>(scales.size());
  for (int k = 0; k < base.nscales; ++k) {
    base.scales[k] = scales[static_cast<std::size_t>(k)];
    base.Ls[k] = L;
  }
  if (L.p.family == BlockFamily::nvfp4) {  // each scale's tensor scales: max |q(w)| and max |fl32(q(w) + fl32(s u))|
    base.q = q_out;
    ScaleMaxima m;
    ProjectScalesMaxima<MS> maxima;
    static_cast<ProjectScalesKernel<MS>&>(maxima) = base;
    Kokkos::parallel_reduce("wbaudit::sim::precision::block_project_scales::maxima",
                            Kokkos::RangePolicy<ExecSpace>(space, 0, items), maxima, m);
    for (int k = 0; k < base.nscales; ++k) {
      if (m.amax_qv_bits[k] >= 0x7f800000u) {
        return one_by_one();
      }
      base.Ls[k].set_tensor_scales(nvfp4_tensor_scale(float_of_bits(m.amax_q_bits)),
                                   nvfp4_tensor_scale(float_of_bits(m.amax_qv_bits[k])));
    }
    q_filled = q_out.extent(0) > 0;
  }
  ScaleCounts counts;
  ProjectScalesCounts<MS> kernel;
  static_cast<ProjectScalesKernel<MS>&>(kernel) = base;
  Kokkos::parallel_reduce("wbaudit::sim::precision::block_project_scales::counts",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, items), kernel, counts);
  std::vector<BlockWritebackCounts> out(counts.c, counts.c + base.nscales);
  for (BlockWritebackCounts& c : out) {
    c.blocks = block_count(fmt, shape);
  }
  return out;
}

}  // namespace

template <class ExecSpace>
std::vector<BlockWritebackCounts> block_project_scales(const ExecSpace& space, const BlockFormatSpec& fmt,
                                                       const RngKey& key, const RowMajorShape& shape,
                                                       Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                                       Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                                       std::span<const double> scales,
                                                       Kokkos::View<float*, typename ExecSpace::memory_space> q_out) {
  if (q_out.extent(0) > 0 && q_out.extent(0) != w.extent(0)) {
    throw std::invalid_argument("block_project_scales: q_out holds " + std::to_string(q_out.extent(0)) +
                                " values for " + std::to_string(w.extent(0)) + " weights");
  }
  bool q_filled = false;
  std::vector<BlockWritebackCounts> out = project_scales_impl(space, fmt, key, shape, w, u, scales, q_out, q_filled);
  if (q_out.extent(0) > 0 && !q_filled) {  // the paths without the NVFP4 maxima pass
    Kokkos::deep_copy(space, q_out, w);
    block_quantize(space, fmt, shape, q_out);
  }
  return out;
}

template <class ExecSpace>
BlockWritebackCounts block_project(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                   const RowMajorShape& shape,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                   const BlockTensorMaxima& maxima) {
  return project_impl(space, fmt, key, shape, w, u, &maxima);
}

template <class ExecSpace>
void block_quantize(const ExecSpace& space, const BlockFormatSpec& fmt, const RowMajorShape& shape,
                    Kokkos::View<float*, typename ExecSpace::memory_space> x) {
  using MS = typename ExecSpace::memory_space;
  detail::check_block_shape("block_quantize", shape, x.extent(0), x.extent(0));
  if (shape.size() == 0) {
    return;
  }
  Launch L = make_launch(fmt, WritebackPolicy{}, RngKey{}, shape, {});
  check_pass(space, fmt, std::string("block_quantize (format ") + fmt.name + ")", L, ConstFloatView<MS>(x),
             ConstFloatView<MS>(), ConstFloatView<MS>());
  write_pass(space, fmt, L, x, ConstFloatView<MS>());  // u empty: all zero
}

#define WBAUDIT_INSTANTIATE_BLOCK_WRITEBACK(SPACE)                                                       \
  template BlockWritebackCounts block_writeback<SPACE>(                                                  \
      const SPACE&, const BlockFormatSpec&, const WritebackPolicy&, const RngKey&, const RowMajorShape&, \
      Kokkos::View<float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>,        \
      const BlockWritebackOptions&);                                                                     \
  template BlockWritebackCounts block_writeback_master<SPACE>(                                           \
      const SPACE&, const BlockFormatSpec&, const RngKey&, const RowMajorShape&,                         \
      Kokkos::View<float*, SPACE::memory_space>, Kokkos::View<float*, SPACE::memory_space>,              \
      Kokkos::View<const float*, SPACE::memory_space>, const BlockWritebackOptions&);                    \
  template BlockWritebackCounts block_project<SPACE>(                                                    \
      const SPACE&, const BlockFormatSpec&, const RngKey&, const RowMajorShape&,                         \
      Kokkos::View<const float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>); \
  template BlockWritebackCounts block_project<SPACE>(                                                    \
      const SPACE&, const BlockFormatSpec&, const RngKey&, const RowMajorShape&,                         \
      Kokkos::View<const float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>,  \
      const BlockTensorMaxima&);                                                                         \
  template std::vector<BlockWritebackCounts> block_project_scales<SPACE>(                                \
      const SPACE&, const BlockFormatSpec&, const RngKey&, const RowMajorShape&,                         \
      Kokkos::View<const float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>,  \
      std::span<const double>, Kokkos::View<float*, SPACE::memory_space>);                               \
  template void block_quantize<SPACE>(const SPACE&, const BlockFormatSpec&, const RowMajorShape&,        \
                                      Kokkos::View<float*, SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_BLOCK_WRITEBACK(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_BLOCK_WRITEBACK(Kokkos::OpenMP)
#endif
#undef WBAUDIT_INSTANTIATE_BLOCK_WRITEBACK

}  // namespace wbaudit::sim
