// PyTorch's AdamW step on bf16 / fp16 storage (sim/optim/torch_adamw.hpp): a first step computed by hand, and the
// AVX2 loop equal to the portable loop bit for bit over a million coordinates across binades. Against torch itself
// (torch.optim.AdamW on 10^6 coordinates): tests/python/test_torch_fused_adamw.py.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sim/optim/torch_adamw.hpp"
#include "sim/precision/writeback_blocks.hpp"

namespace {

using namespace wbaudit::sim;

std::uint16_t bf16_bits(float x) {  // x must be a bf16 value
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16);
}

// Runs the step under the loop ISA `isa` (the precision layer's choice; portable forces the portable loop).
void step_under(detail::BlockIsa isa, const TorchAdamWStep& s, Storage16 type, const std::vector<std::uint16_t>& w,
                const std::vector<std::uint16_t>* g16, const std::vector<float>* g32, std::vector<float>& m,
                std::vector<float>& v, std::vector<float>& out) {
  const detail::BlockIsa before = detail::active_block_isa();
  detail::force_block_isa(isa);
  torch_adamw_step_stored(s, type, w.data(), g16 ? g16->data() : nullptr, g32 ? g32->data() : nullptr, m.data(),
                          v.data(), out.data(), w.size());
  detail::force_block_isa(before);
}

TEST(TorchAdamW, FirstStepByHand) {
  // beta1 1/2, beta2 3/4, eps 0, lr 1/4, t = 1, g = 2 and -2, zero moments: m = g / 2, v = fma(g / 4, g, 0) = 1,
  // sqrt(v) / sqrt(1 - 3/4) = 2, step size lr / (1 - 1/2) = 1/2: stepped = w (1 - lr wd) - sign(g) / 4. Every value
  // is exact in fp32. wd = 1/2: decay 7/8. Under both loops, 13 coordinates (a vector and a tail).
  const TorchAdamWStep s{0.25, 0.5, 0.75, 0.0, 0.5, 1.0};
  for (const auto isa : {detail::BlockIsa::portable, detail::best_block_isa()}) {
    std::vector<std::uint16_t> w, g;
    std::vector<float> expect_out, expect_m;
    for (int i = 0; i < 13; ++i) {
      const float wi = static_cast<float>(i - 6) * 0.5f, gi = i % 2 ? 2.0f : -2.0f;
      w.push_back(bf16_bits(wi));
      g.push_back(bf16_bits(gi));
      expect_out.push_back(wi * 0.875f - (gi > 0 ? 0.25f : -0.25f));
      expect_m.push_back(gi / 2);
    }
    std::vector<float> m(13, 0.0f), v(13, 0.0f), out(13, -1.0f);
    step_under(isa, s, Storage16::bf16, w, &g, nullptr, m, v, out);
    for (int i = 0; i < 13; ++i) {
      EXPECT_EQ(out[i], expect_out[i]) << "coordinate " << i << " isa " << detail::block_isa_name(isa);
      EXPECT_EQ(m[i], expect_m[i]);
      EXPECT_EQ(v[i], 1.0f);
    }
  }
}

TEST(TorchAdamW, VectorLoopEqualsThePortableLoop) {
  if (!detail::torch_adamw_avx2_supported()) {
    GTEST_SKIP() << "no AVX2 + FMA + F16C: only the portable loop runs";
  }
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> binade(-30, 4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t n = 1'000'003;
  for (const Storage16 type : {Storage16::bf16, Storage16::fp16}) {
    for (const bool grad32 : {false, true}) {
      std::vector<std::uint16_t> w(n), g16(n);
      std::vector<float> g32(n), m(n), v(n);
      for (std::size_t i = 0; i < n; ++i) {
        // weights and gradients across binades (fp16: into its subnormals), moments from earlier steps
        w[i] = encode_storage16(type, decode_storage16(type, static_cast<std::uint16_t>(rng())));
        if ((w[i] & 0x7c00u) == 0x7c00u && type == Storage16::fp16) {
          w[i] = 0x3c00u;  // fp16 inf / NaN: a weight of 1 instead
        }
        if (type == Storage16::bf16 && (w[i] & 0x7f80u) == 0x7f80u) {
          w[i] = 0x3f80u;
        }
        const float gi = std::ldexp(normal(rng), binade(rng));
        // bf16: gi cut to its upper 16 bits; fp16: any finite code (subnormals included)
        g16[i] = type == Storage16::bf16 ? static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(gi) >> 16)
                                         : static_cast<std::uint16_t>(rng() & 0xfbffu);
        g32[i] = gi;
        m[i] = std::ldexp(normal(rng), binade(rng));
        v[i] = std::ldexp(std::fabs(normal(rng)), 2 * binade(rng));
      }
      const TorchAdamWStep s{3e-3, 0.9, 0.95, 1e-8, 0.1, 7.0};
      std::vector<float> m_a = m, v_a = v, out_a(n), m_b = m, v_b = v, out_b(n);
      step_under(detail::BlockIsa::portable, s, type, w, grad32 ? nullptr : &g16, grad32 ? &g32 : nullptr, m_a, v_a,
                 out_a);
      step_under(detail::best_block_isa(), s, type, w, grad32 ? nullptr : &g16, grad32 ? &g32 : nullptr, m_b, v_b,
                 out_b);
      std::size_t moved = 0;
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(out_a[i]), std::bit_cast<std::uint32_t>(out_b[i])) << "coordinate " << i;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(m_a[i]), std::bit_cast<std::uint32_t>(m_b[i])) << "coordinate " << i;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(v_a[i]), std::bit_cast<std::uint32_t>(v_b[i])) << "coordinate " << i;
        moved += out_a[i] != decode_storage16(type, w[i]);
      }
      EXPECT_GT(moved, n / 2);
    }
  }
}

}  // namespace
