// Forecast-side costs at the scale of the two-layer study (72 cells x 500 recorded steps), each next to a baseline
// measured in the same process: one pass that reads every value of the same table (the least any analysis does).
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "forecast/analytic_grid.hpp"
#include "forecast/crossing.hpp"
#include "forecast/tables.hpp"

namespace {

using namespace wbaudit;
constexpr int kCells = 72;
constexpr int kSteps = 500;

std::vector<std::int64_t> steps() {
  std::vector<std::int64_t> s(kSteps);
  for (int t = 0; t < kSteps; ++t) s[t] = 4 * t;
  return s;
}

// Logistic-like rising trajectories with per-cell onset, so most cells cross 0.5 somewhere.
stats::CellTable trajectories(double shift) {
  stats::CellTable t;
  t.steps = steps();
  t.values.resize(kCells, kSteps);
  for (int c = 0; c < kCells; ++c) {
    t.cells.push_back("run" + std::to_string(c / 2) + "/layer" + std::to_string(c % 2 + 1) + ".weight");
    const double onset = 50.0 * std::exp2(c / 12.0) + shift;
    for (int s = 0; s < kSteps; ++s) t.values(c, s) = 1.0 / (1.0 + std::exp(-(t.steps[s] - onset) / (0.3 * onset)));
  }
  return t;
}

void BM_Baseline_ReadTable(benchmark::State& state) {
  const auto t = trajectories(0);
  for (auto _ : state) benchmark::DoNotOptimize(t.values.sum());
}
BENCHMARK(BM_Baseline_ReadTable);

void BM_CompareCrossings(benchmark::State& state) {
  const auto measured = trajectories(0);
  const auto predicted = trajectories(10);
  for (auto _ : state) benchmark::DoNotOptimize(forecast::compare_crossings(predicted, measured));
}
BENCHMARK(BM_CompareCrossings);

std::shared_ptr<sim::Trace> reference_trace() {
  auto t = std::make_shared<sim::Trace>();
  t->mode = "reference";
  t->recorded_steps = steps();
  std::mt19937_64 rng(7);
  for (int g = 0; g < 2; ++g) {
    sim::GroupTrace gt;
    gt.name = "layer" + std::to_string(g + 1) + ".weight";
    gt.nonzero.assign(kSteps, 0);
    gt.zero_weight.assign(kSteps, 0);
    gt.ratio_histogram.assign(static_cast<std::size_t>(kSteps) * 512, 0);
    auto& p = gt.projected["e4m3"];
    for (int s = 0; s < kSteps; ++s) {
      for (int b = 100; b < 400; ++b) {
        const auto n = static_cast<std::int64_t>(rng() % 64);
        gt.ratio_histogram[static_cast<std::size_t>(s) * 512 + b] = n;
        gt.nonzero[s] += n;
      }
      p.erased.push_back(0);
      p.fraction.push_back(static_cast<double>(s) / kSteps);
    }
    t->groups.push_back(std::move(gt));
  }
  return t;
}

void BM_AnalyticGrid_24M_x_16Scales(benchmark::State& state) {
  const auto ref = reference_trace();
  std::vector<int> ms(24);
  for (int m = 0; m < 24; ++m) ms[m] = m;
  std::vector<double> ss(16);
  for (int i = 0; i < 16; ++i) ss[i] = std::exp2((i - 8) / 4.0);
  for (auto _ : state) benchmark::DoNotOptimize(forecast::analytic_grid(*ref, "layer1.weight", ms, ss));
}
BENCHMARK(BM_AnalyticGrid_24M_x_16Scales)->Unit(benchmark::kMillisecond);

void BM_BuildEvaluationTables(benchmark::State& state) {
  const auto ref = reference_trace();
  const auto outcome = trajectories(0);
  std::vector<forecast::EvaluationCell> cells;
  std::vector<forecast::HistoryRun> history;
  for (int c = 0; c < kCells; ++c) {
    forecast::EvaluationCell cell;
    cell.run_id = "run" + std::to_string(c / 2);
    cell.group = "layer" + std::to_string(c % 2 + 1) + ".weight";
    cell.format = "e4m3";
    cell.template_class = "e4m3/" + cell.group;
    cell.outcome.steps = outcome.steps;
    for (int s = 0; s < kSteps; ++s) cell.outcome.values.push_back(outcome.values(c, s));
    cell.reference = ref;
    cell.man_bits = 3;
    history.push_back({cell.run_id, cell.template_class, cell.outcome});
    cells.push_back(std::move(cell));
  }
  forecast::TableOptions o;
  o.analytic_grid = true;
  for (auto _ : state) benchmark::DoNotOptimize(forecast::build_evaluation_tables(cells, history, o));
}
BENCHMARK(BM_BuildEvaluationTables)->Unit(benchmark::kMillisecond);

}  // namespace
