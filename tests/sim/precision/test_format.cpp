// Formats: parameters against hand-computed values; every code of every format of 16 bits or fewer: decode against
// a plain decoder, encode/decode round trip, ordering, succ/pred; bad names and scales.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"

using namespace wbaudit::sim;
using wbaudit::test::RefFormat;

namespace {

bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

void check_all_codes(const FormatSpec& spec, const RefFormat& ref) {
  const FormatParams p = format_params(spec);
  const auto table = wbaudit::test::ref_table(ref);
  const std::uint32_t n = 1u << ref.bits();
  for (std::uint32_t c = 0; c < n; ++c) {
    const double expected = wbaudit::test::ref_decode(ref, c);
    const double got = decode_code(p, c);
    ASSERT_TRUE(same_value(expected, got))
        << spec.name << " code " << std::hex << c << ": " << got << " vs " << expected;
    if (!std::isfinite(expected)) {
      continue;
    }
    EXPECT_EQ(encode_value(p, got), c) << spec.name << " value " << got;
    EXPECT_EQ(std::signbit(got), std::signbit(expected));
  }
  // Ordering and succ/pred: the sorted table of distinct finite values is strictly increasing, and succ/pred walk it.
  for (std::size_t i = 0; i < table.size(); ++i) {
    const double v = table[i].value;
    if (i > 0) {
      ASSERT_LT(table[i - 1].value, v);
    }
    const double up = i + 1 < table.size() ? table[i + 1].value : INFINITY;
    const double down = i > 0 ? table[i - 1].value : -INFINITY;
    ASSERT_EQ(succ(p, v), up) << spec.name << " succ(" << v << ")";
    ASSERT_EQ(pred(p, v), down) << spec.name << " pred(" << v << ")";
    if (v == 0) {
      ASSERT_EQ(succ(p, -0.0), up);
      ASSERT_EQ(pred(p, -0.0), down);
    }
    if (std::isfinite(up)) {
      ASSERT_EQ(gap_up(p, v), up - v);
    }
    if (std::isfinite(down)) {
      ASSERT_EQ(gap_down(p, v), v - down);
    }
    // every value is a fixed point of rounding
    ASSERT_EQ(round_nearest(p, v), v);
  }
  EXPECT_EQ(table.back().value, spec.max_finite) << spec.name;
  EXPECT_EQ(table.back().value, ref.max_finite) << spec.name;
}

}  // namespace

TEST(Format, ParametersMatchHandComputedTable) {
  for (const auto& ref : wbaudit::test::ref_float_formats()) {
    const FormatSpec f = format_from_name(ref.name);
    EXPECT_EQ(std::string(f.name), ref.name);
    EXPECT_EQ(f.kind, FormatKind::floating);
    EXPECT_EQ(f.exp_bits, ref.E) << ref.name;
    EXPECT_EQ(f.man_bits, ref.M) << ref.name;
    EXPECT_EQ(f.bias, ref.bias) << ref.name;
    EXPECT_EQ(f.bits, 1 + ref.E + ref.M) << ref.name;
    EXPECT_EQ(f.max_finite, ref.max_finite) << ref.name;
    EXPECT_EQ(f.min_normal, ref.min_normal) << ref.name;
    EXPECT_EQ(f.min_subnormal, ref.min_subnormal) << ref.name;
    EXPECT_EQ(f.has_inf, ref.ieee) << ref.name;
    EXPECT_EQ(f.has_nan, ref.ieee || ref.nan_111) << ref.name;
  }
  const FormatSpec e4m3 = format_from_name("e4m3");
  EXPECT_EQ(e4m3.max_finite, 448.0);  // OCP "fn", not the 480 of IEEE-like presets
  EXPECT_FALSE(e4m3.has_inf);
}

TEST(Format, EveryCodeOfEveryFloatFormatUpTo16Bits) {
  for (const auto& ref : wbaudit::test::ref_float_formats()) {
    if (ref.bits() > 16) {
      continue;
    }
    SCOPED_TRACE(ref.name);
    check_all_codes(format_from_name(ref.name), ref);
  }
}

TEST(Format, EveryCodeOfEveryIntegerFormat) {
  for (int k = 2; k <= 8; ++k) {
    for (float scale : {1.0f, 0.375f, 0x1.2345p-9f}) {
      SCOPED_TRACE("int" + std::to_string(k) + " scale " + std::to_string(scale));
      const FormatSpec f = int_format(k, scale);
      EXPECT_EQ(f.int_max_level, (1 << (k - 1)) - 1);
      check_all_codes(f, wbaudit::test::ref_int_format(k, scale));
    }
  }
}

TEST(Format, Fp32SampledCodes) {
  const auto refs = wbaudit::test::ref_float_formats();
  const RefFormat& ref = refs[0];
  const FormatParams p = format_params(format_from_name("fp32"));
  wbaudit::test::SplitMix rng{7};
  for (int i = 0; i < 200000; ++i) {
    const auto c = static_cast<std::uint32_t>(rng.next());
    const double expected = wbaudit::test::ref_decode(ref, c);
    ASSERT_TRUE(same_value(decode_code(p, c), expected)) << std::hex << c;
    if (!std::isfinite(expected)) {
      continue;
    }
    ASSERT_EQ(encode_value(p, expected), c);
    const float f = static_cast<float>(expected);
    ASSERT_EQ(succ(p, expected), f == FLT_MAX ? INFINITY : static_cast<double>(std::nextafter(f, INFINITY)));
    ASSERT_EQ(pred(p, expected), f == -FLT_MAX ? -INFINITY : static_cast<double>(std::nextafter(f, -INFINITY)));
  }
}

TEST(Format, IntScaleRuleKeepsLevelsExactAndCoversAbsmax) {
  wbaudit::test::SplitMix rng{11};
  for (int i = 0; i < 2000; ++i) {
    const int k = 2 + static_cast<int>(rng.below(7));
    const double absmax = std::ldexp(0.5 + rng.uniform(), static_cast<int>(rng.below(60)) - 30);
    const float s = int_scale_for_absmax(k, absmax);
    const int levels = (1 << (k - 1)) - 1;
    EXPECT_GE(levels * static_cast<double>(s), absmax);
    EXPECT_LE(levels * static_cast<double>(s), absmax * (1 + 0x1p-14));  // at most 16 significant bits of rounding
    for (int n = 1; n <= levels; ++n) {
      const double exact = static_cast<double>(n) * s;
      ASSERT_EQ(static_cast<double>(static_cast<float>(exact)), exact);
    }
  }
  EXPECT_EQ(int_scale_for_absmax(4, 7.0), 1.0f);
  EXPECT_EQ(int_scale_for_absmax(8, 127.0 * 0.25), 0.25f);
}

TEST(Format, BadNamesAndParametersNameTheValue) {
  try {
    format_from_name("e4m4");
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("\"e4m4\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos) << e.what();  // lists the known names
  }
  for (const char* bad : {"int1", "int9", "int0", "int16"}) {
    try {
      format_from_name(bad);
      FAIL() << bad;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(int_format(1, 1.0f), FormatError);
  EXPECT_THROW(int_format(9, 1.0f), FormatError);
  EXPECT_THROW(int_format(4, 0.0f), FormatError);
  EXPECT_THROW(int_format(4, -1.0f), FormatError);
  EXPECT_THROW(int_format(4, NAN), FormatError);
  EXPECT_THROW(int_format(8, 0x1.fffffep0f), FormatError);  // 24-bit scale: 3 * scale is not an fp32 value
  EXPECT_THROW(int_scale_for_absmax(4, 0.0), FormatError);
  EXPECT_THROW(int_scale_for_absmax(4, INFINITY), FormatError);
  EXPECT_THROW(int_scale_for_absmax(12, 1.0), FormatError);
  EXPECT_EQ(known_format_names().size(), 15u);
}
