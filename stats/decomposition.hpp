#pragma once
// Common-time decomposition: the two-way decomposition without replication of a cells x steps table y(c,t),
//   y(c,t) = mu + a_t + b_c + e(c,t),
// with C cells, T steps, mu the grand mean, a_t = ybar(.,t) - mu (time effect), b_c = ybar(c,.) - mu (cell effect),
// and e the residual (interaction). The sums of squares
//   SS_total = sum_{c,t} (y - mu)^2,  SS_time = C sum_t a_t^2,  SS_cell = T sum_c b_c^2,  SS_residual = sum e^2
// satisfy SS_total = SS_time + SS_cell + SS_residual, and the shares are SS_x / SS_total. Descriptive only: no
// F-test p-values (cells are not replicated, and steps of one run are not independent); uncertainty comes from
// bootstrap intervals over independent units (stats/bootstrap_tables.hpp).
// Applied to an outcome table it says how much of the erased fraction is a shared time trend; applied to a forecast
// error table (decompose_forecast_error) it says whether a predictor's errors are common-time or cell-specific.
#include <cstdint>
#include <string>
#include <vector>

#include "stats/missing.hpp"
#include "stats/table.hpp"

namespace wbaudit::stats {

struct Decomposition {
  double mu = 0;
  Eigen::VectorXd time_effect;  // a_t, one per kept step
  Eigen::VectorXd cell_effect;  // b_c, one per kept cell
  double ss_total = 0;
  double ss_time = 0;
  double ss_cell = 0;
  double ss_residual = 0;
  double share_time = 0;
  double share_cell = 0;
  double share_residual = 0;
  std::vector<std::string> cells;   // kept cells
  std::vector<std::int64_t> steps;  // kept steps
  std::vector<std::string> dropped_cells;
  std::vector<std::int64_t> dropped_steps;
  MissingPolicy missing_policy = MissingPolicy::error;
};

// Throws StatsError on an empty table, inf, NaN under MissingPolicy::error, or SS_total == 0 (a constant table has
// no variation to share out).
Decomposition decompose(CellTable const& table, MissingPolicy policy = MissingPolicy::error);

// decompose(forecast - outcome) with the policy applied jointly to both tables.
Decomposition decompose_forecast_error(CellTable const& forecast, CellTable const& outcome,
                                       MissingPolicy policy = MissingPolicy::error);

// The decomposition of a complete matrix (rows = cells); no labels, no policy. Used per bootstrap resample.
Decomposition decompose_values(Eigen::MatrixXd const& values);

}  // namespace wbaudit::stats
