#pragma once
// wbaudit::stats in one include. What each header gives (definitions with formulas: docs/statistics.md):
//   table.hpp            CellTable: cells x recorded steps (Eigen::MatrixXd, NaN = missing), the common input
//   error.hpp            StatsError, thrown on every failed precondition, naming the offending value/cell/step
//   missing.hpp          grid checks and the explicit MissingPolicy (error | drop_incomplete_cells | _steps)
//   summation.hpp        NeumaierSum, compensated_sum
//   metrics.hpp          evaluate_metrics: bias, mae, rmse_cell, rmse_macro, rmse_pooled; evaluate_skill
//   decomposition.hpp    decompose, decompose_forecast_error: y = mu + a_t + b_c + e, SS and shares
//   directional.hpp      directional_specificity: anomalies, sign agreement, binomial p-value, correlations
//   paired.hpp           t_interval, paired_difference, paired_ratio (paired t and bootstrap intervals)
//   recovery.hpp         recovery = (L_N - L_P) / (L_N - L_R)
//   rng.hpp              uniform_index: Philox4x32-10 keyed by (seed, resample, draw), unbiased
//   bootstrap.hpp        BootstrapSpec, Interval, bootstrap / bootstrap_replicates (percentile, BCa; units or
//                        moving blocks; Kokkos-parallel over resamples, bitwise identical at any thread count)
//   bootstrap_tables.hpp bootstrap_metric, bootstrap_skill, bootstrap_decomposition, bootstrap_directional
//   gates.hpp            Gate, parse_gate, evaluate_gate -> pass / fail / inconclusive with reasons
//   statistic_table.hpp  one row per statistic: name, definition, whose, gate-usable, how its report row is shown
//   rmse_by_step.hpp     rmse over cells at each step with a percentile bootstrap interval over units
//   breakdown.hpp        breakdown_by_factor: rmse_macro and skill per level of each grid factor
//   table_predicates.hpp same_values (NaN-aware equality), anomaly_field_is_zero
//
// Typical evaluation of one predictor P against outcome Y and baseline B (unit_of_cell: the run owning each cell):
//   auto m = evaluate_metrics(P, Y);                                  // point values
//   auto ci = bootstrap_metric(TableMetric::rmse_macro, P, Y, spec, unit_of_cell);
//   auto skill_ci = bootstrap_skill(P, B, Y, spec, unit_of_cell);
//   auto g = evaluate_gate(parse_gate("rmse_macro <= 0.01", "accuracy", required), ci, cell_statuses);
#include "stats/bootstrap.hpp"
#include "stats/bootstrap_tables.hpp"
#include "stats/breakdown.hpp"
#include "stats/decomposition.hpp"
#include "stats/directional.hpp"
#include "stats/error.hpp"
#include "stats/gates.hpp"
#include "stats/metrics.hpp"
#include "stats/missing.hpp"
#include "stats/paired.hpp"
#include "stats/recovery.hpp"
#include "stats/rmse_by_step.hpp"
#include "stats/rng.hpp"
#include "stats/statistic_table.hpp"
#include "stats/summation.hpp"
#include "stats/table.hpp"
#include "stats/table_predicates.hpp"
