// The audit of a trajectory held in a block-scaled format (docs/formats.md, "Block-scaled formats"; issue 29): each
// recorded write-back of a tensor is recomputed whole (a block's scale, and NVFP4's tensor scale, depend on the whole
// block or tensor of v = w + u), from w[t] and u[t] under the claimed policy with the run's SR key, and every
// coordinate of w[t+1] must equal the recomputed value.
#include "audit/block_audit.hpp"

#include <cmath>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/precision/block_writeback.hpp"

namespace wbaudit::audit {

namespace {

std::string value_text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// Rows and columns of a tensor for its blocks: the last dimension is a row, the others are flattened into rows.
sim::RowMajorShape block_shape(const TrajectoryTensor& info, const std::string& format, const std::string& file) {
  if (info.shape.empty()) {
    throw TrajectoryError(file + ": tensor " + info.name + ": block format " + format +
                          " needs the tensor's shape (attribute \"shape\" of /tensors/" + info.name +
                          ", or \"shape\" in trajectory.json's tensors): its blocks run along the last dimension");
  }
  sim::RowMajorShape shape;
  shape.cols = info.shape.back();
  shape.rows = info.size / shape.cols;
  return shape;
}

// The realized events of one write-back, compared with the recomputed one: counts of the trajectory's own values,
// the causes of the recomputation, and every coordinate whose w[t+1] is not the recomputed value.
struct StepCheck {
  const TrajectoryTensor& info;
  const TrajectoryAuditOptions& options;
  std::int64_t step;
  std::string reason;   // why a differing coordinate is inconsistent
  bool replay = false;  // SR draws replayed: a differing coordinate is also a replay mismatch
};

void compare_step(const StepCheck& check, const std::vector<float>& w, const std::vector<float>& u,
                  const std::vector<float>& w_next, const std::vector<float>& expected, AuditCounts& counts,
                  TrajectoryAudit& audit) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    const bool moved = w_next[i] != w[i];
    if (u[i] != 0.0f) {
      ++counts.nonzero;
      ++(moved ? counts.applied : counts.erased);
    }
    if (w_next[i] == expected[i]) {  // decoded values: +0 == -0
      continue;
    }
    ++counts.inconsistent;
    counts.replay_mismatched += check.replay ? 1 : 0;
    ++audit.inconsistent;
    if (audit.listed.size() < check.options.max_listed) {
      audit.listed.push_back(
          {check.info.name, check.step, static_cast<std::int64_t>(i), w[i], u[i], w_next[i], expected[i], expected[i],
           check.reason + " gives " + value_text(expected[i]) + ", the trajectory holds " + value_text(w_next[i])});
    }
  }
}

sim::BlockWritebackCounts recompute(const sim::BlockFormatSpec& fmt, const sim::WritebackPolicy& policy,
                                    const sim::RngKey& key, const sim::RowMajorShape& shape, std::vector<float>& w,
                                    const std::vector<float>& u) {
  const Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> wv(w.data(), w.size());
  const Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> uv(u.data(), u.size());
  return sim::block_writeback(Kokkos::DefaultHostExecutionSpace(), fmt, policy, key, shape, wv, uv);
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
               value_text(w_next[i]) + ", the w recorded at step " + std::to_string(check.step + 1) + " is " +
               value_text(next_w[i])});
    }
  }
}

}  // namespace

void audit_block_tensor(TrajectorySource& source, const TrajectoryAuditOptions& options, std::size_t t,
                        TrajectoryAudit& audit) {
  const TrajectoryTensor& info = source.tensors[t];
  const std::string file = source.path.string();
  const sim::BlockFormatSpec fmt = sim::block_format_from_name(options.format);
  const sim::RowMajorShape shape = block_shape(info, options.format, file);
  const bool sr = options.policy.policy != sim::Policy::nearest;
  if (sr && !options.seed) {
    throw std::invalid_argument(file + ": policy " + sim::policy_name(options.policy.policy) + " in block format " +
                                options.format +
                                " is audited by replaying the run's draws: give its seed (--seed, or the trajectory's "
                                "seed attribute)");
  }
  const auto n = static_cast<std::size_t>(info.size);
  std::vector<float> w(n), u(n), w_next(n), expected(n);
  const std::size_t T = source.steps.size();
  for (std::size_t k = 0; k < T; ++k) {
    const std::int64_t step = source.steps[k];
    source.read(t, k, 0, w, u, w_next);  // without w_next: row k + 1 of w
    audit.bytes_read += static_cast<std::int64_t>(n) * 12;
    const sim::RngKey key{options.seed.value_or(0), static_cast<std::uint64_t>(step), info.tensor_id};
    AuditCounts& counts = audit.counts[t][k];
    expected = w;
    counts.block = recompute(fmt, options.policy, key, shape, expected, u);
    counts.saturated = counts.block.saturated;
    counts.sr_truncated = counts.block.sr_truncated;
    if (options.policy.policy == sim::Policy::nearest) {
      counts.nearest_erased = counts.block.erased;
    } else {
      std::vector<float> nearest = w;
      counts.nearest_erased = recompute(fmt, sim::WritebackPolicy{}, key, shape, nearest, u).erased;
    }
    const std::string reason = std::string("the ") + sim::policy_name(options.policy.policy) + " block write-back" +
                               (sr ? " replayed from seed " + std::to_string(*options.seed) : std::string());
    compare_step(StepCheck{info, options, step, reason, sr}, w, u, w_next, expected, counts, audit);
    const bool chains = info.has_w_next && k + 1 < T && source.steps[k + 1] == step + 1;
    if (info.has_w_next && k + 1 < T && !chains) {
      ++audit.chain_unchecked_steps;
    }
    if (chains) {
      check_block_chain(source, StepCheck{info, options, step, "", false}, t, k, w_next, counts, audit);
    }
    audit.coordinates += static_cast<std::int64_t>(n);
  }
}

}  // namespace wbaudit::audit
