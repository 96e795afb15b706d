// The decoder's speed, every figure a ratio against a baseline measured in the same binary (docs/performance.md):
//  - DecoderStep/<shape>/threads:{1,N}: one fp32 training step (loss_and_gradient): tokens/s and achieved GFLOP/s
//    (DecoderModel::step_flops: the products plus attention). "threads:1" runs on Kokkos::Serial, "threads:N" on the
//    OpenMP instance (N = --kokkos-threads); each matrix product is split into row blocks over the threads.
//  - DecoderTrainStep/<shape>/threads:{1,N}: the same step followed by Adam (sim/optim, lr 1e-3) and the fp32
//    write-back w += u on every tensor: what a training step of PyTorch with torch.optim.Adam does.
//  - Sgemm/<m>x<n>x<k>/threads:1: OpenBLAS's sgemm on one thread, at the shape of the model's largest product
//    (the MLP's [batch * seq, width] x [width, mlp_hidden]): the baseline of "step GFLOP/s >= 35% of sgemm". The
//    decoder does not use OpenBLAS (its products are wbaudit's own GEMM, sim/model/detail/gemm.hpp); OpenBLAS is here
//    as the yardstick. Which kernel it runs is its own choice per CPU (OPENBLAS_VERBOSE=2 prints it;
//    OPENBLAS_CORETYPE=SkylakeX / Haswell overrides it where its CPU table is older than the CPU).
//  - Gemm/<product>/<path>: wbaudit's GEMM forced to each path this CPU supports (avx512, avx2, portable) against
//    OpenBLAS's sgemm on the decoder's product shapes, one call on one thread each, interleaved (thread CPU time):
//    both rates and the median of their ratio.
//  - DecoderRatios/1M: rounds that interleave the sgemm above, wbaudit's GEMM on the same product, the step on one
//    thread and on N; medians of the one-thread ratios (in CPU time of the thread) and the N-thread speedup in wall
//    time, fastest step against fastest step over all rounds. WBAUDIT_GEMM_ISA=avx2|portable runs the decoder on
//    another path (the default: the best this CPU has).
// Whole engine steps per mode (target write-back, reference recording vs plain fp32) are
// bench/decoder_engine_bench.cpp. bench/decoder_torch_bench.py runs DecoderStep next to PyTorch CPU on the same
// architecture, batch and threads.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <time.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sim/model/decoder.hpp"
#include "sim/model/detail/gemm.hpp"
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

// range(3): rows per call (0: one call for all m rows).
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

// --- wbaudit's GEMM per path against OpenBLAS's sgemm on the decoder's products ---------------------------------

using wbaudit::sim::detail::GemmIsa;
using wbaudit::sim::detail::Op;

struct Product {
  const char* name;
  Op op_a, op_b;
  int m, n, k;
};

// The 1M shape's products (rows T = 16 x 128 = 2048, width 192, mlp_hidden 512) and its attention's (seq 128,
// head_dim 48), each as the decoder issues it (decoder.cpp): forward y = x W^T, input gradients dY W, weight
// gradients dY^T X; the step's other products are these shapes with 576 (qkv), 256 (vocab) or 192 in place of 512.
constexpr Product kProducts[] = {
    {"mlp_up_forward", Op::none, Op::transpose, 2048, 512, 192},
    {"mlp_down_forward", Op::none, Op::transpose, 2048, 192, 512},
    {"mlp_input_gradient", Op::none, Op::none, 2048, 192, 512},
    {"mlp_weight_gradient", Op::transpose, Op::none, 512, 192, 2048},
    {"attention_scores", Op::none, Op::transpose, 128, 128, 48},
    {"attention_values", Op::none, Op::none, 128, 48, 128},
    {"attention_key_gradient", Op::transpose, Op::none, 128, 48, 128},
};
// The baseline of the speed target, as Sgemm/2048x512x192 above.
constexpr Product kSgemmBaseline = {"sgemm_baseline", Op::none, Op::none, 2048, 512, 192};

double product_flops(const Product& p) {
  return 2.0 * p.m * p.n * p.k;
}

// Operands stored as the ops read them (leading dimension = stored row length), values in [-1, 1).
struct ProductData {
  std::vector<float> a, b, c;
  int lda, ldb;
  explicit ProductData(const Product& p) : c(std::size_t(p.m) * p.n, 0.0f) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    a.resize(std::size_t(p.m) * p.k);
    b.resize(std::size_t(p.k) * p.n);
    for (float& x : a) x = value(rng);
    for (float& x : b) x = value(rng);
    lda = p.op_a == Op::none ? p.k : p.m;
    ldb = p.op_b == Op::none ? p.n : p.k;
  }
};

void run_wbaudit(const Product& p, ProductData& d) {
  wbaudit::sim::detail::gemm(p.op_a, p.op_b, p.m, p.n, p.k, 1.0f, d.a.data(), d.lda, d.b.data(), d.ldb, 0.0f,
                             d.c.data(), p.n);
}

void run_openblas(const Product& p, ProductData& d) {
  const auto op = [](Op o) { return o == Op::none ? CblasNoTrans : CblasTrans; };
  cblas_sgemm(CblasRowMajor, op(p.op_a), op(p.op_b), p.m, p.n, p.k, 1.0f, d.a.data(), d.lda, d.b.data(), d.ldb, 0.0f,
              d.c.data(), p.n);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Best (smallest) thread CPU seconds of `reps` calls of f.
template <class F>
double best_cpu_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_cpu_seconds();
    f();
    best = std::min(best, thread_cpu_seconds() - t0);
  }
  return best;
}

// Each iteration times OpenBLAS's sgemm and then wbaudit's GEMM on `isa` on the same product (best of a few calls
// each, thread CPU time), so that load from other processes hits both alike; the ratio is the median over iterations.
void product_bench(benchmark::State& state, const Product& p, GemmIsa isa) {
  openblas_set_num_threads(1);
  ProductData d(p);
  wbaudit::sim::detail::force_gemm_isa(isa);
  const int reps = std::max(2, static_cast<int>(2e7 / product_flops(p)));
  std::vector<double> ours, theirs, ratio;
  for (auto _ : state) {
    const double s = best_cpu_seconds(reps, [&] { run_openblas(p, d); });
    const double g = best_cpu_seconds(reps, [&] { run_wbaudit(p, d); });
    theirs.push_back(product_flops(p) / s * 1e-9);
    ours.push_back(product_flops(p) / g * 1e-9);
    ratio.push_back(s / g);
  }
  wbaudit::sim::detail::reset_gemm_isa();
  state.counters["gemm_GFLOP_per_s"] = median(ours);
  state.counters["sgemm_GFLOP_per_s"] = median(theirs);
  state.counters["gemm_over_sgemm"] = median(ratio);
}

const int kRegisteredProducts = [] {
  for (const Product& p : kProducts) {
    for (const GemmIsa isa : {GemmIsa::avx512, GemmIsa::avx2, GemmIsa::portable}) {
      if (wbaudit::sim::detail::gemm_isa_supported(isa)) {
        const std::string name = std::string("Gemm/") + p.name + "/" + wbaudit::sim::detail::gemm_isa_name(isa);
        benchmark::RegisterBenchmark(name.c_str(), product_bench, p, isa)
            ->Iterations(isa == GemmIsa::portable ? 2 : 15)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  return 0;
}();

// One fp32 step of the 1M shape on a space, ready to repeat.
template <class Space>
struct StepFixture {
  Space space;
  DecoderModel<Space, float> model;
  Kokkos::View<std::int32_t*, typename Space::memory_space> tokens;
  explicit StepFixture(const Case& c)
      : model(c.shape, c.batch), tokens("tokens", std::size_t(c.batch) * (c.shape.seq_len + 1)) {
    model.initialize(space, 1, 0.02);
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> pick(0, c.shape.vocab - 1);
    for (std::size_t i = 0; i < tokens.extent(0); ++i) tokens(i) = pick(rng);
    model.loss_and_gradient(space, tokens);  // first touch of the buffers
  }
  void step() { benchmark::DoNotOptimize(model.loss_and_gradient(space, tokens)); }
};

// Seconds per repetition of f (best of `reps`): {thread CPU time, wall time}.
template <class F>
std::pair<double, double> best_of(int reps, F&& f) {
  double cpu = 1e30, wall = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double c0 = thread_cpu_seconds(), w0 = wall_seconds();
    f();
    cpu = std::min(cpu, thread_cpu_seconds() - c0);
    wall = std::min(wall, wall_seconds() - w0);
  }
  return {cpu, wall};
}

void decoder_ratios(benchmark::State& state) {
  openblas_set_num_threads(1);
  const Case c = million_shape();
  const Product& mlp = kSgemmBaseline;
  ProductData d(mlp);
  StepFixture<Kokkos::Serial> serial(c);
#if defined(KOKKOS_ENABLE_OPENMP)
  StepFixture<Kokkos::OpenMP> threaded(c);
#else
  StepFixture<Kokkos::Serial>& threaded = serial;
#endif
  const double step_flops = serial.model.step_flops();
  std::vector<double> sgemm_rate, gemm_rate, step_rate, step_over_sgemm, gemm_over_sgemm;
  double one_wall = 1e30, many_wall = 1e30;
  for (auto _ : state) {  // one round: every side once, so that load from other processes hits all of them
    const double sgemm = best_of(8, [&] { run_openblas(mlp, d); }).first;
    const double gemm = best_of(8, [&] { run_wbaudit(mlp, d); }).first;
    const auto one = best_of(2, [&] { serial.step(); });
    const double many = best_of(2, [&] { threaded.step(); }).second;
    sgemm_rate.push_back(product_flops(mlp) / sgemm * 1e-9);
    gemm_rate.push_back(product_flops(mlp) / gemm * 1e-9);
    step_rate.push_back(step_flops / one.first * 1e-9);
    step_over_sgemm.push_back(step_rate.back() / sgemm_rate.back());
    gemm_over_sgemm.push_back(gemm_rate.back() / sgemm_rate.back());
    one_wall = std::min(one_wall, one.second);
    many_wall = std::min(many_wall, many);
  }
  state.counters["sgemm_GFLOP_per_s"] = median(sgemm_rate);
  state.counters["gemm_GFLOP_per_s"] = median(gemm_rate);
  state.counters["step_GFLOP_per_s_1thread"] = median(step_rate);
  state.counters["step_over_sgemm"] = median(step_over_sgemm);
  state.counters["gemm_over_sgemm"] = median(gemm_over_sgemm);
  // Wall time only grows when other processes take a core (and N threads wait at every barrier for the one that lost
  // it), so the speedup compares the fastest step of all rounds on each side.
  state.counters["speedup_N_over_1"] = one_wall / many_wall;
  state.counters["threads"] = static_cast<double>(threaded.space.concurrency());
  state.SetLabel(std::string("gemm path ") + wbaudit::sim::gemm_isa_path());
}
BENCHMARK(decoder_ratios)->Name("DecoderRatios/1M")->Unit(benchmark::kMillisecond)->Iterations(10);

}  // namespace
