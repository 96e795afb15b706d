#include "stats/metrics.hpp"

#include <cmath>

#include "stats/error.hpp"
#include "stats/summation.hpp"

namespace wbaudit::stats {

CellTable forecast_error(CellTable const& forecast, CellTable const& outcome) {
  check_table_shape(forecast, "forecast_error (forecast)");
  check_table_shape(outcome, "forecast_error (outcome)");
  check_same_grid(forecast, outcome, "forecast_error (forecast vs outcome)");
  for (auto const* t : {&forecast, &outcome}) {
    for (Eigen::Index i = 0; i < t->rows(); ++i) {
      for (Eigen::Index j = 0; j < t->cols(); ++j) {
        if (std::isinf(t->values(i, j))) {
          throw StatsError(std::string("forecast_error: ") + (t == &forecast ? "forecast" : "outcome") +
                           " is infinite at cell \"" + t->cells[std::size_t(i)] + "\", step " +
                           std::to_string(t->steps[std::size_t(j)]));
        }
      }
    }
  }
  CellTable e;
  e.cells = outcome.cells;
  e.steps = outcome.steps;
  e.values = forecast.values - outcome.values;
  return e;
}

std::vector<double> mse_per_cell(Eigen::MatrixXd const& error) {
  std::vector<double> mse(std::size_t(error.rows()));
  double const n = double(error.cols());
  for (Eigen::Index i = 0; i < error.rows(); ++i) {
    NeumaierSum s;
    for (Eigen::Index j = 0; j < error.cols(); ++j) {
      s.add(error(i, j) * error(i, j));
    }
    mse[std::size_t(i)] = s.value() / n;
  }
  return mse;
}

MetricsReport evaluate_metrics(CellTable const& forecast, CellTable const& outcome, MissingPolicy policy) {
  auto complete = complete_tables({&forecast, &outcome}, {"forecast", "outcome"}, policy, "evaluate_metrics");
  CellTable const& f = complete.tables[0];
  CellTable const& y = complete.tables[1];
  Eigen::MatrixXd const e = f.values - y.values;
  MetricsReport r;
  r.dropped_cells = std::move(complete.dropped_cells);
  r.dropped_steps = std::move(complete.dropped_steps);
  r.missing_policy = policy;
  double const n_steps = double(e.cols());
  NeumaierSum bias, mae, rmse, mse;
  for (Eigen::Index i = 0; i < e.rows(); ++i) {
    NeumaierSum b, a, q;
    for (Eigen::Index j = 0; j < e.cols(); ++j) {
      b.add(e(i, j));
      a.add(std::abs(e(i, j)));
      q.add(e(i, j) * e(i, j));
    }
    CellMetrics c;
    c.cell = f.cells[std::size_t(i)];
    c.bias_cell = b.value() / n_steps;
    c.mae_cell = a.value() / n_steps;
    c.mse_cell = q.value() / n_steps;
    c.rmse_cell = std::sqrt(c.mse_cell);
    bias.add(c.bias_cell);
    mae.add(c.mae_cell);
    rmse.add(c.rmse_cell);
    mse.add(c.mse_cell);
    r.cells.push_back(c);
  }
  double const n_cells = double(e.rows());
  r.bias = bias.value() / n_cells;
  r.mae = mae.value() / n_cells;
  r.rmse_macro = rmse.value() / n_cells;
  r.rmse_pooled = std::sqrt(mse.value() / n_cells);
  return r;
}

SkillReport evaluate_skill(CellTable const& predictor, CellTable const& baseline, CellTable const& outcome,
                           MissingPolicy policy) {
  auto complete = complete_tables({&predictor, &baseline, &outcome}, {"predictor", "baseline", "outcome"}, policy,
                                  "evaluate_skill");
  auto const& y = complete.tables[2].values;
  auto const mse_p = mse_per_cell(complete.tables[0].values - y);
  auto const mse_b = mse_per_cell(complete.tables[1].values - y);
  SkillReport r;
  r.sum_mse_predictor = compensated_sum(mse_p);
  r.sum_mse_baseline = compensated_sum(mse_b);
  if (!(r.sum_mse_baseline > 0)) {
    throw StatsError(
        "evaluate_skill: the baseline's summed MSE is 0 (it reproduces the outcome exactly), so skill "
        "1 - sum MSE_P / sum MSE_B is undefined");
  }
  r.skill = 1.0 - r.sum_mse_predictor / r.sum_mse_baseline;
  r.dropped_cells = std::move(complete.dropped_cells);
  r.dropped_steps = std::move(complete.dropped_steps);
  r.missing_policy = policy;
  return r;
}

}  // namespace wbaudit::stats
