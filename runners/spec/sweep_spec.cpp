#include "runners/spec/sweep_spec.hpp"

#include "util/hash.hpp"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "forecast/crossing.hpp"
#include "runners/spec/toml_error.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/run.hpp"
#include "sim/trace/margin_histogram.hpp"
#include "util/json_path.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace {

using nlohmann::json;

// Where each dotted key path was written in the spec, for error messages.
using LineMap = std::map<std::string, std::int64_t>;

struct Context {
  std::string file;
  LineMap lines;

  [[noreturn]] void fail(std::int64_t line, const std::string& what) const {
    std::ostringstream out;
    out << file;
    if (line > 0) {
      out << ':' << line;
    }
    out << ": " << what;
    throw SpecError(out.str());
  }
  // The line of a key path, or of its closest declared ancestor.
  std::int64_t line_of(std::string path) const {
    while (!path.empty()) {
      if (auto it = lines.find(path); it != lines.end()) {
        return it->second;
      }
      auto dot = path.rfind('.');
      if (dot == std::string::npos) {
        break;
      }
      path.resize(dot);
    }
    return 0;
  }
};

json to_json(const toml::node& node, const std::string& path, Context& ctx) {
  ctx.lines.emplace(path, static_cast<std::int64_t>(node.source().begin.line));
  if (auto* table = node.as_table()) {
    json out = json::object();
    for (auto&& [key, value] : *table) {
      std::string child = path.empty() ? std::string(key.str()) : path + "." + std::string(key.str());
      ctx.lines.emplace(child, static_cast<std::int64_t>(key.source().begin.line));
      out[std::string(key.str())] = to_json(value, child, ctx);
    }
    return out;
  }
  if (auto* array = node.as_array()) {
    json out = json::array();
    for (std::size_t i = 0; i < array->size(); ++i) {
      out.push_back(to_json(*array->get(i), path, ctx));
    }
    return out;
  }
  if (auto v = node.value_exact<std::int64_t>()) {
    return *v;
  }
  if (auto v = node.value_exact<double>()) {
    if (!std::isfinite(*v)) {
      ctx.fail(ctx.line_of(path), path + ": non-finite number");
    }
    return *v;
  }
  if (auto v = node.value_exact<bool>()) {
    return *v;
  }
  if (auto v = node.value_exact<std::string>()) {
    return *v;
  }
  ctx.fail(static_cast<std::int64_t>(node.source().begin.line), path + ": dates and times are not supported here");
}

// Flattens [grid] into axes: every array leaf is an axis named by its dotted path.
void collect_axes(const json& table, const std::string& prefix, std::vector<std::pair<std::string, json>>& axes,
                  const Context& ctx) {
  for (auto& [key, value] : table.items()) {
    std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      collect_axes(value, path, axes, ctx);
    } else if (value.is_array()) {
      if (value.empty()) {
        ctx.fail(ctx.line_of("grid." + path), "grid." + path + ": empty axis (the grid would be empty)");
      }
      axes.emplace_back(path, value);
    } else {
      ctx.fail(ctx.line_of("grid." + path), "grid." + path + ": a grid axis must be an array of values");
    }
  }
}

std::string value_text(const json& value) {
  if (value.is_string()) {
    return value.get<std::string>();
  }
  return value.dump();
}

std::vector<std::string> string_list(const json& value, const std::string& path, const Context& ctx) {
  if (!value.is_array()) {
    ctx.fail(ctx.line_of(path), path + ": expected an array of strings");
  }
  std::vector<std::string> out;
  for (auto& v : value) {
    if (!v.is_string()) {
      ctx.fail(ctx.line_of(path), path + ": expected an array of strings");
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

// Learning rates set relative to the target format (lr_for_scale): lr = lr_scale * 2^-(M+1), where erasure begins
// for |u| ~ 2^-(M+1) |w| (docs/science.md section 3, study 1).
void resolve_lr_scale(json& config, const std::string& cell, const Context& ctx) {
  if (!config.contains("optimizer") || !config["optimizer"].is_object() || !config["optimizer"].contains("lr_scale")) {
    return;
  }
  auto& opt = config["optimizer"];
  if (opt.contains("lr")) {
    ctx.fail(ctx.line_of("optimizer.lr_scale"), "optimizer: give either lr or lr_scale, not both (cell " + cell + ")");
  }
  if (!opt["lr_scale"].is_number()) {
    ctx.fail(ctx.line_of("optimizer.lr_scale"), "optimizer.lr_scale: expected a number");
  }
  if (!config.contains("target") || !config["target"].contains("format")) {
    ctx.fail(ctx.line_of("optimizer.lr_scale"), "optimizer.lr_scale needs target.format (cell " + cell + ")");
  }
  sim::FormatSpec format;
  try {
    // Block formats: the element format's M (its gaps relative to the block's scale).
    format = sim::storage_format_from_name(config["target"]["format"].get<std::string>()).scalar;
  } catch (const std::exception& e) {
    ctx.fail(ctx.line_of("target.format"), std::string("target.format: ") + e.what());
  }
  const double scale = opt["lr_scale"].get<double>();
  opt.erase("lr_scale");
  opt["lr"] = lr_for_scale(format, scale);
}

// A text data source is identified by its content: the SHA-256 of data.path goes into the cell (so a changed file is
// a different cell, and a run refuses a file that changed after the spec was read). Cells run in worker processes,
// on other nodes and from the frozen spec, so the path must be absolute.
void resolve_data_file(json& config, const std::string& cell, const Context& ctx) {
  if (!config.contains("data") || !config["data"].is_object() || !config["data"].contains("path")) {
    return;
  }
  json& data = config["data"];
  if (!data["path"].is_string()) {
    ctx.fail(ctx.line_of("data.path"), "data.path: expected a string");
  }
  const std::filesystem::path path = data["path"].get<std::string>();
  if (!path.is_absolute()) {
    ctx.fail(ctx.line_of("data.path"), "data.path: \"" + path.string() +
                                           "\" must be an absolute path (cells run in worker processes, on other "
                                           "nodes and from the frozen spec); cell " +
                                           cell);
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    ctx.fail(ctx.line_of("data.path"), "data.path: " + path.string() + ": no such file (cell " + cell + ")");
  }
  if (!data.contains("sha256")) {
    try {
      data["sha256"] = util::sha256_file(path);
    } catch (const std::exception& e) {
      ctx.fail(ctx.line_of("data.path"), "data.path: " + path.string() + ": " + e.what());
    }
  }
}

void validate(const SweepCell& cell, const Context& ctx) {
  try {
    (void)sim::run_config_from_json(cell.config);
  } catch (const std::exception& e) {
    std::string what = e.what();
    // The simulator names the key path first ("optimizer.lr: ..."); map it to the spec line: the grid axis that set
    // it for this cell, else where the base configuration declares it.
    std::string path = what.substr(0, what.find(':'));
    std::int64_t line = 0;
    for (auto& [axis, value] : cell.params.items()) {
      if (path == axis || path.rfind(axis + ".", 0) == 0 || axis.rfind(path + ".", 0) == 0) {
        line = ctx.line_of("grid." + axis);
      }
    }
    ctx.fail(line > 0 ? line : ctx.line_of(path), what + " (cell " + cell.name + ")");
  }
}

}  // namespace

double lr_for_scale(const sim::FormatSpec& format, double lr_scale) {
  if (format.kind == sim::FormatKind::floating) {
    return std::ldexp(lr_scale, -(format.man_bits + 1));
  }
  // intK: half the step of a tensor whose absmax is 1 (scale 1 / L, L = 2^(K-1) - 1), as 2^-(M+1) is half the
  // spacing of floating values in [1, 2).
  return lr_scale / (2.0 * format.int_max_level);
}

const std::map<std::string, std::vector<std::string>>& sweep_table_keys() {
  static const std::map<std::string, std::vector<std::string>> tables = {
      {"",
       {"sweep", "seed", "steps", "model", "data", "optimizer", "schedule", "record", "target", "reference", "grid",
        "evaluation", "validation", "replay"}},
      {"sweep", {"name", "description", "max_cells"}},
      {"evaluation", {"groups", "threshold", "burn_in", "tolerance", "min_group_size"}},
      {"reference", {"project_formats", "margin_formats"}},
  };
  return tables;
}

std::vector<SpecKey> sweep_spec_keys() {
  std::vector<SpecKey> keys;
  const auto& tables = sweep_table_keys();
  // The sweep-level tables: never grid axes.
  for (const auto& [table, names] : tables) {
    if (table.empty()) {
      continue;
    }
    for (const auto& k : names) {
      keys.push_back({table + "." + k, false, "any"});
    }
  }
  keys.push_back({"grid", false, "any"});
  // The cell configuration: every key but those the runner sets (schema, mode, project_*) can be a grid axis.
  const auto run = sim::run_config_key_tables();
  const std::set<std::string> runner_set = {"schema", "mode", "project_formats", "project_policies", "margin_formats"};
  // A table of each model ("model/<kind>", "data/<kind>") is known by the prefix before its slash.
  const auto per_model = [&](const std::string& table) {
    const auto it = run.lower_bound(table + "/");
    return it != run.end() && it->first.rfind(table + "/", 0) == 0;
  };
  for (const auto& k : run.at("")) {
    if (runner_set.count(k) || run.count(k) || per_model(k)) {
      continue;
    }
    keys.push_back({k, true, "any"});
  }
  // A key of a model's table applies to the kinds whose table holds it: "any" when every kind's does (data.batch,
  // model.kind), else their names (comma-separated).
  std::map<std::string, std::vector<std::string>> kinds_of_key;
  std::set<std::string> kinds;
  for (const auto& [table, names] : run) {
    if (table.empty() || table == "project_policies[]") {
      continue;
    }
    const auto slash = table.find('/');
    const std::string prefix = table.substr(0, slash);
    for (const auto& k : names) {
      const std::string path = prefix + "." + k;
      if (slash == std::string::npos) {
        keys.push_back({path, true, "any"});
        continue;
      }
      kinds.insert(table.substr(slash + 1));
      if (kinds_of_key[path].empty()) {
        keys.push_back({path, true, ""});
      }
      kinds_of_key[path].push_back(table.substr(slash + 1));
    }
  }
  for (SpecKey& key : keys) {
    if (const auto it = kinds_of_key.find(key.path); it != kinds_of_key.end()) {
      const std::set<std::string> of(it->second.begin(), it->second.end());
      key.models = of == kinds ? "any" : util::join(it->second, ", ");
    }
  }
  // Read by the runner, not the simulator: lr relative to the target format (resolve_lr_scale).
  keys.push_back({"optimizer.lr_scale", true, "any"});
  return keys;
}

std::string role_name(CellRole role) {
  return role == CellRole::reference ? "reference" : "target";
}

std::size_t SweepSpec::count(CellRole role) const {
  std::size_t n = 0;
  for (auto& c : cells) {
    n += c.role == role ? 1 : 0;
  }
  return n;
}

const SweepCell& SweepSpec::cell(const std::string& cell_name) const {
  for (auto& c : cells) {
    if (c.name == cell_name) {
      return c;
    }
  }
  throw std::out_of_range("sweep " + name + " has no cell named " + cell_name);
}

SweepSpec load_sweep_spec(const std::filesystem::path& path) {
  // Only a regular file of bounded size: a FIFO would block forever, /dev/zero would grow without end.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw SpecError(path.string() + ": no such spec file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw SpecError(path.string() + ": not a regular file (a spec is a TOML file)");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    throw SpecError(path.string() + ": cannot read the spec file: " + ec.message());
  }
  if (size > kMaxSpecBytes) {
    throw SpecError(path.string() + ": " + std::to_string(size) + " bytes; a spec is at most " +
                    std::to_string(kMaxSpecBytes) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw SpecError(path.string() + ": cannot open the spec file");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_sweep_spec(text.str(), path);
}

namespace {

// The top level's keys and the sweep-level tables' keys ([sweep], [evaluation], [reference]) are known ones.
void check_known_keys(json& doc, const Context& ctx) {
  const auto& tables = sweep_table_keys();
  for (auto& [key, value] : doc.items()) {
    const auto& known = tables.at("");
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      ctx.fail(ctx.line_of(key),
               "unknown key \"" + key + "\"" + util::did_you_mean(key, known) + " (known: " + util::join(known) + ")");
    }
  }
  for (const auto* table : {"sweep", "evaluation", "reference"}) {
    if (!doc.contains(table)) {
      continue;
    }
    if (!doc[table].is_object()) {
      ctx.fail(ctx.line_of(table), std::string(table) + ": expected a table");
    }
    const auto& known = tables.at(table);
    for (auto& [key, value] : doc[table].items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        ctx.fail(ctx.line_of(std::string(table) + "." + key), std::string(table) + "." + key + ": unknown key" +
                                                                  util::did_you_mean(key, known) +
                                                                  " (known: " + util::join(known) + ")");
      }
    }
  }
}

// [sweep]: name, description, max_cells (returned; the default without it).
std::int64_t read_sweep_table(json& doc, const std::filesystem::path& source_name, SweepSpec& spec,
                              const Context& ctx) {
  std::int64_t max_cells = kDefaultMaxCells;
  if (doc.contains("sweep")) {
    for (auto& [key, value] : doc["sweep"].items()) {
      if (key == "name" && value.is_string()) {
        spec.name = value.get<std::string>();
        // The name becomes runs/<name> when --out is omitted: one plain path component only.
        if (spec.name.empty() || spec.name == "." || spec.name == ".." ||
            spec.name.find_first_of("/\\") != std::string::npos || spec.name.find("..") != std::string::npos ||
            spec.name.front() == '.' || spec.name.find_first_of("\n\r\t") != std::string::npos) {
          ctx.fail(ctx.line_of("sweep.name"), "sweep.name: \"" + spec.name +
                                                  "\" is not a plain name (no path separators, no \"..\", not "
                                                  "starting with '.')");
        }
      } else if (key == "max_cells" && value.is_number_integer()) {
        max_cells = value.get<std::int64_t>();
        if (max_cells < 1) {
          ctx.fail(ctx.line_of("sweep.max_cells"), "sweep.max_cells: must be >= 1");
        }
      } else if (key == "description" && value.is_string()) {
        spec.description = value.get<std::string>();
      } else {
        ctx.fail(ctx.line_of("sweep." + key), "sweep." + key + ": wrong type (" + value.dump() + ")");
      }
    }
  }
  if (spec.name.empty()) {
    spec.name = source_name.stem().string();
  }
  return max_cells;
}

// [evaluation]: the groups and crossing settings of the crossing report and of evaluate's defaults.
void read_evaluation_table(json& doc, SweepSpec& spec, const Context& ctx) {
  if (!doc.contains("evaluation")) {
    return;
  }
  for (auto& [key, value] : doc["evaluation"].items()) {
    const std::string path = "evaluation." + key;
    if (key == "groups") {
      spec.evaluation.groups = string_list(value, path, ctx);
    } else if (key == "threshold" && value.is_number()) {
      spec.evaluation.threshold = value.get<double>();
      if (!(spec.evaluation.threshold > 0 && spec.evaluation.threshold <= 1)) {
        ctx.fail(ctx.line_of(path), path + ": must be in (0, 1], got " + value.dump());
      }
    } else if (key == "burn_in" && value.is_number_integer()) {
      spec.evaluation.burn_in = value.get<std::int64_t>();
      if (*spec.evaluation.burn_in < 0) {
        ctx.fail(ctx.line_of(path), path + ": must be >= 0, got " + value.dump());
      }
    } else if (key == "min_group_size" && value.is_number_integer()) {
      spec.evaluation.min_group_size = value.get<std::int64_t>();
      if (spec.evaluation.min_group_size < 0) {
        ctx.fail(ctx.line_of(path), path + ": must be >= 0, got " + value.dump());
      }
    } else if (key == "tolerance" && value.is_number()) {
      spec.evaluation.tolerance = value.get<double>();
      if (!(spec.evaluation.tolerance > 0)) {
        ctx.fail(ctx.line_of(path), path + ": must be > 0, got " + value.dump());
      }
    } else {
      ctx.fail(ctx.line_of(path), path + ": wrong type (" + value.dump() + ")");
    }
  }
}

using Axes = std::vector<std::pair<std::string, json>>;

// [grid]: the axes (dotted path, values), each path once and none that cannot vary.
Axes read_grid_axes(json& doc, const Context& ctx) {
  Axes axes;
  if (!doc.contains("grid")) {
    ctx.fail(0, "no [grid] table: a sweep needs at least one grid axis");
  }
  collect_axes(doc["grid"], "", axes, ctx);
  if (axes.empty()) {
    ctx.fail(ctx.line_of("grid"), "grid: no axes (the grid would be empty)");
  }
  std::set<std::string> axis_paths;
  for (auto& [path, values] : axes) {
    if (path == "mode" || path.rfind("project_formats", 0) == 0 || path.rfind("project_policies", 0) == 0 ||
        path.rfind("margin_formats", 0) == 0) {
      ctx.fail(ctx.line_of("grid." + path), "grid." + path + ": cannot be a grid axis");
    }
    // The same axis written twice (a quoted "optimizer.lr_scale" beside [grid.optimizer] lr_scale) would multiply
    // the grid by itself under names that show one value.
    if (!axis_paths.insert(path).second) {
      ctx.fail(ctx.line_of("grid." + path), "grid." + path + ": the same axis is given twice (as a quoted dotted key " +
                                                "and as a nested table key); keep one");
    }
  }
  return axes;
}

// The number of target cells (the product of the axes' lengths), refused before anything is expanded when it is
// above max_cells or would not fit in memory: a mistyped grid of 10^6 cells is refused at once, not after minutes.
std::size_t checked_grid_size(const Axes& axes, const json& base, std::int64_t max_cells, const Context& ctx) {
  std::size_t total = 1;
  for (const auto& axis : axes) {
    total *= axis.second.size();
    if (total > static_cast<std::size_t>(max_cells)) {
      ctx.fail(ctx.line_of("grid"), "grid: more than " + std::to_string(max_cells) +
                                        " target cells (the product of the axes' lengths); raise [sweep] max_cells "
                                        "if you mean it");
    }
  }
  // Expanding the grid holds every cell's configuration (and its reference's) in memory, as JSON: measured about 47 KB
  // per target cell for tests/slurm/tiny_sweep.toml, whose configuration is 280 bytes of text (160 bytes of memory per
  // byte of text, and 8 KB for the names, parameters and what the store and status keep per cell). Refuse a grid that
  // could not be expanded here, naming its size, rather than end in std::bad_alloc.
  const double per_cell = 160.0 * static_cast<double>(base.dump().size()) + 8192.0;
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (physical > 0 && per_cell * static_cast<double>(total) > 0.5 * physical) {
    std::ostringstream msg;
    msg << std::setprecision(3) << "grid: " << total << " target cells would need about "
        << per_cell * static_cast<double>(total) / 1073741824.0 << " GiB to expand (their configurations and "
        << "their references'), more than half of this machine's " << physical / 1073741824.0
        << " GiB; split the grid into several sweeps (sweep.max_cells = " << max_cells << ")";
    ctx.fail(ctx.line_of("grid"), msg.str());
  }
  return total;
}

// What every reference projects: every target format of the grid (and [reference] project_formats), and every
// stochastic policy of the grid with its sr_bits, as expected erased fractions (sim/precision/expected_erasure.hpp),
// so that SR targets are scored against their own.
struct Projections {
  std::set<std::string> formats;
  std::set<std::pair<std::string, int>> sr_policies;
  std::vector<std::string> margin_formats;  // [reference] margin_formats (empty: every format)
};

// Target cell k of the grid: mixed-radix decoding of k, the last axis varying fastest.
SweepCell target_cell(const json& base, const Axes& axes, std::size_t k, std::size_t total, Projections& projections,
                      const Context& ctx) {
  json config = base;
  json params = json::object();
  std::string name = "target";
  std::size_t rest = k;
  std::size_t stride = total;
  for (const auto& [path, values] : axes) {
    stride /= values.size();
    const json& value = values[rest / stride];
    rest %= stride;
    util::set_json_at(config, path, value);
    params[path] = value;
    name.append("/").append(path, path.rfind('.') + 1).append("=").append(value_text(value));
  }
  config["mode"] = "target";
  if (!config.contains("target") || !config["target"].contains("format")) {
    ctx.fail(ctx.line_of("target"), "target.format is required (in [target] or as a grid axis)");
  }
  if (!config["target"].contains("policy")) {
    config["target"]["policy"] = "nearest";
  }
  resolve_lr_scale(config, name, ctx);
  resolve_data_file(config, name, ctx);
  projections.formats.insert(config["target"]["format"].get<std::string>());
  if (config["target"]["policy"].is_string()) {
    const std::string policy = config["target"]["policy"].get<std::string>();
    const json* bits = config["target"].contains("sr_bits") ? &config["target"]["sr_bits"] : nullptr;
    if ((policy == "stochastic" || policy == "deadzone-sr") && (!bits || bits->is_number_integer())) {
      projections.sr_policies.insert({policy, bits ? bits->get<int>() : 0});
    }
  }
  SweepCell cell{name, CellRole::target, config, params, ""};
  validate(cell, ctx);  // before references are derived, so errors name the target's own keys
  return cell;
}

// References: each target's run in fp32, same seed, init and data order; identical ones are shared. Sets each
// target's reference name.
std::vector<SweepCell> derive_references(std::vector<SweepCell>& targets, const Projections& projections) {
  std::map<std::string, std::string> reference_by_config;
  std::vector<SweepCell> references;
  for (auto& target : targets) {
    json config = target.config;
    config.erase("target");
    config.erase("replay");  // checkpoint replays belong to the target runs
    config["mode"] = "reference";
    config["project_formats"] = std::vector<std::string>(projections.formats.begin(), projections.formats.end());
    if (!projections.margin_formats.empty()) {  // absent by default: such references keep their ids
      config["margin_formats"] = projections.margin_formats;
    }
    if (!projections.sr_policies.empty()) {
      config["project_policies"] = json::array();
      for (const auto& [policy, bits] : projections.sr_policies) {
        config["project_policies"].push_back({{"policy", policy}, {"sr_bits", bits}});
      }
    }
    std::string key = config.dump();
    auto it = reference_by_config.find(key);
    if (it == reference_by_config.end()) {
      json params = json::object();
      for (auto& [path, value] : target.params.items()) {
        if (path.rfind("target.", 0) == 0) {
          continue;
        }
        params[path] = value;
      }
      // lr is what distinguishes references made from different lr_scale x format combinations.
      if (config.contains("optimizer") && config["optimizer"].is_object() && config["optimizer"].contains("lr")) {
        params["optimizer.lr"] = config["optimizer"]["lr"];
      }
      std::string name = "reference";
      for (auto& [path, value] : params.items()) {
        name += "/" + path.substr(path.rfind('.') + 1) + "=" + value_text(value);
      }
      it = reference_by_config.emplace(key, name).first;
      references.push_back({name, CellRole::reference, config, params, ""});
    }
    target.reference = it->second;
  }
  return references;
}

// [evaluation] groups must be parameter groups of every target run: checked now, not after every cell has run.
void check_evaluation_groups(const SweepSpec& spec, const Context& ctx) {
  if (spec.evaluation.groups.empty()) {
    return;
  }
  for (const auto& cell : spec.cells) {
    if (cell.role != CellRole::target) {
      continue;
    }
    std::vector<std::string> known;
    try {
      known = sim::model_tensor_names(sim::run_config_from_json(cell.config).model);
    } catch (const std::exception&) {
      continue;  // the cell's own validation names the problem
    }
    for (const auto& g : spec.evaluation.groups) {
      if (std::find(known.begin(), known.end(), g) != known.end()) {
        continue;
      }
      ctx.fail(ctx.line_of("evaluation.groups"), "evaluation.groups: \"" + g + "\" is not a parameter group of " +
                                                     cell.name + " (its groups: " + util::join(known) + ")");
    }
  }
}

}  // namespace

SweepSpec parse_sweep_spec(const std::string& text, const std::filesystem::path& source_name) {
  Context ctx{source_name.string(), {}};
  toml::table root;
  try {
    root = toml::parse(text, source_name.string());
  } catch (const toml::parse_error& e) {
    ctx.fail(static_cast<std::int64_t>(e.source().begin.line), toml_error_description(e, text));
  }
  json doc = to_json(root, "", ctx);
  check_known_keys(doc, ctx);
  SweepSpec spec;
  spec.path = source_name;
  spec.text = text;
  const std::int64_t max_cells = read_sweep_table(doc, source_name, spec, ctx);
  read_evaluation_table(doc, spec, ctx);
  Projections projections;
  if (doc.contains("reference")) {
    for (auto& [key, value] : doc["reference"].items()) {
      const auto formats = string_list(value, "reference." + key, ctx);
      if (key == "margin_formats") {
        try {
          projections.margin_formats = sim::margin_layout_for(formats).formats;  // the layout's order
        } catch (const sim::FormatError& e) {
          ctx.fail(ctx.line_of("reference.margin_formats"), std::string("reference.margin_formats: ") + e.what());
        }
      } else {
        projections.formats = std::set<std::string>(formats.begin(), formats.end());
      }
    }
  }
  // The base configuration: everything but the sweep-level tables.
  json base = doc;
  for (const auto* key : {"sweep", "reference", "grid", "evaluation"}) {
    base.erase(key);
  }
  base["schema"] = "wbaudit.cell/1";
  const Axes axes = read_grid_axes(doc, ctx);
  const std::size_t total = checked_grid_size(axes, base, max_cells, ctx);
  std::vector<SweepCell> targets;
  targets.reserve(total);
  for (std::size_t k = 0; k < total; ++k) {
    targets.push_back(target_cell(base, axes, k, total, projections, ctx));
  }
  if (!projections.margin_formats.empty()) {
    // The references' margin histogram must hold every per-tensor target format it can record, or the analytic grid
    // (wbaudit grid, evaluate's analytic-grid source) could not forecast the targets from them.
    const std::vector<std::string> recordable = sim::margin_format_names();
    const auto& kept = projections.margin_formats;
    for (const std::string& f : projections.formats) {
      if (std::find(recordable.begin(), recordable.end(), f) != recordable.end() &&
          std::find(kept.begin(), kept.end(), f) == kept.end()) {
        ctx.fail(ctx.line_of("reference.margin_formats"),
                 "reference.margin_formats: lacks \"" + f +
                     "\", a target format of the grid (the references could not forecast it); add it, or drop "
                     "margin_formats to record every format");
      }
    }
  }
  std::vector<SweepCell> references = derive_references(targets, projections);
  std::set<std::string> names;
  for (auto* list : {&references, &targets}) {
    for (auto& cell : *list) {
      if (!names.insert(cell.name).second) {
        ctx.fail(ctx.line_of("grid"), "two cells share the name " + cell.name);
      }
      if (cell.role == CellRole::reference) {
        validate(cell, ctx);
      }
      spec.cells.push_back(std::move(cell));
    }
  }
  check_evaluation_groups(spec, ctx);
  return spec;
}

BurnIn crossing_burn_in(const SweepSpec& spec, std::optional<std::int64_t> declared,
                        const std::string& declared_where) {
  if (declared) {
    return {*declared, declared_where};
  }
  if (spec.evaluation.burn_in) {
    return {*spec.evaluation.burn_in, "declared in the sweep spec's [evaluation]"};
  }
  std::int64_t steps = -1;
  for (const auto& c : spec.cells) {
    if (c.role != CellRole::target || !c.config.contains("steps") || !c.config["steps"].is_number_integer()) {
      continue;
    }
    const auto s = c.config["steps"].get<std::int64_t>();
    steps = steps < 0 ? s : std::min(steps, s);
  }
  if (steps < 0) {
    steps = 0;
  }
  return default_crossing_burn_in(steps);
}

BurnIn default_crossing_burn_in(std::int64_t shortest_steps, const std::string& runs) {
  return {forecast::default_burn_in(shortest_steps),
          "default: 0.5% (" + std::to_string(forecast::kDefaultBurnInPerMille) + " per mille) of the " +
              std::to_string(shortest_steps) + " steps of the shortest " + runs};
}

}  // namespace wbaudit::runners
