// Study 7's block section (runners/report/block_report.hpp) against a hand-computed table on hand-made traces: the
// erased fraction and its causes per run and as means over seeds, collateral moves, flushes and rescales per
// coordinate- and block-step, curves per recorded step, a per-tensor row (no causes), a row whose runs have no
// nonzero proposal (undefined, never averaged), groups without block events left out, the headline, the written
// files; and the loss report's erased figure when a condition's erased fraction is undefined throughout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runners/evaluate/loss_study.hpp"
#include "runners/report/block_report.hpp"
#include "runners/report/loss_report.hpp"

namespace {

using namespace wbaudit::runners::report;
namespace fs = std::filesystem;
using wbaudit::sim::GroupTrace;
using wbaudit::sim::Trace;
using I = std::vector<std::int64_t>;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Causes {
  I grid, saturation, scale, collateral, flushed, up, down;
};

// Group "a" (64 coordinates, 2 blocks) holds the studied format; group "norm" (fp32, no block events) erases
// differently so that counting it would change every number below.
LossCell run(const std::string& format, const std::string& policy, const std::string& seed, const I& nonzero,
             const I& erased, const std::optional<Causes>& causes) {
  auto t = std::make_shared<Trace>();
  t->mode = "target";
  t->format = format;
  t->policy = policy;
  t->recorded_steps = {0, 10};
  GroupTrace a;
  a.name = "a";
  a.size = 64;
  a.nonzero = nonzero;
  a.erased = erased;
  if (causes) {
    a.block_format = format;
    a.block_events.blocks = 2;
    a.block_events.erased_grid = causes->grid;
    a.block_events.erased_saturation = causes->saturation;
    a.block_events.erased_scale = causes->scale;
    a.block_events.collateral = causes->collateral;
    a.block_events.flushed = causes->flushed;
    a.block_events.rescaled_up = causes->up;
    a.block_events.rescaled_down = causes->down;
  }
  GroupTrace norm;
  norm.name = "norm";
  norm.size = 64;
  norm.nonzero = {64, 64};
  norm.erased = {64, 0};
  t->groups = {a, norm};
  LossCell c;
  c.name = "target/seed=" + seed + "/format=" + format + "/policy=" + policy;
  c.seed = seed;
  c.policy = policy;
  c.condition = "target.format=" + format;
  c.reference_of = "reference/seed=" + seed;
  c.trace = t;
  return c;
}

// Seed 1, mxfp4_e2m1 nearest: nonzero 60 + 40 = 100, erased 30 + 20 = 50 (0.5) = grid 30 (0.3) + saturation 10 (0.1)
//   + scale 10 (0.1); collateral 4 and flushed 1 of 128 coordinate-steps; 2 rescales of 4 block-steps (0.5).
// Seed 2: nonzero 100, erased 70 (0.7) = grid 50 + saturation 10 + scale 10; no collateral, flush or rescale.
// Means: erased 0.6, grid 0.4, saturation 0.1, scale 0.1, collateral 0.015625, flushed 0.00390625, rescaled 0.25.
// e4m3 (per-tensor): seed 1 erased 10/20, seed 2 10/20: 0.5. e2m1: no nonzero proposal at any step (undefined).
std::vector<LossCell> cells() {
  std::vector<LossCell> out;
  LossCell reference;
  reference.name = "reference/seed=1";
  reference.reference = true;
  reference.policy = "fp32";
  out.push_back(reference);
  out.push_back(run("e4m3", "nearest", "1", {10, 10}, {5, 5}, std::nullopt));
  out.push_back(run("mxfp4_e2m1", "nearest", "1", {60, 40}, {30, 20},
                    Causes{{20, 10}, {5, 5}, {5, 5}, {4, 0}, {1, 0}, {1, 0}, {0, 1}}));
  out.push_back(run("e2m1", "nearest", "1", {0, 0}, {0, 0}, std::nullopt));
  out.push_back(run("e4m3", "nearest", "2", {10, 10}, {10, 0}, std::nullopt));
  out.push_back(run("mxfp4_e2m1", "nearest", "2", {50, 50}, {40, 30},
                    Causes{{30, 20}, {5, 5}, {5, 5}, {0, 0}, {0, 0}, {0, 0}, {0, 0}}));
  out.push_back(run("e2m1", "nearest", "2", {0, 0}, {0, 0}, std::nullopt));
  return out;
}

void expect_mean(const std::optional<wbaudit::stats::Interval>& i, double mean, double lo, double hi) {
  ASSERT_TRUE(i.has_value());
  EXPECT_DOUBLE_EQ(i->estimate, mean);
  EXPECT_GE(i->lower, lo - 1e-15);  // a resampled mean of two values lies between them
  EXPECT_LE(i->upper, hi + 1e-15);
  EXPECT_LE(i->lower, i->upper);
}

const BlockRow& row_of(const BlockStudy& s, const std::string& format) {
  for (const auto& r : s.rows) {
    if (r.format == format) {
      return r;
    }
  }
  throw std::runtime_error("no row " + format);
}

TEST(BlockReport, HandComputedTableOfCausesCollateralAndRescales) {
  const BlockStudy s = analyze_blocks(cells(), wbaudit::runners::loss_bootstrap_spec());
  ASSERT_EQ(s.groups, std::vector<std::string>{"a"});
  ASSERT_EQ(s.rows.size(), 3u);
  EXPECT_EQ(s.rows[0].format, "e4m3");  // the sweep's order
  const BlockRow& mx = row_of(s, "mxfp4_e2m1");
  ASSERT_TRUE(mx.block);
  ASSERT_EQ(mx.runs.size(), 2u);
  const BlockRunCounts& r1 = mx.runs[0];
  EXPECT_EQ(r1.nonzero, 100);
  EXPECT_EQ(r1.erased, 50);
  EXPECT_EQ(r1.grid + r1.saturation + r1.scale, r1.erased);
  EXPECT_EQ(r1.coordinate_steps, 128);
  EXPECT_EQ(r1.block_steps, 4);
  EXPECT_EQ(mx.defined, 2u);
  expect_mean(mx.erased, 0.6, 0.5, 0.7);
  expect_mean(mx.grid, 0.4, 0.3, 0.5);
  expect_mean(mx.saturation, 0.1, 0.1, 0.1);
  expect_mean(mx.scale, 0.1, 0.1, 0.1);
  expect_mean(mx.collateral, 0.015625, 0.0, 0.03125);
  expect_mean(mx.flushed, 0.00390625, 0.0, 0.0078125);
  expect_mean(mx.rescaled, 0.25, 0.0, 0.5);
  // Curves: step 0: erased (30/60 + 40/50) / 2 = 0.65, grid (20/60 + 30/50) / 2, collateral (4/64 + 0) / 2;
  // step 10: erased (20/40 + 30/50) / 2 = 0.55, rescaled (1/2 + 0) / 2 = 0.25.
  ASSERT_EQ(mx.steps, (std::vector<double>{0, 10}));
  EXPECT_DOUBLE_EQ(mx.curve_erased[0], 0.65);
  EXPECT_DOUBLE_EQ(mx.curve_erased[1], 0.55);
  EXPECT_DOUBLE_EQ(mx.curve_grid[0], (20.0 / 60 + 30.0 / 50) / 2);
  EXPECT_DOUBLE_EQ(mx.curve_collateral[0], 0.03125);
  EXPECT_DOUBLE_EQ(mx.curve_rescaled[1], 0.25);

  const BlockRow& e4 = row_of(s, "e4m3");
  EXPECT_FALSE(e4.block);
  expect_mean(e4.erased, 0.5, 0.5, 0.5);
  EXPECT_FALSE(e4.grid.has_value());  // a per-tensor format has no causes
  EXPECT_TRUE(std::isnan(e4.curve_grid[0]));

  const BlockRow& e2 = row_of(s, "e2m1");
  EXPECT_EQ(e2.defined, 0u);
  EXPECT_FALSE(e2.erased.has_value());
  EXPECT_EQ(e2.undefined.size(), 2u);
  EXPECT_TRUE(std::isnan(e2.curve_erased[0]));

  EXPECT_EQ(block_headline(s),
            "erased fraction by cause (nearest, mean over seeds): e4m3 0.500; mxfp4_e2m1 0.600 = grid 0.400 + "
            "saturation 0.100 + scale 0.100; e2m1 undefined");
}

TEST(BlockReport, NoBlockFormatNoStudy) {
  std::vector<LossCell> per_tensor;
  for (auto& c : cells()) {
    if (c.trace && c.trace->format != "mxfp4_e2m1") {
      per_tensor.push_back(c);
    }
  }
  EXPECT_TRUE(analyze_blocks(per_tensor, wbaudit::runners::loss_bootstrap_spec()).empty());
}

TEST(BlockReport, WritesMarkdownHtmlCsvAndFigures) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_block_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const BlockStudy s = analyze_blocks(cells(), wbaudit::runners::loss_bootstrap_spec());
  const BlockReportFiles files = write_block_report(s, "unit", dir, dir / "report");
  const std::string md = slurp(files.markdown);
  const std::string html = slurp(files.html);
  for (const std::string& text : {std::string("Erased updates by cause"), std::string("Over training"),
                                  std::string("0.6000 ["), std::string("0.4000 ["), std::string("n/a (per-tensor)"),
                                  std::string("0/2"), std::string("no nonzero proposal")}) {
    EXPECT_NE(md.find(text), std::string::npos) << text;
    EXPECT_NE(html.find(text), std::string::npos) << text;
  }
  EXPECT_NE(slurp(files.summary_csv).find("mxfp4_e2m1,nearest,1,1,100,50,30,10,10,4,1,128,4,1,1,0.5"),
            std::string::npos);
  for (const char* f :
       {"blocks-causes-1.svg", "blocks-collateral-moves.png", "blocks-flushes.svg", "blocks-rescaled-blocks.png"}) {
    EXPECT_TRUE(fs::exists(dir / "report" / "figures" / f)) << f;
  }
  fs::remove_all(dir);
}

// Every coordinate with a nonzero proposal at every step (nonzero == 64 of 64): the report says collateral moves
// cannot occur in that row; in the hand-made table above (100 of 128) it does not.
TEST(BlockReport, DenseProposalsNoteThatCollateralCannotOccur) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_block_dense_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto spec = wbaudit::runners::loss_bootstrap_spec();
  const Causes none{{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}};
  const std::vector<LossCell> dense = {run("nvfp4", "nearest", "1", {64, 64}, {0, 0}, none)};
  const std::string note = "every coordinate carried a nonzero proposal";
  EXPECT_NE(slurp(write_block_report(analyze_blocks(dense, spec), "unit", dir, dir / "r1").markdown).find(note),
            std::string::npos);
  EXPECT_EQ(slurp(write_block_report(analyze_blocks(cells(), spec), "unit", dir, dir / "r2").markdown).find(note),
            std::string::npos);
  fs::remove_all(dir);
}

// A condition whose targets never have a nonzero proposal (per-tensor e2m1 at a small initialization: every weight
// flushes to zero and no gradient reaches them) gets a sentence instead of an erased figure gnuplot cannot draw.
TEST(BlockReport, LossReportWithoutAnyDefinedErasedFraction) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_block_loss_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<LossCell> runs;
  for (const std::string seed : {"1", "2"}) {
    for (const std::string policy : {"fp32", "nearest"}) {
      LossCell c;
      auto t = std::make_shared<Trace>();
      t->mode = policy == "fp32" ? "reference" : "target";
      t->steps = 10;
      t->validation_steps = {0, 10};
      t->validation_loss = {3.5, policy == "fp32" ? 2.0 : 3.0};
      t->recorded_steps = {0, 5};
      GroupTrace g;
      g.name = "a";
      g.size = 64;
      g.erased_fraction = {std::nan(""), std::nan("")};
      t->groups.push_back(g);
      c.name = (policy == "fp32" ? "reference/seed=" : "target/nearest/seed=") + seed;
      c.seed = seed;
      c.policy = policy;
      c.reference = policy == "fp32";
      c.reference_of = c.reference ? "" : "reference/seed=" + seed;
      c.trace = t;
      runs.push_back(c);
    }
  }
  const LossStudy study = wbaudit::runners::analyze_losses(runs);
  const LossReportFiles files = write_loss_report(study, runs, "unit", dir, dir / "report");
  EXPECT_NE(slurp(files.markdown).find("No erased-fraction figure for seed 1"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "report" / "figures" / "loss-erased-1.svg"));
  EXPECT_TRUE(fs::exists(dir / "report" / "figures" / "loss-validation-1.svg"));
  fs::remove_all(dir);
}

}  // namespace
