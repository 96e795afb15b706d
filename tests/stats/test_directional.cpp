#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "stats/directional.hpp"
#include "stats/error.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

namespace {

// P(X >= k), X ~ Binomial(n, 1/2), summed plainly: sum_{j=k}^{n} C(n, j) / 2^n.
long double plain_tail(int k, int n) {
  long double total = 0;
  for (int j = k; j <= n; ++j) {
    long double c = 1;  // C(n, j) by the product formula
    for (int i = 1; i <= j; ++i) {
      c = c * (n - j + i) / i;
    }
    total += c;
  }
  return total / std::pow(2.0L, n);
}

// Outcome with a shared trend and cell-specific offsets of both signs, 12 cells x 50 steps.
CellTable outcome_table() {
  std::vector<std::vector<double>> rows;
  for (int c = 0; c < 12; ++c) {
    std::vector<double> row;
    double const offset = 0.02 * (c % 2 == 0 ? 1 : -1) * (1 + c);
    row.reserve(50);
    for (int t = 0; t < 50; ++t) {
      row.push_back(1.0 - std::exp(-0.05 * t) + offset * std::sqrt(t + 1.0));
    }
    rows.push_back(row);
  }
  return make_table(rows);
}

}  // namespace

TEST(Directional, BinomialTailMatchesPlainSum) {
  for (int n : {1, 2, 5, 12, 31, 72}) {
    for (int k = 0; k <= n; ++k) {
      long double const ref = plain_tail(k, n);
      EXPECT_NEAR(sign_test_p_value(k, n), double(ref), 1e-14 + 1e-12 * double(ref)) << "k=" << k << " n=" << n;
    }
  }
  EXPECT_DOUBLE_EQ(sign_test_p_value(4, 4), 1.0 / 16);
  EXPECT_DOUBLE_EQ(sign_test_p_value(3, 4), 5.0 / 16);
  EXPECT_THROW(sign_test_p_value(5, 4), StatsError);
}

TEST(Directional, AnomaliesRemoveTheAcrossCellMean) {
  Eigen::MatrixXd v(2, 2);
  v << 1, 10, 3, 20;
  Eigen::MatrixXd const a = anomalies(v);
  EXPECT_DOUBLE_EQ(a(0, 0), -1.0);
  EXPECT_DOUBLE_EQ(a(1, 0), 1.0);
  EXPECT_DOUBLE_EQ(a(0, 1), -5.0);
  EXPECT_DOUBLE_EQ(a(1, 1), 5.0);
}

TEST(Directional, OutcomePlusCommonNoisePasses) {
  auto const y = outcome_table();
  auto p = y;
  std::mt19937_64 gen(5);
  std::normal_distribution<double> noise(0.0, 0.3);
  for (Eigen::Index t = 0; t < p.cols(); ++t) {
    p.values.col(t).array() += noise(gen);  // same for every cell
  }
  auto const r = directional_specificity(p, y);
  EXPECT_EQ(r.n_directional, 12);
  EXPECT_EQ(r.n_sign_agree, 12);
  ASSERT_TRUE(r.sign_agreement_rate.has_value());
  EXPECT_DOUBLE_EQ(*r.sign_agreement_rate, 1.0);
  EXPECT_NEAR(r.binomial_p_value, 1.0 / 4096, 1e-15);
  ASSERT_TRUE(r.anomaly_correlation.has_value());
  EXPECT_NEAR(*r.anomaly_correlation, 1.0, 1e-9);
  ASSERT_TRUE(r.cell_anomaly_correlation.has_value());
  EXPECT_NEAR(*r.cell_anomaly_correlation, 1.0, 1e-9);
  EXPECT_TRUE(r.significant);
}

TEST(Directional, CommonTimeMeanFails) {
  auto const y = outcome_table();
  auto p = y;
  for (Eigen::Index t = 0; t < p.cols(); ++t) {
    p.values.col(t).setConstant(y.values.col(t).mean());
  }
  auto const r = directional_specificity(p, y);
  EXPECT_EQ(r.n_directional, 0);
  EXPECT_FALSE(r.sign_agreement_rate.has_value());
  EXPECT_EQ(r.binomial_p_value, 1.0);
  EXPECT_FALSE(r.anomaly_correlation.has_value());
  EXPECT_FALSE(r.significant);
}

TEST(Directional, ReversedAnomaliesFail) {
  auto const y = outcome_table();
  auto p = y;
  for (Eigen::Index t = 0; t < p.cols(); ++t) {
    double const m = y.values.col(t).mean();
    p.values.col(t) = (2 * m - y.values.col(t).array()).matrix();  // mirror each cell around the common mean
  }
  auto const r = directional_specificity(p, y);
  EXPECT_EQ(r.n_directional, 12);
  EXPECT_EQ(r.n_sign_agree, 0);
  EXPECT_EQ(r.binomial_p_value, 1.0);
  EXPECT_NEAR(*r.anomaly_correlation, -1.0, 1e-9);
  EXPECT_FALSE(r.significant);
}

// 4 cells, 1 step. Outcome (0, 2, 4, 6): anomalies (-3, -1, 1, 3). Predictor (0, 3, 2, 3): mean 2, anomalies
// (-2, 1, 0, 1). Cell 2 has no direction; cells 0 and 3 agree, cell 1 disagrees: k = 2, n = 3.
TEST(Directional, HandCountWithAZeroAnomaly) {
  auto const y = make_table({{0}, {2}, {4}, {6}});
  auto const p = make_table({{0}, {3}, {2}, {3}});
  auto const r = directional_specificity(p, y);
  EXPECT_EQ(r.n_directional, 3);
  EXPECT_EQ(r.n_sign_agree, 2);
  EXPECT_DOUBLE_EQ(*r.sign_agreement_rate, 2.0 / 3);
  EXPECT_DOUBLE_EQ(r.binomial_p_value, 4.0 / 8);  // (C(3,2) + C(3,3)) / 8
  // anomaly correlation: sum A_P A_Y = (-2)(-3) + (1)(-1) + 0 + (1)(3) = 8; |A_P|^2 = 6, |A_Y|^2 = 20
  EXPECT_DOUBLE_EQ(*r.anomaly_correlation, 8.0 / std::sqrt(120.0));
}

TEST(Directional, BadInput) {
  auto const y = make_table({{0, 1}});
  EXPECT_THROW(directional_specificity(y, y), StatsError);  // one cell: no anomalies
  auto const y2 = make_table({{0, 1}, {1, 2}});
  auto const p2 = make_table({{0, 1, 2}, {1, 2, 3}});
  EXPECT_THROW(directional_specificity(p2, y2), StatsError);
}

// Issue 30, run level. Two groups x two runs, one step, worked by hand:
//   g1: Y = (1, 3) -> run anomalies (-1, 1); P = (2, 2.5) -> (-0.25, 0.25)
//   g2: Y = (10, 10) -> (0, 0);             P = (5, 7)   -> (-1, 1)
// Directional cells (both mean anomalies nonzero): the two g1 cells, both signs agree: n = 2, k = 2.
// anomaly correlation = (0.25 + 0.25) / sqrt((0.0625 + 0.0625 + 1 + 1) * (1 + 1)) = 0.5 / sqrt(4.25).
TEST(DirectionalRunLevel, HandComputedTwoGroupsTwoRuns) {
  auto const y = make_table({{1}, {3}, {10}, {10}});
  auto const p = make_table({{2}, {2.5}, {5}, {7}});
  DirectionalOptions options;
  options.groups = {"g1", "g1", "g2", "g2"};
  auto const r = directional_specificity(p, y, options);
  EXPECT_TRUE(r.run_level);
  EXPECT_FALSE(r.predictor_field_zero);
  EXPECT_EQ(r.n_directional, 2);
  EXPECT_EQ(r.n_sign_agree, 2);
  ASSERT_TRUE(r.anomaly_correlation.has_value());
  EXPECT_NEAR(*r.anomaly_correlation, 0.5 / std::sqrt(4.25), 1e-15);
  EXPECT_DOUBLE_EQ(r.outcome_cell_anomaly(0), -1.0);
  EXPECT_DOUBLE_EQ(r.predictor_cell_anomaly(3), 1.0);
  // Across cells the same tables give another answer: means 6 (outcome) and 4.125 (predictor), all 4 cells
  // directional, signs (-,-) (-,-) (+,+) (+,+): the group difference dominates.
  auto const across = directional_specificity(p, y);
  EXPECT_FALSE(across.run_level);
  EXPECT_EQ(across.n_directional, 4);
  EXPECT_EQ(across.n_sign_agree, 4);
}

// A shared reference: the predictor is the same for every run of a group (it differs between groups), while the
// outcomes differ by run. Across cells it looks directional (the groups differ); at run level its field is zero by
// construction: no directional cell, no correlation, predictor_field_zero.
TEST(DirectionalRunLevel, ASharedPredictorHasNoRunLevelSignal) {
  std::vector<std::vector<double>> yr, pr;
  std::vector<std::string> groups;
  for (int g = 0; g < 4; ++g) {
    for (int run = 0; run < 3; ++run) {
      std::vector<double> y, p;
      for (int t = 0; t < 20; ++t) {
        double const trend = 1.0 - std::exp(-0.1 * t);
        p.push_back(trend + 0.1 * g);
        y.push_back(trend + 0.1 * g + 0.01 * (run - 1) * std::sqrt(t + 1.0));
      }
      yr.push_back(y);
      pr.push_back(p);
      groups.push_back("g" + std::to_string(g));
    }
  }
  DirectionalOptions options;
  options.groups = groups;
  auto const r = directional_specificity(make_table(pr), make_table(yr), options);
  EXPECT_TRUE(r.predictor_field_zero);
  EXPECT_EQ(r.n_directional, 0);
  EXPECT_FALSE(r.anomaly_correlation.has_value());
  EXPECT_FALSE(r.cell_anomaly_correlation.has_value());
  EXPECT_FALSE(r.significant);
  auto const across = directional_specificity(make_table(pr), make_table(yr));
  EXPECT_FALSE(across.predictor_field_zero);
  ASSERT_TRUE(across.anomaly_correlation.has_value());
  EXPECT_GT(*across.anomaly_correlation, 0.9);
}

TEST(DirectionalRunLevel, GroupsMustCoverTheCells) {
  auto const y = make_table({{1}, {3}, {10}});
  auto const p = make_table({{2}, {2.5}, {5}});
  DirectionalOptions options;
  options.groups = {"g1", "g1"};
  EXPECT_THROW(directional_specificity(p, y, options), StatsError);
}
