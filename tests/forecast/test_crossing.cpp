// Crossing detection and predicted-vs-measured comparison on hand-made trajectories; every expected value is
// computed by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "forecast/crossing.hpp"
#include "forecast/error.hpp"

namespace wbaudit::forecast {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Steps = std::vector<std::int64_t>;
using Values = std::vector<double>;

Crossing cross(const Steps& s, const Values& y, double theta = 0.5, std::optional<std::int64_t> t0 = {}) {
  CrossingOptions o;
  o.threshold = theta;
  o.burn_in = t0;
  return find_crossing(s, y, o);
}

TEST(Crossing, InterpolatesBetweenRecordedSteps) {
  // (10, 0.3) -> (20, 0.7): 0.5 is reached halfway, at 15.
  const auto c = cross({0, 10, 20, 30}, {0.1, 0.3, 0.7, 0.9});
  EXPECT_EQ(c.status, CrossingStatus::crossed);
  EXPECT_DOUBLE_EQ(c.time, 15.0);
  EXPECT_DOUBLE_EQ(c.value_at_burn_in, 0.1);
  EXPECT_TRUE(std::isnan(c.censored_at));
  // theta = 0.25: (0, 0.1) -> (10, 0.3) reaches 0.25 at 0.15 / 0.2 * 10 = 7.5.
  EXPECT_DOUBLE_EQ(cross({0, 10, 20, 30}, {0.1, 0.3, 0.7, 0.9}, 0.25).time, 7.5);
  // Only the first crossing counts: up at 5 (0 + 0.1/0.2*10), down, up again.
  EXPECT_DOUBLE_EQ(cross({0, 10, 20, 30}, {0.4, 0.6, 0.3, 0.7}).time, 5.0);
}

TEST(Crossing, TieExactlyAtThresholdCrossesAtThatStep) {
  const auto c = cross({0, 10, 20}, {0.1, 0.5, 0.9});
  EXPECT_EQ(c.status, CrossingStatus::crossed);
  EXPECT_EQ(c.time, 10.0);
}

TEST(Crossing, NeverReachingThresholdIsCensoredAtTheLastStep) {
  const auto c = cross({0, 5, 50}, {0.1, 0.2, 0.49999});
  EXPECT_EQ(c.status, CrossingStatus::not_crossed);
  EXPECT_TRUE(std::isnan(c.time));
  EXPECT_EQ(c.censored_at, 50.0);
}

TEST(Crossing, AboveAtInitializationIsNeverACrossing) {
  EXPECT_EQ(cross({0, 10, 20}, {0.6, 0.2, 0.8}).status, CrossingStatus::above_at_init);
  // Exactly theta at t0 counts as "at or above".
  const auto c = cross({0, 10, 20}, {0.5, 0.2, 0.8});
  EXPECT_EQ(c.status, CrossingStatus::above_at_init);
  EXPECT_TRUE(std::isnan(c.time));
  EXPECT_DOUBLE_EQ(c.value_at_burn_in, 0.5);
}

TEST(Crossing, BurnInOnARecordedStep) {
  const Steps s{0, 10, 20, 30, 40};
  const Values y{0.6, 0.2, 0.3, 0.8, 0.9};
  EXPECT_EQ(cross(s, y, 0.5, 0).status, CrossingStatus::above_at_init);
  // t0 = 10: y(10) = 0.2 < 0.5; (20, 0.3) -> (30, 0.8) reaches 0.5 at 20 + 0.2/0.5*10 = 24.
  const auto c = cross(s, y, 0.5, 10);
  EXPECT_EQ(c.status, CrossingStatus::crossed);
  EXPECT_DOUBLE_EQ(c.time, 24.0);
  EXPECT_EQ(c.burn_in, 10.0);
}

TEST(Crossing, BurnInBetweenRecordedStepsUsesTheInterpolatedValue) {
  const Steps s{0, 10, 20};
  const Values y{0.2, 0.4, 0.8};
  // t0 = 5: y(5) = 0.3; (10, 0.4) -> (20, 0.8) reaches 0.5 at 12.5.
  auto c = cross(s, y, 0.5, 5);
  EXPECT_DOUBLE_EQ(c.value_at_burn_in, 0.3);
  EXPECT_DOUBLE_EQ(c.time, 12.5);
  // t0 = 12: y(12) = 0.4 + 0.2*0.4 = 0.48 < 0.5, the crossing at 12.5 is after t0.
  c = cross(s, y, 0.5, 12);
  EXPECT_EQ(c.status, CrossingStatus::crossed);
  EXPECT_NEAR(c.value_at_burn_in, 0.48, 1e-15);
  EXPECT_DOUBLE_EQ(c.time, 12.5);
  // t0 = 15: y(15) = 0.6 >= 0.5.
  EXPECT_EQ(cross(s, y, 0.5, 15).status, CrossingStatus::above_at_init);
  // t0 outside the recorded range: y(t0) unknown, nothing is extrapolated.
  EXPECT_EQ(cross(s, y, 0.5, -5).status, CrossingStatus::undetermined);
  EXPECT_EQ(cross(s, y, 0.5, 25).status, CrossingStatus::undetermined);
}

TEST(Crossing, MissingValuesAreSkipped) {
  // (20, 0.3) -> (30, 0.9): 20 + 0.2/0.6*10.
  EXPECT_DOUBLE_EQ(cross({0, 10, 20, 30}, {0.1, kNaN, 0.3, 0.9}).time, 20.0 + 0.2 / 0.6 * 10.0);
  // The NaN at 20 is bridged: (10, 0.3) -> (30, 0.9): 10 + 0.2/0.6*20.
  EXPECT_DOUBLE_EQ(cross({0, 10, 20, 30}, {0.1, 0.3, kNaN, 0.9}).time, 10.0 + 0.2 / 0.6 * 20.0);
  // Trailing NaN: censored at the last observed step.
  const auto c = cross({0, 10, 20}, {0.1, 0.2, kNaN});
  EXPECT_EQ(c.status, CrossingStatus::not_crossed);
  EXPECT_EQ(c.censored_at, 10.0);
  // Nothing observed, or y(t0) unobservable.
  EXPECT_EQ(cross({0, 10}, {kNaN, kNaN}).status, CrossingStatus::undetermined);
  EXPECT_EQ(cross({0, 10, 20}, {kNaN, 0.2, 0.8}).status, CrossingStatus::undetermined);
  // The same trajectory with the burn-in on the first observed step: 10 + 0.3/0.6*10 = 15.
  EXPECT_DOUBLE_EQ(cross({0, 10, 20}, {kNaN, 0.2, 0.8}, 0.5, 10).time, 15.0);
}

TEST(Crossing, BadInputThrows) {
  EXPECT_THROW(cross({0, 10}, {0.1}), ForecastError);
  EXPECT_THROW(cross({0, 10, 10}, {0.1, 0.2, 0.3}), ForecastError);
  EXPECT_THROW(cross({}, {}), ForecastError);
  EXPECT_THROW(cross({-1, 10}, {0.1, 0.2}), ForecastError);
  EXPECT_THROW(cross({0, 10}, {0.1, std::numeric_limits<double>::infinity()}), ForecastError);
  EXPECT_THROW(cross({0, 10}, {0.1, 0.2}, kNaN), ForecastError);
}

stats::CellTable table(const std::vector<std::string>& cells, const Steps& steps, const std::vector<Values>& rows) {
  stats::CellTable t;
  t.cells = cells;
  t.steps = steps;
  t.values.resize(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(steps.size()));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t c = 0; c < steps.size(); ++c) {
      t.values(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = rows[r][c];
    }
  }
  return t;
}

TEST(CrossingComparison, CategoriesErrorsAndSpanOnAHandTable) {
  const std::vector<std::string> cells{"A", "B", "C", "D", "E", "F"};
  const Steps steps{0, 10, 20, 30};
  // measured: A 15, B 25, C 8 (0.4/0.5*10), D never, E above at init, F 30.
  const auto measured = table(cells, steps,
                              {{0.1, 0.3, 0.7, 0.9},
                               {0.0, 0.0, 0.4, 0.6},
                               {0.1, 0.6, 0.6, 0.6},
                               {0.1, 0.1, 0.1, 0.1},
                               {0.9, 0.9, 0.9, 0.9},
                               {0.2, 0.2, 0.2, 0.5}});
  // predicted: A 17.5 (10 + 0.3/0.4*10), B 25, C never, D never, E 5 (0.4/0.8*10), F above at init.
  const auto predicted = table(cells, steps,
                               {{0.1, 0.2, 0.6, 0.9},
                                {0.0, 0.0, 0.3, 0.7},
                                {0.1, 0.2, 0.2, 0.2},
                                {0.1, 0.1, 0.1, 0.1},
                                {0.1, 0.9, 0.9, 0.9},
                                {0.6, 0.6, 0.6, 0.6}});
  const auto cmp = compare_crossings(predicted, measured);
  ASSERT_EQ(cmp.cells.size(), 6u);
  EXPECT_EQ(cmp.cells[0].category, CrossingCategory::both_cross);
  EXPECT_DOUBLE_EQ(cmp.cells[0].relative_error, 2.5 / 15.0);
  EXPECT_FALSE(cmp.cells[0].within_tolerance);
  EXPECT_EQ(cmp.cells[1].category, CrossingCategory::both_cross);
  EXPECT_DOUBLE_EQ(cmp.cells[1].relative_error, 0.0);
  EXPECT_TRUE(cmp.cells[1].within_tolerance);
  EXPECT_EQ(cmp.cells[2].category, CrossingCategory::only_measured);
  EXPECT_EQ(cmp.cells[3].category, CrossingCategory::neither);
  EXPECT_EQ(cmp.cells[4].category, CrossingCategory::measured_above_at_init);
  EXPECT_EQ(cmp.cells[5].category, CrossingCategory::predicted_above_at_init);
  EXPECT_TRUE(std::isnan(cmp.cells[2].relative_error));

  const auto& s = cmp.summary;
  EXPECT_EQ(s.cells, 6);
  EXPECT_EQ(s.both_cross, 2);
  EXPECT_EQ(s.within_tolerance, 1);
  EXPECT_EQ(s.only_measured, 1);
  EXPECT_EQ(s.only_predicted, 0);
  EXPECT_EQ(s.neither, 1);
  EXPECT_EQ(s.measured_above_at_init, 1);
  EXPECT_EQ(s.predicted_above_at_init, 1);
  EXPECT_EQ(s.both_above_at_init, 0);
  EXPECT_EQ(s.undetermined, 0);
  EXPECT_EQ(s.differ_in_category, 3);  // C, E, F
  EXPECT_EQ(s.measured_crossing, 4);   // A, B, C, F
  EXPECT_DOUBLE_EQ(s.measured_span, 30.0 / 8.0);
  EXPECT_DOUBLE_EQ(s.predicted_span, 25.0 / 5.0);
  EXPECT_DOUBLE_EQ(s.median_relative_error, 0.5 * (2.5 / 15.0));
  EXPECT_EQ(s.to_string(), "2/6 both cross, 1/2 within 15%, 3/6 differ in category, measured span 3.75x");
}

TEST(CrossingComparison, ToleranceIsInclusiveAndOtherCategories) {
  // measured crosses at 20, predicted at 23: |23 - 20| / 20 = 0.15 exactly -> within 15%.
  const Steps steps{0, 20, 23};
  const auto measured =
      table({"a", "b", "c", "d"}, steps, {{0.1, 0.5, 0.5}, {0.1, 0.1, 0.1}, {0.7, 0.7, 0.7}, {kNaN, kNaN, kNaN}});
  const auto predicted =
      table({"a", "b", "c", "d"}, steps, {{0.1, 0.2, 0.5}, {0.1, 0.1, 0.9}, {0.7, 0.7, 0.7}, {0.1, 0.1, 0.9}});
  const auto cmp = compare_crossings(predicted, measured);
  EXPECT_EQ(cmp.cells[0].category, CrossingCategory::both_cross);
  EXPECT_TRUE(cmp.cells[0].within_tolerance);
  EXPECT_EQ(cmp.cells[1].category, CrossingCategory::only_predicted);
  EXPECT_EQ(cmp.cells[2].category, CrossingCategory::both_above_at_init);
  EXPECT_EQ(cmp.cells[3].category, CrossingCategory::undetermined);
  EXPECT_EQ(cmp.summary.differ_in_category, 1);  // b; d is undetermined, not "differing"
  EXPECT_EQ(cmp.summary.undetermined, 1);
  EXPECT_DOUBLE_EQ(cmp.summary.measured_span, 1.0);
  // A tighter tolerance excludes it.
  CrossingOptions o;
  o.tolerance = 0.1;
  EXPECT_EQ(compare_crossings(predicted, measured, o).summary.within_tolerance, 0);
}

TEST(CrossingComparison, FindCrossingsOnATable) {
  const auto t = table({"a", "b"}, {0, 10, 20}, {{0.1, 0.3, 0.9}, {0.7, 0.7, 0.7}});
  const auto c = find_crossings(t);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_DOUBLE_EQ(c[0].time, 10.0 + 0.2 / 0.6 * 10.0);
  EXPECT_EQ(c[1].status, CrossingStatus::above_at_init);
  auto bad = t;
  bad.values(1, 2) = std::numeric_limits<double>::infinity();
  EXPECT_THROW(find_crossings(bad), ForecastError);
  bad.values.resize(2, 2);
  EXPECT_THROW(find_crossings(bad), ForecastError);
}

TEST(CrossingComparison, CellsOnDifferentStepGrids) {
  // Measured every 10 steps crosses at 15; predicted every 4 steps: (12, 0.4) -> (16, 0.6) reaches 0.5 at 14.
  const auto c = compare_cell_crossing("x", Steps{0, 4, 8, 12, 16}, Values{0.0, 0.1, 0.2, 0.4, 0.6}, Steps{0, 10, 20},
                                       Values{0.1, 0.3, 0.7});
  EXPECT_EQ(c.cell, "x");
  EXPECT_EQ(c.category, CrossingCategory::both_cross);
  EXPECT_DOUBLE_EQ(c.predicted.time, 14.0);
  EXPECT_DOUBLE_EQ(c.measured.time, 15.0);
  EXPECT_DOUBLE_EQ(c.relative_error, 1.0 / 15.0);
  EXPECT_TRUE(c.within_tolerance);
  // The burn-in default is the measured series' first step, for both sides: the predicted series starts at 5 and
  // cannot tell y(0), so it is undetermined.
  const auto u = compare_cell_crossing("y", Steps{5, 10}, Values{0.1, 0.9}, Steps{0, 10}, Values{0.1, 0.9});
  EXPECT_EQ(u.predicted.status, CrossingStatus::undetermined);
  EXPECT_EQ(u.category, CrossingCategory::undetermined);
  EXPECT_FALSE(u.differs);
  // Summary over both: 1 both-cross (within), 1 undetermined; measured span 15 / 5 (y measured crosses at 5).
  const auto s = summarize_crossings({c, u});
  EXPECT_EQ(s.cells, 2);
  EXPECT_EQ(s.both_cross, 1);
  EXPECT_EQ(s.undetermined, 1);
  EXPECT_EQ(s.within_tolerance, 1);
  EXPECT_EQ(s.measured_crossing, 2);
  EXPECT_DOUBLE_EQ(s.measured_span, 3.0);
  EXPECT_EQ(s.burn_in, 0.0);
  EXPECT_THROW(summarize_crossings({}), ForecastError);
  // Wide spans print as whole numbers: measured crossings at 5 (u) and 1922 = 5 * 384.4 (w, both cross).
  const auto w = compare_cell_crossing("w", Steps{0, 1922}, Values{0.0, 0.5}, Steps{0, 1922}, Values{0.0, 0.5});
  EXPECT_EQ(summarize_crossings({u, w}).to_string(),
            "1/2 both cross, 1/1 within 15%, 0/2 differ in category, measured span 384x");
  EXPECT_THROW(compare_cell_crossing("z", Steps{0, 10}, Values{0.1}, Steps{0, 10}, Values{0.1, 0.2}), ForecastError);
}

TEST(Crossing, ReCrossingsAreCounted) {
  // Up at 5, back below at 20 (1), up at 30, tied at theta at 40 (still >= theta), below at 50 (2).
  const auto c = cross({0, 10, 20, 30, 40, 50}, {0.4, 0.6, 0.3, 0.7, 0.5, 0.49});
  EXPECT_DOUBLE_EQ(c.time, 5.0);
  EXPECT_EQ(c.recrossings, 2);
  EXPECT_EQ(cross({0, 10, 20, 30}, {0.1, 0.3, 0.7, 0.9}).recrossings, 0);
  // A 1/32-step fraction held at the threshold for two records, then back: one re-crossing.
  EXPECT_EQ(cross({0, 10, 20, 30, 40}, {15.0 / 32, 16.0 / 32, 16.0 / 32, 15.0 / 32, 15.0 / 32}).recrossings, 1);
}

TEST(Crossing, DefaultBurnInIsHalfAPercentOfTheRun) {
  EXPECT_EQ(default_burn_in(1000), 5);
  EXPECT_EQ(default_burn_in(2000), 10);
  EXPECT_EQ(default_burn_in(399), 1);
  EXPECT_EQ(default_burn_in(199), 0);
  EXPECT_THROW(default_burn_in(-1), ForecastError);
}

// Five cells on steps 0..1000: measured crossings at 5 (a 1/16-size group), 50, 60, 500 and none; predicted at
// 5, 55 (error 0.1), 90 (0.5), 520 (0.04) and 800.
TEST(CrossingComparison, MinimumGroupSizeReCrossingsAndDecades) {
  const Steps steps = {0, 5, 50, 55, 60, 90, 500, 520, 800, 1000};
  auto step_fn = [&](double t_cross) {  // 0.1 before t_cross, theta at it (crossing exactly there), 0.9 after
    Values y;
    for (auto t : steps) y.push_back(double(t) > t_cross ? 0.9 : double(t) == t_cross ? 0.5 : 0.1);
    return y;
  };
  stats::CellTable measured, predicted;
  measured.steps = predicted.steps = steps;
  const std::vector<double> mt = {5, 50, 60, 500, 2000}, pt = {5, 55, 90, 520, 800};
  measured.values.resize(5, Eigen::Index(steps.size()));
  predicted.values.resize(5, Eigen::Index(steps.size()));
  for (int c = 0; c < 5; ++c) {
    std::string name = "c";  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string
    name += std::to_string(c);
    measured.cells.push_back(name);
    const auto ym = step_fn(mt[std::size_t(c)]), yp = step_fn(pt[std::size_t(c)]);
    for (std::size_t k = 0; k < steps.size(); ++k) {
      measured.values(c, Eigen::Index(k)) = ym[k];
      predicted.values(c, Eigen::Index(k)) = yp[k];
    }
  }
  measured.values(2, 9) = 0.1;  // cell 2 falls back below theta at the last step: a measured re-crossing
  predicted.cells = measured.cells;
  CrossingOptions o;
  o.min_group_size = 64;
  const std::vector<std::int64_t> sizes = {16, 1024, 1024, 256, 64};
  const auto cmp = compare_crossings(predicted, measured, o, sizes);
  EXPECT_TRUE(cmp.cells[0].below_min_group_size);
  EXPECT_FALSE(cmp.cells[4].below_min_group_size);  // inclusive: 64 >= 64
  const auto& s = cmp.summary;
  EXPECT_EQ(s.below_min_group_size, 1);
  EXPECT_EQ(s.cells, 4);
  EXPECT_EQ(s.both_cross, 3);
  EXPECT_EQ(s.only_predicted, 1);
  EXPECT_EQ(s.within_tolerance, 2);  // 0.1 and 0.04
  EXPECT_EQ(s.measured_recrossing, 1);
  EXPECT_DOUBLE_EQ(s.measured_span, 10.0);  // 500 / 50: the small cell's 5 is left out
  ASSERT_EQ(s.by_decade.size(), 2u);        // [10, 100): cells 1, 2; [100, 1000): cell 3
  EXPECT_DOUBLE_EQ(s.by_decade[0].lo, 10.0);
  EXPECT_EQ(s.by_decade[0].measured_crossing, 2);
  EXPECT_EQ(s.by_decade[0].within_tolerance, 1);
  EXPECT_DOUBLE_EQ(s.by_decade[0].median_relative_error, 0.3);  // (0.1 + 0.5) / 2
  EXPECT_DOUBLE_EQ(s.by_decade[1].lo, 100.0);
  EXPECT_EQ(s.by_decade[1].within_tolerance, 1);
  EXPECT_DOUBLE_EQ(s.by_decade[1].median_relative_error, 0.04);
  EXPECT_EQ(s.to_string(),
            "3/4 both cross, 2/3 within 15%, 1/4 differ in category, measured span 10x; 1 measured re-crossing; "
            "1 cell below 64 coordinates left out");
  // Without sizes nothing is left out.
  EXPECT_EQ(compare_crossings(predicted, measured, o).summary.cells, 5);
  EXPECT_THROW(compare_crossings(predicted, measured, o, std::vector<std::int64_t>{1, 2}), ForecastError);
}

TEST(CrossingComparison, MismatchedTablesThrow) {
  const auto a = table({"a", "b"}, {0, 10}, {{0.1, 0.2}, {0.1, 0.2}});
  const auto b = table({"b", "a"}, {0, 10}, {{0.1, 0.2}, {0.1, 0.2}});
  const auto c = table({"a", "b"}, {0, 20}, {{0.1, 0.2}, {0.1, 0.2}});
  EXPECT_THROW(compare_crossings(a, b), ForecastError);
  EXPECT_THROW(compare_crossings(a, c), ForecastError);
  auto d = a;
  d.values.resize(2, 3);
  EXPECT_THROW(compare_crossings(d, a), ForecastError);
  const auto empty = table({}, {0, 10}, {});
  EXPECT_THROW(compare_crossings(empty, empty), ForecastError);
}

}  // namespace
}  // namespace wbaudit::forecast
