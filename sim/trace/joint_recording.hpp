#pragma once
// Recording of the joint (|w|, |u|) histogram of a reference trace at one recorded step (joint_histogram.hpp): the
// key of every coordinate with u != 0 (record_joint_keys, one kernel per tensor while its weights are those of the
// step), then, once per step, for every tensor the distinct keys in increasing order with their counts, appended to
// GroupTrace::joint_keys / joint_counts, closing the step with joint_offsets (finish_joint_histograms). The pairs are
// the run-length encoding of the sorted keys, which is unique, so the trace does not depend on the thread count.
// Inputs must be finite (the engine rejects non-finite values first).
//
// Tensors below kJointParallelSort coordinates (every tensor of a model of a few million parameters) are sorted one
// per thread, the tensors in parallel: an LSD radix sort through one scratch array, in the tensor's L2-sized key
// array. A larger tensor is sorted by all threads: a most-significant-digit bucket pass (the top 11 key bits: the |w|
// exponent and its first mantissa bits) over fixed input slices, stable, then each bucket sorted on its remaining
// bits and run-length encoded in place, the buckets in parallel. Scratch arrays persist between steps (JointScratch).
#include <unistd.h>
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "sim/trace/joint_histogram.hpp"
#include "sim/trace/ratio_histogram.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

inline constexpr std::uint64_t kJointNoProposal = ~std::uint64_t{0};  // u == 0: not counted

inline constexpr std::size_t kJointParallelSort = std::size_t{1} << 20;

// Buffers reused from one recorded step to the next (they grow once).
struct JointScratch {
  std::vector<std::vector<std::uint64_t>> per_tensor;  // the one-thread sort's scratch, per tensor
  std::vector<std::uint64_t> sorted;                   // the keys bucketed, then each bucket's distinct keys
  std::vector<std::uint64_t> temp;                     // radix-sort ping-pong, then each bucket's counts
  std::vector<std::size_t> slice_counts;
  std::vector<std::size_t> bucket_begin, bucket_distinct, out_begin;
};

namespace detail {
// madvise on the whole pages inside [p, p + bytes), when there are at least `min_bytes` of them (Linux; a no-op
// elsewhere, and where the kernel refuses).
inline void advise_pages(const void* p, std::size_t bytes, int advice, std::size_t min_bytes = 1) {
#if defined(__linux__)
  constexpr std::uintptr_t kPage = 4096;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kPage - 1);
  if (end > begin && end - begin >= min_bytes) madvise(reinterpret_cast<void*>(begin), end - begin, advice);
#else
  (void)p;
  (void)bytes;
  (void)advice;
  (void)min_bytes;
#endif
}

// Where `v` has room for `extra` more elements, asks the kernel to back that room with pages now, in one call
// (Linux >= 5.14 MADV_POPULATE_WRITE = 23, absent from older headers): on a VM, faulting a trace's fresh pages one at
// a time as pairs are appended costs a trap each.
template <class Vector>
void populate_tail(Vector& v, std::size_t extra) {
  using T = typename Vector::value_type;
  if (extra == 0 || v.capacity() < v.size() + extra) return;
  advise_pages(v.data() + v.size(), extra * sizeof(T), 23);
}

inline constexpr int kJointTopBits = 11;  // the bucket digit
inline constexpr int kJointSlices = 16;   // fixed input slices of the bucket pass

// The one-thread sort: the keys other than kJointNoProposal of keys[0, n) copied into `temp` (resized to fit) while
// the digit histograms of every pass are counted, then sorted by an LSD radix sort in digits of at most 12 bits
// (3 passes for the default 35-bit keys) ping-ponging between `temp` and `keys` (which it overwrites), then
// run-length encoded onto out_keys / out_counts. Keys are below 2^bits (bits = 20 + w_bits + u_bits).
template <class Keys, class Counts>
void append_joint_runs_serial(std::uint64_t* keys, std::size_t n, int bits, std::vector<std::uint64_t>& temp,
                              Keys& out_keys, Counts& out_counts) {
  if (temp.size() < n) temp.resize(n);
  const int passes = std::max(1, (bits + 11) / 12);
  const int digit = (bits + passes - 1) / passes;
  const std::size_t buckets = std::size_t{1} << digit, mask = buckets - 1;
  std::vector<std::size_t> count(static_cast<std::size_t>(passes) * buckets, 0);
  std::uint64_t* from = temp.data();
  std::uint64_t* to = keys;
  std::size_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t k = keys[i];
    if (k == kJointNoProposal) continue;
    from[m++] = k;
    for (int p = 0; p < passes; ++p) ++count[static_cast<std::size_t>(p) * buckets + ((k >> (p * digit)) & mask)];
  }
  populate_tail(out_keys, m);
  populate_tail(out_counts, m);
  for (int p = 0; p < passes; ++p) {
    std::size_t* c = count.data() + static_cast<std::size_t>(p) * buckets;
    std::size_t sum = 0;
    for (std::size_t b = 0; b < buckets; ++b) {
      const std::size_t here = c[b];
      c[b] = sum;
      sum += here;
    }
    const int shift = p * digit;
    for (std::size_t i = 0; i < m; ++i) to[c[(from[i] >> shift) & mask]++] = from[i];
    std::swap(from, to);
  }
  for (std::size_t i = 0; i < m;) {
    std::size_t j = i + 1;
    while (j < m && from[j] == from[i]) ++j;
    out_keys.push_back(from[i]);
    out_counts.push_back(static_cast<std::int64_t>(j - i));
    i = j;
  }
}

// Sorts [a, a + n) on key bits [0, bits) (the bits above are equal within a bucket) by an LSD radix sort in 12-bit
// digits through `t` (n elements); small buckets by std::sort. The result is in `a`.
inline void sort_bucket(std::uint64_t* a, std::uint64_t* t, std::size_t n, int bits) {
  if (n < 512 || bits <= 0 || n > std::size_t{0xffffffffu}) {
    std::sort(a, a + n);
    return;
  }
  constexpr int kDigit = 12;
  constexpr std::size_t kBuckets = std::size_t{1} << kDigit;
  std::array<std::uint32_t, kBuckets> count;
  std::uint64_t* from = a;
  std::uint64_t* to = t;
  for (int shift = 0; shift < bits; shift += kDigit) {
    count.fill(0);
    for (std::size_t i = 0; i < n; ++i) ++count[(from[i] >> shift) & (kBuckets - 1)];
    std::uint32_t sum = 0;
    for (auto& c : count) {
      const std::uint32_t here = c;
      c = sum;
      sum += here;
    }
    for (std::size_t i = 0; i < n; ++i) to[count[(from[i] >> shift) & (kBuckets - 1)]++] = from[i];
    std::swap(from, to);
  }
  if (from != a) std::copy(from, from + n, a);
}

// The same result by all threads of `space` (the bucket pass, then the buckets in parallel), for a large tensor;
// keys[0, n) is left unchanged.
template <class ExecSpace, class Keys, class Counts>
void append_joint_runs(const ExecSpace& space, const std::uint64_t* keys, std::size_t n, int bits, JointScratch& s,
                       Keys& out_keys, Counts& out_counts) {
  const int top = std::min(bits, kJointTopBits);
  const int low = bits - top;
  const std::size_t buckets = std::size_t{1} << top;
  constexpr int kSlices = kJointSlices;
  if (s.sorted.size() < n) {
    s.sorted.resize(n);
    s.temp.resize(n);
  }
  s.slice_counts.assign(static_cast<std::size_t>(kSlices) * buckets, 0);
  s.bucket_begin.resize(buckets + 1);
  s.bucket_distinct.resize(buckets);
  s.out_begin.resize(buckets + 1);
  std::size_t* counts = s.slice_counts.data();
  const auto slice_lo = [n](int c) { return n * static_cast<std::size_t>(c) / kSlices; };
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::bucket_counts",
                       Kokkos::RangePolicy<ExecSpace>(space, 0, kSlices), [&](const int c) {
                         std::size_t* row = counts + static_cast<std::size_t>(c) * buckets;
                         for (std::size_t i = slice_lo(c), hi = slice_lo(c + 1); i < hi; ++i)
                           if (keys[i] != kJointNoProposal) ++row[keys[i] >> low];
                       });
  space.fence();
  // Stable bucket offsets: bucket-major, slice-minor (slice_counts becomes each slice's write position).
  std::size_t sum = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    s.bucket_begin[b] = sum;
    for (int c = 0; c < kSlices; ++c) {
      std::size_t& here = counts[static_cast<std::size_t>(c) * buckets + b];
      const std::size_t k = here;
      here = sum;
      sum += k;
    }
  }
  s.bucket_begin[buckets] = sum;
  std::uint64_t* sorted = s.sorted.data();
  std::uint64_t* temp = s.temp.data();
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::bucket_scatter",
                       Kokkos::RangePolicy<ExecSpace>(space, 0, kSlices), [&](const int c) {
                         std::size_t* row = counts + static_cast<std::size_t>(c) * buckets;
                         for (std::size_t i = slice_lo(c), hi = slice_lo(c + 1); i < hi; ++i)
                           if (keys[i] != kJointNoProposal) sorted[row[keys[i] >> low]++] = keys[i];
                       });
  space.fence();
  // Each bucket sorted on its low bits and run-length encoded in place: distinct keys in `sorted`, counts in `temp`.
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::bucket_sort",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, buckets),
                       [&](const std::size_t b) {
                         const std::size_t lo = s.bucket_begin[b], m = s.bucket_begin[b + 1] - lo;
                         if (m == 0) {
                           s.bucket_distinct[b] = 0;
                           return;
                         }
                         std::uint64_t* a = sorted + lo;
                         std::uint64_t* t = temp + lo;
                         sort_bucket(a, t, m, low);
                         std::size_t d = 0;
                         for (std::size_t i = 0; i < m;) {
                           std::size_t j = i + 1;
                           while (j < m && a[j] == a[i]) ++j;
                           a[d] = a[i];
                           t[d] = j - i;
                           ++d;
                           i = j;
                         }
                         s.bucket_distinct[b] = d;
                       });
  space.fence();
  const std::size_t base = out_keys.size();
  std::size_t total = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    s.out_begin[b] = total;
    total += s.bucket_distinct[b];
  }
  out_keys.resize(base + total);
  out_counts.resize(base + total);
  std::uint64_t* ok = out_keys.data() + base;
  std::int64_t* oc = out_counts.data() + base;
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::bucket_copy",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, buckets),
                       [&](const std::size_t b) {
                         const std::size_t lo = s.bucket_begin[b], d = s.bucket_distinct[b], to = s.out_begin[b];
                         for (std::size_t i = 0; i < d; ++i) {
                           ok[to + i] = sorted[lo + i];
                           oc[to + i] = static_cast<std::int64_t>(temp[lo + i]);
                         }
                       });
  space.fence();
}
}  // namespace detail

// Room for every recorded step's pairs (at most one per coordinate with u != 0, ~0.9 per coordinate on a 1M-parameter
// decoder) when that bound fits in a quarter of the machine's memory, so that recorded steps never grow the vectors
// by copying them into fresh pages; the reservation is address space, touched only as pairs are written (with a
// transparent-huge-page hint). Above that bound the vectors grow as usual.
inline void reserve_joint_pairs(std::vector<GroupTrace>& groups, std::size_t recorded) {
  double bytes = 0;
  for (const GroupTrace& g : groups) {
    bytes += static_cast<double>(g.size) * static_cast<double>(recorded) * 16.0;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0 || bytes > static_cast<double>(pages) * static_cast<double>(page) / 4.0) {
    return;
  }
  for (GroupTrace& g : groups) {
    const std::size_t want = static_cast<std::size_t>(g.size) * recorded;
    g.joint_keys.reserve(want);
    g.joint_counts.reserve(want);
  }
}

// The key of every coordinate of (w, u) into `keys` (kJointNoProposal where u == 0).
template <class ExecSpace>
void record_joint_keys(const ExecSpace& space, const JointHistogramLayout& layout,
                       Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                       Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                       Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> keys) {
  const int wb = layout.w_bits, ub = layout.u_bits;
  Kokkos::parallel_for(
      "wbaudit::sim::trace::record_joint_histogram::keys", Kokkos::RangePolicy<ExecSpace>(space, 0, w.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) {
        const float ui = u(i);
        keys(i) = ui == 0.0f ? kJointNoProposal : joint_key(wb, ub, w(i), ui);
      });
}

// Writes the joint key of coordinate i (kJointNoProposal where u == 0): record_joint_keys's rule, run inside the d
// histogram's pass by record_ratio_histogram_and_joint_keys.
template <class MemorySpace>
struct JointKeyWriter {
  Kokkos::View<std::uint64_t*, MemorySpace> keys;
  int w_bits, u_bits;
  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t i, const float w, const float u) const {
    keys(i) = u == 0.0f ? kJointNoProposal : joint_key(w_bits, u_bits, w, u);
  }
};

// One tensor's d histogram (ratio_histogram_counts: the bins, then the proposals, zero weights and non-finite
// coordinates) and, in the same pass over (w, u), its joint keys into `keys` (record_joint_keys).
template <class ExecSpace>
std::vector<std::int64_t> record_ratio_histogram_and_joint_keys(
    const ExecSpace& space, const RatioHistogramLayout& ratio, const JointHistogramLayout& joint,
    Kokkos::View<const float*, typename ExecSpace::memory_space> w,
    Kokkos::View<const float*, typename ExecSpace::memory_space> u,
    Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space> keys) {
  return ratio_histogram_counts(space, ratio, w, u,
                                JointKeyWriter<typename ExecSpace::memory_space>{keys, joint.w_bits, joint.u_bits});
}

// One tensor's pairs from its keys (overwritten): by all threads of `space` from kJointParallelSort coordinates up,
// else by this thread.
template <class ExecSpace, class Keys, class Counts>
void append_joint_runs_of(const ExecSpace& space, std::uint64_t* keys, std::size_t n, int bits, JointScratch& scratch,
                          Keys& out_keys, Counts& out_counts) {
  if (n >= kJointParallelSort && space.concurrency() > 1) {
    detail::append_joint_runs(space, keys, n, bits, scratch, out_keys, out_counts);
  } else {
    scratch.per_tensor.resize(std::max<std::size_t>(scratch.per_tensor.size(), 1));
    detail::append_joint_runs_serial(keys, n, bits, scratch.per_tensor[0], out_keys, out_counts);
  }
}

// One recorded step's pairs for every tensor from the keys record_joint_keys wrote (groups[t] receives keys[t]'s
// pairs); the keys are overwritten.
template <class ExecSpace>
void finish_joint_histograms(const ExecSpace& space, const JointHistogramLayout& layout,
                             std::vector<Kokkos::View<std::uint64_t*, typename ExecSpace::memory_space>>& keys,
                             const std::vector<GroupTrace*>& groups, JointScratch& scratch) {
  static_assert(std::is_same_v<typename ExecSpace::memory_space, Kokkos::HostSpace>,
                "finish_joint_histograms: the keys must be in host memory");
  space.fence();
  const int bits = 20 + layout.w_bits + layout.u_bits;
  const std::size_t n = groups.size();
  scratch.per_tensor.resize(n);
  std::vector<std::size_t> small;
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t size = keys[t].extent(0);
    if (size >= kJointParallelSort && space.concurrency() > 1) {
      detail::append_joint_runs(space, keys[t].data(), size, bits, scratch, groups[t]->joint_keys,
                                groups[t]->joint_counts);
    } else {
      small.push_back(t);
    }
  }
  Kokkos::parallel_for("wbaudit::sim::trace::record_joint_histogram::per_tensor",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, small.size()),
                       [&](const std::size_t k) {
                         const std::size_t t = small[k];
                         detail::append_joint_runs_serial(keys[t].data(), keys[t].extent(0), bits,
                                                          scratch.per_tensor[t], groups[t]->joint_keys,
                                                          groups[t]->joint_counts);
                       });
  space.fence();
  for (GroupTrace* g : groups) g->joint_offsets.push_back(static_cast<std::int64_t>(g->joint_keys.size()));
}

}  // namespace wbaudit::sim
