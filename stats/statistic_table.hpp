#pragma once
// The statistics wbaudit reports, one row each: the name, its definition, whose statistic it is, whether a
// preregistered gate may use it, and how its report row is shown. Every list of statistic names reads this table:
// the statistics a gate may name (gates.hpp), the analysis parser's checks (runners/spec/analysis_spec.cpp), and the
// definitions and rows of the skill report (runners/evaluate/). Adding a statistic is one row here plus the code
// that computes it (docs/architecture.md, "Extension points").
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wbaudit::stats {

// Whose statistic it is: a predictor's (computed by `wbaudit evaluate` for each predictor), the outcome's (no
// predictor: the common-time decomposition of the outcome table), or a paired study's (paired.hpp, recovery.hpp:
// a gate may name it, `wbaudit evaluate` does not compute it).
enum class StatisticOf { predictor, outcome, paired };

// How a report row shows the statistic.
enum class StatisticShown {
  interval,  // the estimate with its bootstrap interval, or the reason it has none
  test,      // an exact test's value, with its verdict in words as the note; never an interval
};

struct StatisticDefinition {
  std::string_view name;  // "rmse_macro"; a family of one statistic per baseline: "skill_vs_<baseline>"
  // The formula in words (statistics.csv, the report's Statistics table); e = forecast - outcome. A family's
  // "<baseline>" is replaced by the baseline predictor's name.
  std::string_view definition;
  StatisticOf of = StatisticOf::predictor;
  bool gate = true;  // a preregistered gate may name it
  StatisticShown shown = StatisticShown::interval;
  // Needs a nonzero anomaly field: when the predictor equals its across-cell mean at every step, the report shows
  // why the statistic is undefined instead of an interval.
  bool directional = false;
  int summary_column = 0;  // its column in the report's Summary table (1 = the first); 0: not in it
  // A directional statistic at run level (anomalies within each parameter group, across its runs): when the
  // predictor's run-level field is zero it has no run-specific signal, and a gate on it fails for that reason.
  bool run_level = false;
};

// Every statistic, in the order the skill report lists a predictor's rows (then the outcome's, then the paired
// studies').
const std::vector<StatisticDefinition>& statistic_table();

// The row of `name`; a family member ("skill_vs_template") finds the family's row. nullptr when unknown.
const StatisticDefinition* find_statistic(std::string_view name);

// The definition of `name` with a family's "<baseline>" filled in ("skill_vs_common_time" ->
// "1 - sum_c MSE_P / sum_c MSE_common-time"); "" when the name is unknown.
std::string statistic_definition(std::string_view name);

// A baseline's skill statistic: "skill_vs_" + the name with '-' as '_' ("common-time" -> "skill_vs_common_time").
std::string skill_statistic(std::string baseline);
// The baseline a skill statistic names, '_' read as '-' ("skill_vs_common_time" -> "common-time"); nullopt when
// `statistic` is not "skill_vs_" followed by [a-z0-9_]+.
std::optional<std::string> skill_baseline(std::string_view statistic);

// The names of the rows of `of`, in table order: with `gate_only`, those a gate may use; with `families`, a
// family by its pattern name ("skill_vs_<baseline>"), else left out.
std::vector<std::string> statistic_names(StatisticOf of, bool gate_only = false, bool families = true);
// Every name a gate may use, whoever's statistic it is, in table order.
std::vector<std::string> gate_statistic_names();

}  // namespace wbaudit::stats
