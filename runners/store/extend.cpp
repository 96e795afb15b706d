#include "runners/store/extend.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "runners/store/identity.hpp"

namespace wbaudit::runners {

namespace {

using nlohmann::json;

void flatten(const json& value, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (value.is_object() && !value.empty()) {
    for (const auto& [key, item] : value.items()) {
      flatten(item, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  out[prefix] = value.dump();
}

// Keys a reference's configuration gets from the targets of the whole grid, not from its own run.
bool is_projection_key(const std::string& path) {
  return path.rfind("project_formats", 0) == 0 || path.rfind("project_policies", 0) == 0;
}

// Whether every element of before's array `key` is in after's (absent: empty).
bool widens(const json& before, const json& after, const char* key) {
  const json empty = json::array();
  const json& b = before.contains(key) ? before[key] : empty;
  const json& a = after.contains(key) ? after[key] : empty;
  return std::all_of(b.begin(), b.end(),
                     [&a](const json& item) { return std::find(a.begin(), a.end(), item) != a.end(); });
}

std::string joined(const std::vector<std::string>& lines, const std::string& separator) {
  std::string out;
  for (const auto& line : lines) {
    out += (out.empty() ? "" : separator) + line;
  }
  return out;
}

// What a target needs its reference to project beyond its format: its policy when that is not nearest.
std::string missing_projection(const json& reference, const json& target) {
  const json& t = target.contains("target") ? target["target"] : json::object();
  const std::string format = t.value("format", std::string());
  const json formats = reference.value("project_formats", json::array());
  if (!format.empty() && std::find(formats.begin(), formats.end(), format) == formats.end()) {
    return "format " + format + " (it projects " + formats.dump() + ")";
  }
  const std::string policy = t.value("policy", std::string("nearest"));
  if (policy == "nearest") {
    return "";
  }
  const json wanted = {{"policy", policy}, {"sr_bits", t.value("sr_bits", 0)}};
  const json policies = reference.value("project_policies", json::array());
  if (std::find(policies.begin(), policies.end(), wanted) == policies.end()) {
    return "policy " + wanted.dump() + " (it projects " + policies.dump() + ")";
  }
  return "";
}

const char* kOnlyAdds =
    "an extension only adds cells (new grid values, more seeds, another format) and keeps every existing cell as it "
    "ran; for a changed setting start a new sweep directory";

}  // namespace

std::vector<std::string> config_differences(const json& before, const json& after) {
  std::map<std::string, std::string> b, a;
  flatten(before, "", b);
  flatten(after, "", a);
  std::set<std::string> paths;
  for (const auto& [path, value] : b) {
    paths.insert(path);
  }
  for (const auto& [path, value] : a) {
    paths.insert(path);
  }
  std::vector<std::string> out;
  for (const auto& path : paths) {
    const auto x = b.find(path);
    const auto y = a.find(path);
    const std::string from = x == b.end() ? "(absent)" : x->second;
    const std::string to = y == a.end() ? "(absent)" : y->second;
    if (from != to) {
      out.push_back(path + ": " + from + " -> " + to);
    }
  }
  return out;
}

ExtensionPlan plan_extension(const std::vector<StoredCell>& stored, std::vector<StoredCell> proposed) {
  std::map<std::string, const StoredCell*> by_id, by_name;
  for (const auto& cell : stored) {
    by_id[cell.id] = &cell;
    by_name[cell.name] = &cell;
  }
  ExtensionPlan plan;
  std::set<std::string> kept;                         // ids of stored cells the new spec still has
  std::map<std::string, const StoredCell*> narrower;  // stored references that project less than the spec asks
  std::set<std::string> proposed_ids;
  for (auto& cell : proposed) {
    cell.id = cell_id(cell.config);
    proposed_ids.insert(cell.id);
  }
  for (const auto& cell : proposed) {
    if (const auto same = by_id.find(cell.id); same != by_id.end()) {
      kept.insert(cell.id);
      if (same->second->name != cell.name) {
        plan.renamed.emplace_back(cell.id, cell.name);
        plan.notes.push_back("cell " + same->second->name + " is now named " + cell.name +
                             " (the new spec's name; its id and attempts are unchanged)");
      }
      continue;
    }
    const auto named = by_name.find(cell.name);
    if (named == by_name.end() || proposed_ids.count(named->second->id)) {  // a new name, or one a kept cell leaves
      plan.added.push_back(cell);
      continue;
    }
    const StoredCell& old = *named->second;
    const auto changes = config_differences(old.config, cell.config);
    const bool projections_only = std::all_of(changes.begin(), changes.end(), [](const std::string& c) {
      return is_projection_key(c.substr(0, c.find(':')));
    });
    if (old.role == "reference" && cell.role == "reference" && projections_only &&
        widens(old.config, cell.config, "project_formats") && widens(old.config, cell.config, "project_policies")) {
      kept.insert(old.id);
      narrower[old.name] = &old;
      plan.notes.push_back("reference " + old.name + " stays as it ran (the new spec would also have it project " +
                           joined(changes, "; ") + ")");
      continue;
    }
    throw StoreError("cannot extend: the new spec changes the existing cell " + old.name + " (id " + old.id +
                     "): " + joined(changes, "; ") + "; " + kOnlyAdds);
  }
  for (const auto& cell : stored) {
    if (!kept.count(cell.id)) {
      throw StoreError("cannot extend: the existing cell " + cell.name + " (id " + cell.id +
                       ") is not in the new spec (a grid value removed, or a setting changed); " + kOnlyAdds);
    }
  }
  for (const auto& cell : plan.added) {
    if (const auto ref = narrower.find(cell.reference); ref != narrower.end()) {
      if (const std::string lack = missing_projection(ref->second->config, cell.config); !lack.empty()) {
        throw StoreError("cannot extend: the new cell " + cell.name + " would use the existing reference " +
                         cell.reference + ", which does not project its " + lack +
                         "; an existing reference stays as it ran: start a new sweep directory for this spec");
      }
    }
  }
  return plan;
}

}  // namespace wbaudit::runners
