// The write-back block loops written with AVX-512 intrinsics (see writeback_blocks.hpp for the contract, and
// writeback_blocks.cpp for the portable loops and the reasoning behind each rounding). They are used when the CPU has
// AVX-512 F/BW/DQ/VL (avx512_blocks_supported) and give exactly the portable loops' results on every coordinate they
// decide; a coordinate they cannot decide is flagged for the exact scalar path like there (tests run both).
//
// Why intrinsics: compiled from the portable loops, GCC converts every comparison between mask registers and vectors
// and spills registers; here each decision stays in a mask register, masked operations apply it, the events are
// counted with masked vector adds, and flags are written only for a vector that has one. The stochastic loops also
// cover deadzone-sr and intK in fp32 lanes (the portable loops use fp64 lanes for those).
//
// Everything in this file is compiled for AVX-512 (the pragma below) and has internal linkage, apart from the entry
// points declared in writeback_blocks.hpp, which callers reach only after checking the CPU.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sim/precision/writeback_blocks.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WBAUDIT_HAVE_AVX512_BLOCKS 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd")
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*, which -Wuninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace wbaudit::sim::detail {
namespace {

#define WB_INLINE [[gnu::always_inline]] inline

WB_INLINE __m512 as_ps(__m512i x) {
  return _mm512_castsi512_ps(x);
}
WB_INLINE __m512i as_si(__m512 x) {
  return _mm512_castps_si512(x);
}
WB_INLINE __m512i u32(std::uint32_t x) {
  return _mm512_set1_epi32(static_cast<int>(x));
}

// The exact sum w + u: fp32 sum s (TwoSum), its magnitude bits ab and sign bit, and the error em in the direction
// of |s| (as sum32 in writeback_blocks.cpp).
struct Sum {
  __m512i ab, sign;
  __m512 em;
};
WB_INLINE Sum exact_sum(__m512 wf, __m512 uf) {
  const __m512 s = _mm512_add_ps(wf, uf);
  const __m512 bb = _mm512_sub_ps(s, wf);
  const __m512 e = _mm512_add_ps(_mm512_sub_ps(wf, _mm512_sub_ps(s, bb)), _mm512_sub_ps(uf, bb));
  const __m512i abs_mask = u32(0x7fffffffu);
  Sum r;
  r.ab = _mm512_and_si512(as_si(s), abs_mask);
  r.sign = _mm512_andnot_si512(abs_mask, as_si(s));
  r.em = as_ps(_mm512_xor_si512(as_si(e), r.sign));
  return r;
}

// The lanes at the edge of the range, all with |s| >= max finite: sat, |w + u| > max finite (|s| == max with the
// error pointing away is beyond it too), and bad, s is NaN/inf (non-finite input, or an fp32 overflow of the sum).
// Rare: computed only in a vector that has one (Branch), or always where the format's max finite is within reach of
// ordinary weights (intK, whose scale is set from the weights' absolute maximum), to spare mispredicted branches.
struct Edge {
  __mmask16 sat = 0, bad = 0;
};
template <bool Branch>
WB_INLINE Edge edge_lanes(const Sum& s, __m512i max_bits) {
  Edge r;
  if (!Branch || _mm512_cmpge_epu32_mask(s.ab, max_bits) != 0) {
    const __mmask16 at_max = _mm512_cmpeq_epi32_mask(s.ab, max_bits);
    r.sat = _mm512_cmpgt_epu32_mask(s.ab, max_bits) |
            _mm512_mask_cmp_ps_mask(at_max, s.em, _mm512_setzero_ps(), _CMP_GT_OQ);
    r.bad = _mm512_cmpgt_epu32_mask(s.ab, u32(0x7f7fffffu));
  }
  return r;
}

// The end of every loop body: writes v back, counts the events of the lanes decided, and records the flagged
// lanes (their w is left as it was). Counts are kept in vector lanes (each counts at most kWritebackBlock / 16
// coordinates); in a full vector every lane is counted and a flagged lane's events are taken back (rare), in the
// block's last, partial vector only the live lanes count. Sr: the SR draw counts are kept (random: the draw
// decided, truncated: r-bit SR truncated a nonzero probability), given per lane before flagging.
template <bool Sr, bool RBits>
struct Out {
  float* w;
  unsigned char* flags;
  std::int64_t len;
  std::int64_t flagged = 0;
  __m512i nonzero, erased, applied, saturated, random, truncated;
  Out(float* w_, unsigned char* flags_, std::int64_t len_)
      : w(w_),
        flags(flags_),
        len(len_),
        nonzero(_mm512_setzero_si512()),
        erased(_mm512_setzero_si512()),
        applied(_mm512_setzero_si512()),
        saturated(_mm512_setzero_si512()),
        random(_mm512_setzero_si512()),
        truncated(_mm512_setzero_si512()) {}
  WB_INLINE static void up(__m512i& acc, __mmask16 k) {
    acc = _mm512_mask_sub_epi32(acc, k, acc, _mm512_set1_epi32(-1));
  }
  WB_INLINE static void down(__m512i& acc, __mmask16 k) {
    acc = _mm512_mask_add_epi32(acc, k, acc, _mm512_set1_epi32(-1));
  }
  WB_INLINE void note(std::int64_t k, __mmask16 f) {
    if (flagged == 0) {
      std::memset(flags, 0, static_cast<std::size_t>(len));
    }
    _mm_mask_storeu_epi8(flags + k, f, _mm_set1_epi8(1));
    flagged += __builtin_popcount(f);
  }
  template <bool Tail>
  WB_INLINE void put(std::int64_t k, __mmask16 live, __m512 wf, __m512 uf, __m512 v, __mmask16 sat, __mmask16 flag,
                     __mmask16 rnd = 0, __mmask16 trunc = 0) {
    const __m512 zero = _mm512_setzero_ps();
    if constexpr (!Tail) {
      _mm512_storeu_ps(w + k, v);
      const __mmask16 nz = _mm512_cmp_ps_mask(uf, zero, _CMP_NEQ_UQ);
      const __mmask16 changed = _mm512_cmp_ps_mask(v, wf, _CMP_NEQ_UQ);
      const auto er = static_cast<__mmask16>(nz & ~changed);
      up(nonzero, nz);
      up(erased, er);
      up(applied, changed);
      up(saturated, sat);
      if constexpr (Sr) {
        up(random, rnd);
      }
      if constexpr (RBits) {
        up(truncated, trunc);
      }
      if (flag != 0) [[unlikely]] {
        _mm512_mask_storeu_ps(w + k, flag, wf);
        down(nonzero, static_cast<__mmask16>(nz & flag));
        down(erased, static_cast<__mmask16>(er & flag));
        down(applied, static_cast<__mmask16>(changed & flag));
        down(saturated, static_cast<__mmask16>(sat & flag));
        if constexpr (Sr) {
          down(random, static_cast<__mmask16>(rnd & flag));
        }
        if constexpr (RBits) {
          down(truncated, static_cast<__mmask16>(trunc & flag));
        }
        note(k, flag);
      }
    } else {
      const auto f = static_cast<__mmask16>(flag & live);
      const auto ok = static_cast<__mmask16>(live & ~flag);
      _mm512_mask_storeu_ps(w + k, ok, v);
      const __mmask16 nz = _mm512_mask_cmp_ps_mask(ok, uf, zero, _CMP_NEQ_UQ);
      const __mmask16 changed = _mm512_mask_cmp_ps_mask(ok, v, wf, _CMP_NEQ_UQ);
      up(nonzero, nz);
      up(erased, static_cast<__mmask16>(nz & ~changed));
      up(applied, changed);
      up(saturated, static_cast<__mmask16>(sat & ok));
      if constexpr (Sr) {
        up(random, static_cast<__mmask16>(rnd & ok));
      }
      if constexpr (RBits) {
        up(truncated, static_cast<__mmask16>(trunc & ok));
      }
      if (f != 0) {
        note(k, f);
      }
    }
  }
  std::int64_t finish(BlockCounts& c) const {
    c.nonzero += _mm512_reduce_add_epi32(nonzero);
    c.erased += _mm512_reduce_add_epi32(erased);
    c.applied += _mm512_reduce_add_epi32(applied);
    c.saturated += _mm512_reduce_add_epi32(saturated);
    c.random += _mm512_reduce_add_epi32(random);
    c.truncated += _mm512_reduce_add_epi32(truncated);
    return flagged;
  }
};

WB_INLINE __m512 load_ps(const float* p, __mmask16 live, bool tail) {
  return tail ? _mm512_maskz_loadu_ps(live, p) : _mm512_loadu_ps(p);
}

// Prefetch distance in coordinates: one block ahead. Without it a single core waits on memory between bursts of
// computation (the hardware prefetchers do not run far enough ahead of these loops on some CPUs: 0.4x the fp32 loop
// instead of 1.0x for nearest e4m3 on a Xeon; see docs/performance.md).
constexpr std::int64_t kPrefetch = kWritebackBlock;

// Runs body(k, live, tail) over the block: full vectors, then the last partial one with a lane mask; prefetches the
// streams a, b and c (w, u and the master copy, or null) kPrefetch coordinates ahead (prefetches never fault, past
// the arrays' ends included).
template <class Body>
WB_INLINE void over_block(std::int64_t len, const float* a, const float* b, const float* c, Body&& body) {
  std::int64_t k = 0;
  for (; k + 16 <= len; k += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(a + k + kPrefetch), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + k + kPrefetch), _MM_HINT_T0);
    if (c != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(c + k + kPrefetch), _MM_HINT_T0);
    }
    body(k, static_cast<__mmask16>(0xffff), std::false_type{});
  }
  if (k < len) {
    body(k, static_cast<__mmask16>((1u << (len - k)) - 1u), std::true_type{});
  }
}

// The value a nearest loop rounds: the exact sum w + u, or with a master copy (Master) m = master + u in fp32 (the
// master update itself: exact, no error term). With a master copy, a lane whose w is NaN/inf is flagged too (its
// events are counted against w), and master is written where the lane is decided.
template <bool Master>
struct Rounded {
  Sum s;
  __m512 m;
  __mmask16 bad_w = 0;
  WB_INLINE Rounded(const float* master, std::int64_t k, __mmask16 live, bool tail, __m512 wf, __m512 uf) {
    if constexpr (Master) {
      m = _mm512_add_ps(tail ? _mm512_maskz_loadu_ps(live, master + k) : _mm512_loadu_ps(master + k), uf);
      const __m512i abs_mask = u32(0x7fffffffu);
      s.ab = _mm512_and_si512(as_si(m), abs_mask);
      s.sign = _mm512_andnot_si512(abs_mask, as_si(m));
      s.em = _mm512_setzero_ps();
      bad_w = _mm512_cmpgt_epu32_mask(_mm512_and_si512(as_si(wf), abs_mask), u32(0x7f7fffffu));
    } else {
      s = exact_sum(wf, uf);
    }
  }
  // Writes the master copy of the decided lanes (after Out::put).
  WB_INLINE void put_master(float* master, std::int64_t k, __mmask16 live, __mmask16 flag) const {
    if constexpr (Master) {
      _mm512_mask_storeu_ps(master + k, static_cast<__mmask16>(live & ~flag), m);
    }
  }
};

// ---- Nearest, floating formats, fp32 lanes: the magnitude rounded on its bit pattern ----
// (nearest_float_body in writeback_blocks.cpp). ab_in/em_in: |s| and its error, shifted by min_normal in the
// format's subnormal range (then in_sub is set and the result is shifted back).
struct FloatRound {
  __m512i mask, keep, half_m1, lsb, tie_bits, max_bits, sub_bits;
  __m512 sub_f;
  explicit FloatRound(const BlockParams& bp)
      : mask(u32(bp.mask)),
        keep(u32(~bp.mask)),
        half_m1(u32(bp.half_m1)),
        lsb(u32(bp.lsb_mask)),
        tie_bits(u32(bp.tie_bits)),
        max_bits(u32(bp.max_bits)),
        sub_bits(u32(__builtin_bit_cast(std::uint32_t, bp.sub_limit))),
        sub_f(_mm512_set1_ps(bp.sub_limit)) {}
};

struct Shifted {
  __m512i ab;
  __m512 err, tiny;  // the error that decides; a further error below it (only its sign counts; SR)
  __mmask16 in_sub;
};
template <bool Subnormals>
WB_INLINE Shifted shift_subnormal(const FloatRound& c, const Sum& s) {
  Shifted r{s.ab, s.em, _mm512_setzero_ps(), 0};
  if constexpr (Subnormals) {
    r.in_sub = _mm512_cmplt_epu32_mask(s.ab, c.sub_bits);
    const __m512 ax = as_ps(s.ab);
    const __m512 a2 = _mm512_add_ps(ax, c.sub_f);
    const __m512 e2 = _mm512_sub_ps(ax, _mm512_sub_ps(a2, c.sub_f));
    r.ab = _mm512_mask_mov_epi32(s.ab, r.in_sub, as_si(a2));
    const __mmask16 two = _mm512_mask_cmp_ps_mask(r.in_sub, e2, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    r.err = _mm512_mask_mov_ps(s.em, two, e2);
    r.tiny = _mm512_maskz_mov_ps(two, s.em);
  }
  return r;
}

// The nearest format value's magnitude bits (saturated to max finite).
template <bool Subnormals>
WB_INLINE __m512i round_nearest_bits(const FloatRound& c, const Shifted& x) {
  const __m512i one = u32(1);
  const __mmask16 tie = _mm512_cmpeq_epi32_mask(_mm512_and_si512(x.ab, c.mask), c.tie_bits);
  const __mmask16 up = _mm512_mask_cmp_ps_mask(tie, x.err, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __mmask16 down = _mm512_mask_cmp_ps_mask(tie, x.err, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512i a = _mm512_mask_add_epi32(x.ab, up, x.ab, one);
  a = _mm512_mask_sub_epi32(a, down, a, one);
  const __mmask16 odd = _mm512_test_epi32_mask(a, c.lsb);
  __m512i r = _mm512_add_epi32(a, c.half_m1);
  r = _mm512_and_si512(_mm512_mask_add_epi32(r, odd, r, one), c.keep);
  if constexpr (Subnormals) {
    r = _mm512_mask_mov_epi32(r, x.in_sub, as_si(_mm512_sub_ps(as_ps(r), c.sub_f)));  // exact
  }
  return _mm512_min_epu32(r, c.max_bits);
}

template <bool Subnormals, bool Master>
std::int64_t nearest_float(const BlockParams& bp, float* __restrict master, float* __restrict w,
                           const float* __restrict u, unsigned char* __restrict flags, std::int64_t len,
                           BlockCounts& counts) {
  const FloatRound c(bp);
  Out<false, false> out(w, flags, len);
  over_block(len, w, u, master, [&](std::int64_t k, __mmask16 live, auto tail) {
    const __m512 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const Rounded<Master> in(master, k, live, tail, wf, uf);
    const Sum& s = in.s;
    const __m512i r = round_nearest_bits<Subnormals>(c, shift_subnormal<Subnormals>(c, s));
    const __m512 v = as_ps(_mm512_or_si512(r, s.sign));
    const Edge edge = edge_lanes<true>(s, c.max_bits);
    const auto flag = static_cast<__mmask16>(edge.bad | in.bad_w);
    out.template put<decltype(tail)::value>(k, live, wf, uf, v, edge.sat, flag);
    in.put_master(master, k, live, flag);
  });
  return out.finish(counts);
}

// ---- Nearest, intK, fp32 lanes (nearest_integer_body in writeback_blocks.cpp) ----
struct IntConsts {
  __m512 scale, inv_scale, tie_guard, c32;
  __m512i max_bits;
  explicit IntConsts(const BlockParams& bp)
      : scale(_mm512_set1_ps(bp.scale)),
        inv_scale(_mm512_set1_ps(bp.inv_scale)),
        tie_guard(_mm512_set1_ps(bp.tie_guard)),
        c32(_mm512_set1_ps(bp.scale_c32)),
        max_bits(u32(bp.max_bits)) {}
};

template <bool Master>
std::int64_t nearest_integer(const BlockParams& bp, float* __restrict master, float* __restrict w,
                             const float* __restrict u, unsigned char* __restrict flags, std::int64_t len,
                             BlockCounts& counts) {
  const IntConsts c(bp);
  Out<false, false> out(w, flags, len);
  over_block(len, w, u, master, [&](std::int64_t k, __mmask16 live, auto tail) {
    const __m512 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const Rounded<Master> in(master, k, live, tail, wf, uf);
    const Sum& s = in.s;
    const __m512 ax = as_ps(s.ab);
    const __m512 y = _mm512_min_ps(_mm512_mul_ps(ax, c.inv_scale), _mm512_set1_ps(0x1p22f));
    const __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_mul_ps(n, c.scale);
    const __m512 dist =
        as_ps(_mm512_and_si512(as_si(_mm512_add_ps(_mm512_sub_ps(ax, r), s.em)), u32(0x7fffffffu)));  // ax - r is exact
    const auto [sat, bad] = edge_lanes<false>(s, c.max_bits);
    const __mmask16 near_tie = _mm512_cmp_ps_mask(dist, c.tie_guard, _CMP_GE_OQ);
    const auto flag = static_cast<__mmask16>(bad | in.bad_w | (near_tie & ~sat));
    const __m512 v = as_ps(_mm512_or_si512(_mm512_min_epu32(as_si(r), c.max_bits), s.sign));  // r >= max iff sat
    out.template put<decltype(tail)::value>(k, live, wf, uf, v, sat, flag);
    in.put_master(master, k, live, flag);
  });
  return out.finish(counts);
}

// ---- Stochastic rounding (Mode 1) and deadzone-sr (Mode 2), floating formats, fp32 lanes ----
// The SR step exactly as stochastic_float_body in writeback_blocks.cpp (z = floor(frac * 2^32) in 32-bit integers);
// deadzone-sr also rounds to nearest (exact here) and takes the SR value where nearest erases a nonzero proposal.
template <bool Subnormals, bool RBits, int Mode, bool Window>
std::int64_t stochastic_float(const BlockParams& bp, float* __restrict w, const float* __restrict u,
                              const std::uint32_t* __restrict words, unsigned char* __restrict flags, std::int64_t len,
                              BlockCounts& counts) {
  const FloatRound c(bp);
  const __m512i unit_bit = u32(bp.mask + 1), emin_field = u32(bp.emin_field), one = u32(1);
  const __m512i x_base = u32(bp.k_shift + 150);         // K + 23 + 127
  const __m512i window = u32((1u << bp.k_shift) + 2u);  // W > 2^K + 1 >= |floor(frac * 2^32) - z_s|
  const __m512i span_m1 = u32(bp.sr_span - 1), window_lo = u32((1u << bp.k_shift) + 2u + bp.sr_span - 1);
  const __m128i k_shift = _mm_cvtsi32_si128(static_cast<int>(bp.k_shift));
  const __m128i r_drop = _mm_cvtsi32_si128(RBits ? 32 - bp.sr_bits : 0);
  const __m512 zero = _mm512_setzero_ps();
  Out<true, RBits> out(w, flags, len);
  over_block(len, w, u, nullptr, [&](std::int64_t k, __mmask16 live, auto tail) {
    const __m512 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const __m512i word = tail ? _mm512_maskz_loadu_epi32(live, words + k) : _mm512_loadu_si512(words + k);
    const Sum s = exact_sum(wf, uf);
    const Shifted x = shift_subnormal<Subnormals>(c, s);
    const __m512i low = _mm512_and_si512(x.ab, c.mask);
    const __m512i field = _mm512_srli_epi32(x.ab, 23);
    const __mmask16 below = _mm512_mask_cmp_ps_mask(_mm512_testn_epi32_mask(x.ab, c.mask), x.err, zero, _CMP_LT_OQ);
    const __mmask16 pow2 = _mm512_testn_epi32_mask(x.ab, u32(0x7fffffu));  // significand bits all zero
    __mmask16 away, random = 0xffff, undecided = 0, off;
    if constexpr (Window) {
      // floor(frac * 2^32) = z_s + floor(T) with z_s = low * 2^K (the fraction of |s| itself; 2^32 when the exact
      // sum lies just below |s| on the grid) and |floor(T)| <= 2^K + 1 < W: decided from z_s unless the word (r-bit:
      // its top bits) falls within W of it; those lanes, and r-bit lanes where frac * 2^r may be below or above 1,
      // are flagged for the exact path.
      const __m512i zs = _mm512_mask_mov_epi32(_mm512_sll_epi32(low, k_shift), below, u32(0xffffffffu));
      off =
          static_cast<__mmask16>(~_mm512_mask_cmp_ps_mask(_mm512_testn_epi32_mask(low, low), x.err, zero, _CMP_EQ_OQ));
      // no window where the sum is exact in fp32 (err == 0: z = z_s)
      const __mmask16 err_nz = _mm512_cmp_ps_mask(x.err, zero, _CMP_NEQ_UQ);
      const __m512i wnd = _mm512_maskz_mov_epi32(err_nz, window);
      // a word decides "away" only when all of [word, word + span) lies below z (span 1, or 2^16: packed 16-bit draws)
      const __m512i wnd_lo = _mm512_mask_mov_epi32(span_m1, err_nz, window_lo);
      const __m512i lo = _mm512_sub_epi32(_mm512_max_epu32(zs, wnd_lo), wnd_lo);
      const __m512i hi = _mm512_add_epi32(_mm512_min_epu32(zs, u32(0xffffffffu) - wnd), wnd);
      const __m512i d_lo = _mm512_srl_epi32(lo, r_drop), d_hi = _mm512_srl_epi32(hi, r_drop);
      const __m512i rw = _mm512_srl_epi32(word, r_drop);
      away = _mm512_cmplt_epu32_mask(rw, d_lo);
      undecided = static_cast<__mmask16>(~away & _mm512_cmplt_epu32_mask(rw, d_hi));
      if constexpr (RBits) {
        random = _mm512_test_epi32_mask(d_lo, d_lo);
        undecided |= static_cast<__mmask16>(~random & _mm512_test_epi32_mask(d_hi, d_hi));
      } else {
        undecided |= _mm512_cmpeq_epi32_mask(word, u32(0xffffffffu));  // hi may have saturated below z
      }
      undecided &= off;
    } else {
      const auto halving = static_cast<__mmask16>(below & pow2 & _mm512_cmpgt_epu32_mask(field, emin_field));
      // T = err * 2^X, X = K + 23 - exponent(ulp) (+1 for a half-width step): exact (or, where it underflows, of
      // the right sign and below 1 in magnitude)
      __m512i xe = _mm512_sub_epi32(x_base, _mm512_max_epu32(field, one));
      xe = _mm512_mask_add_epi32(xe, halving, xe, one);
      const __m512 xf = _mm512_cvtepi32_ps(xe);
      const __m512 t_main = _mm512_scalef_ps(x.err, xf);
      const __m512 f_main = _mm512_roundscale_ps(t_main, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      const __mmask16 frac_main = _mm512_cmp_ps_mask(f_main, t_main, _CMP_NEQ_UQ);
      const __mmask16 main0 = _mm512_cmp_ps_mask(t_main, zero, _CMP_EQ_OQ);
      __m512i floor_t = _mm512_cvttps_epi32(f_main);
      __mmask16 inexact;
      if constexpr (Subnormals) {
        // the further error (|t_tiny| below T's resolution) decides where t_main is an integer; where t_main
        // underflowed, err's sign does
        const __m512 t_tiny = _mm512_mask_mov_ps(_mm512_scalef_ps(x.tiny, xf), main0, x.err);
        const __m512 f_tiny = _mm512_roundscale_ps(t_tiny, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        inexact = frac_main | _mm512_cmp_ps_mask(f_tiny, t_tiny, _CMP_NEQ_UQ);
        floor_t =
            _mm512_mask_add_epi32(floor_t, static_cast<__mmask16>(~frac_main), floor_t, _mm512_cvttps_epi32(f_tiny));
      } else {
        // no further error: where t_main underflowed to 0, floor(T) is -1 for err < 0 and 0 for err > 0
        const __mmask16 neg = _mm512_mask_cmp_ps_mask(main0, x.err, zero, _CMP_LT_OQ);
        inexact = frac_main | _mm512_mask_cmp_ps_mask(main0, x.err, zero, _CMP_NEQ_UQ);
        floor_t = _mm512_mask_sub_epi32(floor_t, neg, floor_t, one);
      }
      const __m512i z = _mm512_add_epi32(_mm512_sll_epi32(low, k_shift), floor_t);  // floor(frac * 2^32) mod 2^32
      off = static_cast<__mmask16>(_mm512_test_epi32_mask(z, z) | inexact);
      if constexpr (RBits) {
        const __m512i d = _mm512_srl_epi32(z, r_drop);
        away = _mm512_cmplt_epu32_mask(_mm512_srl_epi32(word, r_drop), d);
        random = _mm512_test_epi32_mask(d, d);
      } else {
        away = _mm512_cmplt_epu32_mask(word, z);
        undecided = _mm512_mask_cmpeq_epi32_mask(inexact, word, z);
      }
    }
    __m512i step_down = unit_bit;
    if constexpr (Subnormals) {
      const auto at_min = static_cast<__mmask16>(pow2 & _mm512_cmpeq_epi32_mask(field, emin_field));
      step_down = _mm512_mask_add_epi32(unit_bit, at_min, unit_bit, unit_bit);
    }
    const __m512i kept = _mm512_and_si512(x.ab, c.keep);
    const __m512i tz = _mm512_mask_sub_epi32(kept, below, kept, step_down);
    __m512i r = _mm512_mask_add_epi32(tz, away, tz, _mm512_mask_mov_epi32(unit_bit, below, step_down));
    if constexpr (Subnormals) {
      r = _mm512_mask_mov_epi32(r, x.in_sub, as_si(_mm512_sub_ps(as_ps(r), c.sub_f)));  // exact
    }
    const auto [sat, bad] = edge_lanes<true>(s, c.max_bits);
    __m512 v = as_ps(_mm512_or_si512(_mm512_min_epu32(r, c.max_bits), s.sign));  // r >= max iff sat
    __mmask16 use_sr = 0xffff;
    if constexpr (Mode == 2) {
      const __m512 v_near = as_ps(_mm512_or_si512(round_nearest_bits<Subnormals>(c, x), s.sign));
      use_sr = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(uf, zero, _CMP_NEQ_UQ), v_near, wf, _CMP_EQ_OQ);
      v = _mm512_mask_mov_ps(v_near, use_sr, v);
    }
    const auto flag = static_cast<__mmask16>(bad | (undecided & use_sr & ~sat));
    const auto drawn = static_cast<__mmask16>(use_sr & off & ~sat);
    out.template put<decltype(tail)::value>(k, live, wf, uf, v, sat, flag, static_cast<__mmask16>(drawn & random),
                                            static_cast<__mmask16>(drawn & ~random));
  });
  return out.finish(counts);
}

// ---- Stochastic rounding and deadzone-sr, intK, fp32 lanes ----
// The level below the exact sum, fl = floor(|x| / scale), and the remainder rem = |s| - fl * scale are exact (an FMA,
// after one correction of fl; Sterbenz); then frac * 2^32 = (rem + e) * 2^32 / scale is computed in fp32 as zf with
// |zf - frac * 2^32| <= 3 * 2^-24 * 2^32 + 2^8 + 1/2 < 2^11 = kMargin (three roundings, the wrap for a sum just
// below a level, the conversion). The draw is decided when the random word (r-bit: its top r bits) lies outside the
// uncertainty of the threshold, and flagged for the exact path otherwise (probability about 2^-20 full width;
// r-bit: only when frac * 2^r is within 2^11 * 2^(r-32) of an integer and the word's top bits equal it). intK nearest
// (deadzone-sr) compares frac with 1/2 the same way; near ties are flagged.
template <bool RBits, int Mode>
std::int64_t stochastic_integer(const BlockParams& bp, float* __restrict w, const float* __restrict u,
                                const std::uint32_t* __restrict words, unsigned char* __restrict flags,
                                std::int64_t len, BlockCounts& counts) {
  constexpr std::uint32_t kMargin = 2048;
  const __m512i margin_lo = u32(kMargin + bp.sr_span - 1);
  const IntConsts c(bp);
  const __m128i r_drop = _mm_cvtsi32_si128(RBits ? 32 - bp.sr_bits : 0);
  const __m512 one_f = _mm512_set1_ps(1.0f), zero_f = _mm512_setzero_ps();
  Out<true, RBits> out(w, flags, len);
  over_block(len, w, u, nullptr, [&](std::int64_t k, __mmask16 live, auto tail) {
    const __m512 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const __m512i word = tail ? _mm512_maskz_loadu_epi32(live, words + k) : _mm512_loadu_si512(words + k);
    const Sum s = exact_sum(wf, uf);
    const __m512 ax = as_ps(s.ab);
    const auto [sat, bad] = edge_lanes<false>(s, c.max_bits);
    // fl = floor(|s| / scale), corrected once with the exact remainder
    const __m512 q = _mm512_min_ps(_mm512_mul_ps(ax, c.inv_scale), _mm512_set1_ps(0x1p22f));
    __m512 lvl = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 rem1 = _mm512_fnmadd_ps(lvl, c.scale, ax);
    lvl = _mm512_mask_add_ps(lvl, _mm512_cmp_ps_mask(rem1, c.scale, _CMP_GE_OQ), lvl, one_f);
    lvl = _mm512_mask_sub_ps(lvl, _mm512_cmp_ps_mask(rem1, zero_f, _CMP_LT_OQ), lvl, one_f);
    const __m512 rem = _mm512_fnmadd_ps(lvl, c.scale, ax);  // exact, in [0, scale)
    const __m512 t = _mm512_add_ps(rem, s.em);              // |x| - fl * scale, rounded
    const __mmask16 on_grid = _mm512_cmp_ps_mask(t, zero_f, _CMP_EQ_OQ);
    const __mmask16 under = _mm512_cmp_ps_mask(t, zero_f, _CMP_LT_OQ);  // |x| just below the level fl
    __m512 zf = _mm512_mul_ps(t, c.c32);
    zf = _mm512_mask_add_ps(zf, under, zf, _mm512_set1_ps(0x1p32f));
    lvl = _mm512_mask_sub_ps(lvl, under, lvl, one_f);
    zf = _mm512_min_ps(_mm512_max_ps(zf, zero_f), _mm512_set1_ps(0x1p32f - 256.0f));
    const __m512i z = _mm512_cvt_roundps_epu32(zf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // a word decides "away" only when all of [word, word + span) lies below (span 1, or 2^16: packed 16-bit draws)
    const __m512i z_lo = _mm512_sub_epi32(_mm512_max_epu32(z, margin_lo), margin_lo);
    const __m512i z_hi = _mm512_add_epi32(_mm512_min_epu32(z, u32(0xffffffffu - kMargin)), u32(kMargin));
    const __m512i d_lo = _mm512_srl_epi32(z_lo, r_drop), d_hi = _mm512_srl_epi32(z_hi, r_drop);
    const __m512i rw = _mm512_srl_epi32(word, r_drop);
    const __mmask16 away = _mm512_cmplt_epu32_mask(rw, d_lo);
    __mmask16 undecided = static_cast<__mmask16>(~away & _mm512_cmplt_epu32_mask(rw, d_hi));
    __mmask16 random = 0xffff;
    if constexpr (!RBits) {
      // z_hi saturated at 2^32 - 1 < frac * 2^32 + kMargin: the all-ones word is not known to be at or above it
      undecided |= _mm512_cmpeq_epi32_mask(word, u32(0xffffffffu));
    } else {
      random = _mm512_cmpneq_epi32_mask(d_lo, _mm512_setzero_si512());
      undecided |= static_cast<__mmask16>(~random & _mm512_cmpneq_epi32_mask(d_hi, _mm512_setzero_si512()));
    }
    const auto off = static_cast<__mmask16>(~on_grid & ~sat);
    undecided &= off;
    const __m512 level_sr = _mm512_mask_add_ps(lvl, away, lvl, one_f);
    __m512 v =
        as_ps(_mm512_or_si512(_mm512_mask_mov_epi32(as_si(_mm512_mul_ps(level_sr, c.scale)), sat, c.max_bits), s.sign));
    __mmask16 use_sr = 0xffff;
    __mmask16 near_tie = 0;
    if constexpr (Mode == 2) {
      // nearest: frac > 1/2 up, < 1/2 down, == 1/2 to the even level (an exact tie: t * 2 == scale)
      const __m512i half = u32(0x80000000u);
      const __mmask16 up = _mm512_cmpgt_epu32_mask(z_lo, half);
      near_tie = static_cast<__mmask16>(~up & _mm512_cmpge_epu32_mask(z_hi, half) & off);
      const __m512 level_near = _mm512_mask_add_ps(lvl, up, lvl, one_f);
      const __m512 v_near = as_ps(
          _mm512_or_si512(_mm512_mask_mov_epi32(as_si(_mm512_mul_ps(level_near, c.scale)), sat, c.max_bits), s.sign));
      use_sr = _mm512_cmp_ps_mask(uf, zero_f, _CMP_NEQ_UQ) & _mm512_cmp_ps_mask(v_near, wf, _CMP_EQ_OQ);
      v = _mm512_mask_mov_ps(v_near, use_sr, v);
    }
    const auto flag = static_cast<__mmask16>(bad | near_tie | (undecided & use_sr));
    const auto drawn = static_cast<__mmask16>(use_sr & off);
    out.template put<decltype(tail)::value>(k, live, wf, uf, v, sat, flag, static_cast<__mmask16>(drawn & random),
                                            static_cast<__mmask16>(drawn & ~random));
  });
  return out.finish(counts);
}

}  // namespace

bool avx512_blocks_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

namespace avx512 {

std::int64_t nearest_block_float(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                 std::int64_t len, BlockCounts& counts) {
  return bp.sub_limit > 0 ? nearest_float<true, false>(bp, nullptr, w, u, flags, len, counts)
                          : nearest_float<false, false>(bp, nullptr, w, u, flags, len, counts);
}

std::int64_t nearest_block_integer(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                   std::int64_t len, BlockCounts& counts) {
  return nearest_integer<false>(bp, nullptr, w, u, flags, len, counts);
}

std::int64_t master_block_float(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                std::int64_t len, BlockCounts& counts) {
  return bp.sub_limit > 0 ? nearest_float<true, true>(bp, master, w, u, flags, len, counts)
                          : nearest_float<false, true>(bp, master, w, u, flags, len, counts);
}

std::int64_t master_block_integer(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                  std::int64_t len, BlockCounts& counts) {
  return nearest_integer<true>(bp, master, w, u, flags, len, counts);
}

std::int64_t stochastic_block_float(const BlockParams& bp, int mode, float* w, const float* u,
                                    const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                    BlockCounts& counts) {
  const bool sub = bp.sub_limit > 0;
  // The window loop, unless r-bit SR resolves steps so fine that a sum just off the grid could be drawn away from
  // it (W >= 2^(32 - r)): there its flags would not be rare, and the loop computing floor(frac * 2^32) runs.
  const int kind = bp.sr_bits == 0 ? 0 : ((((1u << bp.k_shift) + 2u) >> (32 - bp.sr_bits)) == 0u) ? 1 : 2;
#define WB_SR(S, M)                                                                    \
  switch (kind) {                                                                      \
    case 0:                                                                            \
      return stochastic_float<S, false, M, true>(bp, w, u, words, flags, len, counts); \
    case 1:                                                                            \
      return stochastic_float<S, true, M, true>(bp, w, u, words, flags, len, counts);  \
    default:                                                                           \
      return stochastic_float<S, true, M, false>(bp, w, u, words, flags, len, counts); \
  }
  if (mode == 1) {
    if (sub) {
      WB_SR(true, 1)
    }
    WB_SR(false, 1)
  }
  if (sub) {
    WB_SR(true, 2)
  }
  WB_SR(false, 2)
#undef WB_SR
}

std::int64_t stochastic_block_integer(const BlockParams& bp, int mode, float* w, const float* u,
                                      const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                      BlockCounts& counts) {
  const bool rbits = bp.sr_bits > 0;
  if (mode == 1) {
    return rbits ? stochastic_integer<true, 1>(bp, w, u, words, flags, len, counts)
                 : stochastic_integer<false, 1>(bp, w, u, words, flags, len, counts);
  }
  return rbits ? stochastic_integer<true, 2>(bp, w, u, words, flags, len, counts)
               : stochastic_integer<false, 2>(bp, w, u, words, flags, len, counts);
}

// 64-bit lanes, one group each, four vectors (32 groups) at a time so that the rounds' multiplications overlap. A
// lane's high half carries junk between rounds: vpmuludq reads only the low halves, and only those are stored.
void philox_groups(std::uint32_t k0, std::uint32_t k1, std::uint32_t step, std::uint32_t tensor, std::uint64_t g0,
                   std::int64_t groups, std::uint32_t* out) {
  constexpr int kV = 4;
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
  const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i first4 = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);  // groups 0-3 of a vector: [a0 b0 a1 b1 ...]
  const __m512i last4 = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
  for (std::int64_t j = 0; j < groups; j += 8 * kV) {
    __m512i c0[kV], c1[kV], c2[kV], c3[kV];
    for (int v = 0; v < kV; ++v) {
      const __m512i g =
          _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(g0 + static_cast<std::uint64_t>(j + 8 * v))), iota);
      c0[v] = g;
      c1[v] = _mm512_and_si512(_mm512_srli_epi64(g, 32), _mm512_set1_epi64(0x3fff));
      c2[v] = _mm512_set1_epi64(step);
      c3[v] = _mm512_set1_epi64(tensor);
    }
    std::uint32_t ka = k0, kb = k1;
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
      const __m512i key_a = _mm512_set1_epi64(ka), key_b = _mm512_set1_epi64(kb);
      for (int v = 0; v < kV; ++v) {
        const __m512i p0 = _mm512_mul_epu32(c0[v], m0);
        const __m512i p1 = _mm512_mul_epu32(c2[v], m1);
        c0[v] = _mm512_ternarylogic_epi32(_mm512_shuffle_epi32(p1, _MM_PERM_CDAB), c1[v], key_a, 0x96);
        c1[v] = p1;
        c2[v] = _mm512_ternarylogic_epi32(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), c3[v], key_b, 0x96);
        c3[v] = p0;
      }
      ka += 0x9E3779B9u;
      kb += 0xBB67AE85u;
    }
    for (int v = 0; v < kV; ++v) {
      // 32-bit lanes: a = (c0, c1) and b = (c2, c3) of each group, then groups in order
      const __m512i a = _mm512_mask_blend_epi32(0xaaaa, c0[v], _mm512_shuffle_epi32(c1[v], _MM_PERM_CDAB));
      const __m512i b = _mm512_mask_blend_epi32(0xaaaa, c2[v], _mm512_shuffle_epi32(c3[v], _MM_PERM_CDAB));
      std::uint32_t* o = out + 4 * (j + 8 * v);
      _mm512_storeu_si512(o, _mm512_permutex2var_epi64(a, first4, b));
      _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi64(a, last4, b));
    }
  }
}

}  // namespace avx512
}  // namespace wbaudit::sim::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
#else
namespace wbaudit::sim::detail {
bool avx512_blocks_supported() {
  return false;
}
}  // namespace wbaudit::sim::detail
#endif
