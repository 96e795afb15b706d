#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "stats/decomposition.hpp"
#include "stats/error.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

// 2 cells x 3 steps, y = mu + a_t + b_c exactly: mu = 10, a = (-1, 0, 1), b = (-2, 2).
// SS_time = C sum a^2 = 2 * 2 = 4, SS_cell = T sum b^2 = 3 * 8 = 24, SS_residual = 0, SS_total = 28.
TEST(Decomposition, HandAdditiveTable) {
  auto const d = decompose(make_table({{7, 8, 9}, {11, 12, 13}}));
  EXPECT_DOUBLE_EQ(d.mu, 10.0);
  EXPECT_DOUBLE_EQ(d.time_effect(0), -1.0);
  EXPECT_DOUBLE_EQ(d.time_effect(2), 1.0);
  EXPECT_DOUBLE_EQ(d.cell_effect(0), -2.0);
  EXPECT_DOUBLE_EQ(d.ss_time, 4.0);
  EXPECT_DOUBLE_EQ(d.ss_cell, 24.0);
  EXPECT_NEAR(d.ss_residual, 0.0, 1e-24);
  EXPECT_DOUBLE_EQ(d.ss_total, 28.0);
  EXPECT_DOUBLE_EQ(d.share_time, 4.0 / 28);
  EXPECT_DOUBLE_EQ(d.share_cell, 24.0 / 28);
}

// Pure interaction: y = [[1, -1], [-1, 1]]: no row or column effect, everything is residual.
TEST(Decomposition, HandInteractionTable) {
  auto const d = decompose(make_table({{1, -1}, {-1, 1}}));
  EXPECT_DOUBLE_EQ(d.ss_residual, 4.0);
  EXPECT_DOUBLE_EQ(d.share_residual, 1.0);
  EXPECT_DOUBLE_EQ(d.share_time, 0.0);
  EXPECT_DOUBLE_EQ(d.share_cell, 0.0);
}

TEST(Decomposition, SharesSumToOne) {
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> u(-3, 3);
  Eigen::MatrixXd v(9, 17);
  for (Eigen::Index i = 0; i < v.rows(); ++i) {
    for (Eigen::Index j = 0; j < v.cols(); ++j) {
      v(i, j) = u(gen) * u(gen) + 0.1 * double(j);
    }
  }
  auto const d = decompose_values(v);
  EXPECT_NEAR(d.share_time + d.share_cell + d.share_residual, 1.0, 1e-14);
  // and the sums of squares add up to SS_total computed plainly
  double const mean = v.mean();
  double plain_total = 0;
  for (Eigen::Index i = 0; i < v.rows(); ++i) {
    for (Eigen::Index j = 0; j < v.cols(); ++j) {
      plain_total += (v(i, j) - mean) * (v(i, j) - mean);
    }
  }
  EXPECT_NEAR(d.ss_total, plain_total, 1e-10 * plain_total);
  EXPECT_NEAR(d.ss_time + d.ss_cell + d.ss_residual, plain_total, 1e-10 * plain_total);
}

TEST(Decomposition, PurelyTimeDriven) {
  Eigen::MatrixXd v(6, 40);
  for (Eigen::Index j = 0; j < v.cols(); ++j) {
    v.col(j).setConstant(std::sin(0.3 * double(j)) + 0.01 * double(j));
  }
  auto const d = decompose_values(v);
  EXPECT_NEAR(d.share_time, 1.0, 1e-14);
  EXPECT_NEAR(d.share_cell, 0.0, 1e-14);
  EXPECT_NEAR(d.share_residual, 0.0, 1e-14);
}

TEST(Decomposition, PurelyCellDriven) {
  Eigen::MatrixXd v(6, 40);
  for (Eigen::Index i = 0; i < v.rows(); ++i) {
    v.row(i).setConstant(0.5 * double(i * i) - 1.0);
  }
  auto const d = decompose_values(v);
  EXPECT_NEAR(d.share_cell, 1.0, 1e-14);
  EXPECT_NEAR(d.share_time, 0.0, 1e-14);
  EXPECT_NEAR(d.share_residual, 0.0, 1e-14);
}

TEST(Decomposition, RecoversKnownAdditiveEffectsUnderNoise) {
  int const n_cells = 30, n_steps = 200;
  double const sigma = 0.1;
  std::mt19937_64 gen(2024);
  std::normal_distribution<double> noise(0.0, sigma);
  Eigen::VectorXd a(n_steps), b(n_cells);
  for (int j = 0; j < n_steps; ++j) {
    a(j) = std::cos(0.05 * j);
  }
  a.array() -= a.mean();
  for (int i = 0; i < n_cells; ++i) {
    b(i) = 0.1 * (i - 14.5);
  }
  Eigen::MatrixXd v(n_cells, n_steps);
  for (int i = 0; i < n_cells; ++i) {
    for (int j = 0; j < n_steps; ++j) {
      v(i, j) = 5.0 + a(j) + b(i) + noise(gen);
    }
  }
  auto const d = decompose_values(v);
  EXPECT_NEAR(d.mu, 5.0, 4 * sigma / std::sqrt(n_cells * n_steps));
  // effect estimates have noise sd sigma/sqrt(C) (time) and sigma/sqrt(T) (cell)
  EXPECT_LT((d.time_effect - a).cwiseAbs().maxCoeff(), 5 * sigma / std::sqrt(n_cells));
  EXPECT_LT((d.cell_effect - b).cwiseAbs().maxCoeff(), 5 * sigma / std::sqrt(n_steps));
  // SS_residual ~ sigma^2 (C-1)(T-1), within a few percent
  double const expected_residual = sigma * sigma * (n_cells - 1) * (n_steps - 1);
  EXPECT_NEAR(d.ss_residual / expected_residual, 1.0, 0.05);
  double const ss_time = n_cells * a.squaredNorm(), ss_cell = n_steps * b.squaredNorm();
  EXPECT_NEAR(d.ss_time / ss_time, 1.0, 0.02);
  EXPECT_NEAR(d.ss_cell / ss_cell, 1.0, 0.02);
}

TEST(Decomposition, ForecastErrorOfACommonTimeOffsetIsAllTime) {
  auto const y = make_table({{1, 5, 2}, {3, 0, 7}, {4, 4, 4}});
  auto f = y;
  for (Eigen::Index j = 0; j < 3; ++j) {
    f.values.col(j).array() += double(j * j);  // error depends on t only
  }
  auto const d = decompose_forecast_error(f, y);
  EXPECT_NEAR(d.share_time, 1.0, 1e-14);
}

TEST(Decomposition, ConstantTableAndMissingValuesAreErrors) {
  EXPECT_THROW(decompose(make_table({{2, 2}, {2, 2}})), StatsError);
  auto t = make_table({{1, 2}, {3, 4}, {5, 9}});
  t.values(1, 0) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(decompose(t), StatsError);
  auto const d = decompose(t, MissingPolicy::drop_incomplete_cells);
  EXPECT_EQ(d.dropped_cells, std::vector<std::string>{"c1"});
  EXPECT_EQ(d.cells, (std::vector<std::string>{"c0", "c2"}));
  // remaining [[1, 2], [5, 9]]: mu = 4.25, a = (-1.25, 1.25), b = (-2.75, 2.75), SS_total = 38.75
  EXPECT_DOUBLE_EQ(d.ss_total, 38.75);
  EXPECT_DOUBLE_EQ(d.ss_time, 2 * 2 * 1.5625);
  EXPECT_DOUBLE_EQ(d.ss_cell, 2 * 2 * 7.5625);
}

// Issue 30: values in messages read back as the same double (a constant table at 7.3e-30 said "0.000000").
TEST(Decomposition, TheConstantTableMessageNamesTheValueExactly) {
  auto const t = make_table({{7.3e-30, 7.3e-30}, {7.3e-30, 7.3e-30}});
  try {
    (void)decompose(t);
    FAIL() << "a constant table was decomposed";
  } catch (StatsError const& e) {
    std::string const m = e.what();
    EXPECT_NE(m.find("7.3e-30"), std::string::npos) << m;
    EXPECT_EQ(m.find("0.000000"), std::string::npos) << m;
  }
  EXPECT_EQ(value_text(0.1), "0.1");
  EXPECT_EQ(std::stod(value_text(1.0 / 3.0)), 1.0 / 3.0);
  EXPECT_EQ(value_text(0.0), "0");
}
