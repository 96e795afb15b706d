// Stochastic rounding: exact probabilities (binomial 6-sigma bands over 1e6 draws), unbiasedness, the r-bit dead zone,
// dead-zone SR (nearest outside the dead zone, SR inside), and the bf16 running-sum stall.
#include <gtest/gtest.h>

#include <cmath>

#include "reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace {

constexpr int kDraws = 1000000;

struct RunResult {
  WritebackCounts counts;
  std::vector<float> out;
};

// kDraws coordinates, all with the same (w, u): each coordinate is an independent draw.
RunResult run_constant(const FormatSpec& fmt, WritebackPolicy policy, float w, float u, std::uint64_t seed = 42) {
  Kokkos::View<float*> wv("w", kDraws);
  Kokkos::View<float*> uv("u", kDraws);
  Kokkos::deep_copy(wv, w);
  Kokkos::deep_copy(uv, u);
  RunResult r;
  r.counts = writeback(fmt, policy, RngKey{seed, 7, 3}, wv, uv);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, wv);
  r.out.assign(h.data(), h.data() + kDraws);
  return r;
}

void expect_binomial(std::int64_t k, double p, const char* what) {
  const double mean = kDraws * p, sd = std::sqrt(kDraws * p * (1 - p));
  EXPECT_LE(std::fabs(static_cast<double>(k) - mean), 6 * sd)
      << what << ": " << k << " of " << kDraws << ", expected p = " << p;
}

std::int64_t count_value(const RunResult& r, float v) {
  std::int64_t k = 0;
  for (float x : r.out) {
    k += x == v;
  }
  return k;
}

}  // namespace

TEST(Stochastic, ExactProbabilities) {
  const WritebackPolicy sr{Policy::stochastic, 0};
  struct Case {
    const char* fmt;
    float w, u, up;  // up: the away neighbour, P(up) = p
    double p;
  };
  const Case cases[] = {
      {"bf16", 1.0f, 0.3125f * 0x1p-7f, 1.0f + 0x1p-7f, 0.3125},
      {"bf16", 1.0f, -0.25f * 0x1p-8f, 1.0f - 0x1p-8f, 0.25},  // binade edge: gap below 1 is 2^-8
      {"e2m1", 4.0f, 0.5f, 6.0f, 0.25},
      {"e2m1", -0.5f, 0.125f, 0.0f, 0.25},  // subnormal to zero
      {"e4m3", 448.0f, -8.0f, 416.0f, 0.25},
      {"fp32", 1.0f, 0x1p-30f, 1.0f + 0x1p-23f, 0x1p-7},
      {"fp16", 3.0f, 0x1p-11f * 0.9375f, 3.0f + 0x1p-9f, 0.9375 / 4},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fmt);
    const RunResult r = run_constant(format_from_name(c.fmt), sr, c.w, c.u);
    expect_binomial(count_value(r, c.up), c.p, c.fmt);
    EXPECT_EQ(count_value(r, c.up) + count_value(r, c.w), kDraws);  // only the two neighbours
    EXPECT_EQ(r.counts.sr_applied, kDraws);
    EXPECT_EQ(r.counts.applied, count_value(r, c.up));
  }
  // intK with an odd scale factor: P = 1/3 is not dyadic, still exact (lazy comparison).
  const RunResult r = run_constant(int_format(4, 3.0f), sr, 0.0f, 1.0f);
  expect_binomial(count_value(r, 3.0f), 1.0 / 3, "int4 scale 3");
  EXPECT_EQ(count_value(r, 3.0f) + count_value(r, 0.0f), kDraws);
}

TEST(Stochastic, Unbiased) {
  const WritebackPolicy sr{Policy::stochastic, 0};
  struct Case {
    const char* fmt;
    float w, u;
    double gap;
  };
  const Case cases[] = {{"bf16", 1.0f, 0.001f, 0x1p-7}, {"e4m3", 2.0f, -0.0371f, 0.125}, {"e2m1", 1.0f, 0.3f, 0.5}};
  for (const auto& c : cases) {
    const RunResult r = run_constant(format_from_name(c.fmt), sr, c.w, c.u, 9);
    double sum = 0;
    for (float v : r.out) {
      sum += v;
    }
    const double x = static_cast<double>(c.w) + c.u;
    EXPECT_NEAR(sum / kDraws, x, 6 * c.gap * 0.5 / std::sqrt(kDraws)) << c.fmt;
  }
}

TEST(Stochastic, RBitDeadZone) {
  const FormatSpec bf16 = format_from_name("bf16");
  const float gap = 0x1p-7f;
  const WritebackPolicy r4{Policy::stochastic, 4};
  // |u| / gap = 1/32 < 2^-4: never applied; reported as truncated, not as randomly decided.
  RunResult r = run_constant(bf16, r4, 1.0f, gap / 32);
  EXPECT_EQ(r.counts.applied, 0);
  EXPECT_EQ(r.counts.erased, kDraws);
  EXPECT_EQ(r.counts.sr_truncated, kDraws);
  EXPECT_EQ(r.counts.sr_applied, 0);
  // The exact SR moves the same proposal with probability 1/32.
  r = run_constant(bf16, WritebackPolicy{Policy::stochastic, 0}, 1.0f, gap / 32);
  expect_binomial(r.counts.applied, 1.0 / 32, "exact SR");
  // 13/64 of the gap: truncated to 3/16.
  r = run_constant(bf16, r4, 1.0f, gap * 13 / 64);
  expect_binomial(r.counts.applied, 3.0 / 16, "r = 4, 13/64");
  EXPECT_EQ(r.counts.sr_applied, kDraws);
  // Toward zero (magnitude truncation, as hardware does): |x| = 1.5 - gap/64, fraction above 1.5 - gap is 63/64,
  // truncated to 15/16: the value stays 1.5 with probability 15/16, moves with 1/16 (exact: 1/64).
  r = run_constant(bf16, r4, 1.5f, -gap / 64);
  expect_binomial(r.counts.applied, 1.0 / 16, "r = 4 toward zero");
  // Negative values mirror positive ones.
  r = run_constant(bf16, r4, -1.0f, -gap / 32);
  EXPECT_EQ(r.counts.applied, 0);
  // r = 32 is close to exact.
  r = run_constant(bf16, WritebackPolicy{Policy::stochastic, 32}, 1.0f, gap / 32);
  expect_binomial(r.counts.applied, 1.0 / 32, "r = 32");
}

TEST(Stochastic, DeadzoneSrIsNearestOutsideAndSrInside) {
  for (const char* name : {"bf16", "e4m3", "e2m1"}) {
    const FormatSpec fmt = format_from_name(name);
    const FormatParams p = format_params(fmt);
    const auto refs = wbaudit::test::ref_float_formats();
    const wbaudit::test::RefFormat* ref = nullptr;
    for (const auto& r : refs) {
      if (r.name == name) {
        ref = &r;
      }
    }
    const auto table = wbaudit::test::ref_table(*ref);
    const int n = 200000;
    Kokkos::View<float*> w_near("w", n), w_sr("w", n), w_dz("w", n);
    Kokkos::View<float*> u("u", n);
    auto hw = Kokkos::create_mirror(w_near);
    auto hu = Kokkos::create_mirror(u);
    SplitMix rng{31};
    for (int i = 0; i < n; ++i) {
      hw(i) = static_cast<float>(table[rng.below(table.size())].value);
      const double g = std::fabs(hw(i)) * 0x1p-6 + table[table.size() / 2 + 1].value;
      hu(i) = static_cast<float>((rng.uniform() - 0.5) * g * std::ldexp(1.0, static_cast<int>(rng.below(8)) - 2));
    }
    Kokkos::deep_copy(u, hu);
    Kokkos::deep_copy(w_near, hw);
    Kokkos::deep_copy(w_sr, hw);
    Kokkos::deep_copy(w_dz, hw);
    const RngKey key{5, 6, 7};
    const WritebackCounts cn = writeback(fmt, WritebackPolicy{Policy::nearest, 0}, key, w_near, u);
    writeback(fmt, WritebackPolicy{Policy::stochastic, 0}, key, w_sr, u);
    const WritebackCounts cd = writeback(fmt, WritebackPolicy{Policy::deadzone_sr, 0}, key, w_dz, u);
    auto rn = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w_near);
    auto rs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w_sr);
    auto rd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w_dz);
    std::int64_t inside = 0, inside_saturated = 0;
    for (int i = 0; i < n; ++i) {
      const double x = static_cast<double>(hw(i)) + hu(i);
      const bool nearest_erases = hu(i) != 0 && wbaudit::test::ref_nearest_search(table, x) == hw(i);
      if (nearest_erases) {
        ++inside;
        inside_saturated += std::fabs(x) > table.back().value;  // max + u: saturated, no draw needed
        ASSERT_EQ(std::bit_cast<std::uint32_t>(rd(i)), std::bit_cast<std::uint32_t>(rs(i))) << name << " " << i;
      } else {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(rd(i)), std::bit_cast<std::uint32_t>(rn(i))) << name << " " << i;
      }
    }
    EXPECT_EQ(cn.erased, inside) << name;
    EXPECT_EQ(cd.sr_applied, inside - inside_saturated) << name;
    EXPECT_GT(inside, n / 20) << name;
    EXPECT_LT(cd.erased, cn.erased) << name;
    (void)p;
  }
}

TEST(Stochastic, Bf16RunningSumStallsUnderNearestNotUnderSr) {
  // Summing 10,000 U(0,1) values into a bf16 accumulator. Nearest stalls at 256 (there the gap is 2 and every
  // u < 1 is erased). SR is unbiased; one run's spread is large (near 5000 the gap is 32, so the standard deviation
  // of a single run's total is about 280, ~6%), so we check the mean over 16 seeds within 2% and every run within 25%.
  const FormatParams p = format_params(format_from_name("bf16"));
  double sr_total = 0, exact_total = 0;
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    SplitMix rng{2024 + seed};
    float near_sum = 0, sr_sum = 0;
    double exact = 0;
    for (int t = 0; t < 10000; ++t) {
      const auto v = static_cast<float>(rng.uniform());
      exact += v;
      const RngKey key{seed, static_cast<std::uint64_t>(t), 0};
      near_sum = writeback_value(p, WritebackPolicy{Policy::nearest, 0}, key, 0, near_sum, v).value;
      sr_sum = writeback_value(p, WritebackPolicy{Policy::stochastic, 0}, key, 0, sr_sum, v).value;
    }
    EXPECT_EQ(near_sum, 256.0f);
    EXPECT_NEAR(sr_sum, exact, 0.25 * exact) << "seed " << seed;
    EXPECT_GT(exact, 4800.0);
    sr_total += sr_sum;
    exact_total += exact;
  }
  EXPECT_NEAR(sr_total / exact_total, 1.0, 0.02);
}
