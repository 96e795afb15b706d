#pragma once
// Predicates on the values of cell tables (cells x steps, NaN = missing) that decide how a table is reported.
#include <Eigen/Dense>

namespace wbaudit::stats {

// Same shape and, entry by entry, equal values or both missing (NaN): two predictors with the same table have the
// same statistics (the report scores one and names the other as identical).
bool same_values(Eigen::MatrixXd const& a, Eigen::MatrixXd const& b);

// At every step (column) the present values of every cell (row) are equal, so the anomaly field (value minus the
// across-cell mean at each step) is exactly zero: no cell is directional and anomaly correlations are undefined.
// Missing values are ignored; a step with no present value, and a table without rows, count as equal.
bool anomaly_field_is_zero(Eigen::MatrixXd const& values);

}  // namespace wbaudit::stats
