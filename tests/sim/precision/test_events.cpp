// The erased criterion against its definition (q(w + u) == w with a brute-force q) and against the closed form with
// directional gaps; OCP E4M3 specifics (max 448, saturation counted, NaN never produced).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"

using namespace wbaudit::sim;
using wbaudit::test::RefFormat;
using wbaudit::test::SplitMix;

namespace {

bool erased_nearest(const FormatParams& p, float w, float u) {
  return u != 0 && writeback_value(p, WritebackPolicy{}, RngKey{}, 0, w, u).value == w;
}

// Closed form (docs/science.md §2): erased iff -g-/2 < u < g+/2, or |u| is exactly half the gap in its direction and
// w's last significand bit (code LSB) is even.
bool erased_closed_form(std::uint32_t code, double g_down, double g_up, double u) {
  if (u == 0) {
    return false;
  }
  if (-g_down / 2 < u && u < g_up / 2) {
    return true;
  }
  const bool even = (code & 1u) == 0;
  return even && (u == g_up / 2 || u == -g_down / 2);
}

void check_format(const FormatSpec& spec, const RefFormat& ref, std::size_t max_values) {
  const FormatParams p = format_params(spec);
  const auto table = wbaudit::test::ref_table(ref);
  SplitMix rng{99};
  long checked = 0;
  const std::size_t stride = table.size() > max_values ? table.size() / max_values : 1;
  for (std::size_t i = 0; i < table.size(); i += stride) {
    const double w = table[i].value;
    const auto [down, up] = wbaudit::test::ref_neighbours(table, w);
    const double g_down = w - down, g_up = up - w;  // inf at the ends of the range
    std::vector<double> us = {0.0};
    for (double g : {g_up, g_down}) {
      if (!std::isfinite(g)) {
        g = table.back().value - table[table.size() - 2].value;
      }
      for (double f : {0.5, 0.5 * (1 + 0x1p-20), 0.5 * (1 - 0x1p-20), 0.25, 0.75, 1.0, 1.5, 0x1p-30}) {
        us.push_back(g * f);
        us.push_back(-g * f);
      }
    }
    for (int r = 0; r < 8; ++r) {
      us.push_back((rng.uniform() - 0.5) * 4 * (std::isfinite(g_up) ? g_up : g_down));
    }
    for (double ud : us) {
      const auto u = static_cast<float>(ud);
      if (static_cast<double>(u) != ud) {
        continue;
      }
      const double x = w + ud;  // exact: both have few significant bits at nearby scales
      const bool def = u != 0 && wbaudit::test::ref_nearest_search(table, x) == w;
      const bool closed = erased_closed_form(table[i].code, g_down, g_up, ud);
      const bool got = erased_nearest(p, static_cast<float>(w), u);
      ASSERT_EQ(def, closed) << spec.name << " w = " << w << " u = " << ud;  // the closed form is the definition
      ASSERT_EQ(got, def) << spec.name << " w = " << w << " u = " << ud;
      ++checked;
    }
  }
  EXPECT_GT(checked, static_cast<long>(table.size() / stride));
}

}  // namespace

TEST(Erased, DefinitionAndClosedFormOnEveryValueOfSmallFormats) {
  for (const auto& ref : wbaudit::test::ref_float_formats()) {
    if (ref.bits() > 16) {
      continue;
    }
    SCOPED_TRACE(ref.name);
    check_format(format_from_name(ref.name), ref, ref.bits() > 8 ? 4096 : 1000);
  }
  for (int k : {2, 3, 4, 8}) {
    check_format(int_format(k, 0.375f), wbaudit::test::ref_int_format(k, 0.375), 1000);
  }
}

TEST(Erased, UnitAndBinadeEdgeExamples) {
  for (const char* name : {"fp32", "bf16", "fp16", "e4m3"}) {
    SCOPED_TRACE(name);
    const FormatSpec spec = format_from_name(name);
    const FormatParams p = format_params(spec);
    const float ulp = std::ldexp(1.0f, -spec.man_bits);  // gap above 1
    const float eps = FLT_EPSILON;
    EXPECT_TRUE(erased_nearest(p, 1.0f, ulp / 2));                                        // tie, 1 is even
    EXPECT_FALSE(erased_nearest(p, 1.0f, ulp / 2 * (1 + eps)));                           // just past the tie
    EXPECT_EQ(writeback_value(p, {}, {}, 0, 1.0f + ulp, ulp / 2).value, 1.0f + 2 * ulp);  // odd: tie rounds up
    EXPECT_FALSE(erased_nearest(p, 1.0f + ulp, ulp / 2));
    // Binade edge: the gap below 1 is ulp/2, so -ulp/4 is the tie and -ulp/2 moves to 1 - ulp/2.
    EXPECT_TRUE(erased_nearest(p, 1.0f, -ulp / 4));
    EXPECT_FALSE(erased_nearest(p, 1.0f, -ulp / 4 * (1 + eps)));
    EXPECT_EQ(writeback_value(p, {}, {}, 0, 1.0f, -ulp / 2).value, 1.0f - ulp / 2);
    EXPECT_TRUE(erased_nearest(p, 1.0f, ulp / 2 * (1 - eps)));
    EXPECT_EQ(gap_up(p, 1.0), ulp);
    EXPECT_EQ(gap_down(p, 1.0), ulp / 2);
    EXPECT_EQ(gap_down(p, -1.0), ulp);  // toward -inf from -1 is away from zero
    EXPECT_EQ(gap_up(p, -1.0), ulp / 2);
  }
}

TEST(E4M3, OcpFiniteOnlySpecifics) {
  const FormatSpec spec = format_from_name("e4m3");
  const FormatParams p = format_params(spec);
  EXPECT_EQ(spec.max_finite, 448.0);
  EXPECT_EQ(encode_value(p, 448.0), 0x7eu);
  EXPECT_TRUE(std::isnan(decode_code(p, 0x7f)));
  EXPECT_TRUE(std::isnan(decode_code(p, 0xff)));
  EXPECT_EQ(decode_code(p, 0x78), 256.0);  // exponent field 1111 holds finite values
  EXPECT_EQ(round_nearest(p, 464.0), 448.0);
  EXPECT_EQ(round_nearest(p, 480.0), 448.0);
  EXPECT_EQ(round_nearest(p, -1e9), -448.0);
  EXPECT_EQ(round_nearest(p, 440.0), 448.0);  // above the midpoint 432 of 416 and 448
  EXPECT_EQ(round_nearest(p, 432.0), 448.0);  // tie: 416 = 1.101b*2^8 (odd), 448 = 1.110b*2^8 (even)
  const WritebackOutcome at = writeback_value(p, {}, {}, 0, 448.0f, 16.0f);  // 464: beyond max, saturated, erased
  EXPECT_EQ(at.value, 448.0f);
  EXPECT_TRUE(at.saturated);
  EXPECT_FALSE(writeback_value(p, {}, {}, 0, 416.0f, 32.0f).saturated);  // exactly 448 is not beyond max

  // Kernel counts: saturation is counted, erasure at max is counted, and the NaN code is never produced.
  const int n = 4096;
  Kokkos::View<float*> w("w", n);
  Kokkos::View<float*> u("u", n);
  auto hw = Kokkos::create_mirror(w);  // a separate host copy (a mirror *view* would alias w on the host)
  auto hu = Kokkos::create_mirror(u);
  const auto table = wbaudit::test::ref_table(wbaudit::test::ref_float_formats()[4]);
  SplitMix rng{5};
  int expected_saturated = 0;
  for (int i = 0; i < n; ++i) {
    hw(i) = static_cast<float>(table[rng.below(table.size())].value);
    hu(i) = static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, static_cast<int>(rng.below(24)) - 8));
    expected_saturated += std::fabs(static_cast<double>(hw(i)) + hu(i)) > 448.0;
  }
  Kokkos::deep_copy(w, hw);
  Kokkos::deep_copy(u, hu);
  for (auto policy : {Policy::nearest, Policy::stochastic, Policy::deadzone_sr}) {
    Kokkos::deep_copy(w, hw);
    const WritebackCounts c = writeback(spec, WritebackPolicy{policy, 0}, RngKey{1, 1, 1}, w, u);
    EXPECT_EQ(c.saturated, expected_saturated);
    EXPECT_GT(c.saturated, 100);
    auto out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(out(i)));
      ASSERT_LE(std::fabs(out(i)), 448.0f);
      ASSERT_NE(encode_value(p, out(i)) & 0x7fu, 0x7fu);
    }
  }
}
