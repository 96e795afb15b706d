#pragma once
// The one exception type of wbaudit::stats: a precondition on the input failed (non-finite value, mismatched grids,
// empty table, unknown statistic name, undefined statistic such as a zero denominator). The message names the
// function and the offending value, cell or step.
#include <stdexcept>

namespace wbaudit::stats {

class StatsError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace wbaudit::stats
