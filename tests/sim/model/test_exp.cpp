// The decoder's float exp (sim/model/detail/exp.hpp) against std::exp in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sim/model/detail/exp.hpp"

namespace {

using wbaudit::sim::detail::exp_poly;

TEST(ExpPoly, WithinTwoUlpOfExpOverTheClampedRange) {
  // 4 million evenly spaced inputs over [-87.33, 88.37] (every reduction interval n, 2^12 points in each) and 1 million
  // over [-1, 1], relative to exp in double: <= 2^-22 (two ulp at the bottom of a binade).
  double worst = 0.0;
  float worst_x = 0.0f;
  const auto check = [&](double lo, double hi, int points) {
    for (int i = 0; i <= points; ++i) {
      const float x = static_cast<float>(lo + (hi - lo) * i / points);
      const double exact = std::exp(static_cast<double>(x));
      const double rel = std::fabs(static_cast<double>(exp_poly(x)) - exact) / exact;
      if (rel > worst) {
        worst = rel;
        worst_x = x;
      }
    }
  };
  check(-87.33, 88.37, 1 << 22);
  check(-1.0, 1.0, 1 << 20);
  EXPECT_LE(worst, std::ldexp(1.0, -22)) << "at x = " << worst_x;
  EXPECT_GT(worst, 0.0);  // not std::exp itself
}

TEST(ExpPoly, ExactPointsClampsAndNaN) {
  EXPECT_EQ(exp_poly(0.0f), 1.0f);
  EXPECT_EQ(exp_poly(-0.0f), 1.0f);
  // Below the range: about the smallest normal float (never a subnormal or 0); above it: finite, about 2.4e38.
  const float tiny = std::numeric_limits<float>::min();
  for (const float x : {-1000.0f, -std::numeric_limits<float>::infinity()}) {
    EXPECT_GT(exp_poly(x), 0.999f * tiny) << x;
    EXPECT_LT(exp_poly(x), 1.001f * tiny) << x;
  }
  EXPECT_TRUE(std::isfinite(exp_poly(1000.0f)));
  EXPECT_GT(exp_poly(1000.0f), 2.3e38f);
  EXPECT_TRUE(std::isnan(exp_poly(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
