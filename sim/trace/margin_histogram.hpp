#pragma once
// The margin histogram of a reference trace (schema 3; docs/trace-format.md, docs/forecasting.md "The analytic
// grid"): per recorded step and tensor, for every format F the simulator knows (but fp32), the proposals u != 0
// counted by their *erasure margin*
//
//     nu_F = log2 |u| - log2(g_F / 2),   g_F = the gap of q_F(w) on u's side,
//
// because round-to-nearest erases a proposal scaled by s iff s|u| < g_F/2, i.e. iff nu_F + log2 s < 0 (at equality
// iff q_F(w)'s level is even), and a proposal pointing away from q_F(w) = max finite always (saturation). Floating
// formats: g_F/2 = 2^c with c = max(e(q_F(w)), emin) - M - 1, one less toward zero at a binade edge q_F(w) = 2^e > min
// normal; intK: g_F = the per-tensor scale on both sides, t = g_F/2. nu_F = kappa + log2 m with kappa an integer and
// m in [1, 2) (floating: m is u's own significand, since g_F/2 is a power of two).
//
// Per format the record holds the proposals that saturate, then one row per kappa from coarse_lo - 1 (every kappa
// below) to coarse_hi + 1 (every kappa above), the point m == 1 split by the parity of q_F(w)'s level and the rest
// counted once (coarse rows) or in kMarginSubBins linear bins of m (fine rows, fine_lo <= kappa <= fine_hi). So the
// count erased at any power of two s = 2^k, -coarse_hi <= k <= -coarse_lo, is exact, and for other s in
// [2^(-fine_hi-1), 2^(-fine_lo)) only the bin of m holding the threshold is interpolated. Schema 4 also records, per
// fine row and sub-bin, the first two moments of the proposals' position inside it (x = the sub-bin's share of m
// below m, in kMarginMomentBits-bit fixed point p = floor(2^7 x): the sums of p and p^2, exact integers that add
// over work items, threads and shards), from which the grid interpolates by a Beta law with that mean and variance
// (a point mass, e.g. Adam's first step, is then placed, not spread over the bin); schema 3's traces have no moments
// (uniform in m). The size does not depend on the tensor's size: MarginLayout::bins() int64 entries per tensor and
// step (14 formats x (437 counters + 640 moments) = 15,078 for the default rows: 120,624 bytes before compression;
// schema 3: 6,118, 48,944 bytes).
#include <Kokkos_Core.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"

namespace wbaudit::sim {

inline constexpr int kMarginSubBins = 32;   // linear bins of m in [1, 2) in a fine row
inline constexpr int kMarginSaturated = 0;  // counter 0 of a block: u points away from q_F(w) = max finite
inline constexpr int kMarginMaxRows = 64;   // MarginRows::rows() at most
// A proposal's position in its sub-bin for the moments: p = the kMarginMomentBits bits of m's fraction below the
// sub-bin's (p < 128: a count, sum p and sum p^2 of 2^14 coordinates share one 64-bit counter in the kernel).
inline constexpr int kMarginMomentBits = 7;
inline constexpr int kMarginMomentShift = 23 - 5 - kMarginMomentBits;  // p = (fraction bits >> shift) & 255

// Which counters a format's block holds, and where (plain data, usable inside kernels). A block is: [0] proposals
// that saturate; then the rows r = 0 .. rows() - 1 for kappa = coarse_lo - 1 + r (row 0: every kappa below coarse_lo,
// the last: every kappa above coarse_hi): 3 counters [interval, point even, point odd] for a coarse row,
// kMarginSubBins + 2 [sub-bins..., point even, point odd] for a fine row.
struct MarginRows {
  int coarse_lo = -20, fine_lo = -5, fine_hi = 4, coarse_hi = 19;

  KOKKOS_INLINE_FUNCTION int rows() const { return coarse_hi - coarse_lo + 3; }
  KOKKOS_INLINE_FUNCTION int fine_rows() const { return fine_hi - fine_lo + 1; }
  KOKKOS_INLINE_FUNCTION bool fine(int kappa) const { return kappa >= fine_lo && kappa <= fine_hi; }
  // The row of kappa (clamped into the first and last rows).
  KOKKOS_INLINE_FUNCTION int row(int kappa) const {
    const int r = kappa - coarse_lo + 1;
    return r < 0 ? 0 : (r > rows() - 1 ? rows() - 1 : r);
  }
  // The first counter of row r; row_offset(rows()) == block().
  KOKKOS_INLINE_FUNCTION int row_offset(int r) const {
    const int kappa = r + coarse_lo - 1;
    const int before = kappa - fine_lo < 0 ? 0 : (kappa - fine_lo > fine_rows() ? fine_rows() : kappa - fine_lo);
    return 1 + 3 * (r - before) + (kMarginSubBins + 2) * before;
  }
  KOKKOS_INLINE_FUNCTION int block() const { return row_offset(rows()); }
  // Schema 4: a format's moments, [sum of p, sum of p^2] per fine row and sub-bin (fine rows in order).
  KOKKOS_INLINE_FUNCTION int moments() const { return 2 * fine_rows() * kMarginSubBins; }
  // The first of sub-bin j's two moments in fine row kappa (fine(kappa)).
  KOKKOS_INLINE_FUNCTION int moment_offset(int kappa, int j) const {
    return 2 * ((kappa - fine_lo) * kMarginSubBins + j);
  }
  // Valid: coarse_lo <= fine_lo <= fine_hi <= coarse_hi, at most kMarginMaxRows rows.
  bool valid() const {
    return coarse_lo <= fine_lo && fine_lo <= fine_hi && fine_hi <= coarse_hi && rows() <= kMarginMaxRows &&
           coarse_lo > -1000 && coarse_hi < 1000;
  }
  bool operator==(const MarginRows&) const = default;
};

// A step's record: the counter blocks of every format (format f's at f * rows.block()), then, with moments (schema
// 4), the moment blocks of every format (format f's at moments_begin() + f * rows.moments()).
struct MarginLayout {
  std::vector<std::string> formats;  // block order: floating formats, then intK (margin_format_names() by default)
  MarginRows rows;
  bool moments = true;  // schema 4; false for a schema-3 trace's layout (counters only)
  std::size_t counters() const { return formats.size() * static_cast<std::size_t>(rows.block()); }
  std::size_t moments_begin() const { return counters(); }
  // int64 entries per tensor and step.
  std::size_t bins() const {
    return counters() + (moments ? formats.size() * static_cast<std::size_t>(rows.moments()) : 0);
  }
  bool operator==(const MarginLayout&) const = default;
};

// The formats of the default layout: every format of sim::known_format_names() but fp32 (the reference's own).
std::vector<std::string> margin_format_names();
MarginLayout default_margin_layout();
// The default layout restricted to `names` (at least one, each a format of margin_format_names(), no repeats), in
// the default's order: a reference that forecasts only these formats records a margin histogram of |names| blocks
// instead of 14, and its recording kernel runs |names| format passes (docs/forecasting.md, "Recording fewer
// formats"). Throws FormatError naming the entry that is not one.
MarginLayout margin_layout_for(const std::vector<std::string>& names);

// One format as the recording kernel applies it (plain data, usable inside kernels).
struct MarginFormat {
  bool integer = false;
  bool defined = true;  // intK of a tensor without a per-tensor scale (all zeros at initialization): not recorded
  // floating
  int man_bits = 0, emin = 0;
  std::uint32_t emin_bits = 0, max_bits = 0;  // fp32 bits of min normal and max finite
  float sub_level_a = 0, sub_level_b = 0;     // 2^64 and 2^(M - emin - 64): |w| below min normal is level |w| a b
  // intK
  int e_t = 0;  // half the scale t = scale / 2 = (1 + f_t 2^-23) 2^e_t
  std::uint32_t f_t = 0;
  float inv_significand_t = 0;  // 1 / (1 + f_t 2^-23), rounded
  float saturates_above = 0;    // |w| > (level max - 1/2) scale rounds to the top level (exact in fp32)
  FormatParams params;          // sim/precision's own rounding, for the parity of a point's q_F(w)
};

// The formats of `layout` for a tensor whose max |w| at initialization is init_absmax (intK scales, as the simulator
// derives them: int_scale_for_absmax; undefined where init_absmax is not > 0). Throws FormatError for a name that is
// not a format, fp32, a floating format listed after an integer one, or invalid rows.
std::vector<MarginFormat> margin_formats(const MarginLayout& layout, double init_absmax);

namespace detail {
// |x| = (1 + f 2^-23) 2^e for the bits of a finite nonzero |x|, subnormals normalized.
KOKKOS_INLINE_FUNCTION void margin_exponent_fraction(std::uint32_t abs_bits, int& e, std::uint32_t& f) {
  const std::uint32_t field = abs_bits >> 23;
  f = abs_bits & 0x7fffffu;
  if (field != 0) {
    e = static_cast<int>(field) - 127;
    return;
  }
  const int shift = __builtin_clz(f) - 8;
  f = (f << shift) & 0x7fffffu;
  e = -126 - shift;
}
}  // namespace detail

// The counter of one coordinate in format f's block: the definition the recording kernel (detail/margin_kernel.hpp)
// vectorizes, written plainly. w, u finite, u != 0; for intK f.defined. With `moment` and `position`: the offset of
// its moments in the format's moment block (rows.moment_offset; -1 where none: saturated, a point m == 1 or a
// coarse row) and its position p.
int margin_bin(const MarginRows& rows, const MarginFormat& f, float w, float u);
int margin_bin(const MarginRows& rows, const MarginFormat& f, float w, float u, int& moment, int& position);

}  // namespace wbaudit::sim
