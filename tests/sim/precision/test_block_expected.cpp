// The expected erased events of SR into block-scaled formats on a reference state (sim/precision/block_expected.hpp),
// against references that do not use the code under test:
// - r-bit SR (stochastic and deadzone-sr, both SR streams): the exact expectation by enumeration. The real write-back
//   (block_writeback on q(w), with u) is run with seed after seed; a coordinate's r-bit draw R is the top r bits of
//   the first word of its SR stream (rng.hpp), so the seeds give each coordinate every R in 0..2^r-1; the outcome
//   must be the same whenever R repeats (it depends on the coordinate's own draw only: the scales depend on v alone),
//   and the exact mean over the 2^r draws, summed over the coordinates, must equal the expected count exactly;
// - exact SR: the mean erased count of 400 real SR write-backs within 6 standard errors (fixed seeds: deterministic),
//   and within nonzero * 2^-24 of the 24-bit expectation;
// - hand-derived vectors (MX E2M1, floor);
// - every block family (MX floor and rceil, MXINT8, NVFP4 and nvfp4:2d) and identical doubles on Serial and OpenMP.
#include "sim/precision/block_expected.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "reference_formats.hpp"
#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/writeback.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace {

const char* const kFormats[] = {"mxfp8_e4m3",       "mxfp8_e5m2", "mxfp6_e3m2",   "mxfp6_e2m3",       "mxfp4_e2m1",
                                "mxfp4_e2m1:rceil", "mxint8",     "mxint8:rceil", "mxfp8_e4m3:rceil", "nvfp4",
                                "nvfp4:2d"};

struct State {
  RowMajorShape shape;
  std::vector<float> w, u;
};

// Rows at magnitudes 2^-8 .. 2^8 (one row 2^-20 below the others: NVFP4 E4M3-subnormal and zero block scales), a
// block of zeros, proposals from 2^-14 of the row's magnitude to about its size, of either sign, some zero, and a
// few pushing a block's largest element outward (rescales, saturation).
State make_state(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  SplitMix rng{seed};
  State s;
  s.shape = RowMajorShape{rows, cols};
  for (std::int64_t r = 0; r < rows; ++r) {
    const double mag = r == 1 ? std::ldexp(1.0, -20) : std::ldexp(1.0, static_cast<int>(rng.below(17)) - 8);
    for (std::int64_t c = 0; c < cols; ++c) {
      double w = mag * (2 * rng.uniform() - 1);
      if (rng.below(8) == 0) w *= 4;  // a few larger elements: block maxima
      if (r == 2 && c < 16) w = 0;    // zero blocks (nvfp4:2d: part of a tile)
      double u = mag * std::ldexp(rng.uniform(), -static_cast<int>(rng.below(15)));
      if (rng.below(2)) u = -u;
      if (rng.below(10) == 0) u = 0;
      if (rng.below(16) == 0) u = 0.75 * w;  // outward: can raise the block's scale
      s.w.push_back(static_cast<float>(w));
      s.u.push_back(static_cast<float>(u));
    }
  }
  return s;
}

Kokkos::View<const float*> view_of(const std::vector<float>& v) {
  Kokkos::View<float*> out("wbaudit::test::block_expected::v", v.size());
  auto h = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(out, h);
  return out;
}

std::vector<float> quantized(const BlockFormatSpec& fmt, const State& s) {
  std::vector<float> q = s.w;
  block_quantize_reference(fmt, s.shape, q);
  return q;
}

// One real SR write-back of q(w) + u with the given seed: erased[i] = (u_i != 0 and w'_i == q_i).
std::vector<char> erased_flags(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const RngKey& key,
                               const State& s, const std::vector<float>& q, std::int64_t* count = nullptr) {
  Kokkos::View<float*> w("wbaudit::test::block_expected::w", q.size());
  Kokkos::deep_copy(w, view_of(q));
  const BlockWritebackCounts c = block_writeback(fmt, policy, key, s.shape, w, view_of(s.u));
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
  std::vector<char> out(q.size(), 0);
  std::int64_t n = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    out[i] = s.u[i] != 0 && h(i) == q[i];
    n += out[i];
  }
  EXPECT_EQ(n, c.erased);  // the write-back's own count agrees with the flags
  if (count != nullptr) *count = n;
  return out;
}

// The exact expected erased count of r-bit SR by enumerating every coordinate's 2^r draws with real write-backs:
// returned as an integer count of 2^-r units.
std::int64_t enumerated_units(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const State& s) {
  const int r = policy.sr_bits;
  const std::int64_t levels = std::int64_t{1} << r;
  const std::vector<float> q = quantized(fmt, s);
  const std::size_t n = q.size();
  std::vector<signed char> seen(n * static_cast<std::size_t>(levels), -1);  // outcome per coordinate and draw R
  std::vector<std::int64_t> covered(n, 0);
  std::int64_t open = 0;
  for (std::size_t i = 0; i < n; ++i) open += s.u[i] != 0;
  const std::uint64_t step = 3;
  const std::uint32_t tensor = 1;
  std::uint64_t seed = 100;
  for (; open > 0; ++seed) {
    if (seed > 100 + 64 * static_cast<std::uint64_t>(levels) + 4000) {
      ADD_FAILURE() << "seeds did not cover every draw of " << open << " coordinates";
      return -1;
    }
    const RngKey key{seed, step, tensor};
    const std::vector<char> erased = erased_flags(fmt, policy, key, s, q);
    for (std::size_t i = 0; i < n; ++i) {
      if (s.u[i] == 0) continue;
      PhiloxStream stream = sr_stream_of(policy, key, i);
      const std::uint32_t word = stream.next();
      const std::size_t R = r == 32 ? word : word >> (32 - r);
      signed char& cell = seen[i * static_cast<std::size_t>(levels) + R];
      if (cell < 0) {
        cell = static_cast<signed char>(erased[i]);
        if (++covered[i] == levels) --open;
      } else {
        EXPECT_EQ(cell, erased[i]) << "coordinate " << i << ": the outcome is not a function of its own draw R = " << R;
      }
    }
  }
  std::int64_t units = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (s.u[i] == 0) continue;
    for (std::int64_t R = 0; R < levels; ++R) units += seen[i * static_cast<std::size_t>(levels) + R];
  }
  return units;
}

std::string label(const char* fmt, const WritebackPolicy& p) {
  return std::string(fmt) + " " + projection_name(p) + (p.stream == SrStream::philox_packed ? " packed" : "");
}

}  // namespace

TEST(ExpectedBlockErasure, RBitEqualsTheExactMeanOverEveryDrawOfTheRealWriteBack) {
  const WritebackPolicy policies[] = {{Policy::stochastic, 4, SrStream::philox},
                                      {Policy::deadzone_sr, 4, SrStream::philox},
                                      {Policy::stochastic, 3, SrStream::philox_packed}};
  for (const char* name : kFormats) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    const State s = make_state(fmt.tiles_2d ? 20 : 6, 40, 17);
    for (const WritebackPolicy& policy : policies) {
      SCOPED_TRACE(label(name, policy));
      const std::int64_t units = enumerated_units(fmt, policy, s);
      const ExpectedErasure e =
          expected_block_erasure(fmt, policy, RngKey{1, 3, 1}, s.shape, view_of(s.w), view_of(s.u));
      EXPECT_EQ(e.expected_erased, std::ldexp(static_cast<double>(units), -policy.sr_bits));
      std::int64_t nonzero = 0;
      for (float x : s.u) nonzero += x != 0;
      EXPECT_EQ(e.nonzero, nonzero);
      // Not vacuous: some coordinates are erased under some draws and applied under others.
      EXPECT_GT(e.expected_erased, 0.02 * static_cast<double>(nonzero));
      EXPECT_LT(e.expected_erased, 0.98 * static_cast<double>(nonzero));
    }
  }
}

TEST(ExpectedBlockErasure, EightBitSrEqualsTheExactMeanOverEveryDraw) {
  for (const char* name : {"mxfp4_e2m1", "mxint8:rceil", "nvfp4"}) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    const State s = make_state(3, 40, 23);
    for (const WritebackPolicy& policy :
         {WritebackPolicy{Policy::stochastic, 8}, WritebackPolicy{Policy::deadzone_sr, 8}}) {
      SCOPED_TRACE(label(name, policy));
      const std::int64_t units = enumerated_units(fmt, policy, s);
      const ExpectedErasure e =
          expected_block_erasure(fmt, policy, RngKey{1, 3, 1}, s.shape, view_of(s.w), view_of(s.u));
      EXPECT_EQ(e.expected_erased, std::ldexp(static_cast<double>(units), -8));
    }
  }
}

// Exact SR: the mean of 400 real write-backs (fixed seeds) within 6 standard errors; the variance of the erased count
// is sum p (1 - p) <= min(E, nonzero - E). And the exact probabilities lie within 2^-24 of their 24-bit truncations.
TEST(ExpectedBlockErasure, ExactSrIsTheMeanOfManyRealWriteBacks) {
  for (const char* name : kFormats) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    const State s = make_state(fmt.tiles_2d ? 20 : 6, 40, 29);
    const std::vector<float> q = quantized(fmt, s);
    for (const Policy pol : {Policy::stochastic, Policy::deadzone_sr}) {
      const WritebackPolicy policy{pol, 0};
      SCOPED_TRACE(label(name, policy));
      const ExpectedErasure e =
          expected_block_erasure(fmt, policy, RngKey{1, 5, 2}, s.shape, view_of(s.w), view_of(s.u));
      const int runs = 400;
      double total = 0;
      std::int64_t differs = 0;  // coordinates seen both erased and applied
      std::vector<int> times(q.size(), 0);
      for (int k = 0; k < runs; ++k) {
        std::int64_t count = 0;
        const std::vector<char> erased = erased_flags(fmt, policy, RngKey{std::uint64_t(7000 + k), 5, 2}, s, q, &count);
        total += static_cast<double>(count);
        for (std::size_t i = 0; i < q.size(); ++i) times[i] += erased[i];
      }
      for (std::size_t i = 0; i < q.size(); ++i) differs += times[i] > 0 && times[i] < runs;
      const double mean = total / runs;
      const double var = std::min(e.expected_erased, static_cast<double>(e.nonzero) - e.expected_erased);
      EXPECT_LE(std::fabs(mean - e.expected_erased), 6 * std::sqrt(std::max(var, 0.0) / runs) + 1e-9)
          << "mean " << mean << ", expected " << e.expected_erased;
      EXPECT_GT(differs, 10) << "SR decided too few coordinates for the test to tell";
      const ExpectedErasure e24 =
          expected_block_erasure(fmt, WritebackPolicy{pol, 24}, RngKey{1, 5, 2}, s.shape, view_of(s.w), view_of(s.u));
      EXPECT_LE(std::fabs(e.expected_erased - e24.expected_erased), static_cast<double>(e.nonzero) * 0x1p-24 + 1e-9);
    }
  }
}

// MX E2M1, floor, one 32-block w = [4, 1, 0.5, 0 x 29] (X = 1: grid 0, 0.5, 1, 1.5, 2, 3, 4, 6), u = [1, 0.125,
// 0.375, 0 x 29]. v_0 = 5 keeps X = 1 (floor(log2 5) - 2 = 0) and lies between 4 and 6: P(6) = 1/2, erased 1/2.
// v_1 = 1.125 between 1 and 1.5: P(1.5) = 1/4, erased 3/4. v_2 = 0.875 between 0.5 and 1: P(1) = 3/4, erased 1/4.
// Exact SR: 1.5. 1-bit SR: P(away) = floor(2 p) / 2 = 1/2, 0, 1/2: erased 1/2 + 1 + 1/2 = 2. deadzone-sr: nearest
// keeps v_0 (tie 5 -> 4, the even code) and v_1 (1.125 -> 1), so SR decides them (1/2, 3/4); v_2 -> 1 under nearest
// (applied): 0. Total 1.25. With u_0 = 4 the block goes to X = 2 and v_0 = 8 is on its grid: applied, and the others
// are decided at X = 2 (grid 0, 1, 2, 3, ...): v_1 = 1.125 between 1 and 2 erases with 7/8, v_2 = 0.875 between 0
// and 1 never returns to 0.5: exact SR 7/8.
TEST(ExpectedBlockErasure, HandDerivedMxE2M1) {
  const BlockFormatSpec fmt = block_format_from_name("mxfp4_e2m1");
  std::vector<float> w(32, 0.0f), u(32, 0.0f);
  w[0] = 4;
  w[1] = 1;
  w[2] = 0.5f;
  u[0] = 1;
  u[1] = 0.125f;
  u[2] = 0.375f;
  const RowMajorShape shape{1, 32};
  const RngKey key{1, 0, 0};
  auto expected = [&](const WritebackPolicy& p) {
    return expected_block_erasure(fmt, p, key, shape, view_of(w), view_of(u));
  };
  EXPECT_EQ(expected({Policy::stochastic, 0}).expected_erased, 1.5);
  EXPECT_EQ(expected({Policy::stochastic, 0}).nonzero, 3);
  EXPECT_EQ(expected({Policy::stochastic, 1}).expected_erased, 2.0);
  EXPECT_EQ(expected({Policy::deadzone_sr, 0}).expected_erased, 1.25);
  u[0] = 4;
  EXPECT_EQ(expected({Policy::stochastic, 0}).expected_erased, 0.875);
}

TEST(ExpectedBlockErasure, IdenticalOnSerialAndOpenMPAndForAnyThreadCount) {
  for (const char* name : kFormats) {
    const BlockFormatSpec fmt = block_format_from_name(name);
    const State s = make_state(64, 300, 31);
    Kokkos::View<float*, Kokkos::HostSpace> w("w", s.w.size()), u("u", s.u.size());
    for (std::size_t i = 0; i < s.w.size(); ++i) {
      w(i) = s.w[i];
      u(i) = s.u[i];
    }
    for (const WritebackPolicy& policy :
         {WritebackPolicy{Policy::stochastic, 0}, WritebackPolicy{Policy::stochastic, 8},
          WritebackPolicy{Policy::deadzone_sr, 0}}) {
      SCOPED_TRACE(label(name, policy));
      const RngKey key{1, 2, 3};
      const auto a = expected_block_erasure(Kokkos::Serial{}, fmt, policy, key, s.shape,
                                            Kokkos::View<const float*, Kokkos::HostSpace>(w),
                                            Kokkos::View<const float*, Kokkos::HostSpace>(u));
      const auto b = expected_block_erasure(Kokkos::OpenMP{}, fmt, policy, key, s.shape,
                                            Kokkos::View<const float*, Kokkos::HostSpace>(w),
                                            Kokkos::View<const float*, Kokkos::HostSpace>(u));
      EXPECT_EQ(std::bit_cast<std::uint64_t>(a.expected_erased), std::bit_cast<std::uint64_t>(b.expected_erased));
      EXPECT_EQ(a.nonzero, b.nonzero);
    }
  }
}

TEST(ExpectedBlockErasure, BadInput) {
  const BlockFormatSpec fmt = block_format_from_name("mxfp4_e2m1");
  const RowMajorShape shape{1, 4};
  const auto w = view_of({1.0f, 2.0f, 0.5f, 0.0f});
  const RngKey key{1, 7, 3};
  EXPECT_THROW(expected_block_erasure(fmt, WritebackPolicy{Policy::nearest, 0}, key, shape, w, w),
               std::invalid_argument);
  EXPECT_THROW(expected_block_erasure(fmt, WritebackPolicy{Policy::stochastic, 33}, key, shape, w, w),
               std::invalid_argument);
  EXPECT_THROW(expected_block_erasure(fmt, WritebackPolicy{Policy::stochastic, 0}, key, RowMajorShape{1, 3}, w, w),
               std::invalid_argument);
  try {
    (void)expected_block_erasure(fmt, WritebackPolicy{Policy::stochastic, 4}, key, shape, w,
                                 view_of({0.5f, 0.0f, NAN, 0.0f}));
    FAIL() << "no error for a NaN proposal";
  } catch (const NonFiniteError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("coordinate 2"), std::string::npos) << what;
    EXPECT_NE(what.find("tensor 3, step 7"), std::string::npos) << what;
    EXPECT_NE(what.find("mxfp4_e2m1"), std::string::npos) << what;
  }
  const BlockFormatSpec nv = block_format_from_name("nvfp4");
  EXPECT_THROW(expected_block_erasure(nv, WritebackPolicy{Policy::stochastic, 0}, key, shape,
                                      view_of({3e38f, 0.0f, 0.0f, 0.0f}), view_of({3e38f, 0.0f, 0.0f, 0.0f})),
               BlockScaleError);
  EXPECT_EQ(expected_block_erasure(fmt, WritebackPolicy{Policy::stochastic, 0}, key, RowMajorShape{0, 0}, view_of({}),
                                   view_of({}))
                .nonzero,
            0);
}
