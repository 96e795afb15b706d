#pragma once
// exp for the decoder's elementwise kernels (softmax, cross-entropy, SiLU). std::exp is a library call that keeps
// every loop around it scalar; the float version here is branch-free arithmetic, so those loops vectorize (with
// -fno-trapping-math, see sim/CMakeLists.txt). Double keeps std::exp: the double model is the reference of the
// finite-difference and PyTorch float64 checks.
#include <Kokkos_Core.hpp>
#include <bit>
#include <cmath>
#include <cstdint>

namespace wbaudit::sim::detail {

// exp(x) in float: x = n ln2 + r with n = round(x / ln2) and ln2 split in two parts (Cody-Waite), |r| <= ln2 / 2;
// e^r by Cephes' expf polynomial (degree 5 on r, then r^2 y + r + 1), times 2^n built in the exponent bits. Inputs are
// clamped to [-87.34, 88.38] (normal results; below it returns 2^-126 rather than a subnormal or 0, above it
// 2.4e38 rather than inf); NaN stays NaN. Relative error <= 1.4 ulp over the clamped range
// (tests/sim/model/test_decoder.cpp checks it against std::exp in double).
KOKKOS_INLINE_FUNCTION float exp_poly(float x) {
  x = x > 88.3762626647949f ? 88.3762626647949f : x;
  x = x < -87.3365478515625f ? -87.3365478515625f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest: 1.5 * 2^23
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return y * std::bit_cast<float>(bits);
}

inline float kernel_exp(float x) {
  return exp_poly(x);
}
inline double kernel_exp(double x) {
  return std::exp(x);
}

}  // namespace wbaudit::sim::detail
