#pragma once
// The write-back kernel w <- q(w + u) over Kokkos Views, with exact per-group event counts.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <stdexcept>

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"
#include "sim/precision/rounding.hpp"

namespace wbaudit::sim {

struct WritebackCounts {
  std::int64_t nonzero = 0;       // u != 0
  std::int64_t erased = 0;        // u != 0 and q(w + u) == w
  std::int64_t saturated = 0;     // |w + u| beyond max finite (saturated to it)
  std::int64_t applied = 0;       // q(w + u) != w
  std::int64_t sr_applied = 0;    // SR policies: coordinates where the random draw (not nearest) decided the value,
                                  // i.e. w + u was off the grid and both neighbours had nonzero probability
  std::int64_t nonfinite = 0;     // w or u NaN/inf (the host wrapper throws NonFiniteError when > 0)
  std::int64_t sr_truncated = 0;  // r-bit SR: off-grid coordinates whose away-from-zero probability truncated to 0
                                  // (the r-bit dead zone; these are deterministic, not counted in sr_applied)

  WritebackCounts& operator+=(const WritebackCounts& o) {
    nonzero += o.nonzero;
    erased += o.erased;
    saturated += o.saturated;
    applied += o.applied;
    sr_applied += o.sr_applied;
    nonfinite += o.nonfinite;
    sr_truncated += o.sr_truncated;
    return *this;
  }
  friend bool operator==(const WritebackCounts&, const WritebackCounts&) = default;
};

namespace detail {
// The Kokkos reduction of WritebackCounts (the write-back kernels' value type): integer sums, so the totals do not
// depend on the order of the reduction.
struct WritebackCountsReducer {
  using value_type = WritebackCounts;
  KOKKOS_INLINE_FUNCTION void init(value_type& c) const { c = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
    a.nonzero = a.nonzero + b.nonzero;
    a.erased = a.erased + b.erased;
    a.saturated = a.saturated + b.saturated;
    a.applied = a.applied + b.applied;
    a.sr_applied = a.sr_applied + b.sr_applied;
    a.nonfinite = a.nonfinite + b.nonfinite;
    a.sr_truncated = a.sr_truncated + b.sr_truncated;
  }
};
}  // namespace detail

class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Optional kernel settings. Results never depend on them (tests check this).
struct WritebackOptions {
  int chunk_size = 0;                  // Kokkos chunk size of the range policy (0: Kokkos' default)
  std::uint64_t first_coordinate = 0;  // coordinate of w(0) within its tensor (for slices of a tensor: RNG key)
};

// w holds values exactly representable in fmt (as fp32); u holds fp32 proposals. For Policy::master use
// writeback_master. Non-finite inputs are detected inside the kernel (no separate pass over the data): a
// coordinate whose w or u is NaN/inf is left unchanged, the others are written back, and the call then throws
// NonFiniteError naming tensor id, step, the count and the first such coordinate. Bitwise identical for any thread
// count and chunking.
template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u);

template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                          const WritebackOptions& options);

// Master-copy contrast: master += u in fp32, w = q_nearest(master). Events are counted against the old w. A
// coordinate whose master, u or w is NaN/inf, or whose master update overflows fp32, is left unchanged (master and
// w); the others are written back, and the call then throws NonFiniteError naming the count and the first such
// coordinate with its values.
template <class ExecSpace>
WritebackCounts writeback_master(const ExecSpace& space, const FormatSpec& fmt,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> master,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u);

// Projected events on an fp32 reference state (nothing is modified): counts u != 0 and
// q_F(q_F(w) + u) == q_F(w) under nearest. Returned in .nonzero and .erased.
template <class ExecSpace>
WritebackCounts project_erasure(const ExecSpace& space, const FormatSpec& fmt,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> u);

// Rounds every element of x into fmt (nearest); used to initialize persistent-native weights.
template <class ExecSpace>
void quantize(const ExecSpace& space, const FormatSpec& fmt, Kokkos::View<float*, typename ExecSpace::memory_space> x);

// The same operations on the default execution space.
inline WritebackCounts writeback(const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                                 const Kokkos::View<float*>& w, const Kokkos::View<const float*>& u) {
  return writeback(Kokkos::DefaultExecutionSpace{}, fmt, policy, key, w, u);
}
inline WritebackCounts writeback_master(const FormatSpec& fmt, const Kokkos::View<float*>& master,
                                        const Kokkos::View<float*>& w, const Kokkos::View<const float*>& u) {
  return writeback_master(Kokkos::DefaultExecutionSpace{}, fmt, master, w, u);
}
inline WritebackCounts project_erasure(const FormatSpec& fmt, const Kokkos::View<const float*>& w,
                                       const Kokkos::View<const float*>& u) {
  return project_erasure(Kokkos::DefaultExecutionSpace{}, fmt, w, u);
}
inline void quantize(const FormatSpec& fmt, const Kokkos::View<float*>& x) {
  quantize(Kokkos::DefaultExecutionSpace{}, fmt, x);
}

// ---- One coordinate (used by the kernel, the audit and the CLI) ----

struct WritebackOutcome {
  float value = 0;         // q(w + u)
  bool saturated = false;  // |w + u| > max finite
  bool random = false;     // SR: the random draw decided
  bool truncated = false;  // r-bit SR: nonzero probability truncated to zero
};

// The SR stream of one coordinate under the policy's SrStream (rng.hpp).
KOKKOS_INLINE_FUNCTION PhiloxStream sr_stream_of(const WritebackPolicy& policy, const RngKey& key,
                                                 std::uint64_t coordinate) {
  return PhiloxStream(key, coordinate, sr_packed_bits(policy));
}

// q^pi(w + u) for one coordinate; w + u is formed exactly. Policy::master is treated as nearest (the master copy
// lives outside). The RNG stream of (key, coordinate) is consulted only when SR applies.
KOKKOS_INLINE_FUNCTION WritebackOutcome writeback_value(const FormatParams& p, const WritebackPolicy& policy,
                                                        const RngKey& key, std::uint64_t coordinate, float w, float u) {
  WritebackOutcome out;
  const Bracket b = bracket_of(p, exact_sum(w, u));
  out.saturated = b.saturated;
  const double nearest = nearest_of(b);
  const bool use_sr = policy.policy == Policy::stochastic ||
                      (policy.policy == Policy::deadzone_sr && u != 0 && nearest == static_cast<double>(w));
  if (!use_sr || b.exact) {
    out.value = static_cast<float>(nearest);
    return out;
  }
  PhiloxStream stream = sr_stream_of(policy, key, coordinate);
  const StochasticOutcome s = stochastic_of(b, policy.sr_bits, stream);
  out.value = static_cast<float>(s.value);
  out.random = s.random;
  out.truncated = s.truncated;
  return out;
}

}  // namespace wbaudit::sim
