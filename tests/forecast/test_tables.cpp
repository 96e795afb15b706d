// Outcome and predictor tables from in-memory traces: values by hand, grid choice, labels of privileged and
// post-outcome predictors, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "forecast/error.hpp"
#include "forecast/source.hpp"
#include "forecast/tables.hpp"

namespace wbaudit::forecast {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Steps = std::vector<std::int64_t>;

// A reference recorded at steps 0 and 20 (so step 10 of the grid is interpolated), two groups, e4m3 projected.
std::shared_ptr<sim::Trace> reference(double scale) {
  auto t = std::make_shared<sim::Trace>();
  t->mode = "reference";
  t->format = "fp32";
  t->recorded_steps = {0, 20};
  for (const char* name : {"layer1.weight", "layer2.weight"}) {
    sim::GroupTrace g;
    g.name = name;
    g.nonzero = {10, 10};
    g.zero_weight = {0, 0};
    g.ratio_histogram.assign(2 * 512, 0);
    g.ratio_histogram[(4 + 16) * 8] = 10;        // step 0: all at d in [4, 4.125)
    g.ratio_histogram[512 + (2 + 16) * 8] = 10;  // step 20: all at d in [2, 2.125)
    g.projected["e4m3"] = {{0, 0}, {0.1 * scale, 0.5 * scale}, {}};
    t->groups.push_back(g);
  }
  t->groups[1].projected["e4m3"].fraction = {0.2 * scale, 0.6 * scale};
  return t;
}

std::vector<EvaluationCell> cells() {
  const auto ref = reference(1.0);
  std::vector<EvaluationCell> out;
  const std::vector<std::vector<double>> y{{0.1, 0.2, 0.3}, {0.3, 0.4, 0.5}, {0.5, 0.6, kNaN}, {0.1, 0.1, 0.1}};
  int i = 0;
  for (const char* run : {"r1", "r2"}) {
    for (const char* group : {"layer1.weight", "layer2.weight"}) {
      EvaluationCell c;
      c.run_id = run;
      c.group = group;
      c.format = "e4m3";
      c.template_class = std::string("e4m3/") + group;
      c.outcome = {{0, 10, 20}, y[i++]};
      c.reference = ref;
      c.man_bits = 3;
      out.push_back(c);
    }
  }
  return out;
}

TableOptions no_template() {
  TableOptions o;
  o.template_mean = false;
  return o;
}

TEST(Tables, OutcomeSourceAndCommonTimeByHand) {
  const auto t = build_evaluation_tables(cells(), {}, no_template());
  EXPECT_EQ(t.outcome.cells,
            (std::vector<std::string>{"r1/layer1.weight", "r1/layer2.weight", "r2/layer1.weight", "r2/layer2.weight"}));
  EXPECT_EQ(t.outcome.steps, (Steps{0, 10, 20}));
  EXPECT_EQ(t.outcome.values(1, 2), 0.5);
  EXPECT_TRUE(std::isnan(t.outcome.values(2, 2)));

  const auto& src = t.predictor("source");
  EXPECT_FALSE(src.privileged);
  EXPECT_FALSE(src.post_outcome);
  // layer1: 0.1 -> 0.5 over steps 0..20, so 0.3 at 10; layer2: 0.2 -> 0.6, 0.4 at 10. Both runs share the reference.
  EXPECT_DOUBLE_EQ(src.table.values(0, 1), 0.3);
  EXPECT_DOUBLE_EQ(src.table.values(1, 1), 0.4);
  EXPECT_EQ(src.table.values(3, 2), 0.6);
  EXPECT_EQ(src.table.values(2, 0), 0.1);

  const auto& ct = t.predictor("common-time");
  EXPECT_TRUE(ct.post_outcome);
  // Step 0: (0.1+0.3+0.5+0.1)/4; step 20: the NaN is left out, (0.3+0.5+0.1)/3.
  for (Eigen::Index r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(ct.table.values(r, 0), 0.25);
    EXPECT_DOUBLE_EQ(ct.table.values(r, 2), 0.9 / 3);
  }
  EXPECT_THROW(t.predictor("matched-reference"), ForecastError);  // none given: not built
  EXPECT_THROW(t.predictor("analytic-grid"), ForecastError);      // not requested
}

TEST(Tables, MatchedReferenceIsLabelledPrivileged) {
  auto cs = cells();
  for (auto& c : cs) c.matched_reference = reference(1.5);
  const auto t = build_evaluation_tables(cs, {}, no_template());
  const auto& m = t.predictor("matched-reference");
  EXPECT_TRUE(m.privileged);
  EXPECT_DOUBLE_EQ(m.table.values(0, 0), 0.15);
  EXPECT_DOUBLE_EQ(m.table.values(3, 2), 0.9);
  cs[2].matched_reference = nullptr;  // some cells only: refused
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
}

TEST(Tables, AnalyticGridPredictor) {
  auto o = no_template();
  o.analytic_grid = true;
  const auto t = build_evaluation_tables(cells(), {}, o);
  const auto& a = t.predictor("analytic-grid");
  // M = 3: d > 4 erased. Step 0: all d in [4, 4.125) -> 1; step 20: all d in [2, 2.125) -> 0; step 10: 0.5.
  EXPECT_EQ(a.table.values(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(a.table.values(0, 1), 0.5);
  EXPECT_EQ(a.table.values(0, 2), 0.0);
  // M from the format name when not given: e4m3 has M = 3, the same table.
  auto cs = cells();
  for (auto& c : cs) c.man_bits = -1;
  const auto by_name = build_evaluation_tables(cs, {}, o);
  EXPECT_EQ(by_name.predictor("analytic-grid").table.values, a.table.values);
  // M = 4 (d > 5): nothing erased at step 0.
  cs[0].man_bits = 4;
  EXPECT_EQ(build_evaluation_tables(cs, {}, o).predictor("analytic-grid").table.values(0, 0), 0.0);
  cs[0].man_bits = -1;
  cs[0].format = "int4";  // integer formats are outside the grid
  EXPECT_THROW(build_evaluation_tables(cs, {}, o), ForecastError);
  cs[0].format = "e9m9";
  EXPECT_THROW(build_evaluation_tables(cs, {}, o), ForecastError);
}

TEST(Tables, GridIsTheCommonStepsOrDeclared) {
  auto cs = cells();
  cs[0].outcome = {{0, 5, 10, 20}, {0.1, 0.15, 0.2, 0.3}};
  auto t = build_evaluation_tables(cs, {}, no_template());
  EXPECT_EQ(t.outcome.steps, (Steps{0, 10, 20}));
  auto o = no_template();
  o.grid = {5, 15};
  t = build_evaluation_tables(cells(), {}, o);
  EXPECT_DOUBLE_EQ(t.outcome.values(0, 0), 0.15);
  EXPECT_DOUBLE_EQ(t.predictor("source").table.values(0, 1), 0.4);  // 0.1 + 0.75 * 0.4
  o.grid = {0, 25};  // beyond every recorded series: refused, or NaN when declared
  EXPECT_THROW(build_evaluation_tables(cells(), {}, o), ForecastError);
  o.out_of_range = OutOfRange::missing;
  t = build_evaluation_tables(cells(), {}, o);
  EXPECT_TRUE(std::isnan(t.outcome.values(0, 1)));
  EXPECT_TRUE(std::isnan(t.predictor("source").table.values(0, 1)));
}

TEST(Tables, TemplateFromDeclaredHistory) {
  // Past runs p1, p2 of class e4m3/layer1.weight only.
  const std::vector<HistoryRun> history{{"p1", "e4m3/layer1.weight", {{0, 10, 20}, {0.2, 0.4, 0.6}}},
                                        {"p2", "e4m3/layer1.weight", {{0, 10, 20}, {0.4, 0.6, 0.8}}}};
  TableOptions o;
  EXPECT_THROW(build_evaluation_tables(cells(), history, o), ForecastError);  // layer2 has no history
  o.missing_class = MissingClass::missing;
  const auto t = build_evaluation_tables(cells(), history, o);
  const auto& tp = t.predictor("template");
  EXPECT_DOUBLE_EQ(tp.table.values(0, 1), 0.5);
  EXPECT_DOUBLE_EQ(tp.table.values(2, 2), 0.7);
  EXPECT_TRUE(std::isnan(tp.table.values(1, 0)));
  EXPECT_EQ(tp.missing_cells, (std::vector<std::string>{"r1/layer2.weight", "r2/layer2.weight"}));
}

TEST(Tables, BadInputThrows) {
  auto cs = cells();
  cs[1].outcome.values.pop_back();
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
  cs = cells();
  cs[1].group = cs[0].group;  // duplicate cell
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
  cs = cells();
  cs[0].format = "e5m2";  // not projected by the reference
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
  cs = cells();
  cs[0].reference = nullptr;
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
  cs = cells();
  auto target = std::make_shared<sim::Trace>(*cs[0].reference);
  target->mode = "target";
  cs[0].reference = target;
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
  cs = cells();
  cs[0].outcome.values[0] = std::numeric_limits<double>::infinity();
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
  EXPECT_THROW(build_evaluation_tables({}, {}, no_template()), ForecastError);
  cs = cells();
  cs[0].run_id.clear();
  EXPECT_THROW(build_evaluation_tables(cs, {}, no_template()), ForecastError);
}

TEST(Tables, SourceSeriesAndGroupLookup) {
  const auto ref = reference(1.0);
  const auto s = projected_series(*ref, "layer2.weight", "e4m3");
  EXPECT_EQ(s.steps, (Steps{0, 20}));
  EXPECT_EQ(s.values, (std::vector<double>{0.2, 0.6}));
  EXPECT_THROW(projected_series(*ref, "layer3.weight", "e4m3"), ForecastError);
  EXPECT_THROW(find_group(*ref, "nope"), ForecastError);
  EXPECT_THROW(measured_series(*ref, "layer1.weight"), ForecastError);  // a reference has no measured outcome

  sim::Trace target;
  target.mode = "target";
  target.format = "e4m3";
  target.recorded_steps = {0, 5};
  sim::GroupTrace g;
  g.name = "layer1.weight";
  g.erased_fraction = {0.25, kNaN};
  target.groups.push_back(g);
  const auto m = measured_series(target, "layer1.weight");
  EXPECT_EQ(m.steps, (Steps{0, 5}));
  EXPECT_EQ(m.values[0], 0.25);
  EXPECT_TRUE(std::isnan(m.values[1]));
  EXPECT_THROW(projected_series(target, "layer1.weight", "e4m3"), ForecastError);
  target.groups[0].erased_fraction.pop_back();
  EXPECT_THROW(measured_series(target, "layer1.weight"), ForecastError);
}

TEST(Tables, CommonTimeTable) {
  stats::CellTable t;
  t.cells = {"a", "b"};
  t.steps = {0, 1};
  t.values.resize(2, 2);
  t.values << 0.2, kNaN, 0.4, kNaN;
  const auto ct = common_time_table(t);
  EXPECT_DOUBLE_EQ(ct.values(0, 0), 0.3);
  EXPECT_DOUBLE_EQ(ct.values(1, 0), 0.3);
  EXPECT_TRUE(std::isnan(ct.values(0, 1)));
  t.values(0, 0) = std::numeric_limits<double>::infinity();
  EXPECT_THROW(common_time_table(t), ForecastError);
  t.values.resize(3, 2);
  EXPECT_THROW(common_time_table(t), ForecastError);
}

}  // namespace
}  // namespace wbaudit::forecast
