// The historical template: means by hand, leave-run-out, outcome-blindness, classes without history.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "forecast/error.hpp"
#include "forecast/tables.hpp"
#include "forecast/template_predictor.hpp"

namespace wbaudit::forecast {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Steps = std::vector<std::int64_t>;

std::vector<HistoryRun> hand_history() {
  return {
      {"r1", "A", {{0, 10, 20}, {0.1, 0.2, 0.3}}},
      {"r2", "A", {{0, 10, 20}, {0.3, 0.4, 0.5}}},
      {"r3", "B", {{0, 10, 20}, {0.9, 0.9, 0.9}}},
      {"r4", "A", {{0, 20}, {0.5, 0.9}}},  // at step 10: 0.7 by interpolation
  };
}

TEST(Template, MeanOfTheClassLeavingTheScoredRunOut) {
  const Steps grid{0, 10, 20};
  const auto h = hand_history();
  int used = 0;
  // Scored run r1: r2 and r4 remain: (0.3+0.5)/2, (0.4+0.7)/2, (0.5+0.9)/2.
  auto t = template_series(h, "A", "r1", grid, {}, &used);
  EXPECT_EQ(used, 2);
  EXPECT_DOUBLE_EQ(t[0], 0.4);
  EXPECT_DOUBLE_EQ(t[1], 0.55);
  EXPECT_DOUBLE_EQ(t[2], 0.7);
  // A run outside the history: all three A runs.
  t = template_series(h, "A", "r9", grid, {}, &used);
  EXPECT_EQ(used, 3);
  EXPECT_NEAR(t[0], 0.9 / 3, 1e-15);
  EXPECT_NEAR(t[1], 1.3 / 3, 1e-15);
  EXPECT_NEAR(t[2], 1.7 / 3, 1e-15);
}

TEST(Template, MissingHistoryValuesAreAveragedOver) {
  std::vector<HistoryRun> h{{"r1", "A", {{0, 10}, {0.2, kNaN}}}, {"r2", "A", {{0, 10}, {0.4, 0.6}}}};
  const auto t = template_series(h, "A", "x", Steps{0, 10}, {});
  EXPECT_DOUBLE_EQ(t[0], 0.3);
  EXPECT_DOUBLE_EQ(t[1], 0.6);
  std::vector<HistoryRun> all_missing{{"r1", "A", {{0, 10}, {0.2, kNaN}}}};
  EXPECT_TRUE(std::isnan(template_series(all_missing, "A", "x", Steps{0, 10}, {})[1]));
}

TEST(Template, ClassWithoutHistoryIsAnErrorOrDeclaredMissing) {
  const auto h = hand_history();
  const Steps grid{0, 10, 20};
  EXPECT_THROW(template_series(h, "C", "r1", grid, {}), ForecastError);
  // r3 is the only B run: leaving it out leaves nothing.
  EXPECT_THROW(template_series(h, "B", "r3", grid, {}), ForecastError);
  TemplateOptions o;
  o.missing_class = MissingClass::missing;
  const auto tt = template_table({{"r3/g", "r3", "B"}, {"r1/g", "r1", "A"}}, h, grid, o);
  EXPECT_EQ(tt.missing, (std::vector<std::string>{"r3/g"}));
  EXPECT_EQ(tt.runs_used, (std::vector<int>{0, 2}));
  EXPECT_TRUE(tt.table.values.row(0).array().isNaN().all());
  EXPECT_DOUBLE_EQ(tt.table.values(1, 0), 0.4);
  EXPECT_THROW(template_table({{"r3/g", "r3", "B"}}, h, grid), ForecastError);
}

TEST(Template, HistoryOutsideTheGridOrDuplicatedThrows) {
  auto h = hand_history();
  h.push_back({"r5", "A", {{10, 20}, {0.0, 0.0}}});
  EXPECT_THROW(template_series(h, "A", "x", Steps{0, 10}, {}), ForecastError);
  TemplateOptions o;
  o.out_of_range = OutOfRange::missing;
  // Step 0: r5 has no value, mean over r1, r2, r4; step 10: r1, r2, r4, r5 = (0.2+0.4+0.7+0)/4.
  const auto t = template_series(h, "A", "x", Steps{0, 10}, o);
  EXPECT_NEAR(t[0], 0.9 / 3, 1e-15);
  EXPECT_NEAR(t[1], 1.3 / 4, 1e-15);
  auto dup = hand_history();
  dup.push_back(dup.front());
  EXPECT_THROW(template_series(dup, "A", "x", Steps{0, 10}, {}), ForecastError);
}

// The sweep provides its own history: every target run is historical for the others. Changing the scored run's
// outcome (in the table and in the history it belongs to) must never change its own template.
TEST(Template, OutcomeBlindWhenTheSweepProvidesHistory) {
  const Steps steps{0, 10, 20};
  auto make_cells = [&](double r1_last) {
    std::vector<EvaluationCell> cells(3);
    const std::vector<std::vector<double>> y{{0.1, 0.2, r1_last}, {0.2, 0.3, 0.4}, {0.0, 0.5, 1.0}};
    for (int i = 0; i < 3; ++i) {
      cells[i].run_id = std::vector<std::string>{"r1", "r2", "r3"}[i];
      cells[i].group = "layer1.weight";
      cells[i].format = "e4m3";
      cells[i].template_class = "e4m3/layer1.weight";
      cells[i].outcome = {steps, y[i]};
    }
    return cells;
  };
  auto history_of = [](const std::vector<EvaluationCell>& cells) {
    std::vector<HistoryRun> h;
    for (const auto& c : cells) h.push_back({c.run_id, c.template_class, c.outcome});
    return h;
  };
  TableOptions o;
  o.source = false;
  const auto cells_a = make_cells(0.3);
  const auto cells_b = make_cells(0.9);
  const auto a = build_evaluation_tables(cells_a, history_of(cells_a), o);
  const auto b = build_evaluation_tables(cells_b, history_of(cells_b), o);
  const auto& ta = a.predictor("template").table;
  const auto& tb = b.predictor("template").table;
  // r1's own template: mean of r2 and r3 = (0.1, 0.4, 0.7) in both cases.
  for (Eigen::Index t = 0; t < 3; ++t) EXPECT_EQ(ta.values(0, t), tb.values(0, t));
  EXPECT_DOUBLE_EQ(ta.values(0, 2), 0.7);
  // The others do see r1 (the change is visible where it should be): r2 at step 20 = (0.3+1.0)/2 vs (0.9+1.0)/2.
  EXPECT_DOUBLE_EQ(ta.values(1, 2), 0.65);
  EXPECT_DOUBLE_EQ(tb.values(1, 2), 0.95);
  // And the scored outcome did change.
  EXPECT_NE(a.outcome.values(0, 2), b.outcome.values(0, 2));
}

// Many runs in a few classes, some values missing, history and rows in shuffled orders: every row's template equals the
// leave-run-out mean computed by brute force here (to 1e-15), and changing one run's whole series leaves its own
// template bit for bit unchanged (the linear table never lets the left-out run in through rounding).
TEST(Template, TableOfManyRowsEqualsBruteForceLeaveRunOut) {
  const Steps grid{0, 5, 10, 15};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> value(0.0, 1.0);
  auto make_history = [&](double perturb_r0) {
    std::vector<HistoryRun> h;
    for (int i = 0; i < 90; ++i) {
      std::vector<double> y;
      for (int t = 0; t < 4; ++t) y.push_back((i * 7 + t) % 13 == 0 ? kNaN : value(rng));
      if (i == 0) y[2] = perturb_r0;
      h.push_back({"r" + std::to_string(i), "class" + std::to_string(i % 3), {grid, y}});
    }
    return h;
  };
  rng.seed(11);
  const auto h = make_history(0.25);
  rng.seed(11);
  const auto h2 = make_history(0.75);
  std::vector<TemplateRow> rows;
  for (int i = 89; i >= 0; --i)
    rows.push_back({"r" + std::to_string(i) + "/g", "r" + std::to_string(i), h[i].template_class});
  rows.push_back({"new/g", "new", "class1"});  // a run outside the history: every class1 run
  const auto tt = template_table(rows, h, grid);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t t = 0; t < grid.size(); ++t) {
      double sum = 0;
      int n = 0;
      for (const auto& run : h) {
        if (run.template_class != rows[r].template_class || run.run_id == rows[r].run_id) continue;
        if (std::isnan(run.erased_fraction.values[t])) continue;
        sum += run.erased_fraction.values[t];
        ++n;
      }
      EXPECT_NEAR(tt.table.values(Eigen::Index(r), Eigen::Index(t)), sum / n, 1e-15) << rows[r].cell << " step " << t;
    }
  }
  EXPECT_EQ(tt.runs_used.front(), 29);  // r89 of class2 (30 runs) leaves 29
  EXPECT_EQ(tt.runs_used.back(), 30);
  const auto tt2 = template_table(rows, h2, grid);
  const Eigen::Index r0 = 89;  // rows[89] is r0
  for (Eigen::Index t = 0; t < 4; ++t) EXPECT_EQ(tt.table.values(r0, t), tt2.table.values(r0, t));
  const Eigen::Index r3 = 86;  // rows[86] is r3, class0 like r0: it sees r0's change
  EXPECT_NE(tt.table.values(r3, 2), tt2.table.values(r3, 2));
}

}  // namespace
}  // namespace wbaudit::forecast
