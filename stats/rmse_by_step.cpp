#include "stats/rmse_by_step.hpp"

#include <map>

#include "stats/error.hpp"

namespace wbaudit::stats {

std::vector<StepRmse> rmse_by_step(CellTable const& forecast, CellTable const& outcome,
                                   std::vector<std::string> const& unit_of_cell, BootstrapSpec const& spec) {
  return rmse_by_step(Kokkos::DefaultHostExecutionSpace{}, forecast, outcome, unit_of_cell, spec);
}

namespace detail {

std::vector<std::vector<Eigen::Index>> rows_by_unit(Eigen::Index rows, std::vector<std::string> const& unit_of_cell) {
  std::map<std::string, std::vector<Eigen::Index>> rows_of;
  for (Eigen::Index i = 0; i < rows; ++i) {
    rows_of[unit_of_cell.empty() ? std::to_string(i) : unit_of_cell[static_cast<std::size_t>(i)]].push_back(i);
  }
  std::vector<std::vector<Eigen::Index>> units;
  units.reserve(rows_of.size());
  for (auto& [unit, members] : rows_of) {
    units.push_back(std::move(members));
  }
  return units;
}

void check_step_tables(CellTable const& forecast, CellTable const& outcome,
                       std::vector<std::string> const& unit_of_cell) {
  if (forecast.values.rows() != outcome.values.rows() || forecast.values.cols() != outcome.values.cols() ||
      forecast.steps.size() != static_cast<std::size_t>(forecast.values.cols())) {
    throw StatsError("rmse_by_step: the forecast is " + std::to_string(forecast.values.rows()) + "x" +
                     std::to_string(forecast.values.cols()) + " (" + std::to_string(forecast.steps.size()) +
                     " steps labelled), the outcome " + std::to_string(outcome.values.rows()) + "x" +
                     std::to_string(outcome.values.cols()));
  }
  if (!unit_of_cell.empty() && unit_of_cell.size() != static_cast<std::size_t>(forecast.values.rows())) {
    throw StatsError("rmse_by_step: " + std::to_string(unit_of_cell.size()) + " units given for " +
                     std::to_string(forecast.values.rows()) + " cells");
  }
}

}  // namespace detail
}  // namespace wbaudit::stats
