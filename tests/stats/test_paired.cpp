#include <gtest/gtest.h>

#include <cmath>

#include "stats/error.hpp"
#include "stats/paired.hpp"
#include "stats/recovery.hpp"

using namespace wbaudit::stats;

// Values 1..5: mean 3, s^2 = 2.5, se = sqrt(2.5 / 5); t_{0.975, 4} = 2.7764451051977987 (standard table value).
TEST(Paired, TIntervalMatchesTheClosedForm) {
  auto const t = t_interval({1, 2, 3, 4, 5}, 0.95);
  double const se = std::sqrt(0.5);
  EXPECT_DOUBLE_EQ(t.estimate, 3.0);
  EXPECT_DOUBLE_EQ(t.standard_error, se);
  EXPECT_EQ(t.degrees_of_freedom, 4);
  EXPECT_NEAR(t.lower, 3 - 2.7764451051977987 * se, 1e-12);
  EXPECT_NEAR(t.upper, 3 + 2.7764451051977987 * se, 1e-12);
}

// Recoveries of two policies over 4 seeds. Differences d = (0.1, 0.3, 0.2, 0.2): mean 0.2, s^2 = 0.02 / 3,
// se = sqrt(0.02 / 12); t_{0.95, 3} = 2.3533634348018264 (90% two-sided).
TEST(Paired, DifferencesArePairedByUnit) {
  std::vector<std::string> const seeds = {"s1", "s2", "s3", "s4"};
  std::vector<double> const a = {0.9, 0.8, 0.7, 0.6};
  std::vector<double> const b = {0.8, 0.5, 0.5, 0.4};
  BootstrapSpec spec;
  spec.seed = 17;
  spec.resamples = 2000;
  spec.confidence = 0.9;
  spec.method = IntervalMethod::percentile;
  auto const r = paired_difference(seeds, a, b, spec);
  ASSERT_EQ(r.differences.size(), 4u);
  EXPECT_NEAR(r.differences[1], 0.3, 1e-15);
  EXPECT_NEAR(r.t.estimate, 0.2, 1e-15);
  double const se = std::sqrt(0.02 / 12);
  EXPECT_NEAR(r.t.lower, 0.2 - 2.3533634348018264 * se, 1e-12);
  EXPECT_NEAR(r.t.upper, 0.2 + 2.3533634348018264 * se, 1e-12);
  EXPECT_NEAR(r.bootstrap.estimate, 0.2, 1e-15);
  // bootstrap means of the 4 differences lie within [min d, max d]
  EXPECT_GE(r.bootstrap.lower, 0.1 - 1e-15);
  EXPECT_LE(r.bootstrap.upper, 0.3 + 1e-15);
  EXPECT_LT(r.bootstrap.lower, 0.2);
  EXPECT_GT(r.bootstrap.upper, 0.2);
}

TEST(Paired, Ratios) {
  std::vector<std::string> const seeds = {"s1", "s2", "s3"};
  std::vector<double> const a = {1.0, 2.0, 3.0};
  std::vector<double> const b = {2.0, 2.0, 2.0};
  BootstrapSpec spec;
  spec.seed = 1;
  spec.resamples = 500;
  spec.method = IntervalMethod::percentile;
  auto const r = paired_ratio(seeds, a, b, spec);
  EXPECT_EQ(r.ratios, (std::vector<double>{0.5, 1.0, 1.5}));
  EXPECT_DOUBLE_EQ(r.mean_ratio_t.estimate, 1.0);
  EXPECT_DOUBLE_EQ(r.ratio_of_means_bootstrap.estimate, 1.0);  // 6 / 6
  EXPECT_DOUBLE_EQ(r.mean_ratio_bootstrap.estimate, 1.0);
  EXPECT_THROW(paired_ratio(seeds, a, std::vector<double>{1.0, 0.0, 1.0}, spec), StatsError);
}

TEST(Paired, BadInput) {
  BootstrapSpec spec;
  EXPECT_THROW(
      paired_difference(std::vector<std::string>{"a", "b"}, std::vector<double>{1, 2}, std::vector<double>{1}, spec),
      StatsError);
  EXPECT_THROW(
      paired_difference(std::vector<std::string>{"a", "a"}, std::vector<double>{1, 2}, std::vector<double>{1, 2}, spec),
      StatsError);
  EXPECT_THROW(paired_difference(std::vector<std::string>{"a", "b"}, std::vector<double>{1, std::nan("")},
                                 std::vector<double>{1, 2}, spec),
               StatsError);
  EXPECT_THROW(t_interval({1.0}), StatsError);
}

TEST(Recovery, Definition) {
  EXPECT_DOUBLE_EQ(recovery(2.0, 1.5, 1.0), 0.5);   // half the gap closed
  EXPECT_DOUBLE_EQ(recovery(2.0, 1.0, 1.0), 1.0);   // matches the reference
  EXPECT_DOUBLE_EQ(recovery(2.0, 2.5, 1.0), -0.5);  // worse than nearest
  EXPECT_THROW(recovery(1.0, 0.5, 1.0), StatsError);
  EXPECT_THROW(recovery(std::nan(""), 0.5, 1.0), StatsError);
}
