#pragma once
// Exact audit of a realized write-back w[t] -> w[t+1] with proposals u[t] under a claimed policy: recompute every
// event exactly and list the coordinates inconsistent with the policy.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"
#include "sim/precision/writeback.hpp"

namespace wbaudit::sim {

struct AuditInconsistency {
  std::uint64_t coordinate = 0;
  float w = 0;
  float u = 0;
  float w_next = 0;
  float allowed_low = 0;  // the allowed value(s) of w[t+1]: one value (low == high) or the two SR neighbours
  float allowed_high = 0;
  std::string reason;
};

struct AuditReport {
  // Realized events: nonzero (u != 0), erased (u != 0 and w[t+1] == w[t]), applied (w[t+1] != w[t]),
  // saturated (|w + u| > max finite), sr_applied (SR decided an off-grid coordinate), sr_truncated (r-bit dead zone).
  WritebackCounts counts;
  std::int64_t nearest_erased = 0;  // u != 0 and q_nearest(w + u) == w: what round-to-nearest would have erased
  std::vector<AuditInconsistency> inconsistencies;
  bool consistent() const { return inconsistencies.empty(); }
};

// Checks: nearest: w[t+1] == q(w + u); stochastic: w[t+1] is the value itself when w + u is on the grid, else one of
// its two neighbours (r-bit SR: only the toward-zero neighbour inside the r-bit dead zone); deadzone-sr: nearest
// unless nearest erases a nonzero proposal, there as stochastic; saturation: +-max finite. w[t+1] must be
// representable in the format. With `replay` (the run's RNG key), SR outcomes must match the replayed draws exactly.
// Throws NonFiniteError naming tensor, step and coordinate for NaN/inf inputs, std::invalid_argument for
// Policy::master (the master copy is not part of the trajectory) or extents that differ.
AuditReport audit_writeback(const FormatSpec& fmt, const WritebackPolicy& policy, std::span<const float> w,
                            std::span<const float> u, std::span<const float> w_next, std::uint32_t tensor_id = 0,
                            std::uint64_t step = 0, std::optional<RngKey> replay = std::nullopt);

// The vectorized replay of realized write-backs (the fast path of `wbaudit audit`, audit/trajectory_audit.hpp):
// one pass over blocks of coordinates that stay in cache re-rounds w[t] (q(w + 0) == w iff w is a value of the
// format; skipped when w_stored says the caller has already verified it), recomputes w[t+1] with the write-back's
// block loops under nearest and, for the SR policies, under `policy` keyed by `key` (the run's seed, the step and the
// tensor; coordinate first_coordinate + i), and compares with the realized w_next, all for one read of w, u and w_next.
// Non-finite values count as mismatches. When `mismatched` is 0 every coordinate equals its replay, the write-backs
// are consistent and `counts` are their realized events (`nearest_erased`: what nearest would have erased); otherwise
// the caller audits coordinate by coordinate (audit_writeback), which explains every mismatch. Throws
// std::invalid_argument where the write-back kernel does (sr_bits outside 0..32, an RNG counter out of range) and for
// Policy::master or extents that differ. Integer counts, bitwise identical for any thread count. `alongside`, when
// given, runs once on one of the kernel's threads while the others replay (the caller reads its next chunk there);
// it must not throw.
struct ReplayReport {
  WritebackCounts counts;           // under `policy` (nonfinite stays 0)
  std::int64_t nearest_erased = 0;  // u != 0 and q_nearest(w + u) == w
  std::int64_t mismatched = 0;      // coordinates whose w is not its own rounding or whose w_next is not the replay's
};

template <class ExecSpace>
ReplayReport replay_writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                              Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                              Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                              Kokkos::View<const float*, typename ExecSpace::memory_space> w_next,
                              std::uint64_t first_coordinate, bool w_stored,
                              const std::function<void()>& alongside = {});

}  // namespace wbaudit::sim
