#pragma once
// Directional specificity: does a predictor know which cells sit above or below the shared time trend?
// With C cells and T steps:
//   anomaly       A_Y(c,t) = Y(c,t) - (1/C) sum_c' Y(c',t)      (outcome)
//                 A_P(c,t) = P(c,t) - (1/C) sum_c' P(c',t)      (predictor; its own across-cell mean)
//   cell mean     m_Y(c) = (1/T) sum_t A_Y(c,t),  m_P(c) = (1/T) sum_t A_P(c,t)
//   a cell is *directional* when |m_Y(c)| > tol and |m_P(c)| > tol, tol = zero_tolerance * max_{c,t}|Y|,|P|
//   (a mean anomaly indistinguishable from rounding noise has no sign);
//   n = number of directional cells, k = those with sign(m_P(c)) == sign(m_Y(c)),
//   sign_agreement_rate = k / n,
//   binomial_p_value = P(X >= k | X ~ Binomial(n, 1/2)) (one-sided exact; 1 when n = 0),
//   anomaly_correlation = sum_{c,t} A_P A_Y / sqrt(sum A_P^2 * sum A_Y^2) over all cells and steps
//     (the anomalies have zero mean at every t, so this is their Pearson correlation);
//   cell_anomaly_correlation = Pearson correlation of m_P(c) and m_Y(c) over cells.
// A predictor that only tracks the common time trend has A_P == 0: no directional cell, p = 1, correlations
// undefined (reported as absent), and `significant` is false.
//
// Run level (DirectionalOptions::groups given): the cells are runs x parameter groups, and the question is whether
// the predictor knows which *runs* of a group erase more. The anomalies are then taken within each group g:
//   A_Y(c,t) = Y(c,t) - (1/|g|) sum_{c' in g} Y(c',t), and the same for P with its own group means,
// and every statistic above is computed from these anomalies. A group with one cell has a zero anomaly field.
// A predictor whose value is the same for every run of a group at each step (a shared reference's projection, say)
// has a zero run-level field: `predictor_field_zero`, no run-specific signal.
// The across-cells statistics (no groups) mix both: with cells = groups x runs they are dominated by which group
// erases more.
#include <optional>
#include <string>
#include <vector>

#include "stats/missing.hpp"
#include "stats/table.hpp"

namespace wbaudit::stats {

// Y(c,t) minus the across-cell mean at each t (complete matrix, rows = cells).
Eigen::MatrixXd anomalies(Eigen::MatrixXd const& values);
// Y(c,t) minus the mean at t over the rows of Y's group: group[c] in [0, number of groups), one per row.
Eigen::MatrixXd anomalies_within(Eigen::MatrixXd const& values, std::vector<int> const& group);

struct DirectionalOptions {
  double zero_tolerance = 1e-9;  // relative to the largest |value| of outcome and predictor
  double alpha = 0.05;           // one-sided level for `significant`
  MissingPolicy missing_policy = MissingPolicy::error;
  // Run level: the group of each cell of the predictor table (aligned with its cells), e.g. the parameter group of a
  // run x group cell; anomalies are taken within groups. Empty: across all cells.
  std::vector<std::string> groups;
};

struct DirectionalSpecificity {
  std::vector<std::string> cells;
  Eigen::VectorXd outcome_cell_anomaly;            // m_Y(c)
  Eigen::VectorXd predictor_cell_anomaly;          // m_P(c)
  int n_directional = 0;                           // n
  int n_sign_agree = 0;                            // k
  std::optional<double> sign_agreement_rate;       // k / n; absent when n = 0
  double binomial_p_value = 1.0;                   // P(X >= k | n, 1/2)
  std::optional<double> anomaly_correlation;       // absent when either anomaly field is identically 0
  std::optional<double> cell_anomaly_correlation;  // absent when fewer than 2 cells or zero variance
  double alpha = 0.05;
  bool significant = false;  // n > 0 and binomial_p_value < alpha
  bool run_level = false;    // anomalies within groups (options.groups)
  // The predictor's anomaly field is zero within the tolerance (run level: no run-specific signal).
  bool predictor_field_zero = false;
  std::vector<std::string> dropped_cells;
  std::vector<std::int64_t> dropped_steps;
  MissingPolicy missing_policy = MissingPolicy::error;
};

// Throws StatsError on mismatched grids, inf, NaN under MissingPolicy::error, or fewer than 2 cells.
DirectionalSpecificity directional_specificity(CellTable const& predictor, CellTable const& outcome,
                                               DirectionalOptions const& options = {});

namespace detail {
// Anomalies, per-cell means, sign counts and correlations of complete matrices with an absolute zero tolerance.
struct DirectionalCore {
  Eigen::VectorXd outcome_cell_anomaly, predictor_cell_anomaly;
  int n_directional = 0, n_sign_agree = 0;
  std::optional<double> anomaly_correlation, cell_anomaly_correlation;
  bool predictor_flat = false, outcome_flat = false;
};
// `group`: one group index per row for run-level anomalies; nullptr or empty: across all rows.
DirectionalCore directional_core(Eigen::MatrixXd const& predictor, Eigen::MatrixXd const& outcome, double tol,
                                 std::vector<int> const* group = nullptr);
// The group index of each cell (in order of first appearance of the group) from `groups` aligned with
// `table_cells`, for the cells `cells` (a subset, e.g. after a missing policy dropped some). Throws StatsError when
// the sizes differ.
std::vector<int> group_indices(std::vector<std::string> const& table_cells, std::vector<std::string> const& groups,
                               std::vector<std::string> const& cells);
}  // namespace detail

// One-sided exact binomial tail P(X >= k) for X ~ Binomial(n, 1/2) (Boost.Math). Throws on k < 0, k > n.
double sign_test_p_value(int k, int n);

}  // namespace wbaudit::stats
