// PyTorch's AdamW step on bf16 / fp16 storage (torch_adamw.hpp): the constants, the portable loop and the choice of
// implementation.
#include "sim/optim/torch_adamw.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>

#include "sim/optim/detail/torch_adamw_loop.hpp"
#include "sim/precision/writeback_blocks.hpp"

namespace wbaudit::sim {

TorchAdamWConstants torch_adamw_constants(const TorchAdamWStep& s) {
  // As torch/optim/adamw.py computes them in Python (double), each rounded to fp32 when ATen takes it.
  const double bias1 = 1 - std::pow(s.beta1, s.step);
  const double bias2 = 1 - std::pow(s.beta2, s.step);
  TorchAdamWConstants c;
  c.decay = static_cast<float>(1 - s.lr * s.weight_decay);
  c.beta1 = static_cast<float>(s.beta1);
  c.one_minus_beta1 = static_cast<float>(1 - s.beta1);
  c.beta2 = static_cast<float>(s.beta2);
  c.one_minus_beta2 = static_cast<float>(1 - s.beta2);
  c.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  c.eps = static_cast<float>(s.eps);
  c.neg_step_size = static_cast<float>(-(s.lr / bias1));
  return c;
}

namespace detail {

void torch_adamw_range_portable(const TorchAdamWConstants& c, Storage16 type, const std::uint16_t* storage,
                                const std::uint16_t* grad16, const float* grad32, float* exp_avg, float* exp_avg_sq,
                                float* stepped, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    const float g = grad16 != nullptr ? decode_storage16(type, grad16[i]) : grad32[i];
    torch_adamw_coordinate(c, decode_storage16(type, storage[i]), g, exp_avg[i], exp_avg_sq[i], stepped[i]);
  }
}

bool torch_adamw_avx2_supported() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

}  // namespace detail

void torch_adamw_step_stored(const TorchAdamWStep& s, Storage16 type, const std::uint16_t* storage,
                             const std::uint16_t* grad16, const float* grad32, float* exp_avg, float* exp_avg_sq,
                             float* stepped, std::size_t n) {
  const TorchAdamWConstants c = torch_adamw_constants(s);
  // The portable loop where the precision layer is held to it (tests force it), else AVX2 when the CPU has it.
  const bool vector = detail::active_block_isa() != detail::BlockIsa::portable && detail::torch_adamw_avx2_supported();
  constexpr std::size_t kItem = std::size_t{1} << 15;
  const std::size_t items = (n + kItem - 1) / kItem;
  Kokkos::parallel_for("wbaudit::sim::torch_adamw_step_stored",
                       Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, items), [=](std::size_t item) {
                         const std::size_t begin = item * kItem, end = begin + kItem < n ? begin + kItem : n;
                         if (vector) {
                           detail::torch_adamw_range_avx2(c, type, storage, grad16, grad32, exp_avg, exp_avg_sq,
                                                          stepped, begin, end);
                         } else {
                           detail::torch_adamw_range_portable(c, type, storage, grad16, grad32, exp_avg, exp_avg_sq,
                                                              stepped, begin, end);
                         }
                       });
  Kokkos::fence();
}

}  // namespace wbaudit::sim
