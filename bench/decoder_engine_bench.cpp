// The decoder on the training engine (issue targets: target mode and reference recording <= 1.3x the fp32 step):
// a ~1M-parameter decoder (width 128, 4 heads, 4 layers, SwiGLU 344, vocab 256, sequence 128, batch 8, Adam; the
// *MillionShape ratios use decoder_bench's 1M shape instead) run as a plain fp32 cell (reference mode; its steps
// 1 .. 4 record nothing and are the baseline), an e4m3 nearest target (norm gains fp32), an e4m3 stochastic target,
// and reference recording at every step (projections for bf16, e4m3, e5m2, the d histogram and the joint histogram).
// The Ratios benchmarks interleave them and report per-step time ratios to the plain cell; peak resident memory and
// the machine's cost of a fresh page are reported too.
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>

#include <random>

#include "sim/engine.hpp"
#include "sim/run.hpp"
#include "sim/trace/joint_recording.hpp"

namespace {

using namespace wbaudit::sim;

constexpr std::int64_t kSteps = 6;

// The two shapes of about 1M parameters: this bench's own (width 128, 4 layers, SwiGLU 344, batch 8: 0.85M) and the
// "1M shape" of decoder_bench and the torch comparison (width 192, 2 layers, SwiGLU 512, batch 16: 0.98M), both with
// 4 heads, vocab 256, sequence 128.
enum class Shape { engine, million };

RunConfig cell(RunMode mode, Shape shape = Shape::engine) {
  RunConfig c;
  c.mode = mode;
  c.steps = kSteps;
  c.model.kind = "decoder";
  c.model.decoder = DecoderConfig{};
  c.model.decoder.width = shape == Shape::engine ? 128 : 192;
  c.model.decoder.heads = 4;
  c.model.decoder.layers = shape == Shape::engine ? 4 : 2;
  c.model.decoder.mlp_hidden = shape == Shape::engine ? 344 : 512;
  c.model.decoder.vocab = 256;
  c.model.decoder.seq_len = 128;
  c.data.batch = shape == Shape::engine ? 8 : 16;
  c.data.source = "markov";
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = 1e-3;
  c.record = RecordConfig{RecordKind::every_k, kSteps, 2};  // steps 0 and last only
  if (mode == RunMode::target) {
    c.target = TargetConfig{"e4m3", "nearest", 0, {{"*norm*", "fp32"}}};
  }
  return c;
}

RunConfig plain(Shape shape = Shape::engine) {
  return cell(RunMode::reference, shape);
}
RunConfig target_nearest(Shape shape = Shape::engine) {
  return cell(RunMode::target, shape);
}
RunConfig target_sr(Shape shape = Shape::engine) {
  RunConfig c = cell(RunMode::target, shape);
  c.target.policy = "stochastic";
  return c;
}
RunConfig recording_every_step(Shape shape = Shape::engine) {
  RunConfig c = cell(RunMode::reference, shape);
  c.project_formats = {"bf16", "e4m3", "e5m2"};
  c.record = RecordConfig{RecordKind::every, 1, 2};
  return c;
}

// Seconds per step of one cell. `step`: the mean over steps 1 .. kSteps - 2 of the engine's step loop (what the targets
// are about): the plain and target cells record at steps 0 and kSteps - 1 only, so these steps are plain fp32 steps
// and plain write-back steps, and the baseline carries no recording; step 0 (first touch of every buffer) is left out
// of every cell alike. `whole`: the cell from construction (model initialization, data, buffers) to its last step, per
// step.
struct StepTime {
  double step = 0, whole = 0;
  double joint_pairs_per_coordinate = 0;  // joint-histogram pairs stored per recorded (step, coordinate)
  double parameters = 0;
};
StepTime seconds_per_step(const RunConfig& c) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), c);
  Kokkos::fence();
  double middle = 0;
  for (std::int64_t s = 0; s < c.steps; ++s) {
    const auto a = Clock::now();
    training.step();
    Kokkos::fence();
    if (s >= 1 && s <= c.steps - 2) middle += std::chrono::duration<double>(Clock::now() - a).count();
  }
  const auto t2 = Clock::now();
  double pairs = 0, coordinates = 0, parameters = 0;
  for (const GroupTrace& g : training.trace().groups) {
    parameters += static_cast<double>(g.size);
    pairs += static_cast<double>(g.joint_keys.size());
    coordinates += static_cast<double>(g.size) * static_cast<double>(training.trace().recorded_steps.size());
  }
  return {middle / static_cast<double>(c.steps - 2),
          std::chrono::duration<double>(t2 - t0).count() / static_cast<double>(c.steps), pairs / coordinates,
          parameters};
}

void run(benchmark::State& state, const RunConfig& c) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(run_cell(Kokkos::DefaultExecutionSpace(), c));
  }
  const double tokens = static_cast<double>(c.data.batch) * c.model.decoder.seq_len;
  state.counters["steps_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * c.steps), benchmark::Counter::kIsRate);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * c.steps) * tokens, benchmark::Counter::kIsRate);
}

void DecoderPlainFp32Step(benchmark::State& state) {
  run(state, plain());
}
void DecoderTargetE4m3NearestStep(benchmark::State& state) {
  run(state, target_nearest());
}
void DecoderTargetE4m3StochasticStep(benchmark::State& state) {
  run(state, target_sr());
}
void DecoderReferenceRecordingEveryStep(benchmark::State& state) {
  run(state, recording_every_step());
}

void ratios(benchmark::State& state, Shape shape) {
  std::vector<double> p, t, s, r, pw, rw;
  for (auto _ : state) {
    const StepTime plain_time = seconds_per_step(plain(shape));
    p.push_back(plain_time.step);
    pw.push_back(plain_time.whole);
    t.push_back(seconds_per_step(target_nearest(shape)).step);
    s.push_back(seconds_per_step(target_sr(shape)).step);
    const StepTime recording_time = seconds_per_step(recording_every_step(shape));
    r.push_back(recording_time.step);
    state.counters["joint_pairs_per_coordinate"] = recording_time.joint_pairs_per_coordinate;
    state.counters["parameters"] = recording_time.parameters;
    rw.push_back(recording_time.whole);
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(p);
  state.counters["plain_ms_per_step"] = base * 1e3;
  state.counters["target_nearest_over_plain"] = median(t) / base;
  state.counters["target_sr_over_plain"] = median(s) / base;
  state.counters["recording_every_step_over_plain"] = median(r) / base;
  // The same with each cell's construction counted (a 6-step cell: its setup weighs as much as a step).
  state.counters["recording_whole_cell_over_plain"] = median(rw) / median(pw);
  // What this machine charges for fresh memory (first touch of anonymous pages, 4 KiB apart over 64 MiB): a recorded
  // step appends ~14 bytes of joint-histogram pairs per coordinate to the trace, all in fresh pages.
  {
    const std::size_t bytes = std::size_t{64} << 20;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      const auto a = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < bytes; i += 4096) static_cast<volatile char*>(p)[i] = 1;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      munmap(p, bytes);
      state.counters["fresh_page_us"] = s * 1e6 / static_cast<double>(bytes / 4096);
    }
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["peak_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
}

BENCHMARK(DecoderPlainFp32Step)->Unit(benchmark::kMillisecond);
BENCHMARK(DecoderTargetE4m3NearestStep)->Unit(benchmark::kMillisecond);
BENCHMARK(DecoderTargetE4m3StochasticStep)->Unit(benchmark::kMillisecond);
BENCHMARK(DecoderReferenceRecordingEveryStep)->Unit(benchmark::kMillisecond);
void DecoderRatios(benchmark::State& state) {
  ratios(state, Shape::engine);
}
void DecoderRatiosMillionShape(benchmark::State& state) {
  ratios(state, Shape::million);
}

BENCHMARK(DecoderRatios)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(DecoderRatiosMillionShape)->Unit(benchmark::kMillisecond)->Iterations(5);

// The joint histogram's runs of one large tensor (4M coordinates, w ~ N(0, 0.02), u ~ N(0, 1e-4): what
// finish_joint_histograms sorts with all threads above kJointParallelSort) by the one-thread sort and by the
// all-threads sort, interleaved; the counter is the one-thread time over the all-threads time.
void JointRunsLargeTensor(benchmark::State& state) {
  const std::size_t n = std::size_t{1} << 22;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> wd(0.0f, 0.02f), ud(0.0f, 1e-4f);
  const JointHistogramLayout layout;
  std::vector<std::uint64_t> keys(n);
  for (auto& k : keys) k = joint_key(layout.w_bits, layout.u_bits, wd(rng), ud(rng));
  const int bits = 20 + layout.w_bits + layout.u_bits;
  JointScratch scratch;
  std::vector<std::uint64_t> temp, out_keys, copy;
  std::vector<std::int64_t> out_counts;
  std::vector<double> serial, parallel;
  for (auto _ : state) {
    copy = keys;
    out_keys.clear();
    out_counts.clear();
    auto t0 = std::chrono::steady_clock::now();
    detail::append_joint_runs_serial(copy.data(), n, bits, temp, out_keys, out_counts);
    auto t1 = std::chrono::steady_clock::now();
    serial.push_back(std::chrono::duration<double>(t1 - t0).count());
    out_keys.clear();
    out_counts.clear();
    t0 = std::chrono::steady_clock::now();
    detail::append_joint_runs(Kokkos::DefaultHostExecutionSpace(), keys.data(), n, bits, scratch, out_keys, out_counts);
    t1 = std::chrono::steady_clock::now();
    parallel.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(serial.begin(), serial.end());
  std::sort(parallel.begin(), parallel.end());
  state.counters["one_thread_ms"] = serial[serial.size() / 2] * 1e3;
  state.counters["all_threads_ms"] = parallel[parallel.size() / 2] * 1e3;
  state.counters["one_thread_over_all_threads"] = serial[serial.size() / 2] / parallel[parallel.size() / 2];
  state.counters["pairs"] = static_cast<double>(out_keys.size());
}
BENCHMARK(JointRunsLargeTensor)->Unit(benchmark::kMillisecond)->Iterations(5);
}  // namespace
