// Element rounding of the block formats against an independent implementation, LLVM's APFloat (llvm-19-dev:
// Float8E4M3FN, Float8E5M2, Float6E3M2FN, Float6E2M3FN, Float4E2M1FN), bit for bit, over dense samples of every binade
// of each element format (subnormals included, with grid values, midpoints and their neighbours), at many block scales:
// - the exact element path (detail::element_neighbours, whose brackets round_element and the reference use): nearest
//   == APFloat roundTiesToEven, and the two neighbours stochastic rounding chooses between == APFloat toward zero and
//   away from zero (toward +inf / -inf by sign); >= 10^6 inputs per format and rounding mode;
// - the Kokkos kernel (the vectorized loops): a block pinned at X = 1 whose other elements are the inputs (w = 0,
//   u = y): nearest == APFloat roundTiesToEven, every SR result one of APFloat's two directed neighbours; >= 10^6
//   inputs per format;
// - saturation separately: the element formats saturate at +-max on write-back where APFloat may give NaN or inf on
//   overflow; inputs between max and the next binade give +-max and are counted as saturated, and APFloat toward zero
//   gives max there too;
// - NVFP4 at scales whose decoded grid is E2M1 exactly (S_enc = 1, s_b a power of two, normal and E4M3-subnormal);
// - MXINT8 against a plain integer reference (APFloat has no such format): nearbyint ties-to-even, clamped to +-127.
#include <gtest/gtest.h>

#include <llvm/ADT/APFloat.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "reference_formats.hpp"
#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/detail/block_element.hpp"
#include "sim/precision/writeback_blocks.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace {

struct Element {
  const char* block_format;
  const llvm::fltSemantics& (*semantics)();
};

const Element kElements[] = {
    {"mxfp8_e4m3", &llvm::APFloat::Float8E4M3FN}, {"mxfp8_e5m2", &llvm::APFloat::Float8E5M2},
    {"mxfp6_e3m2", &llvm::APFloat::Float6E3M2FN}, {"mxfp6_e2m3", &llvm::APFloat::Float6E2M3FN},
    {"mxfp4_e2m1", &llvm::APFloat::Float4E2M1FN},
};

// APFloat's rounding of x into sem under rm, as a double.
double apfloat_round(const llvm::fltSemantics& sem, double x, llvm::RoundingMode rm) {
  llvm::APFloat f(x);
  bool loses = false;
  f.convert(sem, rm, &loses);
  f.convert(llvm::APFloat::IEEEdouble(), llvm::RoundingMode::NearestTiesToEven, &loses);
  return f.convertToDouble();
}

double apfloat_away(const llvm::fltSemantics& sem, double x) {
  return apfloat_round(sem, x, x > 0 ? llvm::RoundingMode::TowardPositive : llvm::RoundingMode::TowardNegative);
}

// Dense samples of every binade of the element format in [0, max]: the subnormal range [0, min_normal) and each
// [2^e, 2^(e+1)) (cut at max), with random points, every grid value, every midpoint and their fp32 neighbours; both
// signs. At least n values. fp32: every sample is an fp32 value (for the kernel path).
std::vector<double> binade_samples(const FormatSpec& f, std::size_t n, bool fp32, SplitMix& rng) {
  std::vector<std::pair<double, double>> ranges = {{0.0, f.min_normal}};
  for (double lo = f.min_normal; lo <= f.max_finite; lo *= 2) {
    ranges.emplace_back(lo, std::min(2 * lo, f.max_finite));
  }
  const std::size_t per = n / (2 * ranges.size()) + 1;
  std::vector<double> out;
  auto push = [&](double y) {
    if (fp32) {
      y = static_cast<float>(y);
    }
    if (std::fabs(y) <= f.max_finite) {
      out.push_back(y);
      out.push_back(-y);
    }
  };
  for (const auto& [lo, hi] : ranges) {
    const double step = lo > 0 ? std::ldexp(lo, -f.man_bits) : f.min_subnormal;  // the grid step in the range
    for (double g = lo; g <= hi; g += step) {
      push(g);
      push(g + step / 2);  // midpoint
      push(std::nextafter(static_cast<float>(g + step / 2), 0.0f));
      push(std::nextafter(static_cast<float>(g + step / 2), 1e30f));
    }
    for (std::size_t i = 0; i < per; ++i) {
      push(lo + (hi - lo) * rng.uniform());
    }
  }
  return out;
}

TEST(BlockApfloat, ElementRoundingEqualsApfloat) {
  SplitMix rng{7};
  for (const Element& el : kElements) {
    SCOPED_TRACE(el.block_format);
    const BlockFormatSpec fmt = block_format_from_name(el.block_format);
    const BlockFormatParams p = block_format_params(fmt);
    const llvm::fltSemantics& sem = el.semantics();
    const std::vector<double> ys = binade_samples(fmt.element, 1000000, false, rng);
    ASSERT_GE(ys.size(), 1000000u);
    std::int64_t compared = 0;
    for (const double y : ys) {
      detail::BlockScale s;
      s.exp = static_cast<int>(rng.below(41)) - 20;  // any scale: the element of y * X is y's
      const double X = std::ldexp(1.0, s.exp);
      const detail::ElementNeighbours n = detail::element_neighbours(p, s, ExactSum{y * X, 0.0});
      ASSERT_FALSE(n.saturated) << y;
      ASSERT_EQ(n.nearest / X, apfloat_round(sem, y, llvm::RoundingMode::NearestTiesToEven)) << y;
      ASSERT_EQ(n.toward_zero / X, apfloat_round(sem, y, llvm::RoundingMode::TowardZero)) << y;
      ASSERT_EQ(n.away / X, apfloat_away(sem, y)) << y;
      // round_element under nearest gives the same value (as the fp32 decoded value)
      const detail::ElementOutcome o =
          detail::round_element(p, s, WritebackPolicy{}, RngKey{}, 0, ExactSum{y * X, 0.0}, 0.0f, 0.0f);
      ASSERT_EQ(static_cast<double>(o.value), n.nearest) << y;
      ++compared;
    }
    std::printf("%s: %lld inputs x 3 rounding modes\n", el.block_format, static_cast<long long>(compared));
  }
}

// Runs the kernel on blocks of 32 whose element 0 is max_elem (w_0 = max, u_0 = 0: X = 1 under floor, as no |u|
// reaches 2^(emax + 1)) and whose other elements are w = 0, u = y; returns the results for the inputs.
std::vector<float> kernel_round(const BlockFormatSpec& fmt, const WritebackPolicy& policy, std::uint64_t step,
                                const std::vector<double>& ys, BlockWritebackCounts& counts) {
  const std::size_t blocks = (ys.size() + 30) / 31;
  Kokkos::View<float*> w("w", blocks * 32), u("u", blocks * 32);
  for (std::size_t b = 0; b < blocks; ++b) {
    w(b * 32) = static_cast<float>(fmt.max_elem);
    for (std::size_t k = 1; k < 32; ++k) {
      const std::size_t i = b * 31 + k - 1;
      u(b * 32 + k) = i < ys.size() ? static_cast<float>(ys[i]) : 0.0f;
    }
  }
  counts = block_writeback(fmt, policy, RngKey{11, step, 2}, {static_cast<std::int64_t>(blocks), 32}, w,
                           Kokkos::View<const float*>(u));
  std::vector<float> out(ys.size());
  for (std::size_t i = 0; i < ys.size(); ++i) {
    out[i] = w((i / 31) * 32 + i % 31 + 1);
  }
  return out;
}

TEST(BlockApfloat, KernelRoundingEqualsApfloat) {
  for (const auto isa : {detail::BlockIsa::avx512, detail::BlockIsa::avx2, detail::BlockIsa::portable}) {
    if (!detail::block_isa_supported(isa)) {
      continue;
    }
    detail::force_block_isa(isa);
    SCOPED_TRACE(detail::block_isa_name(isa));
    SplitMix rng{13};
    for (const Element& el : kElements) {
      SCOPED_TRACE(el.block_format);
      const BlockFormatSpec fmt = block_format_from_name(el.block_format);
      const llvm::fltSemantics& sem = el.semantics();
      const std::vector<double> ys = binade_samples(fmt.element, 1000000, true, rng);
      BlockWritebackCounts counts;
      const std::vector<float> nearest = kernel_round(fmt, WritebackPolicy{}, 0, ys, counts);
      EXPECT_EQ(counts.rescaled_up + counts.rescaled_down, 0);
      for (std::size_t i = 0; i < ys.size(); ++i) {
        ASSERT_EQ(nearest[i], apfloat_round(sem, ys[i], llvm::RoundingMode::NearestTiesToEven)) << ys[i];
      }
      for (const int r : {0, 8}) {
        const std::vector<float> sr = kernel_round(fmt, make_policy("stochastic", r), 1, ys, counts);
        for (std::size_t i = 0; i < ys.size(); ++i) {
          const double tz = apfloat_round(sem, ys[i], llvm::RoundingMode::TowardZero);
          ASSERT_TRUE(sr[i] == tz || sr[i] == apfloat_away(sem, ys[i])) << ys[i] << " -> " << sr[i];
        }
      }
    }
  }
  detail::force_block_isa(detail::best_block_isa());
}

// Saturation: |y| in (max, 2^(emax + 1)) keeps X = 1 and saturates to +-max, counted as saturated (APFloat toward
// zero gives max there too; its nearest turns an overflow into NaN for E4M3FN and E5M2, so it is not compared).
TEST(BlockApfloat, SaturationAtMax) {
  SplitMix rng{17};
  for (const Element& el : kElements) {
    SCOPED_TRACE(el.block_format);
    const BlockFormatSpec fmt = block_format_from_name(el.block_format);
    const llvm::fltSemantics& sem = el.semantics();
    std::vector<double> ys;
    const double top = std::ldexp(1.0, fmt.emax_elem + 1);
    for (int i = 0; i < 3000; ++i) {
      const auto y = static_cast<float>(fmt.max_elem + (top - fmt.max_elem) * rng.uniform());
      if (y > fmt.max_elem && y < top) {
        ys.push_back(i % 2 ? y : -y);
      }
    }
    BlockWritebackCounts counts;
    for (const char* policy : {"nearest", "stochastic"}) {
      const std::vector<float> out = kernel_round(fmt, make_policy(policy), 3, ys, counts);
      EXPECT_EQ(counts.saturated, static_cast<std::int64_t>(ys.size()));
      for (std::size_t i = 0; i < ys.size(); ++i) {
        ASSERT_EQ(out[i], ys[i] > 0 ? fmt.max_elem : -fmt.max_elem) << ys[i];
        ASSERT_EQ(std::fabs(out[i]), apfloat_round(sem, std::fabs(ys[i]), llvm::RoundingMode::TowardZero));
      }
    }
  }
}

// NVFP4 with S_enc = 1 and s_b a power of two (1 normal, 2^-9 E4M3-subnormal): the decoded grid is s_b * E2M1 exactly.
TEST(BlockApfloat, Nvfp4GridAtPowerOfTwoScalesEqualsApfloat) {
  const BlockFormatParams p = block_format_params(block_format_from_name("nvfp4"));
  const llvm::fltSemantics& sem = llvm::APFloat::Float4E2M1FN();
  SplitMix rng{19};
  const FormatSpec e2m1 = format_from_name("e2m1");
  const std::vector<double> ys = binade_samples(e2m1, 200000, false, rng);
  for (const float amax : {6.0f, 6.0f * 0x1p-9f}) {
    const detail::BlockScale s = detail::nvfp4_scale_of(p, amax, 1.0f);
    ASSERT_TRUE(s.s_b == 1.0f || s.s_b == 0x1p-9f) << s.s_b;
    for (const double y : ys) {
      const detail::ElementNeighbours n = detail::element_neighbours(p, s, ExactSum{y * s.s_b, 0.0});
      ASSERT_EQ(n.nearest / s.s_b, apfloat_round(sem, y, llvm::RoundingMode::NearestTiesToEven)) << y;
      ASSERT_EQ(n.toward_zero / s.s_b, apfloat_round(sem, y, llvm::RoundingMode::TowardZero)) << y;
      ASSERT_EQ(n.away / s.s_b, apfloat_away(sem, y)) << y;
    }
  }
}

// MXINT8: levels n * 2^-6, n = nearbyint(y * 64) (ties to even), clamped to +-127, written plainly.
TEST(BlockApfloat, Mxint8EqualsIntegerReference) {
  const BlockFormatSpec fmt = block_format_from_name("mxint8");
  const BlockFormatParams p = block_format_params(fmt);
  SplitMix rng{23};
  for (int i = 0; i < 1000000; ++i) {
    double y = (rng.uniform() * 2 - 1) * 2.0;
    if (i % 4 == 0) {
      y = (static_cast<double>(rng.below(300)) - 150 + 0.5) / 64;  // ties
    }
    double n = std::nearbyint(y * 64);
    n = std::max(-127.0, std::min(127.0, n));
    detail::BlockScale s;
    s.exp = static_cast<int>(rng.below(21)) - 10;
    const double X = std::ldexp(1.0, s.exp);
    const detail::ElementNeighbours nb = detail::element_neighbours(p, s, ExactSum{y * X, 0.0});
    ASSERT_EQ(nb.nearest / X, n / 64) << y;
    ASSERT_EQ(nb.saturated, std::fabs(y) > 127.0 / 64) << y;
  }
}

}  // namespace
