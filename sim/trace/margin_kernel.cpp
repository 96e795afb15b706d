// The recording kernel of a reference step (detail/margin_kernel.hpp), portable build (the baseline x86-64 SSE2 or
// whatever the target is), and the choice of implementation.
#include <bit>
#include <cstdint>
#include <cstring>

#include "sim/precision/writeback_blocks.hpp"
#include "sim/trace/detail/margin_kernel_entry.hpp"
#include "sim/trace/ratio_histogram.hpp"
// (no target change here)
#include "sim/trace/detail/margin_kernel.hpp"

namespace wbaudit::sim::detail {

namespace {
struct IsaPortable {};
}  // namespace

void margin_item_portable(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                          std::uint32_t* counters, std::int64_t* counts) {
  margin_item<IsaPortable>(a, begin, end, s, counters, counts);
}

void margin_item(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                 std::uint32_t* counters, std::int64_t* counts) {
  switch (active_block_isa()) {
    case BlockIsa::avx512:
      margin_item_avx512(a, begin, end, s, counters, counts);
      return;
    case BlockIsa::avx2:
      margin_item_avx2(a, begin, end, s, counters, counts);
      return;
    default:
      margin_item_portable(a, begin, end, s, counters, counts);
  }
}

}  // namespace wbaudit::sim::detail
