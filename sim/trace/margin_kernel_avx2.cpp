// The recording kernel of a reference step (detail/margin_kernel.hpp) compiled for AVX2; reached only through
// detail::margin_item after the CPU was checked (sim/precision/writeback_blocks.hpp: active_block_isa).
#include <bit>
#include <cstdint>
#include <cstring>

#include "sim/trace/detail/margin_kernel_entry.hpp"
#include "sim/trace/ratio_histogram.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2")
#include "sim/trace/detail/margin_kernel.hpp"

namespace wbaudit::sim::detail {

namespace {
struct IsaAvx2 {};
}  // namespace

void margin_item_avx2(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                      std::uint32_t* counters, std::int64_t* counts) {
  margin_item<IsaAvx2>(a, begin, end, s, counters, counts);
}

}  // namespace wbaudit::sim::detail
#pragma GCC pop_options
#else
namespace wbaudit::sim::detail {
void margin_item_avx2(const MarginKernelArgs& a, std::size_t begin, std::size_t end, MarginScratch& s,
                      std::uint32_t* counters, std::int64_t* counts) {
  margin_item_portable(a, begin, end, s, counters, counts);
}
}  // namespace wbaudit::sim::detail
#endif
