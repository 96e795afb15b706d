#include "runners/spec/analysis_spec.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include "forecast/predictor_registry.hpp"
#include "runners/spec/toml_error.hpp"
#include "stats/error.hpp"
#include "stats/statistic_table.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace {

struct Reader {
  std::string file;
  [[noreturn]] void fail(const toml::node* node, const std::string& key, const std::string& what) const {
    std::ostringstream out;
    out << file << ":";
    if (node && node->source().begin.line > 0) {
      out << node->source().begin.line << ":";
    }
    out << " " << key << ": " << what;
    throw AnalysisError(out.str());
  }
  std::string string(const toml::node& node, const std::string& key) const {
    if (auto v = node.value<std::string>()) {
      return *v;
    }
    fail(&node, key, "expected a string");
  }
  double number(const toml::node& node, const std::string& key) const {
    std::optional<double> v;
    if (node.is_integer()) {
      v = static_cast<double>(*node.value<std::int64_t>());
    }
    if (node.is_floating_point()) {
      v = *node.value<double>();
    }
    if (!v) {
      fail(&node, key, "expected a number");
    }
    if (!std::isfinite(*v)) {
      fail(&node, key, "non-finite number");
    }
    return *v;
  }
  std::int64_t integer(const toml::node& node, const std::string& key) const {
    if (auto v = node.value_exact<std::int64_t>()) {
      return *v;
    }
    fail(&node, key, "expected an integer");
  }
  std::vector<std::string> strings(const toml::node& node, const std::string& key) const {
    const auto* array = node.as_array();
    if (!array) {
      fail(&node, key, "expected an array of strings");
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < array->size(); ++i) {
      out.push_back(string(*array->get(i), key));
    }
    return out;
  }
  const toml::table& table(const toml::node& node, const std::string& key) const {
    if (const auto* t = node.as_table()) {
      return *t;
    }
    fail(&node, key, "expected a table");
  }
  // Refuses keys outside `known`, naming the first unknown one.
  void only(const toml::table& t, const std::string& prefix, const std::vector<std::string>& known) const {
    for (auto&& [k, v] : t) {
      if (std::find(known.begin(), known.end(), std::string(k.str())) != known.end()) {
        continue;
      }
      std::string list;
      for (auto& n : known) {
        list += (list.empty() ? "" : ", ") + n;
      }
      fail(&v, prefix + std::string(k.str()),
           "unknown key" + util::did_you_mean(std::string(k.str()), known) + " (known: " + list + ")");
    }
  }
};

nlohmann::json to_json(const toml::node& node, const std::string& key, const Reader& r) {
  if (const auto* t = node.as_table()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto&& [k, v] : *t) {
      out[std::string(k.str())] = to_json(v, key + "." + std::string(k.str()), r);
    }
    return out;
  }
  if (const auto* a = node.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < a->size(); ++i) {
      out.push_back(to_json(*a->get(i), key, r));
    }
    return out;
  }
  if (auto v = node.value_exact<std::int64_t>()) {
    return *v;
  }
  if (auto v = node.value_exact<double>()) {
    return r.number(node, key);
  }
  if (auto v = node.value_exact<bool>()) {
    return *v;
  }
  if (auto v = node.value_exact<std::string>()) {
    return *v;
  }
  r.fail(&node, key, "unsupported value type");
}

}  // namespace

const std::map<std::string, std::vector<std::string>>& analysis_table_keys() {
  static const std::map<std::string, std::vector<std::string>> tables = {
      {"", {"analysis", "required_cells", "source", "template", "bootstrap", "crossing", "gates"}},
      {"analysis",
       {"name", "description", "outcome", "predictors", "baselines", "groups", "missing", "required_cells",
        "scored_runs"}},
      {"source", {"reference", "overrides", "sweep", "method"}},
      {"template", {"class", "history", "history_sweep", "history_cells", "missing_class"}},
      {"bootstrap", {"resamples", "seed", "method", "confidence", "unit", "min_units"}},
      {"crossing", {"threshold", "burn_in", "tolerance", "min_group_size"}},
      {"gates[]", {"name", "statistic", "predictor", "comparator", "threshold"}},
  };
  return tables;
}

std::vector<std::string> analysis_spec_keys() {
  std::vector<std::string> keys;
  const auto& tables = analysis_table_keys();
  for (const auto& k : tables.at("")) {
    if (!tables.count(k) && k != "gates") {
      keys.push_back(k);
    }
  }
  for (const auto& [table, names] : tables) {
    if (table.empty()) {
      continue;
    }
    for (const auto& k : names) {
      keys.push_back(table + "." + k);
    }
  }
  return keys;
}

const std::vector<std::string>& known_predictors() {
  static const std::vector<std::string> names = forecast::predictor_names();
  return names;
}

bool is_outcome_statistic(const std::string& statistic) {
  const stats::StatisticDefinition* row = stats::find_statistic(statistic);
  return row != nullptr && row->of == stats::StatisticOf::outcome;
}

AnalysisSpec default_analysis_spec() {
  AnalysisSpec spec;
  spec.name = "default analysis";
  spec.description = "wbaudit evaluate without --analysis: source, template (leave-run-out) and common-time, no gates";
  spec.bootstrap.seed = 20261202;
  spec.bootstrap.resamples = 2000;
  return spec;
}

AnalysisSpec load_analysis_spec(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw AnalysisError(path.string() + ": cannot read the analysis spec");
  }
  std::ostringstream text;
  text << in.rdbuf();
  AnalysisSpec spec = parse_analysis_spec(text.str(), path);
  spec.path = path;
  return spec;
}

namespace {

// [analysis]: what is scored. Returns its required_cells node (nullptr when absent); `top_level_required` is the
// top-level one (both given is an error).
const toml::node* read_analysis_table(const Reader& r, const toml::node& node, const toml::node* top_level_required,
                                      AnalysisSpec& spec) {
  const auto& a = r.table(node, "analysis");
  r.only(a, "analysis.", analysis_table_keys().at("analysis"));
  if (const auto* n = a.get("name")) {
    spec.name = r.string(*n, "analysis.name");
  }
  if (const auto* n = a.get("description")) {
    spec.description = r.string(*n, "analysis.description");
  }
  if (const auto* n = a.get("outcome")) {
    spec.outcome = r.string(*n, "analysis.outcome");
    if (spec.outcome != "erased_fraction") {
      r.fail(n, "analysis.outcome", "unknown outcome \"" + spec.outcome + "\" (known: erased_fraction)");
    }
  }
  if (const auto* n = a.get("predictors")) {
    spec.predictors = r.strings(*n, "analysis.predictors");
    if (spec.predictors.empty()) {
      r.fail(n, "analysis.predictors", "no predictor to score");
    }
    std::set<std::string> seen;
    for (auto& p : spec.predictors) {
      if (!forecast::find_predictor(p)) {
        r.fail(n, "analysis.predictors",
               "unknown predictor \"" + p + "\"" + util::did_you_mean(p, known_predictors()) +
                   " (known: " + util::join(known_predictors()) + ")");
      }
      if (!seen.insert(p).second) {
        r.fail(n, "analysis.predictors", "predictor \"" + p + "\" listed twice");
      }
    }
  }
  if (const auto* n = a.get("baselines")) {
    spec.baselines = r.strings(*n, "analysis.baselines");
    for (auto& b : spec.baselines) {
      const forecast::PredictorInfo* info = forecast::find_predictor(b);
      if (!info || !info->baseline) {
        r.fail(n, "analysis.baselines",
               "unknown baseline \"" + b + "\" (known: " + util::join(forecast::predictor_names(true)) + ")");
      }
    }
  }
  if (const auto* n = a.get("groups")) {
    spec.groups = r.strings(*n, "analysis.groups");
  }
  if (const auto* n = a.get("scored_runs")) {
    spec.scored_runs = r.strings(*n, "analysis.scored_runs");
    if (spec.scored_runs.empty()) {
      r.fail(n, "analysis.scored_runs", "empty: no run would be scored");
    }
  }
  if (const auto* n = a.get("missing")) {
    try {
      spec.missing = stats::missing_policy_from_name(r.string(*n, "analysis.missing"));
    } catch (const stats::StatsError& e) {
      r.fail(n, "analysis.missing", e.what());
    }
  }
  const toml::node* required = a.get("required_cells");
  if (required && top_level_required) {
    r.fail(required, "analysis.required_cells", "given twice (also at the top level)");
  }
  return required;
}

// [source]: which reference `source` projects, and how.
void read_source_table(const Reader& r, const toml::node& node, AnalysisSpec& spec) {
  const auto& s = r.table(node, "source");
  r.only(s, "source.", analysis_table_keys().at("source"));
  if (const auto* n = s.get("method")) {
    spec.source_method = r.string(*n, "source.method");
    if (spec.source_method != "projection" && spec.source_method != "analytic-grid") {
      r.fail(n, "source.method", "unknown value \"" + spec.source_method + "\" (known: projection, analytic-grid)");
    }
  }
  if (const auto* n = s.get("reference")) {
    auto v = r.string(*n, "source.reference");
    if (v != "declared" && v != "overrides") {
      r.fail(n, "source.reference", "unknown value \"" + v + "\" (known: declared, overrides)");
    }
  }
  if (const auto* n = s.get("overrides")) {
    spec.source_overrides = to_json(r.table(*n, "source.overrides"), "source.overrides", r);
    if (spec.source_overrides.empty()) {
      r.fail(n, "source.overrides", "empty table");
    }
  }
  if (const auto* n = s.get("sweep")) {
    spec.source_sweep = r.string(*n, "source.sweep");
    if (spec.source_sweep.empty()) {
      r.fail(n, "source.sweep", "empty path");
    }
  }
}

// [template]: the template class and where its history comes from.
void read_template_table(const Reader& r, const toml::node& node, AnalysisSpec& spec) {
  const auto& t = r.table(node, "template");
  r.only(t, "template.", analysis_table_keys().at("template"));
  if (const auto* n = t.get("class")) {
    spec.template_class = r.strings(*n, "template.class");
    if (spec.template_class.empty()) {
      r.fail(n, "template.class", "empty class definition");
    }
  }
  std::string history = "leave-run-out";
  const toml::node* history_node = t.get("history");
  if (history_node) {
    history = r.string(*history_node, "template.history");
    if (history != "leave-run-out" && history != "sweep" && history != "declared") {
      r.fail(history_node, "template.history",
             "unknown history \"" + history +
                 "\" (known: leave-run-out: the sweep's own target runs, each scored run left out of its "
                 "template; declared: the target runs of this sweep named by template.history_cells, none of "
                 "them scored; sweep: the target runs of template.history_sweep)");
    }
    spec.history_declared = history == "declared";
  }
  if (const auto* n = t.get("history_sweep")) {
    spec.history_sweep = r.string(*n, "template.history_sweep");
    if (spec.history_sweep.empty()) {
      r.fail(n, "template.history_sweep", "empty path");
    }
    if (history_node && history != "sweep") {
      r.fail(history_node, "template.history",
             "\"" + history + "\" contradicts template.history_sweep (use history = \"sweep\")");
    }
  } else if (history == "sweep") {
    r.fail(history_node, "template.history_sweep",
           "required with history = \"sweep\" (the directory of the sweep whose target runs are the history)");
  }
  if (const auto* n = t.get("history_cells")) {
    spec.history_cells = r.strings(*n, "template.history_cells");
    if (spec.history_cells.empty()) {
      r.fail(n, "template.history_cells", "empty: no run would be historical");
    }
  } else if (spec.history_declared) {
    r.fail(history_node, "template.history_cells",
           "required with history = \"declared\" (the target runs of this sweep declared historical)");
  }
  if (const auto* n = t.get("missing_class")) {
    auto v = r.string(*n, "template.missing_class");
    if (v != "error" && v != "inconclusive") {
      r.fail(n, "template.missing_class", "unknown value \"" + v + "\" (known: error, inconclusive)");
    }
    spec.template_missing_inconclusive = v == "inconclusive";
  }
}

// [bootstrap]: resamples, seed, interval method, confidence and the resampling unit.
void read_bootstrap_table(const Reader& r, const toml::node& node, AnalysisSpec& spec) {
  const auto& b = r.table(node, "bootstrap");
  r.only(b, "bootstrap.", analysis_table_keys().at("bootstrap"));
  if (const auto* n = b.get("resamples")) {
    auto v = r.integer(*n, "bootstrap.resamples");
    if (v < 2 || v > 10000000) {
      r.fail(n, "bootstrap.resamples", "must be in [2, 1e7], got " + std::to_string(v));
    }
    spec.bootstrap.resamples = static_cast<int>(v);
  }
  if (const auto* n = b.get("seed")) {
    auto v = r.integer(*n, "bootstrap.seed");
    if (v < 0) {
      r.fail(n, "bootstrap.seed", "must be >= 0");
    }
    spec.bootstrap.seed = static_cast<std::uint64_t>(v);
  }
  if (const auto* n = b.get("method")) {
    try {
      spec.bootstrap.method = stats::interval_method_from_name(r.string(*n, "bootstrap.method"));
    } catch (const stats::StatsError& e) {
      r.fail(n, "bootstrap.method", e.what());
    }
  }
  if (const auto* n = b.get("confidence")) {
    spec.bootstrap.confidence = r.number(*n, "bootstrap.confidence");
    if (!(spec.bootstrap.confidence > 0 && spec.bootstrap.confidence < 1)) {
      r.fail(n, "bootstrap.confidence", "must be in (0, 1)");
    }
  }
  if (const auto* n = b.get("unit")) {
    auto v = r.string(*n, "bootstrap.unit");
    if (v != "run" && v != "cell") {
      r.fail(n, "bootstrap.unit",
             "unknown unit \"" + v + "\" (known: run: the cells of one target run resampled together; cell)");
    }
    spec.unit = v == "run" ? BootstrapUnit::run : BootstrapUnit::cell;
  }
  if (const auto* n = b.get("min_units")) {
    spec.min_units = r.integer(*n, "bootstrap.min_units");
    if (spec.min_units < 2) {
      r.fail(n, "bootstrap.min_units",
             "must be >= 2 (a bootstrap needs two units), got " + std::to_string(spec.min_units));
    }
  }
}

// [crossing]: the crossing settings (unset ones come from the sweep spec's [evaluation]).
void read_crossing_table(const Reader& r, const toml::node& node, AnalysisSpec& spec) {
  const auto& c = r.table(node, "crossing");
  r.only(c, "crossing.", analysis_table_keys().at("crossing"));
  if (const auto* n = c.get("min_group_size")) {
    spec.min_group_size = r.integer(*n, "crossing.min_group_size");
    if (*spec.min_group_size < 0) {
      r.fail(n, "crossing.min_group_size", "must be >= 0");
    }
  }
  if (const auto* n = c.get("threshold")) {
    spec.threshold = r.number(*n, "crossing.threshold");
  }
  if (const auto* n = c.get("burn_in")) {
    spec.burn_in = r.integer(*n, "crossing.burn_in");
    if (*spec.burn_in < 0) {
      r.fail(n, "crossing.burn_in", "must be >= 0");
    }
  }
  if (const auto* n = c.get("tolerance")) {
    spec.tolerance = r.number(*n, "crossing.tolerance");
    if (!(*spec.tolerance > 0)) {
      r.fail(n, "crossing.tolerance", "must be > 0");
    }
  }
}

// The statistics a gate may name that `wbaudit evaluate` computes, in the statistic table's order: each
// predictor's, the skill family, the outcome's.
std::string evaluated_gate_statistics() {
  std::vector<std::string> names = stats::statistic_names(stats::StatisticOf::predictor, true, false);
  for (const auto& row : stats::statistic_table()) {
    if (row.of == stats::StatisticOf::predictor && row.gate && row.name.ends_with("<baseline>")) {
      names.emplace_back(row.name);
    }
  }
  for (const auto& name : stats::statistic_names(stats::StatisticOf::outcome, true)) {
    names.push_back(name);
  }
  return util::join(names);
}

struct GateEntry {
  std::string key;  // "gates[0]" or "gates.NAME"
  const toml::table* table = nullptr;
  std::string name;
};

// [[gates]] (an array of tables with `name`) or [gates.NAME] (a table of tables, named by their keys).
std::vector<GateEntry> gate_entries(const Reader& r, const toml::node& node) {
  std::vector<GateEntry> entries;
  if (const auto* array = node.as_array()) {
    for (std::size_t i = 0; i < array->size(); ++i) {
      const std::string key = "gates[" + std::to_string(i) + "]";
      const auto& g = r.table(*array->get(i), key);
      if (!g.get("name")) {
        r.fail(&g, key + ".name", "required");
      }
      entries.push_back(GateEntry{key, &g, r.string(*g.get("name"), key + ".name")});
    }
  } else if (const auto* table = node.as_table()) {
    for (auto&& [k, v] : *table) {
      const std::string key = "gates." + std::string(k.str());
      const auto& g = r.table(v, key);
      if (g.get("name")) {
        r.fail(g.get("name"), key + ".name", "not allowed in [gates.NAME]: the key is the name");
      }
      entries.push_back(GateEntry{key, &g, std::string(k.str())});
    }
  } else {
    r.fail(&node, "gates", "expected [[gates]] tables or [gates.NAME] tables");
  }
  return entries;
}

// One gate: its statistic (one that evaluate computes; a skill against a declared baseline), its predictor (none
// for an outcome statistic), comparator and threshold.
// `names`: the gates read so far (a name given twice is refused).
GateSpec read_gate(const Reader& r, const GateEntry& entry, const AnalysisSpec& spec, std::set<std::string>& names) {
  const std::string& key = entry.key;
  const std::string& name = entry.name;
  const auto& g = *entry.table;
  r.only(g, key + ".", analysis_table_keys().at("gates[]"));
  GateSpec gate;
  gate.line = g.source().begin.line;
  for (auto* field : {"statistic", "comparator", "threshold"}) {
    if (!g.get(field)) {
      r.fail(&g, key + "." + field, "required");
    }
  }
  gate.gate.name = name;
  if (!names.insert(gate.gate.name).second) {
    r.fail(&g, key + ".name", "duplicate gate name \"" + name + "\"");
  }
  const auto* stat_node = g.get("statistic");
  gate.gate.statistic = r.string(*stat_node, key + ".statistic");
  try {
    stats::check_gate_statistic(gate.gate.statistic);
  } catch (const stats::StatsError& e) {
    r.fail(stat_node, key + ".statistic",
           e.what() + util::did_you_mean(gate.gate.statistic, stats::gate_statistic_names()));
  }
  const std::string& st = gate.gate.statistic;
  const stats::StatisticDefinition* row = stats::find_statistic(st);
  if (!row || row->of == stats::StatisticOf::paired) {
    r.fail(stat_node, key + ".statistic",
           "statistic \"" + st + "\" is not computed by wbaudit evaluate (it computes: " + evaluated_gate_statistics() +
               ")");
  }
  if (const auto baseline = stats::skill_baseline(st)) {
    if (std::find(spec.baselines.begin(), spec.baselines.end(), *baseline) == spec.baselines.end()) {
      r.fail(stat_node, key + ".statistic",
             "\"" + st + "\": " + *baseline +
                 " is not a declared baseline (analysis.baselines: " + util::join(spec.baselines) + ")");
    }
  }
  if (const auto* n = g.get("predictor")) {
    gate.predictor = r.string(*n, key + ".predictor");
    if (is_outcome_statistic(st)) {
      r.fail(n, key + ".predictor", "\"" + st + "\" is a statistic of the outcome: no predictor");
    }
    if (std::find(spec.predictors.begin(), spec.predictors.end(), gate.predictor) == spec.predictors.end()) {
      r.fail(n, key + ".predictor",
             "\"" + gate.predictor + "\" is not among analysis.predictors (" + util::join(spec.predictors) + ")");
    }
  } else if (!is_outcome_statistic(st)) {
    r.fail(&g, key + ".predictor", "required for the statistic \"" + st + "\"");
  }
  const auto* cmp = g.get("comparator");
  auto comparator = r.string(*cmp, key + ".comparator");
  if (comparator == "<=") {
    gate.gate.direction = stats::GateDirection::at_most;
  } else if (comparator == ">=") {
    gate.gate.direction = stats::GateDirection::at_least;
  } else {
    r.fail(cmp, key + ".comparator", "unknown comparator \"" + comparator + "\" (known: <=, >=)");
  }
  gate.gate.threshold = r.number(*g.get("threshold"), key + ".threshold");
  return gate;
}

void read_gates(const Reader& r, const toml::node& node, AnalysisSpec& spec) {
  std::set<std::string> names;
  for (const auto& entry : gate_entries(r, node)) {
    spec.gates.push_back(read_gate(r, entry, spec, names));
  }
}

toml::table parse_toml(const std::string& text, const std::filesystem::path& source_name) {
  try {
    return toml::parse(text, source_name.string());
  } catch (const toml::parse_error& e) {
    std::ostringstream out;
    out << source_name.string() << ":" << e.source().begin.line << ": " << toml_error_description(e, text);
    throw AnalysisError(out.str());
  }
}

}  // namespace

AnalysisSpec parse_analysis_spec(const std::string& text, const std::filesystem::path& source_name) {
  Reader r{source_name.string()};
  const toml::table root = parse_toml(text, source_name);
  if (root.empty()) {
    // Silently the defaults would hide a wrong file (an empty or truncated analysis); without --analysis evaluate
    // uses the default analysis on purpose.
    throw AnalysisError(source_name.string() +
                        ": the analysis spec is empty (no key); give the analysis' tables (docs/specs.md), or leave "
                        "out --analysis for the default analysis");
  }
  AnalysisSpec spec = default_analysis_spec();
  spec.name = source_name.stem().string();
  spec.description.clear();
  spec.text = text;
  spec.path = source_name;
  r.only(root, "", analysis_table_keys().at(""));

  const toml::node* required = root.get("required_cells");
  std::string required_key = "required_cells";
  if (const auto* node = root.get("analysis")) {
    if (const auto* nested = read_analysis_table(r, *node, required, spec)) {
      required = nested;
      required_key = "analysis.required_cells";
    }
  }
  for (auto& b : spec.baselines) {
    if (std::find(spec.predictors.begin(), spec.predictors.end(), b) == spec.predictors.end()) {
      r.fail(root.at_path("analysis.baselines").node(), "analysis.baselines",
             "baseline \"" + b + "\" is not among analysis.predictors (" + util::join(spec.predictors) + ")");
    }
  }
  if (required) {
    spec.required_declared = true;
    spec.required_cells = r.strings(*required, required_key);
  }
  if (const auto* node = root.get("source")) {
    read_source_table(r, *node, spec);
  }
  if (const auto* node = root.get("template")) {
    read_template_table(r, *node, spec);
  }
  if (const auto* node = root.get("bootstrap")) {
    read_bootstrap_table(r, *node, spec);
  }
  if (const auto* node = root.get("crossing")) {
    read_crossing_table(r, *node, spec);
  }
  if (const auto* node = root.get("gates")) {
    read_gates(r, *node, spec);
  }
  return spec;
}

namespace {
std::string toml_string(const std::string& s) {
  return nlohmann::json(s).dump();  // a JSON string is a TOML basic string
}
std::string toml_strings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += (i ? ", " : "") + toml_string(v[i]);
  }
  return out + "]";
}
std::string toml_number(double x) {
  // The shortest text that reads back as the same double: "confidence = 0.95", not 0.94999999999999996.
  std::string s = util::shortest_number(x);
  if (s.find_first_of(".eEn") == std::string::npos) {
    s += ".0";  // a TOML float, not an integer
  }
  return s;
}
std::string toml_value(const nlohmann::json& v) {
  if (v.is_string()) {
    return toml_string(v.get<std::string>());
  }
  if (v.is_boolean()) {
    return v.get<bool>() ? "true" : "false";
  }
  if (v.is_number_integer()) {
    return v.dump();
  }
  if (v.is_number()) {
    return toml_number(v.get<double>());
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto& [k, x] : v.items()) {
      out += (first ? " " : ", ") + toml_string(k) + " = " + toml_value(x);
      first = false;
    }
    return out + " }";
  }
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += (i ? ", " : "") + toml_value(v[i]);
  }
  return out + "]";
}
}  // namespace

std::string effective_analysis_toml(const AnalysisSpec& spec, const std::vector<std::string>& groups,
                                    const ResolvedCrossing& crossing) {
  std::ostringstream t;
  t << "# The complete effective analysis of this evaluation: every setting explicit, crossing settings and groups\n"
       "# resolved against the sweep. `wbaudit evaluate --analysis` on this file repeats the evaluation.\n";
  if (spec.required_declared) {
    t << "required_cells = " << toml_strings(spec.required_cells) << "\n";
  } else {
    t << "# required_cells: not declared, so every target cell of the sweep is required\n";
  }
  t << "\n[analysis]\nname = " << toml_string(spec.name) << "\ndescription = " << toml_string(spec.description)
    << "\noutcome = " << toml_string(spec.outcome) << "\npredictors = " << toml_strings(spec.predictors)
    << "\nbaselines = " << toml_strings(spec.baselines) << "\ngroups = " << toml_strings(groups)
    << "\nmissing = " << toml_string(std::string(stats::to_string(spec.missing))) << "\n";
  if (!spec.scored_runs.empty()) {
    t << "scored_runs = " << toml_strings(spec.scored_runs) << "\n";
  }
  t << "\n[source]\nreference = " << toml_string(spec.source_overrides.empty() ? "declared" : "overrides") << "\n";
  if (!spec.source_overrides.empty()) {
    t << "overrides = " << toml_value(spec.source_overrides) << "\n";
  }
  if (!spec.source_sweep.empty()) {
    t << "sweep = " << toml_string(spec.source_sweep) << "\n";
  }
  if (spec.source_method != "projection") {
    t << "method = " << toml_string(spec.source_method) << "\n";
  }
  t << "\n[template]\nclass = " << toml_strings(spec.template_class) << "\n";
  if (spec.history_declared) {
    t << "history = \"declared\"\n";
  } else if (spec.history_sweep.empty()) {
    t << "history = \"leave-run-out\"\n";
  } else {
    t << "history = \"sweep\"\nhistory_sweep = " << toml_string(spec.history_sweep) << "\n";
  }
  if (!spec.history_cells.empty()) {
    t << "history_cells = " << toml_strings(spec.history_cells) << "\n";
  } else {
    t << "# history_cells: not declared, so every target run "
      << (spec.history_sweep.empty() ? "" : "of the history sweep ") << "is historical"
      << (spec.history_sweep.empty() ? " (leave-run-out)" : "") << "\n";
  }
  t << "missing_class = " << (spec.template_missing_inconclusive ? "\"inconclusive\"" : "\"error\"") << "\n";
  t << "\n[bootstrap]\nresamples = " << spec.bootstrap.resamples << "\nseed = " << spec.bootstrap.seed
    << "\nmethod = " << toml_string(std::string(stats::to_string(spec.bootstrap.method)))
    << "\nconfidence = " << toml_number(spec.bootstrap.confidence)
    << "\nunit = " << (spec.unit == BootstrapUnit::run ? "\"run\"" : "\"cell\"") << "\nmin_units = " << spec.min_units
    << "\n";
  t << "\n[crossing]\nthreshold = " << toml_number(crossing.threshold) << "\nburn_in = " << crossing.burn_in
    << "\ntolerance = " << toml_number(crossing.tolerance) << "\nmin_group_size = " << crossing.min_group_size << "\n";
  for (const auto& g : spec.gates) {
    t << "\n[[gates]]\nname = " << toml_string(g.gate.name) << "\nstatistic = " << toml_string(g.gate.statistic)
      << "\n";
    if (!g.predictor.empty()) {
      t << "predictor = " << toml_string(g.predictor) << "\n";
    }
    t << "comparator = " << toml_string(std::string(stats::to_string(g.gate.direction)))
      << "\nthreshold = " << toml_number(g.gate.threshold) << "\n";
  }
  return t.str();
}

}  // namespace wbaudit::runners
