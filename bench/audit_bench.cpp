// `wbaudit audit` throughput: audit_trajectory over a trajectory (4 tensors x 8 steps x 2M coordinates, e4m3, written
// once, then read from the page cache) against merely reading the same file, the same datasets in the same chunks
// (TrajectorySource::read), in the same process and in the same benchmark iteration (read pass and audit pass
// alternate, so load from other processes hits both alike). Two containers: the HDF5 layout TrajectoryWriter writes
// (python/wbaudit/trajectory.py: w, u and w_next of [T, n], chunks of 1 x 2^18, uncompressed) and a directory of .npy
// files with w of T + 1 rows (no w_next). Counter `x_read` = read time / audit time over the iterations: the target
// (issue 15) is >= 0.5 for nearest and SR. Run at 1 and 2 threads (--kokkos-threads=N).
#include <benchmark/benchmark.h>
#include <hdf5.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "audit/trajectory.hpp"
#include "audit/trajectory_audit.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/writeback.hpp"

namespace wa = wbaudit::audit;

namespace {

namespace fs = std::filesystem;
using namespace wbaudit;

constexpr std::int64_t kCoordinates = std::int64_t{1} << 21;
constexpr int kSteps = 8, kTensors = 4;

// The trajectories (about 270 MB as .npy, 800 MB as HDF5, per policy) are removed when the program ends.
struct Cleanup {
  std::vector<fs::path> dirs;
  ~Cleanup() {
    for (const auto& d : dirs) {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  }
} g_cleanup;

void write_npy(const fs::path& path, const char* descr, std::int64_t rows, std::int64_t cols, const void* data,
               std::size_t bytes) {
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + (cols ? ", " + std::to_string(cols) : std::string(",")) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  out.write(len, 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

// An HDF5 [rows, n] float32 dataset in chunks of 1 x 2^18 (as python/wbaudit/trajectory.py writes them).
void write_h5_rows(hid_t group, const char* name, std::int64_t rows, std::int64_t cols, const float* data) {
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
  const hsize_t chunk[2] = {1, std::min<hsize_t>(dims[1], hsize_t{1} << 18)};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 2, chunk);
  const hid_t dset = H5Dcreate2(group, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
}

void write_h5_string(hid_t loc, const char* name, const std::string& value) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, value.data());
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

// A consistent trajectory for `policy`, written once per policy in both containers: <dir> (.npy) and <dir>.h5.
fs::path trajectory(const std::string& policy, bool hdf5) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_audit_bench_" + policy + "_" + std::to_string(::getpid()));
  const fs::path h5 = dir.string() + ".h5";
  if (fs::exists(dir)) return hdf5 ? h5 : dir;
  fs::create_directories(dir);
  g_cleanup.dirs.push_back(dir);
  g_cleanup.dirs.push_back(h5);
  std::vector<std::int64_t> steps(kSteps);
  for (int k = 0; k < kSteps; ++k) steps[k] = k;
  write_npy(dir / "steps.npy", "<i8", kSteps, 0, steps.data(), steps.size() * 8);
  const hid_t file = H5Fcreate(h5.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  write_h5_string(file, "schema", wa::kTrajectorySchema);
  {
    const hsize_t n = kSteps;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t dset = H5Dcreate2(file, "steps", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps.data());
    H5Dclose(dset);
    H5Sclose(space);
  }
  const hid_t tensors = H5Gcreate2(file, "tensors", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::string order;
  const sim::FormatSpec fmt = sim::format_from_name("e4m3");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uw(-1, 1);
  for (int t = 0; t < kTensors; ++t) {
    Kokkos::View<float*> w("wbaudit::bench::audit::w", kCoordinates), u("wbaudit::bench::audit::u", kCoordinates);
    auto hw = Kokkos::create_mirror_view(w);
    for (std::int64_t i = 0; i < kCoordinates; ++i) hw(i) = uw(rng);
    Kokkos::deep_copy(w, hw);
    sim::quantize(fmt, w);
    std::vector<float> W, U;
    auto hu = Kokkos::create_mirror_view(u);
    for (int k = 0; k < kSteps; ++k) {
      Kokkos::deep_copy(hw, w);
      W.insert(W.end(), hw.data(), hw.data() + kCoordinates);
      for (std::int64_t i = 0; i < kCoordinates; ++i) hu(i) = std::ldexp(uw(rng), -static_cast<int>(rng() % 10) - 3);
      Kokkos::deep_copy(u, hu);
      U.insert(U.end(), hu.data(), hu.data() + kCoordinates);
      sim::writeback(fmt, sim::make_policy(policy),
                     sim::RngKey{1, static_cast<std::uint64_t>(k), static_cast<std::uint32_t>(t)}, w, u);
    }
    Kokkos::deep_copy(hw, w);
    W.insert(W.end(), hw.data(), hw.data() + kCoordinates);
    const std::string name = "t" + std::to_string(t);
    write_npy(dir / (name + ".w.npy"), "<f4", kSteps + 1, kCoordinates, W.data(), W.size() * 4);
    write_npy(dir / (name + ".u.npy"), "<f4", kSteps, kCoordinates, U.data(), U.size() * 4);
    const hid_t g = H5Gcreate2(tensors, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    write_h5_rows(g, "w", kSteps, kCoordinates, W.data());
    write_h5_rows(g, "u", kSteps, kCoordinates, U.data());
    write_h5_rows(g, "w_next", kSteps, kCoordinates, W.data() + kCoordinates);
    H5Gclose(g);
    order += (t ? "\n" : "") + name;
  }
  write_h5_string(file, "tensor_order", order);
  H5Gclose(tensors);
  H5Fclose(file);
  return hdf5 ? h5 : dir;
}

// CPU time of the process (all threads, user and system: pread's copy from the page cache is system time).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One pass that only reads the file: every row of every dataset once (w, u and w_next; without w_next, the T + 1 rows
// of w and the T rows of u), in the audit's chunks, through the same reader.
double read_pass(const fs::path& path, std::vector<float>& w, std::vector<float>& u, std::vector<float>& n) {
  const std::int64_t chunk = wa::TrajectoryAuditOptions{}.chunk;
  const auto t0 = std::chrono::steady_clock::now();
  auto source = wa::open_trajectory(path);
  const std::size_t T = source->steps.size();
  for (std::size_t t = 0; t < source->tensors.size(); ++t) {
    const std::int64_t size = source->tensors[t].size;
    const bool has_next = source->tensors[t].has_w_next;
    for (std::size_t k = 0; k <= T; ++k) {  // k == T: the last row of w (w[t+1] of the last step), without w_next
      for (std::int64_t b = 0; b < size && (k < T || !has_next); b += chunk) {
        const std::int64_t c = std::min(chunk, size - b);
        const std::span<float> ws(w.data(), c), us(u.data(), c), ns(n.data(), c), none;
        if (k < T) {
          source->read(t, k, b, ws, us, has_next ? ns : none);
        } else {
          source->read(t, T - 1, b, none, none, ns);
        }
      }
    }
  }
  benchmark::DoNotOptimize(w.data());
  benchmark::DoNotOptimize(u.data());
  benchmark::DoNotOptimize(n.data());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each iteration: a read pass and an audit pass of the same file (alternating which comes first); the reported time
// is the audit's.
void BM_audit(benchmark::State& state, const std::string& policy, bool hdf5) {
  const fs::path path = trajectory(policy, hdf5);
  wa::TrajectoryAuditOptions options;
  options.format = "e4m3";
  options.policy = sim::make_policy(policy);
  options.seed = 1;  // the run's seed (RngKey{1, step, tensor} above): SR draws are replayed by the fast path
  const std::int64_t chunk = options.chunk;
  std::vector<float> w(chunk), u(chunk), n(chunk);
  double read_seconds = 0, audit_seconds = 0, read_cpu = 0, audit_cpu = 0;
  std::int64_t inconsistent = 0, passes = 0;
  auto audit_pass = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    auto source = wa::open_trajectory(path);
    inconsistent += wa::audit_trajectory(*source, options).inconsistent;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto timed = [](auto&& pass, double& cpu) {
    const double c0 = cpu_seconds();
    const double wall = pass();
    cpu += cpu_seconds() - c0;
    return wall;
  };
  auto read_only = [&] { return read_pass(path, w, u, n); };
  for (auto _ : state) {
    double r, a;
    if (passes % 2 == 0) {
      r = timed(read_only, read_cpu);
      a = timed(audit_pass, audit_cpu);
    } else {
      a = timed(audit_pass, audit_cpu);
      r = timed(read_only, read_cpu);
    }
    read_seconds += r;
    audit_seconds += a;
    ++passes;
    state.SetIterationTime(a);
  }
  if (inconsistent != 0) state.SkipWithError("the benchmark trajectory is inconsistent");
  state.SetItemsProcessed(state.iterations() * kTensors * kSteps * kCoordinates);
  state.counters["read_ms"] = 1e3 * read_seconds / static_cast<double>(passes);
  state.counters["audit_ms"] = 1e3 * audit_seconds / static_cast<double>(passes);
  state.counters["x_read"] = read_seconds / audit_seconds;
  // The same ratio in CPU time: on a loaded machine at 1 thread, the load-independent figure (at 2 threads it
  // compares work, not elapsed time).
  state.counters["x_read_cpu"] = read_cpu / audit_cpu;
}

const bool registered = [] {
  for (const bool hdf5 : {true, false}) {
    for (const std::string policy : {"nearest", "stochastic"}) {
      benchmark::RegisterBenchmark(("audit/" + std::string(hdf5 ? "h5" : "npy") + "/" + policy).c_str(),
                                   [=](benchmark::State& s) { BM_audit(s, policy, hdf5); })
          ->Unit(benchmark::kMillisecond)
          ->UseManualTime();
    }
  }
  return true;
}();

}  // namespace
