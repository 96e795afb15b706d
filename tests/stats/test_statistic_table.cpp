// The statistic table: one row per statistic, names found as gates and reports spell them.
#include <gtest/gtest.h>

#include <set>

#include "stats/gates.hpp"
#include "stats/statistic_table.hpp"

using namespace wbaudit::stats;

TEST(StatisticTable, NamesAreUniqueAndEveryRowHasADefinition) {
  std::set<std::string_view> names;
  std::set<int> summary_columns;
  for (const auto& row : statistic_table()) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    EXPECT_FALSE(row.definition.empty()) << row.name;
    if (row.summary_column != 0) {
      EXPECT_TRUE(summary_columns.insert(row.summary_column).second) << row.name;
    }
  }
  EXPECT_EQ(summary_columns, (std::set<int>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(StatisticTable, SkillIsAFamilyFoundByItsMembers) {
  EXPECT_EQ(skill_statistic("common-time"), "skill_vs_common_time");
  EXPECT_EQ(skill_statistic("template"), "skill_vs_template");
  EXPECT_EQ(skill_baseline("skill_vs_common_time"), std::optional<std::string>("common-time"));
  EXPECT_EQ(skill_baseline("skill_vs_"), std::nullopt);
  EXPECT_EQ(skill_baseline("skill_vs_Template"), std::nullopt);
  EXPECT_EQ(skill_baseline("rmse_macro"), std::nullopt);
  EXPECT_EQ(statistic_definition("skill_vs_common_time"), "1 - sum_c MSE_P / sum_c MSE_common-time");
  EXPECT_EQ(statistic_definition("skill_vs_template"), "1 - sum_c MSE_P / sum_c MSE_template");
  EXPECT_EQ(find_statistic("skill_vs_<baseline>"), nullptr);  // the pattern is no statistic
  EXPECT_EQ(statistic_definition("rmse"), "");
}

TEST(StatisticTable, GatesAcceptExactlyTheRowsMarkedForGates) {
  for (const auto& row : statistic_table()) {
    const std::string name = row.name == "skill_vs_<baseline>" ? "skill_vs_template" : std::string(row.name);
    EXPECT_EQ(is_known_gate_statistic(name), row.gate) << name;
  }
  EXPECT_FALSE(is_known_gate_statistic("binomial_p_value"));  // an exact test's p-value: no interval to judge
  EXPECT_FALSE(is_known_gate_statistic("rmse"));
  EXPECT_EQ(statistic_names(StatisticOf::outcome),
            (std::vector<std::string>{"share_time", "share_cell", "share_residual"}));
  EXPECT_EQ(statistic_names(StatisticOf::paired),
            (std::vector<std::string>{"mean_difference", "mean_ratio", "ratio_of_means", "recovery"}));
}
