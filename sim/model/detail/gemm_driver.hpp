#pragma once
// The blocked, packed loops of detail::gemm (contract in gemm.hpp), shared by every path. Each path's translation unit
// (gemm.cpp: portable; gemm_avx2.cpp, gemm_avx512.cpp) includes this file after selecting its instruction set and
// instantiates gemm_packed with its own micro-kernel. Everything here is in an unnamed namespace on purpose: each
// translation unit gets its own copy compiled for its instruction set (an inline function shared between them would
// be one definition for the linker to pick, possibly the AVX-512 one on a CPU without AVX-512).
//
// Blocking (Goto & van de Geijn, "Anatomy of high-performance matrix multiplication", 2008; BLIS): for each block of
// kNc columns of C and each block of at most kKc values of k, op(B)'s block is packed into slivers of kNr columns
// (k-major: kNr values per k); for each block of kMc rows, op(A)'s block into slivers of kMr rows (kMr values per k);
// then the micro-kernel computes each kMr x kNr tile of C over that k block, with one accumulator per element of C.
// The first k block starts the accumulators at 0; a later one loads the partial sums the previous one stored (in
// Scalar, exactly), and only the last applies alpha and beta. Each element therefore sees exactly the chain of the
// contract whatever the blocking, which is why the blocking constants may differ between paths. Partial sums are
// stored in C itself when beta == 0 (C is only overwritten then) and in a scratch block otherwise.
//
// Tiles at the edges of C (fewer than kMr rows or kNr columns) are computed by the same micro-kernel into a local
// tile, from slivers whose missing rows and columns are packed as zeros (they feed only lanes that are not stored),
// and finished by a scalar loop with the contract's formula.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

#include "sim/model/detail/gemm.hpp"

namespace wbaudit::sim::detail {

// Each instruction set's path (gemm_avx2.cpp, gemm_avx512.cpp); gemm.cpp calls one only after `supported()`.
namespace avx2_gemm {
bool supported();
void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc);
void gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc);
}  // namespace avx2_gemm
namespace avx512_gemm {
bool supported();
void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc);
void gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc);
}  // namespace avx512_gemm

namespace {

// The contract's last step (c is read only when beta != 0).
template <class Scalar>
inline Scalar gemm_finish(Scalar alpha, Scalar acc, Scalar beta, const Scalar& c) {
  return beta == Scalar(0) ? alpha * acc : std::fma(alpha, acc, beta * c);
}

// Grow-only, 64-byte aligned scratch (packed panels, partial sums); one per thread and path.
template <class Scalar>
class GemmBuffer {
 public:
  Scalar* get(std::size_t count) {
    if (count > m_capacity) {
      const std::size_t bytes = (count * sizeof(Scalar) + 63) / 64 * 64;
      m_capacity = 0;  // stays 0 if the allocation fails
      m_data.reset(static_cast<Scalar*>(std::aligned_alloc(64, bytes)));
      if (!m_data) {
        throw std::bad_alloc();
      }
      m_capacity = count;
    }
    return m_data.get();
  }

 private:
  struct Free {
    void operator()(Scalar* p) const { std::free(p); }
  };
  std::unique_ptr<Scalar, Free> m_data;
  std::size_t m_capacity = 0;
};

template <class Scalar>
struct GemmWorkspace {
  GemmBuffer<Scalar> a, b, acc;
};

// dst[p * W + r] = src[r * ld + p] for p < kb and r < rows, 0 for rows <= r < W: `rows` rows of an operand, each
// contiguous in k, interleaved into one sliver (the packing of op(A) = A and op(B) = B^T). The vector paths do the
// same with in-register transposes (VectorKernel::interleave).
template <class Scalar>
void gemm_interleave(const Scalar* src, std::ptrdiff_t ld, int rows, int w, int kb, Scalar* dst) {
  for (int r = 0; r < w; ++r) {
    for (int p = 0; p < kb; ++p) {
      dst[static_cast<std::ptrdiff_t>(p) * w + r] = r < rows ? src[r * ld + p] : Scalar(0);
    }
  }
}

// Slivers of W values along an operand already laid out that way (op(A) = A^T, op(B) = B): for every sliver s,
// dst[s * W * kb + p * W + c] = src[p * ld + s * W + c] for s * W + c < cols, 0 beyond. Row by row over all the
// slivers, so that memory is read in long contiguous runs (sliver by sliver, each row would be a short strided read).
// The vector paths do the same with (masked) vector loads and stores (VectorKernel::copy_rows).
template <class Scalar>
void gemm_copy_rows(const Scalar* src, std::ptrdiff_t ld, int cols, int w, int kb, Scalar* dst) {
  const std::ptrdiff_t sliver = static_cast<std::ptrdiff_t>(w) * kb;
  for (int p = 0; p < kb; ++p) {
    const Scalar* in = src + p * ld;
    Scalar* out = dst + static_cast<std::ptrdiff_t>(p) * w;
    for (int c0 = 0; c0 < cols; c0 += w, out += sliver) {
      const int n = std::min(w, cols - c0);
      for (int c = 0; c < n; ++c) {
        out[c] = in[c0 + c];
      }
      for (int c = n; c < w; ++c) {
        out[c] = Scalar(0);
      }
    }
  }
}

// op(A)'s rows [i0, i0 + rows) and k values [p0, p0 + kb) as slivers of kMr rows: dst[s * kMr * kb + p * kMr + r].
template <class Kernel, class Scalar>
void gemm_pack_a(Op op, const Scalar* a, int lda, int i0, int rows, int p0, int kb, Scalar* dst) {
  constexpr int Mr = Kernel::kMr;
  if (op == Op::transpose) {  // op(A)(i, p) = a[p * lda + i]
    Kernel::copy_rows(a + static_cast<std::ptrdiff_t>(p0) * lda + i0, lda, rows, Mr, kb, dst);
    return;
  }
  for (int r = 0; r < rows; r += Mr) {  // op(A)(i, p) = a[i * lda + p]
    Kernel::interleave(a + static_cast<std::ptrdiff_t>(i0 + r) * lda + p0, lda, std::min(Mr, rows - r), Mr, kb,
                       dst + static_cast<std::ptrdiff_t>(r) * kb);
  }
}

// op(B)'s columns [j0, j0 + cols) and k values [p0, p0 + kb) as slivers of kNr columns: dst[s * kNr * kb + p * kNr
// + c].
template <class Kernel, class Scalar>
void gemm_pack_b(Op op, const Scalar* b, int ldb, int p0, int kb, int j0, int cols, Scalar* dst) {
  constexpr int Nr = Kernel::kNr;
  if (op == Op::none) {  // op(B)(p, j) = b[p * ldb + j]
    Kernel::copy_rows(b + static_cast<std::ptrdiff_t>(p0) * ldb + j0, ldb, cols, Nr, kb, dst);
    return;
  }
  for (int c = 0; c < cols; c += Nr) {  // op(B)(p, j) = b[j * ldb + p]
    Kernel::interleave(b + static_cast<std::ptrdiff_t>(j0 + c) * ldb + p0, ldb, std::min(Nr, cols - c), Nr, kb,
                       dst + static_cast<std::ptrdiff_t>(c) * kb);
  }
}

// Where one tile's accumulators come from and go to. `in`: the partial sums of the previous k block (row stride
// ld_in), or null for the first block (start at 0). `out`: C when `finish` (the contract's last step with alpha and
// beta), else where the partial sums go (row stride ld_out). in and out may be the same tile.
template <class Scalar>
struct GemmTile {
  const Scalar* in;
  int ld_in;
  Scalar* out;
  int ld_out;
  bool finish;
  Scalar alpha, beta;
};

// A tile of `rows` x `cols` (at most Kernel::kMr x Kernel::kNr): full tiles (and kNarrow-wide ones, where the kernel
// has them) go straight to the micro-kernel; the others through a local full-size tile.
template <class Kernel, class Scalar>
void gemm_tile(int kb, const Scalar* ap, const Scalar* bp, int rows, int cols, const GemmTile<Scalar>& t) {
  constexpr int Mr = Kernel::kMr, Nr = Kernel::kNr;
  if (rows == Mr && cols == Nr) {
    Kernel::tile(kb, ap, bp, t);
    return;
  }
  if constexpr (Kernel::kNarrow > 0) {
    if (rows == Mr && cols == Kernel::kNarrow) {
      Kernel::tile_narrow(kb, ap, bp, t);
      return;
    }
  }
  alignas(64) Scalar local[Mr * Nr] = {};
  if (t.in) {
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        local[r * Nr + c] = t.in[static_cast<std::ptrdiff_t>(r) * t.ld_in + c];
      }
    }
  }
  Kernel::tile(kb, ap, bp, GemmTile<Scalar>{t.in ? local : nullptr, Nr, local, Nr, false, t.alpha, t.beta});
  for (int r = 0; r < rows; ++r) {
    Scalar* out = t.out + static_cast<std::ptrdiff_t>(r) * t.ld_out;
    for (int c = 0; c < cols; ++c) {
      out[c] = t.finish ? gemm_finish(t.alpha, local[r * Nr + c], t.beta, out[c]) : local[r * Nr + c];
    }
  }
}

// C = alpha * 0 + beta * C: the contract at k == 0.
template <class Scalar>
void gemm_empty_k(int m, int n, Scalar alpha, Scalar beta, Scalar* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    Scalar* row = c + static_cast<std::ptrdiff_t>(i) * ldc;
    for (int j = 0; j < n; ++j) {
      row[j] = gemm_finish(alpha, Scalar(0), beta, row[j]);
    }
  }
}

// The blocked product with Kernel's micro-kernel (see the top of this file).
template <class Kernel, class Scalar>
void gemm_packed(Op op_a, Op op_b, int m, int n, int k, Scalar alpha, const Scalar* a, int lda, const Scalar* b,
                 int ldb, Scalar beta, Scalar* c, int ldc) {
  constexpr int Mr = Kernel::kMr, Nr = Kernel::kNr;
  if (m <= 0 || n <= 0) {
    return;
  }
  if (k <= 0) {
    gemm_empty_k(m, n, alpha, beta, c, ldc);
    return;
  }
  thread_local GemmWorkspace<Scalar> ws;
  // k blocks of nearly equal length, none above kKc.
  const int k_blocks = (k + Kernel::kKc - 1) / Kernel::kKc;
  const int kc = (k + k_blocks - 1) / k_blocks;
  const int nc = std::min(n, Kernel::kNc), mc = std::min(m, Kernel::kMc);
  Scalar* packed_b = ws.b.get(static_cast<std::size_t>(kc) * ((nc + Nr - 1) / Nr) * Nr);
  Scalar* packed_a = ws.a.get(static_cast<std::size_t>(kc) * ((mc + Mr - 1) / Mr) * Mr);
  // Partial sums between k blocks: in C when beta == 0, else in a scratch block of m x nc.
  const bool in_c = k_blocks == 1 || beta == Scalar(0);
  Scalar* scratch = in_c ? nullptr : ws.acc.get(static_cast<std::size_t>(m) * nc);
  for (int jc = 0; jc < n; jc += nc) {
    const int nb = std::min(nc, n - jc);
    for (int pc = 0; pc < k; pc += kc) {
      const int kb = std::min(kc, k - pc);
      const bool first = pc == 0, last = pc + kb == k;
      gemm_pack_b<Kernel>(op_b, b, ldb, pc, kb, jc, nb, packed_b);
      for (int ic = 0; ic < m; ic += mc) {
        const int mb = std::min(mc, m - ic);
        gemm_pack_a<Kernel>(op_a, a, lda, ic, mb, pc, kb, packed_a);
        for (int jr = 0; jr < nb; jr += Nr) {
          const Scalar* bp = packed_b + static_cast<std::ptrdiff_t>(jr) * kb;
          for (int ir = 0; ir < mb; ir += Mr) {
            const int i = ic + ir, j = jc + jr;
            Scalar* c_tile = c + static_cast<std::ptrdiff_t>(i) * ldc + j;
            Scalar* acc_tile = in_c ? c_tile : scratch + static_cast<std::ptrdiff_t>(i) * nc + jr;
            const int ld_acc = in_c ? ldc : nc;
            const GemmTile<Scalar> t{
                first ? nullptr : acc_tile, ld_acc, last ? c_tile : acc_tile, last ? ldc : ld_acc, last, alpha, beta};
            gemm_tile<Kernel>(kb, packed_a + static_cast<std::ptrdiff_t>(ir) * kb, bp, std::min(Mr, mb - ir),
                              std::min(Nr, nb - jr), t);
          }
        }
      }
    }
  }
}

// The vector paths' micro-kernel, on a vector type described by T (gemm_avx2.cpp, gemm_avx512.cpp: set1, zero, load,
// loadu, storeu, fmadd, mul, kLanes, and for packing transpose, load_lanes and store_lanes): Mr rows x Nv vectors of
// accumulators, each lane one element of C updated by one fused multiply-add per k in order; then the contract's last
// step, or the partial sums stored. Slivers of B are packed two vectors wide (kNr); Nv = 1 computes the first half (the
// narrow tiles at the right edge of C).
template <class T, int Mr, int Nv>
[[gnu::always_inline]] inline void vector_tile(int kb, const typename T::Scalar* ap, const typename T::Scalar* bp,
                                               const GemmTile<typename T::Scalar>& t) {
  using V = typename T::V;
  constexpr int L = T::kLanes, Nr = 2 * L;  // packed slivers are 2 vectors wide; Nv = 1 reads their first half
  V acc[Mr][Nv];
#pragma GCC unroll 16
  for (int r = 0; r < Mr; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < Nv; ++v) {
      acc[r][v] = t.in ? T::loadu(t.in + static_cast<std::ptrdiff_t>(r) * t.ld_in + v * L) : T::zero();
    }
  }
  for (int p = 0; p < kb; ++p) {
    V b[Nv];
#pragma GCC unroll 2
    for (int v = 0; v < Nv; ++v) {
      b[v] = T::load(bp + static_cast<std::ptrdiff_t>(p) * Nr + v * L);
    }
    const typename T::Scalar* a = ap + static_cast<std::ptrdiff_t>(p) * Mr;
#pragma GCC unroll 16
    for (int r = 0; r < Mr; ++r) {
      const V ar = T::set1(a[r]);
#pragma GCC unroll 2
      for (int v = 0; v < Nv; ++v) {
        acc[r][v] = T::fmadd(ar, b[v], acc[r][v]);
      }
    }
  }
  const V alpha = T::set1(t.alpha), beta = T::set1(t.beta);
  const bool scale_c = t.finish && t.beta != 0;
#pragma GCC unroll 16
  for (int r = 0; r < Mr; ++r) {
    typename T::Scalar* out = t.out + static_cast<std::ptrdiff_t>(r) * t.ld_out;
#pragma GCC unroll 2
    for (int v = 0; v < Nv; ++v) {
      const V x = !t.finish ? acc[r][v]
                  : scale_c ? T::fmadd(alpha, acc[r][v], T::mul(beta, T::loadu(out + v * L)))
                            : T::mul(alpha, acc[r][v]);
      T::storeu(out + v * L, x);
    }
  }
}

template <class T, int Mr, int Kc, int Mc, int Nc>
struct VectorKernel {
  using Scalar = typename T::Scalar;
  static constexpr int kMr = Mr, kNr = 2 * T::kLanes, kNarrow = T::kLanes, kKc = Kc, kMc = Mc, kNc = Nc;
  // Out of line: inlined into the driver's loops, GCC kept values of theirs in registers across the k loop and spilled
  // an accumulator of AVX2's 6 x 16 tile to the stack.
  [[gnu::noinline]] static void tile(int kb, const Scalar* ap, const Scalar* bp, const GemmTile<Scalar>& t) {
    vector_tile<T, Mr, 2>(kb, ap, bp, t);
  }
  [[gnu::noinline]] static void tile_narrow(int kb, const Scalar* ap, const Scalar* bp, const GemmTile<Scalar>& t) {
    vector_tile<T, Mr, 1>(kb, ap, bp, t);
  }
  // gemm_copy_rows, a vector at a time: masked loads past the end of a row (they read nothing there and give zeros, the
  // padding), masked stores for a sliver narrower than whole vectors (AVX-512's 14 rows).
  static void copy_rows(const Scalar* src, std::ptrdiff_t ld, int cols, int w, int kb, Scalar* dst) {
    constexpr int L = T::kLanes;
    const std::ptrdiff_t sliver = static_cast<std::ptrdiff_t>(w) * kb;
    for (int p = 0; p < kb; ++p) {
      const Scalar* in = src + p * ld;
      Scalar* out = dst + static_cast<std::ptrdiff_t>(p) * w;
      for (int c0 = 0; c0 < cols; c0 += w, out += sliver) {
        const int n = std::min(w, cols - c0);
        for (int v = 0; v < w; v += L) {
          const int stored = std::min(L, w - v), loaded = std::max(0, std::min(stored, n - v));
          const typename T::V x = loaded == L  ? T::loadu(in + c0 + v)
                                  : loaded > 0 ? T::load_lanes(in + c0 + v, loaded)
                                               : T::zero();
          T::store_lanes(out + v, x, stored);
        }
      }
    }
  }
  // gemm_interleave, kLanes rows x kLanes k values at a time through a register transpose.
  static void interleave(const Scalar* src, std::ptrdiff_t ld, int rows, int w, int kb, Scalar* dst) {
    using V = typename T::V;
    constexpr int L = T::kLanes;
    for (int g = 0; g < w; g += L) {
      const int width = std::min(L, w - g), live = std::max(0, std::min(width, rows - g));
      int p = 0;
      for (; p + L <= kb; p += L) {
        V v[L];
#pragma GCC unroll 16
        for (int r = 0; r < L; ++r) {
          v[r] = r < live ? T::loadu(src + (g + r) * ld + p) : T::zero();
        }
        T::transpose(v);
#pragma GCC unroll 16
        for (int q = 0; q < L; ++q) {
          T::store_lanes(dst + static_cast<std::ptrdiff_t>(p + q) * w + g, v[q], width);
        }
      }
      for (; p < kb; ++p) {
        for (int r = 0; r < width; ++r) {
          dst[static_cast<std::ptrdiff_t>(p) * w + g + r] = r < live ? src[(g + r) * ld + p] : Scalar(0);
        }
      }
    }
  }
};

// A micro-kernel in plain C++ (std::fma), for the portable path and the double products: Mr x Nr accumulators,
// lanes independent, k in order.
template <class Scalar, int Mr, int Nr, int Kc, int Mc, int Nc>
struct PlainKernel {
  static constexpr int kMr = Mr, kNr = Nr, kKc = Kc, kMc = Mc, kNc = Nc, kNarrow = 0;
  static void interleave(const Scalar* src, std::ptrdiff_t ld, int rows, int w, int kb, Scalar* dst) {
    gemm_interleave(src, ld, rows, w, kb, dst);
  }
  static void copy_rows(const Scalar* src, std::ptrdiff_t ld, int cols, int w, int kb, Scalar* dst) {
    gemm_copy_rows(src, ld, cols, w, kb, dst);
  }
  static void tile(int kb, const Scalar* ap, const Scalar* bp, const GemmTile<Scalar>& t) {
    Scalar acc[Mr][Nr];
    for (int r = 0; r < Mr; ++r) {
      for (int c = 0; c < Nr; ++c) {
        acc[r][c] = t.in ? t.in[static_cast<std::ptrdiff_t>(r) * t.ld_in + c] : Scalar(0);
      }
    }
    for (int p = 0; p < kb; ++p) {
      const Scalar* ar = ap + static_cast<std::ptrdiff_t>(p) * Mr;
      const Scalar* br = bp + static_cast<std::ptrdiff_t>(p) * Nr;
      for (int r = 0; r < Mr; ++r) {
        for (int c = 0; c < Nr; ++c) {
          acc[r][c] = std::fma(ar[r], br[c], acc[r][c]);
        }
      }
    }
    for (int r = 0; r < Mr; ++r) {
      Scalar* out = t.out + static_cast<std::ptrdiff_t>(r) * t.ld_out;
      for (int c = 0; c < Nr; ++c) {
        out[c] = t.finish ? gemm_finish(t.alpha, acc[r][c], t.beta, out[c]) : acc[r][c];
      }
    }
  }
};

}  // namespace
}  // namespace wbaudit::sim::detail
