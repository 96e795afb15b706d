// Time alignment: interpolation values by hand, extrapolation refused, missing values never bridged.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "forecast/alignment.hpp"
#include "forecast/error.hpp"

namespace wbaudit::forecast {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Steps = std::vector<std::int64_t>;
using Values = std::vector<double>;

TEST(Alignment, RecordedStepsAreExactAndOthersInterpolated) {
  const Steps steps{0, 10, 30};
  const Values values{1.0, 2.0, 6.0};
  // 5: halfway 1 -> 2; 20: halfway 2 -> 6; 25: 2 + 0.75 * 4.
  const auto out = align_series(steps, values, Steps{0, 5, 10, 20, 25, 30});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0], 1.0);
  EXPECT_DOUBLE_EQ(out[1], 1.5);
  EXPECT_EQ(out[2], 2.0);
  EXPECT_DOUBLE_EQ(out[3], 4.0);
  EXPECT_DOUBLE_EQ(out[4], 5.0);
  EXPECT_EQ(out[5], 6.0);
  EXPECT_TRUE(align_series(steps, values, Steps{}).empty());
}

TEST(Alignment, ExtrapolationIsRefusedOrMarkedMissing) {
  const Steps steps{10, 20};
  const Values values{0.1, 0.2};
  EXPECT_THROW(align_series(steps, values, Steps{0, 10}), ForecastError);
  EXPECT_THROW(align_series(steps, values, Steps{20, 21}), ForecastError);
  const auto out = align_series(steps, values, Steps{5, 15, 25}, OutOfRange::missing);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_DOUBLE_EQ(out[1], 0.15);
  EXPECT_TRUE(std::isnan(out[2]));
}

TEST(Alignment, MissingValuesAreNotBridged) {
  const auto out = align_series(Steps{0, 10, 30}, Values{1.0, kNaN, 6.0}, Steps{0, 5, 10, 20, 30});
  EXPECT_EQ(out[0], 1.0);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_EQ(out[4], 6.0);
}

TEST(Alignment, BadInputThrows) {
  EXPECT_THROW(align_series(Steps{0, 10}, Values{1.0}, Steps{0}), ForecastError);
  EXPECT_THROW(align_series(Steps{0, 0}, Values{1.0, 2.0}, Steps{0}), ForecastError);
  EXPECT_THROW(align_series(Steps{}, Values{}, Steps{0}), ForecastError);
  EXPECT_THROW(align_series(Steps{0, 10}, Values{1.0, 2.0}, Steps{10, 0}), ForecastError);
  EXPECT_THROW(align_series(Steps{0, 10}, Values{1.0, std::numeric_limits<double>::infinity()}, Steps{0}),
               ForecastError);
}

TEST(Alignment, CommonStepsIsTheIntersection) {
  EXPECT_EQ(common_steps({{0, 10, 20, 30}, {0, 20, 30, 40}, {20, 30}}), (Steps{20, 30}));
  EXPECT_EQ(common_steps({{1, 2, 3}}), (Steps{1, 2, 3}));
  EXPECT_THROW(common_steps({{0, 10}, {5, 15}}), ForecastError);
  EXPECT_THROW(common_steps({}), ForecastError);
  EXPECT_THROW(common_steps({{0, 10}, {10, 5}}), ForecastError);
}

}  // namespace
}  // namespace wbaudit::forecast
