#include "sim/run.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string_view>

#include "sim/model_registry.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/trace/detail/trace_file.hpp"
#include "sim/trace/margin_histogram.hpp"

namespace wbaudit::sim {

// ---------------------------------------------------------------------------------------------------------------
// Cell JSON
namespace {

using nlohmann::json;

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

// The keys of the model-independent tables of a cell configuration (run_config_key_tables adds each model's).
const std::map<std::string, std::set<std::string>>& fixed_key_tables() {
  static const std::map<std::string, std::set<std::string>> tables = {
      {"",
       {"schema", "mode", "seed", "steps", "model", "data", "optimizer", "schedule", "record", "target",
        "project_formats", "project_policies", "margin_formats", "validation", "replay"}},
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

const std::set<std::string>& known_keys(const std::string& table) {
  return fixed_key_tables().at(table);
}

}  // namespace

std::map<std::string, std::set<std::string>> run_config_key_tables() {
  std::map<std::string, std::set<std::string>> tables = fixed_key_tables();
  for (const ModelDescriptor* model : registered_models()) {
    tables["model/" + model->kind()] = model->model_table();
    tables["data/" + model->kind()] = model->data_keys();
  }
  return tables;
}

double estimate_cell_bytes(const RunConfig& config) {
  const ModelSize model = find_model(config.model.kind).size(config);
  // Per coordinate: weight, gradient, two Adam moments, the proposal, a storage/master copy, projection scratch.
  constexpr double kFloatsPerParameter = 8;
  return 4.0 * (kFloatsPerParameter * model.parameters + model.activations);
}

double estimate_recording_bytes(const RunConfig& config, int threads) {
  const auto names = model_tensor_names(config.model);
  const double groups = static_cast<double>(names.size());
  const double recorded = static_cast<double>(recorded_steps(config.record, config.steps).size());
  // HDF5's own state while the partial file is open and while the finished file is written (its free lists, the
  // metadata cache, one dataset's chunk cache and deflate buffers), and the writer's handles per group.
  constexpr double kHdf5 = 16.0 * 1048576;
  const double handles = 4096.0 * groups;
  // While the finished file is written (trace_writer.cpp, write_trace_from_reader): one block of one dataset's values
  // (detail::kFinishBlockBytes), and the root series of every recorded step the partial file's reader holds
  // (recorded_steps, loss, learning_rate: 24 bytes each).
  const double finish = static_cast<double>(detail::kFinishBlockBytes) + 24.0 * recorded;
  if (config.mode == RunMode::target) {
    // nonzero, erased, saturated, applied, erased_fraction: one step's rows while training
    constexpr double kPerGroupStep = 40.0;
    return kHdf5 + handles + std::max(groups * kPerGroupStep, finish);
  }
  const MarginLayout margin = reference_margin_layout(config);
  const double bins = 8.0 * (static_cast<double>(margin.bins()) + RatioHistogramLayout{}.bins);
  // One group's rows of one recorded step: the d and margin histograms, kept w and u (at most
  // kJointExactMaxCoordinates coordinates), the counts and projected series.
  const double per_group_step = bins + 16.0 + 8.0 * static_cast<double>(kJointExactMaxCoordinates) +
                                16.0 * static_cast<double>(config.project_formats.size()) *
                                    (1.0 + static_cast<double>(config.project_policies.size()));
  // While training: one recorded step's rows of every group (appended and dropped at the end of the step); while the
  // finished file is written: `finish`.
  const double rows = std::max(groups * per_group_step, finish);
  // per thread: the kernel's chunk scratch and 32-bit counters, and the reduction's 64-bit counters
  const double per_thread = 6.0 * 4 * 2048 + 4.0 * 4 * static_cast<double>(margin.bins() + 600) + bins;
  return kHdf5 + handles + rows + std::max(1, threads) * per_thread;
}

std::vector<std::string> model_tensor_names(const ModelConfig& model) {
  return find_model(model.kind).tensor_names(model);
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

namespace {

// The top level: schema, mode, seed, steps.
void parse_run(const ConfigReader& top, RunConfig& c) {
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
}

// [model] and [data]: model.kind chooses the descriptor that reads both (sim/model_registry.hpp).
void parse_model_and_data(const ConfigReader& top, RunConfig& c) {
  const json* model = top.find("model");
  if (model != nullptr && model->is_object() && model->contains("kind")) {
    require((*model)["kind"].is_string(), "model.kind", "expected a string");
    c.model.kind = (*model)["kind"].get<std::string>();
  }
  find_model(c.model.kind).parse(model, top.find("data"), c);
  require(c.data.batch > 0, "data.batch", "must be positive, got " + std::to_string(c.data.batch));
}

void parse_optimizer_and_schedule(const ConfigReader& top, RunConfig& c) {
  if (const json* o = top.find("optimizer")) {
    const ConfigReader r(*o, "optimizer", known_keys("optimizer"));
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
    const ConfigReader r(*s, "schedule", known_keys("schedule"));
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
}

void parse_record(const ConfigReader& top, RunConfig& c) {
  if (const json* rec = top.find("record")) {
    const ConfigReader r(*rec, "record", known_keys("record"));
    std::string kind = record_kind_name(c.record.kind);
    r.string("kind", kind);
    c.record.kind = named("record.kind", [&] { return record_kind_from_name(kind); });
    r.integer("k", c.record.k);
    r.integer("points", c.record.points);
  }
  require(c.record.k > 0, "record.k", "must be positive, got " + std::to_string(c.record.k));
  require(c.record.points >= 2, "record.points", "must be at least 2, got " + std::to_string(c.record.points));
}

void parse_target(const ConfigReader& top, RunConfig& c) {
  if (const json* t = top.find("target")) {
    require(c.mode == RunMode::target, "target", "only allowed in target mode");
    const ConfigReader r(*t, "target", known_keys("target"));
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
}

void parse_validation_and_replay(const ConfigReader& top, RunConfig& c) {
  if (const json* v = top.find("validation")) {
    const ConfigReader r(*v, "validation", known_keys("validation"));
    r.integer("every", c.validation.every);
    r.integer("batches", c.validation.batches);
  }
  require(c.validation.every >= 0, "validation.every", "must be non-negative");
  require(c.validation.batches > 0, "validation.batches", "must be positive");

  const json* rp = top.find("replay");
  if (rp == nullptr) {
    return;
  }
  const ConfigReader r(*rp, "replay", known_keys("replay"));
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

// Reference mode: project_formats (format names) and project_policies ([{"policy": "stochastic" | "deadzone-sr",
// "sr_bits": 0..32}, ...]).
void parse_projections(const ConfigReader& top, RunConfig& c) {
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
  if (const json* p = top.find("margin_formats")) {
    require(c.mode == RunMode::reference, "margin_formats", "only allowed in reference mode");
    require(p->is_array(), "margin_formats", "expected an array of format names");
    for (std::size_t i = 0; i < p->size(); ++i) {
      require((*p)[i].is_string(), "margin_formats[" + std::to_string(i) + "]", "expected a string");
      c.margin_formats.push_back((*p)[i].get<std::string>());
    }
    // names, repeats and an empty list refused; kept in the layout's order (one spelling per reference)
    c.margin_formats = named("margin_formats", [&] { return margin_layout_for(c.margin_formats); }).formats;
  }
  if (const json* p = top.find("project_policies")) {
    require(c.mode == RunMode::reference, "project_policies", "only allowed in reference mode");
    require(p->is_array(), "project_policies", "expected an array of {policy, sr_bits} objects");
    for (std::size_t i = 0; i < p->size(); ++i) {
      const std::string path = "project_policies[" + std::to_string(i) + "]";
      const ConfigReader r((*p)[i], path, known_keys("project_policies[]"));
      std::string name;
      int sr_bits = 0;
      require(r.find("policy") != nullptr, path + ".policy", "missing (stochastic or deadzone-sr)");
      r.string("policy", name);
      r.integer("sr_bits", sr_bits);
      require(sr_bits >= 0 && sr_bits <= 32, path + ".sr_bits", "must be in 0..32");
      const WritebackPolicy wp = named(path + ".policy", [&] { return make_policy(name, sr_bits); });
      require(wp.policy == Policy::stochastic || wp.policy == Policy::deadzone_sr, path + ".policy",
              "\"" + name + "\" has no expected projection (known: stochastic, deadzone-sr)");
      for (const WritebackPolicy& q : c.project_policies) {
        require(q.policy != wp.policy || q.sr_bits != wp.sr_bits, path, "duplicate policy \"" + name + "\"");
      }
      c.project_policies.push_back(wp);
    }
  }
}

}  // namespace

MarginLayout reference_margin_layout(const RunConfig& config) {
  return config.margin_formats.empty() ? default_margin_layout() : margin_layout_for(config.margin_formats);
}

RunConfig run_config_from_json(const json& j) {
  RunConfig c;
  const ConfigReader top(j, "", known_keys(""));
  parse_run(top, c);
  parse_model_and_data(top, c);
  parse_optimizer_and_schedule(top, c);
  parse_record(top, c);
  parse_target(top, c);
  parse_validation_and_replay(top, c);
  parse_projections(top, c);
  return c;
}

json to_json(const RunConfig& c) {
  json j;
  j["schema"] = kCellSchema;
  j["mode"] = mode_name(c.mode);
  j["seed"] = c.seed;
  j["steps"] = c.steps;
  json model = json::object(), data = json::object();
  find_model(c.model.kind).write(c, model, data);
  model["kind"] = c.model.kind;
  j["model"] = std::move(model);
  j["data"] = std::move(data);
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
    if (!c.margin_formats.empty()) {  // absent when empty: references recording every margin format keep their ids
      j["margin_formats"] = c.margin_formats;
    }
    if (!c.project_policies.empty()) {  // absent when empty: nearest-only reference cells keep their ids
      j["project_policies"] = json::array();
      for (const WritebackPolicy& p : c.project_policies) {
        j["project_policies"].push_back({{"policy", policy_name(p.policy)}, {"sr_bits", p.sr_bits}});
      }
    }
  }
  return j;
}

}  // namespace wbaudit::sim
