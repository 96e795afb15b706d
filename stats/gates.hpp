#pragma once
// Preregistered gates: a declared threshold on a named statistic with a direction, judged on the statistic's
// confidence interval [lower, upper] (docs/science.md section 2, "Gates"):
//   direction at_most  ("<="): pass when upper <= threshold, fail when lower > threshold
//   direction at_least (">="): pass when lower >= threshold, fail when upper < threshold
//   otherwise (the interval straddles the threshold)                 -> inconclusive
// A gate is also inconclusive, whatever its interval, when any of its required cells is missing or is not
// canonical; the caller supplies each cell's status and the reasons are kept in the result.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stats/bootstrap.hpp"

namespace wbaudit::stats {

enum class GateDirection { at_most, at_least };
enum class Verdict { pass, fail, inconclusive };

std::string_view to_string(GateDirection direction);  // "<=" / ">="
std::string_view to_string(Verdict verdict);          // "pass" / "fail" / "inconclusive"

// Statistic names a gate may use: the rows of the statistic table (statistic_table.hpp) a gate may use, e.g.
// rmse_macro, skill_vs_<baseline> (skill_vs_template, skill_vs_common_time), share_time, recovery.
std::vector<std::string> const& known_gate_statistics();
bool is_known_gate_statistic(std::string_view name);
// Throws StatsError naming `name` and listing the known statistics.
void check_gate_statistic(std::string_view name);

struct Gate {
  std::string name;       // e.g. "accuracy"
  std::string statistic;  // e.g. "rmse_macro"
  GateDirection direction = GateDirection::at_most;
  double threshold = 0;
  std::vector<std::string> required_cells;
};

// Parses "STATISTIC <= THRESHOLD" or "STATISTIC >= THRESHOLD" (spaces optional). Throws StatsError on another
// operator, an unknown statistic or a non-finite threshold.
Gate parse_gate(std::string_view expression, std::string const& name = {},
                std::vector<std::string> required_cells = {});

// What the caller knows about one required cell.
struct CellStatus {
  std::string cell;
  bool present = false;
  bool canonical = false;
  std::string reason;  // why it is missing or non-canonical (kept in the gate's reasons)
};

struct GateResult {
  Gate gate;
  Verdict verdict = Verdict::inconclusive;
  Interval interval;
  std::vector<std::string> reasons;  // why inconclusive/fail/pass, in words
};

// Judges `gate` on `interval` (the interval of gate.statistic). Required cells absent from `cells` count as missing.
// Throws StatsError on an unknown statistic, a non-finite interval or lower > upper.
GateResult evaluate_gate(Gate const& gate, Interval const& interval, std::vector<CellStatus> const& cells = {});

// Looks the interval up by gate.statistic; a known statistic that was not computed throws StatsError listing the
// computed ones.
GateResult evaluate_gate(Gate const& gate, std::map<std::string, Interval> const& computed,
                         std::vector<CellStatus> const& cells = {});

}  // namespace wbaudit::stats
