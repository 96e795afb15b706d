#pragma once
// The recording kernel of a reference step's histograms (sim/trace/reference_histograms.hpp): for a chunk of
// coordinates, the d-histogram bin (ratio_histogram.hpp) and the margin-histogram counter of every format
// (margin_histogram.hpp: margin_bin is the definition written plainly), counted into 64-bit per-work-item counters.
//
// Written for the compiler to vectorize: each pass is a loop without data-dependent branches over
// structure-of-arrays scratch (a coordinate's subnormality in F, direction and row are random, and a mispredicted
// branch per coordinate and format cost ten times the arithmetic); every coordinate that is not a finite proposal
// goes to a trash counter instead of being skipped. The counts are then scattered one format at a time into four
// interleaved copies (consecutive coordinates often share a counter; one copy would chain their increments through
// memory); each counter is a 64-bit word holding the count and the sums of p and p^2, p the proposal's position in
// its fine sub-bin (MarginScratch::words), so the moments cost no extra memory operation. The
// only scalar fix-up is intK's exact tie |u| = t 2^kappa, whose parity needs sim/precision's rounding.
//
// This header is compiled three times (margin_kernel.cpp, _avx2.cpp, _avx512.cpp) with different target ISAs; the
// operations are the same integer and IEEE single-precision operations in the same order (no contraction), so every
// build gives the same counts. Each translation unit includes the dependencies first, then sets its target, then
// includes this header and instantiates the templates with its own Isa tag: the instantiations are distinct
// functions, so the linker never mixes one ISA's code into another's (as it may for an ordinary inline function).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "sim/trace/detail/margin_kernel_entry.hpp"
#include "sim/trace/ratio_histogram.hpp"

namespace wbaudit::sim::detail {

// Pass 1 of a chunk [lo, lo + len): the shared quantities of every coordinate, the totals, and the d-histogram bins
// (idx; the trash bin ratio_bins for u == 0, w == 0 or a non-finite coordinate). The default 1/8-binade bins are
// computed here as ratio_bin_eighth does (tests check both against the log2 rule); another layout's through
// ratio_bin_by_log2, coordinate by coordinate.
template <class Isa>
inline void margin_chunk_prepare(const MarginKernelArgs& a, std::size_t lo, int len, MarginScratch& s,
                                 std::int64_t& proposals, std::int64_t& zero_weight, std::int64_t& bad) {
  const bool eighths = ratio_bins_are_eighths(a.d_min, a.bin_width);
  const std::int32_t d_min = eighths ? static_cast<std::int32_t>(a.d_min) : 0, bins = a.ratio_bins;
  const float* w = a.w + lo;
  const float* u = a.u + lo;
  std::int32_t p = 0, z = 0, b = 0;
  for (int i = 0; i < len; ++i) {
    const std::int32_t wb = std::bit_cast<std::int32_t>(w[i]), ub = std::bit_cast<std::int32_t>(u[i]);
    const std::int32_t aw = wb & 0x7fffffff, au = ub & 0x7fffffff;
    const std::int32_t finite = (aw < 0x7f800000) & (au < 0x7f800000);
    const std::int32_t valid = finite & (au != 0);
    // exponents and fractions, a subnormal normalized through an exact multiplication by 2^64
    const std::int32_t small_u = au < 0x00800000, small_w = aw < 0x00800000;
    const std::int32_t au_n = small_u ? std::bit_cast<std::int32_t>(std::bit_cast<float>(au) * 0x1p64f) : au;
    const std::int32_t aw_n = small_w ? std::bit_cast<std::int32_t>(std::bit_cast<float>(aw) * 0x1p64f) : aw;
    const std::int32_t eu = (au_n >> 23) - 127 - 64 * small_u, ew = (aw_n >> 23) - 127 - 64 * small_w;
    const std::int32_t fu = au_n & 0x7fffff;
    s.aw[i] = valid ? aw : 0;
    s.away[i] = (aw == 0) | (((wb ^ ub) >> 31) == 0);
    s.eu[i] = eu;
    s.fu[i] = fu;
    s.valid[i] = valid;
    // a floating format's counter increment: p = u's fraction bits below the sub-bin's (the same in every format)
    s.inc[i] = margin_counter_increment(static_cast<std::uint32_t>((fu >> kMarginMomentShift) & 0x7f));
    p += valid;
    z += valid & (aw == 0);
    b += 1 - finite;
    // d bin (ratio_bin_eighth): 8 (e_w - e_u - d_min) - ceil(8 log2(1 + fu 2^-23))
    std::int32_t ceil8 = fu != 0;
    for (const std::uint32_t t : kEighthBinadeFraction) {
      ceil8 += fu >= static_cast<std::int32_t>(t);
    }
    std::int32_t bin = 8 * (ew - eu - d_min) - ceil8;
    bin = bin < 0 ? 0 : bin;
    bin = bin > bins - 1 ? bins - 1 : bin;
    s.idx[i] = (valid & (aw != 0)) ? bin : bins;
  }
  if (!eighths) {
    for (int i = 0; i < len; ++i) {
      s.idx[i] = s.valid[i] && s.aw[i] != 0 ? ratio_bin_by_log2(a.d_min, a.bin_width, bins, w[i], u[i]) : bins;
    }
  }
  proposals += p;
  zero_weight += z;
  bad += b;
}

// The counters of floating format f for a chunk (idx; block + 0 = trash for coordinates that are not proposals).
template <class Isa>
inline void margin_chunk_floating(const MarginRows& r, const MarginFormat& f, int len, MarginScratch& s) {
  const int shift = 23 - f.man_bits;
  const std::int32_t half = (1 << (shift - 1)) - 1, mask = ~((1 << shift) - 1);
  const std::int32_t c_sub = f.emin - f.man_bits - 1, c_norm = -127 - f.man_bits - 1;
  const std::int32_t max_bits = static_cast<std::int32_t>(f.max_bits),
                     emin_bits = static_cast<std::int32_t>(f.emin_bits);
  const std::int32_t emin_field = f.emin + 127;
  const std::int32_t lo = r.coarse_lo, flo = r.fine_lo, fhi = r.fine_hi, nfine = r.fine_rows(), rmax = r.rows() - 1;
  const std::int32_t trash = r.block();
  const float a = f.sub_level_a, b = f.sub_level_b;
  for (int i = 0; i < len; ++i) {
    const std::int32_t aw = s.aw[i];
    const std::int32_t toward = 1 - s.away[i];
    std::int32_t q = (aw + half + ((aw >> shift) & 1)) & mask;  // q_F(|w|) in the normal range, ties to even
    const std::int32_t over = q >= max_bits;
    q = over ? max_bits : q;
    const std::int32_t eq = q >> 23;
    const std::int32_t edge = toward & ((q & 0x7fffff) == 0) & (eq > emin_field);
    const std::int32_t subnormal = aw < emin_bits;
    const std::int32_t c = subnormal ? c_sub : eq + c_norm - edge;
    const std::int32_t kappa = s.eu[i] - c;
    std::int32_t row = kappa - lo + 1;
    row = row < 0 ? 0 : row;
    row = row > rmax ? rmax : row;
    std::int32_t before = kappa - flo;
    before = before < 0 ? 0 : before;
    before = before > nfine ? nfine : before;
    const std::int32_t fine = (kappa >= flo) & (kappa <= fhi);
    // q_F(w)'s level parity: its last significand bit, or below min normal round(|w| 2^(M - emin)) (clamped: the
    // product is only used where it is below 2^M)
    float level = std::bit_cast<float>(aw) * a * b;
    level = level < 0x1p22f ? level : 0x1p22f;
    level = (level + 0x1p23f) - 0x1p23f;
    const std::int32_t odd = subnormal ? (static_cast<std::int32_t>(level) & 1) : ((q >> shift) & 1);
    const std::int32_t point = s.fu[i] == 0;
    const std::int32_t column = point ? (fine ? kMarginSubBins : 1) + odd : fine * (s.fu[i] >> (23 - 5));
    const std::int32_t id = 1 + 3 * (row - before) + (kMarginSubBins + 2) * before + column;
    const std::int32_t saturated = over & (1 - toward);
    s.idx[i] = s.valid[i] ? (saturated ? kMarginSaturated : id) : trash;
  }
}

// The counters of intK format f (f.defined); an exact tie (|u| = t 2^kappa) is marked with bit 30 for the scalar
// fix-up of its parity. Returns whether the chunk has one.
template <class Isa>
inline bool margin_chunk_integer(const MarginRows& r, const MarginFormat& f, int len, MarginScratch& s) {
  const std::int32_t lo = r.coarse_lo, flo = r.fine_lo, fhi = r.fine_hi, nfine = r.fine_rows(), rmax = r.rows() - 1;
  const std::int32_t trash = r.block(), e_t = f.e_t, f_t = static_cast<std::int32_t>(f.f_t);
  const float inv = f.inv_significand_t, saturates_above = f.saturates_above;
  std::int32_t ties = 0;
  for (int i = 0; i < len; ++i) {
    const std::int32_t below = s.fu[i] < f_t;
    const std::int32_t kappa = s.eu[i] - e_t - below;
    std::int32_t row = kappa - lo + 1;
    row = row < 0 ? 0 : row;
    row = row > rmax ? rmax : row;
    std::int32_t before = kappa - flo;
    before = before < 0 ? 0 : before;
    before = before > nfine ? nfine : before;
    const std::int32_t fine = (kappa >= flo) & (kappa <= fhi);
    const float m = std::bit_cast<float>(s.fu[i] | 0x3f800000) * inv * (below ? 2.0f : 1.0f);
    std::int32_t j = static_cast<std::int32_t>((m - 1.0f) * static_cast<float>(kMarginSubBins));
    j = j < 0 ? 0 : j;
    j = j > kMarginSubBins - 1 ? kMarginSubBins - 1 : j;
    const std::int32_t point = s.fu[i] == f_t;
    const std::int32_t id = 1 + 3 * (row - before) + (kMarginSubBins + 2) * before + (point ? (1 << 30) : fine * j);
    const std::int32_t saturated = s.away[i] & (std::bit_cast<float>(s.aw[i]) > saturates_above);
    s.idx[i] = s.valid[i] ? (saturated ? kMarginSaturated : id) : trash;
    ties += point;
    // the counter increment: p = m's fraction bits below the sub-bin's, m clamped into [1, 2) as j is
    std::int32_t bits = std::bit_cast<std::int32_t>(m) - 0x3f800000;
    bits = bits < 0 ? 0 : bits;
    bits = bits > 0x7fffff ? 0x7fffff : bits;
    s.inc[i] = margin_counter_increment(static_cast<std::uint32_t>((bits >> kMarginMomentShift) & 0x7f));
  }
  return ties != 0;
}

// Adds inc[i] to counter idx[i] for i in [0, len), over the four interleaved copies of a block's counters (stride
// block + 1, the last one the trash); with Ties, a marked tie (bit 30) gets its point column from margin_bin. Only a
// fine row's sub-bin counters keep their moments (margin_item); the other counters' upper fields are ignored.
template <class Isa, bool Ties>
inline void margin_scatter(const MarginKernelArgs& a, const MarginFormat& f, std::size_t lo, int len,
                           const MarginScratch& s, int stride, std::uint64_t* counters) {
  int i = 0;
  const auto fix = [&](std::int32_t id, int k) -> std::int32_t {
    if (!Ties || (id & (1 << 30)) == 0) {
      return id;
    }
    return margin_bin(a.rows, f, a.w[lo + k], a.u[lo + k]);
  };
  for (; i + 4 <= len; i += 4) {
    counters[fix(s.idx[i], i)] += s.inc[i];
    counters[stride + fix(s.idx[i + 1], i + 1)] += s.inc[i + 1];
    counters[2 * stride + fix(s.idx[i + 2], i + 2)] += s.inc[i + 2];
    counters[3 * stride + fix(s.idx[i + 3], i + 3)] += s.inc[i + 3];
  }
  for (; i < len; ++i) {
    counters[fix(s.idx[i], i)] += s.inc[i];
  }
}

// Adds the four copies of one format's 64-bit counters `c` (stride) to its counter block `out` and, for a fine row's
// sub-bins, their sums of p and p^2 to its moment block `moments` (MarginLayout: [sum p, sum p^2] per sub-bin).
inline void margin_fold_format(const MarginRows& r, const std::uint64_t* c, int stride, std::int64_t* out,
                               std::int64_t* moments) {
  for (int b = 0; b < r.block(); ++b) {
    for (int k = 0; k < 4; ++k) {
      out[b] += static_cast<std::int64_t>(c[k * stride + b] & 0x7fffu);
    }
  }
  for (int kappa = r.fine_lo; kappa <= r.fine_hi; ++kappa) {
    const int first = r.row_offset(r.row(kappa));
    for (int j = 0; j < kMarginSubBins; ++j) {
      std::int64_t* m = moments + r.moment_offset(kappa, j);
      for (int k = 0; k < 4; ++k) {
        const std::uint64_t word = c[k * stride + first + j];
        m[0] += static_cast<std::int64_t>((word >> 15) & 0x1fffffu);
        m[1] += static_cast<std::int64_t>(word >> 36);
      }
    }
  }
}

// The counts of coordinates [begin, end) (end - begin <= kMarginItem) added to `counts`: [0, ratio_bins) the d
// histogram, then proposals, zero weights, non-finite coordinates, then the margin histogram (every format's counter
// block, then every format's moment block). `counters`: scratch of margin_counter_words(a) words.
template <class Isa>
inline void margin_item(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                        std::uint32_t* counters, std::int64_t* counts) {
  const int stride = a.rows.block() + 1, rstride = a.ratio_bins + 1;
  std::uint32_t* ratio = counters;
  std::memset(counters, 0, margin_counter_words(a) * sizeof(std::uint32_t));
  s.words.assign(margin_format_words(a), 0);
  std::int64_t proposals = 0, zero_weight = 0, bad = 0;
  for (std::size_t lo = begin; lo < end; lo += kMarginChunk) {
    const int len = end - lo < static_cast<std::size_t>(kMarginChunk) ? static_cast<int>(end - lo) : kMarginChunk;
    margin_chunk_prepare<Isa>(a, lo, len, s, proposals, zero_weight, bad);
    int i = 0;
    for (; i + 4 <= len; i += 4) {
      ++ratio[s.idx[i]];
      ++ratio[rstride + s.idx[i + 1]];
      ++ratio[2 * rstride + s.idx[i + 2]];
      ++ratio[3 * rstride + s.idx[i + 3]];
    }
    for (; i < len; ++i) {
      ++ratio[s.idx[i]];
    }
    for (int f = 0; f < a.nformats; ++f) {
      const MarginFormat& fmt = a.formats[f];
      if (!fmt.defined) {
        continue;
      }
      std::uint64_t* block_counters = s.words.data() + static_cast<std::size_t>(f) * 4 * stride;
      if (f < a.nfloating) {  // s.inc from margin_chunk_prepare (the floating formats come first)
        margin_chunk_floating<Isa>(a.rows, fmt, len, s);
        margin_scatter<Isa, false>(a, fmt, lo, len, s, stride, block_counters);
      } else if (margin_chunk_integer<Isa>(a.rows, fmt, len, s)) {
        margin_scatter<Isa, true>(a, fmt, lo, len, s, stride, block_counters);
      } else {
        margin_scatter<Isa, false>(a, fmt, lo, len, s, stride, block_counters);
      }
    }
  }
  for (int b = 0; b < a.ratio_bins; ++b) {
    counts[b] +=
        static_cast<std::int64_t>(ratio[b]) + ratio[rstride + b] + ratio[2 * rstride + b] + ratio[3 * rstride + b];
  }
  counts[a.ratio_bins] += proposals;
  counts[a.ratio_bins + 1] += zero_weight;
  counts[a.ratio_bins + 2] += bad;
  std::int64_t* margin = counts + a.ratio_bins + 3;
  const std::size_t block = static_cast<std::size_t>(a.rows.block()), nf = static_cast<std::size_t>(a.nformats);
  for (std::size_t f = 0; f < nf; ++f) {
    margin_fold_format(a.rows, s.words.data() + f * 4 * static_cast<std::size_t>(stride), stride, margin + f * block,
                       margin + nf * block + f * static_cast<std::size_t>(a.rows.moments()));
  }
}

}  // namespace wbaudit::sim::detail
