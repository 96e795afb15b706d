// The expected-erasure kernel and its explicit instantiations for the host execution spaces (Serial, OpenMP).
#include "sim/precision/expected_erasure.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "sim/precision/writeback.hpp"

namespace wbaudit::sim {
namespace {

// One block's share: nonzero proposals, non-finite inputs (with the first), and the probability sum as an exact
// count of 2^-r units (r-bit SR) or a double summed in index order (exact SR).
struct BlockSum {
  std::int64_t nonzero = 0;
  std::int64_t nonfinite = 0;
  std::int64_t first_nonfinite = -1;
  std::int64_t units = 0;
  double sum = 0;
};

template <class MemorySpace>
struct ExpectedBlockKernel {
  Kokkos::View<const float*, MemorySpace> w;
  Kokkos::View<const float*, MemorySpace> u;
  Kokkos::View<BlockSum*, MemorySpace> blocks;
  FormatParams p;
  WritebackPolicy policy;
  double two_r = 1;
  std::int64_t n = 0;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block) const {
    BlockSum s;
    const std::int64_t end = (block + 1) * kExpectedErasureBlock < n ? (block + 1) * kExpectedErasureBlock : n;
    for (std::int64_t i = block * kExpectedErasureBlock; i < end; ++i) {
      const float wi = w(i);
      const float ui = u(i);
      if (!std::isfinite(wi) || !std::isfinite(ui)) {
        if (s.nonfinite++ == 0) {
          s.first_nonfinite = i;
        }
        continue;
      }
      if (ui == 0) {
        continue;
      }
      ++s.nonzero;
      const double prob = erasure_probability(p, policy, round_nearest(p, static_cast<double>(wi)), ui);
      if (policy.sr_bits > 0) {
        s.units += static_cast<std::int64_t>(prob * two_r);  // exact: prob is a multiple of 2^-r
      } else {
        s.sum += prob;
      }
    }
    blocks(block) = s;
  }
};

}  // namespace

std::string projection_name(const WritebackPolicy& policy) {
  std::string name = policy_name(policy.policy);
  if (policy.sr_bits > 0 && (policy.policy == Policy::stochastic || policy.policy == Policy::deadzone_sr)) {
    name += "-r" + std::to_string(policy.sr_bits);
  }
  return name;
}

template <class ExecSpace>
ExpectedErasure expected_erasure(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  if (policy.policy != Policy::stochastic && policy.policy != Policy::deadzone_sr) {
    throw std::invalid_argument("expected_erasure: policy " + policy_name(policy.policy) +
                                " is not stochastic (known: stochastic, deadzone-sr)");
  }
  if (policy.sr_bits < 0 || policy.sr_bits > 32) {
    throw std::invalid_argument("expected_erasure: sr_bits " + std::to_string(policy.sr_bits) + " outside 0..32");
  }
  if (w.extent(0) != u.extent(0)) {
    throw std::invalid_argument("expected_erasure: w has " + std::to_string(w.extent(0)) + " elements, u has " +
                                std::to_string(u.extent(0)));
  }
  const auto n = static_cast<std::int64_t>(u.extent(0));
  if (policy.sr_bits > 0 && n >= (std::int64_t{1} << 30)) {
    throw std::invalid_argument("expected_erasure: " + std::to_string(n) +
                                " coordinates overflow the exact 2^-r unit count (at most 2^30)");
  }
  ExpectedBlockKernel<MS> kernel;
  kernel.w = w;
  kernel.u = u;
  kernel.p = format_params(fmt);
  kernel.policy = policy;
  kernel.two_r = std::ldexp(1.0, policy.sr_bits);
  kernel.n = n;
  const std::int64_t nblocks = (n + kExpectedErasureBlock - 1) / kExpectedErasureBlock;
  kernel.blocks = Kokkos::View<BlockSum*, MS>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::precision::expected_erasure::blocks"),
      nblocks);
  Kokkos::parallel_for("wbaudit::sim::precision::expected_erasure::kernel",
                       Kokkos::RangePolicy<ExecSpace>(space, 0, nblocks), kernel);
  auto blocks = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, kernel.blocks);
  ExpectedErasure out;
  std::int64_t units = 0, nonfinite = 0, first = -1;
  for (std::int64_t b = 0; b < nblocks; ++b) {  // block order: independent of the threads that filled them
    out.nonzero += blocks(b).nonzero;
    units += blocks(b).units;
    out.expected_erased += blocks(b).sum;
    if (blocks(b).nonfinite > 0 && first < 0) {
      first = blocks(b).first_nonfinite;
    }
    nonfinite += blocks(b).nonfinite;
  }
  if (nonfinite > 0) {
    auto wh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
    auto uh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, u);
    throw NonFiniteError("expected_erasure (format " + std::string(fmt.name) + ", policy " + projection_name(policy) +
                         "): " + std::to_string(nonfinite) + " non-finite inputs, the first at coordinate " +
                         std::to_string(first) + " (w = " + std::to_string(wh(first)) +
                         ", u = " + std::to_string(uh(first)) + ")");
  }
  if (policy.sr_bits > 0) {
    out.expected_erased = std::ldexp(static_cast<double>(units), -policy.sr_bits);
  }
  return out;
}

#define WBAUDIT_INSTANTIATE_EXPECTED_ERASURE(SPACE)                                                         \
  template ExpectedErasure expected_erasure<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, \
                                                   Kokkos::View<const float*, SPACE::memory_space>,         \
                                                   Kokkos::View<const float*, SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_EXPECTED_ERASURE(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_EXPECTED_ERASURE(Kokkos::OpenMP)
#endif

}  // namespace wbaudit::sim
