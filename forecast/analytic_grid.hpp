#pragma once
// The analytic grid (docs/science.md §2, "Reference trace" (b)): the projected round-to-nearest erased fraction for any
// mantissa width M and learning-rate scale s, read from the reference trace's histograms of
// d = floor(log2|w|) - log2|u|.
//
// Rule. Under nearest, a coordinate with w != 0 is erased iff |u| < gap/2 = 2^(floor(log2|w|) - M - 1), i.e.
// d > M + 1; scaling every proposal by s shifts d by -log2 s, so the erased share is the histogram mass above
// tau = M + 1 + log2 s. Within the 1/8-binade bin holding tau, the mass is taken as uniform in d (linear
// interpolation); tau on a bin edge needs no interpolation. The first and last bins also hold everything beyond
// them, so tau must lie in [d_min + width, d_max - width] (else ForecastError: no silent number).
// Zero weights (w == 0, u != 0; GroupTrace::zero_weight) are in the denominator and counted as applied: q(0 + u)
// is 0 only when |s u| <= min_subnormal/2 of the format, which the histogram cannot see.
// Approximations (second-order; docs/forecasting.md quantifies them): exact ties |u| = gap/2 (erased only when the
// last significand bit is even), the binade edge (at |w| = 2^e the gap toward zero is half as wide), subnormal and
// saturating weights (fixed absolute gaps, exponent range ignored), and the exact projection's rounding q_F(w) of
// the fp32 reference weight (which can move w into the next binade).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/precision/format.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_reader.hpp"

namespace wbaudit::forecast {

// Histogram mass of one step's row above tau (a fractional count, by the within-bin uniform rule). Throws
// ForecastError when row.size() != layout.bins or tau lies in a clamped (first/last) bin or beyond.
double histogram_mass_above(std::span<const std::int64_t> row, const sim::RatioHistogramLayout& layout, double tau);

// The analytic erased fraction of one group at each recorded step: mass above tau / nonzero (NaN when nonzero == 0).
// Throws ForecastError when man_bits < 0, lr_scale is not finite and > 0, the histogram or zero-weight counts do
// not match the recorded steps, or histogram + zero weights != nonzero at some step (naming group and step).
std::vector<double> analytic_erased_fraction(const sim::Trace& reference, const sim::GroupTrace& group, int man_bits,
                                             double lr_scale = 1.0);

// The same from a trace on disk, reading the group's nonzero counts, zero-weight counts and d histogram
// `block_steps` recorded steps at a time: the memory it holds is one block and the resulting series, whatever the
// number of recorded steps. The same values as analytic_erased_fraction(reader.read_all(), ...); a dataset the file
// lacks is a ForecastError naming it.
std::vector<double> analytic_erased_fraction(const sim::TraceReader& reference, std::string_view group, int man_bits,
                                             double lr_scale = 1.0, std::size_t block_steps = 256);

struct AnalyticGrid {
  std::string group;
  std::vector<int> man_bits;        // M values (outer index)
  std::vector<double> lr_scales;    // s values (middle index)
  std::vector<std::int64_t> steps;  // recorded steps (inner index)
  std::vector<double> values;       // [M][s][T]

  double at(std::size_t m, std::size_t s, std::size_t t) const {
    return values[(m * lr_scales.size() + s) * steps.size() + t];
  }
};

AnalyticGrid analytic_grid(const sim::Trace& reference, const std::string& group, std::span<const int> man_bits,
                           std::span<const double> lr_scales);

// Agreement of the analytic grid (s = 1) with the exact projections, per group, over the formats both cover:
// floating formats among `formats` that the group's projections list. Integer formats (absolute gaps) are outside
// the grid and skipped.
struct AnalyticCheck {
  std::string group;
  std::vector<std::string> formats;  // the formats compared
  double max_abs_difference = 0;     // max over formats and steps with both values present
  std::string worst_format;
  std::int64_t worst_step = 0;
  std::int64_t compared_points = 0;
};

// Throws ForecastError when no group has any format covered by both (nothing to compare).
std::vector<AnalyticCheck> check_analytic_grid(const sim::Trace& reference, std::span<const sim::FormatSpec> formats);
// The same over every format the trace projects, resolved with sim::format_from_name (an unknown name throws
// ForecastError naming it).
std::vector<AnalyticCheck> check_analytic_grid(const sim::Trace& reference);

}  // namespace wbaudit::forecast
