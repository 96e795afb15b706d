#pragma once
// Recording of the joint (|w|, |u|) histogram of a reference trace at one recorded step (joint_histogram.hpp):
// the key of every coordinate with u != 0 (one kernel), then on the host the keys sorted (in parallel) and run-length
// encoded into GroupTrace::joint_keys / joint_counts, closing the step with joint_offsets. Sorting makes the pairs (and
// so the trace) independent of the thread count. Inputs must be finite (the engine rejects non-finite values first).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "sim/trace/joint_histogram.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

inline constexpr std::uint64_t kJointNoProposal = ~std::uint64_t{0};  // u == 0: not counted

namespace detail {
// The keys other than kJointNoProposal, in increasing order: an LSD radix sort on their `bits` significant bits
// (keys are below 2^bits: 20 + w_bits + u_bits) in 11-bit digits, stable, a few linear passes instead of a
// comparison sort (the order, so the trace, is the same as std::sort's).
inline std::vector<std::uint64_t> sorted_joint_keys(const std::uint64_t* keys, std::size_t n, int bits) {
  std::vector<std::uint64_t> a;
  a.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (keys[i] != kJointNoProposal) a.push_back(keys[i]);
  std::vector<std::uint64_t> b(a.size());
  constexpr int kDigit = 11;
  constexpr std::size_t kBuckets = std::size_t{1} << kDigit;
  std::vector<std::size_t> count(kBuckets);
  for (int shift = 0; shift < bits; shift += kDigit) {
    std::fill(count.begin(), count.end(), 0);
    for (std::uint64_t x : a) ++count[(x >> shift) & (kBuckets - 1)];
    std::size_t sum = 0;
    for (auto& c : count) {
      const std::size_t here = c;
      c = sum;
      sum += here;
    }
    for (std::uint64_t x : a) b[count[(x >> shift) & (kBuckets - 1)]++] = x;
    a.swap(b);
  }
  return a;
}

// The same, in parallel on `space`: kChunks fixed slices sorted independently, then merged pairwise. The sorted
// sequence is unique, so the result does not depend on the thread count.
template <class ExecSpace>
std::vector<std::uint64_t> sorted_joint_keys(const ExecSpace& space, const std::uint64_t* keys, std::size_t n,
                                             int bits) {
  if (space.concurrency() == 1) return sorted_joint_keys(keys, n, bits);  // one thread: no merge passes
  constexpr int kChunks = 8;
  std::array<std::vector<std::uint64_t>, kChunks> parts;
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::sort",
                       Kokkos::RangePolicy<ExecSpace>(space, 0, kChunks), [&](const int c) {
                         const std::size_t lo = n * static_cast<std::size_t>(c) / kChunks;
                         const std::size_t hi = n * static_cast<std::size_t>(c + 1) / kChunks;
                         parts[static_cast<std::size_t>(c)] = sorted_joint_keys(keys + lo, hi - lo, bits);
                       });
  space.fence();
  for (int width = 1; width < kChunks; width *= 2) {
    Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::merge",
                         Kokkos::RangePolicy<ExecSpace>(space, 0, kChunks / (2 * width)), [&](const int pair) {
                           auto& a = parts[static_cast<std::size_t>(2 * width * pair)];
                           auto& b = parts[static_cast<std::size_t>(2 * width * pair + width)];
                           std::vector<std::uint64_t> merged(a.size() + b.size());
                           std::merge(a.begin(), a.end(), b.begin(), b.end(), merged.begin());
                           a.swap(merged);
                           std::vector<std::uint64_t>().swap(b);
                         });
    space.fence();
  }
  return std::move(parts[0]);
}
}  // namespace detail

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
  std::vector<std::uint64_t> sorted = detail::sorted_joint_keys(space, host.data(), host.extent(0), 20 + wb + ub);
  const std::uint64_t* begin = sorted.data();
  const std::uint64_t* end = begin + sorted.size();
  for (const std::uint64_t* p = begin; p != end;) {
    const std::uint64_t* q = p;
    while (q != end && *q == *p) ++q;
    g.joint_keys.push_back(*p);
    g.joint_counts.push_back(static_cast<std::int64_t>(q - p));
    p = q;
  }
  g.joint_offsets.push_back(static_cast<std::int64_t>(g.joint_keys.size()));
}

}  // namespace wbaudit::sim
