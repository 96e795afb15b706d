// The fused MX nearest loop (detail::MxNearestFn, block_loops.hpp) written with AVX2 intrinsics, for CPUs with AVX2
// but not AVX-512 (block ISA avx2). It is block_loops.cpp's mx_nearest_body step for step on 8-lane vectors, with the
// same results on every coordinate (tests/sim/precision/test_block_writeback_dense.cpp compares each loop ISA with
// the scalar reference bit for bit); what it does differently is only how much work a vector costs:
// - the seven event counts live in vector registers for the whole span (all-ones decisions subtracted), where GCC's
//   vectorization of the generic body kept 32-lane arrays in memory and loaded, added and stored each one per vector;
// - the exact error of fl32(w + u) (TwoSum) is computed only in a vector with a lane that needs it: a midpoint of the
//   element grid or a lane at or beyond max_elem * X (rare: a tie or saturation); elsewhere it cannot change a bit;
// - the subnormal-grid lanes' work (|s| + min_normal * X) only in a vector that has such a lane;
// - events that imply each other are not tested twice: a collateral move to 0 is a flush (w == 0 would not have
//   moved), an erased update at the block's old maximum is nonzero and w is nonzero there, so "outward" is u and w
//   having the same sign; the saturation cause needs the scale unchanged, which a per-block sentinel for top_old
//   encodes (an all-ones pattern, no |w| has it).
#include <immintrin.h>

#include <bit>
#include <cstdint>

#include "sim/precision/detail/block_loops.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace wbaudit::sim::detail {
namespace {

using V = __m256i;  // 8 lanes of 32 bits; a decision: all ones (true) or zero

[[gnu::always_inline]] inline __m256 as_ps(V x) {
  return _mm256_castsi256_ps(x);
}
[[gnu::always_inline]] inline V as_si(__m256 x) {
  return _mm256_castps_si256(x);
}
[[gnu::always_inline]] inline V bcast(std::uint32_t x) {
  return _mm256_set1_epi32(static_cast<int>(x));
}
[[gnu::always_inline]] inline int lanes(V m) {
  return _mm256_movemask_ps(as_ps(m));
}
[[gnu::always_inline]] inline std::int64_t lane_sum(V acc) {  // the (unsigned) lanes' sum
  alignas(32) std::uint32_t l[8];
  _mm256_store_si256(reinterpret_cast<V*>(l), acc);
  std::int64_t s = 0;
  for (const std::uint32_t x : l) {
    s += x;
  }
  return s;
}

// The exact error of s = fl32(w + u) (TwoSum: s + e == w + u), in the direction of |s| (sign: s's sign bit).
[[gnu::always_inline]] inline __m256 sum_error_toward_s(__m256 wf, __m256 uf, __m256 s, V sign) {
  const __m256 bb = _mm256_sub_ps(s, wf);
  const __m256 e = _mm256_add_ps(_mm256_sub_ps(wf, _mm256_sub_ps(s, bb)), _mm256_sub_ps(uf, bb));
  return as_ps(_mm256_xor_si256(as_si(e), sign));
}

// Prefetches block b's elements one span ahead (the write pass's and the scan's next reads), a 64-byte line at a time.
template <std::int64_t B>
[[gnu::always_inline]] inline void prefetch_next_span(const float* w, const float* u, std::int64_t b) {
  for (std::int64_t k = 0; k < B; k += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(w + b * B + kSpanElements + k), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(u + b * B + kSpanElements + k), _MM_HINT_T0);
  }
}

// The events of a write-back in 8 lanes, counted in vector registers over a span (at most kSpanElements / 8 per lane):
// wf, uf the old value and the proposal, val the new value and mag its magnitude bits; sat the saturated lanes; cs all
// ones where the block's scale changed; top_sel the bits of the block's old largest magnitude where the saturation
// cause can apply (scale unchanged, a positive maximum), else all ones (no |w| has that pattern).
struct Events {
  V nonzero, erased, saturated, collateral, flushed, erased_changed, at_max_out;
  // (a user-provided constructor: the implicit one is not compiled for the pragma's target)
  [[gnu::always_inline]] Events() {
    nonzero = erased = saturated = collateral = flushed = erased_changed = at_max_out = _mm256_setzero_si256();
  }
  [[gnu::always_inline]] void add(__m256 wf, __m256 uf, __m256 val, V mag, V sat, V cs, V top_sel) {
    const __m256 fzero = _mm256_setzero_ps();
    const V nz = as_si(_mm256_cmp_ps(uf, fzero, _CMP_NEQ_UQ));
    const V changed = as_si(_mm256_cmp_ps(val, wf, _CMP_NEQ_UQ));
    const V er = _mm256_andnot_si256(changed, nz);
    const V col = _mm256_andnot_si256(nz, changed);
    nonzero = _mm256_sub_epi32(nonzero, nz);
    erased = _mm256_sub_epi32(erased, er);
    saturated = _mm256_sub_epi32(saturated, sat);
    collateral = _mm256_sub_epi32(collateral, col);
    // a collateral move to 0 is a flush: w == 0 would not have moved
    flushed = _mm256_sub_epi32(flushed, _mm256_and_si256(col, _mm256_cmpeq_epi32(mag, _mm256_setzero_si256())));
    erased_changed = _mm256_sub_epi32(erased_changed, _mm256_and_si256(er, cs));
    // erased at the old maximum (w != 0 there, u != 0): outward is w and u of the same sign
    const V outward = _mm256_cmpgt_epi32(_mm256_xor_si256(as_si(wf), as_si(uf)), bcast(0xffffffffu));
    const V at_top = _mm256_cmpeq_epi32(_mm256_and_si256(as_si(wf), bcast(0x7fffffffu)), top_sel);
    at_max_out = _mm256_sub_epi32(at_max_out, _mm256_and_si256(_mm256_and_si256(er, at_top), outward));
  }
  void flush(LoopCounts& counts) const {
    counts.nonzero += lane_sum(nonzero);
    counts.erased += lane_sum(erased);
    counts.saturated += lane_sum(saturated);
    counts.collateral += lane_sum(collateral);
    counts.flushed += lane_sum(flushed);
    counts.erased_changed += lane_sum(erased_changed);
    counts.erased_at_max_outward += lane_sum(at_max_out);
  }
};

// Saturation against a largest magnitude with bits max_bits (fp32, non-negative): |w + u| > max, from |s| (bits ab)
// and, only in a vector with a lane at |s| == max (rare), the TwoSum error of s = fl32(w + u).
[[gnu::always_inline]] inline V saturated_lanes(__m256 wf, __m256 uf, __m256 s, V ab, V sign, V max_bits) {
  V sat = _mm256_cmpgt_epi32(ab, max_bits);
  const V at = _mm256_cmpeq_epi32(ab, max_bits);
  if (lanes(at) != 0) {
    const __m256 em = sum_error_toward_s(wf, uf, s, sign);
    sat = _mm256_or_si256(sat, _mm256_and_si256(at, as_si(_mm256_cmp_ps(em, _mm256_setzero_ps(), _CMP_GT_OQ))));
  }
  return sat;
}

template <bool Integer>
[[gnu::always_inline]] inline void mx_nearest_avx2_body(const LoopConfig& cfg, const SpanBlocks& sb, float* w,
                                                        const float* u, std::int64_t blocks, LoopCounts& counts) {
  constexpr std::int64_t B = 32;
  const V zero = _mm256_setzero_si256(), minus_one = bcast(0xffffffffu), abs_mask = bcast(0x7fffffffu);
  const __m256 fzero = _mm256_setzero_ps();
  const V mask = bcast(cfg.mask), keep = bcast(~cfg.mask), half_p1 = bcast(cfg.half_m1 + 1u);
  const V lsb = bcast(cfg.lsb_mask), tie_bits = bcast(cfg.tie_bits);
  Events ev;
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_next_span<B>(w, u, b);
    if (!sb.fused[b]) {
      continue;
    }
    const double X = sb.X[b];
    // floating: min_normal * X; integer: the step X * 2^-6, half of it, and C (all exact: powers of two in range)
    const auto sub_f = static_cast<float>((Integer ? cfg.unit : cfg.min_normal) * X);
    const __m256 sub = _mm256_set1_ps(sub_f);
    const V sub_bits = bcast(std::bit_cast<std::uint32_t>(sub_f));
    const __m256 half = _mm256_set1_ps(static_cast<float>(0.5 * cfg.unit * X));
    const __m256 magic = _mm256_set1_ps(static_cast<float>(0x1.8p23 * cfg.unit * X));
    const std::uint32_t max_u = std::bit_cast<std::uint32_t>(static_cast<float>(cfg.max_elem * X));
    const V max_bits = bcast(max_u);
    // the scale changed: all ones; and the old maximum's bits where the saturation cause can apply (scale unchanged),
    // else a pattern no |w| has
    const V cs = sb.changed[b] != 0 ? minus_one : zero;
    const V top_sel =
        sb.changed[b] != 0 ? minus_one : bcast(std::bit_cast<std::uint32_t>(static_cast<float>(sb.top_old[b])));
    float* wb = w + b * B;
    const float* ub = u + b * B;
    for (std::int64_t k = 0; k < B; k += 8) {
      const __m256 wf = _mm256_loadu_ps(wb + k), uf = _mm256_loadu_ps(ub + k);
      const __m256 s = _mm256_add_ps(wf, uf);
      const V ab = _mm256_and_si256(as_si(s), abs_mask);
      const V sign = _mm256_andnot_si256(abs_mask, as_si(s));
      const __m256 ax = as_ps(ab);
      V r;
      V sat = zero;
      if constexpr (Integer) {
        const __m256 n = _mm256_sub_ps(_mm256_add_ps(ax, magic), magic);
        const __m256 d = _mm256_sub_ps(ax, n);  // exact
        const V tie = as_si(_mm256_cmp_ps(_mm256_and_ps(d, as_ps(abs_mask)), half, _CMP_EQ_OQ));
        __m256 nf = n;
        sat = _mm256_cmpgt_epi32(ab, max_bits);
        if (lanes(_mm256_or_si256(tie, _mm256_cmpeq_epi32(ab, max_bits))) != 0) {  // rare: the exact sum is needed
          const __m256 em = sum_error_toward_s(wf, uf, s, sign);
          const V em_pos = as_si(_mm256_cmp_ps(em, fzero, _CMP_GT_OQ));
          const V em_neg = as_si(_mm256_cmp_ps(em, fzero, _CMP_LT_OQ));
          const V d_pos = as_si(_mm256_cmp_ps(d, fzero, _CMP_GT_OQ));
          const V d_neg = as_si(_mm256_cmp_ps(d, fzero, _CMP_LT_OQ));
          const V up = _mm256_and_si256(tie, _mm256_and_si256(d_pos, em_pos));
          const V down = _mm256_and_si256(tie, _mm256_and_si256(d_neg, em_neg));
          nf = _mm256_add_ps(n, _mm256_sub_ps(_mm256_and_ps(as_ps(up), sub), _mm256_and_ps(as_ps(down), sub)));
          sat = _mm256_or_si256(sat, _mm256_and_si256(_mm256_cmpeq_epi32(ab, max_bits), em_pos));
        }
        r = as_si(nf);
      } else {
        const V in_sub = _mm256_cmpgt_epi32(sub_bits, ab);
        const __m256 a2 = _mm256_add_ps(ax, sub);
        const __m256 e2 = _mm256_sub_ps(ax, _mm256_sub_ps(a2, sub));  // exact
        const V ab_in = _mm256_blendv_epi8(ab, as_si(a2), in_sub);
        const V tie = _mm256_cmpeq_epi32(_mm256_and_si256(ab_in, mask), tie_bits);
        V ab_adj = ab_in;
        sat = _mm256_cmpgt_epi32(ab, max_bits);
        if (lanes(_mm256_or_si256(tie, _mm256_cmpeq_epi32(ab, max_bits))) != 0) {  // rare: the exact sum is needed
          const __m256 em = sum_error_toward_s(wf, uf, s, sign);
          const V use_e2 = _mm256_andnot_si256(as_si(_mm256_cmp_ps(e2, fzero, _CMP_EQ_OQ)), in_sub);
          const __m256 em_in = _mm256_blendv_ps(em, e2, as_ps(use_e2));
          const V up = _mm256_and_si256(tie, as_si(_mm256_cmp_ps(em_in, fzero, _CMP_GT_OQ)));
          const V down = _mm256_and_si256(tie, as_si(_mm256_cmp_ps(em_in, fzero, _CMP_LT_OQ)));
          ab_adj = _mm256_add_epi32(_mm256_sub_epi32(ab_in, up), down);  // +1 where up, -1 where down
          sat = _mm256_or_si256(
              sat, _mm256_and_si256(_mm256_cmpeq_epi32(ab, max_bits), as_si(_mm256_cmp_ps(em, fzero, _CMP_GT_OQ))));
        }
        // (ab_adj + half_m1 + lsb) & keep, lsb the kept last bit: + half_m1 + 1, less one where that bit is clear
        const V lsb_clear = _mm256_cmpeq_epi32(_mm256_and_si256(ab_adj, lsb), zero);
        r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(ab_adj, half_p1), lsb_clear), keep);
        r = _mm256_blendv_epi8(r, as_si(_mm256_sub_ps(as_ps(r), sub)), in_sub);  // exact
      }
      r = _mm256_min_epi32(r, max_bits);
      const __m256 val = as_ps(_mm256_or_si256(r, sign));
      _mm256_storeu_ps(wb + k, val);
      ev.add(wf, uf, val, r, sat, cs, top_sel);
    }
  }
  ev.flush(counts);
}

// NVFP4 nearest over a span of 16-element blocks (detail::SpanRoundFn for mode 0; nvfp4_span_body's rounding): the
// exact |w + u| in double lanes against the block's decoded grid g_0 <= ... <= g_7 and its midpoints (g_j + g_j+1) / 2
// (exact in double), ties to the even code (up on a midpoint after an odd code), g_7 == 0 a zero block; the value, the
// saturation and the events in fp32 lanes (g_j are fp32 values: the magnitude converts back exactly; the sign of
// w + u is that of fl32(w + u), zero sums included).
void nvfp4_nearest_span_body(const SpanBlocks& sb, float* w, const float* u, std::int64_t blocks, LoopCounts& counts) {
  constexpr std::int64_t B = 16;
  const V abs_mask = bcast(0x7fffffffu);
  const __m256d abs_pd = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
  Events ev;
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_next_span<B>(w, u, b);
    if (!sb.active[b]) {
      continue;
    }
    const double* g = sb.grid[b];
    __m256d gv[8], mid[7];
    for (int j = 0; j < 8; ++j) {
      gv[j] = _mm256_set1_pd(g[j]);
    }
    for (int j = 0; j < 7; ++j) {
      mid[j] = _mm256_set1_pd((g[j] + g[j + 1]) * 0.5);  // exact: fp32 values in double
    }
    // saturation above g_7 (none in a zero block); the old maximum's bits where the cause can apply (see Events)
    const V max_bits = g[7] != 0.0 ? bcast(std::bit_cast<std::uint32_t>(static_cast<float>(g[7]))) : abs_mask;
    const double top_old = sb.top_old[b];
    const auto top_f = static_cast<float>(top_old);
    const bool top_ok = sb.changed[b] == 0 && top_old > 0.0 && static_cast<double>(top_f) == top_old;
    const V top_sel = top_ok ? bcast(std::bit_cast<std::uint32_t>(top_f)) : bcast(0xffffffffu);
    const V cs = sb.changed[b] != 0 ? bcast(0xffffffffu) : _mm256_setzero_si256();
    float* wb = w + b * B;
    const float* ub = u + b * B;
    for (std::int64_t k = 0; k < B; k += 8) {
      const __m256 wf = _mm256_loadu_ps(wb + k), uf = _mm256_loadu_ps(ub + k);
      __m256d near[2];
      for (int h = 0; h < 2; ++h) {
        const __m128 w4 = h == 0 ? _mm256_castps256_ps128(wf) : _mm256_extractf128_ps(wf, 1);
        const __m128 u4 = h == 0 ? _mm256_castps256_ps128(uf) : _mm256_extractf128_ps(uf, 1);
        const __m256d a = _mm256_and_pd(_mm256_add_pd(_mm256_cvtps_pd(w4), _mm256_cvtps_pd(u4)), abs_pd);  // exact
        __m256d m = gv[0];
        for (int j = 0; j < 7; ++j) {
          const __m256d up = (j % 2) != 0 ? _mm256_cmp_pd(a, mid[j], _CMP_GE_OQ) : _mm256_cmp_pd(a, mid[j], _CMP_GT_OQ);
          m = _mm256_blendv_pd(m, gv[j + 1], up);
        }
        near[h] = m;
      }
      const __m256 mag = _mm256_set_m128(_mm256_cvtpd_ps(near[1]), _mm256_cvtpd_ps(near[0]));  // exact
      const __m256 s = _mm256_add_ps(wf, uf);
      const V ab = _mm256_and_si256(as_si(s), abs_mask);
      const V sign = _mm256_andnot_si256(abs_mask, as_si(s));
      const __m256 val = as_ps(_mm256_or_si256(as_si(mag), sign));
      _mm256_storeu_ps(wb + k, val);
      ev.add(wf, uf, val, as_si(mag), saturated_lanes(wf, uf, s, ab, sign, max_bits), cs, top_sel);
    }
  }
  ev.flush(counts);
}

// The horizontal maximum of 8 unsigned lanes.
[[gnu::always_inline]] inline std::uint32_t hmax_u32(V x) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
}

// NVFP4's span scan (detail::SpanScanFn for 16-element blocks; span_scan_body's fields that a span reads): max |w| and
// max |fl32(w + u)| as fp32 bits, some u != 0, and `exact` on the exponent fields alone: w + u is exact in double when
// either is zero or their fields differ by at most 28 (the exact sum then spans at most 28 + 25 = 53 bits; a zero
// field, subnormal, counts as 0, which only lowers the bound). A block this calls inexact whose sum is exact takes the
// exact scalar path, with the same results. amax_v_bits (max |w + u| in double) is left 0: NVFP4 spans do not read it
// (nor does the check pass keep it).
void nvfp4_span_scan_body(const float* w, const float* u, std::int64_t blocks, SpanScan& s) {
  constexpr std::int64_t B = 16;
  const V abs_mask = bcast(0x7fffffffu), zero = _mm256_setzero_si256(), gap = bcast(28);
  for (std::int64_t b = 0; b < blocks; ++b) {
    prefetch_next_span<B>(w, u, b);
    V amax_w = zero, amax_v = zero, nonzero = zero, inexact = zero;
    for (std::int64_t k = b * B; k < b * B + B; k += 8) {
      const __m256 wf = _mm256_loadu_ps(w + k), uf = _mm256_loadu_ps(u + k);
      const V aw = _mm256_and_si256(as_si(wf), abs_mask), au = _mm256_and_si256(as_si(uf), abs_mask);
      const V av = _mm256_and_si256(as_si(_mm256_add_ps(wf, uf)), abs_mask);
      amax_w = _mm256_max_epu32(amax_w, aw);
      amax_v = _mm256_max_epu32(amax_v, av);
      const V nz = _mm256_xor_si256(_mm256_cmpeq_epi32(au, zero), bcast(0xffffffffu));
      nonzero = _mm256_or_si256(nonzero, nz);
      const V far = _mm256_cmpgt_epi32(
          _mm256_abs_epi32(_mm256_sub_epi32(_mm256_srli_epi32(aw, 23), _mm256_srli_epi32(au, 23))), gap);
      inexact = _mm256_or_si256(inexact, _mm256_andnot_si256(_mm256_cmpeq_epi32(aw, zero), _mm256_and_si256(far, nz)));
    }
    s.amax_w_bits[b] = hmax_u32(amax_w);
    s.amax_v32_bits[b] = hmax_u32(amax_v);
    s.amax_v_bits[b] = 0;
    s.exact[b] = static_cast<std::uint8_t>(_mm256_testz_si256(inexact, inexact));
    s.nonzero[b] = static_cast<std::uint8_t>(_mm256_testz_si256(nonzero, nonzero) == 0);
  }
}

}  // namespace

namespace avx2 {

void mx_nearest_float(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u, std::int64_t blocks,
                      LoopCounts& counts) {
  mx_nearest_avx2_body<false>(cfg, sb, w, u, blocks, counts);
}

void mx_nearest_integer(const LoopConfig& cfg, const SpanBlocks& sb, float* w, const float* u, std::int64_t blocks,
                        LoopCounts& counts) {
  mx_nearest_avx2_body<true>(cfg, sb, w, u, blocks, counts);
}

void nvfp4_nearest_span(const LoopConfig& /*cfg*/, const SpanBlocks& sb, float* w, const float* u,
                        const std::uint32_t* /*words*/, unsigned char* /*flags*/, std::int64_t blocks,
                        LoopCounts& counts) {
  nvfp4_nearest_span_body(sb, w, u, blocks, counts);
}

void nvfp4_span_scan(const float* w, const float* u, std::int64_t blocks, SpanScan& scan) {
  nvfp4_span_scan_body(w, u, blocks, scan);
}

}  // namespace avx2
}  // namespace wbaudit::sim::detail

#pragma GCC pop_options
#endif
