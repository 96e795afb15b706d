// wbaudit's GEMM (sim/model/detail/gemm.*, gemm_parallel.hpp): every path this CPU can run (portable, AVX2,
// AVX-512), forced in turn, equals bit for bit an independent triple loop that follows the contract of gemm.hpp, on
// shapes that cross every tile, sliver and cache-block edge, with transposes, alpha/beta variants and leading
// dimensions wider than the matrices; the row-block split over threads changes nothing; C is not read when beta == 0.
// The data (magnitudes over 2^-14 .. 2^14, both signs) make the result depend on the summation order, which a test
// here checks, so a path that summed in another order would fail.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/model/detail/gemm.hpp"
#include "sim/model/detail/gemm_parallel.hpp"

namespace {

using namespace wbaudit::sim;
using detail::GemmIsa;
using detail::Op;

constexpr GemmIsa kAllIsas[] = {GemmIsa::portable, GemmIsa::avx2, GemmIsa::avx512};

// Restores the default path when a test ends, passed or not.
struct DefaultIsaAtExit {
  ~DefaultIsaAtExit() { detail::reset_gemm_isa(); }
};

template <class Scalar>
struct Problem {
  Op op_a, op_b;
  int m, n, k;
  Scalar alpha, beta;
  int pad_a, pad_b, pad_c;  // leading dimension minus the stored row length
};

// An operand stored row-major as `rows` x `cols` with leading dimension cols + pad; the padding holds NaN, so a path
// that read it would put NaN into C.
template <class Scalar>
struct Stored {
  int rows, cols, ld;
  std::vector<Scalar> v;
};

template <class Scalar>
Scalar wide_value(std::mt19937_64& rng) {  // +-(1 + u) 2^e, e in [-14, 14]: sums that depend on their order
  std::uniform_real_distribution<double> unit(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-14, 14), sign(0, 1);
  return static_cast<Scalar>((sign(rng) ? -1.0 : 1.0) * std::ldexp(unit(rng), exponent(rng)));
}

template <class Scalar>
Stored<Scalar> random_operand(int rows, int cols, int pad, std::mt19937_64& rng) {
  Stored<Scalar> s{rows, cols, cols + pad, {}};
  s.v.assign(static_cast<std::size_t>(rows) * s.ld, std::numeric_limits<Scalar>::quiet_NaN());
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      s.v[static_cast<std::size_t>(i) * s.ld + j] = wide_value<Scalar>(rng);
    }
  }
  return s;
}

// The contract of gemm.hpp written out: acc from +0, one std::fma per p in increasing order, then alpha and beta.
template <class Scalar>
void reference_gemm(const Problem<Scalar>& g, const Stored<Scalar>& a, const Stored<Scalar>& b, Stored<Scalar>& c,
                    bool reverse_k = false) {
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      Scalar acc = 0;
      for (int q = 0; q < g.k; ++q) {
        const int p = reverse_k ? g.k - 1 - q : q;
        const Scalar x = g.op_a == Op::none ? a.v[std::size_t(i) * a.ld + p] : a.v[std::size_t(p) * a.ld + i];
        const Scalar y = g.op_b == Op::none ? b.v[std::size_t(p) * b.ld + j] : b.v[std::size_t(j) * b.ld + p];
        acc = std::fma(x, y, acc);
      }
      Scalar& out = c.v[std::size_t(i) * c.ld + j];
      out = g.beta == 0 ? g.alpha * acc : std::fma(g.alpha, acc, g.beta * out);
    }
  }
}

template <class Scalar>
struct Operands {
  Stored<Scalar> a, b, c;
};

template <class Scalar>
Operands<Scalar> operands(const Problem<Scalar>& g, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const bool ta = g.op_a == Op::transpose, tb = g.op_b == Op::transpose;
  Operands<Scalar> o{random_operand<Scalar>(ta ? g.k : g.m, ta ? g.m : g.k, g.pad_a, rng),
                     random_operand<Scalar>(tb ? g.n : g.k, tb ? g.k : g.n, g.pad_b, rng),
                     random_operand<Scalar>(g.m, g.n, g.pad_c, rng)};
  if (g.beta == 0) {  // C must not be read: fill it with NaN (its padding is NaN in every case)
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n; ++j) {
        o.c.v[std::size_t(i) * o.c.ld + j] = std::numeric_limits<Scalar>::quiet_NaN();
      }
    }
  }
  return o;
}

template <class Scalar>
std::vector<Scalar> run_gemm(const Problem<Scalar>& g, Operands<Scalar> o) {
  detail::gemm(g.op_a, g.op_b, g.m, g.n, g.k, g.alpha, o.a.v.data(), o.a.ld, o.b.v.data(), o.b.ld, g.beta, o.c.v.data(),
               o.c.ld);
  return o.c.v;
}

// Bitwise equality, NaN payloads included (the padding of C must come back untouched).
template <class Scalar>
::testing::AssertionResult same_bits(const std::vector<Scalar>& want, const std::vector<Scalar>& got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "sizes " << want.size() << " and " << got.size();
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(Scalar)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": want " << want[i] << ", got " << got[i];
    }
  }
  return ::testing::AssertionSuccess();
}

template <class Scalar>
std::string describe(const Problem<Scalar>& g) {
  const auto op = [](Op o) { return o == Op::none ? "N" : "T"; };
  return std::string(op(g.op_a)) + op(g.op_b) + " m " + std::to_string(g.m) + " n " + std::to_string(g.n) + " k " +
         std::to_string(g.k) + " alpha " + std::to_string(g.alpha) + " beta " + std::to_string(g.beta) + " pads " +
         std::to_string(g.pad_a) + "/" + std::to_string(g.pad_b) + "/" + std::to_string(g.pad_c);
}

// Shapes crossing the tile edges of every path (portable 4 x 8, AVX2 6 x 16 and 6 x 8 narrow, AVX-512 14 x 32 and
// 14 x 16 narrow), their row blocks (168 rows), k blocks (256) and column blocks (1024), with every transpose pair,
// alpha/beta variants (beta == 0 with C full of NaN) and leading dimensions wider than the rows.
template <class Scalar>
std::vector<Problem<Scalar>> problems() {
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1},     {1, 1, 7},     {3, 5, 1},     {14, 32, 1},   {13, 31, 2}, {15, 33, 3},
                          {6, 16, 17},   {7, 17, 255},  {29, 48, 256}, {28, 64, 257}, {5, 9, 513}, {169, 40, 19},
                          {200, 70, 33}, {37, 1030, 5}, {2, 3, 600},   {43, 47, 300}, {64, 8, 64}, {1, 100, 40}};
  struct Coefficients {
    double alpha, beta;
  };
  const Coefficients coefficients[] = {{1, 0}, {1, 1}, {0.125, 0}, {-1.25, 0.75}, {0.3, -2}, {0, 1.5}};
  std::vector<Problem<Scalar>> list;
  int i = 0;
  for (const Shape& s : shapes) {
    for (const Op op_a : {Op::none, Op::transpose}) {
      for (const Op op_b : {Op::none, Op::transpose}) {
        const Coefficients& c = coefficients[i % std::size(coefficients)];
        list.push_back({op_a, op_b, s.m, s.n, s.k, static_cast<Scalar>(c.alpha), static_cast<Scalar>(c.beta), i % 3,
                        (i / 3) % 4 * 5, (i / 2) % 3 * 7});
        ++i;
      }
    }
  }
  return list;
}

template <class Scalar>
void every_path_equals_the_reference() {
  const DefaultIsaAtExit restore;
  int paths = 0;
  std::uint64_t seed = 1;
  for (const Problem<Scalar>& g : problems<Scalar>()) {
    const Operands<Scalar> o = operands(g, seed++);
    Operands<Scalar> want = o;
    reference_gemm(g, want.a, want.b, want.c);
    paths = 0;
    for (const GemmIsa isa : kAllIsas) {
      if (!detail::gemm_isa_supported(isa)) {
        continue;
      }
      detail::force_gemm_isa(isa);
      EXPECT_TRUE(same_bits(want.c.v, run_gemm(g, o))) << detail::gemm_isa_name(isa) << " " << describe(g);
      ++paths;
    }
  }
  EXPECT_GE(paths, 1);
  if (!detail::gemm_isa_supported(GemmIsa::avx512)) {
    std::cout << "[ NOTE     ] this CPU lacks AVX-512: its path was not tested here\n";
  }
}

TEST(Gemm, EveryPathEqualsTheFmaSequentialReferenceBitwiseFloat) {
  every_path_equals_the_reference<float>();
}

TEST(Gemm, EveryPathEqualsTheFmaSequentialReferenceBitwiseDouble) {
  every_path_equals_the_reference<double>();
}

TEST(Gemm, TheDataMakeTheResultDependOnTheSummationOrder) {
  // Against the reference summed in reverse k order: most elements differ, so a path summing in another order (k
  // blocks added up, several accumulators per element, a tree) could not pass the tests above.
  const Problem<float> g{Op::none, Op::none, 20, 20, 300, 1.0f, 0.0f, 0, 0, 0};
  const Operands<float> o = operands(g, 42);
  Operands<float> forward = o, backward = o;
  reference_gemm(g, forward.a, forward.b, forward.c);
  reference_gemm(g, backward.a, backward.b, backward.c, true);
  int differ = 0;
  for (std::size_t i = 0; i < forward.c.v.size(); ++i) {
    differ += forward.c.v[i] != backward.c.v[i];
  }
  EXPECT_GT(differ, 100) << "of 400 elements";
  // And a plain multiply-then-add loop (two roundings per k) differs from the fused chain.
  std::vector<float> unfused = o.c.v;
  int unfused_differ = 0;
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      float acc = 0;
      for (int p = 0; p < g.k; ++p) {
        const float prod = o.a.v[std::size_t(i) * g.k + p] * o.b.v[std::size_t(p) * g.n + j];
        acc = acc + prod;
      }
      unfused_differ += acc != forward.c.v[std::size_t(i) * g.n + j];
    }
  }
  EXPECT_GT(unfused_differ, 100) << "of 400 elements";
}

TEST(Gemm, RowBlocksOverThreadsGiveTheSameBitsAsOneCall) {
  // gemm_blocked splits C into row blocks that Kokkos spreads over this test's threads (1 or 2), and gemm_parallel
  // runs a then_add continuation block by block: both against the reference, on every path.
  const DefaultIsaAtExit restore;
  const Problem<float> g{Op::transpose, Op::none, 300, 70, 290, 1.0f, 0.0f, 0, 0, 0};
  const Problem<float> h{Op::none, Op::transpose, 300, 70, 45, 1.0f, 1.0f, 0, 0, 0};  // added to g's result
  const Operands<float> o = operands(g, 7), p = operands(h, 8);
  Operands<float> want = o;
  reference_gemm(g, want.a, want.b, want.c);
  Stored<float> want_sum = want.c;
  reference_gemm(h, p.a, p.b, want_sum);
  for (const GemmIsa isa : kAllIsas) {
    if (!detail::gemm_isa_supported(isa)) {
      continue;
    }
    detail::force_gemm_isa(isa);
    Operands<float> got = o;
    detail::gemm_blocked(Kokkos::DefaultHostExecutionSpace(), "wbaudit::test::gemm_blocked", g.op_a, g.op_b, g.m, g.n,
                         g.k, g.alpha, got.a.v.data(), got.a.ld, got.b.v.data(), got.b.ld, g.beta, got.c.v.data(),
                         got.c.ld);
    EXPECT_TRUE(same_bits(want.c.v, got.c.v)) << detail::gemm_isa_name(isa);
    Operands<float> sum = o;
    detail::gemm_parallel<Kokkos::DefaultHostExecutionSpace, float>(
        Kokkos::DefaultHostExecutionSpace(), "wbaudit::test::gemm_parallel",
        {{g.op_a, g.op_b, g.m, g.n, g.k, g.alpha, sum.a.v.data(), sum.a.ld, sum.b.v.data(), sum.b.ld, g.beta,
          sum.c.v.data(), sum.c.ld},
         {h.op_a, h.op_b, h.m, h.n, h.k, h.alpha, p.a.v.data(), p.a.ld, p.b.v.data(), p.b.ld, h.beta, sum.c.v.data(),
          sum.c.ld, true}});
    EXPECT_TRUE(same_bits(want_sum.v, sum.c.v)) << detail::gemm_isa_name(isa);
  }
}

TEST(Gemm, IdentityAndPathSelection) {
  const DefaultIsaAtExit restore;
  EXPECT_EQ(gemm_numeric_identity(), "wbaudit-gemm/1 fma-sequential-k");
  EXPECT_TRUE(detail::gemm_isa_supported(GemmIsa::portable));
  for (const GemmIsa isa : kAllIsas) {
    if (detail::gemm_isa_supported(isa)) {
      detail::force_gemm_isa(isa);
      EXPECT_EQ(detail::active_gemm_isa(), isa);
      EXPECT_EQ(gemm_isa_path(), detail::gemm_isa_name(isa));
    } else {
      EXPECT_THROW(detail::force_gemm_isa(isa), std::invalid_argument) << detail::gemm_isa_name(isa);
    }
  }
  detail::reset_gemm_isa();
  EXPECT_EQ(detail::active_gemm_isa(), detail::default_gemm_isa());
  EXPECT_EQ(std::string(detail::gemm_isa_name(GemmIsa::avx2)), "avx2");
}

}  // namespace
