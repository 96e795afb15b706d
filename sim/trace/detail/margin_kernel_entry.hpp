#pragma once
// The entry points of the recording kernel of detail/margin_kernel.hpp: its arguments and scratch, and one
// implementation per ISA (margin_kernel.cpp: portable SSE2; margin_kernel_avx2.cpp; margin_kernel_avx512.cpp),
// chosen like sim/precision's write-back loops (best_block_isa / force_block_isa in writeback_blocks.hpp).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/trace/margin_histogram.hpp"

namespace wbaudit::sim::detail {

inline constexpr int kMarginChunk = 2048;

// The per-work-item state: scratch arrays of one chunk and the 32-bit counters of every format (4 copies each) and
// of the d histogram. Counters hold at most kMarginItem coordinates, so they never overflow.
struct MarginScratch {
  alignas(64) std::int32_t aw[kMarginChunk];    // |w| bits (0 where the coordinate is not a finite proposal)
  alignas(64) std::int32_t away[kMarginChunk];  // 1: u points away from zero or w == 0
  alignas(64) std::int32_t eu[kMarginChunk];    // |u| = (1 + fu 2^-23) 2^eu
  alignas(64) std::int32_t fu[kMarginChunk];
  alignas(64) std::int32_t valid[kMarginChunk];  // 1: a finite proposal u != 0
  alignas(64) std::int32_t idx[kMarginChunk];
  alignas(64) std::int32_t mom[kMarginChunk];  // the sub-bin of the moments (fine row x kMarginSubBins + sub-bin)
  alignas(64) std::int32_t pos[kMarginChunk];  // the position p in it (kMarginMomentBits bits)
  // The moments' 64-bit counters (margin_moment_words(a)): per format 4 copies of one word per fine sub-bin (+ trash),
  // sum p in the low 24 bits and sum p^2 above (at most 2^16 coordinates: < 2^24 and < 2^32). Sized by margin_item.
  std::vector<std::uint64_t> moments;
};

struct MarginKernelArgs {
  const float* w;
  const float* u;
  std::size_t n;
  MarginRows rows;
  const MarginFormat* formats;
  int nfloating, nformats;
  // d histogram: 1/8-binade bins from the integer d_min (ratio_bins_are_eighths), else ratio_bin_by_log2
  double d_min, bin_width;
  int ratio_bins;
};

inline constexpr std::size_t kMarginItem = std::size_t{1} << 16;  // coordinates per work item

inline std::size_t margin_counter_words(const MarginKernelArgs& a) {
  return static_cast<std::size_t>(a.nformats) * 4 * static_cast<std::size_t>(a.rows.block() + 1) +
         4 * static_cast<std::size_t>(a.ratio_bins + 1);
}

// Words of MarginScratch::moments.
inline std::size_t margin_moment_words(const MarginKernelArgs& a) {
  return static_cast<std::size_t>(a.nformats) * 4 * static_cast<std::size_t>(a.rows.moments() / 2 + 1);
}

// The counts of coordinates [begin, end) (end - begin <= kMarginItem) added to `counts` ([0, ratio_bins) the d
// histogram, then proposals, zero weights and non-finite coordinates, then the margin histogram: every format's
// counter block, then every format's moment block, MarginLayout::bins() entries) by the implementation
// of the active ISA; `counters`: margin_counter_words(a) words of scratch.
void margin_item(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                 std::uint32_t* counters, std::int64_t* counts);
void margin_item_portable(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                          std::uint32_t* counters, std::int64_t* counts);
void margin_item_avx2(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                      std::uint32_t* counters, std::int64_t* counts);
void margin_item_avx512(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                        std::uint32_t* counters, std::int64_t* counts);

}  // namespace wbaudit::sim::detail
