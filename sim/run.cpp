#include "sim/run.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string_view>

#include "sim/model/decoder_task.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback.hpp"

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
  ObjectReader(const json& object, std::string path, const std::set<std::string>& known)
      : m_object(object), m_path(std::move(path)), m_known(known) {
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
  void boolean(const std::string& key, bool& out) const {
    if (const json* v = find(key)) {
      if (!v->is_boolean()) {
        throw ConfigError(path(key) + ": expected true or false");
      }
      out = v->get<bool>();
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
  const std::set<std::string>& m_known;
};

std::string number_text(double x) {
  return json(x).dump();
}

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

// fnmatch-style glob with '*' and '?'.
bool glob_match(std::string_view pattern, std::string_view text) {
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') {
    ++p;
  }
  return p == pattern.size();
}

std::map<std::string, std::string> group_formats_from_json(const json& gf, const std::string& where) {
  require(gf.is_object(), where, "expected a table of group name or pattern = format");
  std::map<std::string, std::string> out;
  for (const auto& item : gf.items()) {
    const std::string path = where + "." + item.key();
    require(!item.key().empty(), where, "empty group name");
    require(item.value().is_string(), path, "expected a format name");
    const std::string name = item.value().get<std::string>();
    named(path, [&] { return storage_format_from_name(name); });
    out[item.key()] = name;
  }
  return out;
}

// The known keys of each table of a cell configuration (sim/run.hpp run_config_key_tables).
const std::set<std::string>& known_keys(const std::string& table) {
  return run_config_key_tables().at(table);
}

}  // namespace

const std::map<std::string, std::set<std::string>>& run_config_key_tables() {
  static const std::map<std::string, std::set<std::string>> tables = {
      {"",
       {"schema", "mode", "seed", "steps", "model", "data", "optimizer", "schedule", "record", "target",
        "project_formats", "project_policies", "validation", "replay"}},
      {"model/two_layer",
       {"kind", "input_dim", "hidden", "output_dim", "activation", "teacher_hidden", "teacher_seed", "init_scale"}},
      {"model/decoder",
       {"kind", "vocab", "width", "heads", "layers", "mlp_hidden", "seq_len", "rotary_fraction", "rotary_base",
        "norm_eps", "parallel_residual", "init_std"}},
      {"data/two_layer", {"batch", "noise"}},
      {"data/decoder",
       {"batch", "source", "path", "sha256", "validation_fraction", "markov_order", "markov_branching", "markov_seed"}},
      {"optimizer", {"kind", "lr", "beta1", "beta2", "eps", "momentum", "weight_decay"}},
      {"schedule", {"kind", "warmup_steps", "period", "min_lr_ratio", "step_size", "gamma"}},
      {"record", {"kind", "k", "points"}},
      {"target", {"format", "policy", "sr_bits", "sr_stream", "group_formats"}},
      {"validation", {"every", "batches"}},
      {"replay", {"checkpoints", "steps", "format", "group_formats", "sr_bits", "sr_stream", "policies"}},
      {"project_policies[]", {"policy", "sr_bits"}},
  };
  return tables;
}

std::string known_model_kinds() {
  return "decoder, two_layer";
}

double estimate_cell_bytes(const RunConfig& config) {
  const ModelConfig& m = config.model;
  const double batch = config.data.batch;
  double params = 0;       // parameter coordinates
  double activations = 0;  // floats of one batch's forward + backward
  if (m.kind == "decoder") {
    const double V = m.decoder.vocab, D = m.decoder.width, F = m.decoder.mlp_hidden, L = m.decoder.layers,
                 S = m.decoder.seq_len, H = m.decoder.heads;
    params = 2 * V * D + D + L * (2 * D + 4 * D * D + 3 * F * D);
    activations = batch * S * (2 * V + L * (12 * D + 4 * F)) + L * batch * H * S * S * 2;
  } else {
    const double in = m.shape.input_dim, hid = m.shape.hidden, out = m.shape.output_dim, th = m.teacher_hidden;
    params = in * hid + hid + hid * out + out;
    activations = batch * (2 * in + 4 * hid + 4 * out) + (in * th + th * out);  // + the teacher
  }
  // Per coordinate: weight, gradient, two Adam moments, the proposal, a storage/master copy, projection scratch.
  constexpr double kFloatsPerParameter = 8;
  return 4.0 * (kFloatsPerParameter * params + activations);
}

std::vector<std::string> model_tensor_names(const ModelConfig& model) {
  std::vector<std::string> names;
  if (model.kind == "two_layer") {
    for (const char* n : kTwoLayerTensorNames) names.emplace_back(n);
  } else if (model.kind == "decoder") {
    for (const auto& [name, dims] : decoder_tensors(decoder_shape(model.decoder))) names.push_back(name);
  } else {
    throw ConfigError("model.kind: unknown model \"" + model.kind + "\" (known: " + known_model_kinds() + ")");
  }
  return names;
}

std::string storage_format_of(const std::string& default_format,
                              const std::map<std::string, std::string>& group_formats, const std::string& name) {
  if (const auto it = group_formats.find(name); it != group_formats.end()) {
    return it->second;
  }
  std::string chosen, by;
  for (const auto& [pattern, format] : group_formats) {
    if (glob_match(pattern, name)) {
      if (!chosen.empty() && chosen != format) {
        throw ConfigError("group_formats: tensor " + name + " matches \"" + by + "\" (" + chosen + ") and \"" +
                          pattern + "\" (" + format + ")");
      }
      chosen = format;
      by = pattern;
    }
  }
  return chosen.empty() ? default_format : chosen;
}

RunConfig run_config_from_json(const json& j) {
  RunConfig c;
  const ObjectReader top(j, "", known_keys(""));
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
    if (m->is_object() && m->contains("kind")) {
      require((*m)["kind"].is_string(), "model.kind", "expected a string");
      c.model.kind = (*m)["kind"].get<std::string>();
    }
    require(c.model.kind == "two_layer" || c.model.kind == "decoder", "model.kind",
            "unknown model \"" + c.model.kind + "\" (known: " + known_model_kinds() + ")");
  }
  const json* model_json = top.find("model");
  const json* data_json = top.find("data");
  if (c.model.kind == "two_layer") {
    if (const json* m = model_json) {
      const ObjectReader r(*m, "model", known_keys("model/two_layer"));
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
    if (const json* d = data_json) {
      const ObjectReader r(*d, "data", known_keys("data/two_layer"));
      r.integer("batch", c.data.batch);
      r.number("noise", c.data.noise);
    }
    require(c.data.noise >= 0, "data.noise", "must be non-negative");
  } else {
    DecoderConfig& dc = c.model.decoder;
    if (const json* m = model_json) {
      const ObjectReader r(*m, "model", known_keys("model/decoder"));
      r.integer("vocab", dc.vocab);
      r.integer("width", dc.width);
      r.integer("heads", dc.heads);
      r.integer("layers", dc.layers);
      r.integer("mlp_hidden", dc.mlp_hidden);
      r.integer("seq_len", dc.seq_len);
      r.number("rotary_fraction", dc.rotary_fraction);
      r.number("rotary_base", dc.rotary_base);
      r.number("norm_eps", dc.norm_eps);
      r.boolean("parallel_residual", dc.parallel_residual);
      r.number("init_std", dc.init_std);
    }
    for (const auto& [key, value] : {std::pair<const char*, int>{"model.vocab", dc.vocab},
                                     {"model.width", dc.width},
                                     {"model.heads", dc.heads},
                                     {"model.layers", dc.layers},
                                     {"model.mlp_hidden", dc.mlp_hidden},
                                     {"model.seq_len", dc.seq_len}}) {
      require(value > 0, key, "must be positive, got " + std::to_string(value));
    }
    require(dc.width % dc.heads == 0, "model.heads",
            std::to_string(dc.heads) + " heads do not divide width " + std::to_string(dc.width));
    require(dc.rotary_fraction >= 0 && dc.rotary_fraction <= 1, "model.rotary_fraction",
            "must be in [0, 1], got " + number_text(dc.rotary_fraction));
    require(dc.rotary_base > 0, "model.rotary_base", "must be positive, got " + number_text(dc.rotary_base));
    require(dc.norm_eps >= 0, "model.norm_eps", "must be non-negative, got " + number_text(dc.norm_eps));
    require(dc.init_std > 0, "model.init_std", "must be positive, got " + number_text(dc.init_std));
    if (const json* d = data_json) {
      const ObjectReader r(*d, "data", known_keys("data/decoder"));
      r.integer("batch", c.data.batch);
      r.string("source", c.data.source);
      r.string("path", c.data.path);
      r.string("sha256", c.data.sha256);
      r.number("validation_fraction", c.data.validation_fraction);
      r.integer("markov_order", c.data.markov_order);
      r.integer("markov_branching", c.data.markov_branching);
      r.integer("markov_seed", c.data.markov_seed);
    }
    require(c.data.source == "markov" || c.data.source == "text", "data.source",
            "unknown source \"" + c.data.source + "\" (known: markov, text)");
    require(c.data.source != "text" || !c.data.path.empty(), "data.path", "required for data.source = \"text\"");
    require(c.data.source == "text" || c.data.path.empty(), "data.path", "only for data.source = \"text\"");
    require(c.data.validation_fraction > 0 && c.data.validation_fraction < 1, "data.validation_fraction",
            "must be in (0, 1), got " + number_text(c.data.validation_fraction));
    require(c.data.markov_order > 0, "data.markov_order", "must be positive");
    require(c.data.markov_branching > 0, "data.markov_branching", "must be positive");
    require(c.data.source != "text" || dc.vocab >= 256, "model.vocab",
            "byte-level text needs vocab >= 256, got " + std::to_string(dc.vocab));
  }
  require(c.data.batch > 0, "data.batch", "must be positive, got " + std::to_string(c.data.batch));

  if (const json* o = top.find("optimizer")) {
    const ObjectReader r(*o, "optimizer", known_keys("optimizer"));
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
    const ObjectReader r(*s, "schedule", known_keys("schedule"));
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
    const ObjectReader r(*rec, "record", known_keys("record"));
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
    const ObjectReader r(*t, "target", known_keys("target"));
    r.string("format", c.target.format);
    r.string("policy", c.target.policy);
    r.integer("sr_bits", c.target.sr_bits);
    r.string("sr_stream", c.target.sr_stream);
    if (const json* gf = r.find("group_formats")) {
      c.target.group_formats = group_formats_from_json(*gf, "target.group_formats");
    }
  } else {
    require(c.mode != RunMode::target, "target", "required in target mode");
  }
  if (c.mode == RunMode::target) {
    named("target.format", [&] { return storage_format_from_name(c.target.format); });
    require(c.target.sr_bits >= 0 && c.target.sr_bits <= 32, "target.sr_bits", "must be in 0..32");
    named("target.policy", [&] { return make_policy(c.target.policy, c.target.sr_bits); });
    named("target.sr_stream", [&] { return make_policy(c.target.policy, c.target.sr_bits, c.target.sr_stream); });
  }

  if (const json* v = top.find("validation")) {
    const ObjectReader r(*v, "validation", known_keys("validation"));
    r.integer("every", c.validation.every);
    r.integer("batches", c.validation.batches);
  }
  require(c.validation.every >= 0, "validation.every", "must be non-negative");
  require(c.validation.batches > 0, "validation.batches", "must be positive");

  if (const json* rp = top.find("replay")) {
    const ObjectReader r(*rp, "replay", known_keys("replay"));
    r.integer("checkpoints", c.replay.checkpoints);
    r.integer("steps", c.replay.steps);
    r.string("format", c.replay.format);
    r.integer("sr_bits", c.replay.sr_bits);
    r.string("sr_stream", c.replay.sr_stream);
    if (const json* gf = r.find("group_formats")) {
      c.replay.group_formats = group_formats_from_json(*gf, "replay.group_formats");
    }
    if (const json* pol = r.find("policies")) {
      require(pol->is_array() && !pol->empty(), "replay.policies", "expected a non-empty array of policy names");
      c.replay.policies.clear();
      for (std::size_t i = 0; i < pol->size(); ++i) {
        const std::string path = "replay.policies[" + std::to_string(i) + "]";
        require((*pol)[i].is_string(), path, "expected a string");
        c.replay.policies.push_back((*pol)[i].get<std::string>());
      }
    }
    require(c.replay.checkpoints > 0, "replay.checkpoints", "must be positive");
    require(c.replay.checkpoints <= c.steps, "replay.checkpoints",
            std::to_string(c.replay.checkpoints) + " checkpoints do not fit in " + std::to_string(c.steps) + " steps");
    require(c.replay.steps > 0, "replay.steps", "must be positive");
    require(c.replay.sr_bits >= 0 && c.replay.sr_bits <= 32, "replay.sr_bits", "must be in 0..32");
    named("replay.format", [&] { return storage_format_from_name(c.replay.format); });
    std::set<std::string> seen;
    for (const std::string& p : c.replay.policies) {
      named("replay.policies", [&] { return make_policy(p, c.replay.sr_bits); });
      named("replay.sr_stream", [&] { return make_policy(p, c.replay.sr_bits, c.replay.sr_stream); });
      require(seen.insert(p).second, "replay.policies", "duplicate policy \"" + p + "\"");
    }
  }

  if (const json* p = top.find("project_formats")) {
    require(c.mode == RunMode::reference, "project_formats", "only allowed in reference mode");
    require(p->is_array(), "project_formats", "expected an array of format names");
    for (std::size_t i = 0; i < p->size(); ++i) {
      const std::string path = "project_formats[" + std::to_string(i) + "]";
      require((*p)[i].is_string(), path, "expected a string");
      const std::string name = (*p)[i].get<std::string>();
      named(path, [&] { return storage_format_from_name(name); });
      require(std::find(c.project_formats.begin(), c.project_formats.end(), name) == c.project_formats.end(), path,
              "duplicate format \"" + name + "\"");
      c.project_formats.push_back(name);
    }
  }
  // project_policies: [{"policy": "stochastic" | "deadzone-sr", "sr_bits": 0..32}, ...]
  if (const json* p = top.find("project_policies")) {
    require(c.mode == RunMode::reference, "project_policies", "only allowed in reference mode");
    require(p->is_array(), "project_policies", "expected an array of {policy, sr_bits} objects");
    for (std::size_t i = 0; i < p->size(); ++i) {
      const std::string path = "project_policies[" + std::to_string(i) + "]";
      const ObjectReader r((*p)[i], path, known_keys("project_policies[]"));
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
  if (c.model.kind == "decoder") {
    const DecoderConfig& dc = c.model.decoder;
    j["model"] = {{"kind", c.model.kind},
                  {"vocab", dc.vocab},
                  {"width", dc.width},
                  {"heads", dc.heads},
                  {"layers", dc.layers},
                  {"mlp_hidden", dc.mlp_hidden},
                  {"seq_len", dc.seq_len},
                  {"rotary_fraction", dc.rotary_fraction},
                  {"rotary_base", dc.rotary_base},
                  {"norm_eps", dc.norm_eps},
                  {"parallel_residual", dc.parallel_residual},
                  {"init_std", dc.init_std}};
    j["data"] = {{"batch", c.data.batch},
                 {"source", c.data.source},
                 {"validation_fraction", c.data.validation_fraction},
                 {"markov_order", c.data.markov_order},
                 {"markov_branching", c.data.markov_branching},
                 {"markov_seed", c.data.markov_seed}};
    if (c.data.source == "text") {
      j["data"]["path"] = c.data.path;
      j["data"]["sha256"] = c.data.sha256;
    }
  } else {
    j["model"] = {{"kind", c.model.kind},
                  {"input_dim", c.model.shape.input_dim},
                  {"hidden", c.model.shape.hidden},
                  {"output_dim", c.model.shape.output_dim},
                  {"activation", activation_name(c.model.shape.activation)},
                  {"teacher_hidden", c.model.teacher_hidden},
                  {"teacher_seed", c.model.teacher_seed},
                  {"init_scale", c.model.init_scale}};
    j["data"] = {{"batch", c.data.batch}, {"noise", c.data.noise}};
  }
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
  // Sections added after the first schema are written only when they differ from their defaults, so the canonical
  // JSON (and the cell id) of every earlier cell is unchanged.
  if (c.validation.every != ValidationConfig{}.every || c.validation.batches != ValidationConfig{}.batches) {
    j["validation"] = {{"every", c.validation.every}, {"batches", c.validation.batches}};
  }
  if (c.replay.checkpoints > 0) {
    j["replay"] = {{"checkpoints", c.replay.checkpoints}, {"steps", c.replay.steps},
                   {"format", c.replay.format},           {"group_formats", c.replay.group_formats},
                   {"sr_bits", c.replay.sr_bits},         {"policies", c.replay.policies}};
    if (c.replay.sr_stream != ReplayConfig{}.sr_stream) {  // written only when not the default (ids unchanged)
      j["replay"]["sr_stream"] = c.replay.sr_stream;
    }
  }
  if (c.mode == RunMode::target) {
    j["target"] = {{"format", c.target.format}, {"policy", c.target.policy}, {"sr_bits", c.target.sr_bits}};
    if (c.target.sr_stream != TargetConfig{}.sr_stream) {  // written only when not the default (ids unchanged)
      j["target"]["sr_stream"] = c.target.sr_stream;
    }
    if (!c.target.group_formats.empty()) {
      j["target"]["group_formats"] = c.target.group_formats;
    }
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

}  // namespace wbaudit::sim
