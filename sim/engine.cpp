// The training engine (docs/engine.md): one loop for every model. The model supplies parameter tensors, gradients
// and losses; the engine owns the optimizer, the schedule, the write-back of every policy, event counting, the
// reference projection, recording, validation, checkpoints and replays.
#include "sim/engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "sim/checkpoint.hpp"
#include "sim/model_registry.hpp"
#include "sim/numeric_identity.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/trace/block_reference.hpp"
#include "sim/trace/expected_projection.hpp"
#include "sim/trace/margin_readout.hpp"
#include "sim/trace/reference_histograms.hpp"

namespace wbaudit::sim {

namespace {

template <class View>
std::vector<float> to_host(const View& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

template <class View>
void from_host(const View& v, const std::vector<float>& values) {
  const Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> h(values.data(), values.size());
  Kokkos::deep_copy(v, h);
}

[[noreturn]] void non_finite(const std::string& tensor, std::int64_t step, const std::string& detail) {
  throw std::runtime_error("run_cell: non-finite weight or proposal in tensor " + tensor + " at step " +
                           std::to_string(step) + (detail.empty() ? "" : " (" + detail + ")"));
}

double fraction(std::int64_t erased, std::int64_t nonzero) {
  return nonzero == 0 ? std::numeric_limits<double>::quiet_NaN()
                      : static_cast<double>(erased) / static_cast<double>(nonzero);
}

}  // namespace

FormatSpec tensor_format(const std::string& name, const std::vector<float>& values) {
  FormatSpec fmt = format_from_name(name);
  if (fmt.kind == FormatKind::integer) {
    double absmax = 0;
    for (float v : values) {
      absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
    }
    const int k = std::stoi(name.substr(3));
    fmt = int_format(k, int_scale_for_absmax(k, absmax));
  }
  return fmt;
}

TargetFormat target_format(const std::string& name, const std::vector<float>& values,
                           const std::vector<std::int64_t>& dims) {
  const StorageFormat storage = storage_format_from_name(name);
  TargetFormat t;
  if (!storage.block) {
    t.scalar = tensor_format(name, values);
    return t;
  }
  t.scalar = storage.scalar;
  t.block = true;
  t.blocks = storage.blocks;
  t.options = storage.options;
  t.shape = row_major_shape(dims);
  if (static_cast<std::size_t>(t.shape.size()) != values.size()) {
    throw std::invalid_argument("target_format: the tensor's shape holds " + std::to_string(t.shape.size()) +
                                " values, it has " + std::to_string(values.size()));
  }
  return t;
}

template <class ExecSpace>
std::unique_ptr<TrainableModel<ExecSpace>> make_model(const ExecSpace& space, const RunConfig& config) {
  return find_model(config.model.kind).make(space, config);
}

// ---------------------------------------------------------------------------------------------------------------
template <class ExecSpace>
Training<ExecSpace>::Training(const ExecSpace& space, const RunConfig& config)
    : m_space(space), m_config(config), m_model(make_model(space, config)), m_schedule_steps(config.steps) {
  const bool reference = config.mode == RunMode::reference;
  const int n = m_model->tensor_count();
  std::vector<std::int64_t> sizes;
  sizes.reserve(static_cast<std::size_t>(n));
  for (int t = 0; t < n; ++t) {
    sizes.push_back(static_cast<std::int64_t>(m_model->parameter(t).extent(0)));
  }
  m_optimizer = std::make_unique<Optimizer<ExecSpace>>(config.optimizer, sizes);
  m_recorded = recorded_steps(config.record, config.steps);
  m_policy =
      reference ? WritebackPolicy{} : make_policy(config.target.policy, config.target.sr_bits, config.target.sr_stream);

  Trace& trace = m_trace;
  trace.mode = reference ? "reference" : "target";
  trace.schema = trace_schema_for_mode(trace.mode);
  trace.format = reference ? "fp32" : config.target.format;
  trace.policy = reference ? "nearest" : config.target.policy;
  trace.seed = config.seed;
  trace.steps = config.steps;
  trace.config_json = to_json(config).dump();
  trace.numeric_contract = numeric_identity().contract();
  if (reference) {
    trace.margin = reference_margin_layout(config);
  }
  m_project_formats.resize(static_cast<std::size_t>(n));
  for (int t = 0; t < n; ++t) {
    GroupTrace g;
    g.name = m_model->tensor_name(t);
    g.tensor_id = static_cast<std::uint32_t>(t);
    g.size = sizes[t];
    m_proposals.emplace_back(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::Training::u"),
                             sizes[t]);
    const std::vector<float> init = to_host(m_model->parameter(t));
    if (reference) {
      double absmax = 0;
      for (float v : init) {
        absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
      }
      g.init_absmax = absmax;
      m_margin_formats.push_back(margin_formats(trace.margin, absmax));
      for (const std::string& name : config.project_formats) {
        m_project_formats[t].push_back(target_format(name, init, m_model->tensor_shape(t)));
        // Every series the trace will hold is declared now (a streaming writer creates its datasets from them).
        ProjectedSeries& series = g.projected[name];
        const TargetFormat& pf = m_project_formats[t].back();
        if (pf.block) {
          series = block_projection_header(pf.blocks, pf.shape);
        }
        for (const WritebackPolicy& policy : config.project_policies) {
          series.expected[projection_name(policy)];
        }
      }
    } else {
      const std::string name = storage_format_of(config.target.format, config.target.group_formats, g.name);
      m_target_formats.push_back(target_format(name, init, m_model->tensor_shape(t)));
      if (m_target_formats.back().block) {
        g.block_format = name;
        g.block_events.blocks = block_count(m_target_formats.back().blocks, m_target_formats.back().shape);
      }
      if (m_policy.policy == Policy::master) {
        m_masters.emplace_back(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::Training::master"),
                               sizes[t]);
        Kokkos::deep_copy(space, m_masters.back(), m_model->parameter(t));
      }
      hold_in_target_format(t, init);
    }
    trace.groups.push_back(std::move(g));
  }
  if (config.replay.checkpoints > 0) {
    trace.replay_steps = config.replay.steps;
    for (const std::string& policy : config.replay.policies) {
      trace.replays.push_back(
          ReplaySeries{config.replay.format, policy, config.replay.sr_bits, {}, config.replay.sr_stream});
    }
  }
  if (const auto optimum = m_model->optimal_validation_loss()) {
    trace.optimal_validation_loss = *optimum;
  }
  space.fence();
}

template <class ExecSpace>
Training<ExecSpace>::~Training() = default;

template <class ExecSpace>
bool Training<ExecSpace>::validation_due(std::int64_t step) const {
  const std::int64_t every = m_config.validation.every;
  return every > 0 && (step % every == 0 || step == m_config.steps);
}

template <class ExecSpace>
void Training<ExecSpace>::validate_now() {
  if (const auto loss = m_model->validation_loss(m_space)) {
    if (!std::isfinite(*loss)) {
      throw std::runtime_error("run_cell: validation loss is " + std::to_string(*loss) + " at step " +
                               std::to_string(m_step));
    }
    m_trace.validation_steps.push_back(m_step);
    m_trace.validation_loss.push_back(*loss);
  }
}

template <class ExecSpace>
void Training<ExecSpace>::step(const RunHooks& hooks) {
  using memory_space = typename ExecSpace::memory_space;
  using Vector = Kokkos::View<float*, memory_space>;
  const ExecSpace& space = m_space;
  const RunConfig& config = m_config;
  const bool reference = config.mode == RunMode::reference;
  const std::int64_t step = m_step;
  const int n = m_model->tensor_count();
  if (validation_due(step)) {
    validate_now();
  }
  const double loss = m_model->loss_and_gradient(space, step);
  if (!std::isfinite(loss)) {
    throw std::runtime_error("run_cell: training loss is " + std::to_string(loss) + " at step " + std::to_string(step));
  }
  const float lr = scheduled_learning_rate(config.schedule, config.optimizer.lr, step, m_schedule_steps);
  const bool record = m_next < m_recorded.size() && m_recorded[m_next] == step;
  for (int t = 0; t < n; ++t) {
    const Vector decay_source = m_masters.empty() ? m_model->parameter(t) : m_masters[t];
    m_optimizer->propose(space, t, step, lr, m_model->gradient(t), decay_source, m_proposals[t]);
  }
  std::vector<float> before;
  for (int t = 0; t < n; ++t) {
    const Vector w = m_model->parameter(t);
    const Kokkos::View<const float*, memory_space> u = m_proposals[t];
    if (hooks.on_update) {
      space.fence();
      before = to_host(w);
    }
    if (reference) {
      if (record) {
        record_reference(t, w, u, step);
      }
      fp32_update(t, w, u, step);
    } else {
      BlockWritebackCounts b;
      const WritebackCounts c = write_back(t, w, u, &b);
      if (record) {
        record_target(t, c, b);
      }
    }
    if (hooks.on_update) {
      space.fence();
      const std::vector<float> proposal = to_host(u), after = to_host(w);
      hooks.on_update(UpdateObservation{step, t, before, proposal, after});
    }
  }
  if (record) {
    m_trace.recorded_steps.push_back(step);
    m_trace.loss.push_back(loss);
    m_trace.learning_rate.push_back(static_cast<double>(lr));
    ++m_next;
  }
  ++m_step;
  flush_rows();
  if (record && hooks.on_recorded) {
    hooks.on_recorded(step);
  }
}

template <class ExecSpace>
void Training<ExecSpace>::record_reference(int t, Kokkos::View<const float*, memory_space> w,
                                           Kokkos::View<const float*, memory_space> u, std::int64_t step) {
  const ExecSpace& space = m_space;
  const RunConfig& config = m_config;
  const RatioHistogramLayout layout = m_trace.histogram;
  GroupTrace& g = m_trace.groups[t];
  // The d histogram and the margin histogram in one pass (reference_histograms.hpp), then the projected events
  // per declared format.
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible,
                "the reference recording reads w and u in host memory");
  const ReferenceHistograms h =
      reference_histograms(space, layout, m_trace.margin, m_margin_formats[t], w.data(), u.data(), w.extent(0));
  if (h.non_finite > 0) {
    non_finite(g.name, step, std::to_string(h.non_finite) + " coordinates");
  }
  g.ratio_histogram.insert(g.ratio_histogram.end(), h.ratio.begin(), h.ratio.end());
  g.margin.insert(g.margin.end(), h.margin.begin(), h.margin.end());
  g.nonzero.push_back(h.nonzero);
  g.zero_weight.push_back(h.zero_weight);
  if (g.size <= kJointExactMaxCoordinates) {
    g.exact_w.insert(g.exact_w.end(), w.data(), w.data() + w.extent(0));
    g.exact_u.insert(g.exact_u.end(), u.data(), u.data() + u.extent(0));
  }
  // Non-finite values were rejected above, so project_erasure sees finite inputs only.
  for (std::size_t f = 0; f < m_project_formats[t].size(); ++f) {
    const TargetFormat& pf = m_project_formats[t][f];
    ProjectedSeries& series = g.projected[config.project_formats[f]];
    if (pf.block) {
      // Block formats: the events of writing back q(w) + u blockwise under nearest, by cause, and the block sample
      // (block_reference.hpp, which the Python ReferenceRecorder records through too).
      const RngKey key{config.seed, static_cast<std::uint64_t>(step), static_cast<std::uint32_t>(t)};
      record_block_projection(space, pf.blocks, key, pf.shape, Kokkos::View<const float*, memory_space>(w), u, series);
      // The expected erased events of each declared stochastic policy (block_expected.hpp).
      record_expected_projections(space, pf.blocks, pf.shape, key, config.project_policies,
                                  Kokkos::View<const float*, memory_space>(w), u, series);
      continue;
    }
    // A format the margin histogram recorded with the same rounding: its erased count at s = 1 is whole counters of
    // the histogram (margin_readout.hpp); any other, an explicit projection pass.
    const int block = margin_block_of(m_trace.margin, m_margin_formats[t], pf.scalar);
    const std::int64_t erased =
        block >= 0 ? margin_erased_at_unit_scale(m_trace.margin, h.margin, static_cast<std::size_t>(block))
                   : project_erasure(space, pf.scalar, Kokkos::View<const float*, memory_space>(w), u).erased;
    series.erased.push_back(erased);
    series.fraction.push_back(fraction(erased, h.nonzero));  // u != 0: every coordinate is finite here
    // The expected erased fraction of each declared stochastic policy (expected_projection.hpp).
    record_expected_projections(space, pf.scalar, config.project_policies, Kokkos::View<const float*, memory_space>(w),
                                u, series);
  }
}

template <class ExecSpace>
void Training<ExecSpace>::fp32_update(int t, Kokkos::View<float*, memory_space> w,
                                      Kokkos::View<const float*, memory_space> u, std::int64_t step) {
  // The plain fp32 update w <- w + u, counting non-finite inputs.
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "wbaudit::sim::Training::fp32_update", Kokkos::RangePolicy<ExecSpace>(m_space, 0, w.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i, std::int64_t& count) {
        const float ui = u(i), wi = w(i);
        if (!std::isfinite(ui) || !std::isfinite(wi)) {
          ++count;
        } else {
          w(i) = wi + ui;
        }
      },
      bad);
  if (bad > 0) {
    non_finite(m_trace.groups[t].name, step, std::to_string(bad) + " coordinates");
  }
}

template <class ExecSpace>
void Training<ExecSpace>::record_target(int t, const WritebackCounts& c, const BlockWritebackCounts& b) {
  GroupTrace& g = m_trace.groups[t];
  g.nonzero.push_back(c.nonzero);
  g.erased.push_back(c.erased);
  g.saturated.push_back(c.saturated);
  g.applied.push_back(c.applied);
  g.erased_fraction.push_back(fraction(c.erased, c.nonzero));
  if (!g.block_events.empty()) {
    append_block_events(g.block_events, b);
  }
}

template <class ExecSpace>
void Training<ExecSpace>::flush_rows() {
  if (m_writer == nullptr) {
    return;
  }
  m_writer->append(m_trace);
  m_streamed = m_writer->rows();
}

template <class ExecSpace>
void Training<ExecSpace>::stream_to(TraceWriter* writer) {
  m_writer = writer;
  if (writer != nullptr) {
    m_streamed = writer->rows();
  }
}

template <class ExecSpace>
TraceRows Training<ExecSpace>::streamed_rows() const {
  return m_writer != nullptr ? m_writer->rows() : m_streamed;
}

template <class ExecSpace>
std::size_t Training<ExecSpace>::recorder_bytes() const {
  std::size_t bytes = 0;
  const auto add = [&](const auto& v) { bytes += v.capacity() * sizeof(v[0]); };
  add(m_trace.recorded_steps);
  add(m_trace.loss);
  add(m_trace.learning_rate);
  add(m_trace.validation_steps);
  add(m_trace.validation_loss);
  add(m_trace.replay_checkpoints);
  add(m_trace.replay_start_loss);
  for (const ReplaySeries& r : m_trace.replays) {
    add(r.validation_loss);
  }
  for (const GroupTrace& g : m_trace.groups) {
    for (const auto* v :
         {&g.nonzero, &g.erased, &g.saturated, &g.applied, &g.zero_weight, &g.ratio_histogram, &g.margin}) {
      add(*v);
    }
    add(g.erased_fraction);
    add(g.exact_w);
    add(g.exact_u);
    for (const BlockEventField& f : kBlockEventFields) {
      add(g.block_events.*f.series);
    }
    for (const auto& [name, p] : g.projected) {
      add(p.erased);
      add(p.fraction);
      for (const BlockEventField& f : kBlockEventFields) {
        add(p.block_events.*f.series);
      }
      add(p.block_sample.w);
      add(p.block_sample.u);
      add(p.block_sample.tensor);
      add(p.block_sample.anchors);
      for (const auto& [policy, e] : p.expected) {
        add(e.erased);
        add(e.fraction);
      }
    }
  }
  for (const auto& f : m_margin_formats) {
    add(f);
  }
  return bytes;
}

template <class ExecSpace>
void Training<ExecSpace>::hold_in_target_format(int t, const std::vector<float>& values) {
  const TargetFormat& target = m_target_formats[t];
  if (!target.block) {
    quantize(m_space, target.scalar, m_model->parameter(t));
    return;
  }
  try {
    block_quantize(m_space, target.blocks, target.shape, m_model->parameter(t));
  } catch (const std::exception& e) {
    throw std::runtime_error("run_cell: tensor " + m_model->tensor_name(t) + " at step " + std::to_string(m_step) +
                             ": cannot hold " + std::to_string(values.size()) + " values in " + target.blocks.name +
                             ": " + e.what());
  }
}

template <class ExecSpace>
WritebackCounts Training<ExecSpace>::write_back(int t, Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                                Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                                BlockWritebackCounts* block_counts) {
  const TargetFormat& target = m_target_formats[t];
  const RngKey key{m_config.seed, static_cast<std::uint64_t>(m_step), static_cast<std::uint32_t>(t)};
  if (target.block) {
    // Block-scaled: the whole block re-quantized from w + u (block_writeback.hpp); errors name tensor, step, block.
    BlockWritebackCounts b;
    try {
      b = m_policy.policy == Policy::master
              ? block_writeback_master(m_space, target.blocks, key, target.shape, m_masters[t], w, u, target.options)
              : block_writeback(m_space, target.blocks, m_policy, key, target.shape, w, u, target.options);
    } catch (const NonFiniteError& e) {
      non_finite(m_trace.groups[t].name, m_step, e.what());
    } catch (const BlockScaleError& e) {
      throw std::runtime_error("run_cell: tensor " + m_trace.groups[t].name + " at step " + std::to_string(m_step) +
                               ": " + e.what());
    }
    if (block_counts != nullptr) {
      *block_counts = b;
    }
    WritebackCounts c;
    c.nonzero = b.nonzero;
    c.erased = b.erased;
    c.saturated = b.saturated;
    c.applied = b.applied;
    return c;
  }
  // Groups kept in fp32 take the plain fp32 update (round to nearest), whatever the run's policy.
  const FormatSpec& fmt = target.scalar;
  const bool fp32_group = std::string_view(fmt.name) == "fp32";
  try {
    if (m_policy.policy == Policy::master && !fp32_group) {
      return writeback_master(m_space, fmt, m_masters[t], w, u);
    }
    const WritebackPolicy policy = fp32_group ? WritebackPolicy{} : m_policy;
    return writeback(m_space, fmt, policy, key, w, u);
  } catch (const NonFiniteError& e) {
    non_finite(m_trace.groups[t].name, m_step, e.what());
  }
}

template <class ExecSpace>
void Training<ExecSpace>::run(std::int64_t end, const ProgressCallback& progress, const RunHooks& hooks) {
  const CheckpointOptions& files = hooks.checkpoints;
  const std::vector<std::int64_t> replay_at = replay_steps();
  while (m_step < end) {
    if (files.every > 0 && !files.dir.empty() && m_step > 0 && m_step % files.every == 0) {
      const std::filesystem::path file = files.dir / ("checkpoint-" + std::to_string(m_step) + ".h5");
      write_checkpoint(file, checkpoint());
      if (hooks.on_checkpoint) {
        hooks.on_checkpoint(m_step, file);
      }
    }
    if (std::binary_search(replay_at.begin(), replay_at.end(), m_step)) {
      replay_from_here();
    }
    step(hooks);
    if (progress) {
      progress(m_step, m_config.steps);
    }
  }
  if (m_step == m_config.steps) {
    if (validation_due(m_step) && (m_trace.validation_steps.empty() || m_trace.validation_steps.back() != m_step)) {
      validate_now();
    }
    if (std::binary_search(replay_at.begin(), replay_at.end(), m_step)) {
      replay_from_here();
    }
  }
  flush_rows();
  m_space.fence();
}

template <class ExecSpace>
std::vector<std::int64_t> Training<ExecSpace>::replay_steps() const {
  std::vector<std::int64_t> at;
  const int k = m_config.replay.checkpoints;
  for (int i = 1; i <= k; ++i) {
    at.push_back(static_cast<std::int64_t>(i) * m_config.steps / k);
  }
  return at;
}

template <class ExecSpace>
Checkpoint Training<ExecSpace>::checkpoint() const {
  m_space.fence();
  Checkpoint c;
  c.config_json = m_trace.config_json;
  c.model_kind = m_config.model.kind;
  c.step = m_step;
  c.trace = m_trace;
  c.streamed = m_writer != nullptr;
  c.streamed_rows = streamed_rows();
  for (int t = 0; t < m_model->tensor_count(); ++t) {
    TensorState s;
    s.name = m_model->tensor_name(t);
    s.shape = m_model->tensor_shape(t);
    s.weight = to_host(m_model->parameter(t));
    s.first = to_host(m_optimizer->first_moment(t));
    s.second = to_host(m_optimizer->second_moment(t));
    if (!m_masters.empty()) {
      s.master = to_host(m_masters[t]);
    }
    c.tensors.push_back(std::move(s));
  }
  return c;
}

namespace {

// The part of a cell's JSON that fixes the trajectory up to a checkpoint's step, whatever is run after it: a replay
// may change the target, the step count and what is recorded, never the model, data, seed or optimizer.
nlohmann::json trajectory_identity(nlohmann::json j) {
  for (const char* key : {"steps", "record", "target", "mode", "project_formats", "replay", "validation"}) {
    j.erase(key);
  }
  return j;
}

}  // namespace

template <class ExecSpace>
void Training<ExecSpace>::restore(const Checkpoint& c, bool same_run) {
  const std::string where = "checkpoint at step " + std::to_string(c.step);
  if (c.model_kind != m_config.model.kind) {
    throw CheckpointError(where + ": written by a " + c.model_kind + " model, this run is " + m_config.model.kind);
  }
  nlohmann::json theirs;
  try {
    theirs = nlohmann::json::parse(c.config_json);
  } catch (const std::exception& e) {
    throw CheckpointError(where + ": unreadable config_json: " + e.what());
  }
  const nlohmann::json ours = to_json(m_config);
  if (same_run ? theirs != ours : trajectory_identity(theirs) != trajectory_identity(ours)) {
    throw CheckpointError(where + ": written by another run (its config " + theirs.dump() + ", this run " +
                          ours.dump() + ")");
  }
  if (c.step < 0 || c.step > m_config.steps + (same_run ? 0 : c.step)) {
    throw CheckpointError(where + ": step outside this run's 0.." + std::to_string(m_config.steps));
  }
  const int n = m_model->tensor_count();
  if (static_cast<int>(c.tensors.size()) != n) {
    throw CheckpointError(where + ": " + std::to_string(c.tensors.size()) + " tensors, the model has " +
                          std::to_string(n));
  }
  const auto check = [&](const std::vector<float>& v, std::size_t size, const std::string& what, int t) {
    if (v.size() != size) {
      throw CheckpointError(where + ": " + what + " of " + c.tensors[t].name + " has " + std::to_string(v.size()) +
                            " values, expected " + std::to_string(size));
    }
  };
  for (int t = 0; t < n; ++t) {
    const TensorState& s = c.tensors[t];
    if (s.name != m_model->tensor_name(t)) {
      throw CheckpointError(where + ": tensor " + std::to_string(t) + " is " + s.name + ", the model's is " +
                            m_model->tensor_name(t));
    }
    check(s.weight, m_model->parameter(t).extent(0), "weights", t);
    check(s.first, m_optimizer->first_moment(t).extent(0), "optimizer first moment", t);
    check(s.second, m_optimizer->second_moment(t).extent(0), "optimizer second moment", t);
    from_host(m_model->parameter(t), s.weight);
    from_host(m_optimizer->first_moment(t), s.first);
    from_host(m_optimizer->second_moment(t), s.second);
    if (!m_masters.empty()) {
      // A replay under the master policy starts its master copy from the checkpoint's fp32 master or weights.
      const std::vector<float>& master = s.master.empty() ? s.weight : s.master;
      check(master, m_masters[t].extent(0), "master copy", t);
      from_host(m_masters[t], master);
    }
  }
  m_step = c.step;
  if (same_run) {
    m_trace = c.trace;
    m_streamed = c.streamed ? c.streamed_rows : TraceRows{};
    m_next = m_trace.recorded_steps.size() + static_cast<std::size_t>(m_streamed.steps);
  }
  m_space.fence();
}

template <class ExecSpace>
void Training<ExecSpace>::requantize_from_current() {
  // Replays hold the checkpoint's weights in the replay format; intK takes its scale from their absmax.
  for (int t = 0; t < m_model->tensor_count(); ++t) {
    const std::vector<float> values = to_host(m_model->parameter(t));
    m_target_formats[t] =
        target_format(storage_format_of(m_config.target.format, m_config.target.group_formats, m_model->tensor_name(t)),
                      values, m_model->tensor_shape(t));
    hold_in_target_format(t, values);
  }
  m_space.fence();
}

template <class ExecSpace>
void Training<ExecSpace>::replay_from_here() {
  const ReplayConfig& rc = m_config.replay;
  const Checkpoint here = checkpoint();
  const auto start_loss = m_model->validation_loss(m_space);
  if (!start_loss) {
    throw std::runtime_error("run_cell: replay needs a model with a validation stream (" + m_config.model.kind +
                             " has none)");
  }
  m_trace.replay_checkpoints.push_back(m_step);
  m_trace.replay_start_loss.push_back(*start_loss);
  for (std::size_t p = 0; p < rc.policies.size(); ++p) {
    RunConfig cfg = m_config;
    cfg.mode = RunMode::target;
    cfg.project_formats.clear();
    cfg.target.format = rc.format;
    cfg.target.policy = rc.policies[p];
    cfg.target.sr_bits = rc.sr_bits;
    cfg.target.sr_stream = rc.sr_stream;
    cfg.target.group_formats = rc.group_formats;
    cfg.replay.checkpoints = 0;
    cfg.validation.every = 0;
    cfg.steps = m_step + rc.steps;
    Training replay(m_space, cfg);  // records nothing but its final validation loss (in memory, never streamed)
    replay.m_schedule_steps = m_schedule_steps;  // the run's own schedule, continued past its end if need be
    replay.restore(here, /*same_run=*/false);
    replay.requantize_from_current();
    replay.m_next = replay.m_recorded.size();  // nothing of a replay is recorded but its final validation loss
    while (replay.m_step < cfg.steps) {
      replay.step({});
    }
    const auto loss = replay.m_model->validation_loss(m_space);
    if (!loss || !std::isfinite(*loss)) {
      throw std::runtime_error("run_cell: validation loss after the " + rc.policies[p] + " replay from step " +
                               std::to_string(m_step) + " is not finite");
    }
    m_trace.replays[p].validation_loss.push_back(*loss);
  }
}

template <class ExecSpace>
Trace run_cell(const ExecSpace& space, const RunConfig& config, const ProgressCallback& progress,
               const RunHooks& hooks) {
  Training<ExecSpace> training(space, config);
  if (!hooks.checkpoints.resume_from.empty()) {
    training.restore(read_checkpoint(hooks.checkpoints.resume_from), /*same_run=*/true);
  }
  if (!hooks.checkpoints.dir.empty()) {
    std::filesystem::create_directories(hooks.checkpoints.dir);
  }
  training.run(config.steps, progress, hooks);
  return training.trace();
}

Trace run_cell(const RunConfig& config, const ProgressCallback& progress) {
  return run_cell(Kokkos::DefaultExecutionSpace(), config, progress, RunHooks{});
}

template <class ExecSpace>
void run_cell_to_file(const ExecSpace& space, const RunConfig& config, const std::filesystem::path& trace_path,
                      const ProgressCallback& progress, const RunHooks& hooks) {
  Training<ExecSpace> training(space, config);
  std::optional<TraceWriter> writer;
  if (!hooks.checkpoints.resume_from.empty()) {
    const Checkpoint c = read_checkpoint(hooks.checkpoints.resume_from);
    training.restore(c, /*same_run=*/true);
    if (c.streamed) {
      writer.emplace(TraceWriter::resume(trace_path, training.mutable_trace(), c.streamed_rows));
    } else {  // a checkpoint holding its trace: the partial file starts over from its rows
      writer.emplace(trace_path, training.mutable_trace());
    }
  } else {
    writer.emplace(trace_path, training.mutable_trace());
  }
  training.stream_to(&*writer);
  if (!hooks.checkpoints.dir.empty()) {
    std::filesystem::create_directories(hooks.checkpoints.dir);
  }
  training.run(config.steps, progress, hooks);
  writer->append(training.mutable_trace());
  training.stream_to(nullptr);
  writer->finish();
}

void run_cell_to_file(const RunConfig& config, const std::filesystem::path& trace_path,
                      const ProgressCallback& progress) {
  run_cell_to_file(Kokkos::DefaultExecutionSpace(), config, trace_path, progress, RunHooks{});
}

template class Training<Kokkos::Serial>;
template Trace run_cell<Kokkos::Serial>(const Kokkos::Serial&, const RunConfig&, const ProgressCallback&,
                                        const RunHooks&);
template void run_cell_to_file<Kokkos::Serial>(const Kokkos::Serial&, const RunConfig&, const std::filesystem::path&,
                                               const ProgressCallback&, const RunHooks&);
#if defined(KOKKOS_ENABLE_OPENMP)
template class Training<Kokkos::OpenMP>;
template Trace run_cell<Kokkos::OpenMP>(const Kokkos::OpenMP&, const RunConfig&, const ProgressCallback&,
                                        const RunHooks&);
template void run_cell_to_file<Kokkos::OpenMP>(const Kokkos::OpenMP&, const RunConfig&, const std::filesystem::path&,
                                               const ProgressCallback&, const RunHooks&);
#endif

}  // namespace wbaudit::sim
