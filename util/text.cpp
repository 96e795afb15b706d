#include "util/text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
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

std::string shortest_number(double x) {
  if (std::isnan(x) || std::isinf(x)) {
    return number_text(x);
  }
  char buffer[32];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, x);
  return error == std::errc() ? std::string(buffer, end) : number_text(x);
}

std::string float_text(float x) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.9g", static_cast<double>(x));
  return buffer;
}

std::string shown_number(double x, int precision) {
  return std::isnan(x) ? "—" : number_text(x, precision);
}

std::string fixed_number(double x, int decimals) {
  if (!std::isfinite(x)) {
    return "—";
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(decimals) << x;
  return out.str();
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

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 3);
  std::size_t best = limit + 1;
  const std::string* choice = nullptr;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best && d > 0) {
      best = d;
      choice = &c;
    }
  }
  return choice ? " (did you mean \"" + *choice + "\"?)" : std::string();
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
