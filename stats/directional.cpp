#include "stats/directional.hpp"

#include <algorithm>
#include <boost/math/distributions/binomial.hpp>
#include <cmath>
#include <map>

#include "stats/error.hpp"
#include "stats/summation.hpp"

namespace wbaudit::stats {

Eigen::MatrixXd anomalies(Eigen::MatrixXd const& values) {
  Eigen::MatrixXd a(values.rows(), values.cols());
  for (Eigen::Index j = 0; j < values.cols(); ++j) {
    NeumaierSum s;
    for (Eigen::Index i = 0; i < values.rows(); ++i) {
      s.add(values(i, j));
    }
    double const mean = s.value() / double(values.rows());
    for (Eigen::Index i = 0; i < values.rows(); ++i) {
      a(i, j) = values(i, j) - mean;
    }
  }
  return a;
}

Eigen::MatrixXd anomalies_within(Eigen::MatrixXd const& values, std::vector<int> const& group) {
  int const n_groups = group.empty() ? 0 : *std::max_element(group.begin(), group.end()) + 1;
  Eigen::MatrixXd a(values.rows(), values.cols());
  std::vector<NeumaierSum> sums(static_cast<std::size_t>(n_groups));
  std::vector<double> counts(std::size_t(n_groups), 0.0);
  for (int g : group) {
    counts[std::size_t(g)] += 1.0;
  }
  for (Eigen::Index j = 0; j < values.cols(); ++j) {
    std::fill(sums.begin(), sums.end(), NeumaierSum{});
    for (Eigen::Index i = 0; i < values.rows(); ++i) {
      sums[std::size_t(group[std::size_t(i)])].add(values(i, j));
    }
    for (Eigen::Index i = 0; i < values.rows(); ++i) {
      auto const g = std::size_t(group[std::size_t(i)]);
      a(i, j) = values(i, j) - sums[g].value() / counts[g];
    }
  }
  return a;
}

double sign_test_p_value(int k, int n) {
  if (n < 0 || k < 0 || k > n) {
    throw StatsError("sign_test_p_value: need 0 <= k <= n, got k = " + std::to_string(k) +
                     ", n = " + std::to_string(n));
  }
  if (k == 0) {
    return 1.0;
  }
  boost::math::binomial_distribution<double> const dist(double(n), 0.5);
  return boost::math::cdf(boost::math::complement(dist, double(k - 1)));  // P(X > k-1) = P(X >= k)
}

namespace {

std::optional<double> correlation(Eigen::Ref<Eigen::VectorXd const> const& x,
                                  Eigen::Ref<Eigen::VectorXd const> const& y, bool centre) {
  double mx = 0, my = 0;
  if (centre) {
    NeumaierSum sx, sy;
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      sx.add(x(i));
      sy.add(y(i));
    }
    mx = sx.value() / double(x.size());
    my = sy.value() / double(y.size());
  }
  NeumaierSum sxy, sxx, syy;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    double const dx = x(i) - mx, dy = y(i) - my;
    sxy.add(dx * dy);
    sxx.add(dx * dx);
    syy.add(dy * dy);
  }
  if (!(sxx.value() > 0) || !(syy.value() > 0)) {
    return std::nullopt;
  }
  return sxy.value() / std::sqrt(sxx.value() * syy.value());
}

}  // namespace

namespace detail {

std::vector<int> group_indices(std::vector<std::string> const& table_cells, std::vector<std::string> const& groups,
                               std::vector<std::string> const& cells) {
  if (groups.size() != table_cells.size()) {
    throw StatsError("directional_specificity: " + std::to_string(groups.size()) + " groups for " +
                     std::to_string(table_cells.size()) + " cells");
  }
  std::map<std::string, std::string> group_of;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    group_of[table_cells[i]] = groups[i];
  }
  std::map<std::string, int> index;
  std::vector<int> out;
  out.reserve(cells.size());
  for (auto const& c : cells) {
    auto const [it, inserted] = index.emplace(group_of.at(c), int(index.size()));
    out.push_back(it->second);
  }
  return out;
}

DirectionalCore directional_core(Eigen::MatrixXd const& p, Eigen::MatrixXd const& y, double tol,
                                 std::vector<int> const* group) {
  bool const within = group != nullptr && !group->empty();
  Eigen::MatrixXd const ap = within ? anomalies_within(p, *group) : anomalies(p);
  Eigen::MatrixXd const ay = within ? anomalies_within(y, *group) : anomalies(y);
  DirectionalCore r;
  Eigen::Index const n_cells = p.rows();
  r.outcome_cell_anomaly.resize(n_cells);
  r.predictor_cell_anomaly.resize(n_cells);
  for (Eigen::Index i = 0; i < n_cells; ++i) {
    NeumaierSum sp, sy;
    for (Eigen::Index j = 0; j < p.cols(); ++j) {
      sp.add(ap(i, j));
      sy.add(ay(i, j));
    }
    r.predictor_cell_anomaly(i) = sp.value() / double(p.cols());
    r.outcome_cell_anomaly(i) = sy.value() / double(p.cols());
  }
  for (Eigen::Index i = 0; i < n_cells; ++i) {
    double const mp = r.predictor_cell_anomaly(i), my = r.outcome_cell_anomaly(i);
    if (std::abs(mp) <= tol || std::abs(my) <= tol) {
      continue;
    }
    ++r.n_directional;
    if ((mp > 0) == (my > 0)) {
      ++r.n_sign_agree;
    }
  }
  // Anomaly fields indistinguishable from rounding noise carry no direction: no correlation.
  bool const p_flat = ap.cwiseAbs().maxCoeff() <= tol;
  bool const y_flat = ay.cwiseAbs().maxCoeff() <= tol;
  r.predictor_flat = p_flat;
  r.outcome_flat = y_flat;
  if (!p_flat && !y_flat) {
    Eigen::Map<Eigen::VectorXd const> vp(ap.data(), ap.size()), vy(ay.data(), ay.size());
    r.anomaly_correlation = correlation(vp, vy, /*centre=*/false);
    r.cell_anomaly_correlation = correlation(r.predictor_cell_anomaly, r.outcome_cell_anomaly, /*centre=*/true);
  }
  return r;
}

}  // namespace detail

DirectionalSpecificity directional_specificity(CellTable const& predictor, CellTable const& outcome,
                                               DirectionalOptions const& options) {
  auto complete = complete_tables({&predictor, &outcome}, {"predictor", "outcome"}, options.missing_policy,
                                  "directional_specificity");
  auto const& p = complete.tables[0].values;
  auto const& y = complete.tables[1].values;
  if (p.rows() < 2) {
    throw StatsError("directional_specificity: needs at least 2 cells to define anomalies, got " +
                     std::to_string(p.rows()));
  }
  if (!(options.zero_tolerance >= 0) || !(options.alpha > 0 && options.alpha < 1)) {
    throw StatsError("directional_specificity: need zero_tolerance >= 0 and 0 < alpha < 1, got " +
                     value_text(options.zero_tolerance) + ", " + value_text(options.alpha));
  }
  DirectionalSpecificity r;
  r.cells = complete.tables[0].cells;
  r.dropped_cells = std::move(complete.dropped_cells);
  r.dropped_steps = std::move(complete.dropped_steps);
  r.missing_policy = options.missing_policy;
  r.alpha = options.alpha;
  double const scale = std::max(p.cwiseAbs().maxCoeff(), y.cwiseAbs().maxCoeff());
  std::vector<int> group;
  if (!options.groups.empty()) {
    group = detail::group_indices(predictor.cells, options.groups, r.cells);
    r.run_level = true;
  }
  auto core = detail::directional_core(p, y, options.zero_tolerance * scale, &group);
  r.predictor_field_zero = core.predictor_flat;
  r.predictor_cell_anomaly = std::move(core.predictor_cell_anomaly);
  r.outcome_cell_anomaly = std::move(core.outcome_cell_anomaly);
  r.n_directional = core.n_directional;
  r.n_sign_agree = core.n_sign_agree;
  r.anomaly_correlation = core.anomaly_correlation;
  r.cell_anomaly_correlation = core.cell_anomaly_correlation;
  if (r.n_directional > 0) {
    r.sign_agreement_rate = double(r.n_sign_agree) / double(r.n_directional);
  }
  r.binomial_p_value = sign_test_p_value(r.n_sign_agree, r.n_directional);
  r.significant = r.n_directional > 0 && r.binomial_p_value < options.alpha;
  return r;
}

}  // namespace wbaudit::stats
