#pragma once
// A product split into row blocks of C that Kokkos spreads over its threads; each block is one single-threaded call
// of detail::gemm (gemm.hpp), whose every element follows the fixed summation order there whatever rows the block
// holds. The block height is a function of the product's row count alone (gemm_block_rows, never of the thread count),
// so the result is bitwise identical at 1, 2 or N threads, and on every CPU.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <initializer_list>
#include <vector>

#include "sim/model/detail/gemm.hpp"

namespace wbaudit::sim::detail {

// Row blocks are multiples of 64 rows, about 4 per product, at most 512 rows. Fewer, taller calls pack the shared
// operand op(B) fewer times (every call packs all of it); 4 blocks per product, and several independent products per
// launch (gemm_parallel), still leave work for every thread of a small machine.
inline constexpr int kGemmBlockQuantum = 64;
inline constexpr int kGemmMaxBlockRows = 512;
inline int gemm_block_rows(int m) {
  const int quanta = (m + kGemmBlockQuantum - 1) / kGemmBlockQuantum;
  return std::min(kGemmMaxBlockRows, kGemmBlockQuantum * std::max(1, (quanta + 3) / 4));
}

// One product C [m x n] = alpha * op(A) * op(B) + beta * C. With `then_add` set, the product is C += alpha *
// op(A) * op(B) on the same C and rows as the previous one in the list, run after it block by block (a sum of two
// products into one C, e.g. the MLP input gradient dgate Wgate + dup Wup).
template <class Scalar>
struct Gemm {
  Op op_a, op_b;
  int m, n, k;
  Scalar alpha;
  const Scalar* a;
  int lda;
  const Scalar* b;
  int ldb;
  Scalar beta;
  Scalar* c;
  int ldc;
  bool then_add = false;
};

// Rows [row0, row0 + rows) of one product: row i of op(A) is row i of A (op none) or column i of A (transpose).
template <class Scalar>
void gemm_rows(const Gemm<Scalar>& g, int row0, int rows) {
  const Scalar* a0 = g.op_a == Op::none ? g.a + static_cast<std::ptrdiff_t>(row0) * g.lda : g.a + row0;
  gemm(g.op_a, g.op_b, rows, g.n, g.k, g.alpha, a0, g.lda, g.b, g.ldb, g.then_add ? Scalar(1) : g.beta,
       g.c + static_cast<std::ptrdiff_t>(row0) * g.ldc, g.ldc);
}

// Independent products (and their then_add continuations), each split into blocks of gemm_block_rows(m) rows, all
// blocks of all products in one launch, dynamically scheduled: one single-threaded gemm call per block and product.
template <class ExecSpace, class Scalar>
void gemm_parallel(const ExecSpace& space, const char* label, std::initializer_list<Gemm<Scalar>> products) {
  struct Block {
    int first, count, row0, rows;  // products [first, first + count) of the list, rows [row0, row0 + rows)
  };
  const std::vector<Gemm<Scalar>> list(products);
  std::vector<Block> blocks;
  for (int p = 0; p < static_cast<int>(list.size());) {
    int count = 1;
    while (p + count < static_cast<int>(list.size()) && list[p + count].then_add) {
      ++count;
    }
    const int m = list[p].m, height = gemm_block_rows(m);
    for (int row0 = 0; row0 < m; row0 += height) {
      blocks.push_back({p, count, row0, std::min(height, m - row0)});
    }
    p += count;
  }
  const Gemm<Scalar>* gemms = list.data();
  const Block* work = blocks.data();
  Kokkos::parallel_for(
      label,
      Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, static_cast<int>(blocks.size())),
      [=](const int i) {
        const Block& blk = work[i];
        for (int p = blk.first; p < blk.first + blk.count; ++p) {
          gemm_rows(gemms[p], blk.row0, blk.rows);
        }
      });
  space.fence();
}

// One product, split into row blocks as above.
template <class ExecSpace, class Scalar>
void gemm_blocked(const ExecSpace& space, const char* label, Op op_a, Op op_b, int m, int n, int k, Scalar alpha,
                  const Scalar* a, int lda, const Scalar* b, int ldb, Scalar beta, Scalar* c, int ldc) {
  gemm_parallel(space, label, {Gemm<Scalar>{op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}});
}

}  // namespace wbaudit::sim::detail
