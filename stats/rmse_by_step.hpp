#pragma once
// Forecast accuracy per recorded step: with forecast P and outcome Y over C cells and T steps,
//   rmse_step(t) = sqrt( (1/C) sum_c (P(c,t) - Y(c,t))^2 )
// and a percentile bootstrap interval over the resampling units (the cells of one unit, e.g. one training run,
// drawn together). Percentile, not BCa: one cheap interval per step for a curve, where a BCa failure on one step
// would hide the curve. A missing value (NaN) at a step makes that step's rmse NaN and its interval undefined; a
// resample that fails leaves the step without an interval (NaN bounds), never without its point.
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stats/bootstrap.hpp"
#include "stats/table.hpp"

namespace wbaudit::stats {

struct StepRmse {
  std::int64_t step = 0;
  double rmse = 0;                  // rmse_step(t)
  double lower = NAN, upper = NAN;  // percentile bootstrap over the units (NaN: undefined)
};

// unit_of_cell[i] names the unit of row i (empty: every row is its own unit). spec.method is ignored (percentile).
// Throws StatsError when the tables' shapes differ or unit_of_cell has the wrong length.
template <class ExecSpace>
std::vector<StepRmse> rmse_by_step(ExecSpace const& space, CellTable const& forecast, CellTable const& outcome,
                                   std::vector<std::string> const& unit_of_cell, BootstrapSpec spec);

std::vector<StepRmse> rmse_by_step(CellTable const& forecast, CellTable const& outcome,
                                   std::vector<std::string> const& unit_of_cell, BootstrapSpec const& spec);

namespace detail {
// The rows of each unit, units in the order of their names (row indices as names when unit_of_cell is empty).
std::vector<std::vector<Eigen::Index>> rows_by_unit(Eigen::Index rows, std::vector<std::string> const& unit_of_cell);
void check_step_tables(CellTable const& forecast, CellTable const& outcome,
                       std::vector<std::string> const& unit_of_cell);
}  // namespace detail

template <class ExecSpace>
std::vector<StepRmse> rmse_by_step(ExecSpace const& space, CellTable const& forecast, CellTable const& outcome,
                                   std::vector<std::string> const& unit_of_cell, BootstrapSpec spec) {
  detail::check_step_tables(forecast, outcome, unit_of_cell);
  auto const units = detail::rows_by_unit(forecast.values.rows(), unit_of_cell);
  spec.method = IntervalMethod::percentile;
  std::vector<std::int64_t> all(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    all[u] = static_cast<std::int64_t>(u);
  }
  std::vector<StepRmse> out;
  for (Eigen::Index k = 0; k < forecast.values.cols(); ++k) {
    StepRmse s;
    s.step = forecast.steps[static_cast<std::size_t>(k)];
    auto rmse = [&](std::span<std::int64_t const> picked) {
      double sum = 0;
      std::int64_t n = 0;
      for (auto u : picked) {
        for (auto i : units[static_cast<std::size_t>(u)]) {
          double const e = forecast.values(i, k) - outcome.values(i, k);
          sum += e * e;
          ++n;
        }
      }
      return std::sqrt(sum / static_cast<double>(n));
    };
    s.rmse = rmse(all);
    if (std::isfinite(s.rmse) && units.size() >= 2) {
      try {
        auto const ci = bootstrap(space, static_cast<std::int64_t>(units.size()), rmse, spec);
        s.lower = ci.lower;
        s.upper = ci.upper;
      } catch (StatsError const&) {
        // no interval at this step (e.g. a missing value in a resample); the curve keeps its point
      }
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace wbaudit::stats
