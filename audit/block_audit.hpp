#pragma once
// The exact audit of a trajectory held in a block-scaled format (MX, NVFP4; docs/formats.md "Block-scaled formats",
// docs/python.md "wbaudit audit"). Each recorded write-back of a tensor is recomputed whole from w[t] and u[t] (a
// block's scale, and NVFP4's tensor scale, come from the whole block or tensor of v = w + u) with
// sim::block_writeback under the claimed policy and the run's SR key (seed, step, tensor id, coordinate); every
// coordinate of w[t+1] must be the recomputed value. Counts: nonzero, erased and applied of the trajectory's own
// values; the causes (grid, saturation, scale), collateral moves, flushes and rescaled blocks of the recomputation
// (equal to the trajectory's where it is consistent). SR and dead-zone SR need the run's seed (the draws are
// replayed); the tensor's shape must be known (its blocks run along the last dimension).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "audit/trajectory.hpp"
#include "audit/trajectory_audit.hpp"
#include "sim/precision/block_format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"
#include "sim/precision/storage_format.hpp"

namespace wbaudit::audit {

// One recorded write-back of one tensor (host arrays of shape.size() values): w_next against the block write-back
// of (w, u) under `policy` with `key`. counts: nonzero, erased, applied of the arrays; the recomputation's causes
// (counts.block), saturated, sr_truncated and nearest_erased; inconsistent (and replay_mismatched under SR) the
// differing coordinates, all listed in `differing` with their recomputed values in `expected`.
struct BlockStepAudit {
  AuditCounts counts;
  std::vector<std::int64_t> differing;
  std::vector<float> expected;  // the recomputed w[t+1]
};
BlockStepAudit audit_block_step(const sim::StorageFormat& fmt, const sim::WritebackPolicy& policy,
                                const sim::RngKey& key, const sim::RowMajorShape& shape, std::span<const float> w,
                                std::span<const float> u, std::span<const float> w_next);

// Audits tensor t of `source` at every recorded step into audit.counts[t], audit.listed and the audit's totals.
// Throws TrajectoryError (no shape), std::invalid_argument (SR without a seed), sim::NonFiniteError and
// sim::BlockScaleError (naming the tensor id, step and block).
void audit_block_tensor(TrajectorySource& source, const TrajectoryAuditOptions& options, std::size_t t,
                        TrajectoryAudit& audit);

}  // namespace wbaudit::audit
