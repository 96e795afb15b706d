#pragma once
// Optimizers producing fp32 proposals u (the write-back w <- q(w + u) is the precision layer's job).
// With g the gradient, lr the scheduled rate, lambda = weight_decay and t the 0-based step:
//   sgd:      u = -lr * (g + lambda w)
//   momentum: b = mu b + (g + lambda w);  u = -lr * b                                   (PyTorch convention)
//   adam:     g' = g + lambda w;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
//             u = -lr * (m / c1) / (sqrt(v / c2) + eps),  c1 = 1 - b1^(t+1),  c2 = 1 - b2^(t+1)
//   adamw:    as adam on g, plus the decoupled term: u = -lr * ((m / c1) / (sqrt(v / c2) + eps) + lambda w)
// States m, v, b are fp32; c1, c2 are computed in double and rounded to fp32 once per step.
#include <Kokkos_Core.hpp>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wbaudit::sim {

enum class OptimizerKind : int { sgd, momentum, adam, adamw };
OptimizerKind optimizer_kind_from_name(std::string_view name);  // throws std::invalid_argument listing known names
std::string optimizer_kind_name(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.9;
  double weight_decay = 0.0;
};

template <class ExecSpace>
class Optimizer {
 public:
  using memory_space = typename ExecSpace::memory_space;
  // One state slot per tensor, sized by tensor_sizes.
  Optimizer(const OptimizerConfig& config, const std::vector<std::int64_t>& tensor_sizes);

  // Computes u for tensor `tensor` at step `step` with learning rate lr from gradient g and weights w (the weights
  // the decay term acts on), updating that tensor's state.
  void propose(const ExecSpace& space, int tensor, std::int64_t step, float lr,
               Kokkos::View<const float*, memory_space> g, Kokkos::View<const float*, memory_space> w,
               Kokkos::View<float*, memory_space> u);

  const OptimizerConfig& config() const { return m_config; }
  // Tensor t's state (zero-length where the kind keeps none: sgd has no first moment, only Adam a second), for
  // checkpoints.
  Kokkos::View<float*, memory_space> first_moment(int tensor) const { return m_first[tensor]; }
  Kokkos::View<float*, memory_space> second_moment(int tensor) const { return m_second[tensor]; }

 private:
  OptimizerConfig m_config;
  std::vector<Kokkos::View<float*, memory_space>> m_first;   // momentum buffer / Adam m
  std::vector<Kokkos::View<float*, memory_space>> m_second;  // Adam v
};

}  // namespace wbaudit::sim
