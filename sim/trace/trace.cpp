// trace.h5 through the HDF5 C API; the layout is documented in docs/trace-format.md.
#include "sim/trace/trace.hpp"

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/trace/detail/h5.hpp"

#include <fcntl.h>
#include <hdf5.h>
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
    if (n != T)
      out.push_back(where + what + " has " + std::to_string(n) + " entries for " + std::to_string(T) + " steps");
  };
  if (g.size < 0) out.push_back(where + "negative size");
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
    if (!target || t >= g.erased.size() || t >= g.erased_fraction.size()) continue;
    if (g.erased[t] < 0 || g.erased[t] > g.nonzero[t]) {
      out.push_back(at + "erased " + std::to_string(g.erased[t]) + " outside [0, nonzero " +
                    std::to_string(g.nonzero[t]) + "]");
    }
    const double y = g.erased_fraction[t];
    const bool consistent =
        g.nonzero[t] == 0
            ? std::isnan(y)
            : std::fabs(y - static_cast<double>(g.erased[t]) / static_cast<double>(g.nonzero[t])) <= 1e-12;
    if (!consistent) out.push_back(at + "erased_fraction " + std::to_string(y) + " is not erased / nonzero");
  }
  if (!g.block_events.empty()) {
    const BlockEventSeries& b = g.block_events;
    if (!target) out.push_back(where + "block_events in a reference trace");
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
  if (trace.groups.empty()) out.push_back("no parameter group");
  for (const auto& g : trace.groups) group_problems(trace, g, out);
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

namespace {

// <parent>/block_events: attributes format and blocks, the [T] series (docs/trace-format.md).
void write_block_events(hid_t parent, const BlockEventSeries& b, const std::string& format, const std::string& file) {
  Handle bh = create_group(parent, "block_events", file);
  write_string_attribute(bh.get(), "format", format, file);
  write_scalar_attribute<std::int64_t>(bh.get(), "blocks", b.blocks, file);
  write_vector(bh.get(), "erased_grid", b.erased_grid, file);
  write_vector(bh.get(), "erased_saturation", b.erased_saturation, file);
  write_vector(bh.get(), "erased_scale", b.erased_scale, file);
  write_vector(bh.get(), "collateral", b.collateral, file);
  write_vector(bh.get(), "flushed", b.flushed, file);
  write_vector(bh.get(), "rescaled_up", b.rescaled_up, file);
  write_vector(bh.get(), "rescaled_down", b.rescaled_down, file);
}

// Reads <parent>/block_events into b; returns its format attribute. where: the parent's path, ending in '/'.
std::string read_block_events(hid_t parent, const std::string& where, BlockEventSeries& b, const std::string& file) {
  Handle bh = open_group(parent, "block_events", file);
  const std::string bw = where + "block_events/";
  b.blocks = read_scalar_attribute<std::int64_t>(bh.get(), "blocks", file);
  b.erased_grid = read_dataset<std::int64_t>(bh.get(), "erased_grid", bw, file);
  b.erased_saturation = read_dataset<std::int64_t>(bh.get(), "erased_saturation", bw, file);
  b.erased_scale = read_dataset<std::int64_t>(bh.get(), "erased_scale", bw, file);
  b.collateral = read_dataset<std::int64_t>(bh.get(), "collateral", bw, file);
  b.flushed = read_dataset<std::int64_t>(bh.get(), "flushed", bw, file);
  b.rescaled_up = read_dataset<std::int64_t>(bh.get(), "rescaled_up", bw, file);
  b.rescaled_down = read_dataset<std::int64_t>(bh.get(), "rescaled_down", bw, file);
  return read_string_attribute(bh.get(), "format", file);
}

}  // namespace

namespace detail {

void write_trace_to(hid_t root, const Trace& trace, const std::string& file) {
  write_string_attribute(root, "schema", trace.schema, file);
  write_string_attribute(root, "mode", trace.mode, file);
  write_string_attribute(root, "format", trace.format, file);
  write_string_attribute(root, "policy", trace.policy, file);
  write_scalar_attribute<std::uint64_t>(root, "seed", trace.seed, file);
  write_scalar_attribute<std::int64_t>(root, "steps", trace.steps, file);
  write_string_attribute(root, "config_json", trace.config_json, file);
  write_scalar_attribute<double>(root, "histogram_d_min", trace.histogram.d_min, file);
  write_scalar_attribute<double>(root, "histogram_bin_width", trace.histogram.bin_width, file);
  write_scalar_attribute<std::int64_t>(root, "histogram_bins", trace.histogram.bins, file);
  if (std::any_of(trace.groups.begin(), trace.groups.end(), [](const GroupTrace& g) { return g.has_joint(); })) {
    write_scalar_attribute<std::int64_t>(root, "joint_w_bits", trace.joint.w_bits, file);
    write_scalar_attribute<std::int64_t>(root, "joint_u_bits", trace.joint.u_bits, file);
  }
  write_vector(root, "recorded_steps", trace.recorded_steps, file);
  write_vector(root, "loss", trace.loss, file);
  write_vector(root, "learning_rate", trace.learning_rate, file);

  std::string order;
  for (const GroupTrace& g : trace.groups) {
    order += (order.empty() ? "" : "\n") + g.name;
  }
  write_string_attribute(root, "group_order", order, file);
  Handle groups = create_group(root, "groups", file);
  for (const GroupTrace& g : trace.groups) {
    if (g.name.empty() || g.name.find('/') != std::string::npos || g.name.find('\n') != std::string::npos) {
      throw TraceFileError(file + ": invalid group name \"" + g.name + "\"");
    }
    Handle gh = create_group(groups.get(), g.name, file);
    write_scalar_attribute<std::uint32_t>(gh.get(), "tensor_id", g.tensor_id, file);
    write_scalar_attribute<std::int64_t>(gh.get(), "size", g.size, file);
    write_vector(gh.get(), "nonzero", g.nonzero, file);
    if (trace.mode != "reference" || !g.erased.empty()) {
      write_vector(gh.get(), "erased", g.erased, file);
      write_vector(gh.get(), "saturated", g.saturated, file);
      write_vector(gh.get(), "applied", g.applied, file);
      write_vector(gh.get(), "erased_fraction", g.erased_fraction, file);
    }
    if (!g.block_events.empty()) {
      write_block_events(gh.get(), g.block_events, g.block_format, file);
    }
    if (!g.zero_weight.empty() || !g.ratio_histogram.empty() || !g.projected.empty()) {
      write_vector(gh.get(), "zero_weight", g.zero_weight, file);
      const auto bins = static_cast<hsize_t>(trace.histogram.bins);
      if (bins == 0 || g.ratio_histogram.size() % bins != 0) {
        throw TraceFileError(file + ": group " + g.name + ": ratio_histogram has " +
                             std::to_string(g.ratio_histogram.size()) + " entries, not a multiple of " +
                             std::to_string(trace.histogram.bins) + " bins");
      }
      write_dataset(gh.get(), "ratio_histogram", g.ratio_histogram, {g.ratio_histogram.size() / bins, bins}, file);
      if (g.has_joint()) {
        if (g.joint_keys.size() != g.joint_counts.size() ||
            static_cast<std::size_t>(g.joint_offsets.back()) != g.joint_keys.size()) {
          throw TraceFileError(file + ": group " + g.name + ": joint histogram has " +
                               std::to_string(g.joint_keys.size()) + " keys, " + std::to_string(g.joint_counts.size()) +
                               " counts and last offset " + std::to_string(g.joint_offsets.back()));
        }
        Handle jh = create_group(gh.get(), "joint", file);
        write_scalar_attribute<double>(jh.get(), "init_absmax", g.init_absmax, file);
        write_vector(jh.get(), "offsets", g.joint_offsets, file);
        write_compressed_vector(jh.get(), "keys", g.joint_keys, file);
        write_compressed_vector(jh.get(), "counts", g.joint_counts, file);
        if (g.has_exact()) {
          const std::size_t want = static_cast<std::size_t>(g.size) * (g.joint_offsets.size() - 1);
          if (g.exact_w.size() != want || g.exact_u.size() != want) {
            throw TraceFileError(file + ": group " + g.name + ": exact w, u hold " + std::to_string(g.exact_w.size()) +
                                 ", " + std::to_string(g.exact_u.size()) + " values, expected " + std::to_string(want) +
                                 " (size x recorded steps)");
          }
          write_compressed_vector(jh.get(), "w", g.exact_w, file);
          write_compressed_vector(jh.get(), "u", g.exact_u, file);
        }
      }
      Handle projected = create_group(gh.get(), "projected", file);
      for (const auto& [format, series] : g.projected) {
        Handle fh = create_group(projected.get(), format, file);
        write_vector(fh.get(), "erased", series.erased, file);
        write_vector(fh.get(), "fraction", series.fraction, file);
        if (!series.block_events.empty()) {
          write_block_events(fh.get(), series.block_events, format, file);
        }
        if (!series.expected.empty()) {
          Handle expected = create_group(fh.get(), "expected", file);
          for (const auto& [policy, e] : series.expected) {
            if (policy.empty() || policy.find('/') != std::string::npos) {
              throw TraceFileError(file + ": group " + g.name + " format " + format + ": invalid projection name \"" +
                                   policy + "\"");
            }
            Handle ph = create_group(expected.get(), policy, file);
            write_vector(ph.get(), "erased", e.erased, file);
            write_vector(ph.get(), "fraction", e.fraction, file);
          }
        }
      }
    }
  }
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
      const std::string name = r.policy + (r.sr_bits > 0 ? "-r" + std::to_string(r.sr_bits) : "");
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
}

}  // namespace detail

namespace {

// Built in memory, then written with plain writes (detail::in_memory_file_image).
void write_file(const std::string& file, const Trace& trace) {
  write_new_file(file, in_memory_file_image(file, [&](hid_t root) { detail::write_trace_to(root, trace, file); }),
                 "trace");
}

}  // namespace

void write_trace(const std::filesystem::path& path, const Trace& trace) {
  const std::filesystem::path tmp =
      path.parent_path() / (path.filename().string() + ".tmp." + std::to_string(::getpid()));
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions with the file name, not stderr dumps
  try {
    write_file(tmp.string(), trace);
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

namespace {

// Opens a trace file read-only and calls read(root, file name); errors name the file.
template <class Read>
auto with_trace_file(const std::filesystem::path& path, Read read) {
  const std::string file = path.string();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (!std::filesystem::exists(path)) {
    throw TraceFileError(file + ": no such trace file");
  }
  if (H5Fis_hdf5(file.c_str()) <= 0) {
    throw TraceFileError(file + ": not an HDF5 file");
  }
  Handle h5(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "open file", file);
  return read(h5.get(), file);
}

}  // namespace

Trace read_trace(const std::filesystem::path& path) {
  return with_trace_file(path, [](hid_t root, const std::string& file) { return detail::read_trace_from(root, file); });
}

std::string read_trace_config_json(const std::filesystem::path& path) {
  return with_trace_file(
      path, [](hid_t root, const std::string& file) { return read_string_attribute(root, "config_json", file); });
}

namespace detail {

Trace read_trace_from(hid_t root, const std::string& file) {
  Trace trace;
  trace.schema = read_string_attribute(root, "schema", file);
  if (trace.schema != kTraceSchema && trace.schema != kTraceSchemaV1) {
    throw TraceFileError(file + ": unsupported trace schema \"" + trace.schema + "\" (expected " + kTraceSchema +
                         " or " + kTraceSchemaV1 + ")");
  }
  trace.mode = read_string_attribute(root, "mode", file);
  trace.format = read_string_attribute(root, "format", file);
  trace.policy = read_string_attribute(root, "policy", file);
  trace.seed = read_scalar_attribute<std::uint64_t>(root, "seed", file);
  trace.steps = read_scalar_attribute<std::int64_t>(root, "steps", file);
  trace.config_json = read_string_attribute(root, "config_json", file);
  trace.histogram.d_min = read_scalar_attribute<double>(root, "histogram_d_min", file);
  trace.histogram.bin_width = read_scalar_attribute<double>(root, "histogram_bin_width", file);
  trace.histogram.bins = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "histogram_bins", file));
  if (H5Aexists(root, "joint_w_bits") > 0) {
    trace.joint.w_bits = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "joint_w_bits", file));
    trace.joint.u_bits = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "joint_u_bits", file));
  }
  trace.recorded_steps = read_dataset<std::int64_t>(root, "recorded_steps", "/", file);
  trace.loss = read_dataset<double>(root, "loss", "/", file);
  trace.learning_rate = read_dataset<double>(root, "learning_rate", "/", file);

  const std::string order = read_string_attribute(root, "group_order", file);
  Handle groups = open_group(root, "groups", file);
  std::size_t begin = 0;
  while (begin < order.size()) {
    std::size_t end = order.find('\n', begin);
    if (end == std::string::npos) {
      end = order.size();
    }
    GroupTrace g;
    g.name = order.substr(begin, end - begin);
    begin = end + 1;
    const std::string where = "/groups/" + g.name + "/";
    const std::string projected_where = where + "projected";
    Handle gh = open_group(groups.get(), g.name, file);
    g.tensor_id = read_scalar_attribute<std::uint32_t>(gh.get(), "tensor_id", file);
    g.size = read_scalar_attribute<std::int64_t>(gh.get(), "size", file);
    g.nonzero = read_dataset<std::int64_t>(gh.get(), "nonzero", where, file);
    g.erased = read_optional<std::int64_t>(gh.get(), "erased", where, file);
    g.saturated = read_optional<std::int64_t>(gh.get(), "saturated", where, file);
    g.applied = read_optional<std::int64_t>(gh.get(), "applied", where, file);
    g.erased_fraction = read_optional<double>(gh.get(), "erased_fraction", where, file);
    if (has_link(gh.get(), "block_events")) {
      g.block_format = read_block_events(gh.get(), where, g.block_events, file);
    }
    g.zero_weight = read_optional<std::int64_t>(gh.get(), "zero_weight", where, file);
    g.ratio_histogram = read_optional<std::int64_t>(gh.get(), "ratio_histogram", where, file);
    if (has_link(gh.get(), "joint")) {
      Handle jh = open_group(gh.get(), "joint", file);
      const std::string jwhere = where + "joint/";
      g.init_absmax = read_scalar_attribute<double>(jh.get(), "init_absmax", file);
      g.joint_offsets = read_dataset<std::int64_t>(jh.get(), "offsets", jwhere, file);
      const std::vector<std::uint64_t> keys = read_dataset<std::uint64_t>(jh.get(), "keys", jwhere, file);
      const std::vector<std::int64_t> counts = read_dataset<std::int64_t>(jh.get(), "counts", jwhere, file);
      g.joint_keys.assign(keys.begin(), keys.end());
      g.joint_counts.assign(counts.begin(), counts.end());
      if (has_link(jh.get(), "w")) {
        g.exact_w = read_dataset<float>(jh.get(), "w", jwhere, file);
        g.exact_u = read_dataset<float>(jh.get(), "u", jwhere, file);
        const std::size_t steps = g.joint_offsets.empty() ? 0 : g.joint_offsets.size() - 1;
        const std::size_t want = static_cast<std::size_t>(g.size) * steps;
        if (want == 0 || g.exact_w.size() != want || g.exact_u.size() != want) {
          throw TraceFileError(file + ": " + jwhere + "w, u: " + std::to_string(g.exact_w.size()) + ", " +
                               std::to_string(g.exact_u.size()) +
                               " values, expected size x recorded steps = " + std::to_string(want));
        }
      }
      if (g.joint_offsets.empty() || g.joint_keys.size() != g.joint_counts.size() ||
          static_cast<std::size_t>(g.joint_offsets.back()) != g.joint_keys.size()) {
        throw TraceFileError(file + ": " + jwhere + ": " + std::to_string(g.joint_keys.size()) + " keys, " +
                             std::to_string(g.joint_counts.size()) + " counts, " +
                             std::to_string(g.joint_offsets.size()) + " offsets (inconsistent)");
      }
    }
    if (has_link(gh.get(), "projected")) {
      Handle projected = open_group(gh.get(), "projected", file);
      H5G_info_t info;
      check(H5Gget_info(projected.get(), &info), "H5Gget_info " + where + "projected", file);
      for (hsize_t i = 0; i < info.nlinks; ++i) {
        const ssize_t len =
            H5Lget_name_by_idx(projected.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
        if (len < 0) {
          std::string message = file;
          message += ": HDF5 error: link name in " + projected_where;
          throw TraceFileError(message);
        }
        std::string name(static_cast<std::size_t>(len), '\0');
        H5Lget_name_by_idx(projected.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1,
                           H5P_DEFAULT);
        Handle fh = open_group(projected.get(), name, file);
        std::string fwhere = projected_where;
        fwhere += "/" + name + "/";
        ProjectedSeries series;
        series.erased = read_dataset<std::int64_t>(fh.get(), "erased", fwhere, file);
        series.fraction = read_dataset<double>(fh.get(), "fraction", fwhere, file);
        if (has_link(fh.get(), "expected")) {
          Handle expected = open_group(fh.get(), "expected", file);
          for (const std::string& policy : link_names(expected.get(), fwhere + "expected", file)) {
            Handle ph = open_group(expected.get(), policy, file);
            const std::string pwhere = fwhere + "expected/" + policy + "/";
            ExpectedSeries e;
            e.erased = read_dataset<double>(ph.get(), "erased", pwhere, file);
            e.fraction = read_dataset<double>(ph.get(), "fraction", pwhere, file);
            series.expected.emplace(policy, std::move(e));
          }
        }
        if (has_link(fh.get(), "block_events")) {
          (void)read_block_events(fh.get(), fwhere, series.block_events, file);
        }
        g.projected.emplace(name, std::move(series));
      }
    }
    trace.groups.push_back(std::move(g));
  }
  trace.validation_steps = read_optional<std::int64_t>(root, "validation_steps", "/", file);
  trace.validation_loss = read_optional<double>(root, "validation_loss", "/", file);
  if (trace.validation_steps.size() != trace.validation_loss.size()) {
    throw TraceFileError(file + ": validation_steps has " + std::to_string(trace.validation_steps.size()) +
                         " entries but validation_loss " + std::to_string(trace.validation_loss.size()));
  }
  if (H5Aexists(root, "optimal_validation_loss") > 0) {
    trace.optimal_validation_loss = read_scalar_attribute<double>(root, "optimal_validation_loss", file);
  }
  if (has_link(root, "replay")) {
    Handle replay = open_group(root, "replay", file);
    trace.replay_steps = read_scalar_attribute<std::int64_t>(replay.get(), "steps", file);
    trace.replay_checkpoints = read_dataset<std::int64_t>(replay.get(), "checkpoints", "/replay/", file);
    trace.replay_start_loss = read_dataset<double>(replay.get(), "start_validation_loss", "/replay/", file);
    const std::string names = read_string_attribute(replay.get(), "order", file);
    std::size_t b = 0;
    while (b < names.size()) {
      std::size_t e = names.find('\n', b);
      if (e == std::string::npos) {
        e = names.size();
      }
      const std::string name = names.substr(b, e - b);
      b = e + 1;
      Handle rh = open_group(replay.get(), name, file);
      ReplaySeries r;
      r.format = read_string_attribute(rh.get(), "format", file);
      r.policy = read_string_attribute(rh.get(), "policy", file);
      r.sr_bits = static_cast<int>(read_scalar_attribute<std::int64_t>(rh.get(), "sr_bits", file));
      if (H5Aexists(rh.get(), "sr_stream") > 0) {
        r.sr_stream = read_string_attribute(rh.get(), "sr_stream", file);
      }
      r.validation_loss = read_dataset<double>(rh.get(), "validation_loss", "/replay/" + name + "/", file);
      if (r.validation_loss.size() != trace.replay_checkpoints.size()) {
        throw TraceFileError(file + ": /replay/" + name + "/validation_loss has " +
                             std::to_string(r.validation_loss.size()) + " entries for " +
                             std::to_string(trace.replay_checkpoints.size()) + " checkpoints");
      }
      trace.replays.push_back(std::move(r));
    }
  }
  return trace;
}

}  // namespace detail

}  // namespace wbaudit::sim
