#include "stats/statistic_table.hpp"

#include <algorithm>

namespace wbaudit::stats {
namespace {

constexpr std::string_view kSkillPrefix = "skill_vs_";
constexpr std::string_view kBaselinePlaceholder = "<baseline>";

bool is_family(const StatisticDefinition& row) {
  return row.name.ends_with(kBaselinePlaceholder);
}

}  // namespace

const std::vector<StatisticDefinition>& statistic_table() {
  using enum StatisticOf;
  constexpr auto test = StatisticShown::test;
  constexpr auto shown = StatisticShown::interval;
  // name, definition, of, gate, shown, directional, summary column (docs/statistics.md, docs/science.md section 2).
  static const std::vector<StatisticDefinition> table = {
      {"bias", "mean over cells of mean_t e (forecast - outcome)", predictor, true, shown, false, 3},
      {"mae", "mean over cells of mean_t |e|", predictor, true, shown, false, 4},
      {"rmse_macro", "mean over cells of rmse_cell", predictor, true, shown, false, 1},
      {"rmse_pooled", "sqrt(mean over cells of mean_t e^2)", predictor, true, shown, false, 2},
      {"skill_vs_<baseline>", "1 - sum_c MSE_P / sum_c MSE_<baseline>", predictor, true, shown, false, 5},
      {"sign_agreement_rate",
       "across cells (groups and runs together): share of directional cells whose mean anomaly (value - across-cell "
       "mean at t) has the outcome's sign",
       predictor, true, shown, true, 6},
      {"binomial_p_value", "across cells: P(X >= k), X ~ Binomial(n, 1/2), one-sided exact", predictor, false, test,
       true, 0},
      {"anomaly_correlation",
       "across cells (groups and runs together): correlation over cells and steps of anomalies (value - across-cell "
       "mean at t)",
       predictor, true, shown, true, 7},
      {"cell_anomaly_correlation", "across cells: correlation over cells of mean anomalies", predictor, true, shown,
       true, 0},
      {"run_sign_agreement_rate",
       "run level: share of directional cells whose mean run anomaly (value - mean over the runs of the cell's group "
       "at t) has the outcome's sign",
       predictor, true, shown, true, 0, true},
      {"run_binomial_p_value", "run level: P(X >= k), X ~ Binomial(n, 1/2), one-sided exact", predictor, false, test,
       true, 0, true},
      {"run_anomaly_correlation",
       "run level: correlation over cells and steps of run anomalies (value - mean over the runs of the cell's group "
       "at t)",
       predictor, true, shown, true, 8, true},
      {"run_cell_anomaly_correlation", "run level: correlation over cells of mean run anomalies", predictor, true,
       shown, true, 0, true},
      {"error_share_time", "SS_time / SS_total of the forecast error table", predictor, true, shown, false, 0},
      {"error_share_cell", "SS_cell / SS_total of the forecast error table", predictor, true, shown, false, 0},
      {"error_share_residual", "SS_residual / SS_total of the forecast error table", predictor, true, shown, false, 0},
      {"share_time", "SS_time / SS_total of y = mu + a_t + b_c + e (outcome)", outcome, true, shown, false, 0},
      {"share_cell", "SS_cell / SS_total (outcome)", outcome, true, shown, false, 0},
      {"share_residual", "SS_residual / SS_total (outcome)", outcome, true, shown, false, 0},
      {"mean_difference", "(1/n) sum_i (a_i - b_i) over units paired i", paired, true, shown, false, 0},
      {"mean_ratio", "(1/n) sum_i a_i / b_i over units paired i", paired, true, shown, false, 0},
      {"ratio_of_means", "(sum_i a_i) / (sum_i b_i) over units paired i", paired, true, shown, false, 0},
      {"recovery", "(L_N - L_P) / (L_N - L_R) on validation loss (nearest N, policy P, reference R)", paired, true,
       shown, false, 0},
  };
  return table;
}

std::optional<std::string> skill_baseline(std::string_view statistic) {
  if (!statistic.starts_with(kSkillPrefix) || statistic.size() == kSkillPrefix.size()) {
    return std::nullopt;
  }
  std::string baseline(statistic.substr(kSkillPrefix.size()));
  for (char& c : baseline) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return std::nullopt;
    }
    if (c == '_') {
      c = '-';
    }
  }
  return baseline;
}

std::string skill_statistic(std::string baseline) {
  std::replace(baseline.begin(), baseline.end(), '-', '_');
  return std::string(kSkillPrefix) + baseline;
}

const StatisticDefinition* find_statistic(std::string_view name) {
  const bool skill = skill_baseline(name).has_value();
  for (const auto& row : statistic_table()) {
    // A family is found by its members only ("skill_vs_template"), never by its pattern name.
    if (is_family(row) ? skill && row.name.starts_with(kSkillPrefix) : row.name == name) {
      return &row;
    }
  }
  return nullptr;
}

std::string statistic_definition(std::string_view name) {
  const StatisticDefinition* row = find_statistic(name);
  if (row == nullptr) {
    return "";
  }
  std::string text(row->definition);
  if (is_family(*row)) {
    const auto at = text.find(kBaselinePlaceholder);
    if (at != std::string::npos) {
      text.replace(at, kBaselinePlaceholder.size(), *skill_baseline(name));
    }
  }
  return text;
}

std::vector<std::string> statistic_names(StatisticOf of, bool gate_only, bool families) {
  std::vector<std::string> names;
  for (const auto& row : statistic_table()) {
    if (row.of != of || (gate_only && !row.gate) || (!families && is_family(row))) {
      continue;
    }
    names.emplace_back(row.name);
  }
  return names;
}

std::vector<std::string> gate_statistic_names() {
  std::vector<std::string> names;
  for (const auto& row : statistic_table()) {
    if (row.gate) {
      names.emplace_back(row.name);
    }
  }
  return names;
}

}  // namespace wbaudit::stats
