// The write-back block loops written with AVX2 + FMA intrinsics (see writeback_blocks.hpp for the contract, and
// writeback_blocks.cpp for the portable loops and the reasoning behind each rounding). They are used when the CPU has
// AVX2 and FMA but not AVX-512 (avx2_blocks_supported; most AMD EPYC / Zen and pre-2017 Intel machines), and give
// exactly the portable loops' results on every coordinate they decide; a coordinate they cannot decide is flagged for
// the exact scalar path like there (tests run every implementation the CPU supports).
//
// They are the AVX-512 loops (writeback_blocks_avx512.cpp) translated to 8-lane vectors: a decision is a vector of
// all-ones / all-zero 32-bit lanes instead of a mask register, a masked operation a blend or an and, an unsigned
// comparison a signed one on sign-flipped operands, roundscale a round, scalef is not needed (the window SR loop
// never scales), and the conversion to unsigned 32-bit integers goes through 2^31. Events are counted in vector
// lanes by subtracting the all-ones decisions; flags are written only for a vector that has one.
//
// Covered: nearest (floating formats and intK in fp32 lanes), the master copy in fp32 lanes, stochastic and
// deadzone-sr in fp32 lanes for floating formats (the "window" loop: full width, and r-bit SR unless the step
// resolution 2^(32-r) is finer than the window, where the portable loops run) and for intK with a scale in
// [2^-90, 2^90], and Philox4x32-10 in 64-bit lanes.
//
// Everything in this file is compiled for AVX2 + FMA (the pragma below) and has internal linkage, apart from the entry
// points declared in writeback_blocks.hpp, which callers reach only after checking the CPU.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sim/precision/writeback_blocks.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace wbaudit::sim::detail {
namespace {

#define WB_INLINE [[gnu::always_inline]] inline
// The loop bodies (lambdas over_block calls four times): without the attribute GCC kept some of them out of line (a
// call per vector, its values passed through memory: deadzone-sr and r-bit SR of e4m3 and e2m1 ran 20% slower).
#define WB_BODY __attribute__((always_inline))

using V = __m256i;  // 8 lanes of 32 bits; a decision: all ones (true) or zero

WB_INLINE __m256 as_ps(V x) {
  return _mm256_castsi256_ps(x);
}
WB_INLINE V as_si(__m256 x) {
  return _mm256_castps_si256(x);
}
WB_INLINE V u32(std::uint32_t x) {
  return _mm256_set1_epi32(static_cast<int>(x));
}
WB_INLINE V zero_si() {
  return _mm256_setzero_si256();
}
WB_INLINE V ones() {
  return _mm256_set1_epi32(-1);
}
WB_INLINE V and_(V a, V b) {
  return _mm256_and_si256(a, b);
}
WB_INLINE V or_(V a, V b) {
  return _mm256_or_si256(a, b);
}
WB_INLINE V andnot(V a, V b) {  // ~a & b
  return _mm256_andnot_si256(a, b);
}
WB_INLINE V not_(V a) {
  return _mm256_xor_si256(a, ones());
}
WB_INLINE V eq(V a, V b) {
  return _mm256_cmpeq_epi32(a, b);
}
WB_INLINE V lt_u(V a, V b) {  // a < b, unsigned
  const V s = u32(0x80000000u);
  return _mm256_cmpgt_epi32(_mm256_xor_si256(b, s), _mm256_xor_si256(a, s));
}
WB_INLINE V gt_u(V a, V b) {
  return lt_u(b, a);
}
WB_INLINE V ge_u(V a, V b) {
  return eq(_mm256_max_epu32(a, b), a);
}
// Comparisons of floats as decisions (ordered unless _UQ).
template <int Pred>
WB_INLINE V cmp(__m256 a, __m256 b) {
  return as_si(_mm256_cmp_ps(a, b, Pred));
}
WB_INLINE V sel(V m, V a, V b) {  // m ? a : b
  return _mm256_blendv_epi8(b, a, m);
}
WB_INLINE __m256 sel_ps(V m, __m256 a, __m256 b) {
  return _mm256_blendv_ps(b, a, as_ps(m));
}
WB_INLINE int any(V m) {
  return _mm256_movemask_ps(as_ps(m));
}

// The exact sum w + u: fp32 sum s, its magnitude bits ab and sign bit, and (em(), TwoSum) the error in the direction
// of |s| (as sum32 in writeback_blocks.cpp). The error is computed where it is asked for: the nearest loop needs it
// only for a vector with a midpoint or a lane at the format's max (rare), and saves its five operations elsewhere.
struct Sum {
  V ab, sign;
  __m256 s, wf, uf;
  WB_INLINE __m256 em() const {
    const __m256 bb = _mm256_sub_ps(s, wf);
    const __m256 e = _mm256_add_ps(_mm256_sub_ps(wf, _mm256_sub_ps(s, bb)), _mm256_sub_ps(uf, bb));
    return as_ps(_mm256_xor_si256(as_si(e), sign));
  }
};
// A value known exactly (the master copy's m): its own sum, with em() 0 (no addition: -0 keeps its sign).
WB_INLINE Sum exact_value(__m256 m) {
  const V abs_mask = u32(0x7fffffffu);
  Sum r;
  r.s = m;
  r.wf = m;
  r.uf = _mm256_setzero_ps();
  r.ab = and_(as_si(m), abs_mask);
  r.sign = andnot(abs_mask, as_si(m));
  return r;
}
WB_INLINE Sum exact_sum(__m256 wf, __m256 uf) {
  const V abs_mask = u32(0x7fffffffu);
  Sum r;
  r.s = _mm256_add_ps(wf, uf);
  r.wf = wf;
  r.uf = uf;
  r.ab = and_(as_si(r.s), abs_mask);
  r.sign = andnot(abs_mask, as_si(r.s));
  return r;
}

// sat and bad lanes (as edge_lanes in writeback_blocks_avx512.cpp), both within |s| >= max finite: computed only in a
// vector that has such a lane (Branch; `any` says whether it had), or always. ab < 2^31: signed comparisons serve.
struct Edge {
  V sat, bad;
  bool any;
};
template <bool Branch>
WB_INLINE Edge edge_lanes(const Sum& s, V max_bits) {
  Edge r{zero_si(), zero_si(), true};
  if constexpr (Branch) {
    r.any = any(_mm256_cmpgt_epi32(s.ab, _mm256_sub_epi32(max_bits, u32(1)))) != 0;  // |s| >= max finite
  }
  if (r.any) {
    const V at_max = eq(s.ab, max_bits);
    r.sat = or_(_mm256_cmpgt_epi32(s.ab, max_bits), and_(at_max, cmp<_CMP_GT_OQ>(s.em(), _mm256_setzero_ps())));
    r.bad = _mm256_cmpgt_epi32(s.ab, u32(0x7f7fffffu));
  }
  return r;
}

// The end of every loop body (as Out in writeback_blocks_avx512.cpp): writes v back, counts the events of the lanes
// decided, records the flagged lanes (their w is left as it was). Counts are kept in vector lanes (at most
// kWritebackBlock / 8 each); in a full vector every lane is counted and a flagged lane's events are taken back (rare),
// in the block's last, partial vector only the live lanes count.
template <bool Sr, bool RBits>
struct Out {
  float* w;
  unsigned char* flags;
  std::int64_t len;
  std::int64_t flagged = 0;
  V nonzero, erased, applied, saturated, random, truncated;
  Out(float* w_, unsigned char* flags_, std::int64_t len_)
      : w(w_),
        flags(flags_),
        len(len_),
        nonzero(zero_si()),
        erased(zero_si()),
        applied(zero_si()),
        saturated(zero_si()),
        random(zero_si()),
        truncated(zero_si()) {}
  WB_INLINE static void up(V& acc, V m) { acc = _mm256_sub_epi32(acc, m); }
  WB_INLINE static void down(V& acc, V m) { acc = _mm256_add_epi32(acc, m); }
  WB_INLINE void note(std::int64_t k, int bits) {
    if (flagged == 0) {
      std::memset(flags, 0, static_cast<std::size_t>(len));
    }
    for (int i = 0; i < 8; ++i) {
      if ((bits >> i) & 1) {
        flags[k + i] = 1;
      }
    }
    flagged += __builtin_popcount(static_cast<unsigned>(bits));
  }
  // edge.any false: sat is known to be zero in this vector (not counted)
  template <bool Tail>
  WB_INLINE void put(std::int64_t k, V live, __m256 wf, __m256 uf, __m256 v, const Edge& edge, V flag, V rnd = V{},
                     V trunc = V{}) {
    const V sat = edge.sat;
    const __m256 zero = _mm256_setzero_ps();
    if constexpr (!Tail) {
      _mm256_storeu_ps(w + k, v);
      const V nz = cmp<_CMP_NEQ_UQ>(uf, zero);
      const V changed = cmp<_CMP_NEQ_UQ>(v, wf);
      const V er = andnot(changed, nz);
      up(nonzero, nz);
      up(erased, er);
      up(applied, changed);
      if (edge.any) {
        up(saturated, sat);
      }
      if constexpr (Sr) {
        up(random, rnd);
      }
      if constexpr (RBits) {
        up(truncated, trunc);
      }
      const int fb = any(flag);
      if (fb != 0) [[unlikely]] {
        _mm256_storeu_ps(w + k, sel_ps(flag, wf, v));
        down(nonzero, and_(nz, flag));
        down(erased, and_(er, flag));
        down(applied, and_(changed, flag));
        down(saturated, and_(sat, flag));
        if constexpr (Sr) {
          down(random, and_(rnd, flag));
        }
        if constexpr (RBits) {
          down(truncated, and_(trunc, flag));
        }
        note(k, fb);
      }
    } else {
      const V f = and_(flag, live);
      const V ok = andnot(flag, live);
      _mm256_maskstore_ps(w + k, ok, v);
      const V nz = and_(ok, cmp<_CMP_NEQ_UQ>(uf, zero));
      const V changed = and_(ok, cmp<_CMP_NEQ_UQ>(v, wf));
      up(nonzero, nz);
      up(erased, andnot(changed, nz));
      up(applied, changed);
      up(saturated, and_(sat, ok));
      if constexpr (Sr) {
        up(random, and_(rnd, ok));
      }
      if constexpr (RBits) {
        up(truncated, and_(trunc, ok));
      }
      const int fb = any(f);
      if (fb != 0) {
        note(k, fb);
      }
    }
  }
  static std::int64_t sum(V x) {
    alignas(32) std::int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<V*>(lanes), x);
    std::int64_t t = 0;
    for (const std::int32_t l : lanes) {
      t += l;
    }
    return t;
  }
  std::int64_t finish(BlockCounts& c) const {
    c.nonzero += sum(nonzero);
    c.erased += sum(erased);
    c.applied += sum(applied);
    c.saturated += sum(saturated);
    c.random += sum(random);
    c.truncated += sum(truncated);
    return flagged;
  }
};

WB_INLINE __m256 load_ps(const float* p, V live, bool tail) {
  return tail ? _mm256_maskload_ps(p, live) : _mm256_loadu_ps(p);
}
WB_INLINE V load_words(const std::uint32_t* p, V live, bool tail) {
  return tail ? _mm256_maskload_epi32(reinterpret_cast<const int*>(p), live)
              : _mm256_loadu_si256(reinterpret_cast<const V*>(p));
}

// Prefetch distance in coordinates: one block ahead (see writeback_blocks_avx512.cpp).
constexpr std::int64_t kPrefetch = kWritebackBlock;

// Runs body(k, live, tail) over the block: full vectors (prefetching the streams a, b and c, or null, once per cache
// line kPrefetch coordinates ahead; prefetches never fault), then the last partial one with a lane mask.
template <class Body>
WB_INLINE void over_block(std::int64_t len, const float* a, const float* b, const float* c, Body&& body) {
  std::int64_t k = 0;
  for (; k + 16 <= len; k += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(a + k + kPrefetch), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + k + kPrefetch), _MM_HINT_T0);
    if (c != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(c + k + kPrefetch), _MM_HINT_T0);
    }
    body(k, ones(), std::false_type{});
    body(k + 8, ones(), std::false_type{});
  }
  for (; k + 8 <= len; k += 8) {
    body(k, ones(), std::false_type{});
  }
  if (k < len) {
    const V iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    body(k, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(len - k)), iota), std::true_type{});
  }
}

// The value a nearest loop rounds: the exact sum w + u, or with a master copy (Master) m = master + u in fp32 (exact
// by definition, no error term); then a lane whose w is NaN/inf is flagged too, and master is written where decided.
template <bool Master>
struct Rounded {
  Sum s;
  __m256 m, old;
  V bad_w;
  WB_INLINE Rounded(const float* master, std::int64_t k, V live, bool tail, __m256 wf, __m256 uf) : bad_w(zero_si()) {
    if constexpr (Master) {
      old = load_ps(master + k, live, tail);
      m = _mm256_add_ps(old, uf);
      s = exact_value(m);
      const V abs_mask = u32(0x7fffffffu);
      bad_w = _mm256_cmpgt_epi32(and_(as_si(wf), abs_mask), u32(0x7f7fffffu));
    } else {
      s = exact_sum(wf, uf);
    }
  }
  // Writes the master copy of the decided lanes (a masked store only in the block's last vector: on AMD CPUs
  // vmaskmovps stores are slow).
  template <bool Tail>
  WB_INLINE void put_master(float* master, std::int64_t k, V live, V flag) const {
    if constexpr (Master) {
      if constexpr (Tail) {
        _mm256_maskstore_ps(master + k, andnot(flag, live), m);
      } else {
        _mm256_storeu_ps(master + k, any(flag) != 0 ? sel_ps(flag, old, m) : m);
      }
    }
  }
};

// ---- Nearest, floating formats, fp32 lanes (nearest_float_body in writeback_blocks.cpp) ----
struct FloatRound {
  V mask, keep, half_m1, half, lsb, tie_bits, max_bits, max_m1, sub_bits;
  __m256 sub_f;
  explicit FloatRound(const BlockParams& bp)
      : mask(u32(bp.mask)),
        keep(u32(~bp.mask)),
        half_m1(u32(bp.half_m1)),
        half(u32(bp.mask != 0 ? bp.half_m1 + 1u : 0u)),  // half the format's unit in the dropped bits (fp32: none)
        lsb(u32(bp.lsb_mask)),
        tie_bits(u32(bp.tie_bits)),
        max_bits(u32(bp.max_bits)),
        max_m1(u32(bp.max_bits - 1u)),
        sub_bits(u32(__builtin_bit_cast(std::uint32_t, bp.sub_limit))),
        sub_f(_mm256_set1_ps(bp.sub_limit)) {}
};

// |s| on the format's grid: the subnormal lanes (Subnormals) shifted by adding the min normal, and err(), the error
// of the value held (the shift's where it was inexact, else the sum's), computed where it is asked for.
template <bool Subnormals>
struct Shifted {
  V ab;
  V in_sub, two;
  __m256 e2;
  const Sum* sum;
  WB_INLINE __m256 err() const {
    if constexpr (Subnormals) {
      return sel_ps(two, e2, sum->em());
    } else {
      return sum->em();
    }
  }
};
template <bool Subnormals>
WB_INLINE Shifted<Subnormals> shift_subnormal(const FloatRound& c, const Sum& s) {
  Shifted<Subnormals> r{s.ab, zero_si(), zero_si(), _mm256_setzero_ps(), &s};
  if constexpr (Subnormals) {
    r.in_sub = _mm256_cmpgt_epi32(c.sub_bits, s.ab);  // both below 2^31
    const __m256 ax = as_ps(s.ab);
    const __m256 a2 = _mm256_add_ps(ax, c.sub_f);
    r.e2 = _mm256_sub_ps(ax, _mm256_sub_ps(a2, c.sub_f));
    r.ab = sel(r.in_sub, as_si(a2), s.ab);
    r.two = and_(r.in_sub, cmp<_CMP_NEQ_UQ>(r.e2, _mm256_setzero_ps()));
  }
  return r;
}

// The nearest format value's magnitude bits (saturated to max finite).
template <bool Subnormals>
WB_INLINE V round_nearest_bits(const FloatRound& c, const Shifted<Subnormals>& x) {
  const __m256 zero = _mm256_setzero_ps();
  const V tie = eq(and_(x.ab, c.mask), c.tie_bits);
  V r;
  if (any(tie) != 0) [[unlikely]] {  // |s| is a midpoint: moved one fp32 step toward the exact sum
    const __m256 err = x.err();
    const V up = and_(tie, cmp<_CMP_GT_OQ>(err, zero));
    const V down = and_(tie, cmp<_CMP_LT_OQ>(err, zero));
    const V a = _mm256_add_epi32(_mm256_sub_epi32(x.ab, up), down);  // up/down are -1 where set
    const V odd = _mm256_min_epu32(and_(a, c.lsb), u32(1));          // 1 where the kept lowest bit is set
    r = and_(_mm256_add_epi32(_mm256_add_epi32(a, c.half_m1), odd), c.keep);
  } else {  // no midpoint (the rule): half up is nearest
    r = and_(_mm256_add_epi32(x.ab, c.half), c.keep);
  }
  if constexpr (Subnormals) {
    r = sel(x.in_sub, as_si(_mm256_sub_ps(as_ps(r), c.sub_f)), r);  // exact
  }
  return _mm256_min_epu32(r, c.max_bits);
}

template <bool Subnormals, bool Master, bool Fast>
std::int64_t nearest_float(const BlockParams& bp, float* __restrict master, float* __restrict w,
                           const float* __restrict u, unsigned char* __restrict flags, std::int64_t len,
                           BlockCounts& counts) {
  const FloatRound c(bp);
  Out<false, false> out(w, flags, len);
  over_block(len, w, u, master, [&](std::int64_t k, V live, auto tail) WB_BODY {
    const __m256 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const Rounded<Master> in(master, k, live, tail, wf, uf);
    const Sum& s = in.s;
    // The common vector (Fast: formats whose weights are rarely in their subnormal range): no lane at a midpoint of the
    // format's grid, at or above its max finite value, or (Subnormals) in its subnormal range. Rounding half up on the
    // magnitude bits is then nearest (no tie to break, no carry past max finite: the value above a magnitude below it
    // is at most it), one add and one and.
    V rare = or_(eq(and_(s.ab, c.mask), c.tie_bits), _mm256_cmpgt_epi32(s.ab, c.max_m1));
    if constexpr (Subnormals) {
      rare = or_(rare, _mm256_cmpgt_epi32(c.sub_bits, s.ab));
    }
    if (Fast && any(rare) == 0) [[likely]] {
      const __m256 v = as_ps(or_(and_(_mm256_add_epi32(s.ab, c.half), c.keep), s.sign));
      out.template put<decltype(tail)::value>(k, live, wf, uf, v, Edge{zero_si(), zero_si(), false}, in.bad_w);
      in.template put_master<decltype(tail)::value>(master, k, live, in.bad_w);
      return;
    }
    V r;
    if (Subnormals && any(_mm256_cmpgt_epi32(c.sub_bits, s.ab)) != 0) {
      r = round_nearest_bits<Subnormals>(c, shift_subnormal<Subnormals>(c, s));
    } else {  // no lane in the format's subnormal range: the plain rounding gives the same bits, with less work
      r = round_nearest_bits<false>(c, shift_subnormal<false>(c, s));
    }
    const __m256 v = as_ps(or_(r, s.sign));
    const Edge edge = edge_lanes<true>(s, c.max_bits);
    const V flag = or_(edge.bad, in.bad_w);
    out.template put<decltype(tail)::value>(k, live, wf, uf, v, edge, flag);
    in.template put_master<decltype(tail)::value>(master, k, live, flag);
  });
  return out.finish(counts);
}

// ---- Nearest, intK, fp32 lanes (nearest_integer_body in writeback_blocks.cpp) ----
struct IntConsts {
  __m256 scale, inv_scale, tie_guard, c32;
  V max_bits;
  explicit IntConsts(const BlockParams& bp)
      : scale(_mm256_set1_ps(bp.scale)),
        inv_scale(_mm256_set1_ps(bp.inv_scale)),
        tie_guard(_mm256_set1_ps(bp.tie_guard)),
        c32(_mm256_set1_ps(bp.scale_c32)),
        max_bits(u32(bp.max_bits)) {}
};

template <bool Master>
std::int64_t nearest_integer(const BlockParams& bp, float* __restrict master, float* __restrict w,
                             const float* __restrict u, unsigned char* __restrict flags, std::int64_t len,
                             BlockCounts& counts) {
  const IntConsts c(bp);
  Out<false, false> out(w, flags, len);
  over_block(len, w, u, master, [&](std::int64_t k, V live, auto tail) WB_BODY {
    const __m256 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const Rounded<Master> in(master, k, live, tail, wf, uf);
    const Sum& s = in.s;
    const __m256 ax = as_ps(s.ab);
    const __m256 y = _mm256_min_ps(_mm256_mul_ps(ax, c.inv_scale), _mm256_set1_ps(0x1p22f));
    const __m256 n = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_mul_ps(n, c.scale);
    const __m256 dist = as_ps(and_(as_si(_mm256_add_ps(_mm256_sub_ps(ax, r), s.em())), u32(0x7fffffffu)));
    const Edge edge = edge_lanes<false>(s, c.max_bits);
    const V sat = edge.sat, bad = edge.bad;
    const V near_tie = cmp<_CMP_GE_OQ>(dist, c.tie_guard);
    const V flag = or_(or_(bad, in.bad_w), andnot(sat, near_tie));
    const __m256 v = as_ps(or_(_mm256_min_epu32(as_si(r), c.max_bits), s.sign));  // r >= max iff sat
    out.template put<decltype(tail)::value>(k, live, wf, uf, v, edge, flag);
    in.template put_master<decltype(tail)::value>(master, k, live, flag);
  });
  return out.finish(counts);
}

// ---- Stochastic rounding (Mode 1) and deadzone-sr (Mode 2), floating formats, fp32 lanes: the window loop ----
// (stochastic_float<..., Window = true> in writeback_blocks_avx512.cpp): floor(frac * 2^32) = z_s + floor(T) with
// z_s = low * 2^K (2^32 - 1 when the exact sum lies just below |s| on the grid) and |floor(T)| <= 2^K + 1 < W; the
// draw is decided from z_s unless the word (r-bit: its top bits) falls within W of it, and flagged otherwise.
template <bool Subnormals, bool RBits, int Mode, bool Split = false, bool Span = false>
std::int64_t stochastic_float(const BlockParams& bp, float* __restrict w, const float* __restrict u,
                              const std::uint32_t* __restrict words, unsigned char* __restrict flags, std::int64_t len,
                              BlockCounts& counts) {
  const FloatRound c(bp);
  const V unit_bit = u32(bp.mask + 1);
  const V window = u32((1u << bp.k_shift) + 2u);
  const V span_m1 = u32(bp.sr_span - 1);
  const __m128i k_shift = _mm_cvtsi32_si128(static_cast<int>(bp.k_shift));
  const __m128i r_drop = _mm_cvtsi32_si128(RBits ? 32 - bp.sr_bits : 0);
  const __m256 zero = _mm256_setzero_ps();
  Out<true, RBits> out(w, flags, len);
  struct Decided {
    __m256 v;
    V flag, drawn;
  };
  // Edges false: no lane of the vector is at or above max finite (no saturation, no NaN/inf: known at compile time)
  const auto decide = [&]<bool Sub, bool Edges>(std::bool_constant<Sub>, std::bool_constant<Edges>, const Sum& s,
                                                __m256 wf, __m256 uf, V word, V& none, Edge& edge) WB_BODY {
    const Shifted<Sub> x = shift_subnormal<Sub>(c, s);
    const __m256 x_err = x.err();
    const V low = and_(x.ab, c.mask);
    const V low0 = eq(low, zero_si());
    const V below = and_(low0, cmp<_CMP_LT_OQ>(x_err, zero));
    const V zs = or_(_mm256_sll_epi32(low, k_shift), below);
    const V off = not_(and_(low0, cmp<_CMP_EQ_OQ>(x_err, zero)));
    const V wnd = and_(cmp<_CMP_NEQ_UQ>(x_err, zero), window);  // no window where the sum is exact in fp32
    // Span (packed 16-bit draws): a word decides "away" only when all of [word, word + span) lies below z
    V wnd_lo = wnd;
    if constexpr (Span) {
      wnd_lo = _mm256_add_epi32(wnd, span_m1);
    }
    const V lo = _mm256_sub_epi32(_mm256_max_epu32(zs, wnd_lo), wnd_lo);
    const V hi = _mm256_add_epi32(_mm256_min_epu32(zs, _mm256_sub_epi32(ones(), wnd)), wnd);
    const V d_lo = RBits ? _mm256_srl_epi32(lo, r_drop) : lo, d_hi = RBits ? _mm256_srl_epi32(hi, r_drop) : hi;
    const V rw = RBits ? _mm256_srl_epi32(word, r_drop) : word;
    // unsigned comparisons as max + equality: not_away = rw >= d_lo, undecided = rw >= d_lo && rw < d_hi
    const V not_away = eq(_mm256_max_epu32(rw, d_lo), rw);
    V undecided = andnot(eq(_mm256_max_epu32(rw, d_hi), rw), not_away);
    if constexpr (RBits) {
      // none: the r-bit probability truncates to 0 (no random draw); undecided where it may be 0 or 1
      none = eq(d_lo, zero_si());
      undecided = or_(undecided, andnot(eq(d_hi, zero_si()), none));
    } else {
      undecided = or_(undecided, eq(word, ones()));  // hi may have saturated below z
    }
    undecided = and_(undecided, off);
    V step_down = unit_bit;
    if constexpr (Sub) {
      // |x| is the min normal (a power of two with the exponent field emin_field: only the min normal itself)
      const V at_min = eq(x.ab, c.sub_bits);
      step_down = _mm256_add_epi32(unit_bit, and_(at_min, unit_bit));
    }
    const V kept = and_(x.ab, c.keep);
    const V tz = _mm256_sub_epi32(kept, and_(below, step_down));
    V r = _mm256_add_epi32(tz, andnot(not_away, sel(below, step_down, unit_bit)));
    if constexpr (Sub) {
      r = sel(x.in_sub, as_si(_mm256_sub_ps(as_ps(r), c.sub_f)), r);  // exact
    }
    V sat = zero_si(), bad = zero_si();
    __m256 v;
    if constexpr (Edges) {
      edge = edge_lanes<true>(s, c.max_bits);
      sat = edge.sat;
      bad = edge.bad;
      v = as_ps(or_(_mm256_min_epu32(r, c.max_bits), s.sign));  // r >= max iff sat
    } else {
      edge = Edge{zero_si(), zero_si(), false};
      v = as_ps(or_(r, s.sign));  // |x| < max finite: the value away from it is at most max finite
    }
    V use_sr = ones();
    if constexpr (Mode == 2) {
      const __m256 v_near = as_ps(or_(round_nearest_bits<Sub>(c, x), s.sign));
      use_sr = and_(cmp<_CMP_NEQ_UQ>(uf, zero), cmp<_CMP_EQ_OQ>(v_near, wf));
      v = sel_ps(use_sr, v, v_near);
    }
    const V flag = or_(bad, andnot(sat, and_(undecided, use_sr)));
    const V drawn = andnot(sat, and_(use_sr, off));
    return Decided{v, flag, drawn};
  };
  // Split (formats whose weights are rarely subnormal): a vector with no lane at or below the format's min normal is
  // decided without the subnormal work (Sub false: no shift, no wider step down from the min normal; the same bits).
  constexpr bool kSplit = Subnormals && Split;
  constexpr bool kCommonSub = Subnormals && !kSplit;  // the subnormal work in a vector with no rare lane
  const V sub_or_min = _mm256_add_epi32(c.sub_bits, u32(1));
  over_block(len, w, u, nullptr, [&](std::int64_t k, V live, auto tail) WB_BODY {
    const __m256 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const V word = load_words(words + k, live, tail);
    const Sum s = exact_sum(wf, uf);
    Edge edge;
    V none = zero_si();
    Decided d;
    // one test for the rare lanes: at or above max finite, or (Split) at or below the format's min normal
    const V high = _mm256_cmpgt_epi32(s.ab, c.max_m1);
    const V rare = kSplit ? or_(high, _mm256_cmpgt_epi32(sub_or_min, s.ab)) : high;
    if (any(rare) == 0) [[likely]] {
      d = decide(std::bool_constant<kCommonSub>{}, std::false_type{}, s, wf, uf, word, none, edge);
    } else if (!kSplit || any(_mm256_cmpgt_epi32(sub_or_min, s.ab)) != 0) {
      d = decide(std::bool_constant<Subnormals>{}, std::true_type{}, s, wf, uf, word, none, edge);
    } else {
      d = decide(std::false_type{}, std::true_type{}, s, wf, uf, word, none, edge);
    }
    out.template put<decltype(tail)::value>(k, live, wf, uf, d.v, edge, d.flag, andnot(none, d.drawn),
                                            and_(none, d.drawn));
  });
  return out.finish(counts);
}

// ---- Stochastic rounding and deadzone-sr, intK, fp32 lanes (stochastic_integer in writeback_blocks_avx512.cpp) ----
// As there, except for the level: n = the nearest integer to |s| * (1 / scale) (rounded twice, so n may be one off
// the nearest level near a midpoint, never more: no correction), and rem = |s| - n * scale by an FMA is exact (rem and
// both terms are multiples of the smaller of ulp(|s|) and scale's last bit, and |rem| <= scale / 2 plus a hair: fewer
// than 24 significant bits; for n = 0, rem = |s|). t = rem + e (rounded) places |x| above level n - 1 with
// frac = 1 + t / scale where t < 0, above level n with frac = t / scale otherwise: the "under" wrap of the AVX-512
// loop, now for any t < 0. The threshold frac * 2^32 is computed as half of it in fp32 (t * c32 / 2, then 2^31 added
// for the wrap: halving is exact), then z = twice the truncation (below 2^31: a signed conversion serves, and it does
// not depend on the rounding mode). |t| <= scale / 2 keeps each rounding at most as large as there (t * c32 / 2 <=
// 2^30, and the wrapped sum lies in [2^30, 2^31)), so |z - frac * 2^32| <= 3 * 2^8 + 2^8 + 2 < 2048 = kMargin still
// (the derivation above stochastic_integer in writeback_blocks_avx512.cpp, with 2 for its 1/2); only which coordinates
// are flagged for the exact path can differ from there, never a result. The two levels a value rounds to are multiplied
// out beside that chain and one is selected at its end.
template <bool RBits, int Mode>
std::int64_t stochastic_integer(const BlockParams& bp, float* __restrict w, const float* __restrict u,
                                const std::uint32_t* __restrict words, unsigned char* __restrict flags,
                                std::int64_t len, BlockCounts& counts) {
  constexpr std::uint32_t kMargin = 2048;
  const V margin_lo = u32(kMargin + bp.sr_span - 1);
  const IntConsts c(bp);
  const __m128i r_drop = _mm_cvtsi32_si128(RBits ? 32 - bp.sr_bits : 0);
  const __m256 one_f = _mm256_set1_ps(1.0f), zero_f = _mm256_setzero_ps();
  const __m256 c32_half = _mm256_mul_ps(c.c32, _mm256_set1_ps(0.5f));
  Out<true, RBits> out(w, flags, len);
  over_block(len, w, u, nullptr, [&](std::int64_t k, V live, auto tail) WB_BODY {
    const __m256 wf = load_ps(w + k, live, tail), uf = load_ps(u + k, live, tail);
    const V word = load_words(words + k, live, tail);
    const Sum s = exact_sum(wf, uf);
    const __m256 ax = as_ps(s.ab);
    const Edge edge = edge_lanes<false>(s, c.max_bits);
    const V sat = edge.sat, bad = edge.bad;
    // the nearest level n to |s| / scale (no correction: any level within one of it serves), the exact remainder
    // |s| - n * scale (|rem| <= scale / 2 and a hair), then t = |x| - n * scale rounded; |x| lies above level n - 1
    // with frac = 1 + t / scale where t < 0, above level n with frac = t / scale otherwise
    const __m256 q = _mm256_min_ps(_mm256_mul_ps(ax, c.inv_scale), _mm256_set1_ps(0x1p22f));
    __m256 lvl = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 rem = _mm256_fnmadd_ps(lvl, c.scale, ax);  // exact
    const __m256 t = _mm256_add_ps(rem, s.em());            // |x| - n * scale, rounded
    const V on_grid = cmp<_CMP_EQ_OQ>(t, zero_f);
    const V under = cmp<_CMP_LT_OQ>(t, zero_f);  // |x| below the level n
    lvl = _mm256_sub_ps(lvl, _mm256_and_ps(as_ps(under), one_f));
    // the two levels the value rounds to, computed beside the threshold's chain (the same products as before)
    const __m256 v_low = _mm256_mul_ps(lvl, c.scale), v_high = _mm256_mul_ps(_mm256_add_ps(lvl, one_f), c.scale);
    // half the threshold, frac * 2^31 (halving is exact): c32 / 2 and 2^31 for the wrap, then twice its truncation
    __m256 zf = _mm256_mul_ps(t, c32_half);
    zf = _mm256_add_ps(zf, _mm256_and_ps(as_ps(under), _mm256_set1_ps(0x1p31f)));
    zf = _mm256_min_ps(_mm256_max_ps(zf, zero_f), _mm256_set1_ps(0x1p31f - 128.0f));
    const V z = _mm256_slli_epi32(_mm256_cvttps_epi32(zf), 1);
    // a word decides "away" only when all of [word, word + span) lies below (span 1, or 2^16: packed 16-bit draws)
    const V z_lo = _mm256_sub_epi32(_mm256_max_epu32(z, margin_lo), margin_lo);
    const V z_hi = _mm256_add_epi32(_mm256_min_epu32(z, u32(0xffffffffu - kMargin)), u32(kMargin));
    const V d_lo = _mm256_srl_epi32(z_lo, r_drop), d_hi = _mm256_srl_epi32(z_hi, r_drop);
    const V rw = _mm256_srl_epi32(word, r_drop);
    // unsigned comparisons as max + equality: not_away = rw >= d_lo, undecided = rw >= d_lo && rw < d_hi
    const V not_away = eq(_mm256_max_epu32(rw, d_lo), rw);
    V undecided = andnot(eq(_mm256_max_epu32(rw, d_hi), rw), not_away);
    V none = zero_si();  // r-bit: the probability truncates to 0 (no random draw)
    if constexpr (!RBits) {
      undecided = or_(undecided, eq(word, ones()));  // z_hi saturated below frac * 2^32 + kMargin
    } else {
      none = eq(d_lo, zero_si());
      undecided = or_(undecided, andnot(eq(d_hi, zero_si()), none));
    }
    const V off = not_(or_(on_grid, sat));
    undecided = and_(undecided, off);
    __m256 v = as_ps(or_(sel(sat, c.max_bits, as_si(sel_ps(not_away, v_low, v_high))), s.sign));
    V use_sr = ones();
    V near_tie = zero_si();
    if constexpr (Mode == 2) {
      // nearest: frac > 1/2 up, < 1/2 down, == 1/2 to the even level (an exact tie: flagged)
      const V half = u32(0x80000000u);
      const V up = gt_u(z_lo, half);
      near_tie = and_(andnot(up, ge_u(z_hi, half)), off);
      const __m256 v_near = as_ps(or_(sel(sat, c.max_bits, as_si(sel_ps(up, v_high, v_low))), s.sign));
      use_sr = and_(cmp<_CMP_NEQ_UQ>(uf, zero_f), cmp<_CMP_EQ_OQ>(v_near, wf));
      v = sel_ps(use_sr, v, v_near);
    }
    const V flag = or_(or_(bad, near_tie), and_(undecided, use_sr));
    const V drawn = and_(use_sr, off);
    out.template put<decltype(tail)::value>(k, live, wf, uf, v, edge, flag, andnot(none, drawn), and_(none, drawn));
  });
  return out.finish(counts);
}

}  // namespace

bool avx2_blocks_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

namespace avx2 {

std::int64_t nearest_block_float(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                 std::int64_t len, BlockCounts& counts) {
  // the common-vector path where it pays: formats without subnormals of their own or with a min normal <= 2^-4
  // (bf16, fp16, e5m2, e4m3; 22-30% fewer instructions), not e3m2, e2m3, e2m1, where most weights are subnormal
  // (e2m1: 29% more)
  if (bp.sub_limit <= 0) {
    return nearest_float<false, false, true>(bp, nullptr, w, u, flags, len, counts);
  }
  return bp.sub_limit <= 0x1p-4f ? nearest_float<true, false, true>(bp, nullptr, w, u, flags, len, counts)
                                 : nearest_float<true, false, false>(bp, nullptr, w, u, flags, len, counts);
}

std::int64_t nearest_block_integer(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                   std::int64_t len, BlockCounts& counts) {
  return nearest_integer<false>(bp, nullptr, w, u, flags, len, counts);
}

std::int64_t master_block_float(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                std::int64_t len, BlockCounts& counts) {
  if (bp.sub_limit <= 0) {
    return nearest_float<false, true, true>(bp, master, w, u, flags, len, counts);
  }
  return bp.sub_limit <= 0x1p-4f ? nearest_float<true, true, true>(bp, master, w, u, flags, len, counts)
                                 : nearest_float<true, true, false>(bp, master, w, u, flags, len, counts);
}

std::int64_t master_block_integer(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                  std::int64_t len, BlockCounts& counts) {
  return nearest_integer<true>(bp, master, w, u, flags, len, counts);
}

bool stochastic_float_covers(const BlockParams& bp) {
  // the window loop, unless r-bit SR resolves steps finer than the window (W >= 2^(32 - r)): there its flags would
  // not be rare, and the portable loop (which computes floor(frac * 2^32) exactly) runs
  return bp.sr_fp32_lanes && (bp.sr_bits == 0 || (((1u << bp.k_shift) + 2u) >> (32 - bp.sr_bits)) == 0u);
}

std::int64_t stochastic_block_float(const BlockParams& bp, int mode, float* w, const float* u,
                                    const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                    BlockCounts& counts) {
  const bool sub = bp.sub_limit > 0, rbits = bp.sr_bits > 0, span = bp.sr_span != 1;
  // the per-vector subnormal branch where it pays: formats with a min normal <= 2^-4 (fp16, e5m2, e4m3: e4m3 SR 13-15%
  // faster in cache), not e3m2, e2m3, e2m1, where most weights are subnormal (there it measured 6-11% slower)
  const bool split = sub && bp.sub_limit <= 0x1p-4f;
  // one instantiation per (subnormals, split) and draw kind: full width, r-bit, or full width from packed 16-bit draws
  const auto run = [&]<bool S, bool Sp, int M>() {
    if (rbits) {
      return stochastic_float<S, true, M, Sp>(bp, w, u, words, flags, len, counts);
    }
    return span ? stochastic_float<S, false, M, Sp, true>(bp, w, u, words, flags, len, counts)
                : stochastic_float<S, false, M, Sp>(bp, w, u, words, flags, len, counts);
  };
  const auto by_mode = [&]<bool S, bool Sp>() {
    return mode == 1 ? run.template operator()<S, Sp, 1>() : run.template operator()<S, Sp, 2>();
  };
  if (split) {
    return by_mode.template operator()<true, true>();
  }
  return sub ? by_mode.template operator()<true, false>() : by_mode.template operator()<false, false>();
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

void expand_chunks(const std::uint32_t* src, std::int64_t offset, std::int64_t len, int r, std::uint32_t* out) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(src);
  std::int64_t k = 0;
  if (r == 8) {
    for (; k + 8 <= len; k += 8) {
      const V v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + offset + k)));
      _mm256_storeu_si256(reinterpret_cast<V*>(out + k), _mm256_slli_epi32(v, 24));
    }
    for (; k < len; ++k) {
      out[k] = static_cast<std::uint32_t>(bytes[offset + k]) << 24;
    }
    return;
  }
  for (; k + 8 <= len; k += 8) {
    const V v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 2 * (offset + k))));
    _mm256_storeu_si256(reinterpret_cast<V*>(out + k), _mm256_slli_epi32(v, 16));
  }
  for (; k < len; ++k) {
    std::uint16_t h;
    std::memcpy(&h, bytes + 2 * (offset + k), 2);
    out[k] = static_cast<std::uint32_t>(h) << 16;
  }
}

// 64-bit lanes, one group each, four vectors (16 groups) at a time so that the rounds' multiplications overlap. A
// lane's high half carries junk between rounds: vpmuludq reads only the low halves, and only those are stored.
void philox_groups(std::uint32_t k0, std::uint32_t k1, std::uint32_t step, std::uint32_t tensor, std::uint64_t g0,
                   std::int64_t groups, std::uint32_t* out) {
  constexpr int kV = 4;
  const V m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
  const V iota = _mm256_setr_epi64x(0, 1, 2, 3);
  for (std::int64_t j = 0; j < groups; j += 4 * kV) {
    V c0[kV], c1[kV], c2[kV], c3[kV];
    for (int v = 0; v < kV; ++v) {
      const V g = _mm256_add_epi64(
          _mm256_set1_epi64x(static_cast<long long>(g0 + static_cast<std::uint64_t>(j + 4 * v))), iota);
      c0[v] = g;
      c1[v] = and_(_mm256_srli_epi64(g, 32), _mm256_set1_epi64x(0x3fff));
      c2[v] = _mm256_set1_epi64x(step);
      c3[v] = _mm256_set1_epi64x(tensor);
    }
    std::uint32_t ka = k0, kb = k1;
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
      const V key_a = _mm256_set1_epi64x(ka), key_b = _mm256_set1_epi64x(kb);
      for (int v = 0; v < kV; ++v) {
        const V p0 = _mm256_mul_epu32(c0[v], m0);
        const V p1 = _mm256_mul_epu32(c2[v], m1);
        c0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[v]), key_a);
        c1[v] = p1;
        c2[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[v]), key_b);
        c3[v] = p0;
      }
      ka += 0x9E3779B9u;
      kb += 0xBB67AE85u;
    }
    for (int v = 0; v < kV; ++v) {
      // 64-bit lane i of a: (c0, c1) of group i, of b: (c2, c3); then group i's four words in order
      const V a = _mm256_blend_epi32(c0[v], _mm256_slli_epi64(c1[v], 32), 0xaa);
      const V b = _mm256_blend_epi32(c2[v], _mm256_slli_epi64(c3[v], 32), 0xaa);
      const V lo = _mm256_unpacklo_epi64(a, b);  // groups 0, 2
      const V hi = _mm256_unpackhi_epi64(a, b);  // groups 1, 3
      std::uint32_t* o = out + 4 * (j + 4 * v);
      _mm256_storeu_si256(reinterpret_cast<V*>(o), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<V*>(o + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}

}  // namespace avx2
}  // namespace wbaudit::sim::detail

#pragma GCC pop_options
#else
namespace wbaudit::sim::detail {
bool avx2_blocks_supported() {
  return false;
}
}  // namespace wbaudit::sim::detail
#endif
