#pragma once
// PyTorch's AdamW step (torch.optim.AdamW, its single-tensor CPU path: torch 1.13's default) on a parameter stored in
// bf16 or fp16, reproducing ATen's float32 operations one by one, so that the stepped values and the moments are
// bit-equal to what the inner torch.optim.AdamW of wbaudit.torch.PersistentNative computes on the parameter's fp32
// copy. It replaces the conversions to fp32 and AdamW's ten tensor passes by one pass over the parameter (issue 33:
// the bf16-storage step); the write-back then runs on `stepped` (sim/precision/writeback_stored.hpp).
//
// Per coordinate, with w the stored value and g the gradient promoted to fp32 (exact) and every scalar rounded once
// from double to fp32, as ATen converts a Python number for a float32 tensor:
//   p = w * fl32(1 - lr wd)                                   param.mul_(1 - lr * weight_decay)
//   m = fma(g, fl32(1 - b1), m * fl32(b1))                    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
//   v = fma(fl32(1 - b2) * g, g, v * fl32(b2))                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//   d = sqrt(v) / fl32(sqrt(c2)) + fl32(eps)                  (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   stepped = p + (fl32(-lr / c1) * m) / d                    param.addcdiv_(exp_avg, denom, value=-step_size)
// with c1 = 1 - b1^t and c2 = 1 - b2^t computed in double (Python). ATen's add with alpha is an FMA
// (vec::fmadd), and GCC contracts addcmul's `self + value * t1 * t2` into one; which of these a torch build does is
// not a documented contract, so wbaudit.torch compares this kernel with torch.optim.AdamW on a probe before using it
// (and falls back to the inner optimizer where they differ); tests/python/test_torch_fused_adamw.py compares them on
// 10^6 coordinates.
#include <cstddef>
#include <cstdint>

#include "sim/precision/writeback_stored.hpp"

namespace wbaudit::sim {

struct TorchAdamWStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  double step = 1;  // t, the step count after this step's increment (state["step"])
};

// The fp32 constants of one step, rounded from the doubles as above.
struct TorchAdamWConstants {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias2_sqrt, eps, neg_step_size;
};
TorchAdamWConstants torch_adamw_constants(const TorchAdamWStep& s);

// One step over n coordinates, threads of the host execution space: storage holds the parameter's 16-bit values
// (read only), grad the gradient (grad16: 16-bit values of the same type; else grad32: float32), exp_avg / exp_avg_sq
// the moments (updated in place), stepped receives the stepped fp32 values. grad16 or grad32 is null.
void torch_adamw_step_stored(const TorchAdamWStep& s, Storage16 type, const std::uint16_t* storage,
                             const std::uint16_t* grad16, const float* grad32, float* exp_avg, float* exp_avg_sq,
                             float* stepped, std::size_t n);

namespace detail {
// [begin, end) of the step (the implementations of one ISA each; torch_adamw_step_stored picks one per call).
void torch_adamw_range_portable(const TorchAdamWConstants& c, Storage16 type, const std::uint16_t* storage,
                                const std::uint16_t* grad16, const float* grad32, float* exp_avg, float* exp_avg_sq,
                                float* stepped, std::size_t begin, std::size_t end);
void torch_adamw_range_avx2(const TorchAdamWConstants& c, Storage16 type, const std::uint16_t* storage,
                            const std::uint16_t* grad16, const float* grad32, float* exp_avg, float* exp_avg_sq,
                            float* stepped, std::size_t begin, std::size_t end);
bool torch_adamw_avx2_supported();  // AVX2, FMA and F16C
}  // namespace detail

}  // namespace wbaudit::sim
