// trace.h5 through the HDF5 C API; the layout is documented in docs/trace-format.md.
#include "sim/trace/trace.hpp"

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/trace/block_sample.hpp"
#include "sim/trace/detail/h5.hpp"
#include "sim/trace/detail/trace_file.hpp"
#include "sim/trace/trace_reader.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace wbaudit::sim {

namespace {

// The problems of one group's per-step series (see trace_problems).
void group_problems(const Trace& trace, const GroupTrace& g, std::vector<std::string>& out) {
  const std::size_t T = trace.recorded_steps.size();
  const std::string where = "group " + g.name + ": ";
  auto check_length = [&](std::size_t n, const char* what) {
    if (n != T) {
      out.push_back(where + what + " has " + std::to_string(n) + " entries for " + std::to_string(T) + " steps");
    }
  };
  if (g.size < 0) {
    out.push_back(where + "negative size");
  }
  check_length(g.nonzero.size(), "nonzero");
  const bool target = trace.mode == "target";
  if (target) {
    check_length(g.erased.size(), "erased");
    check_length(g.erased_fraction.size(), "erased_fraction");
  }
  for (std::size_t t = 0; t < T && t < g.nonzero.size(); ++t) {
    const std::string at = where + "step " + std::to_string(trace.recorded_steps[t]) + ": ";
    if (g.nonzero[t] < 0 || g.nonzero[t] > g.size) {
      out.push_back(at + "nonzero " + std::to_string(g.nonzero[t]) + " outside [0, size " + std::to_string(g.size) +
                    "]");
    }
    if (!target || t >= g.erased.size() || t >= g.erased_fraction.size()) {
      continue;
    }
    if (g.erased[t] < 0 || g.erased[t] > g.nonzero[t]) {
      out.push_back(at + "erased " + std::to_string(g.erased[t]) + " outside [0, nonzero " +
                    std::to_string(g.nonzero[t]) + "]");
    }
    const double y = g.erased_fraction[t];
    const bool consistent =
        g.nonzero[t] == 0
            ? std::isnan(y)
            : std::fabs(y - static_cast<double>(g.erased[t]) / static_cast<double>(g.nonzero[t])) <= 1e-12;
    if (!consistent) {
      out.push_back(at + "erased_fraction " + std::to_string(y) + " is not erased / nonzero");
    }
  }
  if (!g.block_events.empty()) {
    const BlockEventSeries& b = g.block_events;
    if (!target) {
      out.push_back(where + "block_events in a reference trace");
    }
    if (!is_block_storage_name(g.block_format)) {
      out.push_back(where + "block_events format \"" + g.block_format + "\" is not a block format");
    }
    check_length(b.erased_grid.size(), "block_events/erased_grid");
    check_length(b.erased_saturation.size(), "block_events/erased_saturation");
    check_length(b.erased_scale.size(), "block_events/erased_scale");
    check_length(b.collateral.size(), "block_events/collateral");
    check_length(b.flushed.size(), "block_events/flushed");
    check_length(b.rescaled_up.size(), "block_events/rescaled_up");
    check_length(b.rescaled_down.size(), "block_events/rescaled_down");
    for (std::size_t t = 0; t < T && t < g.nonzero.size() && t < g.erased.size() && t < b.erased_grid.size() &&
                            t < b.erased_saturation.size() && t < b.erased_scale.size() && t < b.collateral.size() &&
                            t < b.flushed.size() && t < b.rescaled_up.size() && t < b.rescaled_down.size();
         ++t) {
      const std::string at = where + "step " + std::to_string(trace.recorded_steps[t]) + ": ";
      if (b.erased_grid[t] < 0 || b.erased_saturation[t] < 0 || b.erased_scale[t] < 0 ||
          b.erased_grid[t] + b.erased_saturation[t] + b.erased_scale[t] != g.erased[t]) {
        out.push_back(at + "erased causes (grid " + std::to_string(b.erased_grid[t]) + ", saturation " +
                      std::to_string(b.erased_saturation[t]) + ", scale " + std::to_string(b.erased_scale[t]) +
                      ") do not sum to erased " + std::to_string(g.erased[t]));
      }
      if (b.flushed[t] < 0 || b.flushed[t] > b.collateral[t] || b.collateral[t] > g.size - g.nonzero[t]) {
        out.push_back(at + "collateral " + std::to_string(b.collateral[t]) + " / flushed " +
                      std::to_string(b.flushed[t]) + " outside [0, coordinates with u == 0]");
      }
      if (b.rescaled_up[t] < 0 || b.rescaled_down[t] < 0 || b.rescaled_up[t] + b.rescaled_down[t] > b.blocks) {
        out.push_back(at + "rescaled blocks outside [0, blocks " + std::to_string(b.blocks) + "]");
      }
    }
  }
  for (const auto& [format, series] : g.projected) {
    try {
      (void)storage_format_from_name(format);
    } catch (const std::exception&) {
      out.push_back(where + "projected format \"" + format + "\" is not a known format");
    }
    const BlockEventSeries& b = series.block_events;
    for (std::size_t t = 0; t < series.erased.size() && t < b.erased_grid.size() && t < b.erased_saturation.size() &&
                            t < b.erased_scale.size();
         ++t) {
      if (b.erased_grid[t] + b.erased_saturation[t] + b.erased_scale[t] != series.erased[t]) {
        out.push_back(where + "projected " + format + " step entry " + std::to_string(t) +
                      ": erased causes do not sum to erased " + std::to_string(series.erased[t]));
        break;
      }
    }
    check_length(series.fraction.size(), "a projected fraction");
    for (const double y : series.fraction) {
      if (!std::isnan(y) && !(y >= 0 && y <= 1)) {
        out.push_back(where + "projected fraction " + std::to_string(y) + " for " + format + " outside [0, 1]");
        break;
      }
    }
  }
}

}  // namespace

std::vector<std::string> trace_problems(const Trace& trace) {
  std::vector<std::string> out;
  if (trace.mode != "reference" && trace.mode != "target") {
    out.push_back("mode \"" + trace.mode + "\" is neither reference nor target");
  }
  if (trace.mode == "target") {
    try {
      (void)storage_format_from_name(trace.format);
    } catch (const std::exception&) {
      out.push_back("format \"" + trace.format + "\" is not a known format");
    }
  }
  try {
    (void)policy_from_name(trace.policy);
  } catch (const std::exception&) {
    out.push_back("policy \"" + trace.policy + "\" is not a known write-back policy");
  }
  for (std::size_t t = 0; t < trace.recorded_steps.size(); ++t) {
    const auto s = trace.recorded_steps[t];
    if (s < 0 || s > trace.steps || (t > 0 && s <= trace.recorded_steps[t - 1])) {
      out.push_back("recorded step " + std::to_string(s) + " (entry " + std::to_string(t) +
                    ") is not strictly increasing within [0, steps " + std::to_string(trace.steps) + "]");
      break;
    }
  }
  for (const double lr : trace.learning_rate) {
    if (std::isinf(lr) || lr < 0) {  // NaN: not recorded (external traces), allowed
      out.push_back("a learning rate is infinite or negative");
      break;
    }
  }
  if (trace.groups.empty()) {
    out.push_back("no parameter group");
  }
  for (const auto& g : trace.groups) {
    group_problems(trace, g, out);
  }
  return out;
}

const GroupTrace& Trace::group(const std::string& name) const {
  for (const GroupTrace& g : groups) {
    if (g.name == name) {
      return g;
    }
  }
  std::string known;
  for (const GroupTrace& g : groups) {
    known += (known.empty() ? "" : ", ") + g.name;
  }
  throw std::out_of_range("trace has no group \"" + name + "\" (groups: " + known + ")");
}

using namespace detail;  // NOLINT: the HDF5 helpers of detail/h5.hpp

const char* trace_schema_for_mode(const std::string& mode) {
  return mode == "reference" ? kTraceSchema : kTraceSchemaV2;
}

namespace detail {

namespace {

// Schema 3 or 4: the margin histogram and the compressed d histogram.
bool is_schema3(const Trace& trace) {
  return trace.schema == kTraceSchema || trace.schema == kTraceSchemaV3;
}

void check_group_name(const std::string& name, const std::string& file) {
  if (name.empty() || name.find('/') != std::string::npos || name.find('\n') != std::string::npos) {
    throw TraceFileError(file + ": invalid group name \"" + name + "\"");
  }
}

// Values [first, first + count) of the group's dataset `path`, from the partial file (GroupValues).
void read_values(const GroupValues& from, const std::string& path, std::size_t width, std::size_t first,
                 std::size_t count, std::int64_t* out) {
  from.int64s(path, width, first, count, out);
}
void read_values(const GroupValues& from, const std::string& path, std::size_t width, std::size_t first,
                 std::size_t count, double* out) {
  from.doubles(path, width, first, count, out);
}
void read_values(const GroupValues& from, const std::string& path, std::size_t width, std::size_t first,
                 std::size_t count, float* out) {
  from.floats(path, width, first, count, out);
}

// The values of the group's dataset `path` (width values per recorded step): `v`, the GroupTrace's own, or with `from`
// (finish) the partial file's, read a block at a time.
template <class T>
DatasetValues<T> values_of(const GroupValues* from, const std::vector<T>& v, std::string path, std::size_t width) {
  if (from == nullptr) {
    return in_memory(v);
  }
  DatasetValues<T> out;
  out.size = from->steps * width;
  out.read = [from, path = std::move(path), width](std::size_t first, std::size_t count, T* values) {
    read_values(*from, path, width, first, count, values);
  };
  return out;
}

std::size_t block_bytes(const GroupValues* from) {
  return from != nullptr ? from->block_bytes : kFinishBlockBytes;
}

// The d histogram: contiguous in schema 1 and 2, compressed in schema 3 (mostly zeros; 4 KiB per tensor and step as
// it was, 1/4 of a GPT-2-small trace's budget).
void write_ratio_histogram(hid_t gh, const Trace& trace, const GroupTrace& g, const std::string& file,
                           const GroupValues* from) {
  const auto bins = static_cast<hsize_t>(trace.histogram.bins);
  const DatasetValues<std::int64_t> values =
      values_of(from, g.ratio_histogram, "ratio_histogram", static_cast<std::size_t>(bins));
  if (bins == 0 || values.size % bins != 0) {
    throw TraceFileError(file + ": group " + g.name + ": ratio_histogram has " + std::to_string(values.size) +
                         " entries, not a multiple of " + std::to_string(trace.histogram.bins) + " bins");
  }
  const hsize_t rows = values.size / bins;
  if (is_schema3(trace)) {
    write_compressed_rows(gh, "ratio_histogram", values, rows, bins, file, block_bytes(from));
  } else {
    write_dataset(gh, "ratio_histogram", values, {rows, bins}, file, block_bytes(from));
  }
}

// Schema 2's joint pairs or schema 3's margin histogram, with the group's init absmax and a small group's w and u.
void write_joint(hid_t gh, const Trace& trace, const GroupTrace& g, const std::string& file, const GroupValues* from) {
  const std::size_t steps = trace.recorded_steps.size();
  if (g.has_pairs() && g.has_margin()) {
    throw TraceFileError(file + ": group " + g.name + " has both joint pairs (schema 2) and a margin histogram");
  }
  if (g.has_pairs() && from != nullptr) {
    throw TraceFileError(file + ": group " + g.name + ": joint pairs are written from memory only");
  }
  if (g.has_pairs() && (g.joint_keys.size() != g.joint_counts.size() ||
                        static_cast<std::size_t>(g.joint_offsets.back()) != g.joint_keys.size())) {
    throw TraceFileError(file + ": group " + g.name + ": joint histogram has " + std::to_string(g.joint_keys.size()) +
                         " keys, " + std::to_string(g.joint_counts.size()) + " counts and last offset " +
                         std::to_string(g.joint_offsets.back()));
  }
  const DatasetValues<std::int64_t> margin = values_of(from, g.margin, "joint/margin", trace.margin.bins());
  if (g.has_margin() && margin.size != steps * trace.margin.bins()) {
    throw TraceFileError(file + ": group " + g.name + ": margin histogram has " + std::to_string(margin.size) +
                         " counters, expected " + std::to_string(trace.margin.bins()) + " per recorded step x " +
                         std::to_string(steps));
  }
  if (g.has_pairs() && trace.schema != kTraceSchemaV2) {
    throw TraceFileError(file + ": group " + g.name + ": joint pairs belong to schema " + kTraceSchemaV2 + ", not " +
                         trace.schema);
  }
  if (g.has_margin() && !is_schema3(trace)) {
    throw TraceFileError(file + ": group " + g.name + ": a margin histogram needs schema " + kTraceSchema + " or " +
                         kTraceSchemaV3);
  }
  Handle jh = create_group(gh, "joint", file);
  write_scalar_attribute<double>(jh.get(), "init_absmax", g.init_absmax, file);
  if (g.has_pairs()) {
    write_vector(jh.get(), "offsets", g.joint_offsets, file);
    write_compressed_vector(jh.get(), "keys", g.joint_keys, file);
    write_compressed_vector(jh.get(), "counts", g.joint_counts, file);
  } else {
    write_compressed_rows(jh.get(), "margin", margin, steps, trace.margin.bins(), file, block_bytes(from));
  }
  if (g.has_exact()) {
    const auto size = static_cast<std::size_t>(g.size);
    const DatasetValues<float> w = values_of(from, g.exact_w, "joint/w", size);
    const DatasetValues<float> u = values_of(from, g.exact_u, "joint/u", size);
    const std::size_t want = size * steps;
    if (w.size != want || u.size != want) {
      throw TraceFileError(file + ": group " + g.name + ": exact w, u hold " + std::to_string(w.size) + ", " +
                           std::to_string(u.size) + " values, expected " + std::to_string(want) +
                           " (size x recorded steps)");
    }
    write_compressed_vector(jh.get(), "w", w, file, block_bytes(from));
    write_compressed_vector(jh.get(), "u", u, file, block_bytes(from));
  }
}

// <parent>/block_events (block formats only): attributes format and blocks, the [T] series (docs/trace-format.md).
// `at`: the parent's path under the group ("" or "projected/<format>/").
void write_block_events(hid_t parent, const BlockEventSeries& b, const std::string& format, const std::string& file,
                        const GroupValues* from, const std::string& at) {
  Handle bh = create_group(parent, "block_events", file);
  write_string_attribute(bh.get(), "format", format, file);
  write_scalar_attribute<std::int64_t>(bh.get(), "blocks", b.blocks, file);
  for (const BlockEventField& f : kBlockEventFields) {
    write_vector(bh.get(), f.name, values_of(from, b.*f.series, at + "block_events/" + f.name, 1), file,
                 block_bytes(from));
  }
}

// <format>/block_sample (a block format of a reference, block_sample.hpp): attributes rows, cols and elements, the
// sampled block indices, the [T x elements] rows of w and u, NVFP4's [T x kBlockSampleTensorWidth] tensor rows and a
// sampled tensor's anchor scales and [T x anchors * kBlockAnchorCounts] anchor counts;
// `at` the format's path in the group (projected/<format>/), `from` (finish) the partial file the rows are read from.
void write_block_sample(hid_t parent, const BlockSample& b, const std::string& format, std::size_t steps,
                        const std::string& where, const std::string& file, const GroupValues* from,
                        const std::string& at) {
  const bool nvfp4 = block_sample_has_tensor_rows(format);
  const auto elements = static_cast<std::size_t>(b.elements);
  const DatasetValues<float> w = values_of(from, b.w, at + "block_sample/w", elements);
  const DatasetValues<float> u = values_of(from, b.u, at + "block_sample/u", elements);
  const DatasetValues<float> tensor =
      nvfp4 ? values_of(from, b.tensor, at + "block_sample/tensor", kBlockSampleTensorWidth) : in_memory(b.tensor);
  const std::size_t anchor_width = b.anchor_scales.size() * kBlockAnchorCounts;
  const DatasetValues<std::int64_t> anchors =
      anchor_width > 0 ? values_of(from, b.anchors, at + "block_sample/anchors", anchor_width) : in_memory(b.anchors);
  if (w.size != steps * elements || u.size != steps * elements ||
      tensor.size != (nvfp4 ? steps * kBlockSampleTensorWidth : 0) || anchors.size != steps * anchor_width) {
    throw TraceFileError(file + ": " + where + "block_sample holds " + std::to_string(w.size) + " w, " +
                         std::to_string(u.size) + " u, " + std::to_string(tensor.size) + " tensor and " +
                         std::to_string(anchors.size) + " anchor values for " + std::to_string(steps) +
                         " recorded steps of " + std::to_string(elements) + " elements");
  }
  Handle bh = create_group(parent, "block_sample", file);
  write_scalar_attribute<std::int64_t>(bh.get(), "rows", b.rows, file);
  write_scalar_attribute<std::int64_t>(bh.get(), "cols", b.cols, file);
  write_scalar_attribute<std::int64_t>(bh.get(), "elements", b.elements, file);
  write_vector(bh.get(), "blocks", b.blocks, file);
  // w and u uncompressed: fp32 weights and proposals keep ~80% of their bytes under shuffle + deflate, and deflating
  // them cost a reference recording with two block formats ~4 plain steps per recorded step (docs/performance.md).
  write_dataset(bh.get(), "w", w, {steps, elements}, file, block_bytes(from));
  write_dataset(bh.get(), "u", u, {steps, elements}, file, block_bytes(from));
  if (nvfp4) {
    write_compressed_rows(bh.get(), "tensor", tensor, steps, kBlockSampleTensorWidth, file, block_bytes(from));
  }
  if (anchor_width > 0) {
    write_vector(bh.get(), "anchor_scales", b.anchor_scales, file);
    write_compressed_rows(bh.get(), "anchors", anchors, steps, anchor_width, file, block_bytes(from));
  }
}

void write_projected(hid_t gh, const GroupTrace& g, std::size_t steps, const std::string& file,
                     const GroupValues* from) {
  Handle projected = create_group(gh, "projected", file);
  for (const auto& [format, series] : g.projected) {
    const std::string at = "projected/" + format + "/";
    Handle fh = create_group(projected.get(), format, file);
    write_vector(fh.get(), "erased", values_of(from, series.erased, at + "erased", 1), file, block_bytes(from));
    write_vector(fh.get(), "fraction", values_of(from, series.fraction, at + "fraction", 1), file, block_bytes(from));
    if (!series.block_events.empty()) {
      write_block_events(fh.get(), series.block_events, format, file, from, at);
    }
    if (!series.block_sample.empty()) {
      write_block_sample(fh.get(), series.block_sample, format, steps,
                         "/groups/" + g.name + "/projected/" + format + "/", file, from, at);
    }
    if (!series.expected.empty()) {
      Handle expected = create_group(fh.get(), "expected", file);
      for (const auto& [policy, e] : series.expected) {
        if (policy.empty() || policy.find('/') != std::string::npos) {
          throw TraceFileError(file + ": group " + g.name + " format " + format + ": invalid projection name \"" +
                               policy + "\"");
        }
        const std::string pat = at + "expected/" + policy + "/";
        Handle ph = create_group(expected.get(), policy, file);
        write_vector(ph.get(), "erased", values_of(from, e.erased, pat + "erased", 1), file, block_bytes(from));
        write_vector(ph.get(), "fraction", values_of(from, e.fraction, pat + "fraction", 1), file, block_bytes(from));
      }
    }
  }
}

}  // namespace

void write_trace_header(hid_t root, const Trace& trace, const std::string& file, bool pairs, bool margin) {
  if (trace.schema != kTraceSchema && trace.schema != kTraceSchemaV3 && trace.schema != kTraceSchemaV2 &&
      trace.schema != kTraceSchemaV1) {
    throw TraceFileError(file + ": unknown trace schema \"" + trace.schema + "\"");
  }
  write_string_attribute(root, "schema", trace.schema, file);
  write_string_attribute(root, "mode", trace.mode, file);
  write_string_attribute(root, "format", trace.format, file);
  write_string_attribute(root, "policy", trace.policy, file);
  write_scalar_attribute<std::uint64_t>(root, "seed", trace.seed, file);
  write_scalar_attribute<std::int64_t>(root, "steps", trace.steps, file);
  write_string_attribute(root, "config_json", trace.config_json, file);
  if (!trace.numeric_contract.empty()) {
    write_string_attribute(root, "numeric_contract", trace.numeric_contract, file);
  }
  write_scalar_attribute<double>(root, "histogram_d_min", trace.histogram.d_min, file);
  write_scalar_attribute<double>(root, "histogram_bin_width", trace.histogram.bin_width, file);
  write_scalar_attribute<std::int64_t>(root, "histogram_bins", trace.histogram.bins, file);
  if (pairs) {
    write_scalar_attribute<std::int64_t>(root, "joint_w_bits", trace.joint.w_bits, file);
    write_scalar_attribute<std::int64_t>(root, "joint_u_bits", trace.joint.u_bits, file);
  }
  if (margin) {
    if (trace.margin.moments != (trace.schema == kTraceSchema)) {
      throw TraceFileError(file + ": a margin histogram " + (trace.margin.moments ? "with" : "without") +
                           " moments in a trace of schema " + trace.schema + " (moments: schema " + kTraceSchema +
                           " only)");
    }
    write_margin_layout(root, trace.margin, file);
  }
}

void write_margin_layout(hid_t root, const MarginLayout& margin, const std::string& file) {
  std::string formats;
  for (const std::string& f : margin.formats) {
    formats += (formats.empty() ? "" : "\n") + f;
  }
  write_string_attribute(root, "margin_formats", formats, file);
  write_scalar_attribute<std::int64_t>(root, "margin_coarse_lo", margin.rows.coarse_lo, file);
  write_scalar_attribute<std::int64_t>(root, "margin_fine_lo", margin.rows.fine_lo, file);
  write_scalar_attribute<std::int64_t>(root, "margin_fine_hi", margin.rows.fine_hi, file);
  write_scalar_attribute<std::int64_t>(root, "margin_coarse_hi", margin.rows.coarse_hi, file);
  write_scalar_attribute<std::int64_t>(root, "margin_sub_bins", kMarginSubBins, file);
  if (margin.moments) {
    write_scalar_attribute<std::int64_t>(root, "margin_moment_bits", kMarginMomentBits, file);
  }
}

void write_trace_steps(hid_t root, const Trace& trace, const std::string& file) {
  write_vector(root, "recorded_steps", trace.recorded_steps, file);
  write_vector(root, "loss", trace.loss, file);
  write_vector(root, "learning_rate", trace.learning_rate, file);
  std::string order;
  for (const GroupTrace& g : trace.groups) {
    order += (order.empty() ? "" : "\n") + g.name;
  }
  write_string_attribute(root, "group_order", order, file);
}

void write_trace_group(hid_t groups, const Trace& trace, const GroupTrace& g, const std::string& file,
                       const GroupValues* from) {
  check_group_name(g.name, file);
  Handle gh = create_group(groups, g.name, file);
  write_scalar_attribute<std::uint32_t>(gh.get(), "tensor_id", g.tensor_id, file);
  write_scalar_attribute<std::int64_t>(gh.get(), "size", g.size, file);
  const std::size_t block = block_bytes(from);
  write_vector(gh.get(), "nonzero", values_of(from, g.nonzero, "nonzero", 1), file, block);
  if (trace.mode != "reference" || !g.erased.empty()) {
    write_vector(gh.get(), "erased", values_of(from, g.erased, "erased", 1), file, block);
    write_vector(gh.get(), "saturated", values_of(from, g.saturated, "saturated", 1), file, block);
    write_vector(gh.get(), "applied", values_of(from, g.applied, "applied", 1), file, block);
    write_vector(gh.get(), "erased_fraction", values_of(from, g.erased_fraction, "erased_fraction", 1), file, block);
  }
  if (!g.block_events.empty()) {
    write_block_events(gh.get(), g.block_events, g.block_format, file, from, "");
  }
  if (!g.zero_weight.empty() || !g.ratio_histogram.empty() || !g.projected.empty()) {
    write_vector(gh.get(), "zero_weight", values_of(from, g.zero_weight, "zero_weight", 1), file, block);
    write_ratio_histogram(gh.get(), trace, g, file, from);
    if (g.has_joint()) {
      write_joint(gh.get(), trace, g, file, from);
    }
    write_projected(gh.get(), g, trace.recorded_steps.size(), file, from);
  }
}

void write_trace_tail(hid_t root, const Trace& trace, const std::string& file) {
  if (trace.validation_steps.size() != trace.validation_loss.size()) {
    throw TraceFileError(file + ": validation_steps has " + std::to_string(trace.validation_steps.size()) +
                         " entries but validation_loss " + std::to_string(trace.validation_loss.size()));
  }
  if (!trace.validation_steps.empty()) {
    write_vector(root, "validation_steps", trace.validation_steps, file);
    write_vector(root, "validation_loss", trace.validation_loss, file);
  }
  if (std::isfinite(trace.optimal_validation_loss)) {
    write_scalar_attribute<double>(root, "optimal_validation_loss", trace.optimal_validation_loss, file);
  }
  if (!trace.replays.empty()) {
    Handle replay = create_group(root, "replay", file);
    write_scalar_attribute<std::int64_t>(replay.get(), "steps", trace.replay_steps, file);
    write_vector(replay.get(), "checkpoints", trace.replay_checkpoints, file);
    write_vector(replay.get(), "start_validation_loss", trace.replay_start_loss, file);
    std::string names;
    for (const ReplaySeries& r : trace.replays) {
      const std::string name = replay_series_name(r);
      names += (names.empty() ? "" : "\n") + name;
      Handle rh = create_group(replay.get(), name, file);
      write_string_attribute(rh.get(), "format", r.format, file);
      write_string_attribute(rh.get(), "policy", r.policy, file);
      write_scalar_attribute<std::int64_t>(rh.get(), "sr_bits", r.sr_bits, file);
      if (r.sr_stream != "philox") {  // absent for the default stream: earlier traces stay byte-identical
        write_string_attribute(rh.get(), "sr_stream", r.sr_stream, file);
      }
      write_vector(rh.get(), "validation_loss", r.validation_loss, file);
    }
    write_string_attribute(replay.get(), "order", names, file);
  }
  if (is_schema3(trace)) {
    write_scalar_attribute<std::int64_t>(root, "complete", 1, file);  // last: a finished file
  }
}

void write_trace_to(hid_t root, const Trace& trace, const std::string& file) {
  const auto any = [&](bool (GroupTrace::*has)() const) {
    return std::any_of(trace.groups.begin(), trace.groups.end(), [&](const GroupTrace& g) { return (g.*has)(); });
  };
  // The margin layout of a schema-3 reference also when no step is recorded yet (a checkpoint's header).
  write_trace_header(root, trace, file, any(&GroupTrace::has_pairs),
                     any(&GroupTrace::has_margin) ||
                         (is_schema3(trace) && trace.mode == "reference" && !trace.margin.formats.empty()));
  write_trace_steps(root, trace, file);
  Handle groups = create_group(root, "groups", file);
  for (const GroupTrace& g : trace.groups) {
    write_trace_group(groups.get(), trace, g, file);
  }
  write_trace_tail(root, trace, file);
}

}  // namespace detail

std::string replay_series_name(const ReplaySeries& r) {
  return r.policy + (r.sr_bits > 0 ? "-r" + std::to_string(r.sr_bits) : "");
}

namespace detail {

std::uint64_t finished_trace_bound(const Trace& header, std::size_t steps, std::size_t validations,
                                   std::size_t replays) {
  std::uint64_t per_step = 24;
  for (const GroupTrace& g : header.groups) {
    std::uint64_t series = 6 + (g.block_events.empty() ? 0 : kBlockEventFields.size());
    std::uint64_t sample = 0;
    for (const auto& [name, p] : g.projected) {
      series += 2 + 2 * p.expected.size() + (p.block_events.empty() ? 0 : kBlockEventFields.size());
      sample += block_sample_step_bytes(p.block_sample, name);
    }
    per_step += sample + 8 * series + 8 * static_cast<std::uint64_t>(header.histogram.bins) + 8 * header.margin.bins() +
                8 * static_cast<std::uint64_t>(g.size <= kJointExactMaxCoordinates ? g.size : 0);
  }
  // joint pairs (schema 2 traces rewritten): at most one pair (16 bytes) per coordinate
  std::uint64_t pairs = 0;
  for (const GroupTrace& g : header.groups) {
    pairs += 16 * g.joint_keys.size();
  }
  const std::uint64_t raw = per_step * steps + pairs + 16 * validations + (16 + 8 * header.replays.size()) * replays +
                            header.config_json.size();
  // compression may add a little to incompressible chunks; headers and indexes of each object
  return raw + raw / 64 + (std::uint64_t{1} << 20) + 65536 * (header.groups.size() + header.replays.size() + 1);
}

void write_final_trace(const std::filesystem::path& path, std::uint64_t bound,
                       const std::function<void(hid_t, const std::string&)>& fill) {
  const std::filesystem::path tmp =
      path.parent_path() / (path.filename().string() + ".tmp." + std::to_string(::getpid()));
  const std::string file = tmp.string();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions with the file name, not stderr dumps
  try {
    Handle fcpl(untimed_plist(H5P_FILE_CREATE), H5Pclose, "creation property list", file);
    const hid_t id = H5Fcreate(file.c_str(), H5F_ACC_EXCL, fcpl.get(), H5P_DEFAULT);
    if (id < 0) {
      throw TraceFileError(file + ": cannot create the trace" +
                           (std::filesystem::exists(tmp.parent_path()) ? std::string() : ": no such directory"));
    }
    Handle h5(id, H5Fclose, "create file", file);
    reserve_file_space(h5.get(), bound, file);
    fill(h5.get(), file);
    if (h5.close() < 0) {
      throw TraceFileError(file + ": HDF5 error: close");
    }
    // HDF5 does not know of the reservation beyond its end of allocated space: cut the file back to that end, read
    // from the closed file (closing may release space at the end).
    haddr_t eoa = 0;
    {
      Handle check_h5(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "reopen to size", file);
      check(H5Fget_eoa(check_h5.get(), &eoa), "end of allocated space", file);
    }
    if (::truncate(file.c_str(), static_cast<off_t>(eoa)) != 0) {
      throw TraceFileError(file + ": cannot cut the reserved space: " + std::strerror(errno));
    }
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw TraceFileError(path.string() + ": cannot move the finished trace into place: " + ec.message());
  }
}

}  // namespace detail

void write_trace(const std::filesystem::path& path, const Trace& trace) {
  detail::write_final_trace(
      path,
      detail::finished_trace_bound(trace, trace.recorded_steps.size(), trace.validation_steps.size(),
                                   trace.replay_checkpoints.size()),
      [&](hid_t root, const std::string& file) { detail::write_trace_to(root, trace, file); });
}

Trace read_trace(const std::filesystem::path& path, const TraceReadOptions& options) {
  return TraceReader(path, options).read_all();
}

std::string read_trace_config_json(const std::filesystem::path& path) {
  // The header only (every recorded step's rows are left unread); a partial trace's too.
  return TraceReader(path, TraceReadOptions{true}).header().config_json;
}

namespace detail {

Trace read_trace_from(hid_t root, const std::string& file) {
  return TraceReader::read_all_from(static_cast<long long>(root), file, TraceReadOptions{});
}

}  // namespace detail

}  // namespace wbaudit::sim
