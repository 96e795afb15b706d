#pragma once
// Recording of the per-policy projections of a reference trace: at a recorded step, for one declared format, the
// expected erased events of every declared stochastic policy (per-tensor formats: sim/precision/expected_erasure.hpp;
// block formats: sim/precision/block_expected.hpp) appended to the format's
// ProjectedSeries::expected[projection_name(policy)]. Called by the reference branch of the run engine.
#include <Kokkos_Core.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "sim/precision/block_expected.hpp"
#include "sim/precision/expected_erasure.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

namespace detail {
// One recorded step's expected erased count and fraction (NaN when no u != 0).
inline void append_expected(const ExpectedErasure& e, ExpectedSeries& out) {
  out.erased.push_back(e.expected_erased);
  out.fraction.push_back(e.nonzero > 0 ? e.expected_erased / static_cast<double>(e.nonzero)
                                       : std::numeric_limits<double>::quiet_NaN());
}
}  // namespace detail

template <class ExecSpace>
void record_expected_projections(const ExecSpace& space, const FormatSpec& fmt,
                                 const std::vector<WritebackPolicy>& policies,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                 ProjectedSeries& series) {
  for (const WritebackPolicy& policy : policies) {
    detail::append_expected(expected_erasure(space, fmt, policy, w, u), series.expected[projection_name(policy)]);
  }
}

// A block format: the expected erased events of writing back q(w) + u blockwise (expected_block_erasure); key names
// the tensor and step in errors.
template <class ExecSpace>
void record_expected_projections(const ExecSpace& space, const BlockFormatSpec& fmt, const RowMajorShape& shape,
                                 const RngKey& key, const std::vector<WritebackPolicy>& policies,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                 ProjectedSeries& series) {
  for (const WritebackPolicy& policy : policies) {
    detail::append_expected(expected_block_erasure(space, fmt, policy, key, shape, w, u),
                            series.expected[projection_name(policy)]);
  }
}

}  // namespace wbaudit::sim
