#include "stats/missing.hpp"

#include <cmath>
#include <set>
#include <sstream>

#include "stats/error.hpp"

namespace wbaudit::stats {

namespace {

std::string format_step(CellTable const& t, Eigen::Index j) {
  return std::to_string(t.steps[std::size_t(j)]);
}

}  // namespace

MissingPolicy missing_policy_from_name(std::string_view name) {
  if (name == "error") {
    return MissingPolicy::error;
  }
  if (name == "drop_incomplete_cells") {
    return MissingPolicy::drop_incomplete_cells;
  }
  if (name == "drop_incomplete_steps") {
    return MissingPolicy::drop_incomplete_steps;
  }
  throw StatsError("missing_policy_from_name: unknown missing-value policy \"" + std::string(name) +
                   "\" (known: error, drop_incomplete_cells, drop_incomplete_steps)");
}

std::string_view to_string(MissingPolicy policy) {
  switch (policy) {
    case MissingPolicy::error:
      return "error";
    case MissingPolicy::drop_incomplete_cells:
      return "drop_incomplete_cells";
    case MissingPolicy::drop_incomplete_steps:
      return "drop_incomplete_steps";
  }
  return "unknown";
}

void check_table_shape(CellTable const& table, std::string_view context) {
  std::string const ctx(context);
  if (table.rows() == 0 || table.cols() == 0) {
    throw StatsError(ctx + ": empty table (" + std::to_string(table.rows()) + " cells x " +
                     std::to_string(table.cols()) + " steps)");
  }
  if (std::size_t(table.rows()) != table.cells.size() || std::size_t(table.cols()) != table.steps.size()) {
    throw StatsError(ctx + ": table values are " + std::to_string(table.rows()) + " x " + std::to_string(table.cols()) +
                     " but it has " + std::to_string(table.cells.size()) + " cell labels and " +
                     std::to_string(table.steps.size()) + " step labels");
  }
  std::set<std::string> seen;
  for (auto const& c : table.cells) {
    if (!seen.insert(c).second) {
      std::string message = ctx;  // built with += (clang-tidy performance-inefficient-string-concatenation)
      message += ": cell label \"";
      message += c;
      message += "\" appears twice";
      throw StatsError(message);
    }
  }
  for (std::size_t j = 1; j < table.steps.size(); ++j) {
    if (table.steps[j] <= table.steps[j - 1]) {
      throw StatsError(ctx + ": steps not strictly increasing at step " + std::to_string(table.steps[j]) + " (after " +
                       std::to_string(table.steps[j - 1]) + ")");
    }
  }
}

void check_same_grid(CellTable const& a, CellTable const& b, std::string_view context) {
  std::string const ctx(context);
  if (a.cells.size() != b.cells.size()) {
    throw StatsError(ctx + ": tables have different cell counts (" + std::to_string(a.cells.size()) + " vs " +
                     std::to_string(b.cells.size()) + ")");
  }
  for (std::size_t i = 0; i < a.cells.size(); ++i) {
    if (a.cells[i] != b.cells[i]) {
      throw StatsError(ctx + ": cell grids differ at row " + std::to_string(i) + " (\"" + a.cells[i] + "\" vs \"" +
                       b.cells[i] + "\")");
    }
  }
  if (a.steps.size() != b.steps.size()) {
    throw StatsError(ctx + ": tables have different step counts (" + std::to_string(a.steps.size()) + " vs " +
                     std::to_string(b.steps.size()) + ")");
  }
  for (std::size_t j = 0; j < a.steps.size(); ++j) {
    if (a.steps[j] != b.steps[j]) {
      throw StatsError(ctx + ": time grids differ at column " + std::to_string(j) + " (step " +
                       std::to_string(a.steps[j]) + " vs " + std::to_string(b.steps[j]) + ")");
    }
  }
}

CompleteTables complete_tables(std::vector<CellTable const*> const& tables, std::vector<std::string> const& names,
                               MissingPolicy policy, std::string_view context) {
  std::string const ctx(context);
  if (tables.empty()) {
    throw StatsError(ctx + ": no tables given");
  }
  if (names.size() != tables.size()) {
    throw StatsError(ctx + ": table names do not match the tables");
  }
  for (std::size_t k = 0; k < tables.size(); ++k) {
    check_table_shape(*tables[k], ctx + " (" + names[k] + ")");
    if (k > 0) {
      check_same_grid(*tables[0], *tables[k], ctx + " (" + names[0] + " vs " + names[k] + ")");
    }
  }
  CellTable const& grid = *tables[0];
  Eigen::Index const n_cells = grid.rows();
  Eigen::Index const n_steps = grid.cols();
  std::vector<bool> cell_ok(std::size_t(n_cells), true);
  std::vector<bool> step_ok(std::size_t(n_steps), true);
  for (std::size_t k = 0; k < tables.size(); ++k) {
    auto const& v = tables[k]->values;
    for (Eigen::Index i = 0; i < n_cells; ++i) {
      for (Eigen::Index j = 0; j < n_steps; ++j) {
        double const x = v(i, j);
        if (std::isinf(x)) {
          throw StatsError(ctx + ": " + names[k] + " is " + (x > 0 ? "+inf" : "-inf") + " at cell \"" +
                           grid.cells[std::size_t(i)] + "\", step " + format_step(grid, j));
        }
        if (std::isnan(x)) {
          if (policy == MissingPolicy::error) {
            throw StatsError(ctx + ": " + names[k] + " is missing (NaN) at cell \"" + grid.cells[std::size_t(i)] +
                             "\", step " + format_step(grid, j) +
                             " and the missing-value policy is \"error\" (declare drop_incomplete_cells or "
                             "drop_incomplete_steps to drop it)");
          }
          if (policy == MissingPolicy::drop_incomplete_cells) {
            cell_ok[std::size_t(i)] = false;
          }
          if (policy == MissingPolicy::drop_incomplete_steps) {
            step_ok[std::size_t(j)] = false;
          }
        }
      }
    }
  }
  CompleteTables out;
  out.policy = policy;
  std::vector<Eigen::Index> keep_rows, keep_cols;
  for (Eigen::Index i = 0; i < n_cells; ++i) {
    if (cell_ok[std::size_t(i)]) {
      keep_rows.push_back(i);
    } else {
      out.dropped_cells.push_back(grid.cells[std::size_t(i)]);
    }
  }
  for (Eigen::Index j = 0; j < n_steps; ++j) {
    if (step_ok[std::size_t(j)]) {
      keep_cols.push_back(j);
    } else {
      out.dropped_steps.push_back(grid.steps[std::size_t(j)]);
    }
  }
  if (keep_rows.empty() || keep_cols.empty()) {
    throw StatsError(ctx + ": no complete " + std::string(keep_rows.empty() ? "cell" : "step") +
                     " left after applying missing-value policy \"" + std::string(to_string(policy)) + "\"");
  }
  for (auto const* t : tables) {
    CellTable c;
    c.values.resize(Eigen::Index(keep_rows.size()), Eigen::Index(keep_cols.size()));
    for (std::size_t r = 0; r < keep_rows.size(); ++r) {
      c.cells.push_back(t->cells[std::size_t(keep_rows[r])]);
      for (std::size_t s = 0; s < keep_cols.size(); ++s) {
        c.values(Eigen::Index(r), Eigen::Index(s)) = t->values(keep_rows[r], keep_cols[s]);
      }
    }
    for (auto j : keep_cols) {
      c.steps.push_back(t->steps[std::size_t(j)]);
    }
    out.tables.push_back(std::move(c));
  }
  return out;
}

}  // namespace wbaudit::stats
