// The loss studies' numbers against hand-computed values on hand-made traces: final losses, gaps, recovered shares
// (with an undefined seed where nearest is not worse than fp32), the policy contrast paired by seed, replay
// reductions in nats and percent, runs left out with their reasons, and the written report files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runners/evaluate/loss_study.hpp"
#include "runners/report/loss_report.hpp"

namespace {

using namespace wbaudit::runners::report;
using wbaudit::runners::analyze_losses;  // the analysis (runners/evaluate/loss_study.hpp); the rest renders
namespace fs = std::filesystem;
using wbaudit::sim::Trace;

std::shared_ptr<const Trace> trace_with_final_loss(double loss, bool target, std::int64_t last_validation = 10) {
  auto t = std::make_shared<Trace>();
  t->mode = target ? "target" : "reference";
  t->steps = 10;
  t->validation_steps = {0, last_validation};
  t->validation_loss = {3.5, loss};
  t->optimal_validation_loss = 1.25;
  t->recorded_steps = {0, 5};
  wbaudit::sim::GroupTrace g;
  g.name = "blocks.0.mlp.up.weight";
  g.size = 100;
  g.erased_fraction = {0.1, 0.2};
  t->groups.push_back(g);
  return t;
}

LossCell cell(const std::string& name, const std::string& seed, const std::string& policy, double loss) {
  LossCell c;
  c.name = name;
  c.seed = seed;
  c.policy = policy;
  c.reference = policy == "fp32";
  c.reference_of = c.reference ? "" : "reference/seed=" + seed;
  c.trace = trace_with_final_loss(loss, !c.reference);
  return c;
}

// fp32: 2.0, 2.1, 1.9; nearest: 2.5, 2.3, 1.9 (seed 3: no gap); stochastic 2.1, 2.15, 1.85; deadzone 2.2, 2.2, 1.88.
std::vector<LossCell> matched_cells() {
  const double fp32[] = {2.0, 2.1, 1.9}, nearest[] = {2.5, 2.3, 1.9}, sr[] = {2.1, 2.15, 1.85}, dz[] = {2.2, 2.2, 1.88};
  std::vector<LossCell> cells;
  for (int s = 0; s < 3; ++s) {
    const std::string seed = std::to_string(s + 1);
    cells.push_back(cell("reference/seed=" + seed, seed, "fp32", fp32[s]));
    cells.push_back(cell("target/seed=" + seed + "/nearest", seed, "nearest", nearest[s]));
    cells.push_back(cell("target/seed=" + seed + "/stochastic", seed, "stochastic", sr[s]));
    cells.push_back(cell("target/seed=" + seed + "/deadzone-sr", seed, "deadzone-sr", dz[s]));
  }
  LossCell pending;
  pending.name = "target/seed=4/nearest";
  pending.seed = "4";
  pending.policy = "nearest";
  pending.problem = "pending";
  cells.push_back(pending);
  LossCell early = cell("target/seed=5/nearest", "5", "nearest", 2.0);
  early.trace = trace_with_final_loss(2.0, true, 8);
  cells.push_back(early);
  return cells;
}

const PolicyRecovery& recovery_of(const ConditionLosses& c, const std::string& policy) {
  for (const auto& r : c.recoveries)
    if (r.policy == policy) return r;
  throw std::runtime_error("no recovery for " + policy);
}

TEST(LossReport, MatchedRunsGiveHandComputedGapsRecoveriesAndContrast) {
  const LossStudy study = analyze_losses(matched_cells());
  ASSERT_EQ(study.conditions.size(), 1u);
  const ConditionLosses& c = study.conditions[0];
  ASSERT_EQ(c.seeds.size(), 3u);
  EXPECT_NEAR(c.seeds[0].gap, 0.5, 1e-12);
  EXPECT_NEAR(c.seeds[1].gap, 0.2, 1e-12);
  EXPECT_NEAR(c.seeds[2].gap, 0.0, 1e-12);
  EXPECT_NEAR(c.seeds[0].recovery.at("stochastic"), 0.8, 1e-12);
  EXPECT_NEAR(c.seeds[0].recovery.at("deadzone-sr"), 0.6, 1e-12);
  EXPECT_NEAR(c.seeds[1].recovery.at("stochastic"), 0.75, 1e-12);
  EXPECT_NEAR(c.seeds[1].recovery.at("deadzone-sr"), 0.5, 1e-12);
  EXPECT_TRUE(std::isnan(c.seeds[2].recovery.at("stochastic")));
  ASSERT_EQ(c.undefined.size(), 1u);
  EXPECT_NE(c.undefined[0].find("seed 3"), std::string::npos);
  ASSERT_TRUE(c.gap.has_value());
  EXPECT_NEAR(c.gap->estimate, 0.7 / 3, 1e-12);

  const auto& sr = recovery_of(c, "stochastic");
  ASSERT_EQ(sr.values.size(), 2u);
  ASSERT_TRUE(sr.mean.has_value());
  EXPECT_NEAR(sr.mean->estimate, 0.775, 1e-12);
  EXPECT_GE(sr.mean->lower, 0.75 - 1e-12);  // a percentile interval of a mean lies within the values' range
  EXPECT_LE(sr.mean->upper, 0.8 + 1e-12);
  EXPECT_NEAR(recovery_of(c, "deadzone-sr").mean->estimate, 0.55, 1e-12);

  ASSERT_EQ(c.contrasts.size(), 1u);  // dead-zone SR over full SR
  EXPECT_EQ(c.contrasts[0].numerator, "deadzone-sr");
  EXPECT_EQ(c.contrasts[0].denominator, "stochastic");
  ASSERT_TRUE(c.contrasts[0].ratio.has_value());
  EXPECT_NEAR(c.contrasts[0].ratio->mean_ratio_t.estimate, (0.6 / 0.8 + 0.5 / 0.75) / 2, 1e-12);
  EXPECT_NEAR(c.contrasts[0].ratio->ratio_of_means_bootstrap.estimate, 1.1 / 1.55, 1e-12);

  ASSERT_EQ(study.left_out.size(), 2u);
  EXPECT_NE(study.left_out[0].find("target/seed=4/nearest (pending)"), std::string::npos);
  EXPECT_NE(study.left_out[1].find("the last validation is at step 8, not after the 10 steps"), std::string::npos);

  const std::string headline = loss_headline(study);
  EXPECT_NE(headline.find("stochastic 0.775 ["), std::string::npos) << headline;
  EXPECT_NE(headline.find("(n=2 seeds)"), std::string::npos) << headline;
}

TEST(LossReport, ConditionsSplitOnEveryGridValueButPolicyAndSeed) {
  auto cells = matched_cells();
  for (auto& c : cells) c.condition = "target.format=e4m3";
  auto more = matched_cells();
  for (auto& c : more) {
    c.condition = "target.format=e5m2";
    c.name += "/e5m2";  // the same references serve both formats
  }
  for (auto& c : more)
    if (!c.reference) cells.push_back(c);
  const LossStudy study = analyze_losses(cells);
  ASSERT_EQ(study.conditions.size(), 2u);
  EXPECT_EQ(study.conditions[0].condition, "target.format=e4m3");
  EXPECT_EQ(study.conditions[1].condition, "target.format=e5m2");
  EXPECT_NEAR(recovery_of(study.conditions[1], "stochastic").mean->estimate, 0.775, 1e-12);
}

TEST(LossReport, ReplayReductionsInNatsAndPercent) {
  auto t = std::make_shared<Trace>();
  t->mode = "reference";
  t->steps = 20;
  t->replay_steps = 5;
  t->replay_checkpoints = {10, 20};
  t->replay_start_loss = {3.0, 2.0};
  t->replays = {{"int3", "nearest", 0, {4.0, 2.5}}, {"int3", "stochastic", 0, {3.0, 2.25}}};
  LossCell c;
  c.name = "target/seed=1";
  c.seed = "1";
  c.policy = "nearest";
  c.trace = t;
  const LossStudy study = analyze_losses({c});
  EXPECT_TRUE(study.conditions.empty());  // a replay run is not a matched-run cell
  ASSERT_EQ(study.replays.size(), 1u);
  const auto& r = study.replays[0];
  ASSERT_EQ(r.reductions.size(), 1u);
  EXPECT_EQ(r.reductions[0].policy, "stochastic");
  EXPECT_NEAR(r.reductions[0].nats[0], 1.0, 1e-12);
  EXPECT_NEAR(r.reductions[0].nats[1], 0.25, 1e-12);
  EXPECT_NEAR(r.reductions[0].percent[0], 25.0, 1e-12);
  EXPECT_NEAR(r.reductions[0].percent[1], 10.0, 1e-12);
  EXPECT_NEAR(r.reductions[0].mean_nats, 0.625, 1e-12);
  EXPECT_NEAR(r.reductions[0].mean_percent, 17.5, 1e-12);
  EXPECT_NE(loss_headline(study).find("0.6250 nats (17.50%)"), std::string::npos) << loss_headline(study);

  t->replays = {{"int3", "stochastic", 0, {3.0, 2.25}}};
  const LossStudy no_nearest = analyze_losses({c});
  EXPECT_TRUE(no_nearest.replays[0].reductions.empty());
  EXPECT_NE(no_nearest.replays[0].note.find("no nearest replay"), std::string::npos);
}

TEST(LossReport, TracesWithoutValidationMakeNoStudy) {
  LossCell c = cell("target/seed=1", "1", "nearest", 1.0);
  auto t = std::make_shared<Trace>(*c.trace);
  t->validation_steps.clear();
  t->validation_loss.clear();
  c.trace = t;
  const LossStudy study = analyze_losses({c});
  EXPECT_TRUE(study.empty());
  ASSERT_EQ(study.left_out.size(), 1u);
  EXPECT_NE(study.left_out[0].find("no validation loss"), std::string::npos);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(LossReport, WritesMarkdownHtmlCsvAndFiguresWithTheNumbers) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_loss_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto cells = matched_cells();
  const LossStudy study = analyze_losses(cells);
  const LossReportFiles files = write_loss_report(study, cells, "unit", dir, dir / "report");
  const std::string md = slurp(files.markdown);
  const std::string html = slurp(files.html);
  for (const std::string& s : {std::string("0.800"), std::string("0.750"), std::string("undefined"),
                               std::string("0.775 ["), std::string("policy contrast"), std::string("pending")}) {
    EXPECT_NE(md.find(s), std::string::npos) << s;
    EXPECT_NE(html.find(s), std::string::npos) << s;
  }
  EXPECT_NE(md.find("1.2500 nats/token"), std::string::npos);  // the optimum, printed beside the losses
  const std::string csv = slurp(files.summary_csv);
  EXPECT_NE(csv.find(",1,stochastic,2.1000000000000001,2,2.5,0.5,0."), std::string::npos) << csv;
  EXPECT_NE(slurp(files.curves_csv).find("erased_fraction:blocks.0.mlp.up.weight,5,0.20000000000000001"),
            std::string::npos);
  for (const char* f : {"loss-validation-1.png", "loss-validation-1.svg", "loss-erased-1.png"}) {
    EXPECT_TRUE(fs::exists(dir / "report" / "figures" / f)) << f;
  }
  fs::remove_all(dir);
}

}  // namespace
