#include <gtest/gtest.h>

#include <vector>

#include "stats/summation.hpp"

using wbaudit::stats::compensated_sum;

TEST(Summation, RecoversTermsLostByNaiveSummation) {
  // Naive left-to-right: 1 + 1e100 = 1e100, + 1 = 1e100, - 1e100 = 0. The exact sum is 2.
  std::vector<double> const v = {1.0, 1e100, 1.0, -1e100};
  EXPECT_EQ(compensated_sum(v), 2.0);
}

TEST(Summation, ManySmallTermsAfterALargeOne) {
  // 1 + 1e6 * 1e-16: naive summation returns exactly 1 (each 1e-16 is below half an ulp of 1).
  std::vector<double> v = {1.0};
  for (int i = 0; i < 1000000; ++i) {
    v.push_back(1e-16);
  }
  EXPECT_NEAR(compensated_sum(v), 1.0 + 1e-10, 1e-15);
}
