#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "stats/bootstrap.hpp"
#include "stats/rng.hpp"

using namespace wbaudit::stats;

// Random123 known-answer vector (tests/kat_vectors): philox4x32 10, counter 0, key 0 ->
// 6627e8d5 e169c58d bc57ac4c 9b00dbd8. uniform_index(seed 0, stream 0, draw 0, n) reads the first 64-bit word.
TEST(Rng, PhiloxKnownAnswer) {
  std::uint64_t const w0 = 0x6627e8d5e169c58dULL;
  for (std::uint64_t n : {1ULL, 2ULL, 3ULL, 72ULL, 1000ULL, 1ULL << 40}) {
    EXPECT_EQ(uniform_index(0, 0, 0, n), w0 % n) << "n=" << n;
  }
}

// n = 2^63 + 1: 2^64 mod n = 2^63 - 1, so the first word (< 2^63 - 1) is rejected and the second word
// 0xbc57ac4c9b00dbd8 (>= 2^63 - 1) is used: result = w1 mod n = w1 - n.
TEST(Rng, RejectionKeepsTheMappingUnbiased) {
  std::uint64_t const n = (1ULL << 63) + 1;
  std::uint64_t const w1 = 0xbc57ac4c9b00dbd8ULL;
  EXPECT_EQ(uniform_index(0, 0, 0, n), w1 - n);
}

TEST(Rng, CoordinatesGiveDistinctStreams) {
  EXPECT_NE(uniform_index(1, 0, 0, 1ULL << 62), uniform_index(2, 0, 0, 1ULL << 62));
  EXPECT_NE(uniform_index(1, 0, 0, 1ULL << 62), uniform_index(1, 1, 0, 1ULL << 62));
  EXPECT_NE(uniform_index(1, 0, 0, 1ULL << 62), uniform_index(1, 0, 1, 1ULL << 62));
}

// Chi-square goodness of fit of resampled unit indices: 7 units, 2000 resamples x 7 draws = 14000 draws.
// Critical value of chi^2 with 6 degrees of freedom at 0.999: 22.458.
TEST(Rng, ResampledUnitsAreUniform) {
  BootstrapSpec spec;
  spec.seed = 99;
  int const n = 7;
  std::vector<long> counts(n, 0);
  std::vector<std::int64_t> idx(n);
  for (std::uint64_t b = 0; b < 2000; ++b) {
    resample_indices(spec, n, b, idx);
    for (auto i : idx) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      ++counts[std::size_t(i)];
    }
  }
  double const expected = 14000.0 / n;
  double chi2 = 0;
  for (auto c : counts) {
    chi2 += (double(c) - expected) * (double(c) - expected) / expected;
  }
  EXPECT_LT(chi2, 22.458);
}

TEST(Rng, MovingBlocksAreRunsOfConsecutiveSteps) {
  BootstrapSpec spec;
  spec.seed = 3;
  spec.resampling = Resampling::moving_block;
  spec.block_length = 4;
  int const n = 10;  // 3 blocks of 4, cut to 10
  std::vector<std::int64_t> idx(n);
  std::vector<long> start_counts(n - 4 + 1, 0);
  for (std::uint64_t b = 0; b < 500; ++b) {
    resample_indices(spec, n, b, idx);
    for (int block = 0; block * 4 < n; ++block) {
      std::int64_t const start = idx[std::size_t(block) * 4];
      ASSERT_GE(start, 0);
      ASSERT_LE(start, n - 4);
      ++start_counts[std::size_t(start)];
      for (int k = 1; k < 4 && block * 4 + k < n; ++k) {
        EXPECT_EQ(idx[std::size_t(block) * 4 + std::size_t(k)], start + k);
      }
    }
  }
  for (auto c : start_counts) {
    EXPECT_GT(c, 0);  // every start position 0..6 is reached
  }
}
