#include "util/text.hpp"

#include <cmath>
#include <iomanip>
#include <sstream>

namespace wbaudit::util {

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) {
      out += sep;
    }
    out += items[i];
  }
  return out;
}

std::string number_text(double x, int precision) {
  if (std::isnan(x)) {
    return "";
  }
  if (std::isinf(x)) {
    return x > 0 ? "inf" : "-inf";
  }
  std::ostringstream out;
  out << std::setprecision(precision) << x;
  return out.str();
}

std::string shown_number(double x, int precision) {
  return std::isnan(x) ? "—" : number_text(x, precision);
}

std::string format_duration(double s) {
  std::ostringstream out;
  if (s < 90) {
    out << std::fixed << std::setprecision(0) << s << "s";
  } else if (s < 5400) {
    out << std::fixed << std::setprecision(1) << s / 60 << "min";
  } else {
    out << std::fixed << std::setprecision(1) << s / 3600 << "h";
  }
  return out.str();
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) {
    return "";
  }
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

}  // namespace wbaudit::util
