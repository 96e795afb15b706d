#pragma once
// Recording of the joint (|w|, |u|) histogram of a reference trace at one recorded step (joint_histogram.hpp):
// the key of every coordinate with u != 0 (one kernel), then on the host the keys sorted and run-length encoded
// into GroupTrace::joint_keys / joint_counts, closing the step with joint_offsets. Sorting makes the pairs (and so
// the trace) independent of the thread count. Inputs must be finite (the engine rejects non-finite values first).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "sim/trace/joint_histogram.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

inline constexpr std::uint64_t kJointNoProposal = ~std::uint64_t{0};  // u == 0: not counted

template <class ExecSpace>
void record_joint_histogram(const ExecSpace& space, const JointHistogramLayout& layout,
                            Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                            Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                            Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> keys, GroupTrace& g) {
  const int wb = layout.w_bits, ub = layout.u_bits;
  Kokkos::parallel_for(
      "wbaudit::sim::trace::record_joint_histogram::keys", Kokkos::RangePolicy<ExecSpace>(space, 0, w.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) {
        const float ui = u(i);
        keys(i) = ui == 0.0f ? kJointNoProposal : joint_key(wb, ub, w(i), ui);
      });
  space.fence();
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), keys);
  std::uint64_t* begin = host.data();
  std::uint64_t* end = begin + host.extent(0);
  std::sort(begin, end);
  for (std::uint64_t* p = begin; p != end && *p != kJointNoProposal;) {
    std::uint64_t* q = p;
    while (q != end && *q == *p) ++q;
    g.joint_keys.push_back(*p);
    g.joint_counts.push_back(static_cast<std::int64_t>(q - p));
    p = q;
  }
  g.joint_offsets.push_back(static_cast<std::int64_t>(g.joint_keys.size()));
}

}  // namespace wbaudit::sim
