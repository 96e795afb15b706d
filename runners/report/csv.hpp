#pragma once
// CSV cells shared by every table the runners write (summary.csv, the skill report's tables, loss_summary.csv).
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

namespace wbaudit::runners::report {

// RFC 4180 quoting: a field holding a comma, quote or newline is quoted, inner quotes doubled.
inline std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// A number at round-trip precision (17 significant digits); empty for NaN and infinities.
inline std::string csv_number(double x) {
  if (!std::isfinite(x)) return "";
  std::ostringstream out;
  out << std::setprecision(17) << x;
  return out.str();
}

}  // namespace wbaudit::runners::report
