#pragma once
// How the reports print a number and an interval: fixed decimals, "estimate [lower, upper]", an em dash where no
// interval was computed.
#include <optional>
#include <string>

#include "stats/bootstrap.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::report {

inline std::string fixed(double x, int digits = 4) {
  return util::fixed_number(x, digits);
}

inline std::string with_interval(const std::optional<stats::Interval>& i, int digits = 4) {
  if (!i) {
    return "—";
  }
  return fixed(i->estimate, digits) + " [" + fixed(i->lower, digits) + ", " + fixed(i->upper, digits) + "]";
}

}  // namespace wbaudit::runners::report
