#pragma once
// Validation of CellTables and the explicit missing-value policy shared by every statistic.
//
// NaN marks a missing value. What happens to it is always declared by the caller:
//   MissingPolicy::error                 (default) any NaN is an error naming the table, cell and step;
//   MissingPolicy::drop_incomplete_cells every cell (row) with a NaN in any of the tables is dropped;
//   MissingPolicy::drop_incomplete_steps every step (column) with a NaN in any of the tables is dropped.
// Dropped cells and steps are returned so that reports can list them; nothing is ever dropped silently.
// +-inf is never "missing": it is always an error.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stats/table.hpp"

namespace wbaudit::stats {

enum class MissingPolicy { error, drop_incomplete_cells, drop_incomplete_steps };

// "error", "drop_incomplete_cells", "drop_incomplete_steps"; unknown names throw StatsError listing the known ones.
MissingPolicy missing_policy_from_name(std::string_view name);
std::string_view to_string(MissingPolicy policy);

// Throws StatsError (prefixed with `context`) when the table is empty, its labels do not match its shape, the cell
// labels repeat, or the steps are not strictly increasing.
void check_table_shape(CellTable const& table, std::string_view context);

// Throws StatsError naming the first differing cell label or step when a and b are not on the same grid.
void check_same_grid(CellTable const& a, CellTable const& b, std::string_view context);

// Tables on a common grid after the policy was applied: every value finite.
struct CompleteTables {
  std::vector<CellTable> tables;            // same order as the input
  std::vector<std::string> dropped_cells;   // in input order
  std::vector<std::int64_t> dropped_steps;  // in input order
  MissingPolicy policy = MissingPolicy::error;
};

// Checks shapes and grids of all `tables` (named by `names` in messages), rejects +-inf, and applies `policy` to
// NaN. Throws StatsError when, after dropping, no cell or no step is left.
CompleteTables complete_tables(std::vector<CellTable const*> const& tables, std::vector<std::string> const& names,
                               MissingPolicy policy, std::string_view context);

}  // namespace wbaudit::stats
