// Finishing a streamed trace (TraceWriter::finish, detail::write_trace_from_reader) a block of one dataset at a time:
// the finished file of a trace with many recorded steps is byte for byte what write_trace writes for the same trace
// held in memory, also when every dataset spans many blocks (1-D series, d and margin histograms one row per chunk,
// kept w and u in 1-D chunks that do not start on a row), and what finishing allocates is bounded by the block, not
// by the recorded steps: counted here by this test program's own operator new (HDF5 allocates with malloc; its
// caches are bounded by its own settings).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <new>
#include <optional>
#include <string>

#include "partial_deflate.hpp"
#include "sim/trace/detail/trace_file.hpp"
#include "sim/trace/trace_reader.hpp"
#include "sim/trace/trace_writer.hpp"

namespace {

// Bytes the program holds through operator new, and the most it held since peak_from_now().
std::atomic<std::size_t> g_live{0}, g_peak{0};
constexpr std::size_t kHeader = 16;  // keeps the alignment of operator new

void count_in(std::size_t n) {
  const std::size_t live = g_live.fetch_add(n) + n;
  std::size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
}

}  // namespace

// GCC takes the free() of operator delete for a mismatch with the operator new it inlines; both are these.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  void* p = std::malloc(n + kHeader);
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  *static_cast<std::size_t*>(p) = n;
  count_in(n);
  return static_cast<char*>(p) + kHeader;
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  if (p != nullptr) {
    char* base = static_cast<char*>(p) - kHeader;
    g_live.fetch_sub(*reinterpret_cast<std::size_t*>(base));
    std::free(base);
  }
}
void operator delete[](void* p) noexcept {
  operator delete(p);
}
void operator delete(void* p, std::size_t) noexcept {
  operator delete(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  operator delete(p);
}
#pragma GCC diagnostic pop

namespace {

using namespace wbaudit::sim;
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_finish_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Deterministic values (a 64-bit LCG), so that the compressed datasets are not all zeros.
struct Values {
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  std::uint64_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
  template <class T>
  std::vector<T> ints(std::size_t n, std::uint64_t below) {
    std::vector<T> v(n);
    for (T& x : v) {
      x = static_cast<T>(next() % below);
    }
    return v;
  }
  std::vector<double> reals(std::size_t n) {
    std::vector<double> v(n);
    for (double& x : v) {
      x = static_cast<double>(next() % 100000) / 7.0;
    }
    return v;
  }
  std::vector<float> floats(std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) {
      x = static_cast<float>(next() % 100000) / 3.0f - 1000.0f;
    }
    return v;
  }
};

void fill(BlockEventSeries& b, std::size_t T, Values& v) {
  b.blocks = 10;
  for (const BlockEventField& f : kBlockEventFields) {
    b.*f.series = v.ints<std::int64_t>(T, 50);
  }
}

// A reference trace of T recorded steps with every kind of per-step dataset a partial file holds: 1-D series, the d
// histogram of `bins` bins, a (small-layout) margin histogram, a group small enough to keep its w and u (240
// coordinates: 1-D chunks of 65536 values end inside a step's row), projections with expected series and block events;
// or a target trace with block events.
Trace synthetic(const std::string& mode, std::size_t T, int bins,
                const std::vector<std::int64_t>& sizes = {240, 5000}) {
  Values v;
  Trace t;
  t.mode = mode;
  t.schema = trace_schema_for_mode(mode);
  t.format = mode == "reference" ? "fp32" : "mxfp4_e2m1";
  t.policy = "nearest";
  t.seed = 7;
  t.steps = static_cast<std::int64_t>(T);
  t.config_json = R"({"synthetic":true})";
  for (std::size_t s = 0; s < T; ++s) {
    t.recorded_steps.push_back(static_cast<std::int64_t>(s));
  }
  t.loss = v.reals(T);
  t.learning_rate = v.reals(T);
  t.histogram.bins = bins;
  t.validation_steps = {0, static_cast<std::int64_t>(T / 2)};
  t.validation_loss = {2.5, 1.25};
  if (mode == "reference") {
    t.margin.formats = {"e4m3", "bf16"};
    t.margin.rows = MarginRows{-3, -1, 1, 3};
  }
  for (const std::int64_t size : sizes) {
    GroupTrace g;
    g.name = "group" + std::to_string(size);
    g.tensor_id = static_cast<std::uint32_t>(t.groups.size());
    g.size = size;
    g.nonzero = v.ints<std::int64_t>(T, 1000);
    if (mode == "reference") {
      g.init_absmax = 0.5;
      g.zero_weight = v.ints<std::int64_t>(T, 10);
      g.ratio_histogram = v.ints<std::int64_t>(T * static_cast<std::size_t>(bins), 4);
      g.margin = v.ints<std::int64_t>(T * t.margin.bins(), 1000);
      if (size <= kJointExactMaxCoordinates) {
        g.exact_w = v.floats(T * static_cast<std::size_t>(size));
        g.exact_u = v.floats(T * static_cast<std::size_t>(size));
      }
      for (const std::string format : {"bf16", "mxfp4_e2m1"}) {
        ProjectedSeries& p = g.projected[format];
        p.erased = v.ints<std::int64_t>(T, 100);
        p.fraction = v.reals(T);
        ExpectedSeries& e = p.expected["stochastic"];
        e.erased = v.reals(T);
        e.fraction = v.reals(T);
        if (format != "bf16") {
          fill(p.block_events, T, v);
        }
      }
    } else {
      g.erased = v.ints<std::int64_t>(T, 100);
      g.saturated = v.ints<std::int64_t>(T, 5);
      g.applied = v.ints<std::int64_t>(T, 900);
      g.erased_fraction = v.reals(T);
      g.block_format = "mxfp4_e2m1";
      fill(g.block_events, T, v);
    }
    t.groups.push_back(std::move(g));
  }
  return t;
}

// The partial file of `t` (every row appended at once), its writer gone: what finish reads.
void write_partial(const fs::path& path, Trace t) {
  TraceWriter writer(path, t);
}

TEST(TraceFinish, EveryDatasetWrittenInManyBlocksGivesWriteTracesBytes) {
  const fs::path dir = scratch("blocks");
  for (const std::string mode : {"reference", "target"}) {
    const Trace t = synthetic(mode, 1000, 512);
    write_trace(dir / "memory.h5", t);
    write_partial(dir / "streamed.h5", t);
    const TraceReader reader(partial_trace_path(dir / "streamed.h5"), TraceReadOptions{true});
    // 4 KiB blocks: 1-D series in 2 blocks, the d histogram a row at a time, kept w and u one 64 Ki-value chunk at a
    // time (at least one chunk), most of them starting inside a step's row of 240 values; 4 MiB: finish()'s.
    for (const std::size_t block : {std::size_t{4096}, detail::kFinishBlockBytes}) {
      detail::write_trace_from_reader(dir / "streamed.h5", reader, std::nullopt, block);
      EXPECT_EQ(bytes(dir / "memory.h5"), bytes(dir / "streamed.h5")) << mode << ", blocks of " << block << " bytes";
      fs::remove(dir / "streamed.h5");
    }
    fs::remove(partial_trace_path(dir / "streamed.h5"));
  }
  fs::remove_all(dir);
}

template <class T>
std::vector<T> joined(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<T> v = a;
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

// The number of filters of a one-row-per-chunk dataset, and the bytes HDF5 stored for its row `row` (with the filter
// mask stored beside them, which must be 0: every filter of the dataset applied).
int stored_chunk(const fs::path& file, const std::string& dataset, hsize_t row, std::string& chunk) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << dataset;
  const hid_t dcpl = H5Dget_create_plist(d);
  const int filters = H5Pget_nfilters(dcpl);
  const hsize_t offset[2] = {row, 0};
  hsize_t size = 0;
  EXPECT_GE(H5Dget_chunk_storage_size(d, offset, &size), 0) << dataset;
  chunk.assign(static_cast<std::size_t>(size), '\0');
  std::uint32_t mask = 0xffffffffu;
  EXPECT_GE(H5Dread_chunk(d, H5P_DEFAULT, offset, &mask, chunk.data()), 0) << dataset;
  EXPECT_EQ(mask, 0u) << dataset;
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
  return filters;
}

// The one-row-per-chunk datasets of a partial file (d and margin histograms, kept w and u) are written as chunks by
// the writer itself (H5Dwrite_chunk): by default they have no filters and a chunk is the row's own bytes; with
// WBAUDIT_PARTIAL_DEFLATE=1 they have shuffle + deflate and the writer filters the chunks in parallel (HDF5's
// shuffle, then a zlib stream from libdeflate). Either way HDF5 reads them back as the rows appended, int64 and float
// rows of one element (no shuffle) and of many, over two appends (the second's chunks at rows after the first's), and
// finish() of a partial file writes the same bytes as writing its trace at once.
TEST(TraceFinish, PartialFileChunksReadBackAsTheRowsAppended) {
  const fs::path dir = scratch("chunks");
  for (const char* mode : {static_cast<const char*>(nullptr), "0", "1"}) {
    const wbaudit::test::PartialDeflate env(mode);
    const bool deflated = mode != nullptr && std::string(mode) == "1";
    for (const int bins : {1, 512}) {
      const std::string what = std::string(mode == nullptr ? "unset" : mode) + ", " + std::to_string(bins) + " bins";
      const Trace first = synthetic("reference", 3, bins, {1, 240, 5000});
      Trace second = synthetic("reference", 5, bins, {1, 240, 5000});
      second.validation_steps.clear();
      second.validation_loss.clear();
      {
        Trace t = first, u = second;
        TraceWriter writer(dir / "trace.h5", t);
        writer.append(u);
        EXPECT_EQ(writer.rows().steps, 8);
      }
      const fs::path partial = partial_trace_path(dir / "trace.h5");
      {
        const TraceReader reader(partial, TraceReadOptions{true});
        ASSERT_EQ(reader.recorded_steps(), 8u);
        ASSERT_EQ(reader.group_count(), 3u);
        for (std::size_t g = 0; g < 3; ++g) {
          const GroupTrace got = reader.read_group(g, 0, 8);
          const GroupTrace &a = first.groups[g], &b = second.groups[g];
          EXPECT_EQ(got.ratio_histogram, joined(a.ratio_histogram, b.ratio_histogram)) << a.name << ", " << what;
          EXPECT_EQ(got.margin, joined(a.margin, b.margin)) << a.name << ", " << what;
          EXPECT_EQ(got.exact_w, joined(a.exact_w, b.exact_w)) << a.name << ", " << what;
          EXPECT_EQ(got.exact_u, joined(a.exact_u, b.exact_u)) << a.name << ", " << what;
          EXPECT_EQ(got.nonzero, joined(a.nonzero, b.nonzero)) << a.name << ", " << what;
          if (a.size <= kJointExactMaxCoordinates) {
            EXPECT_EQ(got.exact_w.size(), 8 * static_cast<std::size_t>(a.size)) << a.name;
          }
        }
      }
      // How row 4 (the second append's second row) of a margin histogram was stored.
      const GroupTrace& g = second.groups[1];
      const std::size_t width = g.margin.size() / 5;
      std::string chunk;
      const int filters = stored_chunk(partial, "/groups/" + g.name + "/joint/margin", 4, chunk);
      const std::string row(reinterpret_cast<const char*>(g.margin.data() + width), width * sizeof(std::int64_t));
      if (deflated) {
        EXPECT_EQ(filters, 2) << what;  // shuffle, deflate
        EXPECT_LT(chunk.size(), row.size()) << what;
      } else {
        EXPECT_EQ(filters, 0) << what;
        EXPECT_EQ(chunk, row) << what;
      }
      // finish() compresses every row through HDF5's filters: the same bytes as the trace written at once
      write_trace(dir / "memory.h5", first);
      {
        Trace t = first;
        TraceWriter writer(dir / "streamed.h5", t);
        writer.finish();
      }
      EXPECT_EQ(bytes(dir / "memory.h5"), bytes(dir / "streamed.h5")) << what;
      fs::remove(partial);
      fs::remove(dir / "memory.h5");
      fs::remove(dir / "streamed.h5");
    }
  }
  fs::remove_all(dir);
}

// WBAUDIT_PARTIAL_DEFLATE other than unset, empty, 0 or 1 is refused, naming the variable, its value and the file,
// before anything is written.
TEST(TraceFinish, BadPartialDeflateSettingIsRefused) {
  const fs::path dir = scratch("bad_env");
  const wbaudit::test::PartialDeflate env("yes");
  Trace t = synthetic("reference", 2, 16, {1, 240});
  try {
    TraceWriter writer(dir / "trace.h5", t);
    FAIL() << "accepted WBAUDIT_PARTIAL_DEFLATE=yes";
  } catch (const TraceFileError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("WBAUDIT_PARTIAL_DEFLATE is \"yes\""), std::string::npos) << m;
    EXPECT_NE(m.find("trace.h5.partial"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(partial_trace_path(dir / "trace.h5")));
  fs::remove_all(dir);
}

// What finish() allocates besides the trace it finishes: at most two blocks (the values read and, for kept w and u
// not starting on a row, the rows around them), the reader's root series and the finished header's copy of them
// (24 bytes per recorded step each), and a small constant; before streaming, finish held one group's rows of every
// recorded step (here 1000 x 16 KiB of d histogram alone, 16 MiB).
TEST(TraceFinish, FinishHoldsABlockNotTheRecordedSteps) {
  const fs::path dir = scratch("memory");
  for (const std::size_t T : {std::size_t{250}, std::size_t{1000}}) {
    Trace t = synthetic("reference", T, 2048);
    const std::size_t group_rows = T * 2048 * sizeof(std::int64_t);
    write_trace(dir / "memory.h5", t);
    TraceWriter writer(dir / "streamed.h5", t);  // t's rows go to the partial file
    t = Trace();
    g_peak.store(g_live.load());
    const std::size_t before = g_live.load();
    writer.finish();
    const std::size_t held = g_peak.load() - before;
    const std::size_t bound = 2 * detail::kFinishBlockBytes + 2 * 24 * T + (std::size_t{1} << 20);
    EXPECT_LE(held, bound) << T << " recorded steps";
    std::cerr << "finish() of " << T << " recorded steps allocated at most " << held << " bytes\n";
    if (T == 1000) {
      EXPECT_LT(bound, group_rows) << "the check must tell a block from one group's rows";
    }
    EXPECT_EQ(bytes(dir / "memory.h5"), bytes(dir / "streamed.h5")) << T << " recorded steps";
    fs::remove(dir / "memory.h5");
    fs::remove(dir / "streamed.h5");
  }
  fs::remove_all(dir);
}

}  // namespace
