#include "sim/config_reader.hpp"

#include <vector>

#include "sim/model_registry.hpp"
#include "util/text.hpp"

namespace wbaudit::sim {

namespace {

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// A [model] or [data] key that another model kind has: say which ("width belongs to model.kind = \"decoder\"").
std::string other_model_hint(const std::string& path, const std::string& key) {
  if (path != "model" && path != "data") {
    return "";
  }
  std::vector<std::string> kinds;
  for (const ModelDescriptor* m : registered_models()) {
    const std::set<std::string> keys = path == "model" ? m->model_keys() : m->data_keys();
    if (keys.count(key)) {
      kinds.push_back("\"" + m->kind() + "\"");
    }
  }
  if (kinds.empty()) {
    return "";
  }
  return " (" + path + "." + key + " belongs to model.kind = " + util::join(kinds, " or ") + ")";
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
      std::vector<std::string> candidates(m_known.begin(), m_known.end());
      if (m_path == "optimizer") {
        candidates.emplace_back("lr_scale");  // a sweep spec's key, resolved into lr before a cell is read
      }
      throw ConfigError(join_path(m_path, item.key()) + ": unknown key" + util::did_you_mean(item.key(), candidates) +
                        other_model_hint(m_path, item.key()) + " (known: " + names + ")");
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
