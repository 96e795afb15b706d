// detail::gemm's AVX2 + FMA path (CPUs without AVX-512: AMD Zen 1-3, Intel Haswell to Comet Lake, ...):
// gemm_driver.hpp's loops with a 6 x 16 (float) / 6 x 8 (double) register-blocked micro-kernel. Each lane of a vector
// is one element of C with its own accumulator, updated with one vfmadd per k in order, so every element follows
// gemm.hpp's contract exactly and equals the other paths' bit for bit.
//
// Everything in this file is compiled for AVX2 + FMA (the pragma below; the standard headers are included before it,
// so that their inline functions stay compiled for the baseline) and has internal linkage, apart from the entry
// points, which gemm.cpp calls only after avx2_gemm::supported().
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
#pragma GCC target("avx2,fma")

#include "sim/model/detail/gemm_driver.hpp"

namespace wbaudit::sim::detail {
namespace {

struct F32 {
  using Scalar = float;
  using V = __m256;
  static constexpr int kLanes = 8;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_load_ps(p); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V x) { _mm256_storeu_ps(p, x); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static void store_lanes(float* p, V x, int lanes) { _mm256_maskstore_ps(p, lane_mask(lanes), x); }
  static V load_lanes(const float* p, int lanes) { return _mm256_maskload_ps(p, lane_mask(lanes)); }
  static __m256i lane_mask(int lanes) {  // all ones in the first `lanes` lanes
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // r[j] becomes column j of the 8 x 8 block whose rows were r[0..7]: pairs interleaved, groups of 4 within each
  // 128-bit lane, then the two lanes.
  static void transpose(V* r) {
    V t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {  // u[4i + c]: rows 4i..4i+3, column 4 lane + c
      u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
      u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
      u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
      u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int c = 0; c < 4; ++c) {
      r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
      r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
  }
};

struct F64 {
  using Scalar = double;
  using V = __m256d;
  static constexpr int kLanes = 4;
  static V set1(double x) { return _mm256_set1_pd(x); }
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const double* p) { return _mm256_load_pd(p); }
  static V loadu(const double* p) { return _mm256_loadu_pd(p); }
  static void storeu(double* p, V x) { _mm256_storeu_pd(p, x); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
  static void store_lanes(double* p, V x, int lanes) { _mm256_maskstore_pd(p, lane_mask(lanes), x); }
  static V load_lanes(const double* p, int lanes) { return _mm256_maskload_pd(p, lane_mask(lanes)); }
  static __m256i lane_mask(int lanes) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(lanes), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static void transpose(V* r) {  // 4 x 4
    V t[4];
    for (int i = 0; i < 2; ++i) {  // t[2i + c]: rows 2i, 2i+1, column 2 lane + c
      t[2 * i] = _mm256_unpacklo_pd(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int c = 0; c < 2; ++c) {
      r[c] = _mm256_permute2f128_pd(t[c], t[2 + c], 0x20);
      r[2 + c] = _mm256_permute2f128_pd(t[c], t[2 + c], 0x31);
    }
  }
};

// 6 x 16 floats (12 of the 16 vector registers) or 6 x 8 doubles per tile, k in blocks of 256.
template <class T>
using Kernel = VectorKernel<T, 6, 256, 6 * 28, 1024>;

}  // namespace

namespace avx2_gemm {

bool supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  gemm_packed<Kernel<F32>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc) {
  gemm_packed<Kernel<F64>>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace avx2_gemm
}  // namespace wbaudit::sim::detail

#pragma GCC pop_options
#else
#include "sim/model/detail/gemm_driver.hpp"

namespace wbaudit::sim::detail::avx2_gemm {
bool supported() {
  return false;
}
void gemm(Op, Op, int, int, int, float, const float*, int, const float*, int, float, float*, int) {}
void gemm(Op, Op, int, int, int, double, const double*, int, const double*, int, double, double*, int) {}
}  // namespace wbaudit::sim::detail::avx2_gemm
#endif
