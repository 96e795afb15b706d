#pragma once
// The description of a TOML syntax error as wbaudit prints it. toml++ mangles the key of a redefined dotted or
// quoted key ("tatarget.format" for "target.format"); the key is read back from the offending line instead.
#include <toml++/toml.h>
#include <string>
#include <string_view>

namespace wbaudit::runners {

// e.description(), with a redefined key-value pair's key as written in `text` (the parsed document):
// `duplicate key "target.format" (cannot redefine existing array)`.
std::string toml_error_description(const toml::parse_error& e, std::string_view text);

}  // namespace wbaudit::runners
