#pragma once
// Strict reading of one table of a cell configuration (docs/contracts.md): unknown keys and wrong types are errors
// that start with the key path ("model.width: expected an integer"). The cell parser (sim/run.hpp) and every model
// descriptor (sim/model_registry.hpp) read their tables with it, so all of them refuse bad input in the same words.
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace wbaudit::sim {

// A malformed cell configuration; the message starts with the key path ("optimizer.lr: expected a number").
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Throws ConfigError("<path>: <what>") unless ok.
inline void require(bool ok, const std::string& path, const std::string& what) {
  if (!ok) {
    throw ConfigError(path + ": " + what);
  }
}

// A number as the canonical JSON writes it (for messages: "must be positive, got -0.5").
inline std::string number_text(double x) {
  return nlohmann::json(x).dump();
}

// Runs a name parser (e.g. format_from_name) and reports any other exception's message under the key path.
template <class F>
auto named(const std::string& path, F&& parse) {
  try {
    return parse();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

// Reads the members of one JSON object: the constructor rejects a non-object and any key outside `known` (naming the
// known ones); each reader leaves `out` unchanged when the key is absent (the default stays).
class ConfigReader {
 public:
  // `path` is the table's key path ("model"; "" for the top level); `known` must outlive the reader.
  ConfigReader(const nlohmann::json& object, std::string path, const std::set<std::string>& known);

  std::string path(const std::string& key) const;
  const nlohmann::json* find(const std::string& key) const;

  void number(const std::string& key, double& out) const;  // finite numbers only
  void boolean(const std::string& key, bool& out) const;
  void string(const std::string& key, std::string& out) const;
  template <class Int>
  void integer(const std::string& key, Int& out) const {  // in Int's range; unsigned Int: non-negative
    const nlohmann::json* v = find(key);
    if (v == nullptr) {
      return;
    }
    if (!v->is_number_integer()) {
      throw ConfigError(path(key) + ": expected an integer");
    }
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) {
        throw ConfigError(path(key) + ": " + std::to_string(u) + " is out of range");
      }
      out = static_cast<Int>(u);
      return;
    }
    const auto s = v->get<std::int64_t>();
    if (std::is_unsigned_v<Int> && s < 0) {
      throw ConfigError(path(key) + ": expected a non-negative integer, got " + std::to_string(s));
    }
    if (!std::is_unsigned_v<Int> && (s < static_cast<std::int64_t>(std::numeric_limits<Int>::min()) ||
                                     s > static_cast<std::int64_t>(std::numeric_limits<Int>::max()))) {
      throw ConfigError(path(key) + ": " + std::to_string(s) + " is out of range");
    }
    out = static_cast<Int>(s);
  }

 private:
  const nlohmann::json& m_object;
  std::string m_path;
  const std::set<std::string>& m_known;
};

}  // namespace wbaudit::sim
