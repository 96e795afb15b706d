// The expected erased events of SR and dead-zone SR on a reference state (sim/precision/expected_erasure.hpp):
// every coordinate's probability against a brute-force computation from the sorted table of all format values,
// the kernel's sum against the sum of those probabilities (exact for r-bit SR), the mean erased count of many SR
// write-backs with independent random streams, and identical totals on Serial and OpenMP.
#include "sim/precision/expected_erasure.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/writeback.hpp"

using namespace wbaudit::sim;
using wbaudit::test::ref_float_formats;
using wbaudit::test::ref_nearest_search;
using wbaudit::test::ref_table;
using wbaudit::test::RefFormat;
using wbaudit::test::SplitMix;
using wbaudit::test::ValueCode;

namespace {

RefFormat ref_format(const std::string& name) {
  for (auto& f : ref_float_formats())
    if (f.name == name) return f;
  ADD_FAILURE() << name;
  return {};
}

// P(q(wq + u) == wq) from the definitions: the neighbours of x = wq + u found by scanning the table, P(away from
// zero) = (|x| - |toward|) / (|away| - |toward|), truncated to r bits for r-bit SR; dead-zone SR applies nearest
// (brute-force ties-to-even scan) unless nearest erases.
double ref_probability(const std::vector<ValueCode>& table, double wq, double u, Policy policy, int r) {
  const double x = wq + u;  // exact for the inputs below (checked by the caller)
  const double max = table.back().value;
  if (std::fabs(x) > max) return (x > 0 ? max : -max) == wq ? 1.0 : 0.0;
  // The last table value <= x (the table is sorted ascending and x lies within it).
  const std::size_t k = std::size_t(std::upper_bound(table.begin(), table.end(), x,
                                                     [](double v, const ValueCode& a) { return v < a.value; }) -
                                    table.begin()) -
                        1;
  if (table[k].value == x) return x == wq ? 1.0 : 0.0;
  const double lo = table[k].value, hi = table[k + 1].value;  // lo < x < hi
  const double toward = std::fabs(lo) < std::fabs(hi) ? lo : hi;
  const double away = toward == lo ? hi : lo;
  const double gap = std::fabs(away) - std::fabs(toward);
  double p_away = (std::fabs(x) - std::fabs(toward)) / gap;  // exact: the gaps are powers of two
  if (r > 0) p_away = std::floor(std::ldexp(std::fabs(x) - std::fabs(toward), r) / gap) * std::ldexp(1.0, -r);
  if (policy == Policy::deadzone_sr && ref_nearest_search(table, x) != wq) return 0.0;
  return (toward == wq ? 1.0 - p_away : 0.0) + (away == wq ? p_away : 0.0);
}

struct State {
  std::vector<float> w, wq, u;
};

// Reference weights anywhere in the format's range (and some exactly on its grid), proposals from a tiny fraction
// of the local gap to several gaps, of either sign, a few saturating.
State make_state(const std::vector<ValueCode>& table, std::size_t n, std::uint64_t seed) {
  SplitMix rng{seed};
  State s;
  const double max = table.back().value;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = table[rng.below(table.size())].value;
    float w = static_cast<float>(v);
    if (i % 3 != 0) w = static_cast<float>(v * (1 + 0.2 * (rng.uniform() - 0.5)));
    if (std::fabs(w) > max) w = static_cast<float>(v);
    float wq = static_cast<float>(ref_nearest_search(table, w));
    const double scale = std::max(std::fabs(static_cast<double>(wq)), table[table.size() / 2 + 1].value);
    double u = scale * std::ldexp(rng.uniform(), -int(rng.below(12)));
    if (rng.below(2)) u = -u;
    if (i % 97 == 0) u = 0;
    if (i % 89 == 0) {  // at the largest finite value, pushed beyond it: saturates back onto it (erased)
      w = wq = static_cast<float>(rng.below(2) ? max : -max);
      u = 0.5 * static_cast<double>(wq);
    }
    s.w.push_back(w);
    s.wq.push_back(wq);
    s.u.push_back(static_cast<float>(u));
  }
  return s;
}

Kokkos::View<const float*> view_of(const std::vector<float>& v) {
  Kokkos::View<float*> out("wbaudit::test::expected_erasure::v", v.size());
  auto h = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(out, h);
  return out;
}

const WritebackPolicy kPolicies[] = {
    {Policy::stochastic, 0},  {Policy::stochastic, 3},  {Policy::stochastic, 8},
    {Policy::deadzone_sr, 0}, {Policy::deadzone_sr, 3},
};

}  // namespace

TEST(ExpectedErasure, EveryProbabilityMatchesBruteForceAndTheKernelSumsThem) {
  for (const char* name : {"e2m1", "e3m2", "e2m3", "e4m3", "e5m2", "bf16"}) {
    const RefFormat rf = ref_format(name);
    const auto table = ref_table(rf);
    const FormatSpec fmt = format_from_name(name);
    const FormatParams p = format_params(fmt);
    const State s = make_state(table, 3000, 11);
    for (const auto& policy : kPolicies) {
      SCOPED_TRACE(std::string(name) + " " + projection_name(policy));
      long double ref_sum = 0;
      std::int64_t nonzero = 0;
      for (std::size_t i = 0; i < s.u.size(); ++i) {
        if (s.u[i] == 0) continue;
        ++nonzero;
        ASSERT_EQ(static_cast<double>(s.wq[i]) + s.u[i] - s.wq[i], static_cast<double>(s.u[i]));  // exact sum
        const double ref = ref_probability(table, s.wq[i], s.u[i], policy.policy, policy.sr_bits);
        const double got = erasure_probability(p, policy, s.wq[i], s.u[i]);
        ASSERT_EQ(got, ref) << "w = " << s.wq[i] << ", u = " << s.u[i];
        ref_sum += ref;
      }
      const ExpectedErasure e = expected_erasure(fmt, policy, view_of(s.w), view_of(s.u));
      EXPECT_EQ(e.nonzero, nonzero);
      if (policy.sr_bits > 0) {
        EXPECT_EQ(e.expected_erased, static_cast<double>(ref_sum));  // exact multiples of 2^-r
      } else {
        EXPECT_NEAR(e.expected_erased, static_cast<double>(ref_sum), 1e-9);
      }
      EXPECT_GT(e.expected_erased, 0.02 * nonzero);  // the inputs exercise both outcomes
      EXPECT_LT(e.expected_erased, 0.98 * nonzero);
    }
  }
}

// intK with an odd scale factor (3): P(away) = 1/3 or 2/3 is not dyadic; brute force from the levels n * 3.
TEST(ExpectedErasure, IntegerFormatWithOddScale) {
  const FormatSpec fmt = int_format(4, 3.0f);
  const FormatParams p = format_params(fmt);
  const WritebackPolicy sr{Policy::stochastic, 0};
  // w = 6 (level 2): u = 1 -> x = 7 between 6 and 9, P(9) = 1/3, erased with 2/3; u = -4 -> x = 2 between 0 and 3,
  // P(3) = 2/3, erased 0 (neither neighbour is 6); u = 17 -> x = 23 > 21 saturates to 21: applied.
  EXPECT_DOUBLE_EQ(erasure_probability(p, sr, 6.0, 1.0f), 2.0 / 3);
  EXPECT_EQ(erasure_probability(p, sr, 6.0, -4.0f), 0.0);
  EXPECT_EQ(erasure_probability(p, sr, 6.0, 17.0f), 0.0);
  EXPECT_EQ(erasure_probability(p, sr, 21.0, 17.0f), 1.0);  // already at max: saturation erases
  // dead-zone SR: x = 7 rounds to 6 under nearest (erases), so SR decides: 2/3; x = 8 rounds to 9: applied.
  const WritebackPolicy dz{Policy::deadzone_sr, 0};
  EXPECT_DOUBLE_EQ(erasure_probability(p, dz, 6.0, 1.0f), 2.0 / 3);
  EXPECT_EQ(erasure_probability(p, dz, 6.0, 2.0f), 0.0);
}

// The expected count is the mean of the realized erased count over independent SR streams: 400 write-backs of the
// same state with different seeds; the mean must lie within 6 standard errors (sd^2 = sum p (1 - p)) of it.
TEST(ExpectedErasure, IsTheMeanOfManyStochasticWriteBacks) {
  for (const char* name : {"e4m3", "bf16"}) {
    const auto table = ref_table(ref_format(name));
    const FormatSpec fmt = format_from_name(name);
    const FormatParams p = format_params(fmt);
    const State s = make_state(table, 2048, 5);
    for (const auto& policy : kPolicies) {
      SCOPED_TRACE(std::string(name) + " " + projection_name(policy));
      const ExpectedErasure e = expected_erasure(fmt, policy, view_of(s.w), view_of(s.u));
      double var = 0;
      for (std::size_t i = 0; i < s.u.size(); ++i) {
        if (s.u[i] == 0) continue;
        const double q = erasure_probability(p, policy, s.wq[i], s.u[i]);
        var += q * (1 - q);
      }
      const int runs = 400;
      double total = 0;
      const auto u = view_of(s.u);
      for (int k = 0; k < runs; ++k) {
        Kokkos::View<float*> w("wbaudit::test::expected_erasure::w", s.wq.size());
        Kokkos::deep_copy(w, view_of(s.wq));
        total += static_cast<double>(writeback(fmt, policy, RngKey{std::uint64_t(1000 + k), 9, 2}, w, u).erased);
      }
      const double mean = total / runs;
      EXPECT_LE(std::fabs(mean - e.expected_erased), 6 * std::sqrt(var / runs) + 1e-12)
          << "mean " << mean << ", expected " << e.expected_erased;
      EXPECT_GT(var, 1.0);  // SR actually decides some coordinates
    }
  }
}

TEST(ExpectedErasure, IdenticalOnSerialAndOpenMPAndForAnyThreadCount) {
  const auto table = ref_table(ref_format("e4m3"));
  const State s = make_state(table, 50000, 3);
  const FormatSpec fmt = format_from_name("e4m3");
  Kokkos::View<float*, Kokkos::HostSpace> w("w", s.w.size()), u("u", s.u.size());
  for (std::size_t i = 0; i < s.w.size(); ++i) {
    w(i) = s.w[i];
    u(i) = s.u[i];
  }
  for (const auto& policy : kPolicies) {
    const auto a = expected_erasure(Kokkos::Serial{}, fmt, policy, Kokkos::View<const float*, Kokkos::HostSpace>(w),
                                    Kokkos::View<const float*, Kokkos::HostSpace>(u));
    const auto b = expected_erasure(Kokkos::OpenMP{}, fmt, policy, Kokkos::View<const float*, Kokkos::HostSpace>(w),
                                    Kokkos::View<const float*, Kokkos::HostSpace>(u));
    EXPECT_EQ(a.expected_erased, b.expected_erased);
    EXPECT_EQ(a.nonzero, b.nonzero);
  }
}

TEST(ExpectedErasure, BadInput) {
  const FormatSpec fmt = format_from_name("e4m3");
  const auto w = view_of({1.0f, 2.0f});
  EXPECT_THROW(expected_erasure(fmt, WritebackPolicy{Policy::nearest, 0}, w, w), std::invalid_argument);
  EXPECT_THROW(expected_erasure(fmt, WritebackPolicy{Policy::stochastic, 0}, w, view_of({1.0f})),
               std::invalid_argument);
  try {
    (void)expected_erasure(fmt, WritebackPolicy{Policy::stochastic, 4}, w, view_of({0.5f, NAN}));
    FAIL() << "no error for a NaN proposal";
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find("coordinate 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(projection_name({Policy::stochastic, 0}), "stochastic");
  EXPECT_EQ(projection_name({Policy::deadzone_sr, 8}), "deadzone-sr-r8");
}
