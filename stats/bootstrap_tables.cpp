#include "stats/bootstrap_tables.hpp"

#include <cmath>
#include <map>

#include "stats/decomposition.hpp"
#include "stats/error.hpp"
#include "stats/summation.hpp"

namespace wbaudit::stats {

TableMetric table_metric_from_name(std::string_view name) {
  if (name == "bias") {
    return TableMetric::bias;
  }
  if (name == "mae") {
    return TableMetric::mae;
  }
  if (name == "rmse_macro") {
    return TableMetric::rmse_macro;
  }
  if (name == "rmse_pooled") {
    return TableMetric::rmse_pooled;
  }
  throw StatsError("table_metric_from_name: unknown metric \"" + std::string(name) +
                   "\" (known: bias, mae, rmse_macro, rmse_pooled)");
}

std::string_view to_string(TableMetric metric) {
  switch (metric) {
    case TableMetric::bias:
      return "bias";
    case TableMetric::mae:
      return "mae";
    case TableMetric::rmse_macro:
      return "rmse_macro";
    case TableMetric::rmse_pooled:
      return "rmse_pooled";
  }
  return "unknown";
}

namespace detail {

PreparedTables prepare_tables(std::vector<CellTable const*> const& tables, std::vector<std::string> const& names,
                              std::vector<std::string> const& unit_of_cell, MissingPolicy policy,
                              BootstrapSpec const& spec, std::string_view context) {
  std::string const ctx(context);
  if (!unit_of_cell.empty() && !tables.empty() && unit_of_cell.size() != tables[0]->cells.size()) {
    throw StatsError(ctx + ": unit_of_cell has " + std::to_string(unit_of_cell.size()) + " entries for " +
                     std::to_string(tables[0]->cells.size()) + " cells");
  }
  std::map<std::string, std::string> unit_by_cell;
  if (!unit_of_cell.empty()) {
    for (std::size_t i = 0; i < unit_of_cell.size(); ++i) {
      unit_by_cell[tables[0]->cells[i]] = unit_of_cell[i];
    }
  }
  auto complete = complete_tables(tables, names, policy, context);
  PreparedTables p;
  p.resampling = spec.resampling;
  for (auto& t : complete.tables) {
    p.values.push_back(std::move(t.values));
  }
  auto const& cells = complete.tables[0].cells;
  p.cells = cells;
  if (spec.resampling == Resampling::moving_block) {
    p.n_units = std::int64_t(p.values[0].cols());
  } else {
    std::map<std::string, std::size_t> unit_index;  // units in order of first appearance
    for (std::size_t i = 0; i < cells.size(); ++i) {
      std::string const unit = unit_of_cell.empty() ? cells[i] : unit_by_cell.at(cells[i]);
      auto [it, inserted] = unit_index.emplace(unit, p.rows_of_unit.size());
      if (inserted) {
        p.rows_of_unit.emplace_back();
      }
      p.rows_of_unit[it->second].push_back(std::int64_t(i));
    }
    p.n_units = std::int64_t(p.rows_of_unit.size());
  }
  check_bootstrap_spec(spec, p.n_units);
  return p;
}

CellQuantities cell_quantities(Eigen::MatrixXd const& error) {
  CellQuantities q;
  double const n = double(error.cols());
  for (Eigen::Index i = 0; i < error.rows(); ++i) {
    NeumaierSum b, a, s;
    for (Eigen::Index j = 0; j < error.cols(); ++j) {
      double const e = error(i, j);
      b.add(e);
      a.add(std::abs(e));
      s.add(e * e);
    }
    q.bias.push_back(b.value() / n);
    q.mae.push_back(a.value() / n);
    q.mse.push_back(s.value() / n);
    q.rmse.push_back(std::sqrt(s.value() / n));
  }
  return q;
}

namespace {

double aggregate(TableMetric metric, NeumaierSum const& sum, double count) {
  double const mean = sum.value() / count;
  return metric == TableMetric::rmse_pooled ? std::sqrt(mean) : mean;
}

std::vector<double> const& per_cell(TableMetric metric, CellQuantities const& q) {
  switch (metric) {
    case TableMetric::bias:
      return q.bias;
    case TableMetric::mae:
      return q.mae;
    case TableMetric::rmse_macro:
      return q.rmse;
    case TableMetric::rmse_pooled:
      return q.mse;
  }
  return q.mse;
}

}  // namespace

double metric_on_units(TableMetric metric, CellQuantities const& q, PreparedTables const& p,
                       std::span<std::int64_t const> units) {
  auto const& values = per_cell(metric, q);
  NeumaierSum sum;
  std::size_t count = 0;
  for (auto u : units) {
    for (auto row : p.rows_of_unit[std::size_t(u)]) {
      sum.add(values[std::size_t(row)]);
      ++count;
    }
  }
  return aggregate(metric, sum, double(count));
}

double metric_on_steps(TableMetric metric, Eigen::MatrixXd const& error, std::span<std::int64_t const> steps) {
  NeumaierSum sum;
  double const n = double(steps.size());
  for (Eigen::Index i = 0; i < error.rows(); ++i) {
    NeumaierSum cell;
    for (auto j : steps) {
      double const e = error(i, Eigen::Index(j));
      cell.add(metric == TableMetric::bias ? e : metric == TableMetric::mae ? std::abs(e) : e * e);
    }
    double const mean = cell.value() / n;
    sum.add(metric == TableMetric::rmse_macro ? std::sqrt(mean) : mean);
  }
  return aggregate(metric, sum, double(error.rows()));
}

double skill_on_units(CellQuantities const& pred, CellQuantities const& base, PreparedTables const& p,
                      std::span<std::int64_t const> units) {
  NeumaierSum sp, sb;
  for (auto u : units) {
    for (auto row : p.rows_of_unit[std::size_t(u)]) {
      sp.add(pred.mse[std::size_t(row)]);
      sb.add(base.mse[std::size_t(row)]);
    }
  }
  if (!(sb.value() > 0)) {
    throw StatsError("skill: the baseline's summed MSE is 0 on this sample");
  }
  return 1.0 - sp.value() / sb.value();
}

double skill_on_steps(Eigen::MatrixXd const& pred_error, Eigen::MatrixXd const& base_error,
                      std::span<std::int64_t const> steps) {
  NeumaierSum sp, sb;
  for (Eigen::Index i = 0; i < pred_error.rows(); ++i) {
    NeumaierSum cp, cb;
    for (auto j : steps) {
      double const ep = pred_error(i, Eigen::Index(j)), eb = base_error(i, Eigen::Index(j));
      cp.add(ep * ep);
      cb.add(eb * eb);
    }
    sp.add(cp.value() / double(steps.size()));
    sb.add(cb.value() / double(steps.size()));
  }
  if (!(sb.value() > 0)) {
    throw StatsError("skill: the baseline's summed MSE is 0 on this sample");
  }
  return 1.0 - sp.value() / sb.value();
}

std::vector<Eigen::Index> resample_rows(PreparedTables const& p, std::span<std::int64_t const> units) {
  std::vector<Eigen::Index> rows;
  for (auto u : units) {
    for (auto row : p.rows_of_unit[std::size_t(u)]) {
      rows.push_back(Eigen::Index(row));
    }
  }
  return rows;
}

Eigen::MatrixXd take_rows(Eigen::MatrixXd const& values, std::vector<Eigen::Index> const& rows) {
  Eigen::MatrixXd sample(Eigen::Index(rows.size()), values.cols());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    sample.row(Eigen::Index(r)) = values.row(rows[r]);
  }
  return sample;
}

Eigen::MatrixXd common_time_of(Eigen::MatrixXd const& outcome) {
  Eigen::MatrixXd out(outcome.rows(), outcome.cols());
  for (Eigen::Index t = 0; t < outcome.cols(); ++t) {
    double sum = 0;
    for (Eigen::Index r = 0; r < outcome.rows(); ++r) {
      sum += outcome(r, t);
    }
    out.col(t).setConstant(sum / double(outcome.rows()));
  }
  return out;
}

namespace {

// The rows (units mode) or columns (moving_block) of a resample.
Eigen::MatrixXd resampled(Eigen::MatrixXd const& values, PreparedTables const& p, std::span<std::int64_t const> units) {
  Eigen::MatrixXd sample;
  if (p.resampling == Resampling::units) {
    std::vector<Eigen::Index> rows;
    for (auto u : units) {
      for (auto row : p.rows_of_unit[std::size_t(u)]) {
        rows.push_back(Eigen::Index(row));
      }
    }
    sample.resize(Eigen::Index(rows.size()), values.cols());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      sample.row(Eigen::Index(r)) = values.row(rows[r]);
    }
  } else {
    sample.resize(values.rows(), Eigen::Index(units.size()));
    for (std::size_t s = 0; s < units.size(); ++s) {
      sample.col(Eigen::Index(s)) = values.col(Eigen::Index(units[s]));
    }
  }
  return sample;
}

}  // namespace

double directional_on_resample(int which, Eigen::MatrixXd const& predictor, Eigen::MatrixXd const& outcome, double tol,
                               PreparedTables const& p, std::span<std::int64_t const> units,
                               std::vector<int> const& group) {
  std::vector<int> sample_group;
  if (!group.empty()) {
    if (p.resampling == Resampling::units) {
      for (auto u : units) {
        for (auto row : p.rows_of_unit[std::size_t(u)]) {
          sample_group.push_back(group[std::size_t(row)]);
        }
      }
    } else {
      sample_group = group;  // moving blocks resample steps; every row is kept
    }
  }
  auto const core = directional_core(resampled(predictor, p, units), resampled(outcome, p, units), tol, &sample_group);
  if (which == 0) {
    if (core.n_directional == 0) {
      throw StatsError("sign_agreement_rate undefined: no directional cell");
    }
    return double(core.n_sign_agree) / double(core.n_directional);
  }
  auto const& value = which == 1 ? core.anomaly_correlation : core.cell_anomaly_correlation;
  if (!value) {
    throw StatsError("anomaly correlation undefined: an anomaly field is flat");
  }
  return *value;
}

double share_on_resample(int which, Eigen::MatrixXd const& values, PreparedTables const& p,
                         std::span<std::int64_t const> units) {
  Eigen::MatrixXd const sample = resampled(values, p, units);
  Decomposition const d = decompose_values(sample);
  return which == 0 ? d.share_time : which == 1 ? d.share_cell : d.share_residual;
}

}  // namespace detail

}  // namespace wbaudit::stats
