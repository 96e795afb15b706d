// Forecast-side costs at the scale of the two-layer study (72 cells x 500 recorded steps), each next to a baseline
// measured in the same process: one pass that reads every value of the same table (the least any analysis does).
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "forecast/analytic_grid.hpp"
#include "forecast/crossing.hpp"
#include "forecast/joint_grid.hpp"
#include "forecast/tables.hpp"
#include "sim/run.hpp"

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

// ---- The analytic grid across the exponent range (issue target: 8 formats x 16 lr scales from one decoder
// reference trace in <= 1 s) ----
namespace grid_bench {
using namespace wbaudit;

const sim::Trace& decoder_reference() {
  static const sim::Trace trace = [] {
    sim::RunConfig c;  // examples/decoder_matched.toml's model, 200 steps, 40 log-spaced records
    c.mode = sim::RunMode::reference;
    c.seed = 1;
    c.steps = 200;
    c.model.kind = "decoder";
    c.model.decoder = sim::DecoderConfig{};
    c.model.decoder.vocab = 32;
    c.model.decoder.width = 64;
    c.model.decoder.heads = 4;
    c.model.decoder.layers = 2;
    c.model.decoder.mlp_hidden = 160;
    c.model.decoder.seq_len = 64;
    c.model.decoder.rotary_fraction = 0.5;
    c.model.decoder.parallel_residual = true;
    c.model.decoder.init_std = 0.05;
    c.data.batch = 16;
    c.data.source = "markov";
    c.data.markov_order = 2;
    c.data.markov_branching = 3;
    c.optimizer.kind = sim::OptimizerKind::adam;
    c.optimizer.lr = 3e-3;
    c.record = sim::RecordConfig{sim::RecordKind::log, 10, 40};
    c.project_formats = {"e4m3"};
    return sim::run_cell(c);
  }();
  return trace;
}

const std::vector<std::string> kFormats = {"bf16", "fp16", "e5m2", "e4m3", "e3m2", "e2m3", "e2m1", "int4"};

std::vector<double> scales() {
  std::vector<double> s;
  for (int k = 0; k < 16; ++k) s.push_back(std::exp2(-4.0 + 0.5 * k));  // 2^-4 .. 2^3.5, half of them not powers of 2
  return s;
}

// Baseline: one pass over every (key, count) pair of the trace.
void BM_Baseline_ReadJointPairs(benchmark::State& state) {
  const sim::Trace& t = decoder_reference();
  for (auto _ : state) {
    std::int64_t sum = 0;
    for (const auto& g : t.groups) {
      for (std::size_t i = 0; i < g.joint_keys.size(); ++i)
        sum += g.joint_counts[i] ^ static_cast<std::int64_t>(g.joint_keys[i]);
    }
    benchmark::DoNotOptimize(sum);
  }
}
BENCHMARK(BM_Baseline_ReadJointPairs)->Unit(benchmark::kMillisecond);

void BM_FormatGrid_8Formats16Scales_Decoder(benchmark::State& state) {
  const sim::Trace& t = decoder_reference();
  const auto s = scales();
  std::int64_t pairs = 0;
  for (const auto& g : t.groups) pairs += static_cast<std::int64_t>(g.joint_keys.size());
  for (auto _ : state) {
    for (const auto& g : t.groups) benchmark::DoNotOptimize(forecast::format_grid(t, g.name, kFormats, s));
  }
  state.counters["groups"] = static_cast<double>(t.groups.size());
  state.counters["steps"] = static_cast<double>(t.recorded_steps.size());
  state.counters["pairs"] = static_cast<double>(pairs);
}
BENCHMARK(BM_FormatGrid_8Formats16Scales_Decoder)->Unit(benchmark::kMillisecond);

}  // namespace grid_bench
