// The decoder's speed, every figure a ratio against a baseline measured in the same binary (docs/performance.md):
//  - DecoderStep/<shape>/threads:{1,N}: one fp32 training step (loss_and_gradient): tokens/s and achieved GFLOP/s
//    (DecoderModel::step_flops: the products plus attention). "threads:1" runs on Kokkos::Serial, "threads:N" on the
//    OpenMP instance (N = --kokkos-threads); OpenBLAS is single-threaded inside the model either way.
//  - DecoderTrainStep/<shape>/threads:{1,N}: the same step followed by Adam (sim/optim, lr 1e-3) and the fp32
//    write-back w += u on every tensor: what a training step of PyTorch with torch.optim.Adam does.
//  - Sgemm/<m>x<n>x<k>/threads:1: the same OpenBLAS's sgemm on one thread, at the shape of the model's largest product
//    (the MLP's [batch * seq, width] x [width, mlp_hidden]): the baseline of "step GFLOP/s >= 35% of sgemm".
// Whole engine steps per mode (target write-back, reference recording vs plain fp32) are
// bench/decoder_engine_bench.cpp. bench/decoder_torch_bench.py runs DecoderStep next to PyTorch CPU on the same
// architecture, batch and threads.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "sim/model/decoder.hpp"
#include "sim/optim/optimizer.hpp"

namespace {

using namespace wbaudit::sim;

struct Case {
  DecoderShape shape;
  int batch;
};

Case study_shape() {  // the studies' default: vocab 32, width 64, heads 4, layers 2, mlp_hidden 160, seq 64, batch 16
  DecoderShape s;
  s.vocab = 32;
  s.width = 64;
  s.heads = 4;
  s.layers = 2;
  s.mlp_hidden = 160;
  s.seq_len = 64;
  return {s, 16};
}

Case million_shape() {  // about 1M parameters: vocab 256, width 192, heads 4, layers 2, mlp_hidden 512, seq 128
  DecoderShape s;
  s.vocab = 256;
  s.width = 192;
  s.heads = 4;
  s.layers = 2;
  s.mlp_hidden = 512;
  s.seq_len = 128;
  return {s, 16};
}

// with_optimizer: after loss_and_gradient, Adam's proposal u for every tensor and the fp32 write-back w += u.
template <class Space>
void step(benchmark::State& state, const Case& c, bool with_optimizer = false) {
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
  std::vector<std::int64_t> sizes;
  for (int t = 0; t < model.tensor_count(); ++t) {
    sizes.push_back(model.tensor_size(t));
  }
  Optimizer<Space> adam(OptimizerConfig{}, sizes);
  std::vector<Kokkos::View<float*, typename Space::memory_space>> proposals;
  for (const std::int64_t n : sizes) {
    proposals.emplace_back("proposal", n);
  }
  // One untimed step first (bench/decoder_torch_bench.py warms torch up too): the first touch of the activation and
  // gradient buffers (allocated uninitialized) is page faults, not the step.
  model.loss_and_gradient(space, tokens);
  std::int64_t t = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.loss_and_gradient(space, tokens));
    if (with_optimizer) {
      for (int i = 0; i < model.tensor_count(); ++i) {
        const auto w = model.parameter(i);
        const auto u = proposals[i];
        adam.propose(space, i, t, 1e-3f, model.gradient(i), w, u);
        Kokkos::parallel_for(
            "wbaudit::bench::decoder::write_back", Kokkos::RangePolicy<Space>(space, 0, w.extent(0)),
            KOKKOS_LAMBDA(const std::size_t j) { w(j) += u(j); });
      }
      space.fence();
      ++t;
    }
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["threads"] = static_cast<double>(space.concurrency());
  state.counters["tokens_per_s"] = benchmark::Counter(steps * c.batch * c.shape.seq_len, benchmark::Counter::kIsRate);
  state.counters["GFLOP_per_s"] = benchmark::Counter(steps * model.step_flops() * 1e-9, benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(model.parameter_count());
  state.counters["memory_MiB"] =
      (model.workspace_bytes() + 2.0 * sizeof(float) * model.parameter_count()) / (1024.0 * 1024.0);
}

// range(3): rows per call (the decoder splits a product into row blocks; 0: one call for all m rows).
void sgemm(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1)),
            k = static_cast<int>(state.range(2));
  const int block = state.range(3) > 0 ? static_cast<int>(state.range(3)) : m;
  openblas_set_num_threads(1);
  std::vector<float> a(std::size_t(m) * k, 0.5f), b(std::size_t(k) * n, 0.25f), c(std::size_t(m) * n, 0.0f);
  for (auto _ : state) {
    for (int row = 0; row < m; row += block) {
      const int rows = std::min(block, m - row);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, n, k, 1.0f, a.data() + std::size_t(row) * k, k,
                  b.data(), n, 0.0f, c.data() + std::size_t(row) * n, n);
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * m * n * k * 1e-9, benchmark::Counter::kIsRate);
}

void study_serial(benchmark::State& s) {
  step<Kokkos::Serial>(s, study_shape());
}
void million_serial(benchmark::State& s) {
  step<Kokkos::Serial>(s, million_shape());
}
void million_train_serial(benchmark::State& s) {
  step<Kokkos::Serial>(s, million_shape(), true);
}
BENCHMARK(study_serial)->Name("DecoderStep/study/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(million_serial)->Name("DecoderStep/1M/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(million_train_serial)->Name("DecoderTrainStep/1M/threads:1")->Unit(benchmark::kMillisecond)->UseRealTime();
#if defined(KOKKOS_ENABLE_OPENMP)
void study_openmp(benchmark::State& s) {
  step<Kokkos::OpenMP>(s, study_shape());
}
void million_openmp(benchmark::State& s) {
  step<Kokkos::OpenMP>(s, million_shape());
}
void million_train_openmp(benchmark::State& s) {
  step<Kokkos::OpenMP>(s, million_shape(), true);
}
BENCHMARK(study_openmp)->Name("DecoderStep/study/threads:N")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(million_openmp)->Name("DecoderStep/1M/threads:N")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(million_train_openmp)->Name("DecoderTrainStep/1M/threads:N")->Unit(benchmark::kMillisecond)->UseRealTime();
#endif
// The MLP's up projection of the 1M shape: [16 * 128, 192] x [192, 512].
BENCHMARK(sgemm)->Name("Sgemm/2048x512x192/threads:1")->Args({2048, 512, 192, 0})->Unit(benchmark::kMillisecond);
// The same product split into row blocks, one call each: 512 rows as the decoder issues it
// (detail::gemm_block_rows(2048)), and the 64 rows it used before.
BENCHMARK(sgemm)
    ->Name("Sgemm/2048x512x192/blocks_of_512/threads:1")
    ->Args({2048, 512, 192, 512})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(sgemm)
    ->Name("Sgemm/2048x512x192/blocks_of_64/threads:1")
    ->Args({2048, 512, 192, 64})
    ->Unit(benchmark::kMillisecond);

}  // namespace
