#include "stats/table_predicates.hpp"

#include <algorithm>
#include <cmath>

namespace wbaudit::stats {

bool same_values(Eigen::MatrixXd const& a, Eigen::MatrixXd const& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         ((a.array() == b.array()) || (a.array().isNaN() && b.array().isNaN())).all();
}

bool anomaly_field_is_zero(Eigen::MatrixXd const& values) {
  for (Eigen::Index k = 0; k < values.cols(); ++k) {
    double lo = INFINITY;
    double hi = -INFINITY;
    for (Eigen::Index i = 0; i < values.rows(); ++i) {
      double const v = values(i, k);
      if (std::isnan(v)) {
        continue;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (hi > lo) {
      return false;
    }
  }
  return true;
}

}  // namespace wbaudit::stats
