// detail::gemm's AVX-512 path: gemm_driver.hpp's loops with a 14 x 32 (float) / 14 x 16 (double) register-blocked
// micro-kernel. Each lane of a vector is one element of C with its own accumulator, updated with one vfmadd per k in
// order, so every element follows gemm.hpp's contract exactly and equals the other paths' bit for bit.
//
// Everything in this file is compiled for AVX-512 F (the pragma below; the standard headers are included before it,
// so that their inline functions stay compiled for the baseline) and has internal linkage, apart from the entry
// points, which gemm.cpp calls only after avx512_gemm::supported().
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

#include "sim/model/detail/gemm.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*, which -Wuninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "sim/model/detail/gemm_driver.hpp"

namespace wbaudit::sim::detail {
namespace {

struct F32 {
  using Scalar = float;
  using V = __m512;
  static constexpr int kLanes = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_load_ps(p); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static void store_lanes(float* p, V x, int lanes) {  // the first `lanes` lanes (1..16)
    _mm512_mask_storeu_ps(p, lane_mask(lanes), x);
  }
  static V load_lanes(const float* p, int lanes) { return _mm512_maskz_loadu_ps(lane_mask(lanes), p); }
  static __mmask16 lane_mask(int lanes) { return static_cast<__mmask16>((1u << lanes) - 1u); }
  // r[j] becomes column j of the 16 x 16 block whose rows were r[0..15]: pairs interleaved, then groups of 4 within
  // each 128-bit lane, then the 128-bit lanes themselves in two steps.
  static void transpose(V* r) {
    V t[16], u[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {  // u[4i + c]: rows 4i..4i+3, column 4 lane + c in each 128-bit lane
      u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
      u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
      u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
      u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int c = 0; c < 4; ++c) {
      t[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
      t[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
      t[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
      t[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    }
    for (int c = 0; c < 4; ++c) {
      r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
      r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
      r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
      r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd);
    }
  }
};

struct F64 {
  using Scalar = double;
  using V = __m512d;
  static constexpr int kLanes = 8;
  static V set1(double x) { return _mm512_set1_pd(x); }
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const double* p) { return _mm512_load_pd(p); }
  static V loadu(const double* p) { return _mm512_loadu_pd(p); }
  static void storeu(double* p, V x) { _mm512_storeu_pd(p, x); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
  static void store_lanes(double* p, V x, int lanes) { _mm512_mask_storeu_pd(p, lane_mask(lanes), x); }
  static V load_lanes(const double* p, int lanes) { return _mm512_maskz_loadu_pd(lane_mask(lanes), p); }
  static __mmask8 lane_mask(int lanes) { return static_cast<__mmask8>((1u << lanes) - 1u); }
  static void transpose(V* r) {  // 8 x 8, as F32's with pairs of doubles for groups of 4 floats
    V t[8], u[8];
    for (int i = 0; i < 4; ++i) {  // t[2i + c]: rows 2i, 2i+1, column 2 lane + c in each 128-bit lane
      t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int c = 0; c < 2; ++c) {
      u[c] = _mm512_shuffle_f64x2(t[c], t[2 + c], 0x88);
      u[2 + c] = _mm512_shuffle_f64x2(t[c], t[2 + c], 0xdd);
      u[4 + c] = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0x88);
      u[6 + c] = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0xdd);
    }
    for (int c = 0; c < 2; ++c) {
      r[c] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0x88);
      r[4 + c] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0xdd);
      r[2 + c] = _mm512_shuffle_f64x2(u[2 + c], u[6 + c], 0x88);
      r[6 + c] = _mm512_shuffle_f64x2(u[2 + c], u[6 + c], 0xdd);
    }
  }
};

// 14 x 32 floats (28 of the 32 vector registers) or 14 x 16 doubles per tile, k in blocks of 256.
template <class T>
using Kernel = VectorKernel<T, 14, 256, 14 * 12, 1024>;

}  // namespace

namespace avx512_gemm {

bool supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  gemm_packed<Kernel<F32>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc) {
  gemm_packed<Kernel<F64>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace avx512_gemm
}  // namespace wbaudit::sim::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
#else
#include "sim/model/detail/gemm_driver.hpp"

namespace wbaudit::sim::detail::avx512_gemm {
bool supported() {
  return false;
}
void gemm(Op, Op, int, int, int, float, const float*, int, const float*, int, float, float*, int) {}
void gemm(Op, Op, int, int, int, double, const double*, int, const double*, int, double, double*, int) {}
}  // namespace wbaudit::sim::detail::avx512_gemm
#endif
