// rmse_by_step against hand-computed values and, for the intervals, against the bounds every resample must respect
// (brute force over the possible resamples of two units).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "stats/error.hpp"
#include "stats/rmse_by_step.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

namespace {
BootstrapSpec spec() {
  BootstrapSpec s;
  s.seed = 11;
  s.resamples = 400;
  s.method = IntervalMethod::bca;  // ignored: the per-step intervals are percentile
  return s;
}
}  // namespace

TEST(RmseByStep, PointValuesAreTheRmseOverCellsAtEachStep) {
  // errors: step 10: 1, 0, 0 -> sqrt(1/3); step 20: 0, 3, 4 -> sqrt(25/3)
  const auto P = make_table({{1, 2}, {3, 4}, {5, 6}});
  const auto Y = make_table({{0, 2}, {3, 1}, {5, 2}});
  const auto s = rmse_by_step(P, Y, {}, spec());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].step, 10);
  EXPECT_EQ(s[1].step, 20);
  EXPECT_DOUBLE_EQ(s[0].rmse, std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(s[1].rmse, std::sqrt(25.0 / 3.0));
}

TEST(RmseByStep, IntervalsStayWithinTheExtremesOfEveryPossibleResample) {
  // Two units: a = rows {0, 1}, b = row {2}. A resample draws two units with replacement: {a,a}, {a,b}, {b,b}.
  const auto P = make_table({{1, 2}, {3, 4}, {5, 6}});
  const auto Y = make_table({{0, 2}, {3, 1}, {5, 2}});
  const std::vector<std::string> units = {"a", "a", "b"};
  // Per step, the rmse of each possible resample, written out: step 10 errors 1, 0 | 0; step 20 errors 0, 3 | 4.
  const std::vector<std::vector<double>> possible = {
      {std::sqrt((1.0 + 0.0 + 1.0 + 0.0) / 4), std::sqrt((1.0 + 0.0 + 0.0) / 3), 0.0},
      {std::sqrt((0.0 + 9.0 + 0.0 + 9.0) / 4), std::sqrt((0.0 + 9.0 + 16.0) / 3), 4.0}};
  const auto s = rmse_by_step(P, Y, units, spec());
  ASSERT_EQ(s.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const double lo = *std::min_element(possible[k].begin(), possible[k].end());
    const double hi = *std::max_element(possible[k].begin(), possible[k].end());
    ASSERT_TRUE(std::isfinite(s[k].lower)) << k;
    EXPECT_GE(s[k].lower, lo - 1e-15) << k;
    EXPECT_LE(s[k].upper, hi + 1e-15) << k;
    EXPECT_LE(s[k].lower, s[k].upper) << k;
    // With 400 resamples, both extreme resamples occur, so the interval is not a single point.
    EXPECT_LT(s[k].lower, s[k].upper) << k;
  }
}

TEST(RmseByStep, OneUnitHasNoIntervalAndAMissingValueNoPoint) {
  const auto P = make_table({{1, NAN}, {3, 4}});
  const auto Y = make_table({{0, 2}, {3, 1}});
  const auto one_unit = rmse_by_step(P, Y, {"run", "run"}, spec());
  EXPECT_DOUBLE_EQ(one_unit[0].rmse, std::sqrt(0.5));
  EXPECT_TRUE(std::isnan(one_unit[0].lower));
  EXPECT_TRUE(std::isnan(one_unit[0].upper));
  EXPECT_TRUE(std::isnan(one_unit[1].rmse));  // a missing value at step 20
  const auto two_units = rmse_by_step(P, Y, {}, spec());
  EXPECT_TRUE(std::isfinite(two_units[0].lower));
  EXPECT_TRUE(std::isnan(two_units[1].rmse));
  EXPECT_TRUE(std::isnan(two_units[1].lower));
}

TEST(RmseByStep, MismatchedTablesAreRefused) {
  const auto P = make_table({{1, 2}, {3, 4}});
  const auto Y = make_table({{1, 2}});
  EXPECT_THROW(rmse_by_step(P, Y, {}, spec()), StatsError);
  EXPECT_THROW(rmse_by_step(P, P, {"a"}, spec()), StatsError);
}
