// The block sample (sim/trace/block_sample.hpp): the sampled block indices, and NVFP4's tensor row, whose kept lines
// must give max_i |fl32(q_i + fl32(s u_i))| of the whole tensor exactly at every scale in [1/8, 8] (brute force here).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sim/precision/block_writeback.hpp"
#include "sim/trace/block_sample.hpp"

namespace {

using namespace wbaudit::sim;

float brute_amax(const std::vector<float>& q, const std::vector<float>& u, double s) {
  float m = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const auto us = static_cast<float>(s * static_cast<double>(u[i]));
    m = std::max(m, std::fabs(q[i] + us));
  }
  return m;
}

std::vector<double> scales() {
  std::vector<double> out;
  for (int k = -96; k <= 96; ++k) {
    out.push_back(std::exp2(k / 32.0));
  }
  for (const double s : {0.3, 0.7, 1.3, 1.7, 3.0, 5.5}) {
    out.push_back(s);
  }
  return out;
}

TEST(BlockSample, IndicesAreAllBlocksOrOneBlockPerStratum) {
  const BlockFormatSpec mx = block_format_from_name("mxfp8_e4m3");
  const std::vector<std::int64_t> small = block_sample_indices(mx, RowMajorShape{100, 70});  // 3 blocks a row
  ASSERT_EQ(small.size(), 300u);
  for (std::size_t k = 0; k < small.size(); ++k) {
    EXPECT_EQ(small[k], static_cast<std::int64_t>(k));
  }
  const std::vector<std::int64_t> big = block_sample_indices(mx, RowMajorShape{1000, 70});  // 3000 blocks
  ASSERT_EQ(big.size(), 1024u);
  for (std::size_t k = 0; k < big.size(); ++k) {  // one block in each stratum
    EXPECT_GE(big[k], static_cast<std::int64_t>(k * 3000 / 1024));
    EXPECT_LT(big[k], static_cast<std::int64_t>((k + 1) * 3000 / 1024));
  }
  // rows of 2 blocks, 2048 blocks: a stride of 2 would sample the rows' first blocks only
  const std::vector<std::int64_t> two = block_sample_indices(mx, RowMajorShape{1024, 48});
  ASSERT_EQ(two.size(), 1024u);
  int second = 0;
  for (const std::int64_t b : two) {
    second += b % 2;
  }
  EXPECT_EQ(second, 512);  // the rows' first and second blocks in proportion
  EXPECT_EQ(block_sample_indices(block_format_from_name("nvfp4"), RowMajorShape{1000, 70}).size(), 2048u);
  EXPECT_EQ(block_sample_indices(block_format_from_name("nvfp4:2d"), RowMajorShape{1000, 70}).size(), 128u);
  const BlockSample header = block_sample_header(mx, RowMajorShape{100, 70});
  EXPECT_EQ(header.elements, 7000);  // short blocks of 6 columns included
}

TEST(BlockSample, Nvfp4TensorRowGivesTheWholeTensorsMaximumAtEveryScale) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const BlockFormatSpec fmt = block_format_from_name("nvfp4");
  // trials 4 and 5 repeat 1 and 3 on a tensor of many work items (nvfp4_tensor_row's passes run in parallel chunks)
  for (int trial = 0; trial < 6; ++trial) {
    const int kind = trial == 4 ? 1 : (trial == 5 ? 3 : trial);
    const RowMajorShape shape = trial < 4 ? RowMajorShape{64, 96} : RowMajorShape{320, 1000};
    const auto n = static_cast<std::size_t>(shape.size());
    std::vector<float> w(n), u(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = kind == 3 ? 1.0f : 0.05f * normal(gen);  // kind 3: every weight the same (a norm's gain), many ties
      const float ratio = kind == 0 ? 1e-3f : (kind == 1 ? 0.05f : 0.3f);
      u[i] = ratio * (kind == 3 ? 1.0f : 0.05f) * normal(gen);
    }
    std::vector<float> q = w;
    block_quantize_reference(fmt, shape, q);
    const std::vector<float> row = nvfp4_tensor_row(w, q, u);
    ASSERT_EQ(row.size(), kBlockSampleTensorWidth);
    float amax_w = 0, amax_q = 0;
    for (std::size_t i = 0; i < n; ++i) {
      amax_w = std::max(amax_w, std::fabs(w[i]));
      amax_q = std::max(amax_q, std::fabs(q[i]));
    }
    EXPECT_EQ(row[0], amax_w);
    EXPECT_EQ(row[1], amax_q);
    for (const double s : scales()) {
      EXPECT_EQ(nvfp4_amax_at_scale(row, s), brute_amax(q, u, s)) << "trial " << trial << " s " << s;
    }
  }
}

}  // namespace
