#include "stats/decomposition.hpp"

#include "stats/error.hpp"
#include "stats/summation.hpp"

namespace wbaudit::stats {

Decomposition decompose_values(Eigen::MatrixXd const& y) {
  Eigen::Index const n_cells = y.rows();
  Eigen::Index const n_steps = y.cols();
  if (n_cells == 0 || n_steps == 0) {
    throw StatsError("decompose: empty table");
  }
  Decomposition d;
  NeumaierSum total;
  for (Eigen::Index i = 0; i < n_cells; ++i) {
    for (Eigen::Index j = 0; j < n_steps; ++j) {
      total.add(y(i, j));
    }
  }
  d.mu = total.value() / double(n_cells * n_steps);
  d.time_effect.resize(n_steps);
  d.cell_effect.resize(n_cells);
  for (Eigen::Index j = 0; j < n_steps; ++j) {
    NeumaierSum s;
    for (Eigen::Index i = 0; i < n_cells; ++i) {
      s.add(y(i, j));
    }
    d.time_effect(j) = s.value() / double(n_cells) - d.mu;
  }
  for (Eigen::Index i = 0; i < n_cells; ++i) {
    NeumaierSum s;
    for (Eigen::Index j = 0; j < n_steps; ++j) {
      s.add(y(i, j));
    }
    d.cell_effect(i) = s.value() / double(n_steps) - d.mu;
  }
  NeumaierSum ss_total, ss_time, ss_cell, ss_residual;
  for (Eigen::Index j = 0; j < n_steps; ++j) {
    ss_time.add(d.time_effect(j) * d.time_effect(j));
  }
  for (Eigen::Index i = 0; i < n_cells; ++i) {
    ss_cell.add(d.cell_effect(i) * d.cell_effect(i));
  }
  for (Eigen::Index i = 0; i < n_cells; ++i) {
    for (Eigen::Index j = 0; j < n_steps; ++j) {
      double const dev = y(i, j) - d.mu;
      double const e = dev - d.time_effect(j) - d.cell_effect(i);
      ss_total.add(dev * dev);
      ss_residual.add(e * e);
    }
  }
  d.ss_total = ss_total.value();
  d.ss_time = double(n_cells) * ss_time.value();
  d.ss_cell = double(n_steps) * ss_cell.value();
  d.ss_residual = ss_residual.value();
  if (!(d.ss_total > 0)) {
    throw StatsError("decompose: SS_total is 0 (the table is constant at " + value_text(d.mu) +
                     "), so the shares SS_x / SS_total are undefined");
  }
  d.share_time = d.ss_time / d.ss_total;
  d.share_cell = d.ss_cell / d.ss_total;
  d.share_residual = d.ss_residual / d.ss_total;
  return d;
}

Decomposition decompose(CellTable const& table, MissingPolicy policy) {
  auto complete = complete_tables({&table}, {"table"}, policy, "decompose");
  Decomposition d = decompose_values(complete.tables[0].values);
  d.cells = complete.tables[0].cells;
  d.steps = complete.tables[0].steps;
  d.dropped_cells = std::move(complete.dropped_cells);
  d.dropped_steps = std::move(complete.dropped_steps);
  d.missing_policy = policy;
  return d;
}

Decomposition decompose_forecast_error(CellTable const& forecast, CellTable const& outcome, MissingPolicy policy) {
  auto complete = complete_tables({&forecast, &outcome}, {"forecast", "outcome"}, policy, "decompose_forecast_error");
  Decomposition d = decompose_values(complete.tables[0].values - complete.tables[1].values);
  d.cells = complete.tables[0].cells;
  d.steps = complete.tables[0].steps;
  d.dropped_cells = std::move(complete.dropped_cells);
  d.dropped_steps = std::move(complete.dropped_steps);
  d.missing_policy = policy;
  return d;
}

}  // namespace wbaudit::stats
