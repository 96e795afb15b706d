#include "sim/precision/audit.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_blocks.hpp"
#include "util/text.hpp"

namespace wbaudit::sim {
namespace {

bool representable(const FormatParams& p, float v) {
  const double d = v;
  return std::fabs(d) <= p.max_finite && round_nearest(p, d) == d;
}

}  // namespace

AuditReport audit_writeback(const FormatSpec& fmt, const WritebackPolicy& policy, std::span<const float> w,
                            std::span<const float> u, std::span<const float> w_next, std::uint32_t tensor_id,
                            std::uint64_t step, std::optional<RngKey> replay) {
  if (w.size() != u.size() || w.size() != w_next.size()) {
    throw std::invalid_argument("audit_writeback: extents differ (w " + std::to_string(w.size()) + ", u " +
                                std::to_string(u.size()) + ", w_next " + std::to_string(w_next.size()) + ")");
  }
  if (policy.policy == Policy::master) {
    throw std::invalid_argument(
        "audit_writeback: policy master cannot be audited from w and u alone (the fp32 "
        "master copy is not part of the trajectory)");
  }
  const FormatParams p = format_params(fmt);
  AuditReport report;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float wi = w[i], ui = u[i], ni = w_next[i];
    if (!std::isfinite(wi) || !std::isfinite(ui) || !std::isfinite(ni)) {
      throw NonFiniteError("audit_writeback (tensor " + std::to_string(tensor_id) + ", step " + std::to_string(step) +
                           "): non-finite value at coordinate " + std::to_string(i) + ": w = " + util::float_text(wi) +
                           ", u = " + util::float_text(ui) + ", w_next = " + util::float_text(ni));
    }
    const Bracket b = bracket_of(p, exact_sum(wi, ui));
    const auto nearest = static_cast<float>(nearest_of(b));
    auto& c = report.counts;
    c.nonzero += ui != 0;
    c.erased += ui != 0 && ni == wi;
    c.applied += ni != wi;
    c.saturated += b.saturated;
    report.nearest_erased += ui != 0 && nearest == wi;

    const bool sr =
        policy.policy == Policy::stochastic || (policy.policy == Policy::deadzone_sr && ui != 0 && nearest == wi);
    float low = nearest, high = nearest;
    if (sr && !b.exact) {
      low = static_cast<float>(b.sign * b.tz);
      high = static_cast<float>(b.sign * b.away);
      bool truncated = false;
      if (policy.sr_bits > 0) {
        const double two_r = std::ldexp(1.0, policy.sr_bits);
        double d;
        ExactSum rest;
        detail::divmod_exact(ExactSum{b.rem.hi * two_r, b.rem.lo * two_r}, b.S, 1.0 / b.S, d, rest);
        truncated = d == 0;
      }
      c.sr_truncated += truncated;
      c.sr_applied += !truncated;
      if (truncated) {
        high = low;  // the r-bit dead zone never moves away from zero
      }
      if (replay) {
        PhiloxStream stream = sr_stream_of(policy, *replay, static_cast<std::uint64_t>(i));
        low = high = static_cast<float>(stochastic_of(b, policy.sr_bits, stream).value);
      }
    }
    std::string reason;
    if (!representable(p, ni)) {
      reason = "w[t+1] = " + util::float_text(ni) + " is not representable in " + fmt.name;
    } else if (ni != low && ni != high) {
      if (low == high) {
        reason = "expected " + util::float_text(low) + " under " + policy_name(policy.policy) +
                 (replay && sr ? " (replayed)" : "");
      } else {
        reason = "expected one of the neighbours " + util::float_text(low) + ", " + util::float_text(high) + " under " +
                 policy_name(policy.policy);
      }
    }
    if (!reason.empty()) {
      report.inconsistencies.push_back({static_cast<std::uint64_t>(i), wi, ui, ni, low, high, reason});
    }
  }
  return report;
}

namespace {

struct ReplaySums {
  std::int64_t nonzero = 0, erased = 0, saturated = 0, applied = 0, sr_applied = 0, sr_truncated = 0;
  std::int64_t nearest_erased = 0, mismatched = 0;
};

// One block of replay_writeback: w, u and w_next are read once; the re-rounded w, the nearest replay and the claimed
// policy's replay live in block-sized arrays on the stack (in L1), not in passes over the whole range.
template <class MemorySpace>
struct ReplayKernel {
  using value_type = ReplaySums;
  static constexpr std::int64_t kBlock = detail::kWritebackBlock;
  static constexpr float kZeros[kBlock] = {};  // u = 0: q(w + 0) == w iff w is a value of the format
  Kokkos::View<const float*, MemorySpace> w, u, w_next;
  detail::BlockWriteback nearest, claimed;
  bool replay_sr = false;  // claimed is an SR policy (otherwise it is nearest)
  bool w_stored = false;
  std::uint64_t first = 0;
  std::int64_t n = 0;
  const std::function<void()>* alongside = nullptr;  // item 0 when set; block b is then item b + 1

  KOKKOS_INLINE_FUNCTION void init(value_type& c) const { c = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
    a.nonzero = a.nonzero + b.nonzero;
    a.erased = a.erased + b.erased;
    a.saturated = a.saturated + b.saturated;
    a.applied = a.applied + b.applied;
    a.sr_applied = a.sr_applied + b.sr_applied;
    a.sr_truncated = a.sr_truncated + b.sr_truncated;
    a.nearest_erased = a.nearest_erased + b.nearest_erased;
    a.mismatched = a.mismatched + b.mismatched;
  }

  void operator()(std::int64_t item, value_type& c) const {
    if (alongside && item == 0) {
      (*alongside)();
      return;
    }
    const std::int64_t block = alongside ? item - 1 : item;
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = std::min(kBlock, n - begin);
    const std::uint64_t at = first + static_cast<std::uint64_t>(begin);
    const float* __restrict wp = w.data() + begin;
    const float* __restrict up = u.data() + begin;
    const float* __restrict np = w_next.data() + begin;
    alignas(64) float near[kBlock];
    alignas(64) float other[kBlock];
    std::int64_t bad = 0;
    if (!w_stored) {
      alignas(64) float q[kBlock];
      std::copy_n(wp, len, q);
      detail::BlockCounts unused;
      bad += detail::writeback_block(nearest, at, q, kZeros, len, unused);
      std::uint32_t off_grid = 0;
      for (std::int64_t k = 0; k < len; ++k) {
        off_grid += static_cast<std::uint32_t>(!(q[k] == wp[k]));
      }
      bad += off_grid;
    }
    detail::BlockCounts nc, cc;
    std::copy_n(wp, len, near);
    bad += detail::writeback_block(nearest, at, near, up, len, nc);
    const float* e = near;
    if (replay_sr) {
      std::copy_n(wp, len, other);
      bad += detail::writeback_block(claimed, at, other, up, len, cc);
      e = other;
    } else {
      cc = nc;
    }
    std::uint32_t differ = 0;  // NaN compares unequal
    for (std::int64_t k = 0; k < len; ++k) {
      differ += static_cast<std::uint32_t>(!(np[k] == e[k]));
    }
    c.mismatched += bad + differ;
    detail::add_block_counts(c, cc);
    c.nearest_erased += nc.erased;
  }
};

}  // namespace

template <class ExecSpace>
ReplayReport replay_writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                              Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                              Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                              Kokkos::View<const float*, typename ExecSpace::memory_space> w_next,
                              std::uint64_t first_coordinate, bool w_stored, const std::function<void()>& alongside) {
  using MS = typename ExecSpace::memory_space;
  if (w.extent(0) != u.extent(0) || w.extent(0) != w_next.extent(0)) {
    throw std::invalid_argument("replay_writeback: extents differ (w " + std::to_string(w.extent(0)) + ", u " +
                                std::to_string(u.extent(0)) + ", w_next " + std::to_string(w_next.extent(0)) + ")");
  }
  if (policy.policy == Policy::master) {
    throw std::invalid_argument(
        "replay_writeback: policy master cannot be audited from w and u alone (the fp32 master copy is not part of "
        "the trajectory)");
  }
  const bool replay_sr = policy.policy != Policy::nearest;
  // The write-back kernel's preconditions (sim::writeback), with its messages.
  if (replay_sr && (policy.sr_bits < 0 || policy.sr_bits > 32)) {
    throw std::invalid_argument("writeback: sr_bits = " + std::to_string(policy.sr_bits) + " is outside 0..32");
  }
  if (replay_sr && key.step >= kRngMaxStep) {
    throw std::invalid_argument("writeback: step " + std::to_string(key.step) + " exceeds the RNG counter (< 2^32)");
  }
  if (first_coordinate + w.extent(0) > kRngMaxCoordinate) {
    throw std::invalid_argument("writeback: coordinates up to " + std::to_string(first_coordinate + w.extent(0)) +
                                " exceed the RNG counter (< 2^48)");
  }
  const FormatParams p = format_params(fmt);
  ReplayKernel<MS> kernel;
  kernel.w = w;
  kernel.u = u;
  kernel.w_next = w_next;
  kernel.nearest = detail::block_writeback(p, WritebackPolicy{}, RngKey{0, 0, key.tensor_id});
  kernel.claimed = detail::block_writeback(p, policy, key);
  kernel.replay_sr = replay_sr;
  kernel.w_stored = w_stored;
  kernel.first = first_coordinate;
  kernel.n = static_cast<std::int64_t>(w.extent(0));
  const std::int64_t blocks = (kernel.n + kernel.kBlock - 1) / kernel.kBlock;
  ReplaySums sums;
  if (alongside) {
    // Dynamic: the thread that runs `alongside` takes fewer blocks (the counts are integer sums, so any split gives
    // the same totals).
    kernel.alongside = &alongside;
    Kokkos::parallel_reduce("wbaudit::sim::precision::replay_writeback::kernel_alongside",
                            Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, blocks + 1),
                            kernel, sums);
  } else {
    Kokkos::parallel_reduce("wbaudit::sim::precision::replay_writeback::kernel",
                            Kokkos::RangePolicy<ExecSpace>(space, 0, blocks), kernel, sums);
  }
  ReplayReport r;
  r.counts.nonzero = sums.nonzero;
  r.counts.erased = sums.erased;
  r.counts.saturated = sums.saturated;
  r.counts.applied = sums.applied;
  r.counts.sr_applied = sums.sr_applied;
  r.counts.sr_truncated = sums.sr_truncated;
  r.nearest_erased = sums.nearest_erased;
  r.mismatched = sums.mismatched;
  return r;
}

#define WBAUDIT_INSTANTIATE_REPLAY(SPACE)                                                               \
  template ReplayReport replay_writeback<SPACE>(                                                        \
      const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey,                                  \
      Kokkos::View<const float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>, \
      Kokkos::View<const float*, SPACE::memory_space>, std::uint64_t, bool, const std::function<void()>&);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_REPLAY(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_REPLAY(Kokkos::OpenMP)
#endif
#undef WBAUDIT_INSTANTIATE_REPLAY

}  // namespace wbaudit::sim
