// The analytic grid across the exponent range (forecast/joint_grid.hpp) against a brute-force projection: synthetic
// weights spanning zero, subnormals, normals and saturation of every format, proposals around the erasure threshold,
// and q_F(q_F(w) + s u) == q_F(w) counted per coordinate with sim/precision's exact scalar rounding (the grid never
// calls it). Tolerances are the approximation sizes documented in docs/forecasting.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "forecast/error.hpp"
#include "forecast/joint_grid.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"

namespace wbaudit::forecast {
namespace {

struct Sample {
  std::vector<float> w, u;
};

// |w| log-uniform over [lo, hi], 2% exact zeros, 1% exactly on powers of two (the binade edge), 1% exactly on max
// finite where a w bin resolves it (floating formats with M + 1 <= w_bits: elsewhere such a point mass is spread
// over its bin, a documented limit that fp32 training does not meet); u = +-|w| 2^(-M-1) 2^N(0,1.5) (floating) or
// +-scale/2 2^N(0,1.5) (intK), 1% u == 0.
Sample synthetic(const sim::FormatSpec& f, double lo, double hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> spread(0, 1.5);
  Sample s;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double w = std::exp2(std::log2(lo) + unit(rng) * (std::log2(hi) - std::log2(lo)));
    const double r = unit(rng);
    if (r < 0.02) {
      w = 0;
    } else if (r < 0.03) {
      w = std::exp2(std::round(std::log2(w)));
    } else if (r < 0.04 && f.kind == sim::FormatKind::floating &&
               f.man_bits + 1 <= sim::JointHistogramLayout{}.w_bits) {
      w = f.max_finite;
    }
    const double sign_w = unit(rng) < 0.5 ? -1 : 1;
    const double ref = f.kind == sim::FormatKind::integer
                           ? f.int_scale / 2.0
                           : std::max({w, f.min_normal, 0x1p-110}) * std::exp2(-f.man_bits - 1);
    double u = ref * std::exp2(spread(rng)) * (unit(rng) < 0.5 ? -1 : 1);
    if (unit(rng) < 0.01) u = 0;
    s.w.push_back(static_cast<float>(sign_w * w));
    s.u.push_back(static_cast<float>(u));
  }
  return s;
}

double brute_force_erased(const sim::FormatSpec& f, const Sample& s, double lr_scale, double& nonzero) {
  const sim::FormatParams p = sim::format_params(f);
  double erased = 0;
  nonzero = 0;
  for (std::size_t i = 0; i < s.w.size(); ++i) {
    const auto us = static_cast<float>(lr_scale * static_cast<double>(s.u[i]));
    if (s.u[i] == 0.0f) continue;
    nonzero += 1;
    const auto wq = static_cast<float>(sim::round_nearest(p, static_cast<double>(s.w[i])));
    const float after = sim::writeback_value(p, sim::WritebackPolicy{}, sim::RngKey{}, 0, wq, us).value;
    erased += after == wq;
  }
  return erased;
}

TEST(JointGrid, MatchesBruteForceAcrossTheExponentRange) {
  const sim::JointHistogramLayout layout;
  const char* floating[] = {"bf16", "fp16", "e5m2", "e4m3", "e3m2", "e2m3", "e2m1"};
  const double scales[] = {1.0, 0.25, 4.0, 0.3, 1.7};
  std::uint64_t seed = 11;
  for (const char* name : floating) {
    const sim::FormatSpec f = sim::format_from_name(name);
    // From a quarter of the smallest subnormal to twice max finite. bf16 shares fp32's exponent range: its
    // subnormals are fp32 subnormals, whose proposals would underflow fp32, so it is sampled on [2^-120, 2^-100]
    // and [2^100, fp32 max] (saturation).
    const bool bf16 = std::string(name) == "bf16";
    for (const bool top : {false, true}) {
      const double lo = bf16 ? (top ? 0x1p100 : 0x1p-120) : f.min_subnormal / 4;
      const double hi = bf16 ? (top ? 3.4e38 : 0x1p-100) : 2 * f.max_finite;
      const Sample s = synthetic(f, lo, hi, seed++);
      std::vector<std::uint64_t> keys;
      std::vector<std::int64_t> counts;
      joint_pairs(layout, s.w, s.u, keys, counts);
      for (double sc : scales) {
        double nonzero = 0;
        const double exact = brute_force_erased(f, s, sc, nonzero) / nonzero;
        const double grid = joint_erased_count(layout, keys, counts, f, sc) / nonzero;
        const bool pow2 = sc == std::exp2(std::round(std::log2(sc)));
        // Exact for M + 1 <= w_bits at power-of-two scales (thresholds on bin edges, q(w) resolved per bin);
        // otherwise the within-bin uniform shares.
        const double tol = (pow2 && f.man_bits + 1 <= layout.w_bits) ? 1e-9 : 1e-3;
        std::printf("  %-5s %s s=%-4g exact %.6f grid %.6f diff %+.2e\n", name, top ? "top" : "low", sc, exact, grid,
                    grid - exact);
        EXPECT_NEAR(grid, exact, tol) << name << " s " << sc;
        EXPECT_GT(exact, 0.02) << "the sample must sit near the threshold";
        EXPECT_LT(exact, 0.95);
      }
    }
  }
}

TEST(JointGrid, IntegerFormatsWithTheirScale) {
  const sim::JointHistogramLayout layout;
  const double scales[] = {1.0, 0.5, 0.3, 2.5};
  std::uint64_t seed = 101;
  for (int k : {2, 4, 8}) {
    const double absmax = 0.37;
    const sim::FormatSpec f = sim::int_format(k, sim::int_scale_for_absmax(k, absmax));
    const Sample s = synthetic(f, f.int_scale / 64, 1.3 * absmax, seed++);
    std::vector<std::uint64_t> keys;
    std::vector<std::int64_t> counts;
    joint_pairs(layout, s.w, s.u, keys, counts);
    for (double sc : scales) {
      double nonzero = 0;
      const double exact = brute_force_erased(f, s, sc, nonzero) / nonzero;
      const double grid = joint_erased_count(layout, keys, counts, f, sc) / nonzero;
      std::printf("  int%d s=%-4g exact %.6f grid %.6f diff %+.2e\n", k, sc, exact, grid, grid - exact);
      EXPECT_NEAR(grid, exact, 1e-3) << "int" << k << " s " << sc;
    }
  }
}

// Hand cases: the rule's corners, one coordinate at a time.
TEST(JointGrid, HandCases) {
  const sim::JointHistogramLayout layout;
  const sim::FormatSpec e4m3 = sim::format_from_name("e4m3");
  auto erased = [&](float w, float u, double s = 1.0) {
    std::vector<std::uint64_t> keys;
    std::vector<std::int64_t> counts;
    const std::vector<float> wv{w}, uv{u};
    joint_pairs(layout, wv, uv, keys, counts);
    return joint_erased_count(layout, keys, counts, e4m3, s);
  };
  // Normal: gap of 1 in [1, 2) is 2^-3; half gap 2^-4 is a tie (1.0 has even level: erased), just above applies.
  EXPECT_EQ(erased(1.25f, 0x1p-5f), 1.0);
  EXPECT_EQ(erased(1.25f, 0x1.2p-4f), 0.0);
  EXPECT_EQ(erased(1.0f, 0x1p-4f), 1.0);    // tie away from 1.0 (even): stays
  EXPECT_EQ(erased(1.125f, 0x1p-4f), 0.0);  // tie away from 1.125 (odd): moves
  // Binade edge: toward zero from 1.0 the gap is 2^-4 (half 2^-5), away 2^-3 (half 2^-4); 1.5 2^-5 lies between.
  EXPECT_EQ(erased(1.0f, -0x1.8p-5f), 0.0);
  EXPECT_EQ(erased(1.0f, 0x1.8p-5f), 1.0);
  EXPECT_EQ(erased(448.0f, 1000.0f), 1.0);  // saturation: away from max finite is erased
  EXPECT_EQ(erased(448.0f, -20.0f), 0.0);   // toward: gap 32, half 16 < 20 applies
  EXPECT_EQ(erased(448.0f, -10.0f), 1.0);
  EXPECT_EQ(erased(0.0f, 0x1p-11f), 1.0);  // zero weight: half the smallest subnormal 2^-9 is 2^-10
  EXPECT_EQ(erased(0.0f, 0x1p-10f), 1.0);  // tie at 0 (even): stays
  EXPECT_EQ(erased(0.0f, 0x1.1p-10f), 0.0);
  EXPECT_EQ(erased(0x1p-8f, 0x1.1p-10f), 0.0);  // subnormal weight: gap 2^-9 whatever its size
  EXPECT_EQ(erased(0x1p-8f, 0x1p-11f), 1.0);
  EXPECT_EQ(erased(1.25f, 0x1p-5f, 4.0), 0.0);  // s = 4: 2^-3 is beyond half the gap
}

TEST(JointGrid, BadInput) {
  const sim::JointHistogramLayout layout;
  const sim::FormatSpec f = sim::format_from_name("e4m3");
  const std::vector<std::uint64_t> keys{5, 3};
  const std::vector<std::int64_t> counts{1, 1};
  EXPECT_THROW(joint_erased_count(layout, keys, counts, f, 1.0), ForecastError);  // unsorted
  EXPECT_THROW(joint_erased_count(layout, {}, {}, f, 0.0), ForecastError);        // scale
  sim::Trace t;
  t.mode = "reference";
  t.schema = sim::kTraceSchemaV1;
  t.recorded_steps = {0};
  sim::GroupTrace g;
  g.name = "fc.weight";
  t.groups.push_back(g);
  try {
    analytic_series(t, "fc.weight", "e4m3");
    FAIL() << "expected an error";
  } catch (const ForecastError& e) {
    EXPECT_NE(std::string(e.what()).find("no joint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("regenerate"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wbaudit::forecast
