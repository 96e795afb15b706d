#include "audit/trajectory_audit.hpp"

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

#include "audit/block_audit.hpp"
#include "sim/precision/audit.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/trace/block_reference.hpp"
#include "util/text.hpp"

namespace wbaudit::audit {

AuditCounts& AuditCounts::operator+=(const AuditCounts& o) {
  nonzero += o.nonzero;
  erased += o.erased;
  saturated += o.saturated;
  applied += o.applied;
  inconsistent += o.inconsistent;
  nearest_erased += o.nearest_erased;
  sr_truncated += o.sr_truncated;
  replay_mismatched += o.replay_mismatched;
  chain_breaks += o.chain_breaks;
  block += o.block;
  return *this;
}

namespace {

// Slices are a fixed number of coordinates, so the work split (and every result) is independent of the thread count.
constexpr std::int64_t kSlice = 1 << 15;

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

namespace {

// The per-tensor formats, and the declared groups' names, ids, sizes and member tensors, into audit.
std::vector<std::vector<std::size_t>> set_up_groups(const TrajectorySource& source,
                                                    const TrajectoryAuditOptions& options,
                                                    std::vector<sim::FormatSpec>& formats, TrajectoryAudit& audit) {
  const std::string file = source.path.string();
  const bool block_format = sim::is_block_storage_name(options.format);
  std::map<std::string, std::size_t> index_of;
  std::uint32_t next_id = 0;
  for (std::size_t t = 0; t < source.tensors.size(); ++t) {
    const TrajectoryTensor& info = source.tensors[t];
    // Block formats are audited per tensor by audit_block_tensor, which reads its format itself.
    formats.push_back(block_format ? sim::FormatSpec{} : tensor_format(options.format, info, file));
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
      if (it == index_of.end() || it->second >= source.tensors.size()) {
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
  return members;
}

// The chunks of a trajectory in audit order (tensor, step, coordinate range), read into two sets of buffers (24 bytes
// per coordinate of the chunk): while one chunk is audited, one of the kernel's threads reads the next (`ahead`,
// through sim::replay_writeback's `alongside`). Errors of that read are raised when its chunk's turn comes, so they
// surface in the same order as with reading chunk by chunk. Without w_next, a row that fits in one chunk is read
// once: w[t+1] of step k is w[t] of step k + 1.
class ChunkReader {
 public:
  struct Rows {
    std::vector<float> w, u, w_next;
  };
  ChunkReader(TrajectorySource& source, std::int64_t chunk) : m_source(source), m_chunk(chunk) {}

  // Makes cur() hold chunk (t, k, begin); adds its reading time and bytes to audit.
  void load(std::size_t t, std::size_t k, std::int64_t begin, TrajectoryAudit& audit) {
    const bool reuse = reuses_row(t, k);
    if (m_ahead_ready) {
      m_ahead_ready = false;
      if (m_ahead_error) {
        std::rethrow_exception(m_ahead_error);
      }
      if (reuse) {
        std::swap(m_ahead.w, m_cur.w_next);
      }
      std::swap(m_cur, m_ahead);
      audit.read_seconds += m_ahead_seconds;
      audit.bytes_read += m_ahead_bytes;
      return;
    }
    if (reuse) {
      std::swap(m_cur.w, m_cur.w_next);
    }
    audit.read_seconds += read_rows(t, k, begin, m_cur, audit.bytes_read);
  }
  // A function that reads the chunk after (t, k, begin) into the other buffers (empty after the last chunk).
  std::function<void()> reader_of_next(std::size_t t, std::size_t k, std::int64_t begin) {
    std::size_t nt = t, nk = k;
    std::int64_t nb = begin + m_chunk;
    if (nb >= m_source.tensors[t].size) {
      nb = 0;
      if (++nk == m_source.steps.size()) {
        nk = 0;
        ++nt;
      }
    }
    if (nt >= m_source.tensors.size()) {
      return {};
    }
    return [this, nt, nk, nb] {
      m_ahead_error = nullptr;
      m_ahead_bytes = 0;
      try {
        m_ahead_seconds = read_rows(nt, nk, nb, m_ahead, m_ahead_bytes);
      } catch (...) {
        m_ahead_error = std::current_exception();
      }
      m_ahead_ready = true;
    };
  }
  bool ahead_ready() const { return m_ahead_ready; }
  const Rows& cur() const { return m_cur; }

 private:
  bool reuses_row(std::size_t t, std::size_t k) const {
    const TrajectoryTensor& info = m_source.tensors[t];
    return !info.has_w_next && k > 0 && info.size <= m_chunk;
  }
  // Reads the chunk (t, k, begin) into r (not r.w where the row is reused); returns seconds, adds to bytes.
  double read_rows(std::size_t t, std::size_t k, std::int64_t begin, Rows& r, std::int64_t& bytes) {
    const auto count = static_cast<std::size_t>(std::min(m_chunk, m_source.tensors[t].size - begin));
    const bool reuse = reuses_row(t, k);
    if (!reuse) {
      r.w.resize(count);
    }
    r.u.resize(count);
    r.w_next.resize(count);
    const auto t0 = std::chrono::steady_clock::now();
    m_source.read(t, k, begin, reuse ? std::span<float>() : std::span<float>(r.w), r.u, r.w_next);
    bytes += static_cast<std::int64_t>(count) * (reuse ? 8 : 12);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  TrajectorySource& m_source;
  std::int64_t m_chunk;
  Rows m_cur, m_ahead;
  bool m_ahead_ready = false;
  std::exception_ptr m_ahead_error;
  double m_ahead_seconds = 0;
  std::int64_t m_ahead_bytes = 0;
};

// What one exact audit of a chunk needs to know besides its values.
struct ChunkContext {
  const TrajectorySource& source;
  const TrajectoryAuditOptions& options;
  const sim::FormatSpec& format;
  const TrajectoryTensor& info;
  std::int64_t step;
  std::int64_t begin;
};

// SR with a seed: where w[t+1] passed the neighbour check, it must be the neighbour the run's draw gives.
void check_replay(const ChunkContext& ctx, const sim::FormatParams& params, std::size_t lo, std::span<const float> ws,
                  std::span<const float> us, std::span<const float> ns, const std::vector<bool>& already,
                  std::size_t room, SliceResult& r) {
  const sim::RngKey key{*ctx.options.seed, static_cast<std::uint64_t>(ctx.step), ctx.info.tensor_id};
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (already[i]) {
      continue;
    }
    const std::uint64_t coordinate = static_cast<std::uint64_t>(ctx.begin) + lo + i;
    const float drawn = sim::writeback_value(params, ctx.options.policy, key, coordinate, ws[i], us[i]).value;
    if (drawn == ns[i]) {  // values compare: +0 == -0
      continue;
    }
    ++r.counts.inconsistent;
    ++r.counts.replay_mismatched;
    if (r.listed.size() < room) {
      r.listed.push_back(
          {ctx.info.name, ctx.step, static_cast<std::int64_t>(coordinate), ws[i], us[i], ns[i], drawn, drawn,
           "replay mismatch: w[t+1] = " + util::float_text(ns[i]) + " is an SR neighbour, but the draw of seed " +
               std::to_string(*ctx.options.seed) + " (step, tensor, coordinate) gives " + util::float_text(drawn)});
    }
  }
}

// The coordinate-by-coordinate audit of one slice of a chunk (sim::audit_writeback: the neighbour check, with a
// reason for every mismatch), w[t] checked to be a stored value, and the SR replay when the seed is known.
SliceResult audit_slice(const ChunkContext& ctx, const sim::FormatParams& params, std::size_t lo,
                        std::span<const float> ws, std::span<const float> us, std::span<const float> ns,
                        std::size_t room) {
  SliceResult r;
  sim::AuditReport report;
  try {
    report = sim::audit_writeback(ctx.format, ctx.options.policy, ws, us, ns, ctx.info.tensor_id,
                                  static_cast<std::uint64_t>(ctx.step));
  } catch (const sim::NonFiniteError&) {
    for (std::size_t i = 0; i < ws.size(); ++i) {
      if (!std::isfinite(ws[i]) || !std::isfinite(us[i]) || !std::isfinite(ns[i])) {
        r.error = ctx.source.path.string() + ": tensor " + ctx.info.name + ", step " + std::to_string(ctx.step) +
                  ", coordinate " + std::to_string(ctx.begin + static_cast<std::int64_t>(lo + i)) +
                  ": non-finite value (w = " + util::float_text(ws[i]) + ", u = " + util::float_text(us[i]) +
                  ", w_next = " + util::float_text(ns[i]) +
                  "); NaN/inf proposals or weights are an error, not an event";
        break;
      }
    }
    return r;
  }
  r.counts.nonzero = report.counts.nonzero;
  r.counts.erased = report.counts.erased;
  r.counts.saturated = report.counts.saturated;
  r.counts.applied = report.counts.applied;
  r.counts.nearest_erased = report.nearest_erased;
  r.counts.sr_truncated = report.counts.sr_truncated;
  std::vector<bool> already(ws.size(), false);  // inconsistent already (not replayed again)
  auto bad = report.inconsistencies.begin();
  for (std::size_t i = 0; i < ws.size(); ++i) {
    while (bad != report.inconsistencies.end() && bad->coordinate < i) {
      ++bad;
    }
    const bool listed_already = bad != report.inconsistencies.end() && bad->coordinate == i;
    // w[t] must itself be a stored value of the format (audit_writeback checks w[t+1]).
    const double wd = ws[i];
    const bool w_ok = std::fabs(wd) <= params.max_finite && sim::round_nearest(params, wd) == wd;
    if (w_ok && !listed_already) {
      continue;
    }
    already[i] = true;
    ++r.counts.inconsistent;
    if (r.listed.size() < room) {
      InconsistentCoordinate c{ctx.info.name, ctx.step, ctx.begin + static_cast<std::int64_t>(lo + i),
                               ws[i],         us[i],    ns[i],
                               ns[i],         ns[i],    ""};
      if (listed_already) {
        c.expected_low = bad->allowed_low;
        c.expected_high = bad->allowed_high;
        c.reason = bad->reason;
      }
      if (!w_ok) {
        c.reason = "w[t] = " + util::float_text(ws[i]) + " is not representable in " + ctx.options.format +
                   (c.reason.empty() ? "" : "; " + c.reason);
      }
      r.listed.push_back(std::move(c));
    }
  }
  const sim::Policy policy = ctx.options.policy.policy;
  if (ctx.options.seed && (policy == sim::Policy::stochastic || policy == sim::Policy::deadzone_sr)) {
    check_replay(ctx, params, lo, ws, us, ns, already, room, r);
  }
  return r;
}

// The exact audit of the chunk in `rows`, slices in parallel (a fixed slice size: results independent of the thread
// count), merged into counts and the audit's list.
void audit_chunk_exact(const ChunkContext& ctx, const ChunkReader::Rows& rows, AuditCounts& counts,
                       TrajectoryAudit& audit) {
  const sim::FormatParams params = sim::format_params(ctx.format);
  const auto count = static_cast<std::int64_t>(rows.u.size());
  const std::int64_t n_slices = (count + kSlice - 1) / kSlice;
  std::vector<SliceResult> slices(static_cast<std::size_t>(n_slices));
  const std::size_t room =
      ctx.options.max_listed > audit.listed.size() ? ctx.options.max_listed - audit.listed.size() : 0;
  Kokkos::parallel_for("wbaudit::audit::audit_trajectory::slices",
                       Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, n_slices), [&](const std::int64_t s) {
                         const std::size_t lo = static_cast<std::size_t>(s * kSlice);
                         const std::size_t n = static_cast<std::size_t>(std::min(kSlice, count - s * kSlice));
                         slices[static_cast<std::size_t>(s)] =
                             audit_slice(ctx, params, lo, std::span<const float>(rows.w.data() + lo, n),
                                         std::span<const float>(rows.u.data() + lo, n),
                                         std::span<const float>(rows.w_next.data() + lo, n), room);
                       });
  Kokkos::fence();
  for (SliceResult& r : slices) {
    if (!r.error.empty()) {
      throw std::runtime_error(r.error);
    }
    counts += r.counts;
    audit.inconsistent += r.counts.inconsistent;
    for (auto& entry : r.listed) {
      if (audit.listed.size() < ctx.options.max_listed) {
        audit.listed.push_back(std::move(entry));
      }
    }
  }
}

// Where w[t+1] is stored apart from w (w_next) and the next recorded step is t + 1: w[t+1] must be the w recorded at
// t + 1 (the trajectory chains). Reads that w (the extra read of this check) and counts each differing coordinate.
void check_chain(TrajectorySource& source, const ChunkContext& ctx, std::size_t t, std::size_t k,
                 const std::vector<float>& w_next, AuditCounts& counts, TrajectoryAudit& audit) {
  std::vector<float> next_w(w_next.size());
  source.read(t, k + 1, ctx.begin, next_w, std::span<float>(), std::span<float>());
  audit.bytes_read += static_cast<std::int64_t>(next_w.size()) * 4;
  audit.chain_checked += static_cast<std::int64_t>(next_w.size());
  for (std::size_t i = 0; i < next_w.size(); ++i) {
    if (next_w[i] == w_next[i] || (std::isnan(next_w[i]) && std::isnan(w_next[i]))) {
      continue;
    }
    ++counts.inconsistent;
    ++counts.chain_breaks;
    ++audit.inconsistent;
    if (audit.listed.size() < ctx.options.max_listed) {
      audit.listed.push_back({ctx.info.name, ctx.step, ctx.begin + static_cast<std::int64_t>(i), w_next[i], 0.0f,
                              w_next[i], next_w[i], next_w[i],
                              "the trajectory does not chain: w[t+1] recorded after step " + std::to_string(ctx.step) +
                                  " is " + util::float_text(w_next[i]) + ", the w recorded at step " +
                                  std::to_string(ctx.step + 1) + " is " + util::float_text(next_w[i])});
    }
  }
}

}  // namespace

TrajectoryAudit audit_trajectory(TrajectorySource& source, const TrajectoryAuditOptions& options) {
  using Clock = std::chrono::steady_clock;
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
  std::vector<sim::FormatSpec> formats;
  const auto members = set_up_groups(source, options, formats, audit);
  const std::size_t n_tensors = source.tensors.size(), T = source.steps.size();
  audit.counts.assign(audit.groups.size(), std::vector<AuditCounts>(T));
  ChunkReader reader(source, options.chunk);
  const auto start = Clock::now();
  const bool block_format = sim::is_block_storage_name(options.format);
  for (std::size_t t = 0; block_format && t < n_tensors; ++t) {
    audit_block_tensor(source, options, t, audit);
  }
  for (std::size_t t = 0; !block_format && t < n_tensors; ++t) {
    const TrajectoryTensor& info = source.tensors[t];
    // Without w_next, w[t+1] is row k + 1 of w itself: once the fast path has found row k + 1 equal, coordinate by
    // coordinate, to the write-back's output (a stored value of the format by construction), that row needs no
    // second representability check as the next step's w[t]. One flag per chunk of this tensor.
    std::vector<char> next_row_stored(static_cast<std::size_t>((info.size + options.chunk - 1) / options.chunk), 0);
    for (std::size_t k = 0; k < T; ++k) {
      const std::int64_t step = source.steps[k];
      const bool chains = info.has_w_next && k + 1 < T && source.steps[k + 1] == step + 1;
      if (info.has_w_next && k + 1 < T && !chains) {
        ++audit.chain_unchecked_steps;
      }
      for (std::int64_t begin = 0; begin < info.size; begin += options.chunk) {
        char& row_stored = next_row_stored[static_cast<std::size_t>(begin / options.chunk)];
        const bool w_known_stored = !info.has_w_next && k > 0 && row_stored;
        row_stored = 0;
        reader.load(t, k, begin, audit);
        const ChunkReader::Rows& rows = reader.cur();
        std::function<void()> read_ahead = reader.reader_of_next(t, k, begin);
        const ChunkContext ctx{source, options, formats[t], info, step, begin};
        AuditCounts fast;
        const bool fast_ok = audit_chunk_fast(formats[t], options, info.tensor_id, step, begin, rows.w, rows.u,
                                              rows.w_next, w_known_stored, fast, read_ahead);
        if (read_ahead && !reader.ahead_ready()) {
          read_ahead();  // the fast path did not run (SR without a seed)
        }
        if (fast_ok) {
          row_stored = 1;
          audit.counts[t][k] += fast;
        } else {
          audit_chunk_exact(ctx, rows, audit.counts[t][k], audit);
        }
        if (chains) {
          check_chain(source, ctx, t, k, rows.w_next, audit.counts[t][k], audit);
        }
        audit.coordinates += static_cast<std::int64_t>(rows.u.size());
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
    if (sim::is_block_storage_name(audit.format)) {  // the causes by step, as a block target's trace holds them
      group.block_format = audit.format;
      group.block_events.blocks = audit.counts[g].empty() ? 0 : audit.counts[g].front().block.blocks;
      for (const AuditCounts& c : audit.counts[g]) {
        sim::append_block_events(group.block_events, c.block);
      }
    }
    trace.groups.push_back(std::move(group));
  }
  return trace;
}

}  // namespace wbaudit::audit
