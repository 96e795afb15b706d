#pragma once
// One recorded step's histograms of a reference tensor in a single pass over (w, u): the d histogram of
// ratio_histogram.hpp with its totals (proposals, zero weights, non-finite coordinates) and the margin histogram of
// margin_histogram.hpp. O(n) with a small constant per coordinate (one counter per format, no sort; the kernel is
// detail/margin_kernel.hpp), an integer array reduction over fixed work items, so the counts do not depend on the
// thread count or on the ISA the kernel was built for.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/trace/detail/margin_kernel_entry.hpp"
#include "sim/trace/margin_histogram.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

struct ReferenceHistograms {
  std::vector<std::int64_t> ratio;  // [bins] the d histogram
  std::int64_t nonzero = 0, zero_weight = 0, non_finite = 0;
  std::vector<std::int64_t> margin;  // [layout.bins()]: the counter blocks, then the moment blocks
};

namespace detail {
// A thread's scratch for margin_item, kept between work items and calls: allocating it per item (~260 KB with the
// formats' counters) cost a page fault per 4 KB on every recorded step.
struct MarginThreadScratch {
  std::unique_ptr<MarginScratch> item = std::make_unique<MarginScratch>();
  std::vector<std::uint32_t> counters;
};

inline MarginThreadScratch& margin_thread_scratch() {
  thread_local MarginThreadScratch scratch;
  return scratch;
}

// Kokkos reduction over work items of kMarginItem coordinates into counts (see margin_item).
struct ReferenceHistogramsReduce {
  using value_type = std::int64_t[];
  using size_type = std::size_t;
  size_type value_count;
  MarginKernelArgs args;
  std::size_t item_size;  // at most kMarginItem; any partition gives the same (integer) counts

  void operator()(const std::size_t item, value_type counts) const {
    const std::size_t begin = item * item_size;
    const std::size_t end = args.n - begin < item_size ? args.n : begin + item_size;
    MarginThreadScratch& scratch = margin_thread_scratch();
    scratch.counters.resize(margin_counter_words(args));
    margin_item(args, begin, end, *scratch.item, scratch.counters.data(), counts);
  }
  void init(value_type counts) const {
    for (size_type k = 0; k < value_count; ++k) {
      counts[k] = 0;
    }
  }
  void join(volatile value_type dst, const volatile value_type src) const {
    for (size_type k = 0; k < value_count; ++k) {
      dst[k] = dst[k] + src[k];
    }
  }
};
}  // namespace detail

// One tensor's histograms at one recorded step; `formats` from margin_formats(margin, the tensor's init absmax). w and
// u are host arrays of n values.
template <class ExecSpace>
ReferenceHistograms reference_histograms(const ExecSpace& space, const RatioHistogramLayout& ratio,
                                         const MarginLayout& margin, std::span<const MarginFormat> formats,
                                         const float* w, const float* u, std::size_t n) {
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible,
                "reference_histograms: the kernel runs on host memory");
  if (formats.size() != margin.formats.size()) {
    throw std::invalid_argument("reference_histograms: " + std::to_string(formats.size()) +
                                " margin formats for a layout of " + std::to_string(margin.formats.size()));
  }
  if (!margin.moments && !margin.formats.empty()) {
    throw std::invalid_argument(
        "reference_histograms: the kernel records schema 4's moments; a layout without them "
        "(a schema-3 trace's) cannot be recorded");
  }
  int nfloating = 0;
  while (nfloating < static_cast<int>(formats.size()) && !formats[nfloating].integer) {
    ++nfloating;
  }
  const std::size_t nratio = static_cast<std::size_t>(ratio.bins) + 3;
  const std::size_t total = nratio + margin.bins();
  std::vector<std::int64_t> counts(total, 0);
  Kokkos::View<std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> result(counts.data(), total);
  const detail::MarginKernelArgs args{w,
                                      u,
                                      n,
                                      margin.rows,
                                      formats.data(),
                                      nfloating,
                                      static_cast<int>(formats.size()),
                                      ratio.d_min,
                                      ratio.bin_width,
                                      ratio.bins};
  // One item per thread up to kMarginItem coordinates each (an item's fixed cost, clearing and folding its copies of
  // every format's counters, is paid once per thread on a small tensor), at least 8192 coordinates per item; a tensor
  // above threads x kMarginItem is cut into items of kMarginItem.
  const std::size_t threads = static_cast<std::size_t>(space.concurrency());
  const std::size_t per_thread = (n + threads - 1) / threads;
  const std::size_t item_size =
      per_thread < 8192 ? 8192 : (per_thread > detail::kMarginItem ? detail::kMarginItem : per_thread);
  const std::size_t items = (n + item_size - 1) / item_size;
  Kokkos::parallel_reduce("wbaudit::sim::trace::reference_histograms", Kokkos::RangePolicy<ExecSpace>(space, 0, items),
                          detail::ReferenceHistogramsReduce{total, args, item_size}, result);
  space.fence();
  ReferenceHistograms out;
  out.ratio.assign(counts.begin(), counts.begin() + ratio.bins);
  out.nonzero = counts[static_cast<std::size_t>(ratio.bins)];
  out.zero_weight = counts[static_cast<std::size_t>(ratio.bins) + 1];
  out.non_finite = counts[static_cast<std::size_t>(ratio.bins) + 2];
  out.margin.assign(counts.begin() + static_cast<std::ptrdiff_t>(nratio), counts.end());
  return out;
}

}  // namespace wbaudit::sim
