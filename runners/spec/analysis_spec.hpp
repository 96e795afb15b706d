#pragma once
// Analysis specs (TOML) for `wbaudit evaluate`: which outcome and predictors are scored, against which baselines,
// how the historical template is built, the bootstrap, the crossing settings, the preregistered gates and the
// required cells. docs/evaluate.md documents every key; examples/two_layer_analysis.toml is a complete example.
// Errors name the file, line and key: "a.toml:14: gates[1].statistic: unknown statistic \"rmse\" (known: ...)".
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stats/bootstrap.hpp"
#include "stats/gates.hpp"
#include "stats/missing.hpp"

namespace wbaudit::runners {

class AnalysisError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Predictor names (forecast::predictor_name): "source", "analytic-grid", "template", "matched-reference",
// "common-time". Baselines for skill: "template", "common-time".
const std::vector<std::string>& known_predictors();
// The keys the analysis parser accepts, by table: "" (the top level), "analysis", "source", "template",
// "bootstrap", "crossing", "gates[]" (each [[gates]] entry, or each [gates.NAME] table). analysis_spec_keys: the
// same as dotted paths ("crossing.burn_in", "gates[].statistic"); docs/specs.md documents exactly these.
const std::map<std::string, std::vector<std::string>>& analysis_table_keys();
std::vector<std::string> analysis_spec_keys();

// Statistics evaluate computes, per predictor: bias, mae, rmse_macro, rmse_pooled, skill_vs_<baseline>,
// sign_agreement_rate, anomaly_correlation, cell_anomaly_correlation, error_share_time, error_share_cell,
// error_share_residual; of the outcome (no predictor): share_time, share_cell, share_residual.
bool is_outcome_statistic(const std::string& statistic);

struct GateSpec {
  stats::Gate gate;       // name, statistic, direction, threshold (required cells come from the analysis)
  std::string predictor;  // empty for outcome statistics
  std::int64_t line = 0;  // where it was declared
};

enum class BootstrapUnit { run, cell };

struct AnalysisSpec {
  std::filesystem::path path;  // empty for the built-in default
  std::string text;            // verbatim (hashed to find a registration)
  std::string name;
  std::string description;
  std::string outcome = "erased_fraction";
  std::vector<std::string> predictors = {"source", "template", "common-time"};
  std::vector<std::string> baselines = {"template", "common-time"};
  std::vector<std::string> groups;  // empty: the sweep spec's [evaluation] groups (or every group)
  stats::MissingPolicy missing = stats::MissingPolicy::error;

  // `source`: the target's declared fp32 reference, or the reference whose configuration is the declared
  // reference's with these keys (dotted paths) replaced, e.g. {"seed": 8} (a predeclared trace of another seed).
  nlohmann::json source_overrides = nlohmann::json::object();
  // `[source] sweep`: the source reference is a reference run of this other sweep directory (relative paths are
  // relative to the evaluated sweep directory), chosen by the declared configuration with source_overrides; empty:
  // this sweep's own references.
  std::string source_sweep;
  // [source] method: "projection" (default: the exact projection the reference recorded) or "analytic-grid" (the
  // analytic grid across the exponent range from the reference's joint histogram, at the cell's lr scale;
  // forecast::analytic_series, docs/forecasting.md).
  std::string source_method = "projection";

  // Template class keys: "format", "group", "policy", or a dotted configuration path ("optimizer.lr_scale").
  std::vector<std::string> template_class = {"format", "group"};
  std::vector<std::string> history_cells;  // target-cell name patterns declared historical; empty: every target
  // `[template] history = "sweep"`: the history is the canonical target runs of this other sweep directory (an
  // earlier sweep, e.g. at other seeds; relative to the evaluated sweep directory), never the scored runs; empty:
  // leave-run-out over this sweep's own target runs. history_cells then selects among that sweep's targets.
  std::string history_sweep;
  // `[template] history = "declared"`: the history is the canonical target runs of this sweep that history_cells
  // names (required), none of them scored (analysis.scored_runs must leave them out): runs declared historical.
  bool history_declared = false;
  bool template_missing_inconclusive = false;  // a class without history: error (default) or inconclusive

  stats::BootstrapSpec bootstrap;
  BootstrapUnit unit = BootstrapUnit::run;
  // The fewest resampling units a gate is decided on ([bootstrap] min_units): with n units a bootstrap has only
  // C(2n - 1, n) distinct resamples (10 at n = 3), so its interval is narrow by construction; below this minimum
  // every gate is inconclusive, with that reason. An analysis that accepts fewer says so explicitly.
  static constexpr std::int64_t kDefaultMinUnits = 5;
  std::int64_t min_units = kDefaultMinUnits;

  std::optional<double> threshold;  // crossing settings; unset: the sweep spec's [evaluation]
  std::optional<std::int64_t> burn_in;
  std::optional<double> tolerance;
  std::optional<std::int64_t> min_group_size;

  // `[analysis] scored_runs`: target-run name patterns scored (a cohort of the sweep); empty: every target run.
  // Runs outside it are neither scored nor history; a pattern must match a target run of the sweep.
  std::vector<std::string> scored_runs;
  bool required_declared = false;           // required_cells given (else: every target cell)
  std::vector<std::string> required_cells;  // name patterns
  std::vector<GateSpec> gates;
};

AnalysisSpec load_analysis_spec(const std::filesystem::path& path);
AnalysisSpec parse_analysis_spec(const std::string& text, const std::filesystem::path& source_name);
// What evaluate uses without --analysis and without a registration: every predictor available, no gates.
AnalysisSpec default_analysis_spec();

// The complete effective analysis as TOML, every default written out (the crossing settings and groups as
// resolved against the sweep: `threshold`, `burn_in`, `tolerance`, `min_group_size`, `groups`), so that an
// evaluation can be repeated or registered word for word: parse_analysis_spec of the result, written again with
// the same resolved settings, gives the same text. `wbaudit evaluate` hashes this text (the analysis SHA-256).
struct ResolvedCrossing {
  double threshold = 0.5;
  std::int64_t burn_in = 0;
  double tolerance = 0.15;
  std::int64_t min_group_size = 0;
};
std::string effective_analysis_toml(const AnalysisSpec& spec, const std::vector<std::string>& groups,
                                    const ResolvedCrossing& crossing);

}  // namespace wbaudit::runners
