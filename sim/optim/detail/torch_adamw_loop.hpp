#pragma once
// One coordinate of PyTorch's AdamW step (sim/optim/torch_adamw.hpp), the operations in ATen's order; the portable
// loop and the AVX2 loop's tail use it (std::fma: one rounding, as the hardware FMA of the vector loop).
#include <cmath>

#include "sim/optim/torch_adamw.hpp"

namespace wbaudit::sim::detail {

inline void torch_adamw_coordinate(const TorchAdamWConstants& c, float w, float g, float& m, float& v, float& stepped) {
  const float p = w * c.decay;
  m = std::fma(g, c.one_minus_beta1, m * c.beta1);
  v = std::fma(c.one_minus_beta2 * g, g, v * c.beta2);
  const float d = std::sqrt(v) / c.bias2_sqrt + c.eps;
  stepped = p + (c.neg_step_size * m) / d;
}

}  // namespace wbaudit::sim::detail
