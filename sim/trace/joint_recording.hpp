#pragma once
// Recording of the joint (|w|, |u|) histogram of a reference trace at one recorded step (joint_histogram.hpp):
// the key of every coordinate with u != 0 (one kernel), then on the host the keys sorted and run-length encoded (in
// parallel by buckets of their top bits when there are several threads) into GroupTrace::joint_keys / joint_counts,
// closing the step with joint_offsets. Sorting makes the pairs (and
// so the trace) independent of the thread count. Inputs must be finite (the engine rejects non-finite values first).
#include <Kokkos_Core.hpp>
#include <algorithm>
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

// Radix sort of a[0, n) in place on bits [0, bits) (LSD, 11-bit digits), with tmp of at least n entries.
inline void radix_sort_low_bits(std::uint64_t* a, std::uint64_t* tmp, std::size_t n, int bits) {
  constexpr int kDigit = 11;
  constexpr std::size_t kBuckets = std::size_t{1} << kDigit;
  std::size_t count[kBuckets];
  std::uint64_t* from = a;
  std::uint64_t* to = tmp;
  for (int shift = 0; shift < bits; shift += kDigit) {
    std::fill(count, count + kBuckets, 0);
    for (std::size_t i = 0; i < n; ++i) ++count[(from[i] >> shift) & (kBuckets - 1)];
    std::size_t sum = 0;
    for (auto& c : count) {
      const std::size_t here = c;
      c = sum;
      sum += here;
    }
    for (std::size_t i = 0; i < n; ++i) to[count[(from[i] >> shift) & (kBuckets - 1)]++] = from[i];
    std::swap(from, to);
  }
  if (from != a) std::copy(from, from + n, a);
}

// The run-length encoding of the sorted keys other than kJointNoProposal, appended to out_keys / out_counts, in
// parallel on `space`: the keys are partitioned by their top 11 bits (bucket-major, fixed slices, so positions do
// not depend on the thread count), each bucket radix-sorted on its remaining bits and run-length encoded on its own,
// and the runs written at offsets from a prefix sum. The result is the unique sorted encoding, the same as the
// serial path's for any thread count.
template <class ExecSpace>
void joint_key_runs(const ExecSpace& space, const std::uint64_t* keys, std::size_t n, int bits,
                    std::vector<std::uint64_t>& out_keys, std::vector<std::int64_t>& out_counts) {
  constexpr int kChunks = 16, kDigit = 11;
  const int top = bits > kDigit ? bits - kDigit : 0;
  const std::size_t B = std::size_t{1} << (bits > kDigit ? kDigit : bits);
  using Policy = Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
  auto chunk_lo = [n](int c) { return n * static_cast<std::size_t>(c) / kChunks; };
  std::vector<std::size_t> count(static_cast<std::size_t>(kChunks) * B, 0);
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::bucket_counts", Policy(space, 0, kChunks),
                       [&](const int c) {
                         std::size_t* mine = count.data() + static_cast<std::size_t>(c) * B;
                         for (std::size_t i = chunk_lo(c); i < chunk_lo(c + 1); ++i)
                           if (keys[i] != kJointNoProposal) ++mine[keys[i] >> top];
                       });
  space.fence();
  std::vector<std::size_t> start(count.size()), bucket(B + 1);
  std::size_t total = 0;
  for (std::size_t b = 0; b < B; ++b) {
    bucket[b] = total;
    for (int c = 0; c < kChunks; ++c) {
      start[static_cast<std::size_t>(c) * B + b] = total;
      total += count[static_cast<std::size_t>(c) * B + b];
    }
  }
  bucket[B] = total;
  std::vector<std::uint64_t> a(total), tmp(total);
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::scatter", Policy(space, 0, kChunks),
                       [&](const int c) {
                         std::size_t* pos = start.data() + static_cast<std::size_t>(c) * B;
                         for (std::size_t i = chunk_lo(c); i < chunk_lo(c + 1); ++i)
                           if (keys[i] != kJointNoProposal) a[pos[keys[i] >> top]++] = keys[i];
                       });
  space.fence();
  std::vector<std::size_t> runs(B + 1, 0);
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::sort_buckets",
                       Policy(space, 0, static_cast<std::int64_t>(B)), [&](const std::int64_t b) {
                         const std::size_t lo = bucket[static_cast<std::size_t>(b)],
                                           hi = bucket[static_cast<std::size_t>(b) + 1];
                         if (hi - lo > 1) radix_sort_low_bits(a.data() + lo, tmp.data() + lo, hi - lo, top);
                         std::size_t r = 0;
                         for (std::size_t i = lo; i < hi; ++i) r += i == lo || a[i] != a[i - 1];
                         runs[static_cast<std::size_t>(b)] = r;
                       });
  space.fence();
  std::size_t sum = 0;
  for (auto& r : runs) {
    const std::size_t here = r;
    r = sum;
    sum += here;
  }
  const std::size_t base = out_keys.size();
  out_keys.resize(base + sum);
  out_counts.resize(base + sum);
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::runs",
                       Policy(space, 0, static_cast<std::int64_t>(B)), [&](const std::int64_t b) {
                         const std::size_t lo = bucket[static_cast<std::size_t>(b)],
                                           hi = bucket[static_cast<std::size_t>(b) + 1];
                         std::size_t at = base + runs[static_cast<std::size_t>(b)];
                         for (std::size_t i = lo; i < hi;) {
                           std::size_t j = i;
                           while (j < hi && a[j] == a[i]) ++j;
                           out_keys[at] = a[i];
                           out_counts[at] = static_cast<std::int64_t>(j - i);
                           ++at;
                           i = j;
                         }
                       });
  space.fence();
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
  if (space.concurrency() > 1) {
    detail::joint_key_runs(space, host.data(), host.extent(0), 20 + wb + ub, g.joint_keys, g.joint_counts);
  } else {
    const std::vector<std::uint64_t> sorted = detail::sorted_joint_keys(host.data(), host.extent(0), 20 + wb + ub);
    for (std::size_t i = 0; i < sorted.size();) {
      std::size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      g.joint_keys.push_back(sorted[i]);
      g.joint_counts.push_back(static_cast<std::int64_t>(j - i));
      i = j;
    }
  }
  g.joint_offsets.push_back(static_cast<std::int64_t>(g.joint_keys.size()));
}

}  // namespace wbaudit::sim
