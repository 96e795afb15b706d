#pragma once
// The forecast module's exception: bad input (mismatched lengths, unknown groups or formats, a template class with
// no history, extrapolation refused) throws this, naming the function and the offending value.
#include <stdexcept>

namespace wbaudit::forecast {

class ForecastError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace wbaudit::forecast
