// same_values and anomaly_field_is_zero on small tables written out.
#include <gtest/gtest.h>

#include <cmath>

#include "stats/table_predicates.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

TEST(TablePredicates, SameValuesTreatsTwoMissingValuesAsEqual) {
  const auto a = make_table({{1, NAN}, {3, 4}}).values;
  EXPECT_TRUE(same_values(a, make_table({{1, NAN}, {3, 4}}).values));
  EXPECT_FALSE(same_values(a, make_table({{1, 2}, {3, 4}}).values));  // missing on one side only
  EXPECT_FALSE(same_values(a, make_table({{1, NAN}, {3, 5}}).values));
  EXPECT_FALSE(same_values(a, make_table({{1, NAN}}).values));  // another shape
  EXPECT_FALSE(same_values(make_table({{0.0}}).values, make_table({{1e-300}}).values));
  EXPECT_TRUE(same_values(make_table({{0.0}}).values, make_table({{-0.0}}).values));  // equal values
}

TEST(TablePredicates, AnomalyFieldIsZeroWhenEveryStepIsConstantOverCells) {
  EXPECT_TRUE(anomaly_field_is_zero(make_table({{1, 2}, {1, 2}, {1, 2}}).values));
  EXPECT_TRUE(anomaly_field_is_zero(make_table({{1, NAN}, {NAN, 2}, {1, 2}}).values));  // missing ignored
  EXPECT_TRUE(anomaly_field_is_zero(make_table({{NAN, 2}, {NAN, 2}}).values));          // no value at a step
  EXPECT_FALSE(anomaly_field_is_zero(make_table({{1, 2}, {1, 2.5}}).values));
  EXPECT_FALSE(anomaly_field_is_zero(make_table({{1, 2}, {1, 2}, {0, 2}}).values));
  EXPECT_TRUE(anomaly_field_is_zero(Eigen::MatrixXd(0, 3)));
}
