#pragma once
// Extending a sweep (`wbaudit run SPEC --out DIR --extend`, docs/contracts.md "Extending a sweep"): a changed spec may
// only add cells (new grid values, more seeds, another format). Every cell of the sweep keeps its identity (id,
// name, configuration) and its attempts; the new cells are appended. Pure: the plan is computed from the cell lists
// alone, and SweepStore::extend records it.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runners/store/store.hpp"

namespace wbaudit::runners {

struct ExtensionPlan {
  // The cells the new spec adds, in its order, with their ids and the new spec's names.
  std::vector<StoredCell> added;
  // Existing cells the new spec names otherwise (moving `seed` into [grid] renames every cell): (cell id, new name).
  // They take the new spec's names (reports look cells up by the spec's names); ids and attempts are unchanged.
  std::vector<std::pair<std::string, std::string>> renamed;
  // One line each: the renames, and existing references the new spec would have project more formats or policies
  // (they stay as they ran; no new target uses them for what they lack).
  std::vector<std::string> notes;
};

// The plan of extending a sweep whose cells are `stored` (with ids) by the cells of a new spec, `proposed` (ids are
// filled in here). Throws StoreError, naming the cell and what changed, when the new spec changes or drops an
// existing cell: a configuration key whose value differs (e.g. "steps: 120 -> 240"), a cell no longer in the spec,
// or a new target whose reference is an existing cell that does not project the new target's format or policy.
// An empty `added` means the new spec adds nothing.
ExtensionPlan plan_extension(const std::vector<StoredCell>& stored, std::vector<StoredCell> proposed);

// The dotted configuration paths whose values differ between two cell configurations, each as
// "path: before -> after" ("(absent)" for a missing key), sorted by path. Arrays are compared as values.
std::vector<std::string> config_differences(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace wbaudit::runners
