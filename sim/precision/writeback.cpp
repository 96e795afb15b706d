// Write-back kernels and their explicit instantiations for the host execution spaces (Serial, OpenMP).
#include "sim/precision/writeback.hpp"

#include "sim/precision/writeback_blocks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace wbaudit::sim {
namespace {

template <class MemorySpace>
using FloatView = Kokkos::View<float*, MemorySpace>;
template <class MemorySpace>
using ConstFloatView = Kokkos::View<const float*, MemorySpace>;

using CountsReducerBase = detail::WritebackCountsReducer;  // writeback.hpp

KOKKOS_INLINE_FUNCTION bool finite(float v) {
  return std::isfinite(v);
}

// Adds the events of one coordinate decided by the exact scalar path (the block loops' flagged coordinates).
KOKKOS_INLINE_FUNCTION void add_outcome(detail::BlockCounts& c, float w, float u, const WritebackOutcome& o) {
  const bool changed = o.value != w;
  c.nonzero += u != 0;
  c.erased += u != 0 && !changed;
  c.applied += changed;
  c.saturated += o.saturated;
  c.random += o.random;
  c.truncated += o.truncated;
}

// ---- The write-back kernel over blocks ----
// Each block runs one of the vectorized loops of writeback_blocks.cpp, which decide almost every coordinate exactly
// and flag the rest; flagged coordinates are redone here with the exact scalar path (writeback_value, the same
// random words), or, when w or u is NaN/inf, left unchanged and counted as non-finite.
using Lanes = detail::BlockLanes;

template <int Mode>  // Mode: 0 nearest, 1 stochastic, 2 deadzone-sr
std::int64_t writeback_block_mode(const detail::BlockWriteback& wb, std::uint64_t first, float* wp, const float* up,
                                  std::int64_t len, detail::BlockCounts& bc) {
  constexpr std::int64_t kBlock = detail::kWritebackBlock;
  unsigned char flags[kBlock];
  const detail::BlockParams& bp = wb.bp;
  std::int64_t flagged;
  if constexpr (Mode == 0) {
    flagged = wb.lanes == Lanes::fp32_float     ? detail::nearest_block_float(bp, wp, up, flags, len, bc)
              : wb.lanes == Lanes::fp32_integer ? detail::nearest_block_integer(bp, wp, up, flags, len, bc)
                                                : detail::nearest_block_fp64(bp, wb.p.integer, wp, up, flags, len, bc);
  } else {
    alignas(64) std::uint32_t scratch[detail::kPhiloxScratch];
    const std::uint32_t* words = detail::sr_first_words_in(wb.key, wb.policy, first, len, scratch);
    flagged = detail::stochastic_block(bp, wb.p.integer, Mode, wp, up, words, flags, len, bc);
  }
  std::int64_t nonfinite = 0;
  if (flagged > 0) {
    for (std::int64_t k = 0; k < len; ++k) {
      if (!flags[k]) {
        continue;
      }
      const float wi = wp[k], ui = up[k];
      if (!finite(wi) || !finite(ui)) {
        nonfinite += 1;  // left unchanged
        continue;
      }
      const WritebackOutcome o =
          writeback_value(wb.p, wb.policy, wb.key, first + static_cast<std::uint64_t>(k), wi, ui);
      wp[k] = o.value;
      add_outcome(bc, wi, ui, o);
    }
  }
  return nonfinite;
}

template <class MemorySpace, int Mode>  // Mode: 0 nearest, 1 stochastic, 2 deadzone-sr
struct BlockKernel : CountsReducerBase {
  static constexpr std::int64_t kBlock = detail::kWritebackBlock;
  FloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  detail::BlockWriteback wb;
  std::uint64_t first_coordinate = 0;
  std::int64_t n = 0;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, value_type& c) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = (begin + kBlock < n ? begin + kBlock : n) - begin;
    detail::BlockCounts bc;
    // written in place; flagged coordinates keep their value
    c.nonfinite += writeback_block_mode<Mode>(wb, first_coordinate + static_cast<std::uint64_t>(begin),
                                              w.data() + begin, u.data() + begin, len, bc);
    detail::add_block_counts(c, bc);
  }
};

Lanes lanes_for(const FormatParams& p) {
  return detail::block_lanes(p);
}

// Nearest write-back of a block in place with the loop for `lanes` (used by project_erasure).
inline std::int64_t nearest_block(Lanes lanes, const FormatParams& p, const detail::BlockParams& bp, float* w,
                                  const float* u, unsigned char* flags, std::int64_t len, detail::BlockCounts& counts) {
  switch (lanes) {
    case Lanes::fp32_float:
      return detail::nearest_block_float(bp, w, u, flags, len, counts);
    case Lanes::fp32_integer:
      return detail::nearest_block_integer(bp, w, u, flags, len, counts);
    case Lanes::fp64:
      break;
  }
  return detail::nearest_block_fp64(bp, p.integer, w, u, flags, len, counts);
}

// Counts the coordinates where a or b (b may be empty) is NaN/inf, over blocks of kBlock coordinates with a loop the
// compiler vectorizes (integer test of the exponent field: all ones <=> not finite).
template <class MemorySpace>
struct NonFiniteCount {
  static constexpr std::int64_t kBlock = 1024;
  ConstFloatView<MemorySpace> a;
  ConstFloatView<MemorySpace> b;  // may be empty
  std::int64_t n;
  static std::uint32_t count(const float* __restrict x, std::int64_t len) {
    std::uint32_t bad = 0;
    for (std::int64_t k = 0; k < len; ++k) {
      bad += ((std::bit_cast<std::uint32_t>(x[k]) & 0x7f800000u) + 0x00800000u) >> 31;
    }
    return bad;
  }
  static std::uint32_t count2(const float* __restrict x, const float* __restrict y, std::int64_t len) {
    std::uint32_t bad = 0;
    for (std::int64_t k = 0; k < len; ++k) {
      const std::uint32_t bx = ((std::bit_cast<std::uint32_t>(x[k]) & 0x7f800000u) + 0x00800000u) >> 31;
      const std::uint32_t by = ((std::bit_cast<std::uint32_t>(y[k]) & 0x7f800000u) + 0x00800000u) >> 31;
      bad += bx | by;
    }
    return bad;
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, std::int64_t& bad) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = (begin + kBlock < n ? begin + kBlock : n) - begin;
    bad += b.extent(0) > 0 ? count2(a.data() + begin, b.data() + begin, len) : count(a.data() + begin, len);
  }
};

template <class MemorySpace>
struct FirstNonFinite {
  ConstFloatView<MemorySpace> a;
  ConstFloatView<MemorySpace> b;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t& first) const {
    if ((!finite(a(i)) || (b.extent(0) > 0 && !finite(b(i)))) && i < first) {
      first = i;
    }
  }
};

std::string float_text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// Throws NonFiniteError naming the context, the count `bad` and the first coordinate where a or b (b may be empty)
// holds NaN/inf.
template <class ExecSpace>
[[noreturn]] void throw_nonfinite(const ExecSpace& space, const std::string& context, const char* name_a,
                                  ConstFloatView<typename ExecSpace::memory_space> a, const char* name_b,
                                  ConstFloatView<typename ExecSpace::memory_space> b, std::int64_t bad) {
  using MS = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(a.extent(0));
  std::int64_t first = n;
  Kokkos::parallel_reduce("wbaudit::sim::precision::require_finite::first", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
                          FirstNonFinite<MS>{a, b}, Kokkos::Min<std::int64_t>(first));
  auto ha =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, Kokkos::subview(a, Kokkos::make_pair(first, first + 1)));
  std::string msg = context + ": " + std::to_string(bad) + " non-finite value(s); first at coordinate " +
                    std::to_string(first) + ": " + name_a + " = " + float_text(ha(0));
  if (b.extent(0) > 0) {
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{},
                                                  Kokkos::subview(b, Kokkos::make_pair(first, first + 1)));
    msg += std::string(", ") + name_b + " = " + float_text(hb(0));
  }
  throw NonFiniteError(msg);
}

// Throws (as throw_nonfinite) when a or b holds NaN/inf; a separate pass over the data, for the kernels that must
// not start on bad input.
template <class ExecSpace>
void require_finite(const ExecSpace& space, const std::string& context, const char* name_a,
                    ConstFloatView<typename ExecSpace::memory_space> a, const char* name_b,
                    ConstFloatView<typename ExecSpace::memory_space> b) {
  using MS = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(a.extent(0));
  std::int64_t bad = 0;
  constexpr std::int64_t block = NonFiniteCount<MS>::kBlock;
  Kokkos::parallel_reduce("wbaudit::sim::precision::require_finite::count",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, (n + block - 1) / block),
                          NonFiniteCount<MS>{a, b, n}, bad);
  if (bad > 0) {
    throw_nonfinite(space, context, name_a, a, name_b, b, bad);
  }
}

void require_same_extent(const char* where, std::size_t a, std::size_t b) {
  if (a != b) {
    throw std::invalid_argument(std::string(where) + ": extents differ (" + std::to_string(a) + " vs " +
                                std::to_string(b) + ")");
  }
}

// The master-copy contrast over blocks (detail::master_block: m = master + u in fp32, w = q_nearest(m), events against
// the old w); flagged coordinates are redone here exactly (bracket_of/nearest_of of m), or, where m or w is NaN/inf
// (master or u is, or the update overflowed fp32), left unchanged (master and w) and counted as non-finite. The first
// such coordinate is kept in first_bad (a minimum, whatever the order of the blocks).
template <class MemorySpace>
struct MasterBlockKernel : CountsReducerBase {
  static constexpr std::int64_t kBlock = detail::kWritebackBlock;
  FloatView<MemorySpace> master;
  FloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  detail::BlockParams bp;
  Lanes lanes = Lanes::fp64;
  std::int64_t n = 0;
  Kokkos::View<std::int64_t, MemorySpace> first_bad;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, value_type& c) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = (begin + kBlock < n ? begin + kBlock : n) - begin;
    float* mp = master.data() + begin;
    float* wp = w.data() + begin;
    const float* up = u.data() + begin;
    unsigned char flags[kBlock];
    detail::BlockCounts bc;
    const std::int64_t flagged = detail::master_block(bp, p.integer, lanes == Lanes::fp64, mp, wp, up, flags, len, bc);
    if (flagged > 0) {
      for (std::int64_t k = 0; k < len; ++k) {
        if (!flags[k]) {
          continue;
        }
        const float ui = up[k], wi = wp[k];
        const float m = mp[k] + ui;  // the fp32 master update
        if (!finite(m) || !finite(wi)) {
          c.nonfinite += 1;  // left unchanged
          Kokkos::atomic_fetch_min(&first_bad(), begin + k);
          continue;
        }
        const Bracket b = bracket_of(p, ExactSum{static_cast<double>(m), 0.0});
        const auto value = static_cast<float>(nearest_of(b));
        const bool changed = value != wi;
        bc.nonzero += ui != 0;
        bc.erased += ui != 0 && !changed;
        bc.applied += changed;
        bc.saturated += b.saturated;
        mp[k] = m;
        wp[k] = value;
      }
    }
    c.nonzero += bc.nonzero;
    c.erased += bc.erased;
    c.applied += bc.applied;
    c.saturated += bc.saturated;
  }
};

// project_erasure over blocks: wq = q(w) and q(wq + u) with the vectorized nearest block (twice), flagged
// coordinates recomputed exactly (round_nearest, then bracket_of/nearest_of of the exact sum wq + u).
template <class MemorySpace>
struct ProjectBlockKernel : CountsReducerBase {
  static constexpr std::int64_t kBlock = detail::kWritebackBlock;
  static constexpr float kZeros[kBlock] = {};  // u = 0: the first pass rounds w itself
  ConstFloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  detail::BlockParams bp;
  Lanes lanes = Lanes::fp64;
  std::int64_t n = 0;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, value_type& c) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = (begin + kBlock < n ? begin + kBlock : n) - begin;
    const float* wp = w.data() + begin;
    const float* up = u.data() + begin;
    float wq[kBlock];  // q(w)
    float out[kBlock];
    unsigned char flags[kBlock];
    for (std::int64_t k = 0; k < len; ++k) {
      wq[k] = wp[k];
    }
    detail::BlockCounts unused;
    if (nearest_block(lanes, p, bp, wq, kZeros, flags, len, unused) > 0) {
      for (std::int64_t k = 0; k < len; ++k) {
        if (flags[k] && finite(wp[k])) {
          wq[k] = static_cast<float>(round_nearest(p, static_cast<double>(wp[k])));
        }
      }
    }
    for (std::int64_t k = 0; k < len; ++k) {
      out[k] = wq[k];
    }
    detail::BlockCounts counts;
    if (nearest_block(lanes, p, bp, out, up, flags, len, counts) > 0) {
      for (std::int64_t k = 0; k < len; ++k) {
        if (!flags[k]) {
          continue;
        }
        const float ui = up[k];
        if (!finite(wq[k]) || !finite(ui)) {
          c.nonfinite += 1;
          continue;
        }
        add_outcome(counts, wq[k], ui, writeback_value(p, WritebackPolicy{}, RngKey{}, 0, wq[k], ui));  // nearest
      }
    }
    c.nonzero += counts.nonzero;
    c.erased += counts.erased;
    c.applied += counts.applied;
    c.saturated += counts.saturated;
  }
};

template <class MemorySpace>
struct QuantizeKernel {
  FloatView<MemorySpace> x;
  FormatParams p;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    x(i) = static_cast<float>(round_nearest(p, static_cast<double>(x(i))));
  }
};

template <class ExecSpace>
Kokkos::RangePolicy<ExecSpace> range(const ExecSpace& space, std::size_t n, int chunk_size) {
  Kokkos::RangePolicy<ExecSpace> policy(space, 0, static_cast<std::int64_t>(n));
  if (chunk_size > 0) {
    policy.set_chunk_size(chunk_size);
  }
  return policy;
}

}  // namespace

namespace detail {

BlockLanes block_lanes(const FormatParams& p) {
  if (!fp32_lanes_cover(p)) {
    return BlockLanes::fp64;
  }
  return p.integer ? BlockLanes::fp32_integer : BlockLanes::fp32_float;
}

BlockWriteback block_writeback(const FormatParams& p, const WritebackPolicy& policy, const RngKey& key) {
  BlockParams bp = block_params(p, policy.sr_bits);
  if (policy.sr_bits == 0 && policy.stream == SrStream::philox_packed) {
    bp.sr_span = 1u << 16;  // exact SR from 16-bit first draws
  }
  return BlockWriteback{p, bp, block_lanes(p), policy, key};
}

std::int64_t writeback_block(const BlockWriteback& wb, std::uint64_t first, float* w, const float* u, std::int64_t len,
                             BlockCounts& counts) {
  switch (wb.policy.policy) {
    case Policy::nearest:
    case Policy::master:  // as writeback_value: nearest (the master copy lives outside)
      return writeback_block_mode<0>(wb, first, w, u, len, counts);
    case Policy::stochastic:
      return writeback_block_mode<1>(wb, first, w, u, len, counts);
    default:
      return writeback_block_mode<2>(wb, first, w, u, len, counts);
  }
}

}  // namespace detail

template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                          const WritebackOptions& options) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("writeback", w.extent(0), u.extent(0));
  if (policy.policy == Policy::master) {
    throw std::invalid_argument("writeback: policy master needs the master copy; use writeback_master");
  }
  if (policy.sr_bits < 0 || policy.sr_bits > 32) {
    throw std::invalid_argument("writeback: sr_bits = " + std::to_string(policy.sr_bits) + " is outside 0..32");
  }
  if (key.step >= kRngMaxStep) {
    throw std::invalid_argument("writeback: step " + std::to_string(key.step) + " exceeds the RNG counter (< 2^32)");
  }
  if (options.first_coordinate + w.extent(0) > kRngMaxCoordinate) {
    throw std::invalid_argument("writeback: coordinates up to " +
                                std::to_string(options.first_coordinate + w.extent(0)) +
                                " exceed the RNG counter (< 2^48)");
  }
  const FormatParams p = format_params(fmt);
  WritebackCounts counts;
  const auto n = static_cast<std::int64_t>(w.extent(0));
  auto launch = [&](auto kernel) {
    constexpr std::int64_t block = decltype(kernel)::kBlock;
    kernel.w = w;
    kernel.u = u;
    kernel.wb = detail::block_writeback(p, policy, key);
    kernel.first_coordinate = options.first_coordinate;
    kernel.n = n;
    Kokkos::parallel_reduce("wbaudit::sim::precision::writeback::kernel",
                            range(space, static_cast<std::size_t>((n + block - 1) / block), options.chunk_size), kernel,
                            counts);
  };
  switch (policy.policy) {
    case Policy::nearest:
      launch(BlockKernel<MS, 0>{});
      break;
    case Policy::stochastic:
      launch(BlockKernel<MS, 1>{});
      break;
    default:
      launch(BlockKernel<MS, 2>{});
      break;
  }
  if (counts.nonfinite > 0) {
    // Non-finite inputs are detected inside the kernel (no separate pass over the data); their coordinates were
    // left unchanged and the others written back.
    throw_nonfinite(space,
                    "writeback (tensor " + std::to_string(key.tensor_id) + ", step " + std::to_string(key.step) +
                        ", format " + fmt.name + "); the coordinates with non-finite input were left unchanged",
                    "w", ConstFloatView<MS>(w), "u", u, counts.nonfinite);
  }
  return counts;
}

template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  return writeback(space, fmt, policy, key, w, u, WritebackOptions{});
}

template <class ExecSpace>
WritebackCounts writeback_master(const ExecSpace& space, const FormatSpec& fmt,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> master,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("writeback_master", master.extent(0), u.extent(0));
  require_same_extent("writeback_master", w.extent(0), u.extent(0));
  const FormatParams p = format_params(fmt);
  const auto n = static_cast<std::int64_t>(u.extent(0));
  MasterBlockKernel<MS> kernel;
  kernel.master = master;
  kernel.w = w;
  kernel.u = u;
  kernel.p = p;
  kernel.bp = detail::block_params(p, 0);
  kernel.lanes = lanes_for(p);
  kernel.n = n;
  kernel.first_bad = Kokkos::View<std::int64_t, MS>("wbaudit::sim::precision::writeback_master::first_bad");
  Kokkos::deep_copy(space, kernel.first_bad, n);
  WritebackCounts counts;
  constexpr std::int64_t block = MasterBlockKernel<MS>::kBlock;
  Kokkos::parallel_reduce("wbaudit::sim::precision::writeback_master::kernel",
                          range(space, static_cast<std::size_t>((n + block - 1) / block), 0), kernel, counts);
  if (counts.nonfinite > 0) {
    std::int64_t first = n;
    Kokkos::deep_copy(space, first, kernel.first_bad);
    space.fence();
    auto value = [&](const auto& v) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{},
                                                   Kokkos::subview(v, Kokkos::make_pair(first, first + 1)));
      return float_text(h(0));
    };
    throw NonFiniteError("writeback_master (format " + std::string(fmt.name) +
                         "): " + std::to_string(counts.nonfinite) +
                         " coordinate(s) with a non-finite master, u or w, or an fp32 master update that overflowed; "
                         "first at coordinate " +
                         std::to_string(first) + ": master = " + value(master) + ", u = " + value(u) +
                         ", w = " + value(w) + "; those coordinates were left unchanged");
  }
  return counts;
}

template <class ExecSpace>
WritebackCounts project_erasure(const ExecSpace& space, const FormatSpec& fmt,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("project_erasure", w.extent(0), u.extent(0));
  const FormatParams p = format_params(fmt);
  WritebackCounts counts;
  ProjectBlockKernel<MS> kernel;
  kernel.w = w;
  kernel.u = u;
  kernel.p = p;
  kernel.bp = detail::block_params(p, 0);
  kernel.lanes = lanes_for(p);
  kernel.n = static_cast<std::int64_t>(u.extent(0));
  const std::int64_t blocks = (kernel.n + kernel.kBlock - 1) / kernel.kBlock;
  Kokkos::parallel_reduce("wbaudit::sim::precision::project_erasure::kernel",
                          Kokkos::RangePolicy<ExecSpace>(space, 0, blocks), kernel, counts);
  if (counts.nonfinite > 0) {
    throw_nonfinite(space, std::string("project_erasure (format ") + fmt.name + ")", "w", w, "u", u, counts.nonfinite);
  }
  return counts;
}

template <class ExecSpace>
void quantize(const ExecSpace& space, const FormatSpec& fmt, Kokkos::View<float*, typename ExecSpace::memory_space> x) {
  using MS = typename ExecSpace::memory_space;
  const FormatParams p = format_params(fmt);
  require_finite(space, std::string("quantize (format ") + fmt.name + ")", "x", ConstFloatView<MS>(x), "x",
                 ConstFloatView<MS>());
  Kokkos::parallel_for("wbaudit::sim::precision::quantize::kernel", range(space, x.extent(0), 0),
                       QuantizeKernel<MS>{x, p});
}

#define WBAUDIT_INSTANTIATE_WRITEBACK(SPACE)                                                                           \
  template WritebackCounts writeback<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey,           \
                                            Kokkos::View<float*, SPACE::memory_space>,                                 \
                                            Kokkos::View<const float*, SPACE::memory_space>);                          \
  template WritebackCounts writeback<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey,           \
                                            Kokkos::View<float*, SPACE::memory_space>,                                 \
                                            Kokkos::View<const float*, SPACE::memory_space>, const WritebackOptions&); \
  template WritebackCounts writeback_master<SPACE>(                                                                    \
      const SPACE&, const FormatSpec&, Kokkos::View<float*, SPACE::memory_space>,                                      \
      Kokkos::View<float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>);                     \
  template WritebackCounts project_erasure<SPACE>(const SPACE&, const FormatSpec&,                                     \
                                                  Kokkos::View<const float*, SPACE::memory_space>,                     \
                                                  Kokkos::View<const float*, SPACE::memory_space>);                    \
  template void quantize<SPACE>(const SPACE&, const FormatSpec&, Kokkos::View<float*, SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_WRITEBACK(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_WRITEBACK(Kokkos::OpenMP)
#endif
#undef WBAUDIT_INSTANTIATE_WRITEBACK

}  // namespace wbaudit::sim
