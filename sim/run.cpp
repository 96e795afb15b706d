#include "sim/run.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/trace/expected_projection.hpp"

namespace wbaudit::sim {

// ---------------------------------------------------------------------------------------------------------------
// Cell JSON
namespace {

using nlohmann::json;

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// Reads the members of one JSON object, rejecting unknown keys and wrong types with the key path.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path, std::set<std::string> known)
      : m_object(object), m_path(std::move(path)), m_known(std::move(known)) {
    if (!object.is_object()) {
      throw ConfigError((m_path.empty() ? "cell" : m_path) + ": expected an object");
    }
    for (const auto& item : object.items()) {
      if (!m_known.count(item.key())) {
        std::string names;
        for (const std::string& k : m_known) {
          names += (names.empty() ? "" : ", ") + k;
        }
        throw ConfigError(join_path(m_path, item.key()) + ": unknown key (known: " + names + ")");
      }
    }
  }

  std::string path(const std::string& key) const { return join_path(m_path, key); }
  const json* find(const std::string& key) const {
    const auto it = m_object.find(key);
    return it == m_object.end() ? nullptr : &*it;
  }

  void number(const std::string& key, double& out) const {
    if (const json* v = find(key)) {
      if (!v->is_number()) {
        throw ConfigError(path(key) + ": expected a number");
      }
      out = v->get<double>();
      if (!std::isfinite(out)) {
        throw ConfigError(path(key) + ": expected a finite number");
      }
    }
  }
  template <class Int>
  void integer(const std::string& key, Int& out) const {
    if (const json* v = find(key)) {
      if (!v->is_number_integer()) {
        throw ConfigError(path(key) + ": expected an integer");
      }
      if (v->is_number_unsigned()) {
        const auto u = v->get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) {
          throw ConfigError(path(key) + ": " + std::to_string(u) + " is out of range");
        }
        out = static_cast<Int>(u);
      } else {
        const auto s = v->get<std::int64_t>();
        if (std::is_unsigned_v<Int> && s < 0) {
          throw ConfigError(path(key) + ": expected a non-negative integer, got " + std::to_string(s));
        }
        if (!std::is_unsigned_v<Int> && (s < static_cast<std::int64_t>(std::numeric_limits<Int>::min()) ||
                                         s > static_cast<std::int64_t>(std::numeric_limits<Int>::max()))) {
          throw ConfigError(path(key) + ": " + std::to_string(s) + " is out of range");
        }
        out = static_cast<Int>(s);
      }
    }
  }
  void string(const std::string& key, std::string& out) const {
    if (const json* v = find(key)) {
      if (!v->is_string()) {
        throw ConfigError(path(key) + ": expected a string");
      }
      out = v->get<std::string>();
    }
  }

 private:
  const json& m_object;
  std::string m_path;
  std::set<std::string> m_known;
};

void require(bool ok, const std::string& path, const std::string& what) {
  if (!ok) {
    throw ConfigError(path + ": " + what);
  }
}

// Runs a name parser and reports its message under the key path.
template <class F>
auto named(const std::string& path, F&& parse) {
  try {
    return parse();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

std::string mode_name(RunMode mode) {
  return mode == RunMode::reference ? "reference" : "target";
}

}  // namespace

RunConfig run_config_from_json(const json& j) {
  RunConfig c;
  const ObjectReader top(j, "",
                         {"schema", "mode", "seed", "steps", "model", "data", "optimizer", "schedule", "record",
                          "target", "project_formats", "project_policies"});
  std::string schema = kCellSchema;
  top.string("schema", schema);
  require(schema == kCellSchema, "schema", "unsupported schema \"" + schema + "\" (expected " + kCellSchema + ")");
  std::string mode = "reference";
  top.string("mode", mode);
  if (mode == "reference") {
    c.mode = RunMode::reference;
  } else if (mode == "target") {
    c.mode = RunMode::target;
  } else {
    throw ConfigError("mode: unknown mode \"" + mode + "\" (known: reference, target)");
  }
  top.integer("seed", c.seed);
  top.integer("steps", c.steps);
  require(c.steps > 0, "steps", "must be positive, got " + std::to_string(c.steps));

  if (const json* m = top.find("model")) {
    const ObjectReader r(
        *m, "model",
        {"kind", "input_dim", "hidden", "output_dim", "activation", "teacher_hidden", "teacher_seed", "init_scale"});
    r.string("kind", c.model.kind);
    require(c.model.kind == "two_layer", "model.kind", "unknown model \"" + c.model.kind + "\" (known: two_layer)");
    r.integer("input_dim", c.model.shape.input_dim);
    r.integer("hidden", c.model.shape.hidden);
    r.integer("output_dim", c.model.shape.output_dim);
    std::string act = activation_name(c.model.shape.activation);
    r.string("activation", act);
    c.model.shape.activation = named("model.activation", [&] { return activation_from_name(act); });
    r.integer("teacher_hidden", c.model.teacher_hidden);
    r.integer("teacher_seed", c.model.teacher_seed);
    r.number("init_scale", c.model.init_scale);
  }
  require(c.model.shape.input_dim > 0, "model.input_dim", "must be positive");
  require(c.model.shape.hidden > 0, "model.hidden", "must be positive");
  require(c.model.shape.output_dim > 0, "model.output_dim", "must be positive");
  require(c.model.teacher_hidden > 0, "model.teacher_hidden", "must be positive");
  require(c.model.init_scale > 0, "model.init_scale", "must be positive");

  if (const json* d = top.find("data")) {
    const ObjectReader r(*d, "data", {"batch", "noise"});
    r.integer("batch", c.data.batch);
    r.number("noise", c.data.noise);
  }
  require(c.data.batch > 0, "data.batch", "must be positive, got " + std::to_string(c.data.batch));
  require(c.data.noise >= 0, "data.noise", "must be non-negative");

  if (const json* o = top.find("optimizer")) {
    const ObjectReader r(*o, "optimizer", {"kind", "lr", "beta1", "beta2", "eps", "momentum", "weight_decay"});
    std::string kind = optimizer_kind_name(c.optimizer.kind);
    r.string("kind", kind);
    c.optimizer.kind = named("optimizer.kind", [&] { return optimizer_kind_from_name(kind); });
    r.number("lr", c.optimizer.lr);
    r.number("beta1", c.optimizer.beta1);
    r.number("beta2", c.optimizer.beta2);
    r.number("eps", c.optimizer.eps);
    r.number("momentum", c.optimizer.momentum);
    r.number("weight_decay", c.optimizer.weight_decay);
  }
  require(c.optimizer.lr > 0, "optimizer.lr", "must be positive");
  require(c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1, "optimizer.beta1", "must be in [0, 1)");
  require(c.optimizer.beta2 >= 0 && c.optimizer.beta2 < 1, "optimizer.beta2", "must be in [0, 1)");
  require(c.optimizer.eps >= 0, "optimizer.eps", "must be non-negative");
  require(c.optimizer.momentum >= 0 && c.optimizer.momentum < 1, "optimizer.momentum", "must be in [0, 1)");
  require(c.optimizer.weight_decay >= 0, "optimizer.weight_decay", "must be non-negative");

  if (const json* s = top.find("schedule")) {
    const ObjectReader r(*s, "schedule", {"kind", "warmup_steps", "period", "min_lr_ratio", "step_size", "gamma"});
    std::string kind = schedule_kind_name(c.schedule.kind);
    r.string("kind", kind);
    c.schedule.kind = named("schedule.kind", [&] { return schedule_kind_from_name(kind); });
    r.integer("warmup_steps", c.schedule.warmup_steps);
    r.integer("period", c.schedule.period);
    r.number("min_lr_ratio", c.schedule.min_lr_ratio);
    r.integer("step_size", c.schedule.step_size);
    r.number("gamma", c.schedule.gamma);
  }
  require(c.schedule.warmup_steps >= 0, "schedule.warmup_steps", "must be non-negative");
  require(c.schedule.period > 0, "schedule.period", "must be positive");
  require(c.schedule.step_size > 0, "schedule.step_size", "must be positive");
  require(c.schedule.min_lr_ratio >= 0 && c.schedule.min_lr_ratio <= 1, "schedule.min_lr_ratio", "must be in [0, 1]");
  require(c.schedule.gamma > 0, "schedule.gamma", "must be positive");

  if (const json* rec = top.find("record")) {
    const ObjectReader r(*rec, "record", {"kind", "k", "points"});
    std::string kind = record_kind_name(c.record.kind);
    r.string("kind", kind);
    c.record.kind = named("record.kind", [&] { return record_kind_from_name(kind); });
    r.integer("k", c.record.k);
    r.integer("points", c.record.points);
  }
  require(c.record.k > 0, "record.k", "must be positive, got " + std::to_string(c.record.k));
  require(c.record.points >= 2, "record.points", "must be at least 2, got " + std::to_string(c.record.points));

  if (const json* t = top.find("target")) {
    require(c.mode == RunMode::target, "target", "only allowed in target mode");
    const ObjectReader r(*t, "target", {"format", "policy", "sr_bits"});
    r.string("format", c.target.format);
    r.string("policy", c.target.policy);
    r.integer("sr_bits", c.target.sr_bits);
  } else {
    require(c.mode != RunMode::target, "target", "required in target mode");
  }
  if (c.mode == RunMode::target) {
    named("target.format", [&] { return format_from_name(c.target.format); });
    require(c.target.sr_bits >= 0 && c.target.sr_bits <= 32, "target.sr_bits", "must be in 0..32");
    named("target.policy", [&] { return make_policy(c.target.policy, c.target.sr_bits); });
  }

  if (const json* p = top.find("project_formats")) {
    require(c.mode == RunMode::reference, "project_formats", "only allowed in reference mode");
    require(p->is_array(), "project_formats", "expected an array of format names");
    for (std::size_t i = 0; i < p->size(); ++i) {
      const std::string path = "project_formats[" + std::to_string(i) + "]";
      require((*p)[i].is_string(), path, "expected a string");
      const std::string name = (*p)[i].get<std::string>();
      named(path, [&] { return format_from_name(name); });
      require(std::find(c.project_formats.begin(), c.project_formats.end(), name) == c.project_formats.end(), path,
              "duplicate format \"" + name + "\"");
      c.project_formats.push_back(name);
    }
  }
  // project_policies: [{"policy": "stochastic" | "deadzone-sr", "sr_bits": 0..32}, ...] (issue 13)
  if (const json* p = top.find("project_policies")) {
    require(c.mode == RunMode::reference, "project_policies", "only allowed in reference mode");
    require(p->is_array(), "project_policies", "expected an array of {policy, sr_bits} objects");
    for (std::size_t i = 0; i < p->size(); ++i) {
      const std::string path = "project_policies[" + std::to_string(i) + "]";
      const ObjectReader r((*p)[i], path, {"policy", "sr_bits"});
      std::string name;
      int sr_bits = 0;
      require(r.find("policy") != nullptr, path + ".policy", "missing (stochastic or deadzone-sr)");
      r.string("policy", name);
      r.integer("sr_bits", sr_bits);
      require(sr_bits >= 0 && sr_bits <= 32, path + ".sr_bits", "must be in 0..32");
      const WritebackPolicy wp = named(path + ".policy", [&] { return make_policy(name, sr_bits); });
      require(wp.policy == Policy::stochastic || wp.policy == Policy::deadzone_sr, path + ".policy",
              "\"" + name + "\" has no expected projection (known: stochastic, deadzone-sr)");
      for (const WritebackPolicy& q : c.project_policies)
        require(q.policy != wp.policy || q.sr_bits != wp.sr_bits, path, "duplicate policy \"" + name + "\"");
      c.project_policies.push_back(wp);
    }
  }
  return c;
}

json to_json(const RunConfig& c) {
  json j;
  j["schema"] = kCellSchema;
  j["mode"] = mode_name(c.mode);
  j["seed"] = c.seed;
  j["steps"] = c.steps;
  j["model"] = {{"kind", c.model.kind},
                {"input_dim", c.model.shape.input_dim},
                {"hidden", c.model.shape.hidden},
                {"output_dim", c.model.shape.output_dim},
                {"activation", activation_name(c.model.shape.activation)},
                {"teacher_hidden", c.model.teacher_hidden},
                {"teacher_seed", c.model.teacher_seed},
                {"init_scale", c.model.init_scale}};
  j["data"] = {{"batch", c.data.batch}, {"noise", c.data.noise}};
  j["optimizer"] = {{"kind", optimizer_kind_name(c.optimizer.kind)},
                    {"lr", c.optimizer.lr},
                    {"beta1", c.optimizer.beta1},
                    {"beta2", c.optimizer.beta2},
                    {"eps", c.optimizer.eps},
                    {"momentum", c.optimizer.momentum},
                    {"weight_decay", c.optimizer.weight_decay}};
  j["schedule"] = {{"kind", schedule_kind_name(c.schedule.kind)},
                   {"warmup_steps", c.schedule.warmup_steps},
                   {"period", c.schedule.period},
                   {"min_lr_ratio", c.schedule.min_lr_ratio},
                   {"step_size", c.schedule.step_size},
                   {"gamma", c.schedule.gamma}};
  j["record"] = {{"kind", record_kind_name(c.record.kind)}, {"k", c.record.k}, {"points", c.record.points}};
  if (c.mode == RunMode::target) {
    j["target"] = {{"format", c.target.format}, {"policy", c.target.policy}, {"sr_bits", c.target.sr_bits}};
  } else {
    j["project_formats"] = c.project_formats;
    if (!c.project_policies.empty()) {  // absent when empty: nearest-only reference cells keep their ids
      j["project_policies"] = json::array();
      for (const WritebackPolicy& p : c.project_policies)
        j["project_policies"].push_back({{"policy", policy_name(p.policy)}, {"sr_bits", p.sr_bits}});
    }
  }
  return j;
}

// ---------------------------------------------------------------------------------------------------------------
// The engine
namespace {

// The format a tensor is held in (or projected to): intK gets its per-tensor scale from the absmax of the fp32
// initialization (DESIGN.md §2).
FormatSpec tensor_format(const std::string& name, const std::vector<float>& init) {
  FormatSpec fmt = format_from_name(name);
  if (fmt.kind == FormatKind::integer) {
    double absmax = 0;
    for (float v : init) {
      absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
    }
    const int k = std::stoi(name.substr(3));
    fmt = int_format(k, int_scale_for_absmax(k, absmax));
  }
  return fmt;
}

template <class View>
std::vector<float> to_host(const View& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
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

template <class ExecSpace>
Trace run_cell(const ExecSpace& space, const RunConfig& config, const ProgressCallback& progress,
               const RunHooks& hooks) {
  using memory_space = typename ExecSpace::memory_space;
  using Vector = Kokkos::View<float*, memory_space>;
  const bool reference = config.mode == RunMode::reference;

  TwoLayerModel<ExecSpace> model(config.model.shape, config.data.batch);
  model.initialize(space, GaussianStream{config.seed, StreamDomain::student_init},
                   static_cast<float>(config.model.init_scale));
  TwoLayerShape teacher_shape = config.model.shape;
  teacher_shape.hidden = config.model.teacher_hidden;
  TeacherStudentData<ExecSpace> data(space, teacher_shape, config.model.teacher_seed, config.seed, config.data.batch,
                                     static_cast<float>(config.data.noise));

  std::vector<std::int64_t> sizes;
  sizes.reserve(kTwoLayerTensors);
  for (int t = 0; t < kTwoLayerTensors; ++t) {
    sizes.push_back(model.tensor_size(t));
  }
  Optimizer<ExecSpace> optimizer(config.optimizer, sizes);

  Trace trace;
  trace.mode = reference ? "reference" : "target";
  trace.format = reference ? "fp32" : config.target.format;
  trace.policy = reference ? "nearest" : config.target.policy;
  trace.seed = config.seed;
  trace.steps = config.steps;
  trace.config_json = to_json(config).dump();
  const std::vector<std::int64_t> recorded = recorded_steps(config.record, config.steps);
  const std::size_t n_rec = recorded.size();
  const RatioHistogramLayout layout = trace.histogram;

  std::vector<Vector> proposals, masters;
  std::vector<Kokkos::View<int*, memory_space>> bin_index;
  std::vector<FormatSpec> target_formats;
  std::vector<std::vector<FormatSpec>> project_formats(kTwoLayerTensors);
  const WritebackPolicy policy =
      reference ? WritebackPolicy{} : make_policy(config.target.policy, config.target.sr_bits);
  for (int t = 0; t < kTwoLayerTensors; ++t) {
    GroupTrace g;
    g.name = kTwoLayerTensorNames[t];
    g.tensor_id = static_cast<std::uint32_t>(t);
    g.size = sizes[t];
    g.nonzero.reserve(n_rec);
    proposals.emplace_back(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::run_cell::u"),
                           sizes[t]);
    const std::vector<float> init = to_host(model.parameter(t));
    if (reference) {
      bin_index.emplace_back(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::run_cell::bin"),
                             sizes[t]);
      for (const std::string& name : config.project_formats) {
        project_formats[t].push_back(tensor_format(name, init));
        g.projected[name];
      }
      g.ratio_histogram.assign(n_rec * static_cast<std::size_t>(layout.bins), 0);
    } else {
      target_formats.push_back(tensor_format(config.target.format, init));
      if (policy.policy == Policy::master) {
        masters.emplace_back(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::run_cell::master"),
                             sizes[t]);
        Kokkos::deep_copy(space, masters.back(), model.parameter(t));
      }
      quantize(space, target_formats[t], model.parameter(t));
    }
    trace.groups.push_back(std::move(g));
  }
  space.fence();

  std::vector<float> before;
  std::size_t next = 0;
  for (std::int64_t step = 0; step < config.steps; ++step) {
    data.generate(space, step);
    const double loss = model.loss_and_gradient(space, data.x(), data.y());
    const float lr = scheduled_learning_rate(config.schedule, config.optimizer.lr, step, config.steps);
    const bool record = next < n_rec && recorded[next] == step;
    for (int t = 0; t < kTwoLayerTensors; ++t) {
      const Vector decay_source = masters.empty() ? model.parameter(t) : masters[t];
      optimizer.propose(space, t, step, lr, model.gradient(t), decay_source, proposals[t]);
    }
    for (int t = 0; t < kTwoLayerTensors; ++t) {
      GroupTrace& g = trace.groups[t];
      const Vector w = model.parameter(t);
      const Kokkos::View<const float*, memory_space> u = proposals[t];
      if (hooks.on_update) {
        space.fence();
        before = to_host(w);
      }
      if (reference) {
        if (record) {
          // The d histogram (bins: -1 for u == 0, -2 for w == 0, -3 for non-finite), then the projected events per
          // declared format.
          const auto bins = bin_index[t];
          const double d_min = layout.d_min, width = layout.bin_width;
          const int nbins = layout.bins;
          Kokkos::parallel_for(
              "wbaudit::sim::run_cell::ratio_bins", Kokkos::RangePolicy<ExecSpace>(space, 0, w.extent(0)),
              KOKKOS_LAMBDA(const std::size_t i) {
                const float ui = u(i), wi = w(i);
                if (!std::isfinite(ui) || !std::isfinite(wi)) {
                  bins(i) = -3;
                } else if (ui == 0.0f) {
                  bins(i) = -1;
                } else if (wi == 0.0f) {
                  bins(i) = -2;
                } else {
                  const double d = static_cast<double>(std::ilogb(wi)) - std::log2(std::fabs(static_cast<double>(ui)));
                  const double b = std::floor((d - d_min) / width);
                  bins(i) = b < 0 ? 0 : (b >= nbins ? nbins - 1 : static_cast<int>(b));
                }
              });
          space.fence();
          const auto host_bins = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bins);
          std::int64_t nonzero = 0, zero_weight = 0, bad = 0;
          std::int64_t* row = g.ratio_histogram.data() + next * static_cast<std::size_t>(nbins);
          for (std::size_t i = 0; i < host_bins.extent(0); ++i) {
            const int b = host_bins(i);
            if (b == -1) {
              continue;
            }
            if (b == -3) {
              ++bad;
              continue;
            }
            ++nonzero;
            if (b == -2) {
              ++zero_weight;
            } else {
              ++row[static_cast<std::size_t>(b)];
            }
          }
          if (bad > 0) {
            non_finite(g.name, step, std::to_string(bad) + " coordinates");
          }
          g.nonzero.push_back(nonzero);
          g.zero_weight.push_back(zero_weight);
          // Non-finite values were rejected above, so project_erasure sees finite inputs only.
          for (std::size_t f = 0; f < project_formats[t].size(); ++f) {
            const WritebackCounts c =
                project_erasure(space, project_formats[t][f], Kokkos::View<const float*, memory_space>(w), u);
            ProjectedSeries& series = g.projected[config.project_formats[f]];
            series.erased.push_back(c.erased);
            series.fraction.push_back(fraction(c.erased, c.nonzero));
            // Issue 13: the expected erased fraction of each declared stochastic policy (expected_projection.hpp).
            record_expected_projections(space, project_formats[t][f], config.project_policies,
                                        Kokkos::View<const float*, memory_space>(w), u, series);
          }
        }
        // The plain fp32 update w <- w + u, counting non-finite inputs.
        std::int64_t bad = 0;
        Kokkos::parallel_reduce(
            "wbaudit::sim::run_cell::fp32_update", Kokkos::RangePolicy<ExecSpace>(space, 0, w.extent(0)),
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
          non_finite(g.name, step, std::to_string(bad) + " coordinates");
        }
      } else {
        WritebackCounts c;
        try {
          if (policy.policy == Policy::master) {
            c = writeback_master(space, target_formats[t], masters[t], w, u);
          } else {
            c = writeback(space, target_formats[t], policy,
                          RngKey{config.seed, static_cast<std::uint64_t>(step), static_cast<std::uint32_t>(t)}, w, u);
          }
        } catch (const NonFiniteError& e) {
          non_finite(g.name, step, e.what());
        }
        if (record) {
          g.nonzero.push_back(c.nonzero);
          g.erased.push_back(c.erased);
          g.saturated.push_back(c.saturated);
          g.applied.push_back(c.applied);
          g.erased_fraction.push_back(fraction(c.erased, c.nonzero));
        }
      }
      if (hooks.on_update) {
        space.fence();
        const std::vector<float> proposal = to_host(u), after = to_host(w);
        hooks.on_update(UpdateObservation{step, t, before, proposal, after});
      }
    }
    if (record) {
      trace.recorded_steps.push_back(step);
      trace.loss.push_back(loss);
      trace.learning_rate.push_back(static_cast<double>(lr));
      ++next;
    }
    if (progress) {
      progress(step + 1, config.steps);
    }
  }
  space.fence();
  return trace;
}

Trace run_cell(const RunConfig& config, const ProgressCallback& progress) {
  return run_cell(Kokkos::DefaultExecutionSpace(), config, progress, RunHooks{});
}

template Trace run_cell<Kokkos::Serial>(const Kokkos::Serial&, const RunConfig&, const ProgressCallback&,
                                        const RunHooks&);
#if defined(KOKKOS_ENABLE_OPENMP)
template Trace run_cell<Kokkos::OpenMP>(const Kokkos::OpenMP&, const RunConfig&, const ProgressCallback&,
                                        const RunHooks&);
#endif

}  // namespace wbaudit::sim
