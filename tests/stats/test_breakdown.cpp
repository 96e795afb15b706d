// breakdown_by_factor against a table computed by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "stats/breakdown.hpp"
#include "stats/error.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

TEST(Breakdown, RmseMacroAndSkillPerLevelMatchAHandComputedTable) {
  const auto Y = make_table({{0, 0}, {0, 0}, {0, 0}, {0, 0}});
  // Per-row MSE over the defined steps: P: 1, 4, 4.5, 16 (row 3's first step is missing); B: 4, 1, 9, 16.
  const auto P = make_table({{1, 1}, {2, 2}, {0, 3}, {NAN, 4}});
  const auto B = make_table({{2, 2}, {1, 1}, {3, 3}, {4, 4}});
  const std::vector<std::map<std::string, std::string>> factors = {
      {{"format", "bf16"}, {"group", "g1"}, {"lr", "0.1"}},
      {{"format", "bf16"}, {"group", "g2"}, {"lr", "0.1"}},
      {{"format", "e4m3"}, {"group", "g1"}, {"lr", "0.1"}},
      {{"format", "e4m3"}, {"group", "g2"}, {"lr", "0.1"}}};
  const auto rows = breakdown_by_factor(factors, Y, {{"P", &P}, {"B", &B}}, {{"B", &B}});
  // "lr" has one level: left out. format and group: 2 predictors x 2 levels each.
  ASSERT_EQ(rows.size(), 8u);
  struct Expected {
    const char *factor, *level, *predictor;
    double rmse_macro;
    double skill;  // vs B; NaN: no skill entry (B against itself)
  };
  const Expected expected[] = {{"format", "bf16", "P", (1.0 + 2.0) / 2, 1 - (1.0 + 4.0) / (4.0 + 1.0)},
                               {"format", "e4m3", "P", (std::sqrt(4.5) + 4.0) / 2, 1 - (4.5 + 16.0) / (9.0 + 16.0)},
                               {"format", "bf16", "B", (2.0 + 1.0) / 2, NAN},
                               {"format", "e4m3", "B", (3.0 + 4.0) / 2, NAN},
                               {"group", "g1", "P", (1.0 + std::sqrt(4.5)) / 2, 1 - (1.0 + 4.5) / (4.0 + 9.0)},
                               {"group", "g2", "P", (2.0 + 4.0) / 2, 1 - (4.0 + 16.0) / (1.0 + 16.0)},
                               {"group", "g1", "B", (2.0 + 3.0) / 2, NAN},
                               {"group", "g2", "B", (1.0 + 4.0) / 2, NAN}};
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const auto& r = rows[k];
    const auto& e = expected[k];
    EXPECT_EQ(r.factor, e.factor) << k;
    EXPECT_EQ(r.level, e.level) << k;
    EXPECT_EQ(r.predictor, e.predictor) << k;
    EXPECT_EQ(r.cells, 2) << k;
    EXPECT_NEAR(r.rmse_macro, e.rmse_macro, 1e-15) << k;
    if (std::isnan(e.skill)) {
      EXPECT_TRUE(r.skill.empty()) << k;
    } else {
      ASSERT_EQ(r.skill.count("B"), 1u) << k;
      EXPECT_NEAR(r.skill.at("B"), e.skill, 1e-15) << k;
    }
  }
}

TEST(Breakdown, RowsWithoutTheFactorAreInNoLevel) {
  const auto Y = make_table({{0}, {0}, {0}});
  const auto P = make_table({{1}, {2}, {3}});
  const std::vector<std::map<std::string, std::string>> factors = {{{"seed", "1"}}, {{"seed", "2"}}, {}};
  const auto rows = breakdown_by_factor(factors, Y, {{"P", &P}}, {});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].level, "1");
  EXPECT_EQ(rows[0].cells, 1);
  EXPECT_DOUBLE_EQ(rows[0].rmse_macro, 1.0);
  EXPECT_EQ(rows[1].level, "2");
  EXPECT_DOUBLE_EQ(rows[1].rmse_macro, 2.0);
}

TEST(Breakdown, MismatchedInputsAreRefused) {
  const auto Y = make_table({{0}, {0}});
  const auto P = make_table({{1}});
  EXPECT_THROW(breakdown_by_factor({{}, {}}, Y, {{"P", &P}}, {}), StatsError);
  EXPECT_THROW(breakdown_by_factor({{}}, Y, {}, {}), StatsError);
}

// Issue 31: numeric levels in numeric order (8, 16, 32, 64, not "16" < "32" < "64" < "8"); names stay in name order.
TEST(Breakdown, NumericLevelsAreInNumericOrder) {
  const auto Y = make_table({{0}, {0}, {0}, {0}});
  const auto P = make_table({{1}, {2}, {3}, {4}});
  const std::vector<std::map<std::string, std::string>> numeric = {
      {{"model.hidden", "64"}}, {{"model.hidden", "8"}}, {{"model.hidden", "16"}}, {{"model.hidden", "32"}}};
  const auto rows = breakdown_by_factor(numeric, Y, {{"P", &P}}, {});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].level, "8");
  EXPECT_EQ(rows[1].level, "16");
  EXPECT_EQ(rows[2].level, "32");
  EXPECT_EQ(rows[3].level, "64");
  EXPECT_DOUBLE_EQ(rows[0].rmse_macro, 2.0);  // the cell with hidden = 8 has P = 2
  const std::vector<std::map<std::string, std::string>> names = {
      {{"format", "e4m3"}}, {{"format", "bf16"}}, {{"format", "8x"}}, {{"format", "e2m1"}}};
  const auto named = breakdown_by_factor(names, Y, {{"P", &P}}, {});
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].level, "8x");
  EXPECT_EQ(named[1].level, "bf16");
  EXPECT_EQ(named[3].level, "e4m3");
}
