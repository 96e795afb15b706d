#pragma once
// Sweep specs (TOML): a base run configuration, a [grid] whose Cartesian product defines the target runs, the fp32
// reference runs they need, and the evaluation settings. Errors name the file, line and key.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sim/precision/format.hpp"

namespace wbaudit::runners {

// "examples/grid.toml:12: optimizer.lr: expected a number"
class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class CellRole { reference, target };

struct SweepCell {
  std::string name;  // human-readable, unique in the sweep: "target/e4m3/lr_scale=0.5/hidden=32/seed=1"
  CellRole role = CellRole::target;
  nlohmann::json config;  // the run configuration (docs/contracts.md), mode included
  nlohmann::json params;  // the grid values that made this cell, keyed by dotted path ({} for references)
  std::string reference;  // targets: name of the fp32 reference run with the same seed, data order and init
};

struct EvaluationSettings {
  std::vector<std::string> groups;  // parameter groups that form evaluation cells (empty: all groups)
  double threshold = 0.5;           // crossing threshold theta
  // t0; unset: forecast::default_burn_in of the shortest target run (0.5% of its steps), see crossing_burn_in
  std::optional<std::int64_t> burn_in;
  double tolerance = 0.15;           // relative crossing-time tolerance
  std::int64_t min_group_size = 64;  // groups with fewer coordinates are left out of the crossing headline
};

struct SweepSpec;
// The crossing burn-in of a sweep and how it was set, e.g. {5, "default: 0.5% of the 1000 steps"} or
// {0, "declared in [evaluation]"}. `declared` (e.g. an analysis' [crossing] burn_in) overrides the spec.
struct BurnIn {
  std::int64_t steps = 0;
  std::string how;
};
BurnIn crossing_burn_in(const SweepSpec& spec, std::optional<std::int64_t> declared = {},
                        const std::string& declared_where = "declared in the analysis");
// The default burn-in for runs whose shortest has `shortest_steps` steps (forecast::default_burn_in), saying so:
// {.., "default: 0.5% (5 per mille) of the S steps of the shortest <runs>"}.
BurnIn default_crossing_burn_in(std::int64_t shortest_steps, const std::string& runs = "target run");

struct SweepSpec {
  std::filesystem::path path;
  std::string text;  // the spec file, verbatim (frozen into the sweep directory)
  std::string name;
  std::string description;
  std::vector<SweepCell> cells;  // references first, then targets, in grid order
  EvaluationSettings evaluation;

  std::size_t count(CellRole role) const;
  const SweepCell& cell(const std::string& name) const;  // throws std::out_of_range naming the cell
};

// Limits: a spec file is at most kMaxSpecBytes; a grid expands to at most [sweep] max_cells target cells (default
// kDefaultMaxCells), counted before any cell is built.
inline constexpr std::uintmax_t kMaxSpecBytes = 16u << 20;
inline constexpr std::int64_t kDefaultMaxCells = 100000;

// Reads and validates a spec; every cell's configuration is checked by the simulator's strict parser.
SweepSpec load_sweep_spec(const std::filesystem::path& path);
// The same from text; source_name is used in error messages.
SweepSpec parse_sweep_spec(const std::string& text, const std::filesystem::path& source_name);

// A key a sweep spec may set: its dotted path, whether [grid] may vary it, and the model kinds it applies to ("any",
// or the comma-separated kinds whose tables hold it: "two_layer", "decoder"). docs/specs.md documents exactly these
// (tests/runners/spec_keys_test.cpp).
struct SpecKey {
  std::string path;
  bool grid_axis = false;
  std::string models;
};
std::vector<SpecKey> sweep_spec_keys();
// The keys of the spec's top level ("") and of its sweep-level tables ("sweep", "evaluation", "reference"); the
// parser refuses any other. The cell configuration's tables are sim::run_config_key_tables.
const std::map<std::string, std::vector<std::string>>& sweep_table_keys();

// optimizer.lr_scale = s as a learning rate, relative to the target format: half its spacing at weights of
// magnitude ~1. Floating formats: lr = s * 2^-(M+1) (half the spacing in [1, 2)); intK: lr = s / (2 L), L =
// 2^(K-1) - 1 (half the step of a tensor whose absmax at initialization is 1: scale 1 / L). docs/specs.md.
double lr_for_scale(const sim::FormatSpec& format, double lr_scale);

std::string role_name(CellRole role);

}  // namespace wbaudit::runners
