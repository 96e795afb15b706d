#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <bit>
#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <random>
#include <stdexcept>

#include "stats/stats.hpp"

using namespace wbaudit::stats;

namespace {

std::vector<double> normal_sample(std::uint64_t seed, int n) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> x(static_cast<std::size_t>(n));
  for (auto& v : x) {
    v = d(gen);
  }
  return x;
}

struct MeanOf {
  std::vector<double> const* x;
  double operator()(std::span<std::int64_t const> idx) const {
    double s = 0;
    for (auto i : idx) {
      s += (*x)[std::size_t(i)];
    }
    return s / double(idx.size());
  }
};

// A statistic whose floating-point result depends on summation order (squares of large and small terms), so
// any reordering between threads would show up bitwise.
struct MeanSquareOf {
  std::vector<double> const* x;
  double operator()(std::span<std::int64_t const> idx) const {
    double s = 0;
    for (auto i : idx) {
      s += (*x)[std::size_t(i)] * (*x)[std::size_t(i)] * 1e3 + 1e-7;
    }
    return s / double(idx.size());
  }
};

// Bit patterns, so that the comparison is bitwise (distinguishes -0.0 from 0.0).
std::vector<std::uint64_t> bits_of(std::vector<double> const& v) {
  std::vector<std::uint64_t> bits;
  bits.reserve(v.size());
  for (double x : v) {
    bits.push_back(std::bit_cast<std::uint64_t>(x));
  }
  return bits;
}

}  // namespace

// Coverage of the mean of N(0, 1) samples of size 40 by 95% intervals, over 600 independent data sets and
// bootstrap seeds. Percentile and BCa intervals for a mean cover at about 0.93-0.95 at this n; 600 data sets give a
// binomial standard error of 0.009, so |coverage - 0.95| < 0.04 fails only on a real defect. The mean width must
// also be close to the normal-theory width 2 * 1.96 / sqrt(40) = 0.620 (an interval that is too wide would cover
// trivially). Run on Kokkos::Serial: 1200 short bootstraps are dominated by thread start-up on a shared machine,
// and thread independence is tested separately below.
TEST(Bootstrap, NormalMeanCoverageIsNearNominal) {
  int const n = 40, datasets = 600;
  for (auto method : {IntervalMethod::percentile, IntervalMethod::bca}) {
    int covered = 0;
    double width = 0;
    for (int k = 0; k < datasets; ++k) {
      auto const x = normal_sample(1000 + std::uint64_t(k), n);
      BootstrapSpec spec;
      spec.seed = 77 + std::uint64_t(k);
      spec.resamples = 999;
      spec.confidence = 0.95;
      spec.method = method;
      auto const ci = bootstrap(Kokkos::Serial{}, n, MeanOf{&x}, spec);
      covered += (ci.lower <= 0.0 && 0.0 <= ci.upper);
      width += ci.upper - ci.lower;
    }
    double const coverage = double(covered) / datasets;
    EXPECT_NEAR(coverage, 0.95, 0.04) << to_string(method);
    EXPECT_NEAR(width / datasets, 2 * 1.959964 / std::sqrt(double(n)), 0.06) << to_string(method);
  }
}

TEST(Bootstrap, IdenticalOnSerialAndOpenMP) {
  auto x = normal_sample(5, 200);
  x[3] = 1e6;  // a large term makes summation order visible
  for (auto method : {IntervalMethod::percentile, IntervalMethod::bca}) {
    for (auto resampling : {Resampling::units, Resampling::moving_block}) {
      BootstrapSpec spec;
      spec.seed = 2718;
      spec.resamples = 4001;
      spec.method = method;
      spec.resampling = resampling;
      spec.block_length = 7;
      auto const serial = bootstrap_replicates(Kokkos::Serial{}, 200, MeanSquareOf{&x}, spec);
      auto const openmp = bootstrap_replicates(Kokkos::OpenMP{}, 200, MeanSquareOf{&x}, spec);
      auto const host = bootstrap_replicates(Kokkos::DefaultHostExecutionSpace{}, 200, MeanSquareOf{&x}, spec);
      ASSERT_EQ(serial.replicates.size(), 4001u);
      if (method == IntervalMethod::bca) {  // leave one unit out, or one block of 7 steps: 200 - 7 + 1 = 194
        EXPECT_EQ(serial.jackknife.size(), resampling == Resampling::units ? 200u : 194u);
      }
      EXPECT_EQ(bits_of(serial.replicates), bits_of(openmp.replicates));
      EXPECT_EQ(bits_of(serial.replicates), bits_of(host.replicates));
      EXPECT_EQ(serial.jackknife, openmp.jackknife);
      EXPECT_EQ(serial.interval.lower, openmp.interval.lower);
      EXPECT_EQ(serial.interval.upper, openmp.interval.upper);
      EXPECT_EQ(serial.interval.lower, host.interval.lower);
      EXPECT_EQ(serial.interval.upper, host.interval.upper);
    }
  }
}

TEST(Bootstrap, IntervalRecordsItsProvenance) {
  auto const x = normal_sample(1, 30);
  BootstrapSpec spec;
  spec.seed = 123456789012345ULL;
  spec.resamples = 500;
  spec.confidence = 0.9;
  spec.method = IntervalMethod::percentile;
  auto const ci = bootstrap(30, MeanOf{&x}, spec);
  EXPECT_EQ(ci.seed, 123456789012345ULL);
  EXPECT_EQ(ci.resamples, 500);
  EXPECT_EQ(ci.confidence, 0.9);
  EXPECT_EQ(ci.method, IntervalMethod::percentile);
  EXPECT_EQ(ci.resampling, Resampling::units);
  EXPECT_EQ(ci.n_units, 30);
  double plain_mean = 0;
  for (double v : x) {
    plain_mean += v / 30;
  }
  EXPECT_NEAR(ci.estimate, plain_mean, 1e-15);
  auto const text = ci.describe();
  EXPECT_NE(text.find("90% percentile, units n=30, 500 resamples, seed 123456789012345"), std::string::npos) << text;
}

// With B = 41 and 95%, the type-7 positions are exact: (B - 1) * 0.025 = 1 and (B - 1) * 0.975 = 39.
TEST(Bootstrap, PercentileReadsTheSortedReplicates) {
  auto const x = normal_sample(8, 25);
  BootstrapSpec spec;
  spec.seed = 4;
  spec.resamples = 41;
  spec.method = IntervalMethod::percentile;
  auto const r = bootstrap_replicates(Kokkos::DefaultHostExecutionSpace{}, 25, MeanOf{&x}, spec);
  auto sorted = r.replicates;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(r.interval.lower, sorted[1]);
  EXPECT_EQ(r.interval.upper, sorted[39]);
}

// For the mean, the jackknife values are (sum x - x_i) / (n - 1) and the BCa acceleration is the closed form
// a = sum (x_i - xbar)^3 / (6 (sum (x_i - xbar)^2)^(3/2)). z0 is Phi^-1 of the share of replicates below the estimate.
TEST(Bootstrap, BcaJackknifeAccelerationAndBiasCorrection) {
  std::vector<double> x = normal_sample(21, 35);
  for (auto& v : x) {
    v = std::exp(v);  // skewed, so a != 0
  }
  int const n = 35;
  double sum = 0;
  for (double v : x) {
    sum += v;
  }
  double const mean = sum / n;
  BootstrapSpec spec;
  spec.seed = 9;
  spec.resamples = 2000;
  spec.method = IntervalMethod::bca;
  auto const r = bootstrap_replicates(Kokkos::DefaultHostExecutionSpace{}, n, MeanOf{&x}, spec);
  ASSERT_EQ(r.jackknife.size(), std::size_t(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(r.jackknife[std::size_t(i)], (sum - x[std::size_t(i)]) / (n - 1), 1e-12);
  }
  double s2 = 0, s3 = 0;
  for (double v : x) {
    s2 += (v - mean) * (v - mean);
    s3 += (v - mean) * (v - mean) * (v - mean);
  }
  double const a = s3 / (6 * std::pow(s2, 1.5));
  EXPECT_GT(a, 0.01);
  EXPECT_NEAR(r.interval.acceleration, a, 1e-9);
  int below = 0;
  for (double v : r.replicates) {
    below += v < r.interval.estimate;
  }
  boost::math::normal_distribution<double> const phi;
  EXPECT_NEAR(r.interval.bias_correction, boost::math::quantile(phi, below / 2000.0), 1e-12);
  // right-skewed data: the BCa interval is shifted right of the percentile interval
  spec.method = IntervalMethod::percentile;
  auto const pct = bootstrap(n, MeanOf{&x}, spec);
  EXPECT_GT(r.interval.upper, pct.upper);
}

// Above kJackknifeGroups units, BCa's jackknife leaves out groups of consecutive units (Efron & Narasimhan's grouped
// jackknife): for the mean, group g = [floor(g n / G), floor((g + 1) n / G)) gives (sum x - sum of the group) /
// (n - its size), and the acceleration is the same formula over those G values (computed here by hand).
TEST(Bootstrap, BcaAboveTheGroupLimitUsesTheGroupedJackknife) {
  int const n = 2537;  // not a multiple of 1000: groups of 2 and 3 units
  std::vector<double> x = normal_sample(5, n);
  for (auto& v : x) {
    v = std::exp(v);
  }
  double sum = 0;
  for (double v : x) {
    sum += v;
  }
  BootstrapSpec spec;
  spec.seed = 3;
  spec.resamples = 400;
  spec.method = IntervalMethod::bca;
  auto const r = bootstrap_replicates(Kokkos::DefaultHostExecutionSpace{}, n, MeanOf{&x}, spec);
  std::int64_t const G = kJackknifeGroups;
  ASSERT_EQ(r.jackknife.size(), std::size_t(G));
  std::vector<double> hand;
  for (std::int64_t g = 0; g < G; ++g) {
    std::int64_t const lo = g * n / G, hi = (g + 1) * n / G;
    double group = 0;
    for (std::int64_t i = lo; i < hi; ++i) {
      group += x[std::size_t(i)];
    }
    hand.push_back((sum - group) / double(n - (hi - lo)));
    EXPECT_NEAR(r.jackknife[std::size_t(g)], hand.back(), 1e-12) << "group " << g;
  }
  double mean = 0;
  for (double v : hand) {
    mean += v;
  }
  mean /= double(G);
  double s2 = 0, s3 = 0;
  for (double v : hand) {
    s2 += (mean - v) * (mean - v);
    s3 += (mean - v) * (mean - v) * (mean - v);
  }
  EXPECT_NEAR(r.interval.acceleration, s3 / (6 * std::pow(s2, 1.5)), 1e-9);
  // At the limit itself the jackknife still leaves out single units.
  std::vector<double> const y(x.begin(), x.begin() + G);
  EXPECT_EQ(bootstrap_replicates(Kokkos::DefaultHostExecutionSpace{}, G, MeanOf{&y}, spec).jackknife.size(),
            std::size_t(G));
}

TEST(Bootstrap, DegenerateSampleGivesAPointInterval) {
  std::vector<double> const x(10, 2.5);
  BootstrapSpec spec;
  spec.resamples = 100;
  auto const ci = bootstrap(10, MeanOf{&x}, spec);
  EXPECT_EQ(ci.lower, 2.5);
  EXPECT_EQ(ci.upper, 2.5);
}

TEST(Bootstrap, BadSpecsAndFailingStatisticsAreErrors) {
  auto const x = normal_sample(2, 10);
  BootstrapSpec spec;
  EXPECT_THROW(bootstrap(1, MeanOf{&x}, spec), StatsError);
  spec.resamples = 1;
  EXPECT_THROW(bootstrap(10, MeanOf{&x}, spec), StatsError);
  spec.resamples = 100;
  spec.confidence = 1.0;
  EXPECT_THROW(bootstrap(10, MeanOf{&x}, spec), StatsError);
  spec.confidence = 0.95;
  spec.resampling = Resampling::moving_block;
  spec.block_length = 10;
  EXPECT_THROW(bootstrap(10, MeanOf{&x}, spec), StatsError);
  spec.resampling = Resampling::units;
  // a statistic that is NaN when unit 0 is drawn twice
  auto nan_stat = [&](std::span<std::int64_t const> idx) {
    return std::count(idx.begin(), idx.end(), 0) >= 2 ? std::nan("") : 1.0;
  };
  try {
    bootstrap(10, nan_stat, spec);
    FAIL() << "expected StatsError";
  } catch (StatsError const& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  auto throwing = [&](std::span<std::int64_t const> idx) {
    if (std::count(idx.begin(), idx.end(), 0) >= 2) {
      throw std::runtime_error("unit 0 twice");
    }
    return 1.0;
  };
  try {
    bootstrap(10, throwing, spec);
    FAIL() << "expected StatsError";
  } catch (StatsError const& e) {
    EXPECT_NE(std::string(e.what()).find("unit 0 twice"), std::string::npos) << e.what();
  }
  EXPECT_THROW(interval_method_from_name("studentized"), StatsError);
  EXPECT_EQ(resampling_from_name("moving_block"), Resampling::moving_block);
}
