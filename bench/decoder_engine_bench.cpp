// The decoder on the training engine (issue targets: target mode and reference recording <= 1.3x the fp32 step):
// a ~1M-parameter decoder (width 128, 4 heads, 4 layers, SwiGLU 344, vocab 256, sequence 128, batch 8, Adam; the
// *MillionShape ratios use decoder_bench's 1M shape instead) run as a plain fp32 cell (reference mode; its steps
// 1 .. 4 record nothing and are the baseline), an e4m3 nearest target (norm gains fp32), an e4m3 stochastic target,
// and reference recording at every step (projections for bf16, e4m3, e5m2, the d histogram and the margin histogram)
// streamed to a trace file as in production (run_cell_to_file). The Ratios benchmarks interleave them and report
// per-step time ratios to the plain cell, and the finished trace's bytes per recorded step
// (DecoderBlockRecordingRatios: the recording with block formats projected too); MarginKernel times the recording
// kernel alone on a 4M-coordinate tensor under each ISA the CPU has; RecordingPeakMemory runs a streamed reference
// recording 4 and 40 steps in child processes and reports each one's peak resident memory.
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>

#include <random>

#include <cstdlib>
#include <filesystem>

#include "sim/engine.hpp"
#include "sim/precision/block_expected.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/expected_erasure.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback_blocks.hpp"
#include "sim/run.hpp"
#include "sim/trace/block_reference.hpp"
#include "sim/trace/block_sample.hpp"
#include "sim/trace/reference_histograms.hpp"
#include "sim/trace/trace_writer.hpp"

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
  double trace_bytes_per_step = 0;  // the finished trace's bytes per recorded step
  double parameters = 0;
};
// Every cell streams its trace to a file (the production path, run_cell_to_file), finished at the end.
StepTime seconds_per_step(const RunConfig& c) {
  using Clock = std::chrono::steady_clock;
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("wbaudit_decoder_engine_bench_" + std::to_string(::getpid()) + ".h5");
  const auto t0 = Clock::now();
  Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), c);
  TraceWriter writer(file, training.mutable_trace());
  training.stream_to(&writer);
  Kokkos::fence();
  double middle = 0;
  for (std::int64_t s = 0; s < c.steps; ++s) {
    const auto a = Clock::now();
    training.step();
    Kokkos::fence();
    if (s >= 1 && s <= c.steps - 2) middle += std::chrono::duration<double>(Clock::now() - a).count();
  }
  const auto t2 = Clock::now();
  training.stream_to(nullptr);
  writer.finish();
  double parameters = 0;
  for (const GroupTrace& g : training.trace().groups) parameters += static_cast<double>(g.size);
  const double bytes = static_cast<double>(std::filesystem::file_size(file));
  std::filesystem::remove(file);
  return {middle / static_cast<double>(c.steps - 2),
          std::chrono::duration<double>(t2 - t0).count() / static_cast<double>(c.steps),
          bytes / static_cast<double>(std::max<std::int64_t>(1, writer.rows().steps)), parameters};
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

// The median of per-iteration times (the upper one of an even count).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A reference recording of `c` whose margin histogram holds its declared per-tensor formats only (margin_formats).
RunConfig with_declared_margin(RunConfig c) {
  for (const std::string& f : c.project_formats) {
    if (!is_block_storage_name(f)) {
      c.margin_formats.push_back(f);
    }
  }
  c.margin_formats = margin_layout_for(c.margin_formats).formats;
  return c;
}

void ratios(benchmark::State& state, Shape shape) {
  std::vector<double> p, t, s, r, pw, rw, rd;
  for (auto _ : state) {
    const StepTime plain_time = seconds_per_step(plain(shape));
    p.push_back(plain_time.step);
    pw.push_back(plain_time.whole);
    t.push_back(seconds_per_step(target_nearest(shape)).step);
    s.push_back(seconds_per_step(target_sr(shape)).step);
    const StepTime recording_time = seconds_per_step(recording_every_step(shape));
    r.push_back(recording_time.step);
    state.counters["trace_bytes_per_recorded_step"] = recording_time.trace_bytes_per_step;
    state.counters["parameters"] = recording_time.parameters;
    rw.push_back(recording_time.whole);
    rd.push_back(seconds_per_step(with_declared_margin(recording_every_step(shape))).step);
  }
  const double base = median(p);
  state.counters["plain_ms_per_step"] = base * 1e3;
  state.counters["target_nearest_over_plain"] = median(t) / base;
  state.counters["target_sr_over_plain"] = median(s) / base;
  state.counters["recording_every_step_over_plain"] = median(r) / base;
  // the same with the margin histogram of the three declared formats instead of all 14 (margin_formats)
  state.counters["recording_declared_margin_over_plain"] = median(rd) / base;
  // The same with each cell's construction counted (a 6-step cell: its setup weighs as much as a step).
  state.counters["recording_whole_cell_over_plain"] = median(rw) / median(pw);
  state.counters["isa"] = static_cast<double>(detail::active_block_isa());  // 0 portable, 1 avx2, 2 avx512
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

// Issue 29's recording target (projected block counts keep the recorded step <= 1.3x the plain step): reference
// recording at every step with the per-tensor projections of DecoderRatios (bf16, e4m3, e5m2) and the same plus the
// block formats mxfp8_e4m3 and nvfp4 (their exact projection by cause and their block sample), interleaved with the
// plain cell; medians of the per-step times over the iterations. `blocks_added_over_plain` is what the two block
// formats add to a recorded step, in plain steps.
void DecoderBlockRecordingRatios(benchmark::State& state) {
  std::vector<double> p, r, b, bd;
  RunConfig with_blocks = recording_every_step();
  with_blocks.project_formats.insert(with_blocks.project_formats.end(), {"mxfp8_e4m3", "nvfp4"});
  const RunConfig with_blocks_declared = with_declared_margin(with_blocks);
  for (auto _ : state) {
    p.push_back(seconds_per_step(plain()).step);
    r.push_back(seconds_per_step(recording_every_step()).step);
    b.push_back(seconds_per_step(with_blocks).step);
    bd.push_back(seconds_per_step(with_blocks_declared).step);
  }
  const double base = median(p);
  state.counters["plain_ms_per_step"] = base * 1e3;
  state.counters["recording_over_plain"] = median(r) / base;
  state.counters["recording_blocks_over_plain"] = median(b) / base;
  state.counters["blocks_added_over_plain"] = (median(b) - median(r)) / base;
  // the same with the margin histogram of bf16, e4m3 and e5m2 only (margin_formats)
  state.counters["recording_blocks_declared_margin_over_plain"] = median(bd) / base;
}

// The block sample's cost in a recorded step (docs/forecasting.md, "Block formats at any learning-rate scale"): on a
// 1024 x 1024 tensor, the block projection the engine records at each recorded step (block_project) alone (Arg 0:
// mxfp8_e4m3, 2: nvfp4) and followed by the block sample as the engine records it (Arg 1, 3: the sampled blocks' w and
// u; NVFP4 also q(w) of the whole tensor and its tensor row).
// The recorded state of the block benches: a 1024 x 1024 tensor, w ~ N(0, 0.05^2), u ~ N(0, 1e-6).
struct BlockBenchTensor {
  RowMajorShape shape{1024, 1024};
  Kokkos::View<float*> w, u;
  BlockBenchTensor()
      : w("wbaudit::bench::block_tensor::w", static_cast<std::size_t>(shape.size())),
        u("wbaudit::bench::block_tensor::u", static_cast<std::size_t>(shape.size())) {
    std::mt19937 gen(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t i = 0; i < w.extent(0); ++i) {
      w(i) = 0.05f * normal(gen);
      u(i) = 1e-3f * normal(gen);
    }
  }
};

void BlockSampleRecording(benchmark::State& state) {
  const bool nvfp4 = state.range(0) >= 2;
  const bool sample = state.range(0) % 2 == 1;
  const BlockFormatSpec fmt = block_format_from_name(nvfp4 ? "nvfp4" : "mxfp8_e4m3");
  const BlockBenchTensor t;
  for (auto _ : state) {
    if (sample) {  // what the engine records: the projection, then the sample (record_block_projection)
      ProjectedSeries series = block_projection_header(fmt, t.shape);
      benchmark::DoNotOptimize(record_block_projection(Kokkos::DefaultExecutionSpace(), fmt, RngKey{}, t.shape,
                                                       Kokkos::View<const float*>(t.w), t.u, series));
      benchmark::DoNotOptimize(series.block_sample.w.data());
    } else {
      benchmark::DoNotOptimize(block_project(fmt, RngKey{}, t.shape, t.w, t.u));
    }
  }
  state.counters["coordinates"] = static_cast<double>(t.w.extent(0));
}

// The expected projection of one SR policy for a block format in a recorded step (block_expected.hpp), on the
// tensor of BlockSampleRecording (compare with its Arg 0 / 2, block_project alone): Arg 0: mxfp8_e4m3 exact SR, 1:
// mxfp8_e4m3 8-bit SR, 2: nvfp4 exact SR, 3: nvfp4 8-bit SR; 4: for comparison, the per-tensor e4m3 exact SR
// projection (expected_erasure.hpp).
void ExpectedBlockRecording(benchmark::State& state) {
  const bool nvfp4 = state.range(0) >= 2;
  const WritebackPolicy policy{Policy::stochastic, state.range(0) % 2 == 1 ? 8 : 0};
  const BlockFormatSpec fmt = block_format_from_name(nvfp4 ? "nvfp4" : "mxfp8_e4m3");
  const BlockBenchTensor t;
  for (auto _ : state) {
    const ExpectedErasure e = state.range(0) == 4 ? expected_erasure(format_from_name("e4m3"), policy, t.w, t.u)
                                                  : expected_block_erasure(fmt, policy, RngKey{}, t.shape, t.w, t.u);
    benchmark::DoNotOptimize(e);
  }
  state.counters["coordinates"] = static_cast<double>(t.w.extent(0));
}

BENCHMARK(DecoderRatios)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BlockSampleRecording)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10)
    ->UseRealTime();
BENCHMARK(ExpectedBlockRecording)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10)
    ->UseRealTime();
BENCHMARK(DecoderRatiosMillionShape)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(DecoderBlockRecordingRatios)->Unit(benchmark::kMillisecond)->Iterations(5);

// The recording kernel alone (reference_histograms: the d histogram and the margin histogram of the 14 formats, or
// with range(1) == 3 of bf16, e5m2 and e4m3 only: margin_formats) on one 4M-coordinate tensor (w ~ N(0, 0.02),
// u ~ +-6e-4 lognormal), under the ISA range(0) (0 portable, 1 AVX2, 2 AVX-512; one the CPU lacks is skipped),
// against a plain w + u loop over the same arrays: nanoseconds per coordinate.
void MarginKernel(benchmark::State& state) {
  const auto isa = static_cast<detail::BlockIsa>(state.range(0));
  if (!detail::block_isa_supported(isa)) {
    state.SkipWithError("ISA not supported by this CPU");
    return;
  }
  detail::force_block_isa(isa);
  const std::size_t n = std::size_t{1} << 22;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> wd(0.0f, 0.02f), ud(0.0f, 1.0f);
  std::vector<float> w(n), u(n), sum(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = wd(rng);
    u[i] = 6e-4f * std::exp(ud(rng)) * (ud(rng) > 0 ? 1.0f : -1.0f);
  }
  const MarginLayout layout =
      state.range(1) == 3 ? margin_layout_for({"bf16", "e5m2", "e4m3"}) : default_margin_layout();
  const std::vector<MarginFormat> formats = margin_formats(layout, 0.1);
  std::vector<double> kernel, add;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto h = reference_histograms(Kokkos::DefaultHostExecutionSpace(), RatioHistogramLayout{}, layout, formats,
                                        w.data(), u.data(), n);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(h.margin.data());
    float* out = sum.data();
    const float* wp = w.data();
    const float* up = u.data();
    Kokkos::parallel_for("wbaudit::bench::plain_update", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, n),
                         [=](const std::size_t i) { out[i] = wp[i] + up[i]; });
    Kokkos::fence();
    const auto t2 = std::chrono::steady_clock::now();
    kernel.push_back(std::chrono::duration<double>(t1 - t0).count());
    add.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  std::sort(kernel.begin(), kernel.end());
  std::sort(add.begin(), add.end());
  state.counters["ns_per_coordinate"] = kernel[kernel.size() / 2] * 1e9 / static_cast<double>(n);
  state.counters["plain_add_ns_per_coordinate"] = add[add.size() / 2] * 1e9 / static_cast<double>(n);
  detail::force_block_isa(detail::best_block_isa());
}
BENCHMARK(MarginKernel)
    ->Args({0, 14})
    ->Args({1, 14})
    ->Args({2, 14})
    ->Args({0, 3})
    ->Args({1, 3})
    ->Args({2, 3})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

// Peak resident memory of a streamed reference recording of 4 and of 40 steps (every step recorded, each run in a
// fresh child process, getrusage of the child): the recorder's memory must not grow with the recorded steps. Shape:
// WBAUDIT_BENCH_WIDTH / _LAYERS (default: the 1M shape; the 100M decoder is width 768, 12 layers).
void RecordingPeakMemory(benchmark::State& state) {
  const auto env = [](const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : fallback;
  };
  std::vector<double> peak;
  for (auto _ : state) {
    peak.clear();
    for (const std::int64_t steps : {4, 40}) {
      RunConfig c = recording_every_step(Shape::million);
      c.model.decoder.width = env("WBAUDIT_BENCH_WIDTH", c.model.decoder.width);
      c.model.decoder.layers = env("WBAUDIT_BENCH_LAYERS", c.model.decoder.layers);
      c.model.decoder.mlp_hidden = c.model.decoder.width * 8 / 3;
      c.steps = steps;
      const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                         ("wbaudit_peak_" + std::to_string(::getpid()) + "_" + std::to_string(steps));
      const pid_t pid = ::fork();
      if (pid == 0) {
        try {
          run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, file);
        } catch (...) {
          ::_exit(1);
        }
        ::_exit(0);
      }
      int status = 0;
      rusage usage{};
      ::wait4(pid, &status, 0, &usage);
      std::filesystem::remove(file);
      peak.push_back(static_cast<double>(usage.ru_maxrss) / 1024.0);
    }
  }
  state.counters["peak_MiB_4_steps"] = peak[0];
  state.counters["peak_MiB_40_steps"] = peak[1];
  state.counters["peak_40_over_4"] = peak[1] / peak[0];
}
BENCHMARK(RecordingPeakMemory)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
