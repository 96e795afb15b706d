#pragma once
// wbaudit's own matrix product, with one summation order on every CPU.
//
// The arithmetic contract ("wbaudit-gemm/1 fma-sequential-k", gemm_numeric_identity()): for every element of the
// row-major C [m x n],
//     acc    = 0;  for p = 0, 1, ..., k - 1:  acc = fma(op(A)(i, p), op(B)(p, j), acc)     (in Scalar, in this order)
//     C(i,j) = alpha * acc                                   if beta == 0 (C is not read: NaN or garbage there is fine)
//     C(i,j) = fma(alpha, acc, beta * C(i,j))                otherwise (beta * C(i,j) rounded to Scalar first)
// where fma rounds once (IEEE 754 fusedMultiplyAdd, round to nearest even) and every other operation rounds to Scalar.
// A and B are always read (alpha == 0 is not special); k == 0 gives acc = +0.
//
// Every path follows that contract exactly, so their results are bitwise identical: the lanes of a register-blocked
// micro-kernel are independent elements of C, each with its own accumulator, and splitting k into cache blocks
// carries the partial sum in Scalar into the next block (never a sum of block sums). Packing the operands only moves
// them. The paths (GemmIsa) are chosen at run time from the CPU: AVX-512 F, AVX2 + FMA, and a portable one (std::fma;
// any IEEE machine). This is what makes the decoder's trajectories the same on every x86-64 CPU (docs/decoder.md).
// It assumes the default floating-point environment (round to nearest, no flush-to-zero or denormals-are-zero).
//
// A call is single-threaded and its result does not depend on how the caller splits C into row blocks (each element
// is computed the same way wherever its rows start): gemm_parallel.hpp spreads row blocks over Kokkos threads.
#include <string>

namespace wbaudit::sim {

// Names the arithmetic contract above; the same on every path (their results are identical). Recorded with traces so
// that a result computed under another contract is recognized.
std::string gemm_numeric_identity();
// The path the products run on now ("avx512", "avx2" or "portable"); informational (results do not depend on it).
std::string gemm_isa_path();

namespace detail {

enum class Op { none, transpose };

// C [m x n] = alpha * op(A) * op(B) + beta * C as defined above, row-major with leading dimensions lda, ldb, ldc:
// op(A)(i, p) is a[i * lda + p] (none) or a[p * lda + i] (transpose); op(B)(p, j) is b[p * ldb + j] or b[j * ldb + p].
void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc);
void gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc);

// The implementations. By default the best one the CPU supports, or the one the environment variable
// WBAUDIT_GEMM_ISA names (portable, avx2, avx512: to run on one machine the path another CPU family would take).
enum class GemmIsa { portable = 0, avx2 = 1, avx512 = 2 };
const char* gemm_isa_name(GemmIsa isa);  // "portable", "avx2", "avx512"
bool gemm_isa_supported(GemmIsa isa);    // portable: always
// The default path. Throws std::invalid_argument when WBAUDIT_GEMM_ISA names no path or one this CPU lacks (the
// decoder's constructor calls it, so that the error surfaces there and not inside a parallel region).
GemmIsa default_gemm_isa();
GemmIsa active_gemm_isa();
// Tests and benchmarks: run every later product on `isa` (process-wide; not while products run). Throws
// std::invalid_argument for a path this CPU lacks. reset_gemm_isa() returns to the default.
void force_gemm_isa(GemmIsa isa);
void reset_gemm_isa();

}  // namespace detail
}  // namespace wbaudit::sim
