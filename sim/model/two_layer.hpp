#pragma once
// Two-layer teacher-student regression, y = W2 * act(W1 x + b1) + b2, with MSE loss
// L = 1/(B*O) * sum_b sum_k (yhat[b,k] - y[b,k])^2, forward and backward in Kokkos.
// Determinism: every gradient coordinate is one work item that sums over the batch in a fixed order (no atomics;
// fixed_order_sum below),
// and the loss is summed on the host in a fixed order, so results are bitwise identical for any thread count.
#include <Kokkos_Core.hpp>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "sim/data/gaussian_stream.hpp"

namespace wbaudit::sim {

enum class Activation : int { tanh, relu, linear };
Activation activation_from_name(std::string_view name);  // throws std::invalid_argument listing the known names
std::string activation_name(Activation activation);

struct TwoLayerShape {
  int input_dim = 16;
  int hidden = 64;
  int output_dim = 4;
  Activation activation = Activation::tanh;
};

// Parameter tensors in a fixed order; the index is the tensor id used for RNG keys and traces.
inline constexpr int kTwoLayerTensors = 4;
inline constexpr std::array<const char*, kTwoLayerTensors> kTwoLayerTensorNames = {"layer1.weight", "layer1.bias",
                                                                                   "layer2.weight", "layer2.bias"};

// tanh from one expf: tanh|z| = 1 - 2 / (exp(2|z|) + 1), with the odd Taylor polynomial z - z^3/3 + 2z^5/15 below
// |z| = 1/16 (relative error < 1e-8 there) to avoid cancellation; glibc's tanhf costs several times more and
// dominated the step time. Absolute error < 2.5e-7 (cancellation in 1 - 2/(e + 1)), relative error of a few ulps
// near 0; deterministic (no thread- or order-dependent terms).
KOKKOS_INLINE_FUNCTION float fast_tanh(float z) {
  const float a = std::fabs(z);
  if (a < 0.0625f) {
    const float z2 = z * z;
    return z + z * z2 * (-1.0f / 3.0f + z2 * (2.0f / 15.0f));
  }
  if (a > 9.0f) {
    return z > 0.0f ? 1.0f : -1.0f;  // 1 - tanh(9) < 2^-25
  }
  const float t = 1.0f - 2.0f / (std::exp(2.0f * a) + 1.0f);
  return z > 0.0f ? t : -t;
}

// sum_{k < n} term(k) with four interleaved partial sums combined as (s0 + s1) + (s2 + s3): a fixed order that does
// not depend on threads, and four independent add chains instead of one latency-bound chain.
template <class Term>
KOKKOS_INLINE_FUNCTION float fixed_order_sum(int n, const Term& term) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += term(k);
    s1 += term(k + 1);
    s2 += term(k + 2);
    s3 += term(k + 3);
  }
  for (; k < n; ++k) {
    s0 += term(k);
  }
  return (s0 + s1) + (s2 + s3);
}

KOKKOS_INLINE_FUNCTION float activate(Activation act, float z) {
  switch (act) {
    case Activation::tanh:
      return fast_tanh(z);
    case Activation::relu:
      return z > 0.0f ? z : 0.0f;
    default:
      return z;
  }
}

// Derivative of the activation given z and a = act(z).
KOKKOS_INLINE_FUNCTION float activate_derivative(Activation act, float z, float a) {
  switch (act) {
    case Activation::tanh:
      return 1.0f - a * a;
    case Activation::relu:
      return z > 0.0f ? 1.0f : 0.0f;
    default:
      return 1.0f;
  }
}

template <class ExecSpace>
class TwoLayerModel {
 public:
  using memory_space = typename ExecSpace::memory_space;
  using Vector = Kokkos::View<float*, memory_space>;

  TwoLayerModel(const TwoLayerShape& shape, int batch);

  const TwoLayerShape& shape() const { return m_shape; }
  int batch() const { return m_batch; }
  std::int64_t tensor_size(int tensor) const;

  // Parameters and gradients by tensor id (layer1.weight is hidden x input row-major, layer2.weight output x hidden).
  Vector parameter(int tensor) const { return m_params[tensor]; }
  Vector gradient(int tensor) const { return m_grads[tensor]; }

  // Gaussian init: weights and biases ~ N(0, (scale / sqrt(fan_in))^2), drawn from stream(step = tensor id,
  // sample 0, index = coordinate).
  void initialize(const ExecSpace& space, const GaussianStream& stream, float scale);

  // Writes outputs for inputs x [batch x input] into yhat [batch x output] (no gradient).
  void predict(const ExecSpace& space, Kokkos::View<const float*, memory_space> x,
               Kokkos::View<float*, memory_space> yhat) const;

  // Forward and backward on (x, y): fills gradient(t) for every tensor and returns the MSE loss (summed in double
  // on the host in a fixed order).
  double loss_and_gradient(const ExecSpace& space, Kokkos::View<const float*, memory_space> x,
                           Kokkos::View<const float*, memory_space> y);

 private:
  void forward_hidden(const ExecSpace& space, Kokkos::View<const float*, memory_space> x) const;

  TwoLayerShape m_shape;
  int m_batch = 0;
  std::array<Vector, kTwoLayerTensors> m_params;
  std::array<Vector, kTwoLayerTensors> m_grads;
  mutable Vector m_hidden;        // [batch x hidden] act(z)
  mutable Vector m_hidden_slope;  // [batch x hidden] act'(z)
  Vector m_residual;              // [batch x output] yhat - y
  Vector m_delta_out;             // [batch x output] dL/dyhat
  Vector m_delta_hidden;          // [batch x hidden] dL/dz
};

// The teacher-student data stream: inputs x ~ N(0, I) from GaussianStream(seed, input) keyed by (step, sample,
// index), targets y = teacher(x) + noise * N(0, 1) from GaussianStream(seed, label_noise).
template <class ExecSpace>
class TeacherStudentData {
 public:
  using memory_space = typename ExecSpace::memory_space;
  TeacherStudentData(const ExecSpace& space, const TwoLayerShape& teacher_shape, std::uint64_t teacher_seed,
                     std::uint64_t data_seed, int batch, float noise);
  // Fills x() and y() with the batch of step `step`.
  void generate(const ExecSpace& space, std::int64_t step);
  Kokkos::View<const float*, memory_space> x() const { return m_x; }
  Kokkos::View<const float*, memory_space> y() const { return m_y; }

 private:
  TwoLayerModel<ExecSpace> m_teacher;
  std::uint64_t m_data_seed;
  int m_batch;
  float m_noise;
  Kokkos::View<float*, memory_space> m_x;
  Kokkos::View<float*, memory_space> m_y;
  Kokkos::View<float*, memory_space> m_hidden;  // [batch x teacher hidden] scratch
};

}  // namespace wbaudit::sim
