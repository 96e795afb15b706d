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

#include "audit/trajectory.hpp"
#include "audit/trajectory_audit.hpp"

namespace wbaudit::audit {

// Audits tensor t of `source` at every recorded step into audit.counts[t], audit.listed and the audit's totals.
// Throws TrajectoryError (no shape), std::invalid_argument (SR without a seed), sim::NonFiniteError and
// sim::BlockScaleError (naming the tensor id, step and block).
void audit_block_tensor(TrajectorySource& source, const TrajectoryAuditOptions& options, std::size_t t,
                        TrajectoryAudit& audit);

}  // namespace wbaudit::audit
