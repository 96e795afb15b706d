// Decoder training step (fp32 loss_and_gradient) throughput: tokens/s and achieved GFLOP/s (DecoderModel::step_flops:
// the products plus attention), for the study's default shape and a larger one. "threads:1" runs on Kokkos::Serial,
// "threads:N" on the OpenMP instance (N = --kokkos-threads); OpenBLAS is single-threaded inside the model either way.
// bench/decoder_torch_bench.py runs this binary with --benchmark_format=json and compares it with PyTorch CPU.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <random>

#include "sim/model/decoder.hpp"

namespace {

using namespace wbaudit::sim;

struct Case {
  DecoderShape shape;
  int batch;
};

Case study_shape() {  // the study's default: vocab 32, width 64, heads 4, layers 2, mlp_hidden 160, seq 64, batch 16
  DecoderShape s;
  s.vocab = 32;
  s.width = 64;
  s.heads = 4;
  s.layers = 2;
  s.mlp_hidden = 160;
  s.seq_len = 64;
  return {s, 16};
}

Case large_shape() {  // width 256, heads 4, layers 4, mlp_hidden 688, vocab 256, seq 128, batch 16
  DecoderShape s;
  s.vocab = 256;
  s.width = 256;
  s.heads = 4;
  s.layers = 4;
  s.mlp_hidden = 688;
  s.seq_len = 128;
  return {s, 16};
}

template <class Space>
void step(benchmark::State& state, const Case& c) {
  const Space space;
  DecoderModel<Space, float> model(c.shape, c.batch);
  model.initialize(space, 1, 0.02);
  Kokkos::View<std::int32_t*, typename Space::memory_space> tokens("tokens",
                                                                   std::size_t(c.batch) * (c.shape.seq_len + 1));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pick(0, c.shape.vocab - 1);
  for (std::size_t i = 0; i < tokens.extent(0); ++i) {
    tokens(i) = pick(rng);
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.loss_and_gradient(space, tokens));
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["threads"] = static_cast<double>(space.concurrency());
  state.counters["tokens_per_s"] = benchmark::Counter(steps * c.batch * c.shape.seq_len, benchmark::Counter::kIsRate);
  state.counters["GFLOP_per_s"] = benchmark::Counter(steps * model.step_flops() * 1e-9, benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(model.parameter_count());
  state.counters["memory_MiB"] =
      (model.workspace_bytes() + 2.0 * sizeof(float) * model.parameter_count()) / (1024.0 * 1024.0);
}

void study_serial(benchmark::State& s) {
  step<Kokkos::Serial>(s, study_shape());
}
void large_serial(benchmark::State& s) {
  step<Kokkos::Serial>(s, large_shape());
}
BENCHMARK(study_serial)->Name("DecoderStep/study/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(large_serial)->Name("DecoderStep/large/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime();
#if defined(KOKKOS_ENABLE_OPENMP)
void study_openmp(benchmark::State& s) {
  step<Kokkos::OpenMP>(s, study_shape());
}
void large_openmp(benchmark::State& s) {
  step<Kokkos::OpenMP>(s, large_shape());
}
BENCHMARK(study_openmp)->Name("DecoderStep/study/threads:N")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(large_openmp)->Name("DecoderStep/large/threads:N")->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace
