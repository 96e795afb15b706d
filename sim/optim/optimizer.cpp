#include "sim/optim/optimizer.hpp"

#include <cmath>
#include <stdexcept>

namespace wbaudit::sim {

OptimizerKind optimizer_kind_from_name(std::string_view name) {
  if (name == "sgd") {
    return OptimizerKind::sgd;
  }
  if (name == "momentum") {
    return OptimizerKind::momentum;
  }
  if (name == "adam") {
    return OptimizerKind::adam;
  }
  if (name == "adamw") {
    return OptimizerKind::adamw;
  }
  throw std::invalid_argument("unknown optimizer \"" + std::string(name) + "\" (known: sgd, momentum, adam, adamw)");
}

std::string optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd:
      return "sgd";
    case OptimizerKind::momentum:
      return "momentum";
    case OptimizerKind::adam:
      return "adam";
    default:
      return "adamw";
  }
}

template <class ExecSpace>
Optimizer<ExecSpace>::Optimizer(const OptimizerConfig& config, const std::vector<std::int64_t>& tensor_sizes)
    : m_config(config) {
  for (std::size_t t = 0; t < tensor_sizes.size(); ++t) {
    const bool first = config.kind != OptimizerKind::sgd;
    const bool second = config.kind == OptimizerKind::adam || config.kind == OptimizerKind::adamw;
    m_first.emplace_back("wbaudit::sim::Optimizer::first_moment", first ? tensor_sizes[t] : 0);
    m_second.emplace_back("wbaudit::sim::Optimizer::second_moment", second ? tensor_sizes[t] : 0);
  }
}

template <class ExecSpace>
void Optimizer<ExecSpace>::propose(const ExecSpace& space, int tensor, std::int64_t step, float lr,
                                   Kokkos::View<const float*, memory_space> g,
                                   Kokkos::View<const float*, memory_space> w, Kokkos::View<float*, memory_space> u) {
  const auto policy = Kokkos::RangePolicy<ExecSpace>(space, 0, g.extent(0));
  const float wd = static_cast<float>(m_config.weight_decay);
  const auto first = m_first[tensor], second = m_second[tensor];
  switch (m_config.kind) {
    case OptimizerKind::sgd:
      Kokkos::parallel_for(
          "wbaudit::sim::Optimizer::propose::sgd", policy,
          KOKKOS_LAMBDA(const std::size_t i) { u(i) = -lr * (g(i) + wd * w(i)); });
      break;
    case OptimizerKind::momentum: {
      const float mu = static_cast<float>(m_config.momentum);
      Kokkos::parallel_for(
          "wbaudit::sim::Optimizer::propose::momentum", policy, KOKKOS_LAMBDA(const std::size_t i) {
            const float b = mu * first(i) + (g(i) + wd * w(i));
            first(i) = b;
            u(i) = -lr * b;
          });
      break;
    }
    case OptimizerKind::adam:
    case OptimizerKind::adamw: {
      const bool decoupled = m_config.kind == OptimizerKind::adamw;
      const float b1 = static_cast<float>(m_config.beta1), b2 = static_cast<float>(m_config.beta2);
      const float one_minus_b1 = static_cast<float>(1.0 - m_config.beta1);
      const float one_minus_b2 = static_cast<float>(1.0 - m_config.beta2);
      const float eps = static_cast<float>(m_config.eps);
      const double t1 = static_cast<double>(step + 1);
      const float c1 = static_cast<float>(1.0 - std::pow(m_config.beta1, t1));
      const float c2 = static_cast<float>(1.0 - std::pow(m_config.beta2, t1));
      Kokkos::parallel_for(
          "wbaudit::sim::Optimizer::propose::adam", policy, KOKKOS_LAMBDA(const std::size_t i) {
            const float gi = decoupled ? g(i) : g(i) + wd * w(i);
            const float m = b1 * first(i) + one_minus_b1 * gi;
            const float v = b2 * second(i) + one_minus_b2 * (gi * gi);
            first(i) = m;
            second(i) = v;
            float step_dir = (m / c1) / (std::sqrt(v / c2) + eps);
            if (decoupled) {
              step_dir += wd * w(i);
            }
            u(i) = -lr * step_dir;
          });
      break;
    }
  }
}

template class Optimizer<Kokkos::Serial>;
#if defined(KOKKOS_ENABLE_OPENMP)
template class Optimizer<Kokkos::OpenMP>;
#endif

}  // namespace wbaudit::sim
