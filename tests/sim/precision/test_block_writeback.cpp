// The block-scaled write-back (sim/precision/block_writeback.*):
// - the E2M1 nearest-even table and worked examples derived by hand in the comments, through both the Kokkos kernel
//   and the scalar reference: saturation erasure, scale-induced flushes, an rceil collateral move, an rceil rescale
//   that keeps the values, the r-bit SR dead zone, NVFP4's non-idempotence at an E4M3-subnormal block scale (and
//   skip_unchanged_blocks);
// - properties: floor re-quantization is idempotent (values and scales), rceil value-idempotent, SR unbiased (a
//   frequency test with a fixed seed and an 8-sigma bound);
// - the vectorized loops' SR decisions at and around the random word's boundary, against fractions computed here;
// - the kernel equal to the scalar reference bit for bit (values and every count) on random tensors of several
//   shapes (short last blocks, rows of one element, partial 2-D tiles), every format, policy, SR stream and the skip
//   option, under every loop implementation the CPU supports, at the test's thread count;
// - bad input: NaN/inf and out-of-range blocks are refused naming tensor, step and block, with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "reference_formats.hpp"
#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/detail/block_loops.hpp"
#include "sim/precision/writeback_blocks.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace wbaudit::sim {
std::ostream& operator<<(std::ostream& os, const BlockWritebackCounts& c) {
  return os << "{nonzero " << c.nonzero << ", erased " << c.erased << " (grid " << c.erased_grid << ", saturation "
            << c.erased_saturation << ", scale " << c.erased_scale << "), applied " << c.applied << ", collateral "
            << c.collateral << ", flushed " << c.flushed << ", saturated " << c.saturated << ", sr_applied "
            << c.sr_applied << ", sr_truncated " << c.sr_truncated << ", blocks " << c.blocks << ", skipped "
            << c.blocks_skipped << ", up " << c.rescaled_up << ", down " << c.rescaled_down << "}";
}
}  // namespace wbaudit::sim

namespace {

struct Result {
  std::vector<float> w;
  BlockWritebackCounts counts;
};

Result run_kernel(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const RngKey& key,
                  const RowMajorShape& shape, const std::vector<float>& w, const std::vector<float>& u,
                  const BlockWritebackOptions& options = {}) {
  Kokkos::View<float*> wv("w", w.size()), uv("u", u.size());
  std::copy(w.begin(), w.end(), wv.data());
  std::copy(u.begin(), u.end(), uv.data());
  Result r;
  r.counts = block_writeback(fmt, policy, key, shape, wv, Kokkos::View<const float*>(uv), options);
  r.w.assign(wv.data(), wv.data() + w.size());
  return r;
}

Result run_reference(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const RngKey& key,
                     const RowMajorShape& shape, std::vector<float> w, const std::vector<float>& u,
                     const BlockWritebackOptions& options = {}) {
  Result r;
  r.counts = block_writeback_reference(fmt, policy, key, shape, w, u, options);
  r.w = std::move(w);
  return r;
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// Both implementations give `expected` (values compared as values: +0 == -0) and the same counts; returns them.
BlockWritebackCounts expect_both(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const RowMajorShape& shape,
                                 const std::vector<float>& w, const std::vector<float>& u,
                                 const std::vector<float>& expected, const BlockWritebackOptions& options = {}) {
  const RngKey key{42, 3, 1};
  const Result k = run_kernel(fmt, policy, key, shape, w, u, options);
  const Result r = run_reference(fmt, policy, key, shape, w, u, options);
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(k.w[i], expected[i]) << "kernel, coordinate " << i;
    EXPECT_EQ(r.w[i], expected[i]) << "reference, coordinate " << i;
  }
  EXPECT_EQ(k.counts, r.counts);
  return r.counts;
}

std::vector<float> padded(std::vector<float> v, std::size_t n) {
  v.resize(n, 0.0f);
  return v;
}

TEST(BlockWriteback, E2M1NearestEvenTable) {
  // mxfp4_e2m1 (floor), one block of 32 with w = [6, 0, ...]: the proposals below keep |v| < 8, so
  // X = 2^(floor(log2 amax) - 2) = 1 and each element is round_e2m1(u): ties go to the even code (0, 1, 2, 4).
  const std::vector<float> in = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.5f, 6.5f, 7.9f, 0.2f, 0.3f, 2.6f};
  const std::vector<float> out = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, 6.0f, 6.0f, 0.0f, 0.5f, 3.0f};
  std::vector<float> w(32, 0.0f), u(32, 0.0f), expected(32, 0.0f);
  w[0] = expected[0] = 6.0f;
  for (std::size_t i = 0; i < in.size(); ++i) {
    u[1 + i] = in[i];
    expected[1 + i] = out[i];
    u[1 + in.size() + i] = -in[i];  // mirrored
    expected[1 + in.size() + i] = -out[i];
  }
  const auto c = expect_both(block_format_from_name("mxfp4_e2m1"), WritebackPolicy{}, {1, 32}, w, u, expected);
  EXPECT_EQ(c.saturated, 4);  // 6.5, 7.9 and their negatives
  EXPECT_EQ(c.erased, 4);     // +-0.25 and +-0.2 round back to 0
  EXPECT_EQ(c.erased_grid, 4);
  EXPECT_EQ(c.applied, 22);
  EXPECT_EQ(c.rescaled_up + c.rescaled_down, 0);
}

// The same table through NVFP4 at S_enc = 1 (tensor max 2688 = 6 * 448) and s_b = 1 (block max 6: RNE(6 * fl32(1/6))
// = RNE(1.0000001) = 1), where the decoded grid is E2M1 exactly and the midpoints are ties to the even code.
TEST(BlockWriteback, Nvfp4NearestEvenTable) {
  const std::vector<float> in = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const std::vector<float> out = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
  std::vector<float> w(32, 0.0f), u(32, 0.0f), expected(32, 0.0f);
  w[0] = expected[0] = 2688.0f;
  w[16] = expected[16] = 6.0f;
  for (std::size_t i = 0; i < in.size(); ++i) {
    u[17 + i] = in[i];
    expected[17 + i] = out[i];
    u[24 + i] = -in[i];
    expected[24 + i] = -out[i];
  }
  for (const char* name : {"nvfp4", "nvfp4:2d"}) {
    const auto c = expect_both(block_format_from_name(name), WritebackPolicy{}, {1, 32}, w, u, expected);
    EXPECT_EQ(c.erased, 2);  // +-0.25
    EXPECT_EQ(c.applied, 12);
  }
}

// (a) Saturation erasure, floor, E2M1, X = 1. w = [6, 1, 0.5, -3, 2, 1.5, 0, 4, 0 ...]: amax 6 gives
// E = floor(log2 6) - 2 = 0. u_0 in {0.01, 0.5, 1.0}: v_0 in {6.01, 6.5, 7}, floor(log2 v_0) = 2 keeps X = 1, v_0 / X
// saturates to 6 = w_0: erased with cause saturation (scale unchanged, w_0 at +max, u_0 outward); every other
// element has u = 0 and rounds to itself. u_0 = 2: v_0 = 8 gives E = 1, X = 2: w_0 -> 8 / 2 = 4 -> 8 (applied);
// 1 -> 0.5 (stays 1), 0.5 -> 0.25 (tie between 0 and 0.5: even code 0, a flush), -3 -> -1.5 (stays), 2 -> 1 (stays),
// 1.5 -> 0.75 (tie between 0.5 and 1: even code 1.0 -> decodes to 2, a collateral move), 4 -> 2 (stays).
TEST(BlockWriteback, WorkedExampleSaturationErasure) {
  const BlockFormatSpec fmt = block_format_from_name("mxfp4_e2m1");
  const std::vector<float> w = padded({6, 1, 0.5f, -3, 2, 1.5f, 0, 4}, 32);
  for (const float u0 : {0.01f, 0.5f, 1.0f}) {
    SCOPED_TRACE(u0);
    const auto c = expect_both(fmt, WritebackPolicy{}, {1, 32}, w, padded({u0}, 32), w);
    EXPECT_EQ(c.nonzero, 1);
    EXPECT_EQ(c.erased, 1);
    EXPECT_EQ(c.erased_saturation, 1);
    EXPECT_EQ(c.saturated, 1);
    EXPECT_EQ(c.collateral, 0);
    EXPECT_EQ(c.rescaled_up, 0);
  }
  const auto c =
      expect_both(fmt, WritebackPolicy{}, {1, 32}, w, padded({2.0f}, 32), padded({8, 1, 0, -3, 2, 2, 0, 4}, 32));
  EXPECT_EQ(c.applied, 1);
  EXPECT_EQ(c.erased, 0);
  EXPECT_EQ(c.collateral, 2);
  EXPECT_EQ(c.flushed, 1);
  EXPECT_EQ(c.rescaled_up, 1);
}

// (b) Scale-induced flush, floor, E2M1: w = [3.0, 0.25 x 31]; amax 3 gives E = 1 - 2 = -1, X = 0.5 (3 = 6 X,
// 0.25 = 0.5 X). u_0 = 0.9: v_0 = 3.9 keeps E = -1, 3.9 / 0.5 = 7.8 saturates to 6: nothing changes (erased,
// saturation). u_0 = 1.0: v_0 = 4 gives E = 0, X = 1: w_0 -> 4 and each 0.25 / 1 is the tie between 0 and 0.5, which
// goes to the even code 0: all 31 flush to 0.
TEST(BlockWriteback, WorkedExampleScaleInducedFlush) {
  const BlockFormatSpec fmt = block_format_from_name("mxfp4_e2m1");
  std::vector<float> w(32, 0.25f);
  w[0] = 3.0f;
  auto c = expect_both(fmt, WritebackPolicy{}, {1, 32}, w, padded({0.9f}, 32), w);
  EXPECT_EQ(c.erased_saturation, 1);
  EXPECT_EQ(c.collateral, 0);
  c = expect_both(fmt, WritebackPolicy{}, {1, 32}, w, padded({1.0f}, 32), padded({4.0f}, 32));
  EXPECT_EQ(c.applied, 1);
  EXPECT_EQ(c.collateral, 31);
  EXPECT_EQ(c.flushed, 31);
  EXPECT_EQ(c.rescaled_up, 1);
}

// (c) An rceil collateral move, E2M1: w = [6, 0.5, 1.5, 1, 3, 4, 2, 0 ...] at X = 1 (6 <= 6 * 1, 6 > 6 * 0.5).
// u_0 = 0.01: v_0 = 6.01 > 6 * 1, so rceil doubles the scale, X = 2: 6.01 / 2 = 3.005 rounds to 3, which decodes to
// 6 = w_0: erased with cause scale. Meanwhile 0.5 -> 0.25 flushes to 0 (tie, even code 0) and 1.5 -> 0.75 -> 1 -> 2
// (tie, even code 1.0); 1, 3, 4, 2 stay (0.5, 1.5, 2, 1 at X = 2). Under floor the same update keeps X = 1
// (floor(log2 6.01) = 2): a saturation erasure with no collateral move.
TEST(BlockWriteback, WorkedExampleRceilCollateral) {
  const std::vector<float> w = padded({6, 0.5f, 1.5f, 1, 3, 4, 2}, 32);
  const std::vector<float> u = padded({0.01f}, 32);
  auto c = expect_both(block_format_from_name("mxfp4_e2m1:rceil"), WritebackPolicy{}, {1, 32}, w, u,
                       padded({6, 0, 2, 1, 3, 4, 2}, 32));
  EXPECT_EQ(c.erased, 1);
  EXPECT_EQ(c.erased_scale, 1);
  EXPECT_EQ(c.collateral, 2);
  EXPECT_EQ(c.flushed, 1);
  EXPECT_EQ(c.rescaled_up, 1);
  c = expect_both(block_format_from_name("mxfp4_e2m1"), WritebackPolicy{}, {1, 32}, w, u, w);
  EXPECT_EQ(c.erased_saturation, 1);
  EXPECT_EQ(c.collateral, 0);
}

// A block's current scale is the rule applied to its current values. rceil: x = [3.2, 1, 0.5] quantizes at X = 1
// (3.2 <= 6 * 1, 3.2 > 6 * 0.5) to [3, 1, 0.5]; those values imply X = 0.5 (3 = 6 * 0.5), where they are 6, 2, 1:
// re-quantization keeps every value and counts no rescale. An outward update of the max, u_0 = 0.01, then needs
// X = 1 again (3.01 > 3): counted as a rescale up, and 3.01 / 1 rounds back to 3, an erasure with cause scale.
TEST(BlockWriteback, RceilScaleIsTheOneTheValuesImply) {
  const BlockFormatSpec fmt = block_format_from_name("mxfp4_e2m1:rceil");
  std::vector<float> x = padded({3.2f, 1, 0.5f}, 32);
  block_quantize_reference(fmt, {1, 32}, x);
  EXPECT_EQ(x, padded({3, 1, 0.5f}, 32));
  auto c = expect_both(fmt, WritebackPolicy{}, {1, 32}, x, std::vector<float>(32, 0.0f), x);
  EXPECT_EQ(c.rescaled_down + c.rescaled_up, 0);
  EXPECT_EQ(c.collateral, 0);
  c = expect_both(fmt, WritebackPolicy{}, {1, 32}, x, padded({0.01f}, 32), x);
  EXPECT_EQ(c.rescaled_up, 1);
  EXPECT_EQ(c.erased_scale, 1);
  EXPECT_EQ(c.collateral, 0);  // 1 and 0.5 are on the grid at X = 1 too
}

// The r-bit SR dead zone: E2M1 at X = 1 (w_0 = 6), w_1 = 1, u_1 = 0.01: v = 1.01 lies 0.02 of the way from 1 to 1.5;
// with r = 4 bits D = floor(0.02 * 16) = 0, so the update is always erased and counted as sr_truncated. u_2 = 0.2
// (w_2 = 1) is 0.4 of the step: D = 6, random.
TEST(BlockWriteback, RBitDeadZoneIsCounted) {
  const auto policy = make_policy("stochastic", 4);
  const std::vector<float> w = padded({6, 1, 1}, 32);
  const RngKey key{7, 1, 0};
  const Result k =
      run_kernel(block_format_from_name("mxfp4_e2m1"), policy, key, {1, 32}, w, padded({0, 0.01f, 0.2f}, 32));
  const Result r =
      run_reference(block_format_from_name("mxfp4_e2m1"), policy, key, {1, 32}, w, padded({0, 0.01f, 0.2f}, 32));
  EXPECT_EQ(k.w, r.w);
  EXPECT_EQ(k.counts, r.counts);
  EXPECT_EQ(k.w[1], 1.0f);
  EXPECT_TRUE(k.w[2] == 1.0f || k.w[2] == 1.5f);
  EXPECT_EQ(k.counts.sr_truncated, 1);
  EXPECT_EQ(k.counts.sr_applied, 1);
}

// (d) NVFP4 non-idempotence at an E4M3-subnormal block scale. x = [2688, 0 x 15 | 0.01875, 0 x 15] (two blocks of
// 16). amax_t = 2688: S_enc = fl32(2688 / 2688) = 1. Block A: s_b = RNE(fl32(2688 * fl32(1/6))) = RNE(448.00003) = 448,
// 2688 = 6 * 448 / 1 exactly. Block B: s_b = RNE(0.01875 / 6 = 1.6 * 2^-9) = 2 * 2^-9 (E4M3 subnormals are multiples
// of 2^-9); 0.01875 / 2^-8 = 4.8 rounds to 4 (below the midpoint 5): w = 4 * 2^-8 = 0.015625. Re-quantizing with u = 0:
// block B's amax 2^-6 gives s_b = RNE(2^-6 / 6 = 1.33 * 2^-9) = 2^-9, and 2^-6 / 2^-9 = 8 saturates to 6: w -> 6 * 2^-9
// = 0.01171875, a collateral move. (The block's current scale is the one its values imply, here 2^-9 both before and
// after, so no rescale is counted: the state the first quantization left is not on its own grid.) Then it is stable
// (6 * 2^-9 / 6 = 2^-9). Under skip_unchanged_blocks (u all zero) nothing is re-quantized and nothing moves.
TEST(BlockWriteback, WorkedExampleNvfp4SubnormalScaleIsNotIdempotent) {
  const BlockFormatSpec fmt = block_format_from_name("nvfp4");
  std::vector<float> x(32, 0.0f);
  x[0] = 2688.0f;
  x[16] = 0.01875f;
  Kokkos::View<float*> xv("x", 32);
  std::copy(x.begin(), x.end(), xv.data());
  block_quantize(fmt, {1, 32}, xv);
  std::vector<float> q(xv.data(), xv.data() + 32);
  block_quantize_reference(fmt, {1, 32}, x);
  EXPECT_EQ(q, x);
  std::vector<float> expected(32, 0.0f);
  expected[0] = 2688.0f;
  expected[16] = 0.015625f;
  EXPECT_EQ(q, expected);
  const std::vector<float> zeros(32, 0.0f);
  std::vector<float> moved = expected;
  moved[16] = 0.01171875f;
  auto c = expect_both(fmt, WritebackPolicy{}, {1, 32}, q, zeros, moved);
  EXPECT_EQ(c.collateral, 1);
  EXPECT_EQ(c.saturated, 1);
  EXPECT_EQ(c.rescaled_down + c.rescaled_up, 0);
  c = expect_both(fmt, WritebackPolicy{}, {1, 32}, moved, zeros, moved);  // stable afterwards
  EXPECT_EQ(c.collateral, 0);
  BlockWritebackOptions skip;
  skip.skip_unchanged_blocks = true;
  c = expect_both(fmt, WritebackPolicy{}, {1, 32}, q, zeros, q, skip);
  EXPECT_EQ(c.collateral, 0);
  EXPECT_EQ(c.blocks_skipped, 2);
  EXPECT_EQ(c.blocks, 2);
}

// Random test values: a scale per row spanning many binades, magnitudes over the element's range.
std::vector<float> random_values(SplitMix& rng, const RowMajorShape& shape, int spread) {
  std::vector<float> x(static_cast<std::size_t>(shape.size()));
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    const int row_exp = static_cast<int>(rng.below(40)) - 20;
    for (std::int64_t c = 0; c < shape.cols; ++c) {
      const double m = (rng.uniform() * 2 - 1) * std::ldexp(1.0, row_exp - static_cast<int>(rng.below(spread)));
      x[r * shape.cols + c] = rng.below(10) == 0 ? 0.0f : static_cast<float>(m);
    }
  }
  return x;
}

TEST(BlockWriteback, FloorRequantizationIsIdempotent) {
  SplitMix rng{31};
  for (const char* name : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "mxint8"}) {
    SCOPED_TRACE(name);
    const BlockFormatSpec fmt = block_format_from_name(name);
    for (const RowMajorShape shape : {RowMajorShape{4, 96}, RowMajorShape{3, 45}, RowMajorShape{5, 1}}) {
      std::vector<float> x = random_values(rng, shape, 12);
      block_quantize_reference(fmt, shape, x);
      const std::vector<float> zeros(x.size(), 0.0f);
      const Result k = run_kernel(fmt, WritebackPolicy{}, RngKey{}, shape, x, zeros);
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(k.w[i], x[i]) << i;  // as values: a -0 of x re-quantizes to +0 (v = -0 + 0 = +0)
      }
      EXPECT_EQ(k.counts.collateral, 0);
      EXPECT_EQ(k.counts.rescaled_up, 0);  // the scale too
      EXPECT_EQ(k.counts.rescaled_down, 0);
    }
  }
}

TEST(BlockWriteback, RceilRequantizationIsValueIdempotent) {
  SplitMix rng{37};
  for (const char* name : {"mxfp8_e4m3:rceil", "mxfp8_e5m2:rceil", "mxfp6_e3m2:rceil", "mxfp6_e2m3:rceil",
                           "mxfp4_e2m1:rceil", "mxint8:rceil"}) {
    SCOPED_TRACE(name);
    const BlockFormatSpec fmt = block_format_from_name(name);
    std::int64_t rescaled = 0;  // the scale the values imply is the rule's scale of those values
    for (const RowMajorShape shape : {RowMajorShape{8, 96}, RowMajorShape{3, 45}}) {
      std::vector<float> x = random_values(rng, shape, 12);
      block_quantize_reference(fmt, shape, x);
      const std::vector<float> zeros(x.size(), 0.0f);
      const Result k = run_kernel(fmt, WritebackPolicy{}, RngKey{}, shape, x, zeros);
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(k.w[i], x[i]) << i;
      }
      EXPECT_EQ(k.counts.collateral, 0);
      EXPECT_EQ(k.counts.rescaled_up, 0);
      rescaled += k.counts.rescaled_down;
    }
    EXPECT_EQ(rescaled, 0);
  }
}

// SR is unbiased where nothing saturates: one block repeated in N rows (its element rounded N times with independent
// draws: the coordinates differ) moves away from zero with probability p = (|v| - lo) / (hi - lo), with lo, hi its
// neighbours computed here. The count k is checked against N p within 8 standard deviations: with the fixed seed the
// test is deterministic, and a correct implementation fails it with probability below 1e-14 for any seed.
TEST(BlockWriteback, StochasticRoundingIsUnbiased) {
  struct Case {
    const char* format;
    std::vector<float> w, u;
    int index;
    double lo, hi;  // the neighbours of v = w[index] + u[index], from the format's definition
  };
  // e4m3, X = 1 (block max 448): v = 96 + 1.3 lies between 96 and 104 (step 8 in [64, 128)): p = 0.1625.
  // e2m1 rceil, X = 1 (max 6): v = 1 + 0.3 between 1 and 1.5: p = 0.6.
  // nvfp4: amax_t = 1000: S_enc = fl32(2.688), s_b = 448 for the max block, whose grid is fl32(q * 448 / S_enc):
  // v = 500 + 10 lies between fl32(3 * 448 / S_enc) = 500 and fl32(4 * 448 / S_enc) = 666.666687 (computed below).
  const float s_enc = 2688.0f / 1000.0f;
  const double g3 = (3.0f * 448.0f) / s_enc, g4 = (4.0f * 448.0f) / s_enc;
  const std::vector<Case> cases = {
      {"mxfp8_e4m3", padded({448, 96}, 32), padded({0, 1.3f}, 32), 1, 96, 104},
      {"mxfp4_e2m1:rceil", padded({6, 1}, 32), padded({0, 0.3f}, 32), 1, 1, 1.5},
      {"nvfp4", padded({1000, 500}, 16), padded({0, 10}, 16), 1, g3, g4},
  };
  const int N = 20000;
  for (const auto& cs : cases) {
    SCOPED_TRACE(cs.format);
    const BlockFormatSpec fmt = block_format_from_name(cs.format);
    const auto B = static_cast<std::int64_t>(cs.w.size());
    const RowMajorShape shape{N, B};
    std::vector<float> w, u;
    for (int row = 0; row < N; ++row) {
      w.insert(w.end(), cs.w.begin(), cs.w.end());
      u.insert(u.end(), cs.u.begin(), cs.u.end());
    }
    const double v = static_cast<double>(cs.w[cs.index]) + static_cast<double>(cs.u[cs.index]);
    ASSERT_GT(v, cs.lo);
    ASSERT_LT(v, cs.hi);
    const double p = (v - cs.lo) / (cs.hi - cs.lo);
    for (const int r : {0, 16}) {
      const Result k = run_kernel(fmt, make_policy("stochastic", r), RngKey{2024, 7, 5}, shape, w, u);
      int away = 0;
      double sum = 0;
      for (int row = 0; row < N; ++row) {
        const double x = k.w[row * B + cs.index];
        ASSERT_TRUE(x == cs.lo || x == cs.hi) << x;
        away += x == cs.hi;
        sum += x;
      }
      const double sd = std::sqrt(N * p * (1 - p));
      const double p_r = r == 0 ? p : std::floor(p * 65536) / 65536;  // r-bit SR: D / 2^r
      EXPECT_NEAR(away, N * p_r, 8 * sd) << "r = " << r;
      EXPECT_NEAR(sum / N, cs.lo + p_r * (cs.hi - cs.lo), 8 * sd / N * (cs.hi - cs.lo)) << "r = " << r;
    }
  }
}

// Runs f with every implementation of the block loops this CPU supports: AVX-512, AVX2, portable.
template <class F>
void for_each_implementation(F&& f) {
  for (const auto isa : {detail::BlockIsa::avx512, detail::BlockIsa::avx2, detail::BlockIsa::portable}) {
    if (!detail::block_isa_supported(isa)) {
      std::printf("%s loops: not supported by this CPU\n", detail::block_isa_name(isa));
      continue;
    }
    ASSERT_EQ(detail::force_block_isa(isa), isa);
    SCOPED_TRACE(std::string(detail::block_isa_name(isa)) + " loops");
    f();
  }
  detail::force_block_isa(detail::best_block_isa());
}

// The loops' SR decision against the element's first random word, at and around the boundary F = frac * 2^32 of
// the exact probability frac, computed here from the grid: w = 1, u in [2^-11, 2^-10) (fp32, ulp 2^-34), so v = 1 + u
// lies between 1 and 1.5 with frac = u / 0.5 and F = u * 2^33 a multiple of 1/2. A word below floor(F) moves away
// from zero, one above stays, one equal to floor(F) with F not an integer is flagged for the exact path (w kept).
// E2M1 at X = 1 (MX) and NVFP4 with s_b = 1, S_enc = 1 have the same grid; stochastic and deadzone-sr (nearest keeps 1
// and would erase u, so SR draws).
TEST(BlockWriteback, LoopSrDecisionsAtTheWordBoundary) {
  for_each_implementation([&] {
    for (const char* name : {"mxfp4_e2m1", "nvfp4"}) {
      const BlockFormatParams p = block_format_params(block_format_from_name(name));
      for (const char* policy : {"stochastic", "deadzone-sr"}) {
        SCOPED_TRACE(std::string(name) + " " + policy);
        const detail::LoopConfig cfg = detail::loop_config(p, make_policy(policy));
        const detail::BlockLoops loops = detail::block_loops(cfg, detail::active_block_isa());
        detail::LoopBlock lb;
        lb.top_old = 6;
        for (int j = 0; j < 8; ++j) {
          lb.grid[j] = kE2M1Magnitudes[j];
        }
        SplitMix rng{77};
        const int n = 96;
        std::vector<float> w(n, 1.0f), u(n);
        std::vector<std::uint32_t> words(n);
        std::vector<double> F(n);
        for (int i = 0; i < n; ++i) {
          u[i] = static_cast<float>(std::ldexp(1.0 + static_cast<double>(rng.below(1u << 23)) * 0x1p-23, -11));
          F[i] = static_cast<double>(u[i]) * 0x1p33;
          words[i] = static_cast<std::uint32_t>(std::floor(F[i])) + static_cast<std::uint32_t>(i % 3) - 1u;
        }
        std::vector<unsigned char> flags(n);
        detail::LoopCounts lc;
        loops.round(cfg, lb, 0, w.data(), u.data(), words.data(), flags.data(), n, lc);
        // The NVFP4 loop computes F with a division (within 2^-20) and leaves a word within 2^-16 of the window
        // [F - 1, F] open; the MX loop computes F exactly.
        const bool approximate = std::string(name) == "nvfp4";
        int flagged = 0;
        for (int i = 0; i < n; ++i) {
          const double f = std::floor(F[i]);
          if (approximate && flags[i] &&
              (std::fabs(words[i] + 1.0 - F[i]) < 0x1p-16 || std::fabs(words[i] - F[i]) < 0x1p-16)) {
            EXPECT_EQ(w[i], 1.0f) << i;
            ++flagged;
            continue;
          }
          if (words[i] < f) {
            EXPECT_EQ(w[i], 1.5f) << i;
            EXPECT_EQ(flags[i], 0) << i;
          } else if (words[i] > f || F[i] == f) {
            EXPECT_EQ(w[i], 1.0f) << i;
            EXPECT_EQ(flags[i], 0) << i;
          } else {
            EXPECT_EQ(flags[i], 1) << i;
            EXPECT_EQ(w[i], 1.0f) << i;  // left for the exact path
            ++flagged;
          }
        }
        EXPECT_GT(flagged, 0);
        EXPECT_EQ(lc.flagged, flagged);
      }
    }
  });
}

// The kernels' E4M3 rounding of NVFP4 block-scale targets on the fp32 bit pattern equals round_nearest (the exact
// rounding the reference uses): every fp32 value within 256 ulps of each E4M3 value and each midpoint between
// neighbours (and of 464, the tie with 480 beyond the maximum), and a stride over the whole range.
TEST(BlockWriteback, FastE4m3RoundingEqualsExactRounding) {
  const FormatParams e4m3 = format_params(format_from_name("e4m3"));
  auto check = [&](std::uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    const auto exact = static_cast<float>(round_nearest(e4m3, static_cast<double>(x)));
    ASSERT_EQ(bits(detail::e4m3_nearest_saturating(x)), bits(exact)) << x;
  };
  std::vector<double> points = {464.0, 480.0, 1e30};
  for (std::uint32_t c = 0; c < 0x7e; ++c) {
    points.push_back(decode_code(e4m3, c));
    points.push_back((decode_code(e4m3, c) + decode_code(e4m3, c + 1)) / 2);
  }
  points.push_back(448.0);
  std::int64_t checked = 0;
  for (const double pt : points) {
    const std::uint32_t center = bits(static_cast<float>(pt));
    for (std::uint32_t b = center > 256 ? center - 256 : 0; b <= center + 256; ++b) {
      check(b);
      ++checked;
    }
  }
  for (std::uint32_t b = 0; b < 0x7f800000u; b += 1009u) {
    check(b);
    ++checked;
  }
  std::printf("checked %lld values\n", static_cast<long long>(checked));
}

// A proposal of one of several kinds relative to w and the block's magnitude.
float random_proposal(SplitMix& rng, float w, double block_mag) {
  const double aw = std::fabs(static_cast<double>(w)) > 0 ? std::fabs(static_cast<double>(w)) : block_mag;
  const double sign = rng.below(2) ? 1.0 : -1.0;
  switch (rng.below(9)) {
    case 0:
    case 1:
    case 2:
      return 0.0f;
    case 3:
      return static_cast<float>(sign * aw * std::ldexp(rng.uniform(), -static_cast<int>(rng.below(12))));
    case 4:  // far below w's precision: w + u not exact in double
      return static_cast<float>(sign * aw * std::ldexp(1.0 + rng.uniform(), -35 - static_cast<int>(rng.below(20))));
    case 5:  // a power of two near w's grid step: exact ties
      return static_cast<float>(
          sign * std::ldexp(1.0, static_cast<int>(std::floor(std::log2(aw))) - static_cast<int>(rng.below(6))));
    case 6:  // large: the block rescales
      return static_cast<float>(sign * block_mag * (1 + 4 * rng.uniform()));
    case 7:
      return -w;
    default:
      return static_cast<float>(sign * block_mag * rng.uniform());
  }
}

struct PolicyRow {
  const char* name;
  int sr_bits;
  const char* stream;
};

TEST(BlockWriteback, KernelEqualsReferenceBitForBit) {
  const PolicyRow policies[] = {{"nearest", 0, "philox"},           {"stochastic", 0, "philox"},
                                {"stochastic", 8, "philox"},        {"deadzone-sr", 0, "philox"},
                                {"stochastic", 0, "philox-packed"}, {"deadzone-sr", 4, "philox-packed"}};
  const RowMajorShape shapes[] = {{1, 37}, {3, 64}, {5, 33}, {7, 1}, {17, 40}, {1, 1000}, {2, 2100}};
  std::int64_t compared = 0;
  for_each_implementation([&] {
    SplitMix rng{101};
    for (const auto& name : known_block_format_names()) {
      const BlockFormatSpec fmt = block_format_from_name(name);
      for (const RowMajorShape& shape : shapes) {
        for (const PolicyRow& pr : policies) {
          for (const bool skip : {false, true}) {
            SCOPED_TRACE(name + " [" + std::to_string(shape.rows) + " x " + std::to_string(shape.cols) + "] " +
                         pr.name + " r" + std::to_string(pr.sr_bits) + " " + pr.stream + (skip ? " skip" : ""));
            std::vector<float> w = random_values(rng, shape, 14);
            if (rng.below(4) != 0) {
              block_quantize_reference(fmt, shape, w);  // mostly a quantized state
            }
            double mag = 0;
            for (const float x : w) {
              mag = std::max(mag, std::fabs(static_cast<double>(x)));
            }
            std::vector<float> u(w.size());
            for (std::size_t i = 0; i < w.size(); ++i) {
              u[i] = random_proposal(rng, w[i], mag > 0 ? mag : 1.0);
            }
            if (skip && shape.cols > 64) {
              std::fill(u.begin(), u.begin() + 64, 0.0f);  // whole blocks with u = 0
            }
            BlockWritebackOptions options;
            options.skip_unchanged_blocks = skip;
            options.first_coordinate = rng.below(3) == 0 ? rng.below(1u << 20) : 0;
            const RngKey key{rng.next(), rng.below(1000), static_cast<std::uint32_t>(rng.below(50))};
            const WritebackPolicy policy = make_policy(pr.name, pr.sr_bits, pr.stream);
            const Result k = run_kernel(fmt, policy, key, shape, w, u, options);
            const Result r = run_reference(fmt, policy, key, shape, w, u, options);
            for (std::size_t i = 0; i < w.size(); ++i) {
              ASSERT_EQ(bits(k.w[i]), bits(r.w[i])) << "coordinate " << i << ": w = " << w[i] << ", u = " << u[i]
                                                    << ", kernel " << k.w[i] << ", reference " << r.w[i];
            }
            ASSERT_EQ(k.counts, r.counts);
            compared += static_cast<std::int64_t>(w.size());
          }
        }
      }
    }
  });
  std::printf("compared %lld coordinates\n", static_cast<long long>(compared));
}

TEST(BlockWriteback, MasterProjectAndQuantizeEqualReference) {
  SplitMix rng{211};
  for (const auto& name : known_block_format_names()) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    for (const RowMajorShape shape : {RowMajorShape{3, 70}, RowMajorShape{18, 33}}) {
      SCOPED_TRACE(name + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols));
      const std::vector<float> x = random_values(rng, shape, 10);
      std::vector<float> u(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        u[i] = random_proposal(rng, x[i], 1.0);
      }
      // quantize
      std::vector<float> q = x;
      block_quantize_reference(fmt, shape, q);
      Kokkos::View<float*> xv("x", x.size());
      std::copy(x.begin(), x.end(), xv.data());
      block_quantize(fmt, shape, xv);
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(bits(xv(i)), bits(q[i])) << i;
      }
      // project: the counts of writing back q(x) + u, nothing modified
      Kokkos::View<float*> uv("u", u.size());
      std::copy(u.begin(), u.end(), uv.data());
      std::copy(x.begin(), x.end(), xv.data());
      const RngKey key{1, 2, 3};
      const BlockWritebackCounts pk =
          block_project(fmt, key, shape, Kokkos::View<const float*>(xv), Kokkos::View<const float*>(uv));
      EXPECT_EQ(pk, block_project_reference(fmt, key, shape, x, u));
      EXPECT_EQ(pk, run_reference(fmt, WritebackPolicy{}, key, shape, q, u).counts);
      EXPECT_TRUE(std::equal(x.begin(), x.end(), xv.data()));
      // master: master += u in fp32, w = q(master)
      std::vector<float> master = x, wm = q;
      const BlockWritebackCounts mr = block_writeback_master_reference(fmt, key, shape, master, wm, u);
      Kokkos::View<float*> mv("m", x.size()), wv("w", x.size());
      std::copy(x.begin(), x.end(), mv.data());
      std::copy(q.begin(), q.end(), wv.data());
      const BlockWritebackCounts mk = block_writeback_master(fmt, key, shape, mv, wv, Kokkos::View<const float*>(uv));
      EXPECT_EQ(mk, mr);
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(bits(mv(i)), bits(master[i])) << i;
        ASSERT_EQ(bits(mv(i)), bits(x[i] + u[i])) << i;  // nothing is erased in the master
        ASSERT_EQ(bits(wv(i)), bits(wm[i])) << i;
      }
      std::vector<float> qm(master);
      block_quantize_reference(fmt, shape, qm);
      EXPECT_EQ(wm, qm);  // w = q(master)
    }
  }
}

// block_project_scales (a reference's block-sample anchors: q(w) computed once for every scale) against the scalar
// reference block_project_reference of w and fl32(s u), scale by scale, for every block format (2-D tiles and more than
// 8 scales through the per-scale path), under every loop implementation, on shapes with short row-end blocks; and
// values near fp32's top (the per-scale path: the same counts or the same error).
TEST(BlockWriteback, ProjectAtSeveralScalesEqualsOneReferenceProjectionPerScale) {
  const std::vector<double> anchors = {0.125, 0.25, 0.5, 2.0, 4.0, 8.0};
  const std::vector<double> many = {0.125, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0};
  const std::vector<double> one = {1.0};
  std::int64_t compared = 0;
  for_each_implementation([&] {
    SplitMix rng{307};
    for (const auto& name : known_block_format_names()) {
      const BlockFormatSpec fmt = block_format_from_name(name);
      for (const RowMajorShape shape : {RowMajorShape{5, 70}, RowMajorShape{18, 33}, RowMajorShape{2, 1100}}) {
        SCOPED_TRACE(name + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols));
        const std::vector<float> x = random_values(rng, shape, 10);
        std::vector<float> u(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          u[i] = random_proposal(rng, x[i], 1.0);
        }
        Kokkos::View<float*> xv("x", x.size()), uv("u", u.size());
        std::copy(x.begin(), x.end(), xv.data());
        std::copy(u.begin(), u.end(), uv.data());
        const RngKey key{1, 2, 3};
        std::vector<float> q_ref = x;  // q(w), which block_project_scales also hands back on request
        block_quantize_reference(fmt, shape, q_ref);
        for (const auto* scales : {&anchors, &many, &one}) {
          Kokkos::View<float*> qv("q", x.size());
          Kokkos::deep_copy(qv, std::numeric_limits<float>::quiet_NaN());
          const std::vector<BlockWritebackCounts> got =
              block_project_scales(Kokkos::DefaultExecutionSpace(), fmt, key, shape, Kokkos::View<const float*>(xv),
                                   Kokkos::View<const float*>(uv), std::span<const double>(*scales), qv);
          for (std::size_t i = 0; i < x.size(); ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(qv(i)), std::bit_cast<std::uint32_t>(q_ref[i])) << "q(w) at " << i;
          }
          ASSERT_EQ(got.size(), scales->size());
          for (std::size_t k = 0; k < scales->size(); ++k) {
            std::vector<float> us(u.size());
            for (std::size_t i = 0; i < u.size(); ++i) {
              us[i] = static_cast<float>((*scales)[k] * static_cast<double>(u[i]));
            }
            ASSERT_EQ(got[k], block_project_reference(fmt, key, shape, x, us)) << "scale " << (*scales)[k];
            compared += static_cast<std::int64_t>(x.size());
          }
        }
        EXPECT_TRUE(std::equal(x.begin(), x.end(), xv.data()));  // nothing modified
      }
    }
  });
  std::printf("compared %lld coordinates\n", static_cast<long long>(compared));
  // Values near fp32's top: the per-scale path, with block_project's result or error.
  for (const char* name : {"mxfp8_e4m3", "mxfp4_e2m1:rceil", "nvfp4"}) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    const RowMajorShape shape{1, 64};
    Kokkos::View<float*> xv("x", 64), uv("u", 64);
    for (int i = 0; i < 64; ++i) {
      xv(i) = std::ldexp(1.0f + static_cast<float>(i) / 64, 120);
      uv(i) = std::ldexp(1.0f, 118 + i % 3);
    }
    const std::vector<double> scales = {0.5, 8.0};
    std::string fused_error, one_error;
    std::vector<BlockWritebackCounts> fused, one;
    try {
      fused =
          block_project_scales(Kokkos::DefaultExecutionSpace(), fmt, RngKey{}, shape, Kokkos::View<const float*>(xv),
                               Kokkos::View<const float*>(uv), std::span<const double>(scales));
    } catch (const std::exception& e) {
      fused_error = e.what();
    }
    try {
      for (const double s : scales) {
        Kokkos::View<float*> us("us", 64);
        for (int i = 0; i < 64; ++i) {
          us(i) = static_cast<float>(s * static_cast<double>(uv(i)));
        }
        one.push_back(
            block_project(fmt, RngKey{}, shape, Kokkos::View<const float*>(xv), Kokkos::View<const float*>(us)));
      }
    } catch (const std::exception& e) {
      one_error = e.what();
    }
    EXPECT_EQ(fused_error, one_error) << name;
    EXPECT_EQ(fused, one) << name;
  }
}

void expect_message(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* part : parts) {
    EXPECT_NE(msg.find(part), std::string::npos) << "\"" << part << "\" not in: " << msg;
  }
}

TEST(BlockWriteback, BadInputIsRefusedNamingTensorStepBlockAndNothingIsWritten) {
  const RngKey key{9, 7, 3};
  // NaN in u at coordinate 70 of a 2 x 64 mxfp8_e4m3 tensor: row 1, block 3 (columns 32..63)... coordinate 70 is row 1,
  // column 6: block 2 (row 1, columns 0..31)
  {
    const BlockFormatSpec fmt = block_format_from_name("mxfp8_e4m3");
    std::vector<float> w(128, 1.0f), u(128, 0.5f);
    u[70] = std::nanf("");
    for (const bool kernel : {true, false}) {
      try {
        if (kernel) {
          run_kernel(fmt, WritebackPolicy{}, key, {2, 64}, w, u);
        } else {
          std::vector<float> wr = w;
          block_writeback_reference(fmt, WritebackPolicy{}, key, {2, 64}, wr, u);
        }
        FAIL() << "no error";
      } catch (const NonFiniteError& e) {
        expect_message(e.what(), {"tensor 3", "step 7", "block 2 (row 1, columns 0..31)", "coordinate 70", "u = nan",
                                  "nothing was written"});
      }
    }
    Kokkos::View<float*> wv("w", 128), uv("u", 128);
    std::copy(w.begin(), w.end(), wv.data());
    std::copy(u.begin(), u.end(), uv.data());
    EXPECT_THROW(block_writeback(fmt, WritebackPolicy{}, key, {2, 64}, wv, Kokkos::View<const float*>(uv)),
                 NonFiniteError);
    EXPECT_TRUE(std::all_of(wv.data(), wv.data() + 128, [](float x) { return x == 1.0f; }));
  }
  // mxint8: |w + u| = 3.8 * 2^127 needs 2^128 (floor and rceil): beyond E8M0
  for (const char* name : {"mxint8", "mxint8:rceil"}) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    std::vector<float> w(64, 1.0f), u(64, 0.0f);
    w[40] = u[40] = 1.9f * 0x1p127f;
    for (const bool kernel : {true, false}) {
      std::vector<float> wr = w;
      try {
        if (kernel) {
          Kokkos::View<float*> wv("w", 64), uv("u", 64);
          std::copy(w.begin(), w.end(), wv.data());
          std::copy(u.begin(), u.end(), uv.data());
          try {
            block_writeback(fmt, WritebackPolicy{}, key, {1, 64}, wv, Kokkos::View<const float*>(uv));
          } catch (...) {
            EXPECT_TRUE(std::equal(w.begin(), w.end(), wv.data()));  // nothing written
            throw;
          }
        } else {
          block_writeback_reference(fmt, WritebackPolicy{}, key, {1, 64}, wr, u);
        }
        FAIL() << "no error";
      } catch (const BlockScaleError& e) {
        expect_message(e.what(), {"tensor 3", "step 7", "block 1 (row 0, columns 32..63)", "2^128", "E8M0"});
      }
      EXPECT_EQ(wr, w);
    }
  }
  // mxfp8_e4m3 (floor): |w + u| = 1.5 * 2^128 gives X = 2^120, and 1.5 * 2^8 = 384 decodes to 1.5 * 2^128 > FLT_MAX
  {
    const BlockFormatSpec fmt = block_format_from_name("mxfp8_e4m3");
    std::vector<float> w(32, 0.0f), u(32, 0.0f);
    w[5] = u[5] = 0x1.8p127f;
    std::vector<float> wr = w;
    EXPECT_THROW(block_writeback_reference(fmt, WritebackPolicy{}, key, {1, 32}, wr, u), BlockScaleError);
    EXPECT_THROW(run_kernel(fmt, WritebackPolicy{}, key, {1, 32}, w, u), BlockScaleError);
  }
  // nvfp4: fl32(w + u) overflows, so S_enc is undefined
  {
    const BlockFormatSpec fmt = block_format_from_name("nvfp4");
    std::vector<float> w(48, 0.0f), u(48, 0.0f);
    w[20] = u[20] = 0x1.fffffep127f;
    try {
      run_kernel(fmt, WritebackPolicy{}, key, {1, 48}, w, u);
      FAIL() << "no error";
    } catch (const BlockScaleError& e) {
      expect_message(e.what(), {"tensor 3", "step 7", "block 1 (row 0, columns 16..31)", "coordinate 20"});
    }
  }
  // the master update overflowing fp32
  {
    const BlockFormatSpec fmt = block_format_from_name("mxfp6_e2m3");
    Kokkos::View<float*> mv("m", 32), wv("w", 32), uv("u", 32);
    mv(3) = 0x1.fffffep127f;
    uv(3) = 0x1.fffffep127f;
    EXPECT_THROW(block_writeback_master(fmt, key, {1, 32}, mv, wv, Kokkos::View<const float*>(uv)), NonFiniteError);
    EXPECT_EQ(mv(3), 0x1.fffffep127f);
  }
  // arguments
  {
    const BlockFormatSpec fmt = block_format_from_name("nvfp4");
    EXPECT_THROW(run_kernel(fmt, WritebackPolicy{}, key, {2, 10}, std::vector<float>(21), std::vector<float>(21)),
                 std::invalid_argument);
    EXPECT_THROW(run_kernel(fmt, make_policy("master"), key, {1, 4}, std::vector<float>(4), std::vector<float>(4)),
                 std::invalid_argument);
  }
}

}  // namespace
