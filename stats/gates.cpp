#include "stats/gates.hpp"

#include <charconv>
#include <cmath>

#include "stats/error.hpp"
#include "stats/statistic_table.hpp"

namespace wbaudit::stats {

std::string_view to_string(GateDirection direction) {
  return direction == GateDirection::at_most ? "<=" : ">=";
}

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass:
      return "pass";
    case Verdict::fail:
      return "fail";
    case Verdict::inconclusive:
      return "inconclusive";
  }
  return "unknown";
}

std::vector<std::string> const& known_gate_statistics() {
  static std::vector<std::string> const names = gate_statistic_names();
  return names;
}

bool is_known_gate_statistic(std::string_view name) {
  StatisticDefinition const* row = find_statistic(name);
  return row != nullptr && row->gate;
}

void check_gate_statistic(std::string_view name) {
  if (is_known_gate_statistic(name)) {
    return;
  }
  std::string list;
  for (auto const& k : known_gate_statistics()) {
    list += (list.empty() ? "" : ", ") + k;
  }
  throw StatsError("gate: unknown statistic \"" + std::string(name) + "\" (known: " + list + ")");
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string format_double(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

}  // namespace

Gate parse_gate(std::string_view expression, std::string const& name, std::vector<std::string> required_cells) {
  std::string const expr(expression);
  auto const le = expression.find("<=");
  auto const ge = expression.find(">=");
  if ((le == std::string_view::npos) == (ge == std::string_view::npos)) {
    throw StatsError("parse_gate: \"" + expr + "\" is not \"STATISTIC <= THRESHOLD\" or \"STATISTIC >= THRESHOLD\"");
  }
  auto const pos = le != std::string_view::npos ? le : ge;
  Gate g;
  g.name = name.empty() ? expr : name;
  g.direction = le != std::string_view::npos ? GateDirection::at_most : GateDirection::at_least;
  g.statistic = std::string(trim(expression.substr(0, pos)));
  check_gate_statistic(g.statistic);
  auto const number = trim(expression.substr(pos + 2));
  auto const [end, ec] = std::from_chars(number.data(), number.data() + number.size(), g.threshold);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !std::isfinite(g.threshold)) {
    throw StatsError("parse_gate: \"" + expr + "\": threshold \"" + std::string(number) + "\" is not a finite number");
  }
  g.required_cells = std::move(required_cells);
  return g;
}

GateResult evaluate_gate(Gate const& gate, Interval const& interval, std::vector<CellStatus> const& cells) {
  check_gate_statistic(gate.statistic);
  if (!std::isfinite(gate.threshold)) {
    throw StatsError("gate \"" + gate.name + "\": threshold is not finite");
  }
  if (!std::isfinite(interval.lower) || !std::isfinite(interval.upper) || interval.lower > interval.upper) {
    throw StatsError("gate \"" + gate.name + "\": invalid interval [" + format_double(interval.lower) + ", " +
                     format_double(interval.upper) + "] for " + gate.statistic);
  }
  GateResult r;
  r.gate = gate;
  r.interval = interval;
  for (auto const& required : gate.required_cells) {
    CellStatus const* status = nullptr;
    for (auto const& c : cells) {
      if (c.cell == required) {
        status = &c;
      }
    }
    if (status == nullptr || !status->present) {
      r.reasons.push_back("required cell \"" + required + "\" is missing" +
                          (status && !status->reason.empty() ? ": " + status->reason : std::string()));
    } else if (!status->canonical) {
      r.reasons.push_back("required cell \"" + required + "\" is not canonical" +
                          (status->reason.empty() ? std::string() : ": " + status->reason));
    }
  }
  std::string ci = "[";  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "[" + std::string
  ci += format_double(interval.lower) + ", " + format_double(interval.upper) + "]";
  std::string const rule =
      gate.statistic + " " + std::string(to_string(gate.direction)) + " " + format_double(gate.threshold);
  bool const at_most = gate.direction == GateDirection::at_most;
  bool const good = at_most ? interval.upper <= gate.threshold : interval.lower >= gate.threshold;
  bool const bad = at_most ? interval.lower > gate.threshold : interval.upper < gate.threshold;
  if (!r.reasons.empty()) {
    r.verdict = Verdict::inconclusive;
  } else if (good) {
    r.verdict = Verdict::pass;
    r.reasons.push_back("the whole interval " + ci + " satisfies " + rule);
  } else if (bad) {
    r.verdict = Verdict::fail;
    r.reasons.push_back("the whole interval " + ci + " violates " + rule);
  } else {
    r.verdict = Verdict::inconclusive;
    r.reasons.push_back("the interval " + ci + " straddles the threshold of " + rule);
  }
  return r;
}

GateResult evaluate_gate(Gate const& gate, std::map<std::string, Interval> const& computed,
                         std::vector<CellStatus> const& cells) {
  check_gate_statistic(gate.statistic);
  auto const it = computed.find(gate.statistic);
  if (it == computed.end()) {
    std::string list;
    for (auto const& [k, v] : computed) {
      list += (list.empty() ? "" : ", ") + k;
    }
    throw StatsError("gate \"" + gate.name + "\": statistic \"" + gate.statistic +
                     "\" was not computed (computed: " + (list.empty() ? std::string("none") : list) + ")");
  }
  return evaluate_gate(gate, it->second, cells);
}

}  // namespace wbaudit::stats
