#pragma once
// Exact audit of a realized write-back w[t] -> w[t+1] with proposals u[t] under a claimed policy: recompute every
// event exactly and list the coordinates inconsistent with the policy.
#include <cstdint>
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

}  // namespace wbaudit::sim
