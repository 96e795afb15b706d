// The two-layer model's loss and gradient against a plain double-precision forward pass and central finite
// differences written here, independently of the Kokkos kernels.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <vector>

#include "sim/model/two_layer.hpp"

namespace {

using wbaudit::sim::Activation;
using wbaudit::sim::GaussianStream;
using wbaudit::sim::StreamDomain;
using wbaudit::sim::TeacherStudentData;
using wbaudit::sim::TwoLayerModel;
using wbaudit::sim::TwoLayerShape;
using Space = Kokkos::DefaultExecutionSpace;

std::vector<float> host(const Kokkos::View<const float*, Space::memory_space>& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

struct Plain {
  int d, h, o, b;
  Activation act;
  std::vector<double> x, y;
  double activate(double z) const {
    if (act == Activation::tanh) {
      return std::tanh(z);
    }
    if (act == Activation::relu) {
      return z > 0 ? z : 0;
    }
    return z;
  }
  // L = 1/(B*O) sum (W2 act(W1 x + b1) + b2 - y)^2 with params = [W1 | b1 | W2 | b2].
  double loss(const std::vector<std::vector<double>>& p) const {
    double sum = 0;
    for (int n = 0; n < b; ++n) {
      std::vector<double> a(h);
      for (int j = 0; j < h; ++j) {
        double z = p[1][j];
        for (int i = 0; i < d; ++i) {
          z += p[0][j * d + i] * x[n * d + i];
        }
        a[j] = activate(z);
      }
      for (int k = 0; k < o; ++k) {
        double out = p[3][k];
        for (int j = 0; j < h; ++j) {
          out += p[2][k * h + j] * a[j];
        }
        sum += (out - y[n * o + k]) * (out - y[n * o + k]);
      }
    }
    return sum / (b * o);
  }
};

void check_gradient(Activation act) {
  const TwoLayerShape shape{5, 7, 3, act};
  const int batch = 6;
  Space space;
  TwoLayerModel<Space> model(shape, batch);
  model.initialize(space, GaussianStream{11, StreamDomain::student_init}, 1.0f);
  TeacherStudentData<Space> data(space, TwoLayerShape{5, 4, 3, Activation::tanh}, 77, 11, batch, 0.1f);
  data.generate(space, 3);
  const double loss = model.loss_and_gradient(space, data.x(), data.y());

  Plain plain{5, 7, 3, batch, act, {}, {}};
  for (float v : host(data.x())) {
    plain.x.push_back(v);
  }
  for (float v : host(data.y())) {
    plain.y.push_back(v);
  }
  std::vector<std::vector<double>> params;
  for (int t = 0; t < 4; ++t) {
    std::vector<double> p;
    for (float v : host(model.parameter(t))) {
      p.push_back(v);
    }
    params.push_back(p);
  }
  const double plain_loss = plain.loss(params);
  EXPECT_NEAR(loss, plain_loss, 1e-6 * plain_loss);
  EXPECT_GT(plain_loss, 1e-3);  // the check is not vacuous

  const double h = 1e-6;
  for (int t = 0; t < 4; ++t) {
    const std::vector<float> g = host(model.gradient(t));
    ASSERT_EQ(g.size(), params[t].size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      auto plus = params, minus = params;
      plus[t][i] += h;
      minus[t][i] -= h;
      const double fd = (plain.loss(plus) - plain.loss(minus)) / (2 * h);
      EXPECT_NEAR(g[i], fd, 2e-5 + 1e-3 * std::fabs(fd)) << "tensor " << t << " coordinate " << i;
    }
  }
}

TEST(TwoLayerModel, GradientMatchesFiniteDifferencesTanh) {
  check_gradient(Activation::tanh);
}
TEST(TwoLayerModel, GradientMatchesFiniteDifferencesLinear) {
  check_gradient(Activation::linear);
}
TEST(TwoLayerModel, GradientMatchesFiniteDifferencesRelu) {
  check_gradient(Activation::relu);
}

TEST(TwoLayerModel, FastTanhIsCloseToTanh) {
  for (double z = -12; z <= 12; z += 0.0037) {
    const float f = wbaudit::sim::fast_tanh(static_cast<float>(z));
    const double ref = std::tanh(static_cast<double>(static_cast<float>(z)));
    // 1 - 2 / (e + 1) loses a few ulps of 1 by cancellation: absolute error well under 2^-21.
    EXPECT_NEAR(f, ref, 4e-7 * std::fabs(ref) + 2.5e-7) << z;
    if (std::fabs(z) < 0.0625) {
      EXPECT_NEAR(f, ref, 2e-7 * std::fabs(ref)) << z;
    }
  }
}

TEST(TwoLayerModel, InitializationHasTheDeclaredScale) {
  Space space;
  TwoLayerModel<Space> model(TwoLayerShape{64, 128, 4, Activation::tanh}, 1);
  model.initialize(space, GaussianStream{5, StreamDomain::student_init}, 2.0f);
  const std::vector<float> w = host(model.parameter(0));
  double sum2 = 0, sum = 0;
  for (float v : w) {
    sum += v;
    sum2 += double(v) * v;
  }
  const double n = static_cast<double>(w.size());
  // N(0, (2 / sqrt(64))^2): variance 1/16; 8192 samples give a standard error of the variance of about 1.6%.
  EXPECT_NEAR(sum2 / n, 1.0 / 16.0, 0.1 / 16.0);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
}

TEST(TwoLayerModel, DataDependsOnlyOnSeedStepSampleIndex) {
  Space space;
  const TwoLayerShape teacher{4, 3, 2, Activation::tanh};
  TeacherStudentData<Space> a(space, teacher, 9, 1, 8, 0.0f), b(space, teacher, 9, 1, 8, 0.0f);
  TeacherStudentData<Space> c(space, teacher, 9, 2, 8, 0.0f);
  a.generate(space, 5);
  b.generate(space, 4);
  b.generate(space, 5);
  c.generate(space, 5);
  EXPECT_EQ(host(a.x()), host(b.x()));
  EXPECT_EQ(host(a.y()), host(b.y()));
  EXPECT_NE(host(a.x()), host(c.x()));
}

}  // namespace
