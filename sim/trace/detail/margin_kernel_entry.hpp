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

// The per-work-item state: scratch arrays of one chunk and the 64-bit counters of every format (4 copies each; the
// d histogram's 32-bit counters are margin_item's `counters`). Counters hold at most kMarginItem coordinates, so they
// never overflow.
struct MarginScratch {
  alignas(64) std::int32_t aw[kMarginChunk];    // |w| bits (0 where the coordinate is not a finite proposal)
  alignas(64) std::int32_t away[kMarginChunk];  // 1: u points away from zero or w == 0
  alignas(64) std::int32_t eu[kMarginChunk];    // |u| = (1 + fu 2^-23) 2^eu
  alignas(64) std::int32_t fu[kMarginChunk];
  alignas(64) std::int32_t valid[kMarginChunk];  // 1: a finite proposal u != 0
  alignas(64) std::int32_t idx[kMarginChunk];
  alignas(64) std::uint64_t inc[kMarginChunk];  // what a coordinate adds to its counter (margin_counter_increment)
  // The formats' counters (margin_format_words(a), sized by margin_item): per format 4 copies of block + 1 (the last
  // the trash) 64-bit words, each [count : 15 | sum p : 21 | sum p^2 : 28] (margin_counter_increment) over the at
  // most 2^14 + 3 coordinates a copy gets from a work item (p < 2^7: sum p < 2^21, sum p^2 < 2^28).
  std::vector<std::uint64_t> words;
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

static_assert(kMarginItem <= (std::size_t{1} << 16), "a copy of a counter holds at most 2^14 + 3 coordinates");

// 32-bit words of the d histogram's counters (margin_item's `counters`).
inline std::size_t margin_counter_words(const MarginKernelArgs& a) {
  return 4 * static_cast<std::size_t>(a.ratio_bins + 1);
}

// 64-bit words of MarginScratch::words.
inline std::size_t margin_format_words(const MarginKernelArgs& a) {
  return static_cast<std::size_t>(a.nformats) * 4 * static_cast<std::size_t>(a.rows.block() + 1);
}

// The increment of a counter by one coordinate at position p (0 <= p < 2^7) in its sub-bin: the count in bits
// 0..14, p in bits 15..35, p^2 in bits 36..63.
inline std::uint64_t margin_counter_increment(std::uint32_t p) {
  return (static_cast<std::uint64_t>(p * p) << 36) + (static_cast<std::uint64_t>(p) << 15) + 1;  // p^2 < 2^14
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
