// detail::gemm's dispatch (which path runs) and its portable path. Contract: gemm.hpp; loops: gemm_driver.hpp.
#include "sim/model/detail/gemm.hpp"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "sim/model/detail/gemm_driver.hpp"

namespace wbaudit::sim {

std::string gemm_numeric_identity() {
  return "wbaudit-gemm/1 fma-sequential-k";
}

std::string gemm_isa_path() {
  return detail::gemm_isa_name(detail::active_gemm_isa());
}

namespace detail {
namespace {

// The portable path: plain C++ with std::fma (a call into libm where the compiler may not assume an FMA instruction),
// compiled without instruction-set flags. Small tiles: it is the reference and the fallback, not the fast path.
using PortableFloat = PlainKernel<float, 4, 8, 256, 128, 512>;
using PortableDouble = PlainKernel<double, 4, 8, 256, 128, 512>;

GemmIsa parse_isa(const std::string& text) {
  for (const GemmIsa isa : {GemmIsa::portable, GemmIsa::avx2, GemmIsa::avx512}) {
    if (text == gemm_isa_name(isa)) {
      return isa;
    }
  }
  throw std::invalid_argument("WBAUDIT_GEMM_ISA=\"" + text + "\" names no GEMM path (known: portable, avx2, avx512)");
}

GemmIsa detect_default() {
  const char* env = std::getenv("WBAUDIT_GEMM_ISA");
  if (env && *env) {
    const GemmIsa isa = parse_isa(env);
    if (!gemm_isa_supported(isa)) {
      throw std::invalid_argument("WBAUDIT_GEMM_ISA=\"" + std::string(env) + "\": this CPU cannot run the " +
                                  gemm_isa_name(isa) + " path");
    }
    return isa;
  }
  return avx512_gemm::supported() ? GemmIsa::avx512 : avx2_gemm::supported() ? GemmIsa::avx2 : GemmIsa::portable;
}

// The forced path, or -1 for the default. Constant-initialized so that a benchmark's static registration may force a
// path before this file's dynamic initializers run.
constinit std::atomic<int> g_forced{-1};

template <class Scalar>
void dispatch(Op op_a, Op op_b, int m, int n, int k, Scalar alpha, const Scalar* a, int lda, const Scalar* b, int ldb,
              Scalar beta, Scalar* c, int ldc) {
  switch (active_gemm_isa()) {
    case GemmIsa::avx512:
      return avx512_gemm::gemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case GemmIsa::avx2:
      return avx2_gemm::gemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case GemmIsa::portable:
      break;
  }
  using Kernel = std::conditional_t<std::is_same_v<Scalar, float>, PortableFloat, PortableDouble>;
  gemm_packed<Kernel>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::avx512:
      return "avx512";
    case GemmIsa::avx2:
      return "avx2";
    case GemmIsa::portable:
      break;
  }
  return "portable";
}

bool gemm_isa_supported(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::avx512:
      return avx512_gemm::supported();
    case GemmIsa::avx2:
      return avx2_gemm::supported();
    case GemmIsa::portable:
      break;
  }
  return true;
}

GemmIsa default_gemm_isa() {
  static const GemmIsa isa = detect_default();  // a throw leaves it uninitialized: the next call tries again
  return isa;
}

GemmIsa active_gemm_isa() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced < 0 ? default_gemm_isa() : static_cast<GemmIsa>(forced);
}

void force_gemm_isa(GemmIsa isa) {
  if (!gemm_isa_supported(isa)) {
    throw std::invalid_argument(std::string("force_gemm_isa: this CPU cannot run the ") + gemm_isa_name(isa) + " path");
  }
  g_forced.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void reset_gemm_isa() {
  g_forced.store(-1, std::memory_order_relaxed);
}

void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  dispatch(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc) {
  dispatch(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace detail
}  // namespace wbaudit::sim
