// `wbaudit audit` throughput: audit_trajectory over a .npy trajectory (4 tensors x 8 steps x 2M coordinates, e4m3,
// written once, then read from the page cache) against merely reading the same rows in the same chunks
// (TrajectorySource::read), in the same process. Counter `x_read` = read-only time / audit time: the target
// (issue 15) is >= 0.5 for nearest and SR. Run at 1 and 2 threads (--kokkos-threads=N).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runners/trajectory.hpp"
#include "runners/trajectory_audit.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/writeback.hpp"

namespace {

namespace fs = std::filesystem;
using namespace wbaudit;

constexpr std::int64_t kCoordinates = std::int64_t{1} << 21;
constexpr int kSteps = 8, kTensors = 4;
double g_read_seconds = 0;

// The trajectories (about 270 MB each) are removed when the program ends.
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

// A consistent trajectory for `policy`, written once per policy.
fs::path trajectory(const std::string& policy) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_audit_bench_" + policy + "_" + std::to_string(::getpid()));
  if (fs::exists(dir)) return dir;
  fs::create_directories(dir);
  g_cleanup.dirs.push_back(dir);
  std::vector<std::int64_t> steps(kSteps);
  for (int k = 0; k < kSteps; ++k) steps[k] = k;
  write_npy(dir / "steps.npy", "<i8", kSteps, 0, steps.data(), steps.size() * 8);
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
  }
  return dir;
}

void BM_read_only(benchmark::State& state) {
  const fs::path dir = trajectory("nearest");
  const std::int64_t chunk = runners::TrajectoryAuditOptions{}.chunk;
  std::vector<float> w(chunk), u(chunk), n(chunk);
  double seconds = 0;
  std::int64_t passes = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto source = runners::open_trajectory(dir);
    for (std::size_t t = 0; t < source->tensors.size(); ++t)
      for (std::size_t k = 0; k < source->steps.size(); ++k)
        for (std::int64_t b = 0; b < source->tensors[t].size; b += chunk) {
          const std::int64_t c = std::min(chunk, source->tensors[t].size - b);
          source->read(t, k, b, std::span(w.data(), c), std::span(u.data(), c), std::span(n.data(), c));
        }
    benchmark::DoNotOptimize(w.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++passes;
  }
  g_read_seconds = seconds / passes;
  state.SetItemsProcessed(state.iterations() * kTensors * kSteps * kCoordinates);
}

void BM_audit(benchmark::State& state, const std::string& policy) {
  const fs::path dir = trajectory(policy);
  runners::TrajectoryAuditOptions options;
  options.format = "e4m3";
  options.policy = sim::make_policy(policy);
  options.seed = 1;  // the run's seed (RngKey{1, step, tensor} above): SR draws are replayed by the fast path
  double seconds = 0;
  std::int64_t passes = 0, inconsistent = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto source = runners::open_trajectory(dir);
    inconsistent += runners::audit_trajectory(*source, options).inconsistent;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++passes;
  }
  if (inconsistent != 0) state.SkipWithError("the benchmark trajectory is inconsistent");
  state.SetItemsProcessed(state.iterations() * kTensors * kSteps * kCoordinates);
  if (g_read_seconds > 0) state.counters["x_read"] = g_read_seconds / (seconds / passes);
}

const bool registered = [] {
  benchmark::RegisterBenchmark("audit/read_only", BM_read_only)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const std::string policy : {"nearest", "stochastic"}) {
    benchmark::RegisterBenchmark(("audit/" + policy).c_str(), [=](benchmark::State& s) { BM_audit(s, policy); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  return true;
}();

}  // namespace
