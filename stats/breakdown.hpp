#pragma once
// Accuracy and skill broken down by a factor of the grid (format, group, a grid parameter): for each factor with
// at least two levels, each scored predictor P and each level L (the cells c whose factor has that level),
//   MSE_P(c)    = mean over the steps where P(c,t) - Y(c,t) is defined of (P(c,t) - Y(c,t))^2  (NaN: none defined)
//   rmse_macro  = (1/|L|) sum_{c in L} sqrt(MSE_P(c))
//   skill vs B  = 1 - sum_{c in L} MSE_P(c) / sum_{c in L} MSE_B(c)     for every baseline B other than P
// Point estimates only (no intervals).
#include <map>
#include <string>
#include <vector>

#include "stats/table.hpp"

namespace wbaudit::stats {

struct BreakdownRow {
  std::string factor, level, predictor;
  int cells = 0;
  double rmse_macro = 0;
  std::map<std::string, double> skill;  // baseline -> 1 - sum MSE_P / sum MSE_B over the level's cells
};

// A table with its predictor's name.
struct NamedTable {
  std::string name;
  CellTable const* table = nullptr;
};

// factors[i]: the factor levels of outcome row i (factor name -> level); a row without a factor is in none of its
// levels. Rows: factors in name order, then predictors in the order given, then levels in numeric order when every
// level of the factor is a number ("8", "16", "64"), else in name order.
// Throws StatsError when a table's shape differs from the outcome's or factors has the wrong length.
std::vector<BreakdownRow> breakdown_by_factor(std::vector<std::map<std::string, std::string>> const& factors,
                                              CellTable const& outcome, std::vector<NamedTable> const& predictors,
                                              std::vector<NamedTable> const& baselines);

}  // namespace wbaudit::stats
