#pragma once
// Accuracy metrics of a forecast table F against an outcome table Y on the same cells x steps grid.
// Error e(c,t) = F(c,t) - Y(c,t) (positive bias = forecast too high). With T steps per cell, C cells:
//   bias_cell(c) = (1/T) sum_t e(c,t)          mae_cell(c)  = (1/T) sum_t |e(c,t)|
//   mse_cell(c)  = (1/T) sum_t e(c,t)^2        rmse_cell(c) = sqrt(mse_cell(c))
//   bias         = (1/C) sum_c bias_cell(c)    mae          = (1/C) sum_c mae_cell(c)
//   rmse_macro   = (1/C) sum_c rmse_cell(c)            (mean of per-cell RMSEs)
//   rmse_pooled  = sqrt((1/C) sum_c mse_cell(c))        (root of the mean MSE)
// rmse_macro <= rmse_pooled always (Jensen); equal exactly when every cell has the same MSE.
// Skill of a predictor P against a baseline B on the same outcome:
//   skill = 1 - sum_c mse_cell_P(c) / sum_c mse_cell_B(c)
// All sums are compensated (Neumaier). Missing values follow the declared MissingPolicy (stats/missing.hpp); the
// dropped cells/steps are reported. docs/statistics.md gives every definition.
#include <cstdint>
#include <string>
#include <vector>

#include "stats/missing.hpp"
#include "stats/table.hpp"

namespace wbaudit::stats {

struct CellMetrics {
  std::string cell;
  double bias_cell = 0;  // mean of forecast - outcome over steps
  double mae_cell = 0;
  double mse_cell = 0;
  double rmse_cell = 0;
};

struct MetricsReport {
  std::vector<CellMetrics> cells;  // one per evaluated cell, in table order
  double bias = 0;
  double mae = 0;
  double rmse_macro = 0;
  double rmse_pooled = 0;
  std::vector<std::string> dropped_cells;
  std::vector<std::int64_t> dropped_steps;
  MissingPolicy missing_policy = MissingPolicy::error;
};

// Error table forecast - outcome (grids checked; NaN propagates as missing, inf is an error).
CellTable forecast_error(CellTable const& forecast, CellTable const& outcome);

MetricsReport evaluate_metrics(CellTable const& forecast, CellTable const& outcome,
                               MissingPolicy policy = MissingPolicy::error);

// Per-cell MSE of a complete error matrix (rows = cells); the building block of the bootstrap helpers.
std::vector<double> mse_per_cell(Eigen::MatrixXd const& error);

struct SkillReport {
  double skill = 0;
  double sum_mse_predictor = 0;
  double sum_mse_baseline = 0;
  std::vector<std::string> dropped_cells;
  std::vector<std::int64_t> dropped_steps;
  MissingPolicy missing_policy = MissingPolicy::error;
};

// Throws StatsError when the baseline's summed MSE is zero (skill undefined). The policy drops a cell/step when
// any of the three tables is missing there, so predictor and baseline are scored on the same values.
SkillReport evaluate_skill(CellTable const& predictor, CellTable const& baseline, CellTable const& outcome,
                           MissingPolicy policy = MissingPolicy::error);

}  // namespace wbaudit::stats
