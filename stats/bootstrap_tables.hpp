#pragma once
// Bootstrap intervals for the table statistics of metrics.hpp and decomposition.hpp.
//
// Units: with spec.resampling == units, the resampled units are groups of cells (rows). `unit_of_cell` (aligned
// with the input table's cells) names the independent unit owning each cell, e.g. the training run that owns
// several parameter-group cells; cells of one unit are always resampled together. Empty `unit_of_cell` = every
// cell is its own unit. With spec.resampling == moving_block, the resampled units are the steps (columns), in
// blocks of spec.block_length consecutive steps, and every cell is kept.
// The statistic on a resample is the same definition as on the full table, applied to the resampled rows (with
// their multiplicity) or steps:
//   bias, mae, rmse_macro: mean over resampled cells of bias_cell, mae_cell, rmse_cell
//   rmse_pooled:          sqrt(mean over resampled cells of mse_cell)
//   skill:                1 - sum mse_P / sum mse_B over resampled cells
//   share_time/cell/residual: the decomposition of the resampled table
//   sign_agreement_rate, anomaly_correlation, cell_anomaly_correlation: directional_specificity of the resampled
//     predictor and outcome tables (anomalies against the resampled across-cell mean; zero tolerance from the
//     full tables). A resample on which one is undefined (no directional cell, a flat anomaly field) makes the
//     bootstrap throw, naming the resample: such a statistic needs more units.
// Per-cell quantities are computed once when resampling units, so a resample costs one pass over its cells.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stats/bootstrap.hpp"
#include "stats/decomposition.hpp"
#include "stats/directional.hpp"
#include "stats/error.hpp"
#include "stats/metrics.hpp"
#include "stats/missing.hpp"
#include "stats/table.hpp"

namespace wbaudit::stats {

enum class TableMetric { bias, mae, rmse_macro, rmse_pooled };

// "bias", "mae", "rmse_macro", "rmse_pooled"; unknown names throw StatsError listing the known ones.
TableMetric table_metric_from_name(std::string_view name);
std::string_view to_string(TableMetric metric);

struct DecompositionIntervals {
  Interval share_time;
  Interval share_cell;
  Interval share_residual;
};

struct DirectionalIntervals {
  Interval sign_agreement_rate;
  Interval anomaly_correlation;
  Interval cell_anomaly_correlation;
};

namespace detail {

// Complete tables reduced to what a resample needs.
struct PreparedTables {
  std::vector<Eigen::MatrixXd> values;                  // complete, policy applied
  std::vector<std::vector<std::int64_t>> rows_of_unit;  // units mode
  std::int64_t n_units = 0;                             // units, or steps for moving_block
  Resampling resampling = Resampling::units;
  std::vector<std::string> cells;  // the complete tables' cells (rows of `values`)
};

PreparedTables prepare_tables(std::vector<CellTable const*> const& tables, std::vector<std::string> const& names,
                              std::vector<std::string> const& unit_of_cell, MissingPolicy policy,
                              BootstrapSpec const& spec, std::string_view context);

// Per-cell quantities of one error matrix over all steps: bias_cell, mae_cell, mse_cell, rmse_cell.
struct CellQuantities {
  std::vector<double> bias, mae, mse, rmse;
};
CellQuantities cell_quantities(Eigen::MatrixXd const& error);

// The statistic of a resample: rows = resampled cells (with repeats), or all cells with `steps` resampled.
double metric_on_units(TableMetric metric, CellQuantities const& q, PreparedTables const& p,
                       std::span<std::int64_t const> units);
double metric_on_steps(TableMetric metric, Eigen::MatrixXd const& error, std::span<std::int64_t const> steps);
double skill_on_units(CellQuantities const& pred, CellQuantities const& base, PreparedTables const& p,
                      std::span<std::int64_t const> units);
double skill_on_steps(Eigen::MatrixXd const& pred_error, Eigen::MatrixXd const& base_error,
                      std::span<std::int64_t const> steps);
// 0 = share_time, 1 = share_cell, 2 = share_residual
double share_on_resample(int which, Eigen::MatrixXd const& values, PreparedTables const& p,
                         std::span<std::int64_t const> units);

// 0 = sign_agreement_rate, 1 = anomaly_correlation, 2 = cell_anomaly_correlation
// The rows of a resample of units (with repeats), in draw order.
std::vector<Eigen::Index> resample_rows(PreparedTables const& p, std::span<std::int64_t const> units);
Eigen::MatrixXd take_rows(Eigen::MatrixXd const& values, std::vector<Eigen::Index> const& rows);
// A post-outcome predictor rebuilt from `outcome`: the mean over its rows at each step, in every row (plain sum in
// row order, as forecast::common_time_table builds it).
Eigen::MatrixXd common_time_of(Eigen::MatrixXd const& outcome);

// `group`: per row of the complete tables, the group for run-level anomalies (empty: across all cells); a resample's
// rows keep their groups, repeats included.
double directional_on_resample(int which, Eigen::MatrixXd const& predictor, Eigen::MatrixXd const& outcome, double tol,
                               PreparedTables const& p, std::span<std::int64_t const> units,
                               std::vector<int> const& group = {});

}  // namespace detail

// Post-outcome predictors (common-time: the mean over cells of the very outcomes being scored) are not fixed rows:
// when units are resampled, each resample rebuilds them from its own outcome rows (detail::common_time_of), so a
// quantity that is exactly zero by construction on the full table (the common-time error's time share, say) stays
// zero on every resample. Moving blocks resample steps and keep every cell: the mean over cells at a step is
// unchanged, and the rows are used as they are.
struct PostOutcome {
  bool forecast = false;  // the forecast (or skill's predictor) is post-outcome
  bool baseline = false;  // skill's baseline is post-outcome
};

// Interval for bias, mae, rmse_macro or rmse_pooled of forecast against outcome.
template <class ExecSpace>
Interval bootstrap_metric(ExecSpace const& space, TableMetric metric, CellTable const& forecast,
                          CellTable const& outcome, BootstrapSpec const& spec,
                          std::vector<std::string> const& unit_of_cell = {},
                          MissingPolicy policy = MissingPolicy::error, PostOutcome post = {}) {
  auto const p = detail::prepare_tables({&forecast, &outcome}, {"forecast", "outcome"}, unit_of_cell, policy, spec,
                                        "bootstrap_metric");
  Eigen::MatrixXd const error = p.values[0] - p.values[1];
  if (p.resampling == Resampling::units && post.forecast) {
    std::vector<std::int64_t> all(std::size_t(error.cols()));
    std::iota(all.begin(), all.end(), std::int64_t(0));
    return bootstrap(
        space, p.n_units,
        [&](std::span<std::int64_t const> units) {
          Eigen::MatrixXd const y = detail::take_rows(p.values[1], detail::resample_rows(p, units));
          return detail::metric_on_steps(metric, detail::common_time_of(y) - y, all);
        },
        spec);
  }
  if (p.resampling == Resampling::units) {
    auto const q = detail::cell_quantities(error);
    return bootstrap(
        space, p.n_units,
        [&](std::span<std::int64_t const> units) { return detail::metric_on_units(metric, q, p, units); }, spec);
  }
  return bootstrap(
      space, p.n_units,
      [&](std::span<std::int64_t const> steps) { return detail::metric_on_steps(metric, error, steps); }, spec);
}

inline Interval bootstrap_metric(TableMetric metric, CellTable const& forecast, CellTable const& outcome,
                                 BootstrapSpec const& spec, std::vector<std::string> const& unit_of_cell = {},
                                 MissingPolicy policy = MissingPolicy::error, PostOutcome post = {}) {
  return bootstrap_metric(Kokkos::DefaultHostExecutionSpace{}, metric, forecast, outcome, spec, unit_of_cell, policy,
                          post);
}

// Interval for skill = 1 - sum MSE_P / sum MSE_B.
template <class ExecSpace>
Interval bootstrap_skill(ExecSpace const& space, CellTable const& predictor, CellTable const& baseline,
                         CellTable const& outcome, BootstrapSpec const& spec,
                         std::vector<std::string> const& unit_of_cell = {}, MissingPolicy policy = MissingPolicy::error,
                         PostOutcome post = {}) {
  auto const p = detail::prepare_tables({&predictor, &baseline, &outcome}, {"predictor", "baseline", "outcome"},
                                        unit_of_cell, policy, spec, "bootstrap_skill");
  Eigen::MatrixXd const ep = p.values[0] - p.values[2];
  Eigen::MatrixXd const eb = p.values[1] - p.values[2];
  if (p.resampling == Resampling::units && (post.forecast || post.baseline)) {
    std::vector<std::int64_t> all(std::size_t(ep.cols()));
    std::iota(all.begin(), all.end(), std::int64_t(0));
    return bootstrap(
        space, p.n_units,
        [&](std::span<std::int64_t const> units) {
          auto const rows = detail::resample_rows(p, units);
          Eigen::MatrixXd const y = detail::take_rows(p.values[2], rows);
          Eigen::MatrixXd const ct = detail::common_time_of(y);
          Eigen::MatrixXd const sp = post.forecast ? ct : detail::take_rows(p.values[0], rows);
          Eigen::MatrixXd const sb = post.baseline ? ct : detail::take_rows(p.values[1], rows);
          return detail::skill_on_steps(sp - y, sb - y, all);
        },
        spec);
  }
  if (p.resampling == Resampling::units) {
    auto const qp = detail::cell_quantities(ep);
    auto const qb = detail::cell_quantities(eb);
    return bootstrap(
        space, p.n_units, [&](std::span<std::int64_t const> units) { return detail::skill_on_units(qp, qb, p, units); },
        spec);
  }
  return bootstrap(
      space, p.n_units, [&](std::span<std::int64_t const> steps) { return detail::skill_on_steps(ep, eb, steps); },
      spec);
}

inline Interval bootstrap_skill(CellTable const& predictor, CellTable const& baseline, CellTable const& outcome,
                                BootstrapSpec const& spec, std::vector<std::string> const& unit_of_cell = {},
                                MissingPolicy policy = MissingPolicy::error, PostOutcome post = {}) {
  return bootstrap_skill(Kokkos::DefaultHostExecutionSpace{}, predictor, baseline, outcome, spec, unit_of_cell, policy,
                         post);
}

// Intervals for the decomposition shares of `table` (pass forecast_error(F, Y) for the error decomposition). The
// three intervals use the same resamples.
template <class ExecSpace>
DecompositionIntervals bootstrap_decomposition(ExecSpace const& space, CellTable const& table,
                                               BootstrapSpec const& spec,
                                               std::vector<std::string> const& unit_of_cell = {},
                                               MissingPolicy policy = MissingPolicy::error) {
  auto const p = detail::prepare_tables({&table}, {"table"}, unit_of_cell, policy, spec, "bootstrap_decomposition");
  std::array<Interval, 3> out;
  for (int which = 0; which < 3; ++which) {
    out[std::size_t(which)] = bootstrap(
        space, p.n_units,
        [&](std::span<std::int64_t const> units) { return detail::share_on_resample(which, p.values[0], p, units); },
        spec);
  }
  return {out[0], out[1], out[2]};
}

inline DecompositionIntervals bootstrap_decomposition(CellTable const& table, BootstrapSpec const& spec,
                                                      std::vector<std::string> const& unit_of_cell = {},
                                                      MissingPolicy policy = MissingPolicy::error) {
  return bootstrap_decomposition(Kokkos::DefaultHostExecutionSpace{}, table, spec, unit_of_cell, policy);
}

// Each share's interval on its own: shares[k] (0 = share_time, 1 = share_cell, 2 = share_residual) holds the
// interval, or reasons[k] why that share has none. A share on which BCa is undefined (e.g. share_time ~ 1e-34
// of an error table with no time effect: every replicate lies above the estimate) leaves the other two intact.
// Failures common to all three (a table that cannot be prepared: NaN under MissingPolicy::error, fewer than 2
// units) give all three the same reason.
struct DecompositionShareIntervals {
  std::array<std::optional<Interval>, 3> shares;
  std::array<std::string, 3> reasons;
};

template <class ExecSpace>
DecompositionShareIntervals bootstrap_decomposition_shares(ExecSpace const& space, CellTable const& table,
                                                           BootstrapSpec const& spec,
                                                           std::vector<std::string> const& unit_of_cell = {},
                                                           MissingPolicy policy = MissingPolicy::error) {
  DecompositionShareIntervals out;
  std::optional<detail::PreparedTables> p;
  try {
    p = detail::prepare_tables({&table}, {"table"}, unit_of_cell, policy, spec, "bootstrap_decomposition_shares");
  } catch (StatsError const& e) {
    out.reasons.fill(e.what());
    return out;
  }
  for (int which = 0; which < 3; ++which) {
    try {
      out.shares[std::size_t(which)] = bootstrap(
          space, p->n_units,
          [&](std::span<std::int64_t const> units) {
            return detail::share_on_resample(which, p->values[0], *p, units);
          },
          spec);
    } catch (StatsError const& e) {
      out.reasons[std::size_t(which)] = e.what();
    }
  }
  return out;
}

inline DecompositionShareIntervals bootstrap_decomposition_shares(CellTable const& table, BootstrapSpec const& spec,
                                                                  std::vector<std::string> const& unit_of_cell = {},
                                                                  MissingPolicy policy = MissingPolicy::error) {
  return bootstrap_decomposition_shares(Kokkos::DefaultHostExecutionSpace{}, table, spec, unit_of_cell, policy);
}

// The decomposition shares of the forecast error F - Y, each on its own as bootstrap_decomposition_shares; with a
// post-outcome forecast and units resampled, F is rebuilt on each resample from its outcome rows.
template <class ExecSpace>
DecompositionShareIntervals bootstrap_error_decomposition_shares(ExecSpace const& space, CellTable const& forecast,
                                                                 CellTable const& outcome, BootstrapSpec const& spec,
                                                                 std::vector<std::string> const& unit_of_cell = {},
                                                                 MissingPolicy policy = MissingPolicy::error,
                                                                 PostOutcome post = {}) {
  if (!post.forecast) {
    return bootstrap_decomposition_shares(space, forecast_error(forecast, outcome), spec, unit_of_cell, policy);
  }
  DecompositionShareIntervals out;
  std::optional<detail::PreparedTables> p;
  try {
    p = detail::prepare_tables({&forecast, &outcome}, {"forecast", "outcome"}, unit_of_cell, policy, spec,
                               "bootstrap_error_decomposition_shares");
  } catch (StatsError const& e) {
    out.reasons.fill(e.what());
    return out;
  }
  for (int which = 0; which < 3; ++which) {
    try {
      out.shares[std::size_t(which)] = bootstrap(
          space, p->n_units,
          [&](std::span<std::int64_t const> units) {
            Eigen::MatrixXd y, f;
            if (p->resampling == Resampling::units) {
              y = detail::take_rows(p->values[1], detail::resample_rows(*p, units));
              f = detail::common_time_of(y);
            } else {
              y = p->values[1](Eigen::all, std::vector<Eigen::Index>(units.begin(), units.end()));
              f = p->values[0](Eigen::all, std::vector<Eigen::Index>(units.begin(), units.end()));
            }
            Decomposition const d = decompose_values(f - y);
            return which == 0 ? d.share_time : which == 1 ? d.share_cell : d.share_residual;
          },
          spec);
    } catch (StatsError const& e) {
      out.reasons[std::size_t(which)] = e.what();
    }
  }
  return out;
}

inline DecompositionShareIntervals bootstrap_error_decomposition_shares(
    CellTable const& forecast, CellTable const& outcome, BootstrapSpec const& spec,
    std::vector<std::string> const& unit_of_cell = {}, MissingPolicy policy = MissingPolicy::error,
    PostOutcome post = {}) {
  return bootstrap_error_decomposition_shares(Kokkos::DefaultHostExecutionSpace{}, forecast, outcome, spec,
                                              unit_of_cell, policy, post);
}

// Intervals for the directional-specificity statistics (options.zero_tolerance, options.missing_policy and
// options.groups are used; alpha is not: the intervals have spec.confidence). With groups, each resample's anomalies
// are taken within the groups of its rows (run level). The three intervals use the same resamples.
template <class ExecSpace>
DirectionalIntervals bootstrap_directional(ExecSpace const& space, CellTable const& predictor, CellTable const& outcome,
                                           BootstrapSpec const& spec, std::vector<std::string> const& unit_of_cell = {},
                                           DirectionalOptions const& options = {}) {
  auto const p = detail::prepare_tables({&predictor, &outcome}, {"predictor", "outcome"}, unit_of_cell,
                                        options.missing_policy, spec, "bootstrap_directional");
  if (!(options.zero_tolerance >= 0)) {
    throw StatsError("bootstrap_directional: zero_tolerance must be >= 0");
  }
  double const tol =
      options.zero_tolerance * std::max(p.values[0].cwiseAbs().maxCoeff(), p.values[1].cwiseAbs().maxCoeff());
  std::vector<int> const group =
      options.groups.empty() ? std::vector<int>{} : detail::group_indices(predictor.cells, options.groups, p.cells);
  std::array<Interval, 3> out;
  for (int which = 0; which < 3; ++which) {
    out[std::size_t(which)] = bootstrap(
        space, p.n_units,
        [&](std::span<std::int64_t const> units) {
          return detail::directional_on_resample(which, p.values[0], p.values[1], tol, p, units, group);
        },
        spec);
  }
  return {out[0], out[1], out[2]};
}

inline DirectionalIntervals bootstrap_directional(CellTable const& predictor, CellTable const& outcome,
                                                  BootstrapSpec const& spec,
                                                  std::vector<std::string> const& unit_of_cell = {},
                                                  DirectionalOptions const& options = {}) {
  return bootstrap_directional(Kokkos::DefaultHostExecutionSpace{}, predictor, outcome, spec, unit_of_cell, options);
}

}  // namespace wbaudit::stats
