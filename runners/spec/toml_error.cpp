#include "runners/spec/toml_error.hpp"

#include <cstddef>

namespace wbaudit::runners {

std::string toml_error_description(const toml::parse_error& e, std::string_view text) {
  std::string description(e.description());
  constexpr std::string_view kRedefine = "cannot redefine existing ";
  const std::size_t at = description.find(kRedefine);
  const std::size_t quote = description.find('\'', at);
  if (at == std::string::npos || quote == std::string::npos) {
    return description;
  }
  // The offending line, 1-based.
  std::size_t begin = 0;
  for (std::size_t line = 1; line < e.source().begin.line && begin != std::string_view::npos; ++line) {
    begin = text.find('\n', begin);
    if (begin != std::string_view::npos) {
      ++begin;
    }
  }
  if (begin == std::string_view::npos) {
    return description;
  }
  std::string_view line = text.substr(begin, text.find('\n', begin) - begin);
  const std::size_t eq = line.find('=');
  if (eq == std::string_view::npos) {
    return description;  // a table header: toml++ names it correctly
  }
  std::string_view key = line.substr(0, eq);
  while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) {
    key.remove_prefix(1);
  }
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) {
    key.remove_suffix(1);
  }
  if (key.empty()) {
    return description;
  }
  const std::string what = description.substr(at, quote - at);  // "cannot redefine existing array "
  return "duplicate key " + std::string(key.front() == '"' ? "" : "\"") + std::string(key) +
         std::string(key.back() == '"' ? "" : "\"") + " (" + what.substr(0, what.find_last_not_of(' ') + 1) + ")";
}

}  // namespace wbaudit::runners
