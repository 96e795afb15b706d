#include <gtest/gtest.h>

#include <cmath>

#include "stats/error.hpp"
#include "stats/metrics.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

// Hand table: errors e = F - Y = [[1, 2], [0, -3]].
//   bias_cell = [1.5, -1.5], mae_cell = [1.5, 1.5], mse_cell = [2.5, 4.5]
//   bias = 0, mae = 1.5, rmse_macro = (sqrt 2.5 + sqrt 4.5) / 2, rmse_pooled = sqrt 3.5
TEST(Metrics, HandTable) {
  auto const f = make_table({{1, 3}, {2, 2}});
  auto const y = make_table({{0, 1}, {2, 5}});
  auto const r = evaluate_metrics(f, y);
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_EQ(r.cells[0].cell, "c0");
  EXPECT_DOUBLE_EQ(r.cells[0].bias_cell, 1.5);
  EXPECT_DOUBLE_EQ(r.cells[1].bias_cell, -1.5);
  EXPECT_DOUBLE_EQ(r.cells[0].mae_cell, 1.5);
  EXPECT_DOUBLE_EQ(r.cells[1].mae_cell, 1.5);
  EXPECT_DOUBLE_EQ(r.cells[0].mse_cell, 2.5);
  EXPECT_DOUBLE_EQ(r.cells[1].mse_cell, 4.5);
  EXPECT_DOUBLE_EQ(r.cells[0].rmse_cell, std::sqrt(2.5));
  EXPECT_DOUBLE_EQ(r.cells[1].rmse_cell, std::sqrt(4.5));
  EXPECT_DOUBLE_EQ(r.bias, 0.0);
  EXPECT_DOUBLE_EQ(r.mae, 1.5);
  EXPECT_DOUBLE_EQ(r.rmse_macro, (std::sqrt(2.5) + std::sqrt(4.5)) / 2);
  EXPECT_DOUBLE_EQ(r.rmse_pooled, std::sqrt(3.5));
  EXPECT_LT(r.rmse_macro, r.rmse_pooled);  // they differ when cell MSEs differ
}

TEST(Metrics, BiasSignIsForecastMinusOutcome) {
  auto const r = evaluate_metrics(make_table({{2, 2}, {2, 2}}), make_table({{1, 1}, {1, 1}}));
  EXPECT_DOUBLE_EQ(r.bias, 1.0);
}

TEST(Metrics, MacroEqualsPooledWhenEveryCellHasTheSameMse) {
  // |e| = 2 everywhere, signs mixed: every mse_cell = 4.
  auto const f = make_table({{2, -2, 2}, {-2, -2, 2}, {2, 2, 2}});
  auto const y = make_table({{0, 0, 0}, {0, 0, 0}, {0, 0, 0}});
  auto const r = evaluate_metrics(f, y);
  EXPECT_DOUBLE_EQ(r.rmse_macro, 2.0);
  EXPECT_DOUBLE_EQ(r.rmse_pooled, 2.0);
}

TEST(Metrics, SingleCellMacroEqualsPooled) {
  auto const r = evaluate_metrics(make_table({{1, 2, 3, 4}}), make_table({{0, 0, 0, 0}}));
  EXPECT_DOUBLE_EQ(r.rmse_macro, std::sqrt(30.0 / 4));
  EXPECT_DOUBLE_EQ(r.rmse_pooled, std::sqrt(30.0 / 4));
}

TEST(Metrics, MacroAndPooledDifferOnUnequalCells) {
  // One perfect cell, one cell off by 4: rmse_macro = (0 + 4) / 2 = 2, rmse_pooled = sqrt(16 / 2) = 2 sqrt 2.
  auto const r = evaluate_metrics(make_table({{1, 1}, {5, 5}}), make_table({{1, 1}, {1, 1}}));
  EXPECT_DOUBLE_EQ(r.rmse_macro, 2.0);
  EXPECT_DOUBLE_EQ(r.rmse_pooled, 2.0 * std::sqrt(2.0));
}

TEST(Metrics, CompensatedAcrossLargeOffsets) {
  // Errors 1e8 + {0.5, -0.5, ...}: the mean error is exactly 1e8 and the MSE 1e16 + 0.25.
  int const n = 1000;
  auto y = make_table({std::vector<double>(n, 0.0)});
  auto f = y;
  for (int j = 0; j < n; ++j) {
    f.values(0, j) = 1e8 + (j % 2 == 0 ? 0.5 : -0.5);
  }
  auto const r = evaluate_metrics(f, y);
  EXPECT_EQ(r.bias, 1e8);
  EXPECT_EQ(r.cells[0].mse_cell, 1e16 + 0.25);
}

// Skill = 1 - sum MSE_P / sum MSE_B. Hand: predictor errors [[1, 1], [1, 1]] -> MSE [1, 1]; baseline errors
// [[2, 2], [0, 0]] -> MSE [4, 0]; skill = 1 - 2 / 4 = 0.5.
TEST(Metrics, SkillHandTable) {
  auto const y = make_table({{0, 0}, {0, 0}});
  auto const p = make_table({{1, -1}, {1, 1}});
  auto const b = make_table({{2, -2}, {0, 0}});
  auto const s = evaluate_skill(p, b, y);
  EXPECT_DOUBLE_EQ(s.sum_mse_predictor, 2.0);
  EXPECT_DOUBLE_EQ(s.sum_mse_baseline, 4.0);
  EXPECT_DOUBLE_EQ(s.skill, 0.5);
  EXPECT_DOUBLE_EQ(evaluate_skill(b, b, y).skill, 0.0);
  EXPECT_DOUBLE_EQ(evaluate_skill(y, b, y).skill, 1.0);
}

TEST(Metrics, SkillAgainstAPerfectBaselineIsAnError) {
  auto const y = make_table({{1, 2}, {3, 4}});
  EXPECT_THROW(evaluate_skill(make_table({{0, 0}, {0, 0}}), y, y), StatsError);
}

TEST(Metrics, ForecastErrorTable) {
  auto const e = forecast_error(make_table({{3, 1}}), make_table({{1, 1}}));
  EXPECT_EQ(e.values(0, 0), 2.0);
  EXPECT_EQ(e.values(0, 1), 0.0);
  EXPECT_EQ(e.steps, (std::vector<std::int64_t>{10, 20}));
}
