// The audit of a trajectory held in a block-scaled format (docs/formats.md, "Block-scaled formats"; issue 29): each
// recorded write-back of a tensor is recomputed whole (a block's scale, and NVFP4's tensor scale, depend on the whole
// block or tensor of v = w + u), from w[t] and u[t] under the claimed policy with the run's SR key, and every
// coordinate of w[t+1] must equal the recomputed value.
#include "audit/block_audit.hpp"

#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/precision/block_writeback.hpp"
#include "sim/precision/storage_format.hpp"
#include "util/text.hpp"

namespace wbaudit::audit {

namespace {

// Rows and columns of a tensor for its blocks: the last dimension is a row, the others are flattened into rows.
sim::RowMajorShape block_shape(const TrajectoryTensor& info, const std::string& format, const std::string& file) {
  if (info.shape.empty()) {
    throw TrajectoryError(file + ": tensor " + info.name + ": block format " + format +
                          " needs the tensor's shape (attribute \"shape\" of /tensors/" + info.name +
                          ", or \"shape\" in trajectory.json's tensors): its blocks run along the last dimension");
  }
  return sim::row_major_shape(info.shape);
}

// Where a step's inconsistencies are listed, and why a differing coordinate is inconsistent.
struct StepCheck {
  const TrajectoryTensor& info;
  const TrajectoryAuditOptions& options;
  std::int64_t step;
  std::string reason;
};

sim::BlockWritebackCounts recompute(const sim::StorageFormat& fmt, const sim::WritebackPolicy& policy,
                                    const sim::RngKey& key, const sim::RowMajorShape& shape, std::span<float> w,
                                    std::span<const float> u) {
  const Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> wv(w.data(), w.size());
  const Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> uv(u.data(), u.size());
  return sim::block_writeback(Kokkos::DefaultHostExecutionSpace(), fmt.blocks, policy, key, shape, wv, uv, fmt.options);
}

// Where w[t+1] is stored apart (w_next) and the next recorded step is t + 1: w[t+1] must be the w recorded at t + 1.
void check_block_chain(TrajectorySource& source, const StepCheck& check, std::size_t t, std::size_t k,
                       const std::vector<float>& w_next, AuditCounts& counts, TrajectoryAudit& audit) {
  std::vector<float> next_w(w_next.size());
  source.read(t, k + 1, 0, next_w, std::span<float>(), std::span<float>());
  audit.bytes_read += static_cast<std::int64_t>(next_w.size()) * 4;
  audit.chain_checked += static_cast<std::int64_t>(next_w.size());
  for (std::size_t i = 0; i < next_w.size(); ++i) {
    if (next_w[i] == w_next[i]) {
      continue;
    }
    ++counts.inconsistent;
    ++counts.chain_breaks;
    ++audit.inconsistent;
    if (audit.listed.size() < check.options.max_listed) {
      audit.listed.push_back(
          {check.info.name, check.step, static_cast<std::int64_t>(i), w_next[i], 0.0f, w_next[i], next_w[i], next_w[i],
           "the trajectory does not chain: w[t+1] recorded after step " + std::to_string(check.step) + " is " +
               util::float_text(w_next[i]) + ", the w recorded at step " + std::to_string(check.step + 1) + " is " +
               util::float_text(next_w[i])});
    }
  }
}

}  // namespace

BlockStepAudit audit_block_step(const sim::StorageFormat& fmt, const sim::WritebackPolicy& policy,
                                const sim::RngKey& key, const sim::RowMajorShape& shape, std::span<const float> w,
                                std::span<const float> u, std::span<const float> w_next) {
  BlockStepAudit out;
  out.expected.assign(w.begin(), w.end());
  AuditCounts& counts = out.counts;
  counts.block = recompute(fmt, policy, key, shape, out.expected, u);
  counts.saturated = counts.block.saturated;
  counts.sr_truncated = counts.block.sr_truncated;
  if (policy.policy == sim::Policy::nearest) {
    counts.nearest_erased = counts.block.erased;
  } else {
    std::vector<float> nearest(w.begin(), w.end());
    counts.nearest_erased = recompute(fmt, sim::WritebackPolicy{}, key, shape, nearest, u).erased;
  }
  const bool replayed = policy.policy != sim::Policy::nearest;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (u[i] != 0.0f) {
      ++counts.nonzero;
      ++(w_next[i] != w[i] ? counts.applied : counts.erased);
    }
    if (w_next[i] != out.expected[i]) {  // decoded values: +0 == -0
      ++counts.inconsistent;
      counts.replay_mismatched += replayed ? 1 : 0;
      out.differing.push_back(static_cast<std::int64_t>(i));
    }
  }
  return out;
}

void audit_block_tensor(TrajectorySource& source, const TrajectoryAuditOptions& options, std::size_t t,
                        TrajectoryAudit& audit) {
  const TrajectoryTensor& info = source.tensors[t];
  const std::string file = source.path.string();
  const sim::StorageFormat fmt = sim::storage_format_from_name(options.format);
  const sim::RowMajorShape shape = block_shape(info, options.format, file);
  const bool sr = options.policy.policy != sim::Policy::nearest;
  if (sr && !options.seed) {
    throw std::invalid_argument(file + ": policy " + sim::policy_name(options.policy.policy) + " in block format " +
                                options.format +
                                " is audited by replaying the run's draws: give its seed (--seed, or the trajectory's "
                                "seed attribute)");
  }
  const auto n = static_cast<std::size_t>(info.size);
  std::vector<float> w(n), u(n), w_next(n);
  const std::size_t T = source.steps.size();
  for (std::size_t k = 0; k < T; ++k) {
    const std::int64_t step = source.steps[k];
    source.read(t, k, 0, w, u, w_next);  // without w_next: row k + 1 of w
    audit.bytes_read += static_cast<std::int64_t>(n) * 12;
    const sim::RngKey key{options.seed.value_or(0), static_cast<std::uint64_t>(step), info.tensor_id};
    BlockStepAudit step_audit = audit_block_step(fmt, options.policy, key, shape, w, u, w_next);
    AuditCounts& counts = audit.counts[t][k];
    counts += step_audit.counts;
    audit.inconsistent += static_cast<std::int64_t>(step_audit.differing.size());
    const std::string reason = std::string("the ") + sim::policy_name(options.policy.policy) + " block write-back" +
                               (sr ? " replayed from seed " + std::to_string(*options.seed) : std::string());
    for (const std::int64_t i : step_audit.differing) {
      if (audit.listed.size() >= options.max_listed) {
        break;
      }
      const auto j = static_cast<std::size_t>(i);
      const float e = step_audit.expected[j];
      audit.listed.push_back(
          {info.name, step, i, w[j], u[j], w_next[j], e, e,
           reason + " gives " + util::float_text(e) + ", the trajectory holds " + util::float_text(w_next[j])});
    }
    const bool chains = info.has_w_next && k + 1 < T && source.steps[k + 1] == step + 1;
    if (info.has_w_next && k + 1 < T && !chains) {
      ++audit.chain_unchecked_steps;
    }
    if (chains) {
      check_block_chain(source, StepCheck{info, options, step, ""}, t, k, w_next, audit.counts[t][k], audit);
    }
    audit.coordinates += static_cast<std::int64_t>(n);
  }
}

}  // namespace wbaudit::audit
