// Simulator step throughput for a mid-size cell (input 16, hidden 64, output 4, batch 64, Adam): a plain fp32 step
// (reference mode, nothing recorded), a target step (e4m3 nearest write-back with exact event counting), and
// reference recording (3 projected formats + the d histogram; or 1 format) at every step, and log-spaced
// (amortized).
// The Ratios benchmark times them in the same process and reports them as counters.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <chrono>

#include "sim/run.hpp"

namespace {

using namespace wbaudit::sim;

constexpr std::int64_t kSteps = 400;

RunConfig mid_cell(RunMode mode) {
  RunConfig c;
  c.mode = mode;
  c.steps = kSteps;
  c.model.shape = TwoLayerShape{16, 64, 4, Activation::tanh};
  c.model.teacher_hidden = 32;
  c.data.batch = 64;
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = std::ldexp(1.0, -4);
  c.record = RecordConfig{RecordKind::every_k, kSteps, 2};  // steps 0 and last only
  if (mode == RunMode::target) {
    c.target = TargetConfig{"e4m3", "nearest", 0, {}};
  }
  return c;
}

RunConfig plain() {
  return mid_cell(RunMode::reference);
}
RunConfig target() {
  return mid_cell(RunMode::target);
}
RunConfig recording_every_step() {
  RunConfig c = mid_cell(RunMode::reference);
  c.project_formats = {"bf16", "e4m3", "e5m2"};
  c.record = RecordConfig{RecordKind::every, 1, 2};
  return c;
}
RunConfig recording_every_step_one_format() {
  RunConfig c = recording_every_step();
  c.project_formats = {"e4m3"};
  return c;
}
RunConfig recording_log() {  // 2000-step runs recorded at 80 log-spaced points: 4% of steps; here scaled to 400
  RunConfig c = recording_every_step();
  c.record = RecordConfig{RecordKind::log, 1, 16};
  return c;
}

double seconds_per_step(const RunConfig& c) {
  const auto t0 = std::chrono::steady_clock::now();
  benchmark::DoNotOptimize(run_cell(Kokkos::DefaultExecutionSpace(), c));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(c.steps);
}

void run(benchmark::State& state, const RunConfig& c) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(run_cell(Kokkos::DefaultExecutionSpace(), c));
  }
  state.counters["steps_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * c.steps), benchmark::Counter::kIsRate);
}

void PlainFp32Step(benchmark::State& state) {
  run(state, plain());
}
void TargetE4m3NearestStep(benchmark::State& state) {
  run(state, target());
}
void ReferenceRecordingEveryStep(benchmark::State& state) {
  run(state, recording_every_step());
}
void ReferenceRecordingEveryStepOneFormat(benchmark::State& state) {
  run(state, recording_every_step_one_format());
}
void ReferenceRecordingLogSpaced(benchmark::State& state) {
  run(state, recording_log());
}

// Interleaved timing of the four variants in one loop; counters are per-step time ratios to the plain step
// (the median over iterations of each variant's seconds per step).
void Ratios(benchmark::State& state) {
  std::vector<double> p, t, r, r1, l;
  for (auto _ : state) {
    p.push_back(seconds_per_step(plain()));
    t.push_back(seconds_per_step(target()));
    r.push_back(seconds_per_step(recording_every_step()));
    r1.push_back(seconds_per_step(recording_every_step_one_format()));
    l.push_back(seconds_per_step(recording_log()));
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(p);
  state.counters["plain_us_per_step"] = base * 1e6;
  state.counters["target_over_plain"] = median(t) / base;
  state.counters["recording_every_step_over_plain"] = median(r) / base;
  state.counters["recording_every_step_one_format_over_plain"] = median(r1) / base;
  state.counters["recording_log_amortized_over_plain"] = median(l) / base;
}

BENCHMARK(PlainFp32Step)->Unit(benchmark::kMillisecond);
BENCHMARK(TargetE4m3NearestStep)->Unit(benchmark::kMillisecond);
BENCHMARK(ReferenceRecordingEveryStep)->Unit(benchmark::kMillisecond);
BENCHMARK(ReferenceRecordingEveryStepOneFormat)->Unit(benchmark::kMillisecond);
BENCHMARK(ReferenceRecordingLogSpaced)->Unit(benchmark::kMillisecond);
BENCHMARK(Ratios)->Unit(benchmark::kMillisecond)->Iterations(9);

}  // namespace
