// Round-to-nearest (ties to even) against brute force over all codes, on millions of random and adversarial inputs:
// ties, binade edges, subnormals, zero, max finite and beyond. Zero mismatches allowed.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"

using namespace wbaudit::sim;
using wbaudit::test::RefFormat;
using wbaudit::test::SplitMix;
using wbaudit::test::ValueCode;

namespace {

// Adversarial and random inputs around a format's values.
double adversarial_input(const std::vector<ValueCode>& t, SplitMix& rng) {
  const std::size_t n = t.size();
  const double max = t.back().value;
  const std::size_t i = rng.below(n - 1);
  const double lo = t[i].value, hi = t[i + 1].value;
  const double mid = lo + (hi - lo) / 2;  // exact
  switch (rng.below(10)) {
    case 0:
      return t[rng.below(n)].value;
    case 1:
      return mid;  // tie (binade edges included: mid between pred(2^e) and 2^e)
    case 2:
      return std::nextafter(mid, INFINITY);
    case 3:
      return std::nextafter(mid, -INFINITY);
    case 4:
      return lo + (hi - lo) * rng.uniform();
    case 5: {  // log-uniform magnitude over the whole range and beyond
      const double e =
          std::log2(t[n / 2 + 1].value) - 3 + (std::log2(max) - std::log2(t[n / 2 + 1].value) + 6) * rng.uniform();
      const double v = std::exp2(e);
      return rng.below(2) ? v : -v;
    }
    case 6: {  // beyond max finite: the saturation boundary and far beyond
      const double gap = max - t[n - 2].value;
      const double choices[] = {max + gap / 2, max + gap / 4,
                                max + gap,     std::nextafter(max, INFINITY),
                                max * 1e6,     std::nextafter(max + gap / 2, 0.0)};
      const double v = choices[rng.below(6)];
      return rng.below(2) ? v : -v;
    }
    case 7: {                                 // around zero and the subnormals
      const double sub = t[n / 2 + 1].value;  // smallest positive value
      const double choices[] = {0.0, -0.0, sub / 2, sub / 4, sub * 0.75, sub * 1.5, sub * 2.5, sub * 1e-30};
      const double v = choices[rng.below(8)];
      return rng.below(2) ? v : -v;
    }
    case 8:
      return lo * (1 + 0x1p-40);
    default:
      return hi * (1 - 0x1p-40);
  }
}

void check_nearest(const FormatSpec& spec, const RefFormat& ref, int count, bool scan) {
  const FormatParams p = format_params(spec);
  const auto table = wbaudit::test::ref_table(ref);
  SplitMix rng{0x5eed0000u + static_cast<unsigned>(ref.bits())};
  long mismatches = 0;
  for (int k = 0; k < count; ++k) {
    const double x = adversarial_input(table, rng);
    const double expected =
        scan ? wbaudit::test::ref_nearest_scan(table, x) : wbaudit::test::ref_nearest_search(table, x);
    const double got = round_nearest(p, x);
    if (got != expected) {
      if (++mismatches < 10) {
        ADD_FAILURE() << spec.name << ": q(" << std::hexfloat << x << ") = " << got << ", expected " << expected;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << spec.name;
}

// Write-back of w + u (w a format value, u an fp32 proposal) against the reference on the exact sum.
void check_writeback_nearest(const FormatSpec& spec, const RefFormat& ref, int count) {
  const FormatParams p = format_params(spec);
  const auto table = wbaudit::test::ref_table(ref);
  SplitMix rng{0xabcdu + static_cast<unsigned>(ref.bits())};
  long checked = 0, mismatches = 0;
  for (int k = 0; k < count; ++k) {
    const auto w = static_cast<float>(table[rng.below(table.size())].value);
    const double target = adversarial_input(table, rng);
    float u = static_cast<float>(target - static_cast<double>(w));
    if (rng.below(4) == 0) {
      u = static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, static_cast<int>(rng.below(40)) - 20));
    }
    if (!std::isfinite(u)) {
      continue;
    }
    const double x = static_cast<double>(w) + static_cast<double>(u);
    if (x - static_cast<double>(w) != static_cast<double>(u) || x - static_cast<double>(u) != static_cast<double>(w)) {
      continue;  // the reference needs the exact sum as a double
    }
    ++checked;
    const double expected = wbaudit::test::ref_nearest_search(table, x);
    const WritebackOutcome out = writeback_value(p, WritebackPolicy{}, RngKey{}, 0, w, u);
    const bool sat = std::fabs(x) > ref.max_finite;
    if (out.value != expected || out.saturated != sat) {
      if (++mismatches < 10) {
        ADD_FAILURE() << spec.name << ": w = " << std::hexfloat << w << ", u = " << u << ": " << out.value
                      << " (saturated " << out.saturated << "), expected " << expected << " (" << sat << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(checked, count / 2);
}

}  // namespace

TEST(RoundNearest, EightBitAndNarrowerFormatsAgainstScanOfAllCodes) {
  for (const auto& ref : wbaudit::test::ref_float_formats()) {
    if (ref.bits() > 8) {
      continue;
    }
    SCOPED_TRACE(ref.name);
    check_nearest(format_from_name(ref.name), ref, 400000, /*scan=*/true);
  }
}

TEST(RoundNearest, IntegerFormatsAgainstScanOfAllCodes) {
  for (int k = 2; k <= 8; ++k) {
    for (float scale : {1.0f, 0.375f, 0x1.2345p-9f, 3.0f}) {
      SCOPED_TRACE("int" + std::to_string(k));
      check_nearest(int_format(k, scale), wbaudit::test::ref_int_format(k, scale), 100000, /*scan=*/true);
    }
  }
}

TEST(RoundNearest, SixteenBitFormatsAgainstSortedTable) {
  for (const char* name : {"bf16", "fp16"}) {
    for (const auto& ref : wbaudit::test::ref_float_formats()) {
      if (ref.name != name) {
        continue;
      }
      SCOPED_TRACE(name);
      check_nearest(format_from_name(name), ref, 2000000, /*scan=*/false);
    }
  }
}

TEST(RoundNearest, SortedTableSearchAgreesWithScan) {      // the 16-bit reference is the same rule as the scan
  const auto ref = wbaudit::test::ref_float_formats()[2];  // fp16
  const auto table = wbaudit::test::ref_table(ref);
  SplitMix rng{3};
  for (int k = 0; k < 3000; ++k) {
    const double x = adversarial_input(table, rng);
    ASSERT_EQ(wbaudit::test::ref_nearest_scan(table, x), wbaudit::test::ref_nearest_search(table, x)) << x;
  }
}

TEST(RoundNearest, Fp32AgainstHardwareConversion) {
  const FormatParams p = format_params(format_from_name("fp32"));
  SplitMix rng{17};
  long mismatches = 0;
  for (int k = 0; k < 2000000; ++k) {
    double x;
    const auto f = std::bit_cast<float>(static_cast<std::uint32_t>(rng.next()));
    if (!std::isfinite(f)) {
      continue;
    }
    switch (rng.below(4)) {
      case 0:
        x = f;
        break;
      case 1: {  // ties: midpoint to the next float (binade edges included)
        const float g = std::nextafter(f, f < 0 ? -INFINITY : INFINITY);
        x = std::isfinite(g) ? (static_cast<double>(f) + g) / 2 : static_cast<double>(f) * 1.5;
        break;
      }
      case 2:
        x = std::bit_cast<double>(rng.next() & 0x7fefffffffffffffull) * (rng.below(2) ? 1 : -1);  // any magnitude
        break;
      default:
        x = static_cast<double>(f) * (1 + (rng.uniform() - 0.5) * 0x1p-22);
    }
    float hw = static_cast<float>(x);  // IEEE round-to-nearest-even, the independent reference
    if (std::isinf(hw)) {
      hw = std::copysign(FLT_MAX, hw);
    }
    const double got = round_nearest(p, x);
    if (got != static_cast<double>(hw) && ++mismatches < 10) {
      ADD_FAILURE() << std::hexfloat << x << ": " << got << " vs " << hw;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(RoundNearest, Fp32WritebackAgainstHardwareFloatAddition) {
  // fl32(w + u) in float arithmetic is the correctly rounded exact sum, whatever the exponent distance: this checks
  // the TwoSum path that must not double-round.
  const FormatParams p = format_params(format_from_name("fp32"));
  SplitMix rng{23};
  long mismatches = 0;
  for (int k = 0; k < 2000000; ++k) {
    const auto w = std::bit_cast<float>(static_cast<std::uint32_t>(rng.next()));
    auto u = std::bit_cast<float>(static_cast<std::uint32_t>(rng.next()));
    if (rng.below(2)) {
      u = std::ldexp(w, -static_cast<int>(rng.below(60))) * (rng.below(2) ? 1.0f : -1.0f) * 1.5f;
    }
    if (!std::isfinite(w) || !std::isfinite(u)) {
      continue;
    }
    volatile float sum = w + u;
    float hw = sum;
    if (std::isinf(hw)) {
      hw = std::copysign(FLT_MAX, hw);
    }
    const WritebackOutcome out = writeback_value(p, WritebackPolicy{}, RngKey{}, 0, w, u);
    if (out.value != hw && ++mismatches < 10) {
      ADD_FAILURE() << std::hexfloat << w << " + " << u << ": " << out.value << " vs " << hw;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(RoundNearest, WritebackOfExactSumsAgainstReference) {
  for (const auto& ref : wbaudit::test::ref_float_formats()) {
    if (ref.bits() > 16) {
      continue;
    }
    SCOPED_TRACE(ref.name);
    check_writeback_nearest(format_from_name(ref.name), ref, 300000);
  }
  for (int k : {2, 4, 8}) {
    check_writeback_nearest(int_format(k, 0.375f), wbaudit::test::ref_int_format(k, 0.375), 100000);
  }
}

TEST(RoundNearest, TiesBrokenByBitsBeyondDoublePrecision) {
  // bf16: u = 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7; a tiny w decides the side. fl64(w + u) == u, so a
  // double-only computation would round the tie to even (1) for both signs.
  const FormatParams bf16 = format_params(format_from_name("bf16"));
  const float mid = 1.0f + 0x1p-8f;
  EXPECT_EQ(writeback_value(bf16, {}, {}, 0, 0x1p-100f, mid).value, 1.0f + 0x1p-7f);
  EXPECT_EQ(writeback_value(bf16, {}, {}, 0, -0x1p-100f, mid).value, 1.0f);
  EXPECT_EQ(writeback_value(bf16, {}, {}, 0, 0.0f, mid).value, 1.0f);  // exact tie: even
  // Just below the binade edge 1: x = 1 - 2^-100 rounds to 1, and SR only ever picks 1 - 2^-8 or 1 (never above 1).
  EXPECT_EQ(writeback_value(bf16, {}, {}, 0, -0x1p-100f, 1.0f).value, 1.0f);
  const WritebackPolicy sr{Policy::stochastic, 0};
  for (std::uint64_t c = 0; c < 1000; ++c) {
    const float v = writeback_value(bf16, sr, RngKey{1, 2, 3}, c, -0x1p-100f, 1.0f).value;
    ASSERT_TRUE(v == 1.0f || v == 1.0f - 0x1p-8f) << v;
  }
  // e2m1 midpoint 5 between 4 and 6: tie to even significand (4 = 1.0 * 2^2).
  const FormatParams e2m1 = format_params(format_from_name("e2m1"));
  EXPECT_EQ(round_nearest(e2m1, 5.0), 4.0);
  EXPECT_EQ(round_nearest(e2m1, 3.5), 4.0);  // between 3 (1.1b * 2) and 4: even is 4
  EXPECT_EQ(round_nearest(e2m1, 2.5), 2.0);
  EXPECT_EQ(round_nearest(e2m1, 0.25), 0.0);  // half the smallest subnormal
  EXPECT_EQ(round_nearest(e2m1, 0.75), 1.0);
  EXPECT_EQ(round_nearest(e2m1, 7.0), 6.0);  // beyond max: saturates
  EXPECT_EQ(round_nearest(e2m1, -1e30), -6.0);
}
