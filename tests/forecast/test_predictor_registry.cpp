// The predictor registry: the predictors of docs/science.md section 2 with their labels, baselines and colours, and
// build_evaluation_tables building exactly the registered tables that are asked for, labelled from the registry.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "forecast/error.hpp"
#include "forecast/predictor_registry.hpp"

namespace wbaudit::forecast {
namespace {

TEST(PredictorRegistry, ThePredictorsOfTheScienceWithTheirLabels) {
  EXPECT_EQ(predictor_names(),
            (std::vector<std::string>{"source", "analytic-grid", "template", "matched-reference", "common-time"}));
  EXPECT_EQ(predictor_names(/*baselines_only=*/true), (std::vector<std::string>{"template", "common-time"}));
  EXPECT_EQ(predictor_info("matched-reference").label, "privileged");
  EXPECT_TRUE(predictor_info("matched-reference").privileged);
  EXPECT_TRUE(predictor_info("matched-reference").needs_matched_reference);
  EXPECT_EQ(predictor_info("common-time").label, "post-outcome");
  EXPECT_TRUE(predictor_info("common-time").post_outcome);
  EXPECT_EQ(predictor_info("source").label, "forecast");
  EXPECT_EQ(predictor_colour("source"), "#d62728");
  EXPECT_EQ(predictor_colour("not-a-predictor"), "#17becf");
  EXPECT_EQ(find_predictor("oracle"), nullptr);
  EXPECT_THROW(predictor_info("oracle"), ForecastError);
  std::set<std::string_view> colours;
  for (const auto& p : predictor_registry()) {
    EXPECT_EQ(predictor_name(p.kind), p.name);
    EXPECT_TRUE(colours.insert(p.colour).second) << p.name;  // every predictor its own colour
    EXPECT_EQ(p.label, p.privileged ? "privileged" : p.post_outcome ? "post-outcome" : "forecast");
    EXPECT_TRUE(p.build != nullptr) << p.name;
    EXPECT_TRUE((p.option != nullptr) != (p.wanted != nullptr)) << p.name;  // asked for one way
  }
}

// One cell whose reference projects e4m3 to 0.25 at steps 0 and 10; outcome 0.5.
std::vector<EvaluationCell> one_run_two_groups() {
  auto t = std::make_shared<sim::Trace>();
  t->mode = "reference";
  t->format = "fp32";
  t->recorded_steps = {0, 10};
  std::vector<EvaluationCell> out;
  for (const char* name : {"a.weight", "b.weight"}) {
    sim::GroupTrace g;
    g.name = name;
    g.nonzero = {4, 4};
    g.zero_weight = {0, 0};
    g.projected["e4m3"] = {{1, 1}, {0.25, 0.25}, {}};
    t->groups.push_back(g);
    EvaluationCell c;
    c.run_id = "r";
    c.group = name;
    c.format = "e4m3";
    c.template_class = "e4m3";
    c.outcome = {{0, 10}, {0.5, 0.5}};
    c.reference = t;
    c.matched_reference = t;
    out.push_back(c);
  }
  return out;
}

TEST(PredictorRegistry, TablesAreBuiltInRegistryOrderWithTheRegistrysLabels) {
  TableOptions o;
  o.template_mean = false;
  const auto t = build_evaluation_tables(one_run_two_groups(), {}, o);
  std::vector<std::string> built;
  for (const auto& p : t.predictors) {
    built.push_back(p.name);
    EXPECT_EQ(p.privileged, predictor_info(p.name).privileged) << p.name;
    EXPECT_EQ(p.post_outcome, predictor_info(p.name).post_outcome) << p.name;
    EXPECT_EQ(p.kind, predictor_info(p.name).kind) << p.name;
  }
  EXPECT_EQ(built, (std::vector<std::string>{"source", "matched-reference", "common-time"}));
  EXPECT_EQ(t.predictor("source").table.values(1, 1), 0.25);
  EXPECT_EQ(t.predictor("common-time").table.values(0, 0), 0.5);
}

}  // namespace
}  // namespace wbaudit::forecast
