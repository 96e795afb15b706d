#pragma once
// The one exception type of wbaudit::stats: a precondition on the input failed (non-finite value, mismatched grids,
// empty table, unknown statistic name, undefined statistic such as a zero denominator). The message names the
// function and the offending value, cell or step.
#include <charconv>
#include <stdexcept>
#include <string>

namespace wbaudit::stats {

class StatsError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A value in a message: the shortest text that reads back as the same double ("0", "7.3e-30", "0.07421875"), never
// a fixed six decimals ("0.000000" hid a 7e-30 and a 0). stats/ depends on no other module, so not util's.
inline std::string value_text(double x) {
  char buffer[32];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, x);
  return error == std::errc() ? std::string(buffer, end) : std::string("?");
}

}  // namespace wbaudit::stats
