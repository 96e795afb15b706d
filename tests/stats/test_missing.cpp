#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "stats/error.hpp"
#include "stats/metrics.hpp"
#include "stats/missing.hpp"
#include "table_fixtures.hpp"

using namespace wbaudit::stats;
using wbaudit::stats::testing::make_table;

namespace {
double const kNaN = std::numeric_limits<double>::quiet_NaN();
double const kInf = std::numeric_limits<double>::infinity();

std::string error_of(auto&& f) {
  try {
    f();
  } catch (StatsError const& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Missing, NaNIsAnErrorByDefaultNamingCellAndStep) {
  auto y = make_table({{1, 2, 3}, {4, 5, 6}});
  auto f = y;
  f.values(1, 2) = kNaN;
  auto const msg = error_of([&] { evaluate_metrics(f, y); });
  EXPECT_NE(msg.find("forecast is missing (NaN) at cell \"c1\", step 30"), std::string::npos) << msg;
}

TEST(Missing, InfIsAlwaysAnError) {
  auto y = make_table({{1, 2}, {3, 4}});
  auto f = y;
  y.values(0, 1) = -kInf;
  for (auto policy :
       {MissingPolicy::error, MissingPolicy::drop_incomplete_cells, MissingPolicy::drop_incomplete_steps}) {
    auto const msg = error_of([&] { evaluate_metrics(f, y, policy); });
    EXPECT_NE(msg.find("outcome is -inf at cell \"c0\", step 20"), std::string::npos) << msg;
  }
}

TEST(Missing, DropIncompleteCellsIsDeclaredAndReported) {
  auto y = make_table({{0, 0}, {0, 0}, {0, 0}});
  auto f = make_table({{1, 1}, {kNaN, 100}, {3, 3}});
  auto const r = evaluate_metrics(f, y, MissingPolicy::drop_incomplete_cells);
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_EQ(r.cells[0].cell, "c0");
  EXPECT_EQ(r.cells[1].cell, "c2");
  ASSERT_EQ(r.dropped_cells, std::vector<std::string>{"c1"});
  EXPECT_TRUE(r.dropped_steps.empty());
  EXPECT_DOUBLE_EQ(r.rmse_macro, 2.0);  // (1 + 3) / 2
}

TEST(Missing, DropIncompleteStepsIsDeclaredAndReported) {
  auto y = make_table({{0, 0, 0}, {0, 0, 0}});
  auto f = make_table({{1, kNaN, 1}, {2, 9, 2}});
  auto const r = evaluate_metrics(f, y, MissingPolicy::drop_incomplete_steps);
  EXPECT_EQ(r.dropped_steps, std::vector<std::int64_t>{20});
  EXPECT_TRUE(r.dropped_cells.empty());
  EXPECT_DOUBLE_EQ(r.rmse_macro, 1.5);
}

TEST(Missing, NothingLeftIsAnError) {
  auto y = make_table({{0, 0}, {0, 0}});
  auto f = make_table({{kNaN, 0}, {0, kNaN}});
  auto const msg = error_of([&] { evaluate_metrics(f, y, MissingPolicy::drop_incomplete_cells); });
  EXPECT_NE(msg.find("no complete cell left"), std::string::npos) << msg;
}

TEST(Missing, MismatchedCellsAndStepsAreErrors) {
  auto y = make_table({{0, 0}, {0, 0}});
  auto f = y;
  f.cells[1] = "other";
  auto msg = error_of([&] { evaluate_metrics(f, y); });
  EXPECT_NE(msg.find("cell grids differ at row 1 (\"other\" vs \"c1\")"), std::string::npos) << msg;
  f = y;
  f.steps[1] = 25;
  msg = error_of([&] { evaluate_metrics(f, y); });
  EXPECT_NE(msg.find("time grids differ at column 1 (step 25 vs 20)"), std::string::npos) << msg;
  f = make_table({{0, 0, 0}, {0, 0, 0}});
  msg = error_of([&] { evaluate_metrics(f, y); });
  EXPECT_NE(msg.find("different step counts (3 vs 2)"), std::string::npos) << msg;
  f = make_table({{0, 0}});
  msg = error_of([&] { evaluate_metrics(f, y); });
  EXPECT_NE(msg.find("different cell counts (1 vs 2)"), std::string::npos) << msg;
}

TEST(Missing, EmptyAndMalformedTablesAreErrors) {
  CellTable empty;
  auto y = make_table({{0, 0}});
  auto msg = error_of([&] { evaluate_metrics(empty, y); });
  EXPECT_NE(msg.find("empty table"), std::string::npos) << msg;
  auto bad = make_table({{0, 0}, {1, 1}});
  bad.steps = {20, 10};
  msg = error_of([&] { check_table_shape(bad, "t"); });
  EXPECT_NE(msg.find("steps not strictly increasing at step 10"), std::string::npos) << msg;
  bad = make_table({{0, 0}, {1, 1}});
  bad.cells = {"a", "a"};
  msg = error_of([&] { check_table_shape(bad, "t"); });
  EXPECT_NE(msg.find("cell label \"a\" appears twice"), std::string::npos) << msg;
  bad = make_table({{0, 0}, {1, 1}});
  bad.cells.pop_back();
  msg = error_of([&] { check_table_shape(bad, "t"); });
  EXPECT_NE(msg.find("1 cell labels"), std::string::npos) << msg;
}

TEST(Missing, PolicyNames) {
  EXPECT_EQ(missing_policy_from_name("drop_incomplete_cells"), MissingPolicy::drop_incomplete_cells);
  EXPECT_EQ(to_string(MissingPolicy::drop_incomplete_steps), "drop_incomplete_steps");
  auto const msg = error_of([&] { missing_policy_from_name("ignore"); });
  EXPECT_NE(msg.find("unknown missing-value policy \"ignore\" (known: error, drop_incomplete_cells"), std::string::npos)
      << msg;
}
