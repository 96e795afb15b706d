#include "util/json_path.hpp"

namespace wbaudit::util {

const nlohmann::json* json_at(const nlohmann::json& j, const std::string& dotted) {
  const nlohmann::json* node = &j;
  std::size_t pos = 0;
  while (true) {
    const auto dot = dotted.find('.', pos);
    const std::string key = dotted.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!node->is_object() || !node->contains(key)) {
      return nullptr;
    }
    node = &(*node)[key];
    if (dot == std::string::npos) {
      return node;
    }
    pos = dot + 1;
  }
}

void set_json_at(nlohmann::json& j, const std::string& dotted, const nlohmann::json& value) {
  nlohmann::json* node = &j;
  std::size_t pos = 0;
  while (true) {
    const auto dot = dotted.find('.', pos);
    const std::string key = dotted.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (dot == std::string::npos) {
      (*node)[key] = value;
      return;
    }
    node = &(*node)[key];
    pos = dot + 1;
  }
}

}  // namespace wbaudit::util
