#include "sim/config_reader.hpp"

namespace wbaudit::sim {

namespace {

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

}  // namespace

ConfigReader::ConfigReader(const nlohmann::json& object, std::string path, const std::set<std::string>& known)
    : m_object(object), m_path(std::move(path)), m_known(known) {
  if (!object.is_object()) {
    throw ConfigError((m_path.empty() ? "cell" : m_path) + ": expected an object");
  }
  for (const auto& item : object.items()) {
    if (!m_known.count(item.key())) {
      std::string names;
      for (const std::string& k : m_known) {
        names += (names.empty() ? "" : ", ") + k;
      }
      throw ConfigError(join_path(m_path, item.key()) + ": unknown key (known: " + names + ")");
    }
  }
}

std::string ConfigReader::path(const std::string& key) const {
  return join_path(m_path, key);
}

const nlohmann::json* ConfigReader::find(const std::string& key) const {
  const auto it = m_object.find(key);
  return it == m_object.end() ? nullptr : &*it;
}

void ConfigReader::number(const std::string& key, double& out) const {
  if (const nlohmann::json* v = find(key)) {
    if (!v->is_number()) {
      throw ConfigError(path(key) + ": expected a number");
    }
    out = v->get<double>();
    if (!std::isfinite(out)) {
      throw ConfigError(path(key) + ": expected a finite number");
    }
  }
}

void ConfigReader::boolean(const std::string& key, bool& out) const {
  if (const nlohmann::json* v = find(key)) {
    if (!v->is_boolean()) {
      throw ConfigError(path(key) + ": expected true or false");
    }
    out = v->get<bool>();
  }
}

void ConfigReader::string(const std::string& key, std::string& out) const {
  if (const nlohmann::json* v = find(key)) {
    if (!v->is_string()) {
      throw ConfigError(path(key) + ": expected a string");
    }
    out = v->get<std::string>();
  }
}

}  // namespace wbaudit::sim
