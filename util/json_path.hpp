#pragma once
// Dotted key paths into JSON objects ("optimizer.lr"): what sweep specs, grid axes and reports address values by.
#include <nlohmann/json.hpp>
#include <string>

namespace wbaudit::util {

// The value at a dotted path, or nullptr when a key on the way is missing or a node is not an object.
const nlohmann::json* json_at(const nlohmann::json& j, const std::string& dotted);
// Sets the value at a dotted path, creating objects on the way.
void set_json_at(nlohmann::json& j, const std::string& dotted, const nlohmann::json& value);

}  // namespace wbaudit::util
