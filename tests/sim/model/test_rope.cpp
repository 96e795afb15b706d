// Rotary position embedding (sim/model/detail/rope.hpp): closed-form angles, norm preservation, relative-position
// dependence of the q.k score, the transpose as inverse, and pass-through of the unrotated dimensions.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "sim/model/detail/rope.hpp"

namespace {

using wbaudit::sim::detail::fill_rope_tables;
using wbaudit::sim::detail::rope_rotate;
using wbaudit::sim::detail::rope_rotate_transpose;
using Table = Kokkos::View<double*, Kokkos::HostSpace>;

constexpr int kSeq = 64, kRotary = 8, kHalf = kRotary / 2;
constexpr double kBase = 10000.0;

struct Tables {
  Table cos{"cos", kSeq*kHalf}, sin{"sin", kSeq*kHalf};
  Tables() { fill_rope_tables(cos, sin, kSeq, kRotary, kBase); }
  std::vector<double> rotated(std::vector<double> x, int pos) const {
    rope_rotate(x.data(), cos.data() + pos * kHalf, sin.data() + pos * kHalf, kHalf);
    return x;
  }
};

std::vector<double> random_vector(std::mt19937& rng, int n) {
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (double& x : v) {
    x = normal(rng);
  }
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    s += a[i] * b[i];
  }
  return s;
}

TEST(Rope, TablesAreTheClosedFormAngles) {
  const Tables t;
  for (int pos : {0, 1, 17, 63}) {
    for (int i = 0; i < kHalf; ++i) {
      const double theta = pos / std::pow(kBase, 2.0 * i / kRotary);  // pos * base^(-2i / rotary_dim)
      EXPECT_NEAR(t.cos(pos * kHalf + i), std::cos(theta), 1e-15);
      EXPECT_NEAR(t.sin(pos * kHalf + i), std::sin(theta), 1e-15);
    }
  }
}

TEST(Rope, RotatesEachPairByItsAngle) {
  // Unit vector e_i (i < half) at position p goes to cos(theta) e_i + sin(theta) e_{half + i} (NeoX rotate-half).
  const Tables t;
  const int pos = 5, i = 1;
  std::vector<double> e(kRotary, 0.0);
  e[i] = 1.0;
  const auto r = t.rotated(e, pos);
  const double theta = pos / std::pow(kBase, 2.0 * i / kRotary);
  for (int j = 0; j < kRotary; ++j) {
    const double expected = j == i ? std::cos(theta) : j == kHalf + i ? std::sin(theta) : 0.0;
    EXPECT_NEAR(r[j], expected, 1e-15) << j;
  }
}

TEST(Rope, PreservesNorms) {
  const Tables t;
  std::mt19937 rng(1);
  for (int pos = 0; pos < kSeq; ++pos) {
    const auto x = random_vector(rng, kRotary);
    const auto r = t.rotated(x, pos);
    EXPECT_NEAR(dot(r, r), dot(x, x), 1e-13 * dot(x, x));
  }
}

TEST(Rope, ScoreDependsOnlyOnRelativePosition) {
  const Tables t;
  std::mt19937 rng(2);
  const auto q = random_vector(rng, kRotary);
  const auto k = random_vector(rng, kRotary);
  for (int offset = 0; offset < 8; ++offset) {
    const double reference = dot(t.rotated(q, offset), t.rotated(k, 0));
    for (int shift = 1; shift + offset < kSeq; shift += 7) {
      EXPECT_NEAR(dot(t.rotated(q, offset + shift), t.rotated(k, shift)), reference, 1e-12) << offset << " " << shift;
    }
  }
  // and it does depend on the offset (the property above is not trivially true)
  EXPECT_GT(std::fabs(dot(t.rotated(q, 3), t.rotated(k, 0)) - dot(q, k)), 1e-3);
}

TEST(Rope, TransposeInvertsTheRotation) {
  const Tables t;
  std::mt19937 rng(3);
  for (int pos : {0, 9, 40}) {
    const auto x = random_vector(rng, kRotary);
    auto r = t.rotated(x, pos);
    rope_rotate_transpose(r.data(), t.cos.data() + pos * kHalf, t.sin.data() + pos * kHalf, kHalf);
    for (int j = 0; j < kRotary; ++j) {
      EXPECT_NEAR(r[j], x[j], 1e-14);
    }
  }
}

TEST(Rope, PartialRotationLeavesTheRestOfTheHead) {
  // A head of 12 dims with rotary_dim 8: rope_rotate touches only the first 8.
  const Tables t;
  std::mt19937 rng(4);
  const auto x = random_vector(rng, 12);
  auto r = x;
  rope_rotate(r.data(), t.cos.data() + 7 * kHalf, t.sin.data() + 7 * kHalf, kHalf);
  for (int j = kRotary; j < 12; ++j) {
    EXPECT_EQ(r[j], x[j]);
  }
  EXPECT_NE(r[0], x[0]);
}

}  // namespace
