#pragma once
// The analytic grid across the exponent range (docs/forecasting.md, "The analytic grid"): the projected
// round-to-nearest erased fraction for any format the simulator knows (floating: E, M, bias, max finite, subnormals,
// saturation, as sim/precision rounds it; intK with its per-tensor scale from the absmax at initialization) and any
// learning-rate scale s, read from a reference trace's margin histogram (schema 3, sim/trace/margin_histogram.hpp:
// exact at powers of two, the one bin of m holding the threshold interpolated otherwise) or, for schema-2 traces,
// its joint (|w|, |u|) pairs (sim/trace/joint_histogram.hpp, rule below). Groups of at most
// sim::kJointExactMaxCoordinates coordinates are counted from their kept w and u, exactly, at every scale.
//
// Schema 2's pairs:
// Rule. A coordinate with u != 0 is erased iff q(q(w) + s u) == q(w): with g_t and g_a the gaps of q(w) toward and
// away from zero, iff s|u| < g/2 for the gap on u's side (s|u| == g/2: erased iff q(w)'s last significand bit or
// integer level is even); q(w) == max finite with u pointing away is always erased (saturation); q(w) == 0 has the
// gap of the smallest subnormal (or the int scale) on both sides. Per w bin, q(w) and its gaps are worked out from the
// bin's bounds; where the bin holds several q(w) values the share rounding to each special value (0, a power of two,
// max finite) is taken as uniform in w and the rest shares the binade's gap (ties then weighted 1/2). Per u bin, the
// share below the threshold is taken as uniform in |u|. No per-coordinate rounding happens here.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "forecast/source.hpp"
#include "sim/precision/format.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_reader.hpp"

namespace wbaudit::forecast {

// The format `name` as the simulator applies it to this group: sim::format_from_name, and for intK the scale
// sim::int_scale_for_absmax(K, GroupTrace::init_absmax). Throws ForecastError naming group and format.
sim::FormatSpec grid_format(const sim::GroupTrace& group, std::string_view name);

// The expected erased count over one step's (key, count) pairs. Throws ForecastError for a floating format without
// subnormals (no sim/precision format is one) or a bad lr_scale (not finite and > 0).
double joint_erased_count(const sim::JointHistogramLayout& layout, std::span<const std::uint64_t> keys,
                          std::span<const std::int64_t> counts, const sim::FormatSpec& format, double lr_scale);

// The (key, count) pairs of coordinates (w, u) (u == 0 skipped), sorted: what the engine records per step.
void joint_pairs(const sim::JointHistogramLayout& layout, std::span<const float> w, std::span<const float> u,
                 std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& counts);

// Throws ForecastError when the reference has no joint histogram for the group (a schema-1 trace, a target trace,
// a Python-recorded trace), saying how to regenerate it.
void require_joint_histogram(const sim::Trace& reference, const sim::GroupTrace& group);

// The analytic erased fraction of `group` under `format` at learning-rate scale s on the reference's recorded
// steps (NaN where nothing was proposed). The function the `source` predictor uses with
// `source_method = "analytic-grid"`. Throws ForecastError (no joint histogram, unknown group/format, bad s).
Series analytic_series(const sim::Trace& reference, std::string_view group, std::string_view format,
                       double lr_scale = 1.0);

// The same from a trace on disk, read a block of recorded steps at a time (format_grid(const TraceReader&, ...)).
Series analytic_series(const sim::TraceReader& reference, std::string_view group, std::string_view format,
                       double lr_scale = 1.0);

struct FormatGrid {
  std::string group;
  std::vector<std::string> formats;  // outer index
  std::vector<double> lr_scales;     // middle index
  std::vector<std::int64_t> steps;   // inner index (the recorded steps)
  std::vector<double> values;        // [format][scale][step]
  // Per format: why its values are all NaN (intK for a group that was all zeros at initialization, which has no
  // per-tensor scale); empty where the format is defined.
  std::vector<std::string> undefined;
  // Block formats: the shares of proposals erased inside the grid, by saturation and by a scale change, [format][scale]
  // [step] like values (their sum is the value); NaN for per-tensor formats and where nothing was proposed.
  std::vector<std::array<double, 3>> causes;
  double at(std::size_t f, std::size_t s, std::size_t t) const {
    return values[(f * lr_scales.size() + s) * steps.size() + t];
  }
};

// Every (format, scale) at every recorded step of one group, reading each step's record once. A block-scaled format
// (sim::is_block_storage_name: mxfp8_e4m3, mxfp4_e2m1:rceil, nvfp4, ...) is projected from the reference's block
// sample (sim/trace/block_sample.hpp): the exact block write-back of q(w) + fl32(s u) on the sampled blocks, exact for
// a tensor whose blocks are all sampled; a reference without a sample for it is a ForecastError saying how to record
// one, and NVFP4 decides scales in [sim::kBlockSampleScaleMin, sim::kBlockSampleScaleMax] only. An intK format for a
// group without a per-tensor scale is not an error here: its values are NaN and FormatGrid::undefined says why. A
// margin histogram resolves scales within its rows (powers of two 2^-19 .. 2^20, other scales in [2^-5, 2^5) by
// default); another scale, or a format it does not record, is a ForecastError naming it.
FormatGrid format_grid(const sim::Trace& reference, std::string_view group, std::span<const std::string> formats,
                       std::span<const double> lr_scales);
// The same from a trace on disk, reading a block of recorded steps (one per thread) at a time: the memory it holds
// does not grow with the number of recorded steps. The same values as format_grid(reader.read_all(), ...).
FormatGrid format_grid(const sim::TraceReader& reader, std::string_view group, std::span<const std::string> formats,
                       std::span<const double> lr_scales);

}  // namespace wbaudit::forecast
