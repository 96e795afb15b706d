#pragma once
// Small helpers to build CellTables in the stats tests.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "stats/table.hpp"

namespace wbaudit::stats::testing {

// "c<i>", appended piecewise (GCC 12 warns falsely with -Wrestrict on "literal" + std::string).
inline std::string cell_label(std::string prefix, std::size_t i) {
  prefix += std::to_string(i);
  return prefix;
}

inline CellTable make_table(std::vector<std::vector<double>> const& rows) {
  CellTable t;
  t.values.resize(Eigen::Index(rows.size()), rows.empty() ? 0 : Eigen::Index(rows[0].size()));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    t.cells.push_back(cell_label("c", i));
    for (std::size_t j = 0; j < rows[i].size(); ++j) {
      t.values(Eigen::Index(i), Eigen::Index(j)) = rows[i][j];
    }
  }
  for (std::size_t j = 0; !rows.empty() && j < rows[0].size(); ++j) {
    t.steps.push_back(std::int64_t(10 * (j + 1)));
  }
  return t;
}

}  // namespace wbaudit::stats::testing
