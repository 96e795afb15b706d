#pragma once
// Matrix products for the decoder through cblas (Debian's OpenBLAS), row-major.
//
// Determinism: OpenBLAS is pinned to one thread (pin_blas_single_thread), so one call's result is a pure function of
// its operands; a product is split into row blocks of C of a fixed height (kGemmBlockRows, never derived from the
// thread count) and Kokkos spreads the blocks over its threads. Each element of C is therefore computed by the same
// single-threaded call at any thread count, and the result is bitwise identical at 1, 2 or N threads.
#include <cblas.h>

#include <Kokkos_Core.hpp>
#include <algorithm>

namespace wbaudit::sim::detail {

enum class Op { none, transpose };

inline constexpr int kGemmBlockRows = 64;

// Pins OpenBLAS to one thread (it is called from inside Kokkos' parallel regions; a threaded OpenBLAS would both
// oversubscribe and split its reductions by its own thread count). Idempotent.
void pin_blas_single_thread();

inline CBLAS_TRANSPOSE cblas_op(Op op) {
  return op == Op::none ? CblasNoTrans : CblasTrans;
}

// C [m x n] = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions lda, ldb, ldc; one BLAS call.
inline void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
                 int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The same product split into blocks of kGemmBlockRows rows of C, one single-threaded BLAS call per block, the blocks
// run in parallel on `space`. Row i of op(A) is row i of A (op none) or column i of A (transpose).
template <class ExecSpace, class Scalar>
void gemm_blocked(const ExecSpace& space, const char* label, Op op_a, Op op_b, int m, int n, int k, Scalar alpha,
                  const Scalar* a, int lda, const Scalar* b, int ldb, Scalar beta, Scalar* c, int ldc) {
  const int blocks = (m + kGemmBlockRows - 1) / kGemmBlockRows;
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, blocks), [=](const int blk) {
        const int row0 = blk * kGemmBlockRows;
        const int rows = std::min(kGemmBlockRows, m - row0);
        const Scalar* a0 = op_a == Op::none ? a + static_cast<std::ptrdiff_t>(row0) * lda : a + row0;
        gemm(op_a, op_b, rows, n, k, alpha, a0, lda, b, ldb, beta, c + static_cast<std::ptrdiff_t>(row0) * ldc, ldc);
      });
}

}  // namespace wbaudit::sim::detail
