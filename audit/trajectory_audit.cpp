#include "audit/trajectory_audit.hpp"

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

#include "sim/precision/audit.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"

namespace wbaudit::audit {

AuditCounts& AuditCounts::operator+=(const AuditCounts& o) {
  nonzero += o.nonzero;
  erased += o.erased;
  saturated += o.saturated;
  applied += o.applied;
  inconsistent += o.inconsistent;
  nearest_erased += o.nearest_erased;
  sr_truncated += o.sr_truncated;
  return *this;
}

namespace {

// Slices are a fixed number of coordinates, so the work split (and every result) is independent of the thread count.
constexpr std::int64_t kSlice = 1 << 15;

std::string text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

sim::FormatSpec tensor_format(const std::string& name, const TrajectoryTensor& t, const std::string& file) {
  sim::FormatSpec fmt = sim::format_from_name(name);
  if (fmt.kind == sim::FormatKind::integer) {
    if (!t.scale) {
      throw TrajectoryError(file + ": tensor " + t.name + ": format " + name +
                            " needs the tensor's scale (attribute \"scale\" of /tensors/" + t.name +
                            ", or \"scale\" in trajectory.json)");
    }
    const auto s = static_cast<float>(*t.scale);
    if (static_cast<double>(s) != *t.scale) {
      throw TrajectoryError(file + ": tensor " + t.name + ": scale " + std::to_string(*t.scale) +
                            " is not an fp32 value");
    }
    fmt = sim::int_format(fmt.bits, s);
  }
  return fmt;
}

struct SliceResult {
  AuditCounts counts;
  std::vector<InconsistentCoordinate> listed;
  std::string error;  // a non-finite value (the exception of sim::audit_writeback, with global coordinates)
};

// The vectorized fast path of one chunk (sim::replay_writeback): w[t] re-rounded unless already verified, w[t+1]
// recomputed under nearest and the claimed policy replayed from the run's seed, compared with the realized w[t+1], in
// one pass. When every coordinate matches, the replay's counts are the realized counts. Returns false (the caller
// then runs the coordinate-by-coordinate audit, which finds and explains every mismatch) when anything differs or is
// not finite, or when SR has no seed to replay.
bool audit_chunk_fast(const sim::FormatSpec& fmt, const TrajectoryAuditOptions& options, std::uint32_t tensor_id,
                      std::int64_t step, std::int64_t begin, std::span<const float> w, std::span<const float> u,
                      std::span<const float> w_next, bool w_known_stored, AuditCounts& counts,
                      const std::function<void()>& alongside) {
  using Space = Kokkos::DefaultHostExecutionSpace;
  using ConstVector = Kokkos::View<const float*, Space::memory_space, Kokkos::MemoryUnmanaged>;
  const bool nearest_policy = options.policy.policy == sim::Policy::nearest;
  if (!nearest_policy && !options.seed) {
    return false;
  }
  const sim::RngKey key{nearest_policy ? 0 : *options.seed, nearest_policy ? 0 : static_cast<std::uint64_t>(step),
                        tensor_id};
  const sim::ReplayReport r = sim::replay_writeback(
      Space(), fmt, options.policy, key, ConstVector(w.data(), w.size()), ConstVector(u.data(), u.size()),
      ConstVector(w_next.data(), w_next.size()), static_cast<std::uint64_t>(begin), w_known_stored, alongside);
  if (r.mismatched != 0) {
    return false;
  }
  counts.nonzero = r.counts.nonzero;
  counts.erased = r.counts.erased;
  counts.saturated = r.counts.saturated;
  counts.applied = r.counts.applied;
  counts.sr_truncated = r.counts.sr_truncated;
  counts.nearest_erased = r.nearest_erased;
  counts.inconsistent = 0;
  return true;
}

}  // namespace

TrajectoryAudit audit_trajectory(TrajectorySource& source, const TrajectoryAuditOptions& options) {
  using Clock = std::chrono::steady_clock;
  const std::string file = source.path.string();
  if (options.chunk <= 0) {
    throw std::invalid_argument("audit: chunk must be positive, got " + std::to_string(options.chunk));
  }
  if (options.policy.policy == sim::Policy::master) {
    throw std::invalid_argument(
        "audit: policy master cannot be audited from w and u alone (the fp32 master copy is not part of the "
        "trajectory)");
  }
  TrajectoryAudit audit;
  audit.format = options.format;
  audit.policy = options.policy;
  audit.steps = source.steps;
  const std::size_t n_tensors = source.tensors.size(), T = source.steps.size();
  std::vector<sim::FormatSpec> formats;
  std::map<std::string, std::size_t> index_of;
  std::uint32_t next_id = 0;
  for (std::size_t t = 0; t < n_tensors; ++t) {
    const TrajectoryTensor& info = source.tensors[t];
    formats.push_back(tensor_format(options.format, info, file));
    audit.groups.push_back(info.name);
    audit.tensor_ids.push_back(info.tensor_id);
    audit.sizes.push_back(info.size);
    index_of[info.name] = t;
    next_id = std::max(next_id, info.tensor_id + 1);
  }
  std::vector<std::vector<std::size_t>> members;
  for (const auto& [name, tensors] : options.groups) {
    if (index_of.count(name)) {
      throw std::invalid_argument("audit: group " + name + " has the name of a tensor");
    }
    std::vector<std::size_t> m;
    std::int64_t size = 0;
    for (const std::string& tensor : tensors) {
      const auto it = index_of.find(tensor);
      if (it == index_of.end() || it->second >= n_tensors) {
        std::string known;
        for (const auto& t : source.tensors) {
          known += (known.empty() ? "" : ", ") + t.name;
        }
        throw std::invalid_argument("audit: group " + name + ": unknown tensor \"" + tensor + "\" (tensors: " + known +
                                    ")");
      }
      m.push_back(it->second);
      size += source.tensors[it->second].size;
    }
    index_of[name] = audit.groups.size();
    audit.groups.push_back(name);
    audit.tensor_ids.push_back(next_id++);
    audit.sizes.push_back(size);
    members.push_back(std::move(m));
  }
  audit.counts.assign(audit.groups.size(), std::vector<AuditCounts>(T));

  // Two sets of chunk buffers (24 bytes per coordinate of the chunk): while one chunk is audited, one of the
  // kernel's threads reads the next into `ahead` (sim::replay_writeback's `alongside`). Errors of that read are
  // raised when its chunk's turn comes, so they surface in the same order as with reading chunk by chunk.
  struct Rows {
    std::vector<float> w, u, w_next;
  };
  Rows cur, ahead;
  bool ahead_ready = false;
  std::exception_ptr ahead_error;
  double ahead_seconds = 0;
  std::int64_t ahead_bytes = 0;
  // Without w_next, a row that fits in one chunk is read once: w[t+1] of step k is w[t] of step k + 1.
  auto reuses_row = [&](std::size_t t, std::size_t k) {
    const TrajectoryTensor& info = source.tensors[t];
    return !info.has_w_next && k > 0 && info.size <= options.chunk;
  };
  // Reads the chunk (t, k, begin) into r (not r.w where the row is reused); returns seconds, adds to bytes.
  auto read_rows = [&](std::size_t t, std::size_t k, std::int64_t begin, Rows& r, std::int64_t& bytes) {
    const auto count = static_cast<std::size_t>(std::min(options.chunk, source.tensors[t].size - begin));
    const bool reuse = reuses_row(t, k);
    if (!reuse) {
      r.w.resize(count);
    }
    r.u.resize(count);
    r.w_next.resize(count);
    const auto t0 = Clock::now();
    source.read(t, k, begin, reuse ? std::span<float>() : std::span<float>(r.w), r.u, r.w_next);
    bytes += static_cast<std::int64_t>(count) * (reuse ? 8 : 12);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<float>&w = cur.w, &u = cur.u, &w_next = cur.w_next;
  std::vector<SliceResult> slices;
  const auto start = Clock::now();
  for (std::size_t t = 0; t < n_tensors; ++t) {
    const TrajectoryTensor& info = source.tensors[t];
    const sim::FormatParams params = sim::format_params(formats[t]);
    // Without w_next, w[t+1] is row k + 1 of w itself: once the fast path has found row k + 1 equal, coordinate by
    // coordinate, to the write-back's output (a stored value of the format by construction), that row needs no
    // second representability check as the next step's w[t]. One flag per chunk of this tensor.
    std::vector<char> next_row_stored(static_cast<std::size_t>((info.size + options.chunk - 1) / options.chunk), 0);
    for (std::size_t k = 0; k < T; ++k) {
      const std::int64_t step = source.steps[k];
      for (std::int64_t begin = 0; begin < info.size; begin += options.chunk) {
        char& row_stored = next_row_stored[static_cast<std::size_t>(begin / options.chunk)];
        const bool w_known_stored = !info.has_w_next && k > 0 && row_stored;
        row_stored = 0;
        const std::int64_t count = std::min(options.chunk, info.size - begin);
        const bool reuse_row = reuses_row(t, k);
        if (ahead_ready) {
          ahead_ready = false;
          if (ahead_error) {
            std::rethrow_exception(ahead_error);
          }
          if (reuse_row) {
            std::swap(ahead.w, cur.w_next);
          }
          std::swap(cur, ahead);
          audit.read_seconds += ahead_seconds;
          audit.bytes_read += ahead_bytes;
        } else {
          if (reuse_row) {
            std::swap(cur.w, cur.w_next);
          }
          audit.read_seconds += read_rows(t, k, begin, cur, audit.bytes_read);
        }
        // The next chunk in the order of the loops, if any.
        std::size_t nt = t, nk = k;
        std::int64_t nb = begin + options.chunk;
        if (nb >= info.size) {
          nb = 0;
          if (++nk == T) {
            nk = 0;
            ++nt;
          }
        }
        std::function<void()> read_ahead;
        if (nt < n_tensors) {
          read_ahead = [&, nt, nk, nb] {
            ahead_error = nullptr;
            ahead_bytes = 0;
            try {
              ahead_seconds = read_rows(nt, nk, nb, ahead, ahead_bytes);
            } catch (...) {
              ahead_error = std::current_exception();
            }
            ahead_ready = true;
          };
        }
        AuditCounts fast;
        const bool fast_ok = audit_chunk_fast(formats[t], options, info.tensor_id, step, begin, w, u, w_next,
                                              w_known_stored, fast, read_ahead);
        if (read_ahead && !ahead_ready) {
          read_ahead();  // the fast path did not run (SR without a seed)
        }
        if (fast_ok) {
          row_stored = 1;
          audit.counts[t][k] += fast;
          audit.coordinates += count;
          continue;
        }
        const std::int64_t n_slices = (count + kSlice - 1) / kSlice;
        slices.assign(static_cast<std::size_t>(n_slices), SliceResult{});
        const std::size_t room =
            options.max_listed > audit.listed.size() ? options.max_listed - audit.listed.size() : 0;
        Kokkos::parallel_for(
            "wbaudit::audit::audit_trajectory::slices",
            Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, n_slices), [&](const std::int64_t s) {
              SliceResult& r = slices[static_cast<std::size_t>(s)];
              const std::size_t lo = static_cast<std::size_t>(s * kSlice);
              const std::size_t n = static_cast<std::size_t>(std::min(kSlice, count - s * kSlice));
              const std::span<const float> ws(w.data() + lo, n), us(u.data() + lo, n), ns(w_next.data() + lo, n);
              sim::AuditReport report;
              try {
                report = sim::audit_writeback(formats[t], options.policy, ws, us, ns, info.tensor_id,
                                              static_cast<std::uint64_t>(step));
              } catch (const sim::NonFiniteError&) {
                for (std::size_t i = 0; i < n; ++i) {
                  if (!std::isfinite(ws[i]) || !std::isfinite(us[i]) || !std::isfinite(ns[i])) {
                    r.error = file + ": tensor " + info.name + ", step " + std::to_string(step) + ", coordinate " +
                              std::to_string(begin + static_cast<std::int64_t>(lo + i)) +
                              ": non-finite value (w = " + text(ws[i]) + ", u = " + text(us[i]) +
                              ", w_next = " + text(ns[i]) +
                              "); NaN/inf proposals or weights are an error, not an event";
                    break;
                  }
                }
                return;
              }
              r.counts.nonzero = report.counts.nonzero;
              r.counts.erased = report.counts.erased;
              r.counts.saturated = report.counts.saturated;
              r.counts.applied = report.counts.applied;
              r.counts.nearest_erased = report.nearest_erased;
              r.counts.sr_truncated = report.counts.sr_truncated;
              // w[t] must itself be a stored value of the format (audit_writeback checks w[t+1]).
              auto bad = report.inconsistencies.begin();
              for (std::size_t i = 0; i < n; ++i) {
                while (bad != report.inconsistencies.end() && bad->coordinate < i) {
                  ++bad;
                }
                const bool listed_already = bad != report.inconsistencies.end() && bad->coordinate == i;
                const double wd = ws[i];
                const bool w_ok = std::fabs(wd) <= params.max_finite && sim::round_nearest(params, wd) == wd;
                if (!w_ok || listed_already) {
                  ++r.counts.inconsistent;
                  if (r.listed.size() < room) {
                    InconsistentCoordinate c{info.name, step,  begin + static_cast<std::int64_t>(lo + i),
                                             ws[i],     us[i], ns[i],
                                             ns[i],     ns[i], ""};
                    if (listed_already) {
                      c.expected_low = bad->allowed_low;
                      c.expected_high = bad->allowed_high;
                      c.reason = bad->reason;
                    }
                    if (!w_ok) {
                      c.reason = "w[t] = " + text(ws[i]) + " is not representable in " + options.format +
                                 (c.reason.empty() ? "" : "; " + c.reason);
                    }
                    r.listed.push_back(std::move(c));
                  }
                }
              }
            });
        Kokkos::fence();
        AuditCounts& c = audit.counts[t][k];
        for (SliceResult& r : slices) {
          if (!r.error.empty()) {
            throw std::runtime_error(r.error);
          }
          c += r.counts;
          audit.inconsistent += r.counts.inconsistent;
          for (auto& entry : r.listed) {
            if (audit.listed.size() < options.max_listed) {
              audit.listed.push_back(std::move(entry));
            }
          }
        }
        audit.coordinates += count;
      }
    }
  }
  audit.elapsed_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::size_t g = 0; g < members.size(); ++g) {
    for (std::size_t k = 0; k < T; ++k) {
      for (std::size_t t : members[g]) {
        audit.counts[n_tensors + g][k] += audit.counts[t][k];
      }
    }
  }
  return audit;
}

sim::Trace audit_as_trace(const TrajectoryAudit& audit, const std::string& source_description) {
  sim::Trace trace;
  trace.mode = "target";
  trace.format = audit.format;
  trace.policy = sim::policy_name(audit.policy.policy);
  trace.steps = audit.steps.empty() ? 0 : audit.steps.back() + 1;
  nlohmann::json config = {{"source", "wbaudit audit"},
                           {"trajectory", source_description},
                           {"format", audit.format},
                           {"policy", trace.policy},
                           {"sr_bits", audit.policy.sr_bits}};
  if (audit.policy.stream != sim::SrStream::philox) {
    config["sr_stream"] = sim::sr_stream_name(audit.policy.stream);
  }
  trace.config_json = config.dump();
  trace.recorded_steps = audit.steps;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  trace.loss.assign(audit.steps.size(), nan);
  trace.learning_rate.assign(audit.steps.size(), nan);
  for (std::size_t g = 0; g < audit.groups.size(); ++g) {
    sim::GroupTrace group;
    group.name = audit.groups[g];
    group.tensor_id = audit.tensor_ids[g];
    group.size = audit.sizes[g];
    for (const AuditCounts& c : audit.counts[g]) {
      group.nonzero.push_back(c.nonzero);
      group.erased.push_back(c.erased);
      group.saturated.push_back(c.saturated);
      group.applied.push_back(c.applied);
      group.erased_fraction.push_back(c.nonzero == 0 ? nan
                                                     : static_cast<double>(c.erased) / static_cast<double>(c.nonzero));
    }
    trace.groups.push_back(std::move(group));
  }
  return trace;
}

}  // namespace wbaudit::audit
