#pragma once
// A table of one quantity over evaluation cells (rows) and recorded steps (columns): outcomes, predictions,
// errors. Every statistics routine takes these, whatever produced them.
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

namespace wbaudit::stats {

struct CellTable {
  std::vector<std::string> cells;   // row labels: one evaluation cell each (a parameter group of one target run)
  std::vector<std::int64_t> steps;  // column labels: recorded steps, strictly increasing
  Eigen::MatrixXd values;           // cells.size() x steps.size(); NaN marks a missing value

  Eigen::Index rows() const { return values.rows(); }
  Eigen::Index cols() const { return values.cols(); }
};

}  // namespace wbaudit::stats
