// The trace reader (trace_reader.hpp): a finished trace of any schema, or the partial trace of an unfinished run.
#include "sim/trace/trace_reader.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/trace/block_sample.hpp"
#include "sim/trace/detail/h5.hpp"

namespace wbaudit::sim {

using namespace detail;  // NOLINT: the HDF5 helpers of detail/h5.hpp

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) {
      end = text.size();
    }
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// The first `count` elements of a 1-D dataset (all of them when count is npos; its length otherwise at least count).
template <class T>
std::vector<T> read_prefix(hid_t loc, const std::string& name, const std::string& where, const std::string& file,
                           std::size_t count) {
  if (!has_link(loc, name)) {
    throw TraceFileError(file + ": not a wbaudit trace: missing dataset " + where + name);
  }
  Handle set(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + where + name, file);
  const RowExtent e = row_extent(set.get(), where + name, file);
  const std::size_t n = count == std::string::npos ? static_cast<std::size_t>(e.rows * e.width) : count;
  if (static_cast<std::size_t>(e.rows * e.width) < n) {
    throw TraceFileError(file + ": " + where + name + " has " + std::to_string(e.rows * e.width) + " entries for " +
                         std::to_string(n) + " recorded steps (truncated?)");
  }
  std::vector<T> out(n);
  read_elements(set.get(), 0, n, out.data(), where + name, file);
  return out;
}

// Schema 3's layout has no moments; schema 4's has them, of kMarginMomentBits bits.
MarginLayout read_margin_layout(hid_t root, const std::string& schema, const std::string& file) {
  MarginLayout m;
  m.moments = schema != kTraceSchemaV3;
  const std::int64_t bits = H5Aexists(root, "margin_moment_bits") > 0
                                ? read_scalar_attribute<std::int64_t>(root, "margin_moment_bits", file)
                                : 0;
  if (bits != (m.moments ? kMarginMomentBits : 0)) {
    throw TraceFileError(file + ": margin histogram moments of " + std::to_string(bits) +
                         " bits in a trace of schema " + schema + " (expected " +
                         std::to_string(m.moments ? kMarginMomentBits : 0) + ")");
  }
  m.formats = split_lines(read_string_attribute(root, "margin_formats", file));
  m.rows.coarse_lo = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "margin_coarse_lo", file));
  m.rows.fine_lo = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "margin_fine_lo", file));
  m.rows.fine_hi = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "margin_fine_hi", file));
  m.rows.coarse_hi = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "margin_coarse_hi", file));
  const auto sub = read_scalar_attribute<std::int64_t>(root, "margin_sub_bins", file);
  if (sub != kMarginSubBins || !m.rows.valid()) {
    throw TraceFileError(file + ": margin histogram layout not understood (sub-bins " + std::to_string(sub) +
                         ", rows " + std::to_string(m.rows.coarse_lo) + ".." + std::to_string(m.rows.coarse_hi) + ")");
  }
  return m;
}

}  // namespace

struct TraceReader::State {
  std::unique_ptr<Handle> file_handle;  // owned when opened from a path
  hid_t root = -1;
  std::string file;
  Trace header;
  std::size_t steps = 0;
  std::vector<std::vector<std::int64_t>> offsets;  // schema 2: each group's joint offsets ([T + 1], empty: none)
  std::vector<char> exact;                         // each group keeps its w and u
  std::vector<char> margin;                        // each group has a margin histogram

  void read_header(const TraceReadOptions& options);
  bool histograms = true;  // TraceReadOptions::histograms
  void read_group_header(GroupTrace& g, std::size_t index);
  void read_validation_and_replay();
  GroupTrace read_group(std::size_t g, std::size_t first, std::size_t count) const;
  template <class T>
  void read_values(std::size_t g, const std::string& path, std::size_t width, std::size_t first, std::size_t count,
                   T* out) const;
};

namespace {

// Whether `path` (names joined by '/') leads to an object under loc.
bool has_path(hid_t loc, const std::string& path) {
  for (std::size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    if (!has_link(loc, path.substr(0, slash))) {
      return false;
    }
  }
  return has_link(loc, path);
}

}  // namespace

template <class T>
void TraceReader::State::read_values(std::size_t index, const std::string& path, std::size_t width, std::size_t first,
                                     std::size_t count, T* out) const {
  if (index >= header.groups.size()) {
    throw TraceFileError(file + ": read of group " + std::to_string(index) + " of " +
                         std::to_string(header.groups.size()));
  }
  const std::string where = "/groups/" + header.groups[index].name + "/" + path;
  Handle groups = open_group(root, "groups", file);
  Handle gh = open_group(groups.get(), header.groups[index].name, file);
  if (!has_path(gh.get(), path)) {
    throw TraceFileError(file + ": not a wbaudit trace: missing dataset " + where);
  }
  Handle set(H5Dopen2(gh.get(), path.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + where, file);
  const RowExtent e = row_extent(set.get(), where, file);
  const std::size_t have = static_cast<std::size_t>(e.rows * e.width), want = steps * width;
  if (have < want || (header.complete && have != want)) {
    throw TraceFileError(file + ": " + where + " has " + std::to_string(have) + " entries, expected " +
                         std::to_string(width) + " per recorded step x " + std::to_string(steps));
  }
  if (first + count > want) {
    throw TraceFileError(file + ": read of values [" + std::to_string(first) + ", " + std::to_string(first + count) +
                         ") of " + where + ", which has " + std::to_string(want) + " for the recorded steps");
  }
  if (count == 0) {
    return;
  }
  // A 2-D dataset is read in whole rows (read_elements): the rows around values that do not start or end a row (a
  // 1-D chunk of the finished file's kept w or u, read from the partial file's rows), then the values asked for.
  const auto row = static_cast<std::size_t>(e.width);
  const std::size_t row_first = first / row, row_end = (first + count + row - 1) / row;
  if (row_first * row == first && row_end * row == first + count) {
    read_elements<T>(set.get(), first, count, out, where, file);
    return;
  }
  std::vector<T> rows((row_end - row_first) * row);
  read_elements<T>(set.get(), row_first * row, rows.size(), rows.data(), where, file);
  std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(first - row_first * row), count, out);
}

void TraceReader::State::read_header(const TraceReadOptions& options) {
  histograms = options.histograms;
  Trace& t = header;
  t.schema = read_string_attribute(root, "schema", file);
  if (t.schema != kTraceSchema && t.schema != kTraceSchemaV3 && t.schema != kTraceSchemaV2 &&
      t.schema != kTraceSchemaV1) {
    throw TraceFileError(file + ": unsupported trace schema \"" + t.schema + "\" (expected " + kTraceSchema + ", " +
                         kTraceSchemaV3 + ", " + kTraceSchemaV2 + " or " + kTraceSchemaV1 + ")");
  }
  t.mode = read_string_attribute(root, "mode", file);
  t.format = read_string_attribute(root, "format", file);
  t.policy = read_string_attribute(root, "policy", file);
  t.seed = read_scalar_attribute<std::uint64_t>(root, "seed", file);
  t.steps = read_scalar_attribute<std::int64_t>(root, "steps", file);
  t.config_json = read_string_attribute(root, "config_json", file);
  if (H5Aexists(root, "numeric_contract") > 0) {
    t.numeric_contract = read_string_attribute(root, "numeric_contract", file);
  }
  t.histogram.d_min = read_scalar_attribute<double>(root, "histogram_d_min", file);
  t.histogram.bin_width = read_scalar_attribute<double>(root, "histogram_bin_width", file);
  t.histogram.bins = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "histogram_bins", file));
  if (H5Aexists(root, "joint_w_bits") > 0) {
    t.joint.w_bits = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "joint_w_bits", file));
    t.joint.u_bits = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "joint_u_bits", file));
  }
  if (H5Aexists(root, "margin_formats") > 0) {
    t.margin = read_margin_layout(root, t.schema, file);
  }
  t.complete = H5Aexists(root, "complete") <= 0 || read_scalar_attribute<std::int64_t>(root, "complete", file) == 1;
  t.recorded_steps = read_prefix<std::int64_t>(root, "recorded_steps", "/", file, std::string::npos);
  steps = t.recorded_steps.size();
  if (!t.complete && !options.allow_incomplete) {
    throw TraceIncompleteError(
        file + ": the trace of an unfinished run (attribute complete = 0; " + std::to_string(steps) +
        " recorded steps" + (steps ? ", the last at step " + std::to_string(t.recorded_steps.back()) : std::string()) +
        "): it is still being written, or its run stopped before the end; finish the run (wbaudit run --resume) "
        "or read it as incomplete");
  }
  t.loss = read_prefix<double>(root, "loss", "/", file, steps);
  t.learning_rate = read_prefix<double>(root, "learning_rate", "/", file, steps);
  const std::vector<std::string> names = split_lines(read_string_attribute(root, "group_order", file));
  offsets.assign(names.size(), {});
  exact.assign(names.size(), 0);
  margin.assign(names.size(), 0);
  for (std::size_t i = 0; i < names.size(); ++i) {
    GroupTrace g;
    g.name = names[i];
    read_group_header(g, i);
    t.groups.push_back(std::move(g));
  }
  read_validation_and_replay();
}

void TraceReader::State::read_group_header(GroupTrace& g, std::size_t index) {
  Handle groups = open_group(root, "groups", file);
  Handle gh = open_group(groups.get(), g.name, file);
  const std::string where = "/groups/" + g.name + "/";
  g.tensor_id = read_scalar_attribute<std::uint32_t>(gh.get(), "tensor_id", file);
  g.size = read_scalar_attribute<std::int64_t>(gh.get(), "size", file);
  if (has_link(gh.get(), "block_events")) {  // a target group held in a block format
    Handle bh = open_group(gh.get(), "block_events", file);
    g.block_format = read_string_attribute(bh.get(), "format", file);
    g.block_events.blocks = read_scalar_attribute<std::int64_t>(bh.get(), "blocks", file);
  }
  if (has_link(gh.get(), "joint")) {
    Handle jh = open_group(gh.get(), "joint", file);
    const std::string jwhere = where + "joint/";
    g.init_absmax = read_scalar_attribute<double>(jh.get(), "init_absmax", file);
    if (has_link(jh.get(), "offsets")) {
      offsets[index] = read_prefix<std::int64_t>(jh.get(), "offsets", jwhere, file, steps + 1);
      const std::vector<std::int64_t>& o = offsets[index];
      for (std::size_t t = 0; t + 1 < o.size(); ++t) {
        if (o[t] < 0 || o[t + 1] < o[t]) {
          throw TraceFileError(file + ": " + jwhere + "offsets: not increasing at entry " + std::to_string(t));
        }
      }
    } else if (!has_link(jh.get(), "margin")) {
      throw TraceFileError(file + ": " + jwhere +
                           ": neither joint pairs (offsets, keys, counts) nor a margin histogram");
    } else if (header.margin.formats.empty()) {
      throw TraceFileError(file + ": " + jwhere + "margin without the root's margin layout attributes");
    } else {
      margin[index] = 1;
    }
    if (has_link(jh.get(), "w")) {
      exact[index] = 1;
    }
  }
  if (has_link(gh.get(), "projected")) {
    Handle projected = open_group(gh.get(), "projected", file);
    for (const std::string& name : link_names(projected.get(), where + "projected", file)) {
      ProjectedSeries& series = g.projected[name];
      Handle fh = open_group(projected.get(), name, file);
      if (has_link(fh.get(), "block_events")) {  // a projected block format
        Handle bh = open_group(fh.get(), "block_events", file);
        series.block_events.blocks = read_scalar_attribute<std::int64_t>(bh.get(), "blocks", file);
      }
      if (has_link(fh.get(), "block_sample")) {  // what the grid needs at any learning-rate scale
        Handle sh = open_group(fh.get(), "block_sample", file);
        BlockSample& b = series.block_sample;
        b.rows = read_scalar_attribute<std::int64_t>(sh.get(), "rows", file);
        b.cols = read_scalar_attribute<std::int64_t>(sh.get(), "cols", file);
        b.elements = read_scalar_attribute<std::int64_t>(sh.get(), "elements", file);
        b.blocks = read_prefix<std::int64_t>(sh.get(), "blocks", where + "projected/" + name + "/block_sample/", file,
                                             std::string::npos);
        if (b.rows < 0 || b.cols < 0 || b.elements <= 0 || b.blocks.empty()) {
          throw TraceFileError(file + ": " + where + "projected/" + name + "/block_sample: empty or negative (rows " +
                               std::to_string(b.rows) + ", cols " + std::to_string(b.cols) + ", elements " +
                               std::to_string(b.elements) + ", " + std::to_string(b.blocks.size()) + " blocks)");
        }
        if (has_link(sh.get(), "anchor_scales")) {  // a sampled tensor's exact anchors (absent before them)
          b.anchor_scales = read_prefix<double>(
              sh.get(), "anchor_scales", where + "projected/" + name + "/block_sample/", file, std::string::npos);
          for (const double s : b.anchor_scales) {
            if (!(s > 0) || !std::isfinite(s)) {
              throw TraceFileError(file + ": " + where + "projected/" + name + "/block_sample/anchor_scales: scale " +
                                   std::to_string(s) + " is not positive and finite");
            }
          }
        }
      }
      if (has_link(fh.get(), "expected")) {
        Handle expected = open_group(fh.get(), "expected", file);
        for (const std::string& policy : link_names(expected.get(), where + "projected/" + name + "/expected", file)) {
          series.expected[policy];
        }
      }
    }
  }
}

void TraceReader::State::read_validation_and_replay() {
  Trace& t = header;
  if (has_link(root, "validation_steps") || has_link(root, "validation_loss")) {
    t.validation_steps = read_prefix<std::int64_t>(root, "validation_steps", "/", file, std::string::npos);
    t.validation_loss = read_prefix<double>(root, "validation_loss", "/", file, std::string::npos);
    if (t.validation_steps.size() != t.validation_loss.size()) {
      if (t.complete) {
        throw TraceFileError(file + ": validation_steps has " + std::to_string(t.validation_steps.size()) +
                             " entries but validation_loss " + std::to_string(t.validation_loss.size()));
      }
      const std::size_t v = std::min(t.validation_steps.size(), t.validation_loss.size());  // one in progress
      t.validation_steps.resize(v);
      t.validation_loss.resize(v);
    }
  }
  if (H5Aexists(root, "optimal_validation_loss") > 0) {
    t.optimal_validation_loss = read_scalar_attribute<double>(root, "optimal_validation_loss", file);
  }
  if (!has_link(root, "replay")) {
    return;
  }
  Handle replay = open_group(root, "replay", file);
  t.replay_steps = read_scalar_attribute<std::int64_t>(replay.get(), "steps", file);
  t.replay_checkpoints = read_prefix<std::int64_t>(replay.get(), "checkpoints", "/replay/", file, std::string::npos);
  t.replay_start_loss = read_prefix<double>(replay.get(), "start_validation_loss", "/replay/", file, std::string::npos);
  std::size_t k = std::min(t.replay_checkpoints.size(), t.replay_start_loss.size());
  for (const std::string& name : split_lines(read_string_attribute(replay.get(), "order", file))) {
    Handle rh = open_group(replay.get(), name, file);
    ReplaySeries r;
    r.format = read_string_attribute(rh.get(), "format", file);
    r.policy = read_string_attribute(rh.get(), "policy", file);
    r.sr_bits = static_cast<int>(read_scalar_attribute<std::int64_t>(rh.get(), "sr_bits", file));
    if (H5Aexists(rh.get(), "sr_stream") > 0) {
      r.sr_stream = read_string_attribute(rh.get(), "sr_stream", file);
    }
    r.validation_loss =
        read_prefix<double>(rh.get(), "validation_loss", "/replay/" + name + "/", file, std::string::npos);
    if (t.complete && r.validation_loss.size() != t.replay_checkpoints.size()) {
      throw TraceFileError(file + ": /replay/" + name + "/validation_loss has " +
                           std::to_string(r.validation_loss.size()) + " entries for " +
                           std::to_string(t.replay_checkpoints.size()) + " checkpoints");
    }
    k = std::min(k, r.validation_loss.size());
    t.replays.push_back(std::move(r));
  }
  // A partial trace: the checkpoints whose replays all finished.
  t.replay_checkpoints.resize(k);
  t.replay_start_loss.resize(k);
  for (ReplaySeries& r : t.replays) {
    r.validation_loss.resize(k);
  }
}

GroupTrace TraceReader::State::read_group(std::size_t index, std::size_t first, std::size_t count) const {
  if (index >= header.groups.size() || first + count > steps) {
    throw TraceFileError(file + ": read of group " + std::to_string(index) + " steps [" + std::to_string(first) + ", " +
                         std::to_string(first + count) + ") outside " + std::to_string(header.groups.size()) +
                         " groups x " + std::to_string(steps) + " recorded steps");
  }
  GroupTrace g = header.groups[index];
  Handle groups = open_group(root, "groups", file);
  Handle gh = open_group(groups.get(), g.name, file);
  const std::string where = "/groups/" + g.name + "/";
  const auto rows = [&](hid_t loc, const std::string& name, const std::string& at, auto& out, std::size_t width) {
    using T = typename std::decay_t<decltype(out)>::value_type;
    Handle set(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + at + name, file);
    const RowExtent e = row_extent(set.get(), at + name, file);
    if (static_cast<std::size_t>(e.rows * e.width) < steps * width ||
        (header.complete && e.rows * e.width != steps * width)) {
      throw TraceFileError(
          file + ": " + at + name + " has " + std::to_string(e.rows * e.width) + " entries, expected " +
          std::to_string(width) + " per recorded step x " + std::to_string(steps) +
          (first + count > 0 ? " (reading step " + std::to_string(header.recorded_steps[first]) + ")" : std::string()));
    }
    out.resize(count * width);
    read_elements<T>(set.get(), first * width, count * width, out.data(), at + name, file);
  };
  const auto optional_rows = [&](hid_t loc, const std::string& name, const std::string& at, auto& out,
                                 std::size_t width) {
    if (has_link(loc, name)) {
      rows(loc, name, at, out, width);
    }
  };
  rows(gh.get(), "nonzero", where, g.nonzero, 1);
  optional_rows(gh.get(), "erased", where, g.erased, 1);
  optional_rows(gh.get(), "saturated", where, g.saturated, 1);
  optional_rows(gh.get(), "applied", where, g.applied, 1);
  optional_rows(gh.get(), "erased_fraction", where, g.erased_fraction, 1);
  const auto block_rows = [&](hid_t parent, const std::string& at, BlockEventSeries& b) {
    if (b.empty()) {
      return;
    }
    Handle bh = open_group(parent, "block_events", file);
    for (const BlockEventField& f : kBlockEventFields) {
      rows(bh.get(), f.name, at + "block_events/", b.*f.series, 1);
    }
  };
  block_rows(gh.get(), where, g.block_events);
  optional_rows(gh.get(), "zero_weight", where, g.zero_weight, 1);
  if (histograms) {
    optional_rows(gh.get(), "ratio_histogram", where, g.ratio_histogram,
                  static_cast<std::size_t>(header.histogram.bins));
  }
  if (histograms && has_link(gh.get(), "joint")) {
    Handle jh = open_group(gh.get(), "joint", file);
    const std::string jwhere = where + "joint/";
    if (!offsets[index].empty()) {
      const std::vector<std::int64_t>& o = offsets[index];
      const auto lo = static_cast<hsize_t>(o[first]), hi = static_cast<hsize_t>(o[first + count]);
      for (std::size_t t = first; t <= first + count; ++t) {
        g.joint_offsets.push_back(o[t] - o[first]);
      }
      for (const char* name : {"keys", "counts"}) {
        Handle set(H5Dopen2(jh.get(), name, H5P_DEFAULT), H5Dclose, "open dataset " + jwhere + name, file);
        const RowExtent e = row_extent(set.get(), jwhere + name, file);
        if (e.rows < static_cast<hsize_t>(o.back()) || (header.complete && e.rows != static_cast<hsize_t>(o.back()))) {
          throw TraceFileError(file + ": " + jwhere + ": " + std::to_string(e.rows) + " " + name + " for last offset " +
                               std::to_string(o.back()) + " (inconsistent)");
        }
        if (name[0] == 'k') {
          g.joint_keys.resize(hi - lo);
          read_elements(set.get(), lo, hi - lo, g.joint_keys.data(), jwhere + name, file);
        } else {
          g.joint_counts.resize(hi - lo);
          read_elements(set.get(), lo, hi - lo, g.joint_counts.data(), jwhere + name, file);
        }
      }
    } else {
      rows(jh.get(), "margin", jwhere, g.margin, header.margin.bins());
    }
    if (exact[index]) {
      const auto size = static_cast<std::size_t>(g.size);
      if (size == 0) {
        throw TraceFileError(file + ": " + jwhere + "w, u kept for a group of size 0");
      }
      rows(jh.get(), "w", jwhere, g.exact_w, size);
      rows(jh.get(), "u", jwhere, g.exact_u, size);
    }
  }
  for (auto& [name, series] : g.projected) {
    Handle projected = open_group(gh.get(), "projected", file);
    Handle fh = open_group(projected.get(), name, file);
    const std::string fwhere = where + "projected/" + name + "/";
    rows(fh.get(), "erased", fwhere, series.erased, 1);
    rows(fh.get(), "fraction", fwhere, series.fraction, 1);
    block_rows(fh.get(), fwhere, series.block_events);
    if (histograms && !series.block_sample.empty()) {
      Handle sh = open_group(fh.get(), "block_sample", file);
      BlockSample& b = series.block_sample;
      const auto width = static_cast<std::size_t>(b.elements);
      rows(sh.get(), "w", fwhere + "block_sample/", b.w, width);
      rows(sh.get(), "u", fwhere + "block_sample/", b.u, width);
      if (has_link(sh.get(), "tensor")) {
        rows(sh.get(), "tensor", fwhere + "block_sample/", b.tensor, kBlockSampleTensorWidth);
      }
      if (!b.anchor_scales.empty()) {
        rows(sh.get(), "anchors", fwhere + "block_sample/", b.anchors, b.anchor_scales.size() * kBlockAnchorCounts);
      }
    }
    for (auto& [policy, e] : series.expected) {
      Handle expected = open_group(fh.get(), "expected", file);
      Handle ph = open_group(expected.get(), policy, file);
      const std::string pwhere = fwhere + "expected/" + policy + "/";
      rows(ph.get(), "erased", pwhere, e.erased, 1);
      rows(ph.get(), "fraction", pwhere, e.fraction, 1);
    }
  }
  return g;
}

namespace {

// Opens a trace file read-only; a partial trace whose writer holds it (or died holding it) under HDF5's
// single-writer / multiple-reader protocol is opened as a SWMR reader.
Handle open_trace_file(const std::filesystem::path& path) {
  const std::string file = path.string();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (!std::filesystem::exists(path)) {
    throw TraceFileError(file + ": no such trace file");
  }
  if (H5Fis_hdf5(file.c_str()) <= 0) {
    throw TraceFileError(file + ": not an HDF5 file");
  }
  hid_t id = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    // A SWMR reader retries a metadata read whose checksum fails (a writer may be mid-flush), doubling its sleep each
    // time from 1 us: HDF5's default of 100 tries never ends on a cut file. 16 tries wait at most ~65 ms in all.
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "access property list", file);
    check(H5Pset_metadata_read_attempts(fapl.get(), 16), "metadata read attempts", file);
    id = H5Fopen(file.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl.get());
    Handle h(id, H5Fclose, "open file (truncated, or not a trace?)", file);
    // HDF5 checks a file's length against the space its superblock says it allocated only outside SWMR; here the
    // writer reserved that space before writing into it (TraceWriter), so a shorter file lost its end. Without this,
    // a partial file's uncompressed chunks past the end would read back as zeros (HDF5 reads past a file's end as
    // zeros; a deflated chunk fails to inflate).
    haddr_t eoa = 0;
    check(H5Fget_eoa(h.get(), &eoa), "end of allocated space", file);
    const std::uintmax_t size = std::filesystem::file_size(path);
    if (size < eoa) {
      throw TraceFileError(file + ": cut short: HDF5 allocated " + std::to_string(eoa) + " bytes, the file holds " +
                           std::to_string(size) + " (a copy or disk that lost its end?)");
    }
    return h;
  }
  return Handle(id, H5Fclose, "open file (truncated, or not a trace?)", file);
}

}  // namespace

TraceReader::TraceReader(const std::filesystem::path& path, const TraceReadOptions& options)
    : m(std::make_unique<State>()) {
  m->file = path.string();
  m->file_handle = std::make_unique<Handle>(open_trace_file(path));
  m->root = m->file_handle->get();
  m->read_header(options);
}

TraceReader::~TraceReader() = default;
TraceReader::TraceReader(TraceReader&&) noexcept = default;
TraceReader& TraceReader::operator=(TraceReader&&) noexcept = default;

const Trace& TraceReader::header() const {
  return m->header;
}
bool TraceReader::complete() const {
  return m->header.complete;
}
std::size_t TraceReader::recorded_steps() const {
  return m->steps;
}
std::size_t TraceReader::group_count() const {
  return m->header.groups.size();
}

GroupTrace TraceReader::read_group(std::size_t g, std::size_t first, std::size_t count) const {
  return m->read_group(g, first, count);
}

Trace TraceReader::read_step(std::size_t t) const {
  if (t >= m->steps) {
    throw TraceFileError(m->file + ": recorded step index " + std::to_string(t) + " of " + std::to_string(m->steps));
  }
  Trace out = m->header;
  out.recorded_steps = {m->header.recorded_steps[t]};
  out.loss = {m->header.loss[t]};
  out.learning_rate = {m->header.learning_rate[t]};
  for (std::size_t g = 0; g < out.groups.size(); ++g) {
    out.groups[g] = m->read_group(g, t, 1);
  }
  return out;
}

Trace TraceReader::read_all() const {
  Trace out = m->header;
  for (std::size_t g = 0; g < out.groups.size(); ++g) {
    out.groups[g] = m->read_group(g, 0, m->steps);
  }
  return out;
}

bool TraceReader::group_has_margin(std::size_t g) const {
  return m->margin.at(g) != 0;
}
bool TraceReader::group_has_pairs(std::size_t g) const {
  return !m->offsets.at(g).empty();
}
bool TraceReader::group_has_exact(std::size_t g) const {
  return m->exact.at(g) != 0;
}
void TraceReader::read_group_values(std::size_t g, const std::string& path, std::size_t width, std::size_t first,
                                    std::size_t count, std::int64_t* out) const {
  m->read_values(g, path, width, first, count, out);
}
void TraceReader::read_group_values(std::size_t g, const std::string& path, std::size_t width, std::size_t first,
                                    std::size_t count, double* out) const {
  m->read_values(g, path, width, first, count, out);
}
void TraceReader::read_group_values(std::size_t g, const std::string& path, std::size_t width, std::size_t first,
                                    std::size_t count, float* out) const {
  m->read_values(g, path, width, first, count, out);
}

std::size_t TraceReader::pair_count() const {
  std::size_t n = 0;
  for (const auto& o : m->offsets) {
    n += o.empty() ? 0 : static_cast<std::size_t>(o.back());
  }
  return n;
}

Trace TraceReader::read_all_from(long long root, const std::string& file, const TraceReadOptions& options) {
  TraceReader r;
  r.m = std::make_unique<State>();
  r.m->root = static_cast<hid_t>(root);
  r.m->file = file;
  r.m->read_header(options);
  return r.read_all();
}

}  // namespace wbaudit::sim
