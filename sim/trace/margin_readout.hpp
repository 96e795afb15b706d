#pragma once
// The exact projected erased count at the recorded scale (s = 1), read from a step's margin histogram instead of a
// separate projection pass (project_erasure) over the tensor.
//
// Round to nearest erases a proposal u != 0 iff nu_F < 0, or nu_F == 0 and q_F(w)'s level is even, or u points away
// from q_F(w) = max finite (margin_histogram.hpp). With nu_F = kappa + log2 m, m in [1, 2): nu_F < 0 iff kappa < 0,
// and nu_F == 0 iff kappa == 0 and m == 1. So the erased count at s = 1 is the block's saturated counter, every counter
// of the rows of kappa < 0, and the even point of the row of kappa == 0: whole counters, no interpolation. It needs
// kappa = -1 and kappa = 0 in rows of their own (coarse_lo <= 0 <= coarse_hi; the default rows are -20..19).
//
// A projected format is read out only where the histogram was recorded with the very same rounding (the same
// FormatParams, an intK with the same per-tensor scale, margin_block_of); any other format keeps its explicit pass.
// tests/sim/model/test_margin_readout.cpp checks the readout against a brute-force count, coordinate by coordinate.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/trace/margin_histogram.hpp"

namespace wbaudit::sim {

namespace detail {
inline bool same_rounding(const FormatParams& a, const FormatParams& b) {
  return a.integer == b.integer && a.bits == b.bits && a.exp_bits == b.exp_bits && a.man_bits == b.man_bits &&
         a.bias == b.bias && a.emin == b.emin && a.ieee_specials == b.ieee_specials && a.has_nan == b.has_nan &&
         a.max_finite == b.max_finite && a.min_normal == b.min_normal && a.min_subnormal == b.min_subnormal &&
         a.max_level == b.max_level && a.scale == b.scale && a.scale_odd == b.scale_odd && a.scale_exp == b.scale_exp;
}
}  // namespace detail

// Whether the rows hold kappa = -1 and kappa = 0 each in a row of its own (the readout's condition).
inline bool margin_reads_unit_scale(const MarginRows& rows) {
  return rows.valid() && rows.coarse_lo <= 0 && rows.coarse_hi >= 0;
}

// The block of `layout` (formats: margin_formats(layout, init_absmax)) recorded with the rounding of the scalar format
// `projected`, or -1 where there is none (not in the layout, another intK scale, an intK without a scale, rows that
// do not separate kappa = -1 and 0).
inline int margin_block_of(const MarginLayout& layout, std::span<const MarginFormat> formats,
                           const FormatSpec& projected) {
  if (formats.size() != layout.formats.size() || !margin_reads_unit_scale(layout.rows)) {
    return -1;
  }
  const FormatParams p = format_params(projected);
  for (std::size_t f = 0; f < formats.size(); ++f) {
    if (formats[f].defined && layout.formats[f] == projected.name && detail::same_rounding(formats[f].params, p)) {
      return static_cast<int>(f);
    }
  }
  return -1;
}

// The proposals that round to nearest erases at s = 1 in block `f` of one tensor's margin histogram at one step
// (`margin`: layout.bins() counters, the block order of layout.formats). Throws std::invalid_argument for a size or
// block that does not fit the layout, or rows without kappa = -1 and 0 of their own.
inline std::int64_t margin_erased_at_unit_scale(const MarginLayout& layout, std::span<const std::int64_t> margin,
                                                std::size_t f) {
  const MarginRows& r = layout.rows;
  if (margin.size() != layout.bins() || f >= layout.formats.size() || !margin_reads_unit_scale(r)) {
    throw std::invalid_argument("margin_erased_at_unit_scale: " + std::to_string(margin.size()) + " counters, block " +
                                std::to_string(f) + " for a layout of " + std::to_string(layout.formats.size()) +
                                " formats x " + std::to_string(r.block()) + " (rows " + std::to_string(r.coarse_lo) +
                                ".." + std::to_string(r.coarse_hi) + ")");
  }
  const std::span<const std::int64_t> block =
      margin.subspan(f * static_cast<std::size_t>(r.block()), static_cast<std::size_t>(r.block()));
  const int zero = r.row(0);
  std::int64_t erased = 0;
  // the saturated counter and every row of kappa < 0: [0, row_offset(row(0)))
  for (int k = 0; k < r.row_offset(zero); ++k) {
    erased += block[static_cast<std::size_t>(k)];
  }
  // the point m == 1 of kappa == 0 with an even level: a row ends with [point even, point odd]
  return erased + block[static_cast<std::size_t>(r.row_offset(zero + 1) - 2)];
}

}  // namespace wbaudit::sim
