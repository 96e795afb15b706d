// PyTorch's AdamW step on bf16 / fp16 storage (torch_adamw.hpp) with AVX2 + FMA + F16C intrinsics: eight coordinates
// per vector, the same operations as detail::torch_adamw_coordinate (which does the tail), so the same bits.
// Reached only after detail::torch_adamw_avx2_supported().
#include <immintrin.h>

#include "sim/optim/torch_adamw.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "sim/optim/detail/torch_adamw_loop.hpp"

namespace wbaudit::sim::detail {

void torch_adamw_range_avx2(const TorchAdamWConstants& c, Storage16 type, const std::uint16_t* storage,
                            const std::uint16_t* grad16, const float* grad32, float* exp_avg, float* exp_avg_sq,
                            float* stepped, std::size_t begin, std::size_t end) {
  const bool bf16 = type == Storage16::bf16;
  const auto decode = [bf16](const std::uint16_t* x) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
    // bf16: the bits are fp32's upper half; fp16: F16C's exact conversion (subnormals, inf and NaN included)
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
  };
  const __m256 decay = _mm256_set1_ps(c.decay), beta1 = _mm256_set1_ps(c.beta1),
               one_minus_beta1 = _mm256_set1_ps(c.one_minus_beta1), beta2 = _mm256_set1_ps(c.beta2),
               one_minus_beta2 = _mm256_set1_ps(c.one_minus_beta2), bias2_sqrt = _mm256_set1_ps(c.bias2_sqrt),
               eps = _mm256_set1_ps(c.eps), neg_step_size = _mm256_set1_ps(c.neg_step_size);
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 w = decode(storage + i);
    const __m256 g = grad16 != nullptr ? decode(grad16 + i) : _mm256_loadu_ps(grad32 + i);
    const __m256 p = _mm256_mul_ps(w, decay);
    const __m256 m = _mm256_fmadd_ps(g, one_minus_beta1, _mm256_mul_ps(_mm256_loadu_ps(exp_avg + i), beta1));
    const __m256 v =
        _mm256_fmadd_ps(_mm256_mul_ps(one_minus_beta2, g), g, _mm256_mul_ps(_mm256_loadu_ps(exp_avg_sq + i), beta2));
    const __m256 d = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bias2_sqrt), eps);
    _mm256_storeu_ps(exp_avg + i, m);
    _mm256_storeu_ps(exp_avg_sq + i, v);
    _mm256_storeu_ps(stepped + i, _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(neg_step_size, m), d)));
  }
  for (; i < end; ++i) {
    const float g = grad16 != nullptr ? decode_storage16(type, grad16[i]) : grad32[i];
    torch_adamw_coordinate(c, decode_storage16(type, storage[i]), g, exp_avg[i], exp_avg_sq[i], stepped[i]);
  }
}

}  // namespace wbaudit::sim::detail
#pragma GCC pop_options
#else
namespace wbaudit::sim::detail {
void torch_adamw_range_avx2(const TorchAdamWConstants& c, Storage16 type, const std::uint16_t* storage,
                            const std::uint16_t* grad16, const float* grad32, float* exp_avg, float* exp_avg_sq,
                            float* stepped, std::size_t begin, std::size_t end) {
  torch_adamw_range_portable(c, type, storage, grad16, grad32, exp_avg, exp_avg_sq, stepped, begin, end);
}
}  // namespace wbaudit::sim::detail
#endif
