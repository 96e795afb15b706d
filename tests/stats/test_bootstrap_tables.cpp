#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "stats/bootstrap_tables.hpp"
#include "stats/error.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

namespace {
BootstrapSpec percentile_spec(double confidence) {
  BootstrapSpec spec;
  spec.seed = 31;
  spec.resamples = 4000;
  spec.confidence = confidence;
  spec.method = IntervalMethod::percentile;
  return spec;
}
}  // namespace

// 4 cells with rmse_cell (1, 1, 3, 3). Resampling the 4 cells independently, rmse_macro of a resample takes values
// 1, 1.5, 2, 2.5, 3 with probabilities 1/16, 4/16, 6/16, 4/16, 1/16: the 10% and 90% quantiles are 1.5 and 2.5.
// Resampling the 2 runs (c0, c1) and (c2, c3) as units, it takes 1, 2, 3 with probabilities 1/4, 1/2, 1/4: the
// quantiles are 1 and 3. The estimate is 2 either way.
TEST(BootstrapTables, UnitsOwningSeveralCellsAreResampledTogether) {
  auto const y = make_table({{0, 0}, {0, 0}, {0, 0}, {0, 0}});
  auto const f = make_table({{1, -1}, {1, 1}, {3, -3}, {-3, 3}});
  auto const spec = percentile_spec(0.8);
  auto const by_cell = bootstrap_metric(TableMetric::rmse_macro, f, y, spec);
  EXPECT_EQ(by_cell.estimate, 2.0);
  EXPECT_EQ(by_cell.lower, 1.5);
  EXPECT_EQ(by_cell.upper, 2.5);
  EXPECT_EQ(by_cell.n_units, 4);
  std::vector<std::string> const runs = {"run1", "run1", "run2", "run2"};
  auto const by_run = bootstrap_metric(TableMetric::rmse_macro, f, y, spec, runs);
  EXPECT_EQ(by_run.estimate, 2.0);
  EXPECT_EQ(by_run.lower, 1.0);
  EXPECT_EQ(by_run.upper, 3.0);
  EXPECT_EQ(by_run.n_units, 2);
}

// Estimates equal the hand values of the metrics test table; pooled differs from macro.
TEST(BootstrapTables, EstimatesMatchTheDefinitions) {
  auto const f = make_table({{1, 3}, {2, 2}, {0, 0}});
  auto const y = make_table({{0, 1}, {2, 5}, {0, 1}});
  // errors [[1, 2], [0, -3], [0, -1]]: mse (2.5, 4.5, 0.5), bias (1.5, -1.5, -0.5), mae (1.5, 1.5, 0.5)
  auto const spec = percentile_spec(0.9);
  EXPECT_DOUBLE_EQ(bootstrap_metric(TableMetric::rmse_macro, f, y, spec).estimate,
                   (std::sqrt(2.5) + std::sqrt(4.5) + std::sqrt(0.5)) / 3);
  EXPECT_DOUBLE_EQ(bootstrap_metric(TableMetric::rmse_pooled, f, y, spec).estimate, std::sqrt(7.5 / 3));
  EXPECT_DOUBLE_EQ(bootstrap_metric(TableMetric::bias, f, y, spec).estimate, -0.5 / 3);
  EXPECT_DOUBLE_EQ(bootstrap_metric(TableMetric::mae, f, y, spec).estimate, 3.5 / 3);
  auto const b = make_table({{0, 0}, {0, 0}, {0, 0}});  // baseline errors [[0, -1], [-2, -5], [0, -1]]
  // sum MSE_P = 7.5, sum MSE_B = 0.5 + 14.5 + 0.5 = 15.5
  EXPECT_DOUBLE_EQ(bootstrap_skill(f, b, y, spec).estimate, 1 - 7.5 / 15.5);
}

TEST(BootstrapTables, MovingBlocksOverStepsKeepEveryCell) {
  int const n_steps = 60;
  std::vector<std::vector<double>> yr(3, std::vector<double>(n_steps)), fr = yr;
  for (int t = 0; t < n_steps; ++t) {
    for (int c = 0; c < 3; ++c) {
      yr[std::size_t(c)][std::size_t(t)] = std::sin(0.1 * t + c);
      fr[std::size_t(c)][std::size_t(t)] = yr[std::size_t(c)][std::size_t(t)] + 0.1 * (c + 1);  // constant errors
    }
  }
  auto spec = percentile_spec(0.95);
  spec.resampling = Resampling::moving_block;
  spec.block_length = 5;
  // constant errors per cell: every step resample gives the same rmse_macro (0.1 + 0.2 + 0.3) / 3 = 0.2
  auto const ci = bootstrap_metric(TableMetric::rmse_macro, make_table(fr), make_table(yr), spec);
  EXPECT_EQ(ci.n_units, n_steps);
  EXPECT_EQ(ci.block_length, 5);
  EXPECT_NEAR(ci.estimate, 0.2, 1e-15);
  EXPECT_NEAR(ci.lower, 0.2, 1e-15);
  EXPECT_NEAR(ci.upper, 0.2, 1e-15);
}

TEST(BootstrapTables, DecompositionSharesOfATimeDrivenTable) {
  Eigen::MatrixXd v(8, 30);
  for (Eigen::Index j = 0; j < v.cols(); ++j) {
    v.col(j).setConstant(double(j % 7));
  }
  CellTable t = make_table({std::vector<double>(30, 0.0)});
  t.values = v;
  t.cells.clear();
  for (int i = 0; i < 8; ++i) {
    t.cells.push_back(wbaudit::stats::testing::cell_label("cell", std::size_t(i)));
  }
  auto const d = bootstrap_decomposition(t, percentile_spec(0.95));
  EXPECT_NEAR(d.share_time.lower, 1.0, 1e-12);
  EXPECT_NEAR(d.share_time.upper, 1.0, 1e-12);
  EXPECT_NEAR(d.share_cell.upper, 0.0, 1e-12);
  EXPECT_EQ(d.share_time.seed, 31u);
}

TEST(BootstrapTables, IdenticalOnSerialAndOpenMP) {
  Eigen::MatrixXd y(72, 50), f(72, 50);
  for (int i = 0; i < 72; ++i) {
    for (int j = 0; j < 50; ++j) {
      y(i, j) = std::sin(0.37 * i * j + 0.1);
      f(i, j) = y(i, j) + 0.01 * std::cos(1.3 * i + 0.7 * j) + 1e-3 * i;
    }
  }
  CellTable ty = make_table({std::vector<double>(50, 0.0)}), tf = ty;
  ty.values = y;
  tf.values = f;
  for (int i = 1; i < 72; ++i) {
    ty.cells.push_back(wbaudit::stats::testing::cell_label("c", std::size_t(i)));
    tf.cells.push_back(wbaudit::stats::testing::cell_label("c", std::size_t(i)));
  }
  BootstrapSpec spec;
  spec.seed = 5;
  spec.resamples = 1000;
  for (auto metric : {TableMetric::rmse_macro, TableMetric::rmse_pooled, TableMetric::bias}) {
    auto const a = bootstrap_metric(Kokkos::Serial{}, metric, tf, ty, spec);
    auto const b = bootstrap_metric(Kokkos::OpenMP{}, metric, tf, ty, spec);
    EXPECT_EQ(a.lower, b.lower);
    EXPECT_EQ(a.upper, b.upper);
    EXPECT_EQ(a.estimate, b.estimate);
  }
  auto const da = bootstrap_decomposition(Kokkos::Serial{}, ty, spec);
  auto const db = bootstrap_decomposition(Kokkos::OpenMP{}, ty, spec);
  EXPECT_EQ(da.share_cell.lower, db.share_cell.lower);
  EXPECT_EQ(da.share_residual.upper, db.share_residual.upper);
}

TEST(BootstrapTables, BadInput) {
  auto const y = make_table({{0, 0}, {0, 0}, {0, 0}});
  auto f = make_table({{1, 1}, {2, 2}, {3, 3}});
  auto const spec = percentile_spec(0.9);
  EXPECT_THROW(bootstrap_metric(TableMetric::rmse_macro, f, y, spec, std::vector<std::string>{"a", "b"}),
               StatsError);  // unit labels do not match the cells
  EXPECT_THROW(bootstrap_metric(TableMetric::rmse_macro, f, y, spec, std::vector<std::string>{"a", "a", "a"}),
               StatsError);  // a single unit cannot be resampled
  f.values(1, 1) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(bootstrap_metric(TableMetric::rmse_macro, f, y, spec), StatsError);
  auto const ci = bootstrap_metric(TableMetric::rmse_macro, f, y, spec, {}, MissingPolicy::drop_incomplete_cells);
  EXPECT_EQ(ci.estimate, 2.0);  // cells c0 and c2 remain: (1 + 3) / 2
  EXPECT_EQ(ci.n_units, 2);
  EXPECT_THROW(table_metric_from_name("rmse"), StatsError);
}

TEST(BootstrapTables, DirectionalIntervals) {
  // 12 cells with cell-specific offsets of both signs on a shared trend; predictor = outcome + noise common to all
  // cells, so on every resample of cells the anomalies agree: rate 1, correlations 1.
  std::vector<std::vector<double>> yr, pr;
  for (int c = 0; c < 12; ++c) {
    std::vector<double> y, p;
    double const offset = 0.05 * (c % 2 == 0 ? 1 : -1) * (1 + c);
    for (int t = 0; t < 40; ++t) {
      y.push_back(1.0 - std::exp(-0.1 * t) + offset);
      p.push_back(y.back() + 0.2 * std::sin(1.7 * t));
    }
    yr.push_back(y);
    pr.push_back(p);
  }
  auto const spec = percentile_spec(0.95);
  auto const d = bootstrap_directional(make_table(pr), make_table(yr), spec);
  EXPECT_EQ(d.sign_agreement_rate.estimate, 1.0);
  EXPECT_EQ(d.sign_agreement_rate.lower, 1.0);
  EXPECT_NEAR(d.anomaly_correlation.lower, 1.0, 1e-9);
  EXPECT_NEAR(d.cell_anomaly_correlation.upper, 1.0, 1e-9);
  // Two cells: half the resamples draw one cell twice, leaving no anomaly at all: an error, not a number.
  auto const y2 = make_table({{0, 1}, {2, 3}});
  auto const p2 = make_table({{0, 2}, {3, 3}});
  EXPECT_THROW(bootstrap_directional(p2, y2, spec), StatsError);
}

// A table with no time effect at all: 12 cells y(c,t) = b_c + w_c r(t) whose weights w_c sum to zero, so the
// across-cell mean is constant in t and share_time ~ 1e-34 on the full sample, while almost every resample has a
// time effect. BCa is undefined for share_time (every replicate on one side of the estimate) but not for the
// other two shares, which must keep their intervals; each is checked against a plain recomputation of the share on
// the same resamples.
TEST(BootstrapTables, EachDecompositionShareStandsOrFailsAlone) {
  Eigen::MatrixXd v(12, 25);
  double sum_w = 0;
  for (Eigen::Index c = 0; c < 12; ++c) {
    double const w = c < 11 ? std::sqrt(2.0 + double(c)) : -sum_w;
    sum_w += w;
    for (Eigen::Index t = 0; t < 25; ++t) v(c, t) = 0.1 * double(c) + w * std::sin(0.9 * double(t) + 0.3);
  }
  CellTable table = make_table({std::vector<double>(25, 0.0)});
  table.values = v;
  table.cells.clear();
  for (std::size_t c = 0; c < 12; ++c) table.cells.push_back(wbaudit::stats::testing::cell_label("c", c));
  BootstrapSpec spec;
  spec.seed = 20261202;
  spec.resamples = 2000;
  spec.method = IntervalMethod::bca;

  EXPECT_THROW(bootstrap_decomposition(table, spec), StatsError);  // all three together: one failure loses all
  auto const shares = bootstrap_decomposition_shares(table, spec);
  ASSERT_FALSE(shares.shares[0].has_value());
  EXPECT_NE(shares.reasons[0].find("BCa undefined"), std::string::npos) << shares.reasons[0];
  for (int which : {1, 2}) {
    ASSERT_TRUE(shares.shares[std::size_t(which)].has_value()) << shares.reasons[std::size_t(which)];
    EXPECT_TRUE(shares.reasons[std::size_t(which)].empty());
    // Plain share of the resampled rows: SS_cell or SS_residual over SS_total, written out here.
    auto plain = [&](std::span<std::int64_t const> rows) {
      auto const n = Eigen::Index(rows.size());
      Eigen::MatrixXd s(n, v.cols());
      for (Eigen::Index i = 0; i < n; ++i) s.row(i) = v.row(rows[std::size_t(i)]);
      double const mu = s.mean();
      double ss_total = 0, ss_cell = 0, ss_res = 0;
      for (Eigen::Index i = 0; i < n; ++i) {
        double const b = s.row(i).mean() - mu;
        ss_cell += double(s.cols()) * b * b;
        for (Eigen::Index t = 0; t < s.cols(); ++t) {
          double const a = s.col(t).mean() - mu;
          double const e = s(i, t) - mu - a - b;
          ss_total += (s(i, t) - mu) * (s(i, t) - mu);
          ss_res += e * e;
        }
      }
      return (which == 1 ? ss_cell : ss_res) / ss_total;
    };
    auto const ref = bootstrap(Kokkos::DefaultHostExecutionSpace{}, 12, plain, spec);
    auto const& got = *shares.shares[std::size_t(which)];
    EXPECT_NEAR(got.estimate, ref.estimate, 1e-12);
    EXPECT_NEAR(got.lower, ref.lower, 1e-9);
    EXPECT_NEAR(got.upper, ref.upper, 1e-9);
    EXPECT_LT(got.lower, got.upper);
  }
}

// Run level with one group: the mean over the runs of the group is the across-cell mean, so every resample's
// statistics, and the intervals, are those of the across-cells bootstrap (an independent path: the across-cells code
// takes plain column means).
TEST(BootstrapDirectional, RunLevelWithOneGroupIsTheAcrossCellsBootstrap) {
  std::vector<std::vector<double>> yr, pr;
  for (int c = 0; c < 10; ++c) {
    std::vector<double> y, p;
    for (int t = 0; t < 15; ++t) {
      y.push_back(std::sin(0.3 * t + c) + 0.1 * c);
      p.push_back(y.back() + 0.3 * std::cos(1.3 * t * c));
    }
    yr.push_back(y);
    pr.push_back(p);
  }
  auto const spec = percentile_spec(0.9);
  DirectionalOptions one_group;
  one_group.groups.assign(10, "all");
  auto const a = bootstrap_directional(make_table(pr), make_table(yr), spec);
  auto const b = bootstrap_directional(make_table(pr), make_table(yr), spec, {}, one_group);
  EXPECT_NEAR(a.anomaly_correlation.lower, b.anomaly_correlation.lower, 1e-12);
  EXPECT_NEAR(a.anomaly_correlation.upper, b.anomaly_correlation.upper, 1e-12);
  EXPECT_EQ(a.sign_agreement_rate.lower, b.sign_agreement_rate.lower);
  EXPECT_EQ(a.sign_agreement_rate.upper, b.sign_agreement_rate.upper);
  // With units = runs (two cells per run, in two groups), a predictor shared by the runs of each group has no
  // run-level field on any resample: the bootstrap cannot define the statistic and says so.
  std::vector<std::vector<double>> ys, ps;
  std::vector<std::string> groups, runs;
  for (int run = 0; run < 5; ++run) {
    for (int g = 0; g < 2; ++g) {
      ys.push_back({0.1 * run + g, 0.2 * run + g});
      ps.push_back({double(g), 2.0 * g});
      groups.push_back(g == 0 ? "g0" : "g1");
      runs.push_back("run" + std::to_string(run));
    }
  }
  DirectionalOptions run_level;
  run_level.groups = groups;
  EXPECT_THROW(bootstrap_directional(make_table(ps), make_table(ys), spec, runs, run_level), StatsError);
}

// Issue 30: a post-outcome predictor (common-time, the mean over cells of the outcome at each step) is rebuilt on
// each resample. Its forecast error then has no time effect on any resample, so the interval of error_share_time,
// exactly zero by construction (up to rounding), is degenerate at 0; reusing the full table's common-time rows on
// the resamples (the old behaviour, post.forecast = false) puts most of the interval away from zero.
TEST(BootstrapPostOutcome, TheCommonTimeErrorHasNoTimeShareOnAnyResample) {
  std::vector<std::vector<double>> yr;
  std::vector<std::string> runs;
  for (int run = 0; run < 6; ++run) {
    for (int g = 0; g < 3; ++g) {
      std::vector<double> y;
      for (int t = 0; t < 12; ++t) {
        y.push_back(0.1 * g + (1.0 - std::exp(-0.2 * t)) * (1.0 + 0.15 * std::sin(2.3 * run + t)));
      }
      yr.push_back(y);
      runs.push_back("run" + std::to_string(run));
    }
  }
  // The common-time rows, computed here by hand: the column means of the outcome.
  std::vector<std::vector<double>> ct(yr.size(), std::vector<double>(12));
  for (int t = 0; t < 12; ++t) {
    double sum = 0;
    for (auto const& row : yr) {
      sum += row[std::size_t(t)];
    }
    for (auto& row : ct) {
      row[std::size_t(t)] = sum / double(yr.size());
    }
  }
  auto const y = make_table(yr);
  auto const f = make_table(ct);
  auto const spec = percentile_spec(0.95);
  auto const rebuilt = bootstrap_error_decomposition_shares(f, y, spec, runs, MissingPolicy::error, {true, false});
  ASSERT_TRUE(rebuilt.shares[0].has_value()) << rebuilt.reasons[0];
  EXPECT_LT(std::abs(rebuilt.shares[0]->lower), 1e-20);
  EXPECT_LT(std::abs(rebuilt.shares[0]->upper), 1e-20);
  auto const reused = bootstrap_error_decomposition_shares(f, y, spec, runs, MissingPolicy::error, {false, false});
  ASSERT_TRUE(reused.shares[0].has_value()) << reused.reasons[0];
  EXPECT_GT(reused.shares[0]->upper, 1e-3);
}
