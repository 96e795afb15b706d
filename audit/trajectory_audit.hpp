#pragma once
// The exact audit of a realized trajectory (docs/science.md §2 "Exact audit", docs/formats.md): every recorded
// write-back w[t] -> w[t+1] of every tensor is re-derived with sim::audit_writeback, in slices of coordinates that
// run in parallel on the host execution space (Kokkos threads), streaming the file chunk by chunk (the next chunk is
// read while one is audited).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "audit/trajectory.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/policy.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::audit {

struct TrajectoryAuditOptions {
  std::string format;  // format name (intK: the per-tensor scale comes from the trajectory)
  sim::WritebackPolicy policy;
  std::int64_t chunk = std::int64_t{1} << 21;  // coordinates read per tensor row at a time (memory: 24 bytes each)
  // The run's SR seed, when known: the claimed policy's draws are replayed from it (key: seed, step, tensor id,
  // coordinate), and a coordinate whose w[t+1] is an SR neighbour but not the one its draw gives is inconsistent
  // ("replay mismatch"), as the Python module's audit(seed=) does. Without it, SR is checked as "one of the two
  // neighbours". The fast path replays the draws; where anything differs the coordinate-by-coordinate audit explains
  // it.
  std::optional<std::uint64_t> seed;
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // declared unions of tensors
  std::size_t max_listed = 100000;  // inconsistent coordinates kept in the list (all are counted)
};

struct AuditCounts {
  std::int64_t nonzero = 0;         // u != 0
  std::int64_t erased = 0;          // u != 0 and w[t+1] == w[t]
  std::int64_t saturated = 0;       // |w + u| beyond max finite
  std::int64_t applied = 0;         // w[t+1] != w[t]
  std::int64_t inconsistent = 0;    // coordinates inconsistent with the policy (or not representable)
  std::int64_t nearest_erased = 0;  // u != 0 and q_nearest(w + u) == w
  std::int64_t sr_truncated = 0;    // r-bit SR dead zone: the away-from-zero probability truncated to 0
  // Counted within `inconsistent` too: SR with a seed, w[t+1] the other neighbour than the replayed draw gives; and,
  // where w[t+1] is stored apart from w (w_next) and the next recorded step is t + 1, w[t+1] differing from the w
  // recorded at t + 1 (the trajectory does not chain).
  std::int64_t replay_mismatched = 0;
  std::int64_t chain_breaks = 0;
  // Block formats (audit/block_audit.hpp): the recomputed write-back's counts (causes, collateral, flushed, blocks).
  sim::BlockWritebackCounts block;
  AuditCounts& operator+=(const AuditCounts& o);
  friend bool operator==(const AuditCounts&, const AuditCounts&) = default;
};

struct InconsistentCoordinate {
  std::string tensor;
  std::int64_t step = 0;
  std::int64_t index = 0;  // coordinate within the tensor (row-major flat index)
  float w = 0, u = 0, w_next = 0;
  float expected_low = 0, expected_high = 0;  // one value (low == high) or the two SR neighbours
  std::string reason;
};

struct TrajectoryAudit {
  std::string format;
  sim::WritebackPolicy policy;
  std::vector<std::int64_t> steps;
  std::vector<std::string> groups;               // the tensors in order, then the declared groups
  std::vector<std::uint32_t> tensor_ids;         // per group (declared groups: after the tensors' ids)
  std::vector<std::int64_t> sizes;               // per group
  std::vector<std::vector<AuditCounts>> counts;  // [group][k]
  std::vector<InconsistentCoordinate> listed;    // in (tensor, step, index) order, at most max_listed
  std::int64_t inconsistent = 0;                 // all of them
  std::int64_t coordinates = 0;                  // coordinate-steps audited
  std::int64_t chain_checked = 0;                // coordinate-steps whose w[t+1] was compared with w at step t + 1
  std::int64_t chain_unchecked_steps = 0;        // recorded steps with w_next whose next step is not t + 1
  std::int64_t bytes_read = 0;
  double read_seconds = 0;     // time spent reading (with more than one thread, mostly alongside the audit)
  double elapsed_seconds = 0;  // the whole audit
  bool consistent() const { return inconsistent == 0; }
};

// Throws TrajectoryError for a bad trajectory, sim::FormatError for an unknown format, std::invalid_argument for a
// bad group declaration, and std::runtime_error naming tensor, step, coordinate and values for NaN/inf.
TrajectoryAudit audit_trajectory(TrajectorySource& source, const TrajectoryAuditOptions& options);

// The audit as a target trace in the trace schema (docs/trace-format.md): per group nonzero, erased, saturated,
// applied and erased_fraction at the audited steps; loss and learning rate NaN (a trajectory does not hold them).
sim::Trace audit_as_trace(const TrajectoryAudit& audit, const std::string& source_description);

}  // namespace wbaudit::audit
