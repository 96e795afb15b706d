// The block-scaled write-back kernel (sim/precision/block_writeback.*) against the scalar reference
// (block_writeback_reference, block_reference.cpp) bit for bit on dense tensors: 2^20 coordinates per format and
// policy, every block format, nearest, full-width SR, r-bit SR and deadzone-sr, under every loop implementation the
// CPU supports (the reference runs once per case, the kernel once per implementation), at the test's thread count
// (ctest runs it with 1 and 2 threads). Kept apart from test_block_writeback.cpp because it runs for tens of seconds.
//
// Each run of 32 columns (an MX block, two 1-D NVFP4 blocks, half a row of a 2-D tile) draws one kind, at a magnitude
// 2^0 .. 2^-24 below the tensor's largest (the low ones put NVFP4 block scales in E4M3's subnormal range or at zero):
// random values and proposals; exact ties (proposals a power of two near w's grid step); the block's largest elements
// pushed outward (saturation erasures); proposals that rescale the block up, or cancel its largest element (down);
// zero blocks with zero or tiny proposals; proposals far below w's precision (w + u not exact in double); u = 0
// (collateral moves, skipped blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

constexpr std::int64_t kRows = 256, kCols = 4096;  // 2^20 coordinates, 16x16 tiles and spans of 1024 fit exactly
constexpr std::int64_t kRun = 32;

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

struct Tensor {
  std::vector<float> w, u;
};

// The largest-|w| elements of w[begin, begin + len) get a proposal pointing away from zero.
void push_largest_outward(SplitMix& rng, Tensor& t, std::int64_t begin, std::int64_t len) {
  float top = 0;
  for (std::int64_t k = begin; k < begin + len; ++k) {
    top = std::max(top, std::fabs(t.w[k]));
  }
  for (std::int64_t k = begin; k < begin + len; ++k) {
    if (top > 0 && std::fabs(t.w[k]) == top) {
      const double step = std::ldexp(static_cast<double>(top), -static_cast<int>(rng.below(8)) - 1);
      t.u[k] = static_cast<float>(std::copysign(step, static_cast<double>(t.w[k])));
    }
  }
}

Tensor adversarial_tensor(SplitMix& rng, const BlockFormatSpec& fmt) {
  const RowMajorShape shape{kRows, kCols};
  Tensor t;
  t.w.resize(static_cast<std::size_t>(shape.size()));
  t.u.resize(t.w.size());
  std::vector<int> kind(t.w.size() / kRun);
  std::vector<double> mag(kind.size());
  for (std::size_t r = 0; r < kind.size(); ++r) {
    kind[r] = static_cast<int>(rng.below(9));
    mag[r] = std::ldexp(1.0, -static_cast<int>(rng.below(25)));
    for (std::int64_t k = 0; k < kRun; ++k) {
      const double x = (rng.uniform() * 2 - 1) * mag[r] * std::ldexp(1.0, -static_cast<int>(rng.below(6)));
      t.w[r * kRun + k] = kind[r] == 5 || rng.below(12) == 0 ? 0.0f : static_cast<float>(x);
    }
  }
  t.w[0] = 1.0f;  // the tensor's largest magnitude (NVFP4's tensor scale)
  if (rng.below(8) != 0) {
    block_quantize_reference(fmt, shape, t.w);  // mostly a quantized state
  }
  for (std::size_t r = 0; r < kind.size(); ++r) {
    const std::int64_t b = static_cast<std::int64_t>(r) * kRun;
    for (std::int64_t k = b; k < b + kRun; ++k) {
      const double aw = t.w[k] != 0 ? std::fabs(static_cast<double>(t.w[k])) : mag[r];
      const double sign = rng.below(2) ? 1.0 : -1.0;
      float u = 0;
      switch (kind[r]) {
        case 0:  // random
          u = rng.below(3) == 0
                  ? 0.0f
                  : static_cast<float>(sign * aw * std::ldexp(rng.uniform(), -static_cast<int>(rng.below(12))));
          break;
        case 1:  // a power of two near w's grid step: exact ties
          u = static_cast<float>(
              sign * std::ldexp(1.0, static_cast<int>(std::floor(std::log2(aw))) - static_cast<int>(rng.below(8))));
          break;
        case 2:  // saturation (below), the rest small
          u = static_cast<float>(sign * aw * std::ldexp(rng.uniform(), -4));
          break;
        case 3:  // rescale up
          u = rng.below(4) == 0 ? static_cast<float>(sign * mag[r] * (1 + 8 * rng.uniform())) : 0.0f;
          break;
        case 4:  // rescale down: the largest elements cancelled (below)
          u = rng.below(2) == 0 ? static_cast<float>(sign * aw * std::ldexp(rng.uniform(), -6)) : 0.0f;
          break;
        case 5:  // zero block, zero or tiny proposals
          u = rng.below(2) == 0 ? 0.0f : static_cast<float>(sign * mag[r] * std::ldexp(rng.uniform(), -20));
          break;
        case 6:  // far below w's precision: w + u not exact in double
          u = static_cast<float>(sign * aw * std::ldexp(1.0 + rng.uniform(), -35 - static_cast<int>(rng.below(20))));
          break;
        case 7:  // u = 0: collateral moves only, skipped blocks
          u = 0.0f;
          break;
        default:  // proposals cancelling w
          u = rng.below(2) == 0 ? -t.w[k] : static_cast<float>(sign * aw * rng.uniform());
          break;
      }
      t.u[k] = u;
    }
    if (kind[r] == 2) {
      push_largest_outward(rng, t, b, kRun);
      push_largest_outward(rng, t, b, kRun / 2);
      push_largest_outward(rng, t, b + kRun / 2, kRun / 2);
    } else if (kind[r] == 4) {
      float top = 0;
      for (std::int64_t k = b; k < b + kRun; ++k) {
        top = std::max(top, std::fabs(t.w[k]));
      }
      for (std::int64_t k = b; k < b + kRun; ++k) {
        if (std::fabs(t.w[k]) == top) {
          t.u[k] = -t.w[k];
        }
      }
    }
  }
  return t;
}

struct PolicyRow {
  const char* name;
  int sr_bits;
};

// The kernel under every loop implementation the CPU supports against the reference's w' and counts rc, bit for bit.
// Returns the coordinates compared.
std::int64_t compare_kernel(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const RngKey& key,
                            const Tensor& t, const BlockWritebackOptions& options, const std::vector<float>& ref,
                            const BlockWritebackCounts& rc) {
  const RowMajorShape shape{kRows, kCols};
  std::int64_t compared = 0;
  for (const auto isa : {detail::BlockIsa::avx512, detail::BlockIsa::avx2, detail::BlockIsa::portable}) {
    if (!detail::block_isa_supported(isa)) {
      continue;
    }
    EXPECT_EQ(detail::force_block_isa(isa), isa);
    SCOPED_TRACE(std::string(detail::block_isa_name(isa)) + " loops");
    Kokkos::View<float*> wv("w", t.w.size()), uv("u", t.u.size());
    std::copy(t.w.begin(), t.w.end(), wv.data());
    std::copy(t.u.begin(), t.u.end(), uv.data());
    const BlockWritebackCounts kc =
        block_writeback(fmt, policy, key, shape, wv, Kokkos::View<const float*>(uv), options);
    for (std::size_t i = 0; i < t.w.size(); ++i) {
      if (bits(wv(i)) != bits(ref[i])) {
        ADD_FAILURE() << "coordinate " << i << ": w = " << t.w[i] << ", u = " << t.u[i] << ", kernel " << wv(i)
                      << ", reference " << ref[i];
        break;
      }
    }
    EXPECT_EQ(kc, rc);
    compared += static_cast<std::int64_t>(t.w.size());
  }
  detail::force_block_isa(detail::best_block_isa());
  return compared;
}

TEST(BlockWritebackDense, KernelEqualsReferenceOnAdversarialTensors) {
  const PolicyRow policies[] = {{"nearest", 0}, {"stochastic", 0}, {"stochastic", 8}, {"deadzone-sr", 0}};
  const RowMajorShape shape{kRows, kCols};
  SplitMix rng{2029};
  std::int64_t compared = 0;
  BlockWritebackCounts seen;
  for (const auto& name : known_block_format_names()) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    for (const PolicyRow& pr : policies) {
      SCOPED_TRACE(name + " " + pr.name + " r" + std::to_string(pr.sr_bits));
      const Tensor t = adversarial_tensor(rng, fmt);
      BlockWritebackOptions options;
      options.skip_unchanged_blocks = rng.below(4) == 0;
      options.first_coordinate = rng.below(2) == 0 ? rng.below(1u << 20) : 0;
      const RngKey key{rng.next(), rng.below(1000), static_cast<std::uint32_t>(rng.below(50))};
      const WritebackPolicy policy = make_policy(pr.name, pr.sr_bits);
      std::vector<float> ref = t.w;
      const BlockWritebackCounts rc = block_writeback_reference(fmt, policy, key, shape, ref, t.u, options);
      seen += rc;
      compared += compare_kernel(fmt, policy, key, t, options, ref, rc);
    }
  }
  std::printf("compared %lld coordinates\n", static_cast<long long>(compared));
  // The tensors reach every event and both rescale directions (the reference's counts over all cases).
  EXPECT_GT(seen.erased_grid, 0);
  EXPECT_GT(seen.erased_saturation, 0);
  EXPECT_GT(seen.erased_scale, 0);
  EXPECT_GT(seen.applied, 0);
  EXPECT_GT(seen.collateral, 0);
  EXPECT_GT(seen.flushed, 0);
  EXPECT_GT(seen.saturated, 0);
  EXPECT_GT(seen.sr_applied, 0);
  EXPECT_GT(seen.sr_truncated, 0);
  EXPECT_GT(seen.blocks_skipped, 0);
  EXPECT_GT(seen.rescaled_up, 0);
  EXPECT_GT(seen.rescaled_down, 0);
}

// MX blocks at the extremes of the scale range, nearest: the adversarial tensors scaled by 2^k, so that a tensor's
// block exponents straddle the fused loop's range (LoopConfig::fused_emin .. fused_emax; the blocks outside it take
// the scale-in path within the same spans): tiny scales whose element subnormals lie near or in fp32's subnormal range
// (k = -90, -108), and the largest, where max_elem * X approaches fp32's max (k = 124: |w + u| up to about 2^127.3).
TEST(BlockWritebackDense, MxKernelEqualsReferenceAtExtremeScales) {
  const RowMajorShape shape{kRows, kCols};
  SplitMix rng{2030};
  std::int64_t compared = 0;
  BlockWritebackCounts seen;
  for (const auto& name : known_block_format_names()) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    if (block_format_params(fmt).family != BlockFamily::mx) {
      continue;
    }
    for (const int k : {-90, -108, 124}) {
      SCOPED_TRACE(name + " nearest, scaled by 2^" + std::to_string(k));
      Tensor t = adversarial_tensor(rng, fmt);
      for (std::size_t i = 0; i < t.w.size(); ++i) {
        t.w[i] = std::ldexp(t.w[i], k);
        t.u[i] = std::ldexp(t.u[i], k);
      }
      BlockWritebackOptions options;
      options.skip_unchanged_blocks = rng.below(4) == 0;
      const RngKey key{rng.next(), rng.below(1000), static_cast<std::uint32_t>(rng.below(50))};
      const WritebackPolicy policy = make_policy("nearest", 0);
      std::vector<float> ref = t.w;
      const BlockWritebackCounts rc = block_writeback_reference(fmt, policy, key, shape, ref, t.u, options);
      seen += rc;
      compared += compare_kernel(fmt, policy, key, t, options, ref, rc);
    }
  }
  std::printf("compared %lld coordinates\n", static_cast<long long>(compared));
  EXPECT_GT(seen.erased_saturation, 0);
  EXPECT_GT(seen.flushed, 0);
  EXPECT_GT(seen.saturated, 0);
  EXPECT_GT(seen.rescaled_up, 0);
  EXPECT_GT(seen.rescaled_down, 0);
}

// NVFP4 ties: every element of a 1-D NVFP4 block sent exactly onto a midpoint of its block's decoded grid, (g_j +
// g_j+1) / 2, from below or above, where nearest rounds to the even code (kind 1's power-of-two ties rarely land on
// NVFP4's grids, whose steps carry S_enc's factor 1/21). The grid is nvfp4_scale_of's for the block's max |w|, which
// the proposals keep (the block maximum and w[0], the tensor's, get u = 0), so the write-back's new grid is that grid
// again; the test counts the sums that are midpoints of it (brute force over the 7 midpoints) to show the ties happen.
TEST(BlockWritebackDense, Nvfp4KernelEqualsReferenceOnExactMidpoints) {
  const RowMajorShape shape{kRows, kCols};
  const BlockFormatSpec fmt = block_format_from_name("nvfp4");
  const BlockFormatParams p = block_format_params(fmt);
  SplitMix rng{2031};
  std::int64_t compared = 0, midpoints = 0;
  for (const PolicyRow& pr : {PolicyRow{"nearest", 0}, PolicyRow{"deadzone-sr", 0}}) {
    SCOPED_TRACE(std::string("nvfp4 ") + pr.name);
    Tensor t;
    t.w.resize(static_cast<std::size_t>(shape.size()));
    t.u.assign(t.w.size(), 0.0f);
    for (std::size_t b = 0; b < t.w.size(); b += 16) {
      const double mag = std::ldexp(1.0, -static_cast<int>(rng.below(12)));
      for (std::size_t k = b; k < b + 16; ++k) {
        t.w[k] = rng.below(10) == 0 ? 0.0f : static_cast<float>((rng.uniform() * 2 - 1) * mag);
      }
    }
    t.w[0] = 1.0f;  // the tensor's largest |w + u|: S_enc stays nvfp4_tensor_scale(1)
    block_quantize_reference(fmt, shape, t.w);
    ASSERT_EQ(t.w[0], 1.0f);
    const float s_enc = nvfp4_tensor_scale(1.0f);
    for (std::size_t b = 0; b < t.w.size(); b += 16) {
      float amax = 0;
      for (std::size_t k = b; k < b + 16; ++k) {
        amax = std::max(amax, std::fabs(t.w[k]));
      }
      const detail::BlockScale sc = detail::nvfp4_scale_of(p, amax, s_enc);
      for (std::size_t k = b; k < b + 16; ++k) {
        const float aw = std::fabs(t.w[k]);
        const int j = static_cast<int>(std::find(sc.grid, sc.grid + 8, aw) - sc.grid);
        if (k == 0 || aw == amax || j == 8) {
          continue;  // the maxima stay; a value off the grid (a non-idempotent scale) is left alone
        }
        const bool up = j == 0 || rng.below(2) == 0;  // j < 7 here (aw < amax <= g_7)
        const double half = up ? (static_cast<double>(sc.grid[j + 1]) - sc.grid[j]) / 2
                               : (static_cast<double>(sc.grid[j]) - sc.grid[j - 1]) / 2;
        const double sign = std::signbit(t.w[k]) ? -1.0 : 1.0;
        const double u = (up ? sign : -sign) * half;
        if (static_cast<double>(static_cast<float>(u)) == u) {
          t.u[k] = static_cast<float>(u);
        }
      }
      for (std::size_t k = b; k < b + 16; ++k) {  // brute force: |w + u| on a midpoint of the grid
        const double a = std::fabs(static_cast<double>(t.w[k]) + t.u[k]);
        for (int m = 0; m < 7; ++m) {
          midpoints += t.u[k] != 0.0f && a == (static_cast<double>(sc.grid[m]) + sc.grid[m + 1]) / 2;
        }
      }
    }
    const RngKey key{rng.next(), rng.below(1000), static_cast<std::uint32_t>(rng.below(50))};
    const WritebackPolicy policy = make_policy(pr.name, pr.sr_bits);
    std::vector<float> ref = t.w;
    const BlockWritebackCounts rc = block_writeback_reference(fmt, policy, key, shape, ref, t.u, {});
    EXPECT_EQ(rc.rescaled_up + rc.rescaled_down, 0);  // the grids stayed
    compared += compare_kernel(fmt, policy, key, t, {}, ref, rc);
  }
  std::printf("compared %lld coordinates, %lld sums on a midpoint\n", static_cast<long long>(compared),
              static_cast<long long>(midpoints));
  EXPECT_GT(midpoints, kRows * kCols);  // over the two policies: more than half the coordinates are ties
}

}  // namespace
