#pragma once
// `wbaudit evaluate`: score a sweep's predictors against its measured outcomes under an analysis spec
// (analysis_spec.hpp) and write a skill report (Markdown + HTML, CSV tables, gnuplot figures) into a new directory
// that never replaces an earlier evaluation. docs/evaluate.md describes the outputs and every definition.
//
// A registered analysis (runners/store/registry.hpp) is honoured: without --analysis the sweep's single registration is
// used; every gate is `inconclusive` when a required cell is missing or not canonical (the reasons are listed);
// an analysis registered retrospectively, or touched by a recorded deviation, is labelled retrospective.
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "forecast/crossing.hpp"
#include "forecast/tables.hpp"
#include "runners/spec/analysis_spec.hpp"
#include "stats/bootstrap.hpp"
#include "stats/breakdown.hpp"
#include "stats/decomposition.hpp"
#include "stats/directional.hpp"
#include "stats/gates.hpp"
#include "stats/metrics.hpp"
#include "stats/rmse_by_step.hpp"

namespace wbaudit::runners {

struct EvaluateOptions {
  std::optional<std::filesystem::path> analysis;  // --analysis; unset: the registered analysis, else the default
  std::filesystem::path out;                      // report directory; empty: DIR/evaluations/<UTC time>-<hash>
  bool figures = true;                            // render the gnuplot figures
  std::string external_reference;  // a directory of external runs only: the reference run (empty: the only one)
};

struct PredictorEvaluation {
  std::string name;
  bool privileged = false;    // matched-reference
  bool post_outcome = false;  // common-time
  std::string identical_to;   // another predictor with the same table, whose statistics were reused
  std::string unavailable;    // why it was not scored (e.g. template classes without history, declared inconclusive)
  // Every statistic of the statistic table (stats/statistic_table.hpp) computed for the predictor, by name
  // ("rmse_macro", "skill_vs_template", ...): its point estimate, and the remark the report adds to its row
  // ("k=3 of n=4 directional cells"). The fields below hold the same numbers with their context.
  std::map<std::string, double> estimates;
  std::map<std::string, std::string> notes;
  stats::MetricsReport metrics;
  std::map<std::string, double> skill;               // baseline name -> 1 - sum MSE_P / sum MSE_B
  std::map<std::string, stats::Interval> intervals;  // statistic name -> bootstrap interval
  std::map<std::string, std::string> undefined;      // statistic name -> why it has no interval
  stats::DirectionalSpecificity directional;
  std::optional<stats::Decomposition> error_decomposition;  // absent when the error table is constant
  std::string error_decomposition_note;
  // Set when the predictor's anomaly field (value minus the across-cell mean at each step) is exactly zero, as
  // for common-time: why no cell is directional and the anomaly correlations are undefined.
  std::string directional_note;
  // Run level: anomalies within each parameter group, across its runs (stats/directional.hpp). When the
  // predictor's run-level field is zero (the same value for every run of a group at each step, as for one shared
  // reference's projection), `run_directional_note` says it has no run-specific signal, and `failed` holds the same
  // reason for each run-level statistic: a gate on one of them fails (never passes, never inconclusive).
  stats::DirectionalSpecificity run_directional;
  std::string run_directional_note;
  std::map<std::string, std::string> failed;  // statistic name -> why a gate on it fails whatever its interval
  using StepSkill = stats::StepRmse;          // rmse over cells at one step, with its percentile interval
  std::vector<StepSkill> by_step;
  std::optional<forecast::CrossingSummary> crossing;
  std::vector<forecast::CellCrossing> crossings;
};

// Skill broken down by a factor of the grid (format, group, or a grid parameter): point estimates per level
// (stats/breakdown.hpp).
using BreakdownRow = stats::BreakdownRow;

struct GateEvaluation {
  GateSpec spec;
  stats::GateResult result;
  bool has_interval = false;
};

// One target cell of the sweep in the cohort table: canonical or not (and why), whether this analysis requires it
// (its cohort), and whether a recorded deviation names it (a recovered cell).
struct CohortRow {
  std::string cell;
  bool canonical = false;
  std::string reason;  // why not canonical ("missing", "noncanonical: ...")
  bool in_cohort = false;
  std::string deviation;   // the deviation naming it ("" when none)
  bool can_enter = false;  // canonical and in the cohort
};

struct EvaluationResult {
  std::filesystem::path sweep_dir;
  std::filesystem::path report_dir;  // set by write_evaluation_report
  AnalysisSpec analysis;
  std::string effective_analysis;  // the complete effective analysis (TOML, every default explicit); analysis.toml
  std::string analysis_sha256;     // SHA-256 of effective_analysis
  std::string standing;            // "preregistered", "retrospective", "not preregistered (exploratory)" or "not
                                   // preregistered (the registration is not verified)"
  std::vector<std::string> standing_reasons;
  std::optional<std::string> registration_sha256;
  std::string sweep_name;
  std::vector<std::string> cells;   // table rows: "<target name>/<group>"
  std::vector<std::string> runs;    // per row: the target run (bootstrap unit when unit = run)
  std::vector<std::string> groups;  // per row
  std::vector<std::string> formats;
  std::vector<std::string> projections;       // per row: the reference projection `source` uses (target's policy)
  std::string source_method = "projection";   // [source] method of the analysis ("analytic-grid": joint grid)
  std::vector<std::string> projection_notes;  // "cell: why nearest stands in for the target's policy"
  std::vector<std::int64_t> steps;
  stats::CellTable outcome;
  std::vector<forecast::PredictorTable> tables;  // as built (NaN rows for classes without history)
  std::string source_reference;                  // how `source` was chosen, in words
  std::string template_history;                  // which runs the template's history is, in words
  std::optional<stats::Decomposition> outcome_decomposition;
  std::map<std::string, double> outcome_estimates;           // share_time/cell/residual (the statistic table's)
  std::map<std::string, stats::Interval> outcome_intervals;  // share_time/cell/residual
  std::map<std::string, std::string> outcome_undefined;
  std::vector<PredictorEvaluation> predictors;
  std::vector<stats::CellStatus> required;   // every required cell with its state
  std::vector<std::string> missing_targets;  // "name (reason)"
  std::vector<GateEvaluation> gates;
  std::vector<CohortRow> cohort;               // every target cell of the sweep
  std::vector<std::string> cohort_statements;  // which cohort is complete, each registration's, each recovered cell
  // Set when a deviation names a cell: "negative: ..." when a recovered cell cannot enter this analysis' complete
  // cohort (the registered claim over it stays unestablished), else how the verdicts follow the gates.
  std::string cohort_verdict;
  std::size_t resampling_units = 0;  // distinct bootstrap units (target runs, or cells under unit = cell)
  // What the user should know about how the result was obtained, one sentence each (printed by the CLI, in the report),
  // e.g. unit = "cell" on cells that share runs.
  std::vector<std::string> warnings;
  forecast::CrossingOptions crossing_options;
  std::string burn_in_how;                // "default: 0.5% of the 1000 steps ..." or where it was declared
  std::vector<std::int64_t> group_sizes;  // per row: coordinates of the cell's group
  std::vector<std::map<std::string, std::string>> factors;  // per row: format, group and every grid parameter
  std::vector<BreakdownRow> breakdown;
  // Under a drop policy: what each table dropped (table name, "cell" or "step", label), written to dropped.csv.
  std::vector<std::array<std::string, 3>> dropped;
  std::size_t kept_cells = 0, kept_steps = 0;  // of the outcome after the policy
  double seconds = 0;

  const PredictorEvaluation& predictor(const std::string& name) const;  // throws AnalysisError
};

// Reads the sweep and computes everything; writes nothing. The steps, in order (each in its own file of
// runners/evaluate/): inputs (inputs.hpp) -> standing and cohort (standing.hpp) -> cells and source (cells.hpp) ->
// template history (templates.hpp) -> tables (evaluation_tables.hpp) -> effective analysis (effective_analysis.hpp)
// -> scoring each predictor (scoring.hpp) -> gates (gates.hpp). Throws (AnalysisError, StoreError, RegistryError,
// stats::StatsError, forecast::ForecastError) with the offending file, key, cell or value on bad input.
EvaluationResult evaluate_sweep(const std::filesystem::path& sweep_dir, const EvaluateOptions& options = {});

// The report is three writers over the result (report_writers.hpp): the CSV tables, the figures and the document.
// Writes the report into options.out (refused when it exists) or a new DIR/evaluations/<UTC time>-<hash>/, built
// under a temporary name and renamed into place. Returns the directory.
std::filesystem::path write_evaluation_report(EvaluationResult& result, const EvaluateOptions& options = {});

// Exit statuses of `wbaudit evaluate --check`, for CI: every declared gate passes -> 0; any gate fails -> 3; no
// gate fails but any is inconclusive, or no gate is declared (nothing was checked) -> 4. Errors exit 1 as always.
// Every gate passes under a retrospective analysis (registered after outcomes existed, or touched by a recorded
// deviation) -> 5: a pass, but not the preregistered pass a CI check means by 0.
inline constexpr int kCheckPass = 0;
inline constexpr int kCheckFail = 3;
inline constexpr int kCheckInconclusive = 4;
inline constexpr int kCheckRetrospectivePass = 5;
int gate_check_status(const EvaluationResult& result);

// The statistic name of the skill against a baseline, as gates, CSVs and stdout spell it:
// "common-time" -> "skill_vs_common_time".
std::string baseline_key(std::string baseline);

// One line per gate, e.g. "accuracy: rmse_macro(source) <= 0.05: pass, 0.012 [0.010, 0.015] (95% bca, ...)".
std::string gate_summary(const EvaluationResult& result);

}  // namespace wbaudit::runners
