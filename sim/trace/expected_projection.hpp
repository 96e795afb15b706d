#pragma once
// Recording of the per-policy projections of a reference trace: at a recorded step, for one declared format, the
// expected erased events of every declared stochastic policy (sim/precision/expected_erasure.hpp) appended to the
// format's ProjectedSeries::expected[projection_name(policy)]. Called by the reference branch of the run engine.
#include <Kokkos_Core.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "sim/precision/expected_erasure.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

template <class ExecSpace>
void record_expected_projections(const ExecSpace& space, const FormatSpec& fmt,
                                 const std::vector<WritebackPolicy>& policies,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                 ProjectedSeries& series) {
  for (const WritebackPolicy& policy : policies) {
    const ExpectedErasure e = expected_erasure(space, fmt, policy, w, u);
    ExpectedSeries& out = series.expected[projection_name(policy)];
    out.erased.push_back(e.expected_erased);
    out.fraction.push_back(e.nonzero > 0 ? e.expected_erased / static_cast<double>(e.nonzero)
                                         : std::numeric_limits<double>::quiet_NaN());
  }
}

}  // namespace wbaudit::sim
