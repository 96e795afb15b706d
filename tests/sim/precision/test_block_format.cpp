// Block-scaled format definitions (sim/precision/block_format.*) against hand vectors and plain references written
// here: the names and parameters (OCP MX v1.0 section 5; NVFP4), E8M0 encode/decode, the floor and rceil scale rules
// (hand values, then brute force over every exponent), NVFP4's tensor and block scales in fp32 (hand values), the
// decoded NVFP4 value as the correctly rounded quotient (checked with exact products), and the block layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "reference_formats.hpp"
#include "sim/precision/block_format.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace {

ExactSum exact(double hi, double lo = 0) {
  return ExactSum{hi, lo};
}

TEST(BlockFormat, NamesAndParameters) {
  struct Row {
    const char* name;
    const char* element;
    int block;
    int emax;
    double max;
  };
  // OCP MX v1.0 section 5 (concrete formats); NVFP4: 16-element blocks of E2M1.
  const Row rows[] = {
      {"mxfp8_e4m3", "e4m3", 32, 8, 448}, {"mxfp8_e5m2", "e5m2", 32, 15, 57344}, {"mxfp6_e3m2", "e3m2", 32, 4, 28},
      {"mxfp6_e2m3", "e2m3", 32, 2, 7.5}, {"mxfp4_e2m1", "e2m1", 32, 2, 6},      {"mxint8", "int8", 32, 0, 127.0 / 64},
      {"nvfp4", "e2m1", 16, 2, 6},
  };
  for (const Row& r : rows) {
    const BlockFormatSpec f = block_format_from_name(r.name);
    EXPECT_STREQ(f.name, r.name);
    EXPECT_STREQ(f.element.name, r.element);
    EXPECT_EQ(f.block_size, r.block);
    EXPECT_EQ(f.emax_elem, r.emax);
    EXPECT_EQ(f.max_elem, r.max);
    EXPECT_EQ(f.rule, ScaleRule::floor);
    EXPECT_FALSE(f.tiles_2d);
  }
  // MXINT8: two's complement with an implicit scale 2^-6, symmetric levels -127..127
  const BlockFormatSpec i8 = block_format_from_name("mxint8");
  EXPECT_EQ(i8.element.kind, FormatKind::integer);
  EXPECT_EQ(i8.element.int_scale, 0x1p-6f);
  EXPECT_EQ(i8.element.int_max_level, 127);

  const BlockFormatSpec rc = block_format_from_name("mxfp4_e2m1:rceil");
  EXPECT_EQ(rc.rule, ScaleRule::rceil);
  EXPECT_STREQ(rc.name, "mxfp4_e2m1:rceil");
  const BlockFormatSpec fl = block_format_from_name("mxfp6_e3m2:floor");  // the default, spelled out
  EXPECT_EQ(fl.rule, ScaleRule::floor);
  EXPECT_STREQ(fl.name, "mxfp6_e3m2");
  const BlockFormatSpec tiles = block_format_from_name("nvfp4:2d");
  EXPECT_TRUE(tiles.tiles_2d);
  EXPECT_EQ(tiles.family, BlockFamily::nvfp4);
  EXPECT_STREQ(tiles.name, "nvfp4:2d");

  const auto names = known_block_format_names();
  EXPECT_EQ(names.size(), 14u);
  for (const auto& n : names) {
    EXPECT_STREQ(block_format_from_name(n).name, n.c_str());
    EXPECT_TRUE(is_block_format_name(n));
  }
}

TEST(BlockFormat, BadNamesAreErrorsNamingTheChoices) {
  try {
    block_format_from_name("mxfp4");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown block format \"mxfp4\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("mxfp8_e4m3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nvfp4:2d"), std::string::npos) << msg;
  }
  try {
    block_format_from_name("mxfp4_e2m1:ceil");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown scale rule \"ceil\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("floor, rceil"), std::string::npos) << msg;
  }
  try {
    block_format_from_name("nvfp4:rceil");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option \"rceil\" (known: 2d)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(is_block_format_name("e4m3"));
  EXPECT_FALSE(is_block_format_name("mxint8:"));
}

TEST(BlockFormat, E8M0EncodeDecode) {
  EXPECT_EQ(e8m0_encode(-127), 0x00);
  EXPECT_EQ(e8m0_encode(0), 0x7F);
  EXPECT_EQ(e8m0_encode(127), 0xFE);
  EXPECT_THROW(e8m0_encode(128), FormatError);   // 0xFF is NaN
  EXPECT_THROW(e8m0_encode(-128), FormatError);  // no zero, no subnormals
  EXPECT_EQ(e8m0_decode(0x00), std::ldexp(1.0, -127));
  EXPECT_EQ(e8m0_decode(0x7F), 1.0);
  EXPECT_EQ(e8m0_decode(0x80), 2.0);
  EXPECT_EQ(e8m0_decode(0xFE), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(e8m0_decode(0xFF)));
  for (int code = 0; code < 255; ++code) {
    EXPECT_EQ(e8m0_decode(static_cast<std::uint8_t>(code)), std::ldexp(1.0, code - 127));
    EXPECT_EQ(e8m0_encode(code - 127), code);
  }
}

TEST(BlockFormat, FloorRuleHandVectors) {
  // E = floor(log2 amax) - emax_elem (OCP MX v1.0 section 6.3), clamped below at -127; amax = 0 gives -127.
  EXPECT_EQ(mx_floor_exponent(exact(6.0), 2), 0);   // E2M1 block max 6: X = 1
  EXPECT_EQ(mx_floor_exponent(exact(7.99), 2), 0);  // saturates at 6 * 1
  EXPECT_EQ(mx_floor_exponent(exact(8.0), 2), 1);
  EXPECT_EQ(mx_floor_exponent(exact(3.0), 2), -1);   // X = 0.5
  EXPECT_EQ(mx_floor_exponent(exact(448.0), 8), 0);  // E4M3
  EXPECT_EQ(mx_floor_exponent(exact(511.0), 8), 0);  // 511 saturates to 448
  EXPECT_EQ(mx_floor_exponent(exact(1.0), 0), 0);    // INT8: 1 = 64 * 2^-6
  EXPECT_EQ(mx_floor_exponent(exact(1.99), 0), 0);   // saturates at 127/64
  EXPECT_EQ(mx_floor_exponent(exact(0.0), 2), -127);
  EXPECT_EQ(mx_floor_exponent(exact(0x1p-139), 2), -127);  // the tiny block: 2^-141 clamps to 2^-127
  EXPECT_EQ(mx_floor_exponent(exact(0x1p-139), 8), -127);
  EXPECT_EQ(mx_floor_exponent(exact(0x1p-125), 2), -127);
  EXPECT_EQ(mx_floor_exponent(exact(0x1p-124), 2), -126);
  // an exact amax just below a power of two (hi = 2, lo < 0) is in the binade below
  EXPECT_EQ(mx_floor_exponent(exact(2.0, -0x1p-60), 2), -2);
  EXPECT_EQ(mx_floor_exponent(exact(2.0, 0x1p-60), 2), -1);
  // above E8M0's range the rule's value is returned (the write-back refuses it)
  EXPECT_EQ(mx_floor_exponent(exact(0x1p128), 0), 128);
}

TEST(BlockFormat, RceilRuleHandVectors) {
  // the smallest X = 2^E >= 2^-127 with amax / X <= max_elem
  EXPECT_EQ(mx_rceil_exponent(exact(6.0), 6.0, 2), 0);
  EXPECT_EQ(mx_rceil_exponent(exact(6.0, 0x1p-50), 6.0, 2), 1);  // just above 6 * 2^0
  EXPECT_EQ(mx_rceil_exponent(exact(6.01), 6.0, 2), 1);
  EXPECT_EQ(mx_rceil_exponent(exact(3.0), 6.0, 2), -1);  // 3 / 0.5 = 6
  EXPECT_EQ(mx_rceil_exponent(exact(3.1), 6.0, 2), 0);
  EXPECT_EQ(mx_rceil_exponent(exact(12.0), 6.0, 2), 1);
  EXPECT_EQ(mx_rceil_exponent(exact(448.0), 448.0, 8), 0);
  EXPECT_EQ(mx_rceil_exponent(exact(449.0), 448.0, 8), 1);  // floor keeps 0 and saturates
  EXPECT_EQ(mx_rceil_exponent(exact(1.0), 448.0, 8), -8);   // 1 / 2^-8 = 256 <= 448 < 512
  EXPECT_EQ(mx_rceil_exponent(exact(127.0 / 64), 127.0 / 64, 0), 0);
  EXPECT_EQ(mx_rceil_exponent(exact(1.99), 127.0 / 64, 0), 1);  // floor gives 0 and saturates
  EXPECT_EQ(mx_rceil_exponent(exact(0.0), 6.0, 2), -127);
  EXPECT_EQ(mx_rceil_exponent(exact(0x1p-140), 6.0, 2), -127);              // the lower end: X = 2^-127 satisfies it
  EXPECT_EQ(mx_rceil_exponent(exact(0x1p127 * 1.99), 127.0 / 64, 0), 128);  // beyond E8M0: refused by write-back
}

// Brute force over every exponent: the largest E with 2^(E + emax) <= amax (floor), the smallest E with
// amax <= max * 2^E (rceil); clamped below at -127. amax values are doubles (lo = 0), compared exactly.
TEST(BlockFormat, ScaleRulesEqualBruteForce) {
  struct Elem {
    int emax;
    double max;
  };
  const Elem elems[] = {{8, 448}, {15, 57344}, {4, 28}, {2, 7.5}, {2, 6}, {0, 127.0 / 64}};
  SplitMix rng{17};
  for (const Elem& el : elems) {
    for (int trial = 0; trial < 20000; ++trial) {
      // magnitudes over fp32's whole range, including exact powers of two and exact multiples of max_elem
      const int e = static_cast<int>(rng.below(270)) - 150;
      double amax = std::ldexp(1.0 + rng.uniform(), e);
      if (trial % 5 == 0) {
        amax = std::ldexp(1.0, e);
      } else if (trial % 5 == 1) {
        amax = std::ldexp(el.max, e - el.emax);
      }
      int floor_e = -127;
      for (int E = -300; E <= 300; ++E) {
        if (std::ldexp(1.0, E + el.emax) <= amax) {
          floor_e = std::max(floor_e, E);
        }
      }
      int rceil_e = 1000;
      for (int E = 300; E >= -300; --E) {
        if (amax <= el.max * std::ldexp(1.0, E)) {
          rceil_e = E;
        }
      }
      rceil_e = std::max(rceil_e, -127);
      ASSERT_EQ(mx_floor_exponent(exact(amax), el.emax), floor_e) << amax;
      ASSERT_EQ(mx_rceil_exponent(exact(amax), el.max, el.emax), rceil_e) << amax;
    }
  }
}

TEST(BlockFormat, Nvfp4ScalesHandVectors) {
  const FormatParams e4m3 = format_params(format_from_name("e4m3"));
  // S_enc = fl32(2688 / amax_t); 1 for amax_t = 0; FLT_MAX when the quotient overflows fp32
  EXPECT_EQ(nvfp4_tensor_scale(0.0f), 1.0f);
  EXPECT_EQ(nvfp4_tensor_scale(2688.0f), 1.0f);
  EXPECT_EQ(nvfp4_tensor_scale(448.0f), 6.0f);
  EXPECT_EQ(nvfp4_tensor_scale(1.0f), 2688.0f);
  EXPECT_EQ(nvfp4_tensor_scale(0x1p-149f), std::numeric_limits<float>::max());
  EXPECT_EQ(nvfp4_tensor_scale(1000.0f), 2.688f);  // fl32(2688 / 1000)
  // s_b = RNE_e4m3_saturating(fl32(amax_b * fl32(S_enc * fl32(1/6))))
  EXPECT_EQ(nvfp4_block_scale(e4m3, 2688.0f, 1.0f), 448.0f);  // fl32(2688 * 0x1.555556p-3) = 448.00003 -> 448
  EXPECT_EQ(nvfp4_block_scale(e4m3, 6.0f, 1.0f), 1.0f);
  EXPECT_EQ(nvfp4_block_scale(e4m3, 6.0f, 2.0f), 2.0f);
  EXPECT_EQ(nvfp4_block_scale(e4m3, 9.0f, 1.0f), 1.5f);
  EXPECT_EQ(nvfp4_block_scale(e4m3, 10.0f, 1.0f), 1.625f);    // 1.6666667 lies below the midpoint 1.6875 of 1.625, 1.75
  EXPECT_EQ(nvfp4_block_scale(e4m3, 5000.0f, 1.0f), 448.0f);  // 833 saturates
  EXPECT_EQ(nvfp4_block_scale(e4m3, 0.0f, 1.0f), 0.0f);       // a zero block
  // E4M3 subnormal block scales (multiples of 2^-9): 0.01875 / 6 = 1.6 * 2^-9 -> 2 * 2^-9
  EXPECT_EQ(nvfp4_block_scale(e4m3, 0.01875f, 1.0f), 0x1p-8f);
  EXPECT_EQ(nvfp4_block_scale(e4m3, 0x1p-6f, 1.0f), 0x1p-9f);  // 1.333 * 2^-9 -> 2^-9
  // the tie 2^-10 between 0 and 2^-9: 6 * 2^-10 * fl32(1/6) = 2^-10 (1 + 3e-8) rounds in fp32 to exactly 2^-10 (the
  // excess is below half an ulp), and RNE takes the even neighbour 0 (a zero block); the next fp32 amax above,
  // 0x1.800002p-8, gives 0x1.000002p-10, above the tie: 2^-9. 6 * 2^-11 gives 2^-11: 0.
  EXPECT_EQ(nvfp4_block_scale(e4m3, 6.0f * 0x1p-10f, 1.0f), 0.0f);
  EXPECT_EQ(nvfp4_block_scale(e4m3, 0x1.800002p-8f, 1.0f), 0x1p-9f);
  EXPECT_EQ(nvfp4_block_scale(e4m3, 6.0f * 0x1p-11f, 1.0f), 0.0f);
  // decoded value fl32(q * s_b / S_enc)
  EXPECT_EQ(nvfp4_decode(6.0f, 448.0f, 1.0f), 2688.0f);
  EXPECT_EQ(nvfp4_decode(4.0f, 0x1p-8f, 1.0f), 0.015625f);
  EXPECT_EQ(nvfp4_decode(6.0f, 448.0f, 2.688f), 1000.0f);  // fl32(2688 / fl32(2.688)) == 1000
  EXPECT_EQ(nvfp4_decode(0.0f, 448.0f, 3.0f), 0.0f);
}

// fl32(q * s_b / S_enc) is the correctly rounded quotient: with r the result and r-, r+ its fp32 neighbours,
// (r + r-) / 2 * S_enc <= q * s_b <= (r + r+) / 2 * S_enc, products exact in double (25 x 24 bits); an equality is
// a tie, which needs r's last significand bit even.
TEST(BlockFormat, Nvfp4DecodeIsTheCorrectlyRoundedQuotient) {
  const FormatParams e4m3 = format_params(format_from_name("e4m3"));
  SplitMix rng{23};
  std::vector<float> scales;  // every positive finite e4m3 value
  for (std::uint32_t c = 1; c < 0x7f; ++c) {
    scales.push_back(static_cast<float>(decode_code(e4m3, c)));
  }
  for (int trial = 0; trial < 200000; ++trial) {
    const float s_b = scales[rng.below(scales.size())];
    const float q = kE2M1Magnitudes[1 + rng.below(7)];
    std::uint32_t bits = static_cast<std::uint32_t>(0x0b000000u + rng.below(0x7f000000u - 0x0b000000u));
    float s_enc;
    std::memcpy(&s_enc, &bits, 4);
    const float r = nvfp4_decode(q, s_b, s_enc);
    ASSERT_TRUE(std::isfinite(r) && r > 0) << q << " " << s_b << " " << s_enc;
    const double down = std::nextafter(r, 0.0f), up = std::nextafter(r, std::numeric_limits<float>::infinity());
    const double lower = (static_cast<double>(r) + down) / 2 * s_enc;
    const double upper = (static_cast<double>(r) + up) / 2 * s_enc;
    const double x = static_cast<double>(q) * s_b;
    ASSERT_LE(lower, x) << q << " " << s_b << " " << s_enc;
    ASSERT_LE(x, upper) << q << " " << s_b << " " << s_enc;
    std::uint32_t rb;
    std::memcpy(&rb, &r, 4);
    if (x == lower || x == upper) {
      ASSERT_EQ(rb & 1u, 0u) << "tie not to even";
    }
  }
}

TEST(BlockFormat, LayoutShortBlocksAndTiles) {
  const BlockFormatSpec mx = block_format_from_name("mxfp8_e4m3");
  const RowMajorShape shape{3, 70};  // rows of 70: blocks of 32, 32 and a short 6
  EXPECT_EQ(block_count(mx, shape), 9);
  BlockLocation b = block_at(mx, shape, 5);  // row 1, third block
  EXPECT_EQ(b.row_begin, 1);
  EXPECT_EQ(b.row_end, 2);
  EXPECT_EQ(b.col_begin, 64);
  EXPECT_EQ(b.col_end, 70);
  EXPECT_EQ(block_of_coordinate(mx, shape, 70 + 65).block, 5);
  EXPECT_EQ(describe_block(b), "block 5 (row 1, columns 64..69)");
  const BlockFormatSpec t = block_format_from_name("nvfp4:2d");
  const RowMajorShape m{20, 40};  // tiles: 2 tile rows (16 + 4) x 3 tile columns (16, 16, 8)
  EXPECT_EQ(block_count(t, m), 6);
  b = block_of_coordinate(t, m, 17 * 40 + 35);
  EXPECT_EQ(b.block, 5);
  EXPECT_EQ(b.row_begin, 16);
  EXPECT_EQ(b.row_end, 20);
  EXPECT_EQ(b.col_begin, 32);
  EXPECT_EQ(b.col_end, 40);
  EXPECT_EQ(describe_block(b), "block 5 (rows 16..19, columns 32..39)");
  const RowMajorShape vec{1, 5};  // a 1-D tensor: one row, one short block
  EXPECT_EQ(block_count(mx, vec), 1);
  EXPECT_EQ(block_count(t, vec), 1);
}

}  // namespace
