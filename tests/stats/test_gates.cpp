#include <gtest/gtest.h>

#include "stats/error.hpp"
#include "stats/gates.hpp"

using namespace wbaudit::stats;

namespace {
Interval interval(double lower, double upper) {
  Interval i;
  i.estimate = (lower + upper) / 2;
  i.lower = lower;
  i.upper = upper;
  return i;
}
}  // namespace

TEST(Gates, ParseDeclaredThresholds) {
  auto const g = parse_gate("rmse_macro <= 0.01", "accuracy");
  EXPECT_EQ(g.name, "accuracy");
  EXPECT_EQ(g.statistic, "rmse_macro");
  EXPECT_EQ(g.direction, GateDirection::at_most);
  EXPECT_EQ(g.threshold, 0.01);
  auto const s = parse_gate("skill_vs_template>=0");
  EXPECT_EQ(s.statistic, "skill_vs_template");
  EXPECT_EQ(s.direction, GateDirection::at_least);
  EXPECT_EQ(s.threshold, 0.0);
  EXPECT_THROW(parse_gate("rmse_macro < 0.01"), StatsError);
  EXPECT_THROW(parse_gate("rmse_macro <= abc"), StatsError);
  EXPECT_THROW(parse_gate("rmse_macro <= 0.01 >= 2"), StatsError);
}

TEST(Gates, UnknownStatisticListsTheKnownOnes) {
  try {
    parse_gate("rmse <= 0.01");
    FAIL() << "expected StatsError";
  } catch (StatsError const& e) {
    std::string const msg = e.what();
    EXPECT_NE(msg.find("unknown statistic \"rmse\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("rmse_macro"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rmse_pooled"), std::string::npos) << msg;
    EXPECT_NE(msg.find("skill_vs_<baseline>"), std::string::npos) << msg;
  }
  EXPECT_FALSE(is_known_gate_statistic("skill_vs_"));
  EXPECT_TRUE(is_known_gate_statistic("skill_vs_common_time"));
}

TEST(Gates, AllThreeVerdictsAtMost) {
  auto const g = parse_gate("rmse_macro <= 0.01");
  EXPECT_EQ(evaluate_gate(g, interval(0.002, 0.009)).verdict, Verdict::pass);
  EXPECT_EQ(evaluate_gate(g, interval(0.002, 0.01)).verdict, Verdict::pass);  // boundary counts as the good side
  EXPECT_EQ(evaluate_gate(g, interval(0.011, 0.02)).verdict, Verdict::fail);
  auto const straddle = evaluate_gate(g, interval(0.005, 0.015));
  EXPECT_EQ(straddle.verdict, Verdict::inconclusive);
  ASSERT_EQ(straddle.reasons.size(), 1u);
  EXPECT_NE(straddle.reasons[0].find("straddles"), std::string::npos);
}

TEST(Gates, AllThreeVerdictsAtLeast) {
  auto const g = parse_gate("skill_vs_template >= 0");
  EXPECT_EQ(evaluate_gate(g, interval(0.1, 0.4)).verdict, Verdict::pass);
  EXPECT_EQ(evaluate_gate(g, interval(-0.4, -0.1)).verdict, Verdict::fail);
  EXPECT_EQ(evaluate_gate(g, interval(-0.1, 0.1)).verdict, Verdict::inconclusive);
  EXPECT_EQ(to_string(Verdict::inconclusive), "inconclusive");
}

TEST(Gates, RequiredCellsMissingOrNonCanonicalAreInconclusive) {
  auto const g = parse_gate("rmse_macro <= 0.01", "accuracy", {"cellA", "cellB", "cellC"});
  std::vector<CellStatus> cells = {{"cellA", true, true, ""}, {"cellB", true, true, ""}, {"cellC", true, true, ""}};
  EXPECT_EQ(evaluate_gate(g, interval(0.001, 0.002), cells).verdict, Verdict::pass);
  cells[1].canonical = false;
  cells[1].reason = "trace hash does not match the manifest";
  auto r = evaluate_gate(g, interval(0.001, 0.002), cells);
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_NE(r.reasons[0].find("\"cellB\" is not canonical: trace hash does not match"), std::string::npos)
      << r.reasons[0];
  cells.pop_back();                                 // cellC not reported at all
  r = evaluate_gate(g, interval(0.5, 0.6), cells);  // even a clear fail becomes inconclusive
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  EXPECT_EQ(r.reasons.size(), 2u);
  EXPECT_NE(r.reasons[1].find("\"cellC\" is missing"), std::string::npos) << r.reasons[1];
}

TEST(Gates, LookupByName) {
  std::map<std::string, Interval> const computed = {{"rmse_macro", interval(0.0, 0.005)},
                                                    {"skill_vs_template", interval(0.2, 0.3)}};
  EXPECT_EQ(evaluate_gate(parse_gate("skill_vs_template >= 0.1"), computed).verdict, Verdict::pass);
  try {
    evaluate_gate(parse_gate("rmse_pooled <= 0.01"), computed);
    FAIL() << "expected StatsError";
  } catch (StatsError const& e) {
    EXPECT_NE(std::string(e.what()).find("computed: rmse_macro, skill_vs_template"), std::string::npos) << e.what();
  }
  EXPECT_THROW(evaluate_gate(parse_gate("mae <= 1"), interval(2, 1)), StatsError);  // lower > upper
}
