#include "stats/breakdown.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "stats/error.hpp"

namespace wbaudit::stats {
namespace {

// Mean over the defined steps of row i's squared error; NaN when no step is defined.
double row_mse(CellTable const& forecast, CellTable const& outcome, Eigen::Index i) {
  double sum = 0;
  int n = 0;
  for (Eigen::Index k = 0; k < forecast.values.cols(); ++k) {
    double const e = forecast.values(i, k) - outcome.values(i, k);
    if (std::isnan(e)) {
      continue;
    }
    sum += e * e;
    ++n;
  }
  return n != 0 ? sum / n : NAN;
}

void check_shape(NamedTable const& t, CellTable const& outcome) {
  if (t.table == nullptr || t.table->values.rows() != outcome.values.rows() ||
      t.table->values.cols() != outcome.values.cols()) {
    throw StatsError("breakdown_by_factor: the table of " + t.name + " does not have the outcome's " +
                     std::to_string(outcome.values.rows()) + "x" + std::to_string(outcome.values.cols()) + " shape");
  }
}

BreakdownRow level_row(std::string const& factor, std::string const& level, std::vector<Eigen::Index> const& rows,
                       NamedTable const& p, CellTable const& outcome, std::vector<NamedTable> const& baselines) {
  BreakdownRow row{factor, level, p.name, static_cast<int>(rows.size()), 0, {}};
  double sum_rmse = 0;
  double sum_mse = 0;
  for (auto i : rows) {
    sum_rmse += std::sqrt(row_mse(*p.table, outcome, i));
    sum_mse += row_mse(*p.table, outcome, i);
  }
  row.rmse_macro = sum_rmse / static_cast<double>(rows.size());
  for (auto const& b : baselines) {
    if (b.name == p.name) {
      continue;
    }
    double sum_b = 0;
    for (auto i : rows) {
      sum_b += row_mse(*b.table, outcome, i);
    }
    row.skill[b.name] = 1 - sum_mse / sum_b;
  }
  return row;
}

// The levels in numeric order when every level is a number ("8" < "16" < "64"), else in name order.
std::vector<std::string> level_order(std::map<std::string, std::vector<Eigen::Index>> const& levels) {
  std::vector<std::pair<double, std::string>> numeric;
  for (auto const& [level, rows] : levels) {
    char* end = nullptr;
    double const v = std::strtod(level.c_str(), &end);
    if (level.empty() || end != level.c_str() + level.size() || !std::isfinite(v)) {
      numeric.clear();
      break;
    }
    numeric.emplace_back(v, level);
  }
  std::vector<std::string> order;
  if (numeric.size() == levels.size()) {
    std::stable_sort(numeric.begin(), numeric.end(), [](auto const& a, auto const& b) { return a.first < b.first; });
    for (auto const& [v, level] : numeric) {
      order.push_back(level);
    }
    return order;
  }
  for (auto const& [level, rows] : levels) {
    order.push_back(level);
  }
  return order;
}

}  // namespace

std::vector<BreakdownRow> breakdown_by_factor(std::vector<std::map<std::string, std::string>> const& factors,
                                              CellTable const& outcome, std::vector<NamedTable> const& predictors,
                                              std::vector<NamedTable> const& baselines) {
  if (factors.size() != static_cast<std::size_t>(outcome.values.rows())) {
    throw StatsError("breakdown_by_factor: factors for " + std::to_string(factors.size()) + " cells, the outcome has " +
                     std::to_string(outcome.values.rows()));
  }
  for (auto const* list : {&predictors, &baselines}) {
    for (auto const& t : *list) {
      check_shape(t, outcome);
    }
  }
  std::set<std::string> factor_names;
  for (auto const& f : factors) {
    for (auto const& [name, level] : f) {
      factor_names.insert(name);
    }
  }
  std::vector<BreakdownRow> out;
  for (auto const& factor : factor_names) {
    std::map<std::string, std::vector<Eigen::Index>> levels;
    for (std::size_t i = 0; i < factors.size(); ++i) {
      if (auto it = factors[i].find(factor); it != factors[i].end()) {
        levels[it->second].push_back(static_cast<Eigen::Index>(i));
      }
    }
    if (levels.size() < 2) {
      continue;  // a factor with one level breaks nothing down
    }
    std::vector<std::string> const order = level_order(levels);
    for (auto const& p : predictors) {
      for (auto const& level : order) {
        out.push_back(level_row(factor, level, levels.at(level), p, outcome, baselines));
      }
    }
  }
  return out;
}

}  // namespace wbaudit::stats
