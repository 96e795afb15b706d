// The streaming trace writer (trace_writer.hpp) and the writing of a finished trace file.
#include "sim/trace/trace_writer.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "sim/trace/block_sample.hpp"
#include "sim/trace/detail/h5.hpp"
#include "sim/trace/detail/trace_file.hpp"
#include "sim/trace/trace_reader.hpp"

namespace wbaudit::sim {

using namespace detail;  // NOLINT: the HDF5 helpers of detail/h5.hpp

std::filesystem::path partial_trace_path(const std::filesystem::path& path) {
  return path.parent_path() / (path.filename().string() + ".partial");
}

namespace detail {

void reserve_file_space(hid_t file_id, std::uint64_t bytes, const std::string& file) {
  void* handle = nullptr;
  check(H5Fget_vfd_handle(file_id, H5P_DEFAULT, &handle), "file descriptor", file);
  const int fd = *static_cast<int*>(handle);
  haddr_t eoa = 0;  // HDF5 allocates from its end of allocated space onwards
  check(H5Fget_eoa(file_id, &eoa), "end of allocated space", file);
  int err = ::posix_fallocate(fd, static_cast<off_t>(eoa), static_cast<off_t>(bytes));
  if (err == EINTR) {
    err = ::posix_fallocate(fd, static_cast<off_t>(eoa), static_cast<off_t>(bytes));
  }
  if (err != 0) {
    throw TraceFileError(file + ": cannot reserve " + std::to_string(bytes) +
                         " bytes for the trace: " + std::strerror(err));
  }
}

}  // namespace detail

namespace {

// The raw bytes one recorded step adds to a trace with this header (before compression), and its datasets.
struct StepSize {
  std::uint64_t bytes = 24;
  std::uint64_t datasets = 5;
};

StepSize step_size(const Trace& t) {
  StepSize s;
  const bool reference = t.mode == "reference";
  for (const GroupTrace& g : t.groups) {
    std::uint64_t series = reference ? 2 : 5;  // nonzero (+ zero_weight | erased, saturated, applied, fraction)
    if (!g.block_events.empty()) {
      series += kBlockEventFields.size();
    }
    for (const auto& [name, p] : g.projected) {
      series += 2 + 2 * p.expected.size() + (p.block_events.empty() ? 0 : kBlockEventFields.size());
      s.bytes += block_sample_step_bytes(p.block_sample, name);
      s.datasets += p.block_sample.empty() ? 0 : 3 + (p.block_sample.anchor_scales.empty() ? 0 : 1);
    }
    s.bytes += 8 * series;
    s.datasets += series;
    if (reference) {
      s.bytes += 8 * static_cast<std::uint64_t>(t.histogram.bins) + 8 * t.margin.bins();
      s.datasets += 2;
      if (g.size <= kJointExactMaxCoordinates) {
        s.bytes += 8 * static_cast<std::uint64_t>(g.size);
        s.datasets += 2;
      }
    }
  }
  return s;
}

// Slack for HDF5's metadata: a chunk index may allocate a new block for every dataset in one step.
std::uint64_t metadata_slack(std::uint64_t datasets) {
  return (std::uint64_t{1} << 20) + datasets * 32768;
}

struct SeriesSets {
  Handle erased, fraction;
};

struct ProjectedSets {
  SeriesSets own;
  std::vector<SeriesSets> expected;  // in the order of ProjectedSeries::expected
  std::vector<Handle> blocks;        // block formats: block_events, in the order of kBlockEventFields
  std::optional<Handle> sample_w, sample_u, sample_tensor, sample_anchors;  // block formats of a reference
};

struct GroupSets {
  std::optional<Handle> nonzero, erased, saturated, applied, erased_fraction, zero_weight, ratio, margin, w, u;
  std::vector<ProjectedSets> projected;  // in the order of GroupTrace::projected
  std::vector<Handle> blocks;            // a block-format group: block_events, in the order of kBlockEventFields
};

// One dataset's rows of an append, in the order they are written.
struct RowWrite {
  hid_t set = -1;
  hsize_t width = 0;     // elements per row: 0 for a 1-D series (as create_row_dataset takes it)
  hid_t type = -1;       // the memory type of data
  std::size_t size = 0;  // bytes per element
  const unsigned char* data = nullptr;
  hsize_t at = 0, nrows = 0;
  bool chunked = false;         // one row per chunk: written with H5Dwrite_chunk
  bool filtered = false;        // chunked with shuffle + deflate: its chunks made in parallel (make_chunks)
  std::size_t first_chunk = 0;  // filtered: its first row's chunk in the writer's chunk list
  std::string where;
};

// One filtered row: its chunk is made from `bytes` bytes at src into the writer's buffers (scratch at `scratch`,
// up to bound bytes at `out`).
struct ChunkJob {
  const unsigned char* src = nullptr;
  std::size_t bytes = 0, size = 0, scratch = 0, out = 0, chunk_bytes = 0;
  bool made = false;
};

}  // namespace

struct TraceWriter::State {
  std::filesystem::path path, partial;
  std::string file;  // partial, for messages
  std::optional<Handle> h5;
  Trace header;  // the prototype's header (no rows)
  TraceRows rows;
  StepSize step;
  // Whether a new partial file's one-row-per-chunk datasets get shuffle + deflate (WBAUDIT_PARTIAL_DEFLATE=1) or no
  // filters (the default: finish() compresses them; see partial_deflate_requested). A resumed file keeps its own.
  bool deflate_partial = false;
  std::unordered_map<hid_t, bool> filtered_sets;  // has_filters' answers, per open dataset
  std::optional<Handle> recorded_steps, loss, learning_rate, validation_steps, validation_loss, replay_checkpoints,
      replay_start_loss;
  std::vector<Handle> replay_losses;
  std::vector<GroupSets> groups;
  // What one append writes, and the chunks of its filtered rows: kept between appends (a recorder appends the same
  // rows every recorded step, so they are as large as one append's rows, never growing with the recorded steps).
  std::vector<RowWrite> writes;
  std::vector<ChunkJob> chunks;
  std::vector<unsigned char> shuffled, deflated;
  std::vector<const unsigned char*> chunk_data;
  std::vector<std::size_t> chunk_sizes;

  template <class T>
  void add_rows(hid_t set, hsize_t width, const std::vector<T>& v, hsize_t at, hsize_t nrows, bool chunked,
                std::string where);
  bool has_filters(hid_t set);
  void make_chunks();
  void write_all();

  void create();
  void open_sets(bool create_them);
  void check_header(const Trace& t, const std::string& what) const;
  void append(Trace& t);
  void check_group_rows(const Trace& t, std::size_t T);  // every group series holds T steps' rows
  void finish(std::optional<std::int64_t> steps);
};

namespace {

// Whether a new partial file's one-row-per-chunk datasets (the histograms, kept w and u, block sample rows) are
// created with shuffle + deflate: WBAUDIT_PARTIAL_DEFLATE unset, empty or 0: no, they have no filters, their rows
// are stored as they are and compressed once, by finish() (the finished file's datasets have the filters whatever
// the partial's): a recorded step then costs no deflate (at 2 threads a third of a decoder step's recording), and the
// partial file holds about step_size(header).bytes per recorded step (tensors x ~125 KB for a reference). 1: they
// have the filters, and each step's chunks are deflated at level 1 in parallel (shuffle_deflate), a partial 10-25x
// smaller.
bool partial_deflate_requested(const std::string& file) {
  const char* v = std::getenv("WBAUDIT_PARTIAL_DEFLATE");
  const std::string value = v == nullptr ? "" : v;
  if (value.empty() || value == "0") {
    return false;
  }
  if (value == "1") {
    return true;
  }
  throw TraceFileError(file + ": WBAUDIT_PARTIAL_DEFLATE is \"" + value +
                       "\": 1 deflates the partial trace's rows as they are appended, 0 or unset stores them raw");
}

// Empties v and releases its storage (a header holds no rows).
template <class V>
void drop(V& v) {
  V().swap(v);
}

// Calls f on every per-step row series of t: what a header does not hold.
template <class F>
void for_each_row_series(Trace& t, F&& f) {
  f(t.recorded_steps);
  f(t.loss);
  f(t.learning_rate);
  f(t.validation_steps);
  f(t.validation_loss);
  f(t.replay_checkpoints);
  f(t.replay_start_loss);
  for (ReplaySeries& r : t.replays) {
    f(r.validation_loss);
  }
  for (GroupTrace& g : t.groups) {
    f(g.nonzero);
    f(g.erased);
    f(g.saturated);
    f(g.applied);
    f(g.erased_fraction);
    f(g.zero_weight);
    f(g.ratio_histogram);
    f(g.margin);
    f(g.joint_offsets);
    f(g.joint_keys);
    f(g.joint_counts);
    f(g.exact_w);
    f(g.exact_u);
    for (const BlockEventField& field : kBlockEventFields) {
      f(g.block_events.*field.series);
    }
    for (auto& [name, p] : g.projected) {
      f(p.erased);
      f(p.fraction);
      for (const BlockEventField& field : kBlockEventFields) {
        f(p.block_events.*field.series);
      }
      for (auto& [policy, e] : p.expected) {
        f(e.erased);
        f(e.fraction);
      }
      f(p.block_sample.w);
      f(p.block_sample.u);
      f(p.block_sample.tensor);
      f(p.block_sample.anchors);
    }
  }
}

Trace header_of(const Trace& t) {
  Trace h = t;
  for_each_row_series(h, [](auto& v) { drop(v); });
  return h;
}

// Removes the rows of `t` (what header_of keeps), in place. The series keep their storage: a recorder appends the
// same rows at its next recorded step, and one step's rows are bounded (so the recorder's memory does not grow with
// the number of recorded steps), while storage allocated afresh every step cost a page fault per 4 KB.
void clear_rows(Trace& t) {
  for_each_row_series(t, [](auto& v) { v.clear(); });
}

template <class T>
std::optional<Handle> row_set(hid_t loc, const std::string& name, hsize_t width, hsize_t chunk_rows, bool compressed,
                              bool create, const std::string& where, const std::string& file) {
  if (create) {
    return create_row_dataset<T>(loc, name, width, chunk_rows, compressed, file);
  }
  return open_row_dataset(loc, name, where, file);
}

constexpr hsize_t kSeriesChunk = 64;  // 1-D per-step series: 512-byte chunks

// <parent>/block_events of a block format: its group with attributes format and blocks, and a row set per series.
std::vector<Handle> block_event_sets(hid_t parent, const BlockEventSeries& b, const std::string& format,
                                     hsize_t chunk_rows, bool create, const std::string& where,
                                     const std::string& file) {
  Handle bh = create ? create_group(parent, "block_events", file) : open_group(parent, "block_events", file);
  if (create) {
    write_string_attribute(bh.get(), "format", format, file);
    write_scalar_attribute<std::int64_t>(bh.get(), "blocks", b.blocks, file);
  }
  std::vector<Handle> sets;
  sets.reserve(kBlockEventFields.size());
  for (const BlockEventField& f : kBlockEventFields) {
    sets.push_back(
        *row_set<std::int64_t>(bh.get(), f.name, 0, chunk_rows, false, create, where + "block_events/", file));
  }
  return sets;
}

// The datasets of one projected format of a reference group (`where`: the group's path), created (c) or opened; z:
// the one-row-per-chunk datasets are created with shuffle + deflate (else without filters: partial_deflate_requested).
ProjectedSets projected_sets(hid_t projected, const std::string& format, const ProjectedSeries& series, bool c, bool z,
                             const std::string& where, const std::string& file) {
  const std::string fwhere = where + "projected/" + format + "/";
  Handle fh = c ? create_group(projected, format, file) : open_group(projected, format, file);
  ProjectedSets p{{*row_set<std::int64_t>(fh.get(), "erased", 0, kSeriesChunk, false, c, fwhere, file),
                   *row_set<double>(fh.get(), "fraction", 0, kSeriesChunk, false, c, fwhere, file)},
                  {},
                  {},
                  {},
                  {},
                  {},
                  {}};
  if (!series.block_events.empty()) {
    p.blocks = block_event_sets(fh.get(), series.block_events, format, kSeriesChunk, c, fwhere, file);
  }
  if (!series.block_sample.empty()) {
    const BlockSample& b = series.block_sample;
    const std::string swhere = fwhere + "block_sample/";
    Handle sh = c ? create_group(fh.get(), "block_sample", file) : open_group(fh.get(), "block_sample", file);
    if (c) {
      write_scalar_attribute<std::int64_t>(sh.get(), "rows", b.rows, file);
      write_scalar_attribute<std::int64_t>(sh.get(), "cols", b.cols, file);
      write_scalar_attribute<std::int64_t>(sh.get(), "elements", b.elements, file);
      write_vector(sh.get(), "blocks", b.blocks, file);
      if (!b.anchor_scales.empty()) {
        write_vector(sh.get(), "anchor_scales", b.anchor_scales, file);
      }
    }
    const auto width = static_cast<hsize_t>(b.elements);
    p.sample_w = row_set<float>(sh.get(), "w", width, 1, false, c, swhere, file);  // uncompressed, as finished
    p.sample_u = row_set<float>(sh.get(), "u", width, 1, false, c, swhere, file);
    if (block_sample_has_tensor_rows(format)) {
      p.sample_tensor = row_set<float>(sh.get(), "tensor", kBlockSampleTensorWidth, 1, z, c, swhere, file);
    }
    if (!b.anchor_scales.empty()) {
      p.sample_anchors = row_set<std::int64_t>(sh.get(), "anchors", b.anchor_scales.size() * kBlockAnchorCounts, 1, z,
                                               c, swhere, file);
    }
  }
  if (!series.expected.empty()) {
    Handle eh = c ? create_group(fh.get(), "expected", file) : open_group(fh.get(), "expected", file);
    for (const auto& [policy, e] : series.expected) {
      const std::string pwhere = fwhere + "expected/" + policy + "/";
      Handle ph = c ? create_group(eh.get(), policy, file) : open_group(eh.get(), policy, file);
      p.expected.push_back({*row_set<double>(ph.get(), "erased", 0, kSeriesChunk, false, c, pwhere, file),
                            *row_set<double>(ph.get(), "fraction", 0, kSeriesChunk, false, c, pwhere, file)});
    }
  }
  return p;
}

}  // namespace

void TraceWriter::State::open_sets(bool create_them) {
  const hid_t root = h5->get();
  const bool c = create_them;
  const bool z = deflate_partial;
  recorded_steps = row_set<std::int64_t>(root, "recorded_steps", 0, kSeriesChunk, false, c, "/", file);
  loss = row_set<double>(root, "loss", 0, kSeriesChunk, false, c, "/", file);
  learning_rate = row_set<double>(root, "learning_rate", 0, kSeriesChunk, false, c, "/", file);
  validation_steps = row_set<std::int64_t>(root, "validation_steps", 0, kSeriesChunk, false, c, "/", file);
  validation_loss = row_set<double>(root, "validation_loss", 0, kSeriesChunk, false, c, "/", file);
  if (!header.replays.empty()) {
    Handle replay = c ? create_group(root, "replay", file) : open_group(root, "replay", file);
    if (c) {
      write_scalar_attribute<std::int64_t>(replay.get(), "steps", header.replay_steps, file);
    }
    replay_checkpoints = row_set<std::int64_t>(replay.get(), "checkpoints", 0, 16, false, c, "/replay/", file);
    replay_start_loss = row_set<double>(replay.get(), "start_validation_loss", 0, 16, false, c, "/replay/", file);
    std::string names;
    for (const ReplaySeries& r : header.replays) {
      const std::string name = replay_series_name(r);
      names += (names.empty() ? "" : "\n") + name;
      Handle rh = c ? create_group(replay.get(), name, file) : open_group(replay.get(), name, file);
      if (c) {
        write_string_attribute(rh.get(), "format", r.format, file);
        write_string_attribute(rh.get(), "policy", r.policy, file);
        write_scalar_attribute<std::int64_t>(rh.get(), "sr_bits", r.sr_bits, file);
        if (r.sr_stream != "philox") {
          write_string_attribute(rh.get(), "sr_stream", r.sr_stream, file);
        }
      }
      replay_losses.push_back(
          *row_set<double>(rh.get(), "validation_loss", 0, 16, false, c, "/replay/" + name + "/", file));
    }
    if (c) {
      write_string_attribute(replay.get(), "order", names, file);
    }
  }
  Handle groups_h = c ? create_group(root, "groups", file) : open_group(root, "groups", file);
  const bool reference = header.mode == "reference";
  for (const GroupTrace& g : header.groups) {
    const std::string where = "/groups/" + g.name + "/";
    Handle gh = c ? create_group(groups_h.get(), g.name, file) : open_group(groups_h.get(), g.name, file);
    if (c) {
      write_scalar_attribute<std::uint32_t>(gh.get(), "tensor_id", g.tensor_id, file);
      write_scalar_attribute<std::int64_t>(gh.get(), "size", g.size, file);
    }
    GroupSets s;
    s.nonzero = row_set<std::int64_t>(gh.get(), "nonzero", 0, kSeriesChunk, false, c, where, file);
    if (!reference) {
      s.erased = row_set<std::int64_t>(gh.get(), "erased", 0, kSeriesChunk, false, c, where, file);
      s.saturated = row_set<std::int64_t>(gh.get(), "saturated", 0, kSeriesChunk, false, c, where, file);
      s.applied = row_set<std::int64_t>(gh.get(), "applied", 0, kSeriesChunk, false, c, where, file);
      s.erased_fraction = row_set<double>(gh.get(), "erased_fraction", 0, kSeriesChunk, false, c, where, file);
      if (!g.block_events.empty()) {
        s.blocks = block_event_sets(gh.get(), g.block_events, g.block_format, kSeriesChunk, c, where, file);
      }
    } else {
      s.zero_weight = row_set<std::int64_t>(gh.get(), "zero_weight", 0, kSeriesChunk, false, c, where, file);
      s.ratio = row_set<std::int64_t>(gh.get(), "ratio_histogram", static_cast<hsize_t>(header.histogram.bins), 1, z, c,
                                      where, file);
      Handle jh = c ? create_group(gh.get(), "joint", file) : open_group(gh.get(), "joint", file);
      if (c) {
        write_scalar_attribute<double>(jh.get(), "init_absmax", g.init_absmax, file);
      }
      s.margin = row_set<std::int64_t>(jh.get(), "margin", header.margin.bins(), 1, z, c, where + "joint/", file);
      if (g.size <= kJointExactMaxCoordinates && g.size > 0) {
        const auto size = static_cast<hsize_t>(g.size);
        s.w = row_set<float>(jh.get(), "w", size, 1, z, c, where + "joint/", file);
        s.u = row_set<float>(jh.get(), "u", size, 1, z, c, where + "joint/", file);
      }
      Handle projected = c ? create_group(gh.get(), "projected", file) : open_group(gh.get(), "projected", file);
      for (const auto& [format, series] : g.projected) {
        s.projected.push_back(projected_sets(projected.get(), format, series, c, z, where, file));
      }
    }
    groups.push_back(std::move(s));
  }
}

void TraceWriter::State::create() {
  std::error_code ignored;
  std::filesystem::remove(partial, ignored);  // a run that starts over
  Handle fcpl(untimed_plist(H5P_FILE_CREATE), H5Pclose, "creation property list", file);
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "access property list", file);
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "SWMR file format", file);
  h5.emplace(H5Fcreate(file.c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get()), H5Fclose, "create file", file);
  // Everything HDF5 writes before the first flush lies within this reservation (the datasets are created empty).
  reserve_file_space(h5->get(), metadata_slack(step.datasets) + 4096 * header.groups.size(), file);
  write_trace_header(h5->get(), header, file, false, header.mode == "reference" && !header.margin.formats.empty());
  std::string order;
  for (const GroupTrace& g : header.groups) {
    if (g.name.empty() || g.name.find('/') != std::string::npos || g.name.find('\n') != std::string::npos) {
      throw TraceFileError(file + ": invalid group name \"" + g.name + "\"");
    }
    order += (order.empty() ? "" : "\n") + g.name;
  }
  write_string_attribute(h5->get(), "group_order", order, file);
  if (std::isfinite(header.optimal_validation_loss)) {
    write_scalar_attribute<double>(h5->get(), "optimal_validation_loss", header.optimal_validation_loss, file);
  }
  write_scalar_attribute<std::int64_t>(h5->get(), "complete", 0, file);  // a partial file stays incomplete
  open_sets(true);
  check(H5Fflush(h5->get(), H5F_SCOPE_GLOBAL), "flush", file);
  check(H5Fstart_swmr_write(h5->get()), "start single-writer/multiple-reader writing", file);
}

void TraceWriter::State::check_header(const Trace& t, const std::string& what) const {
  const auto differ = [&](const std::string& field) {
    throw TraceFileError(file + ": " + what + ": the run's " + field + " differs from the partial trace's");
  };
  if (t.schema != header.schema) {
    differ("schema");
  }
  if (t.mode != header.mode) {
    differ("mode");
  }
  if (t.format != header.format || t.policy != header.policy) {
    differ("format or policy");
  }
  if (t.seed != header.seed) {
    differ("seed " + std::to_string(header.seed) + " (the file's " + std::to_string(t.seed) + ")");
  }
  if (t.steps != header.steps) {
    differ("steps " + std::to_string(header.steps) + " (the file's " + std::to_string(t.steps) + ")");
  }
  if (t.config_json != header.config_json) {
    differ("config_json");
  }
  if (t.numeric_contract != header.numeric_contract) {  // a resume on a machine that computes other bits
    differ("numeric contract \"" + header.numeric_contract + "\" (the file's \"" + t.numeric_contract + "\")");
  }
  if (!(t.margin == header.margin)) {
    differ("margin layout");
  }
  if (t.histogram.bins != header.histogram.bins) {
    differ("histogram bins");
  }
  if (t.groups.size() != header.groups.size()) {
    differ("group count");
  }
  for (std::size_t i = 0; i < t.groups.size(); ++i) {
    const GroupTrace &a = t.groups[i], &b = header.groups[i];
    if (a.name != b.name || a.size != b.size || a.tensor_id != b.tensor_id) {
      differ("group " + a.name);
    }
    if (a.block_format != b.block_format || a.block_events.blocks != b.block_events.blocks) {
      differ("block format of " + a.name);
    }
    if (a.projected.size() != b.projected.size()) {
      differ("projected formats of " + a.name);
    }
    auto pa = a.projected.begin();
    auto pb = b.projected.begin();
    for (; pa != a.projected.end(); ++pa, ++pb) {
      if (pa->first != pb->first || pa->second.expected.size() != pb->second.expected.size() ||
          pa->second.block_events.blocks != pb->second.block_events.blocks ||
          pa->second.block_sample.blocks != pb->second.block_sample.blocks ||
          pa->second.block_sample.anchor_scales != pb->second.block_sample.anchor_scales) {
        differ("projected formats of " + a.name);
      }
    }
  }
  if (t.replays.size() != header.replays.size()) {
    differ("replay series");
  }
}

TraceWriter::TraceWriter(const std::filesystem::path& path, Trace& prototype) : m(std::make_unique<State>()) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  m->path = path;
  m->partial = partial_trace_path(path);
  m->file = m->partial.string();
  m->header = header_of(prototype);
  m->step = step_size(m->header);
  m->deflate_partial = partial_deflate_requested(m->file);
  m->create();
  append(prototype);
}

TraceWriter TraceWriter::resume(const std::filesystem::path& path, Trace& prototype, const TraceRows& keep) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  TraceWriter w;
  w.m = std::make_unique<State>();
  State& s = *w.m;
  s.path = path;
  s.partial = partial_trace_path(path);
  s.file = s.partial.string();
  s.header = header_of(prototype);
  s.step = step_size(s.header);
  s.deflate_partial = partial_deflate_requested(s.file);
  if (!std::filesystem::exists(s.partial)) {
    throw TraceFileError(s.file + ": no partial trace to resume (the run must start over)");
  }
  {
    const TraceReader reader(s.partial, TraceReadOptions{true});
    s.check_header(reader.header(), "resuming");
    const TraceRows have{static_cast<std::int64_t>(reader.recorded_steps()),
                         static_cast<std::int64_t>(reader.header().validation_steps.size()),
                         static_cast<std::int64_t>(reader.header().replay_checkpoints.size())};
    if (have.steps < keep.steps || have.validations < keep.validations || have.replays < keep.replays) {
      throw TraceFileError(s.file + ": holds " + std::to_string(have.steps) + " recorded steps, " +
                           std::to_string(have.validations) + " validations, " + std::to_string(have.replays) +
                           " replays, fewer than the checkpoint's " + std::to_string(keep.steps) + ", " +
                           std::to_string(keep.validations) + ", " + std::to_string(keep.replays));
    }
  }
  // A writer that died leaves the file marked open for writing; clearing that mark is what h5clear does (the file
  // property "clear_status_flags"). The caller guarantees that writer is gone.
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "access property list", s.file);
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "SWMR file format", s.file);
  hbool_t clear = 1;
  check(H5Pset(fapl.get(), "clear_status_flags", &clear), "clear the status flags of a stopped writer", s.file);
  s.h5.emplace(H5Fopen(s.file.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose, "open the partial trace for writing",
               s.file);
  s.open_sets(false);
  s.rows = keep;
  // Drop what was written after the checkpoint (it is recorded again), /recorded_steps first.
  set_rows(s.recorded_steps->get(), static_cast<hsize_t>(keep.steps), "/recorded_steps", s.file);
  for (auto* set : {&s.loss, &s.learning_rate}) {
    set_rows((*set)->get(), static_cast<hsize_t>(keep.steps), "/", s.file);
  }
  for (GroupSets& g : s.groups) {
    for (auto* set : {&g.nonzero, &g.erased, &g.saturated, &g.applied, &g.erased_fraction, &g.zero_weight, &g.ratio,
                      &g.margin, &g.w, &g.u}) {
      if (*set) {
        set_rows((*set)->get(), static_cast<hsize_t>(keep.steps), "group", s.file);
      }
    }
    for (Handle& b : g.blocks) {
      set_rows(b.get(), static_cast<hsize_t>(keep.steps), "block_events", s.file);
    }
    for (ProjectedSets& p : g.projected) {
      for (Handle& b : p.blocks) {
        set_rows(b.get(), static_cast<hsize_t>(keep.steps), "block_events", s.file);
      }
      for (auto* set : {&p.sample_w, &p.sample_u, &p.sample_tensor, &p.sample_anchors}) {
        if (*set) {
          set_rows((*set)->get(), static_cast<hsize_t>(keep.steps), "block_sample", s.file);
        }
      }
      set_rows(p.own.erased.get(), static_cast<hsize_t>(keep.steps), "projected", s.file);
      set_rows(p.own.fraction.get(), static_cast<hsize_t>(keep.steps), "projected", s.file);
      for (SeriesSets& e : p.expected) {
        set_rows(e.erased.get(), static_cast<hsize_t>(keep.steps), "expected", s.file);
        set_rows(e.fraction.get(), static_cast<hsize_t>(keep.steps), "expected", s.file);
      }
    }
  }
  set_rows(s.validation_steps->get(), static_cast<hsize_t>(keep.validations), "/validation_steps", s.file);
  set_rows(s.validation_loss->get(), static_cast<hsize_t>(keep.validations), "/validation_loss", s.file);
  if (s.replay_checkpoints) {
    set_rows(s.replay_checkpoints->get(), static_cast<hsize_t>(keep.replays), "/replay", s.file);
    set_rows(s.replay_start_loss->get(), static_cast<hsize_t>(keep.replays), "/replay", s.file);
    for (Handle& r : s.replay_losses) {
      set_rows(r.get(), static_cast<hsize_t>(keep.replays), "/replay", s.file);
    }
  }
  check(H5Fflush(s.h5->get(), H5F_SCOPE_GLOBAL), "flush", s.file);
  check(H5Fstart_swmr_write(s.h5->get()), "start single-writer/multiple-reader writing", s.file);
  w.append(prototype);
  return w;
}

TraceWriter::TraceWriter(TraceWriter&&) noexcept = default;
TraceWriter& TraceWriter::operator=(TraceWriter&&) noexcept = default;
TraceWriter::~TraceWriter() = default;

const TraceRows& TraceWriter::rows() const {
  return m->rows;
}
const std::filesystem::path& TraceWriter::partial() const {
  return m->partial;
}
std::size_t TraceWriter::held_bytes() const {
  return sizeof(State) + m->groups.capacity() * sizeof(GroupSets) + m->replay_losses.capacity() * sizeof(Handle) +
         m->writes.capacity() * sizeof(RowWrite) + m->chunks.capacity() * sizeof(ChunkJob) + m->shuffled.capacity() +
         m->deflated.capacity() + m->chunk_data.capacity() * sizeof(const unsigned char*) +
         m->chunk_sizes.capacity() * sizeof(std::size_t);
}

void TraceWriter::append(Trace& trace) {
  if (!m || !m->h5) {
    throw TraceFileError("TraceWriter: append after finish");
  }
  m->append(trace);
}

void TraceWriter::finish(std::optional<std::int64_t> steps) {
  if (!m || !m->h5) {
    throw TraceFileError("TraceWriter: finish twice");
  }
  m->finish(steps);
}

}  // namespace wbaudit::sim

namespace wbaudit::sim {

namespace {

template <class V>
void expect_rows(const V& v, std::size_t want, const std::string& what, const std::string& file) {
  if (v.size() != want) {
    throw TraceFileError(file + ": append: " + what + " holds " + std::to_string(v.size()) + " values, expected " +
                         std::to_string(want));
  }
}

}  // namespace

void TraceWriter::State::check_group_rows(const Trace& t, std::size_t T) {
  const bool reference = header.mode == "reference";
  const std::size_t bins = static_cast<std::size_t>(header.histogram.bins), mbins = header.margin.bins();
  for (std::size_t i = 0; i < t.groups.size(); ++i) {
    const GroupTrace& g = t.groups[i];
    const GroupSets& s = groups[i];
    const std::string where = "group " + g.name + " ";
    expect_rows(g.nonzero, T, where + "nonzero", file);
    if (!reference) {
      for (const auto* v : {&g.erased, &g.saturated, &g.applied}) {
        expect_rows(*v, T, where + "counts", file);
      }
      expect_rows(g.erased_fraction, T, where + "erased_fraction", file);
      if (!s.blocks.empty()) {
        for (const BlockEventField& f : kBlockEventFields) {
          expect_rows(g.block_events.*f.series, T, where + "block_events " + f.name, file);
        }
      }
    } else {
      expect_rows(g.zero_weight, T, where + "zero_weight", file);
      expect_rows(g.ratio_histogram, T * bins, where + "ratio_histogram", file);
      expect_rows(g.margin, T * mbins, where + "margin histogram", file);
      if (s.w) {
        expect_rows(g.exact_w, T * static_cast<std::size_t>(g.size), where + "kept w", file);
        expect_rows(g.exact_u, T * static_cast<std::size_t>(g.size), where + "kept u", file);
      }
      if (g.projected.size() != s.projected.size()) {
        check_header(t, "append");
      }
      std::size_t k = 0;
      for (const auto& [format, p] : g.projected) {
        expect_rows(p.erased, T, where + format + " erased", file);
        expect_rows(p.fraction, T, where + format + " fraction", file);
        const ProjectedSets& ps = s.projected[k++];
        if (!ps.blocks.empty()) {
          for (const BlockEventField& f : kBlockEventFields) {
            expect_rows(p.block_events.*f.series, T, where + format + " block_events " + f.name, file);
          }
        }
        if (ps.sample_w) {
          const auto width = static_cast<std::size_t>(p.block_sample.elements);
          expect_rows(p.block_sample.w, T * width, where + format + " block_sample w", file);
          expect_rows(p.block_sample.u, T * width, where + format + " block_sample u", file);
        }
        if (ps.sample_tensor) {
          expect_rows(p.block_sample.tensor, T * kBlockSampleTensorWidth, where + format + " block_sample tensor",
                      file);
        }
        if (ps.sample_anchors) {
          expect_rows(p.block_sample.anchors, T * p.block_sample.anchor_scales.size() * kBlockAnchorCounts,
                      where + format + " block_sample anchors", file);
        }
        for (const auto& [policy, e] : p.expected) {
          expect_rows(e.erased, T, where + format + " " + policy, file);
          expect_rows(e.fraction, T, where + format + " " + policy, file);
        }
      }
    }
  }
}

void TraceWriter::State::append(Trace& t) {
  const std::size_t T = t.recorded_steps.size();
  const std::size_t V = t.validation_steps.size();
  const std::size_t K = t.replay_checkpoints.size();
  if (t.groups.size() != header.groups.size() || t.replays.size() != header.replays.size()) {
    check_header(t, "append");
  }
  if (T == 0 && V == 0 && K == 0 && t.validation_loss.empty()) {
    return;
  }
  expect_rows(t.loss, T, "loss", file);
  expect_rows(t.learning_rate, T, "learning_rate", file);
  expect_rows(t.validation_loss, V, "validation_loss", file);
  expect_rows(t.replay_start_loss, K, "replay start_validation_loss", file);
  for (const ReplaySeries& r : t.replays) {
    expect_rows(r.validation_loss, K, "replay validation_loss", file);
  }
  check_group_rows(t, T);
  const bool reference = header.mode == "reference";
  // HDF5 writes only into space reserved now (it holds nothing unwritten since the last flush).
  reserve_file_space(
      h5->get(), T * step.bytes + 16 * V + (16 + 8 * header.replays.size()) * K + metadata_slack(step.datasets), file);
  const auto at = static_cast<hsize_t>(rows.steps);
  const auto n = static_cast<hsize_t>(T);
  const auto bins = static_cast<hsize_t>(header.histogram.bins);
  const auto mbins = static_cast<hsize_t>(header.margin.bins());
  // Every dataset's rows in the order they are written (the widths as open_sets created them); the filtered ones'
  // chunks are made first, in parallel, and written in this order.
  writes.clear();
  for (std::size_t i = 0; i < t.groups.size(); ++i) {
    const GroupTrace& g = t.groups[i];
    GroupSets& s = groups[i];
    const std::string where = "/groups/" + g.name + "/";
    add_rows(s.nonzero->get(), 0, g.nonzero, at, n, false, where + "nonzero");
    if (!reference) {
      add_rows(s.erased->get(), 0, g.erased, at, n, false, where + "erased");
      add_rows(s.saturated->get(), 0, g.saturated, at, n, false, where + "saturated");
      add_rows(s.applied->get(), 0, g.applied, at, n, false, where + "applied");
      add_rows(s.erased_fraction->get(), 0, g.erased_fraction, at, n, false, where + "erased_fraction");
      for (std::size_t k = 0; k < s.blocks.size(); ++k) {
        const BlockEventField& f = kBlockEventFields[k];
        add_rows(s.blocks[k].get(), 0, g.block_events.*f.series, at, n, false, where + "block_events/" + f.name);
      }
      continue;
    }
    add_rows(s.zero_weight->get(), 0, g.zero_weight, at, n, false, where + "zero_weight");
    add_rows(s.ratio->get(), bins, g.ratio_histogram, at, n, true, where + "ratio_histogram");
    add_rows(s.margin->get(), mbins, g.margin, at, n, true, where + "joint/margin");
    if (s.w) {
      const auto size = static_cast<hsize_t>(g.size);
      add_rows(s.w->get(), size, g.exact_w, at, n, true, where + "joint/w");
      add_rows(s.u->get(), size, g.exact_u, at, n, true, where + "joint/u");
    }
    std::size_t k = 0;
    for (const auto& [format, p] : g.projected) {
      ProjectedSets& ps = s.projected[k++];
      add_rows(ps.own.erased.get(), 0, p.erased, at, n, false, where + "projected/" + format + "/erased");
      add_rows(ps.own.fraction.get(), 0, p.fraction, at, n, false, where + "projected/" + format + "/fraction");
      for (std::size_t b = 0; b < ps.blocks.size(); ++b) {
        const BlockEventField& f = kBlockEventFields[b];
        add_rows(ps.blocks[b].get(), 0, p.block_events.*f.series, at, n, false,
                 where + "projected/" + format + "/block_events/" + f.name);
      }
      if (ps.sample_w) {
        const std::string swhere = where + "projected/" + format + "/block_sample/";
        const auto width = static_cast<hsize_t>(p.block_sample.elements);
        add_rows(ps.sample_w->get(), width, p.block_sample.w, at, n, false, swhere + "w");
        add_rows(ps.sample_u->get(), width, p.block_sample.u, at, n, false, swhere + "u");
        if (ps.sample_tensor) {
          add_rows(ps.sample_tensor->get(), static_cast<hsize_t>(kBlockSampleTensorWidth), p.block_sample.tensor, at, n,
                   true, swhere + "tensor");
        }
        if (ps.sample_anchors) {
          add_rows(ps.sample_anchors->get(),
                   static_cast<hsize_t>(p.block_sample.anchor_scales.size()) * kBlockAnchorCounts,
                   p.block_sample.anchors, at, n, true, swhere + "anchors");
        }
      }
      std::size_t j = 0;
      for (const auto& [policy, e] : p.expected) {
        SeriesSets& es = ps.expected[j++];
        add_rows(es.erased.get(), 0, e.erased, at, n, false, where + "expected/" + policy + "/erased");
        add_rows(es.fraction.get(), 0, e.fraction, at, n, false, where + "expected/" + policy + "/fraction");
      }
    }
  }
  add_rows(loss->get(), 0, t.loss, at, n, false, "/loss");
  add_rows(learning_rate->get(), 0, t.learning_rate, at, n, false, "/learning_rate");
  add_rows(recorded_steps->get(), 0, t.recorded_steps, at, n, false, "/recorded_steps");  // last: the step is in
  const auto vat = static_cast<hsize_t>(rows.validations);
  add_rows(validation_loss->get(), 0, t.validation_loss, vat, V, false, "/validation_loss");
  add_rows(validation_steps->get(), 0, t.validation_steps, vat, V, false, "/validation_steps");
  if (K > 0) {
    if (!replay_checkpoints) {
      throw TraceFileError(file + ": append: replay rows for a trace declared without replays");
    }
    const auto kat = static_cast<hsize_t>(rows.replays);
    for (std::size_t r = 0; r < t.replays.size(); ++r) {
      add_rows(replay_losses[r].get(), 0, t.replays[r].validation_loss, kat, K, false, "/replay");
    }
    add_rows(replay_start_loss->get(), 0, t.replay_start_loss, kat, K, false, "/replay/start_validation_loss");
    add_rows(replay_checkpoints->get(), 0, t.replay_checkpoints, kat, K, false, "/replay/checkpoints");
  }
  make_chunks();
  write_all();
  writes.clear();  // its data are t's rows, cleared below
  check(H5Fflush(h5->get(), H5F_SCOPE_GLOBAL), "flush", file);
  rows.steps += static_cast<std::int64_t>(T);
  rows.validations += static_cast<std::int64_t>(V);
  rows.replays += static_cast<std::int64_t>(K);
  clear_rows(t);
}

template <class T>
void TraceWriter::State::add_rows(hid_t set, hsize_t width, const std::vector<T>& v, hsize_t at, hsize_t nrows,
                                  bool chunked, std::string where) {
  // The file's types are little-endian and the rows' chunks are made from the values' bytes as they are in memory.
  static_assert(std::endian::native == std::endian::little, "a row's bytes are its file bytes");
  RowWrite w;
  w.set = set;
  w.width = width;
  w.type = native_type<T>();
  w.size = sizeof(T);
  w.data = reinterpret_cast<const unsigned char*>(v.data());
  w.at = at;
  w.nrows = nrows;
  w.chunked = chunked && nrows > 0;
  w.filtered = w.chunked && has_filters(set);
  w.where = std::move(where);
  writes.push_back(std::move(w));
}

// Whether dataset `set` (one row per chunk) was created with filters (shuffle + deflate), asked of HDF5 once.
bool TraceWriter::State::has_filters(hid_t set) {
  const auto known = filtered_sets.find(set);
  if (known != filtered_sets.end()) {
    return known->second;
  }
  const Handle dcpl(H5Dget_create_plist(set), H5Pclose, "creation properties of a dataset", file);
  const int n = H5Pget_nfilters(dcpl.get());
  check(n, "filters of a dataset", file);
  return filtered_sets[set] = n > 0;
}

// The chunks of every filtered row of this append, made in parallel (deflate was half of an append's time, and the
// rows are independent): each row's bytes shuffled and deflated as HDF5's filters read them (shuffle_deflate) into
// `deflated`, at offsets set serially first, so the chunks and their order are the same whatever the threads.
void TraceWriter::State::make_chunks() {
  chunks.clear();
  std::size_t scratch = 0, out = 0;
  for (RowWrite& w : writes) {
    if (!w.filtered) {
      continue;
    }
    w.first_chunk = chunks.size();
    const std::size_t bytes = static_cast<std::size_t>(w.width) * w.size;
    for (hsize_t r = 0; r < w.nrows; ++r) {
      ChunkJob job;
      job.src = w.data + static_cast<std::size_t>(r) * bytes;
      job.bytes = bytes;
      job.size = w.size;
      job.scratch = scratch;
      job.out = out;
      chunks.push_back(job);
      scratch += bytes;
      out += row_chunk_bound(bytes);
    }
  }
  if (chunks.empty()) {
    return;
  }
  // resize keeps the storage of the previous appends (the same rows): no page faults on memory allocated afresh
  shuffled.resize(scratch);
  deflated.resize(out);
  ChunkJob* jobs = chunks.data();
  unsigned char* const shuffled_at = shuffled.data();
  unsigned char* const deflated_at = deflated.data();
  const auto make = [=](std::size_t i) {
    ChunkJob& job = jobs[i];
    job.made = shuffle_deflate(job.src, job.bytes, job.size, shuffled_at + job.scratch, deflated_at + job.out,
                               job.chunk_bytes);
  };
  if (Kokkos::is_initialized()) {
    // dynamic: a margin histogram's row (120 KB) costs a hundred times a small group's w
    using Policy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
    Kokkos::parallel_for("wbaudit::TraceWriter::chunks", Policy(0, static_cast<std::int64_t>(chunks.size())),
                         [=](const std::int64_t i) { make(static_cast<std::size_t>(i)); });
    Kokkos::DefaultHostExecutionSpace().fence();
  } else {
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      make(i);
    }
  }
  for (const ChunkJob& job : chunks) {
    if (!job.made) {
      throw TraceFileError(file + ": deflate of a trace row failed (libdeflate: out of memory)");
    }
  }
}

// Writes this append's rows in order: the one-row-per-chunk ones as their chunks (make_chunks' or, without filters, the
// rows' own bytes), the others through H5Dwrite.
void TraceWriter::State::write_all() {
  for (const RowWrite& w : writes) {
    if (!w.chunked) {
      write_rows(w.set, w.at, w.nrows, w.width, w.type, w.data, w.where, file);
      continue;
    }
    chunk_data.clear();
    chunk_sizes.clear();
    const std::size_t bytes = static_cast<std::size_t>(w.width) * w.size;
    for (std::size_t r = 0; r < w.nrows; ++r) {
      if (w.filtered) {
        const ChunkJob& job = chunks[w.first_chunk + r];
        chunk_data.push_back(deflated.data() + job.out);
        chunk_sizes.push_back(job.chunk_bytes);
      } else {
        chunk_data.push_back(w.data + r * bytes);
        chunk_sizes.push_back(bytes);
      }
    }
    write_row_chunks(w.set, w.at, w.nrows, w.width, chunk_data.data(), chunk_sizes.data(), w.where, file);
  }
}

void TraceWriter::State::finish(std::optional<std::int64_t> steps) {
  drop(writes);
  drop(chunks);
  drop(shuffled);
  drop(deflated);
  drop(chunk_data);
  drop(chunk_sizes);
  filtered_sets.clear();
  groups.clear();
  replay_losses.clear();
  for (auto* set : {&recorded_steps, &loss, &learning_rate, &validation_steps, &validation_loss, &replay_checkpoints,
                    &replay_start_loss}) {
    set->reset();
  }
  if (h5->close() < 0) {
    throw TraceFileError(file + ": HDF5 error: close");
  }
  h5.reset();
  {
    const TraceReader reader(partial, TraceReadOptions{true});
    write_trace_from_reader(path, reader, steps);
  }
  std::error_code ec;
  std::filesystem::remove(partial, ec);
  if (ec) {
    throw TraceFileError(file + ": cannot remove the partial trace after finishing: " + ec.message());
  }
}

}  // namespace wbaudit::sim

namespace wbaudit::sim::detail {

void write_trace_from_reader(const std::filesystem::path& path, const TraceReader& reader,
                             std::optional<std::int64_t> steps, std::size_t block_bytes) {
  const Trace& header = reader.header();
  const std::size_t T = reader.recorded_steps();
  bool pairs = false, margin = false;
  for (std::size_t g = 0; g < reader.group_count(); ++g) {
    pairs = pairs || reader.group_has_pairs(g);
    margin = margin || reader.group_has_margin(g);
  }
  Trace finished = header;
  finished.complete = true;
  if (steps) {
    finished.steps = *steps;
  }
  const std::uint64_t bound =
      finished_trace_bound(finished, T, header.validation_steps.size(), header.replay_checkpoints.size()) +
      (pairs ? 16 * static_cast<std::uint64_t>(reader.pair_count()) : 0);
  // Each dataset of each group is read from the partial file and written a block of at most block_bytes at a time, in
  // the canonical order (what it holds does not grow with the recorded steps); schema 2's joint pairs, which a
  // partial file never holds, and a trace without recorded steps are written from the group's rows in memory.
  GroupValues from;
  from.steps = T;
  from.block_bytes = block_bytes;
  std::size_t group = 0;
  from.int64s = [&](const std::string& at, std::size_t width, std::size_t first, std::size_t count, std::int64_t* out) {
    reader.read_group_values(group, at, width, first, count, out);
  };
  from.doubles = [&](const std::string& at, std::size_t width, std::size_t first, std::size_t count, double* out) {
    reader.read_group_values(group, at, width, first, count, out);
  };
  from.floats = [&](const std::string& at, std::size_t width, std::size_t first, std::size_t count, float* out) {
    reader.read_group_values(group, at, width, first, count, out);
  };
  write_final_trace(path, bound, [&](hid_t root, const std::string& file) {
    write_trace_header(root, finished, file, pairs, margin);
    write_trace_steps(root, finished, file);
    Handle groups = create_group(root, "groups", file);
    for (group = 0; group < reader.group_count(); ++group) {
      if (T == 0 || reader.group_has_pairs(group)) {
        write_trace_group(groups.get(), finished, reader.read_group(group, 0, T), file);
      } else {
        // the group's rows of its first recorded step say which datasets it holds
        write_trace_group(groups.get(), finished, reader.read_group(group, 0, 1), file, &from);
      }
    }
    write_trace_tail(root, finished, file);
  });
}

}  // namespace wbaudit::sim::detail
