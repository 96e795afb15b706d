// Bootstrap of rmse_macro at the size of the 72-cell two-layer study: 72 cells x 500 recorded steps, 10,000
// resamples of the cells. Target: <= 1 s on 2 threads (run with --kokkos-threads=1 and --kokkos-threads=2).
// Baseline in the same process: one evaluate_metrics over the whole table; the counter `x_baseline` is the bootstrap
// time in units of that baseline.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>

#include "stats/bootstrap_tables.hpp"
#include "stats/metrics.hpp"

namespace {

using namespace wbaudit::stats;

constexpr int kCells = 72;
constexpr int kSteps = 500;
constexpr int kResamples = 10000;

struct Tables {
  CellTable forecast, outcome;
};

Tables const& tables() {
  static Tables const t = [] {
    Tables r;
    r.outcome.values.resize(kCells, kSteps);
    r.forecast.values.resize(kCells, kSteps);
    for (int c = 0; c < kCells; ++c) {
      std::string label = "cell";
      label += std::to_string(c);
      r.outcome.cells.push_back(label);
      r.forecast.cells.push_back(label);
      double const rate = 1e-3 * (1 + c % 9);
      for (int t = 0; t < kSteps; ++t) {
        double const y = 1.0 - std::exp(-rate * (t + 1));
        r.outcome.values(c, t) = y;
        r.forecast.values(c, t) = y + 0.02 * std::sin(0.1 * t + c) + 0.001 * (c % 5);
      }
    }
    for (int t = 0; t < kSteps; ++t) {
      r.outcome.steps.push_back(std::int64_t{10} * (t + 1));
      r.forecast.steps.push_back(std::int64_t{10} * (t + 1));
    }
    return r;
  }();
  return t;
}

double baseline_seconds() {
  static double const seconds = [] {
    auto const& t = tables();
    int const reps = 200;
    auto const start = std::chrono::steady_clock::now();
    double sink = 0;
    for (int i = 0; i < reps; ++i) {
      sink += evaluate_metrics(t.forecast, t.outcome).rmse_macro;
    }
    benchmark::DoNotOptimize(sink);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
  }();
  return seconds;
}

void BM_EvaluateMetricsBaseline(benchmark::State& state) {
  auto const& t = tables();
  for (auto _ : state) {
    benchmark::DoNotOptimize(evaluate_metrics(t.forecast, t.outcome).rmse_macro);
  }
}

template <class ExecSpace>
void BM_BootstrapRmseMacro(benchmark::State& state) {
  auto const& t = tables();
  BootstrapSpec spec;
  spec.seed = 42;
  spec.resamples = kResamples;
  spec.method = state.range(0) == 0 ? IntervalMethod::percentile : IntervalMethod::bca;
  ExecSpace const space;
  double const baseline = baseline_seconds();
  auto const start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    auto const ci = bootstrap_metric(space, TableMetric::rmse_macro, t.forecast, t.outcome, spec);
    benchmark::DoNotOptimize(ci.lower);
  }
  double const per_iteration =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / double(state.iterations());
  state.counters["threads"] = double(space.concurrency());
  state.counters["x_baseline"] = per_iteration / baseline;
  state.SetLabel(spec.method == IntervalMethod::bca ? "bca" : "percentile");
}

}  // namespace

BENCHMARK(BM_EvaluateMetricsBaseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_BootstrapRmseMacro, Kokkos::Serial)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_BootstrapRmseMacro, Kokkos::DefaultHostExecutionSpace)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
