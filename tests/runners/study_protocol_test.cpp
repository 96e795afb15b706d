// The registered protocols of studies 3 and 4 (docs/studies.md) on small two-layer sweeps: a hand-made cell makes
// every registered gate inconclusive and names it, while the same analysis over six canonical cells judges each
// gate from its interval; the source and template predictors are blind to the scored outcomes (a history sweep and
// a source sweep); bad input (a history without a template class, the scored outcomes as history, registering after
// the outcomes, a deviation naming an unknown cell, `run --cells` matching nothing) is an error and writes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "forecast/source.hpp"
#include "runners/evaluate/evaluate.hpp"
#include "runners/exec/sweep_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/registry.hpp"
#include "runners/store/store.hpp"
#include "sim/trace/trace.hpp"
#include "stats/gates.hpp"

namespace fs = std::filesystem;
namespace wr = wbaudit::runners;
using wbaudit::stats::Verdict;

namespace {

// Everything but [sweep] and [grid]: shared by every sweep here, so their runs differ only by the grid values.
std::string base_spec(const std::string& name, const std::string& grid, const std::string& target_extra = "") {
  return "seed = 1\nsteps = 60\n[sweep]\nname = \"" + name + R"("
[model]
kind = "two_layer"
input_dim = 8
hidden = 8
output_dim = 2
activation = "tanh"
[data]
batch = 16
[optimizer]
kind = "adam"
lr = 0.01
[schedule]
kind = "constant"
period = 20
min_lr_ratio = 0.1
[record]
kind = "every_k"
k = 5
[target]
format = "e4m3"
policy = "nearest"
)" + target_extra +
         "[evaluation]\ngroups = [\"layer1.weight\", \"layer2.weight\"]\n[grid]\n" + grid;
}

void spit(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The attempt directories of a cell, listed from the file system.
std::vector<fs::path> attempts_of(const fs::path& sweep, const std::string& id) {
  std::vector<fs::path> out;
  if (!fs::exists(sweep / "cells" / id / "attempts")) return out;
  for (auto& a : fs::directory_iterator(sweep / "cells" / id / "attempts")) out.push_back(a.path());
  return out;
}

const char* kGates = R"(
[bootstrap]
resamples = 300
seed = 5
method = "percentile"
unit = "run"

[[gates]]
name = "accuracy, surely met"
statistic = "rmse_macro"
predictor = "source"
comparator = "<="
threshold = 10.0

[[gates]]
name = "accuracy, impossible"
statistic = "rmse_macro"
predictor = "source"
comparator = ">="
threshold = 5.0

[[gates]]
name = "skill against common time"
statistic = "skill_vs_common_time"
predictor = "source"
comparator = ">="
threshold = -1000.0
)";

class StudyProtocol : public ::testing::Test {
 protected:
  static fs::path root;

  static void SetUpTestSuite() {
    root = fs::temp_directory_path() / ("wbaudit_study_protocol_" + wr::random_uuid());
    fs::create_directories(root);
  }
  static void TearDownTestSuite() { fs::remove_all(root); }

  static fs::path write(const std::string& name, const std::string& text) {
    spit(root / name, text);
    return root / name;
  }

  // Runs a spec into root/dir (only the cells matching `only`, or none with create_only).
  static wr::ExecSummary run(const std::string& spec_file, const std::string& dir, std::vector<std::string> only = {},
                             bool create_only = false, bool resume = false) {
    wr::SweepSpec spec = wr::load_sweep_spec(root / spec_file);
    wr::RunOptions options;
    options.out = root / dir;
    options.progress = false;
    options.only = std::move(only);
    options.create_only = create_only;
    options.resume = resume;
    return wr::run_sweep(spec, options);
  }
};
fs::path StudyProtocol::root;

const std::string kSixCells = "\"schedule.kind\" = [\"constant\", \"cosine_restarts\"]\nseed = [1, 2, 3]\n";
const std::string kHandMade = "target/kind=cosine_restarts/seed=3";

TEST_F(StudyProtocol, HandMadeCellMakesEveryRegisteredGateInconclusiveAndSixCanonicalCellsAreJudged) {
  write("six.toml", base_spec("six", kSixCells));
  write("recovery.toml", base_spec("recovery", "\"schedule.kind\" = [\"cosine_restarts\"]\nseed = [3]\n"));
  const fs::path analysis = write("analysis.toml", std::string("required_cells = [\"target/*\"]\n[analysis]\n"
                                                               "predictors = [\"source\", \"common-time\"]\n"
                                                               "baselines = [\"common-time\"]\n") +
                                                       kGates);

  // Registered before any outcome, five targets through the pipeline, the sixth run elsewhere and copied in.
  run("six.toml", "partial", {}, /*create_only=*/true);
  EXPECT_TRUE(attempts_of(root / "partial", wr::SweepStore::open(root / "partial").cells().front().id).empty());
  (void)wr::register_analysis(wr::SweepStore::open(root / "partial"), analysis, false, "tester");
  ASSERT_EQ(run("six.toml", "partial",
                {"reference/*", "target/kind=constant/*", "target/kind=cosine_restarts/seed=[12]"}, false, true)
                .failed,
            0u);
  ASSERT_EQ(run("recovery.toml", "recovery", {"target/*"}).failed, 0u);
  const auto partial = wr::SweepStore::open(root / "partial");
  const std::string id = partial.find_by_name(kHandMade)->id;
  EXPECT_TRUE(attempts_of(root / "partial", id).empty());  // --cells left it pending
  const auto copied = attempts_of(root / "recovery", id);
  ASSERT_EQ(copied.size(), 1u);
  fs::create_directories(root / "partial" / "cells" / id / "attempts");
  fs::copy(copied.front(), root / "partial" / "cells" / id / "attempts" / copied.front().filename(),
           fs::copy_options::recursive);

  const auto status = partial.cell_status(id);
  EXPECT_EQ(status.state, wr::CellState::noncanonical);
  ASSERT_FALSE(status.reasons.empty());

  wr::EvaluateOptions options;
  options.figures = false;
  auto result = wr::evaluate_sweep(root / "partial", options);  // the registration, without --analysis
  EXPECT_EQ(result.standing, "preregistered");
  ASSERT_EQ(result.gates.size(), 3u);
  for (auto& g : result.gates) {
    EXPECT_EQ(g.result.verdict, Verdict::inconclusive) << g.spec.gate.name;
    std::string reasons;
    for (auto& r : g.result.reasons) reasons += r + "\n";
    EXPECT_NE(reasons.find(kHandMade), std::string::npos) << reasons;
    EXPECT_NE(reasons.find("noncanonical"), std::string::npos) << reasons;
  }
  EXPECT_EQ(result.resampling_units, 5u);  // five canonical runs, not their ten layer cells
  int in_cohort = 0;
  for (auto& c : result.cohort) {
    in_cohort += c.in_cohort;
    EXPECT_EQ(c.canonical, c.cell != kHandMade) << c.cell;
  }
  EXPECT_EQ(in_cohort, 6);

  // The same analysis over six canonical cells: each verdict from its interval by the rule, none inconclusive.
  run("six.toml", "full", {}, true);
  (void)wr::register_analysis(wr::SweepStore::open(root / "full"), analysis, false, "tester");
  ASSERT_EQ(run("six.toml", "full", {}, false, true).failed, 0u);
  auto full = wr::evaluate_sweep(root / "full", options);
  EXPECT_EQ(full.standing, "preregistered");
  EXPECT_EQ(full.resampling_units, 6u);
  ASSERT_EQ(full.gates.size(), 3u);
  for (auto& g : full.gates) {
    ASSERT_TRUE(g.has_interval) << g.spec.gate.name;
    const auto& ci = g.result.interval;
    EXPECT_EQ(ci.n_units, 6);
    const double t = g.spec.gate.threshold;
    const bool at_most = g.spec.gate.direction == wbaudit::stats::GateDirection::at_most;
    const Verdict expected = at_most ? (ci.upper <= t  ? Verdict::pass
                                        : ci.lower > t ? Verdict::fail
                                                       : Verdict::inconclusive)
                                     : (ci.lower >= t  ? Verdict::pass
                                        : ci.upper < t ? Verdict::fail
                                                       : Verdict::inconclusive);
    EXPECT_EQ(g.result.verdict, expected) << g.spec.gate.name;
  }
  EXPECT_EQ(full.gates[0].result.verdict, Verdict::pass);
  EXPECT_EQ(full.gates[1].result.verdict, Verdict::fail);
  EXPECT_EQ(full.gates[2].result.verdict, Verdict::pass);

  // A gate whose threshold lies inside the interval (a wide interval at few units) is inconclusive, never a pass.
  const auto& ci = full.gates[0].result.interval;
  ASSERT_LT(ci.lower, ci.upper);
  std::ostringstream mid;
  mid.precision(17);
  mid << (ci.lower + ci.upper) / 2;
  options.analysis = write("mid.toml", std::string("[analysis]\npredictors = [\"source\", \"common-time\"]\n"
                                                   "baselines = [\"common-time\"]\n") +
                                           kGates +
                                           "\n[[gates]]\nname = \"straddles\"\nstatistic = \"rmse_macro\"\n"
                                           "predictor = \"source\"\ncomparator = \"<=\"\nthreshold = " +
                                           mid.str() + "\n");
  auto straddle = wr::evaluate_sweep(root / "full", options);
  EXPECT_EQ(straddle.gates.back().result.verdict, Verdict::inconclusive);

  // After a deviation naming the hand-made cell, a retrospective analysis of the complete cohort says that the
  // recovered cell cannot enter it, and the verdict is negative.
  (void)wr::record_deviation(partial, "restarted by hand", "its pipeline run did not happen", {kHandMade}, "tester");
  const fs::path retro = write("retro.toml", std::string("required_cells = [\"target/kind=constant/*\"]\n[analysis]\n"
                                                         "predictors = [\"source\", \"common-time\"]\n"
                                                         "baselines = [\"common-time\"]\n"
                                                         "scored_runs = [\"target/kind=constant/*\"]\n") +
                                                 kGates);
  EXPECT_THROW(wr::register_analysis(partial, retro, false, "tester"), wr::RegistryError);
  (void)wr::register_analysis(partial, retro, true, "tester");
  options.analysis = retro;
  auto r = wr::evaluate_sweep(root / "partial", options);
  EXPECT_EQ(r.standing, "retrospective");
  EXPECT_EQ(r.resampling_units, 3u);
  EXPECT_EQ(r.cells.size(), 6u);  // three constant runs x two groups
  for (auto& c : r.cells) EXPECT_EQ(c.rfind("target/kind=constant/", 0), 0u) << c;
  EXPECT_EQ(r.cohort_verdict.rfind("negative", 0), 0u) << r.cohort_verdict;
  EXPECT_NE(r.cohort_verdict.find("disjoint"), std::string::npos) << r.cohort_verdict;
  EXPECT_NE(r.cohort_verdict.find(kHandMade), std::string::npos) << r.cohort_verdict;
  for (auto& g : r.gates) EXPECT_NE(g.result.verdict, Verdict::inconclusive) << g.spec.gate.name;  // complete cohort
}

// Source from a one-reference sweep at seed 10, template from a history sweep at seeds 21-22: two scored sweeps with
// the same configuration up to a target-only key (layer2 kept in fp32 in the second) have different outcomes but
// bitwise-identical source and template predictions, equal to recomputations from the source and history traces.
TEST_F(StudyProtocol, SourceAndTemplateFromOtherSweepsAreBlindToTheScoredOutcomes) {
  write("hist.toml", base_spec("hist", "seed = [21, 22]\n"));
  write("ref.toml", base_spec("ref", "seed = [10]\n"));
  write("t1.toml", base_spec("t1", "seed = [1, 2, 3]\n"));
  write("t2.toml", base_spec("t2", "seed = [1, 2, 3]\n", "group_formats = { \"layer2.weight\" = \"fp32\" }\n"));
  ASSERT_EQ(run("hist.toml", "study/hist").failed, 0u);
  ASSERT_EQ(run("ref.toml", "study/ref", {"reference/*"}).failed, 0u);
  ASSERT_EQ(run("t1.toml", "study/t1").failed, 0u);
  ASSERT_EQ(run("t2.toml", "study/t2").failed, 0u);
  const std::string analysis_text = R"([analysis]
predictors = ["source", "template", "common-time"]
baselines = ["template", "common-time"]
groups = ["layer1.weight"]
[source]
reference = "overrides"
overrides = { seed = 10 }
sweep = "../ref"
[template]
class = ["format", "group"]
history = "sweep"
history_sweep = "../hist"
[bootstrap]
resamples = 100
method = "percentile"
)";
  wr::EvaluateOptions options;
  options.figures = false;
  options.analysis = write("blind.toml", analysis_text);
  auto a = wr::evaluate_sweep(root / "study/t1", options);
  auto b = wr::evaluate_sweep(root / "study/t2", options);
  ASSERT_EQ(a.cells, b.cells);
  ASSERT_EQ(a.steps, b.steps);
  EXPECT_FALSE((a.outcome.values.array() == b.outcome.values.array()).all()) << "the outcomes should differ";
  auto table = [](const wr::EvaluationResult& r, const std::string& name) {
    for (auto& t : r.tables)
      if (t.name == name) return t.table.values;
    ADD_FAILURE() << name;
    return Eigen::MatrixXd();
  };
  for (auto* p : {"source", "template"})
    EXPECT_TRUE((table(a, p).array() == table(b, p).array()).all()) << p << " changed with the outcomes";

  // Independent recomputation from the trace files: the seed-10 reference's e4m3 projection, and the mean of the
  // two history runs' measured erased fractions (both recorded on the same steps as the targets).
  auto trace_file = [&](const fs::path& sweep, const std::string& name) {
    const auto store = wr::SweepStore::open(sweep);
    const wr::StoredCell* cell = nullptr;
    for (auto& c : store.cells())
      if (c.name.rfind(name, 0) == 0) cell = &c;  // reference names carry their lr too
    EXPECT_NE(cell, nullptr) << name;
    if (!cell) return wbaudit::sim::Trace{};
    auto attempts = attempts_of(sweep, cell->id);
    EXPECT_EQ(attempts.size(), 1u) << name;
    return wbaudit::sim::read_trace(attempts.front() / "trace.h5");
  };
  const auto ref = trace_file(root / "study/ref", "reference/lr=0.01/seed=10");
  const auto h1 = trace_file(root / "study/hist", "target/seed=21");
  const auto h2 = trace_file(root / "study/hist", "target/seed=22");
  const auto projected = wbaudit::forecast::projected_series(ref, "layer1.weight", "e4m3", "nearest");
  const auto& m1 = h1.group("layer1.weight").erased_fraction;
  const auto& m2 = h2.group("layer1.weight").erased_fraction;
  ASSERT_EQ(projected.steps, a.steps);
  ASSERT_EQ(h1.recorded_steps, a.steps);
  const auto S = table(a, "source");
  const auto T = table(a, "template");
  for (Eigen::Index i = 0; i < S.rows(); ++i) {
    for (Eigen::Index k = 0; k < S.cols(); ++k) {
      EXPECT_EQ(S(i, k), projected.values[std::size_t(k)]) << i << "," << k;
      EXPECT_DOUBLE_EQ(T(i, k), (m1[std::size_t(k)] + m2[std::size_t(k)]) / 2) << i << "," << k;
    }
  }
  // The effective analysis keeps the declared sweeps and repeats word for word.
  for (const char* key : {"sweep = \"../ref\"", "history = \"sweep\"", "history_sweep = \"../hist\""})
    EXPECT_NE(a.effective_analysis.find(key), std::string::npos) << key << " not in\n" << a.effective_analysis;
  {
    wr::EvaluateOptions again_options = options;
    again_options.analysis = write("effective.toml", a.effective_analysis);
    const auto again = wr::evaluate_sweep(root / "study/t1", again_options);
    EXPECT_EQ(again.effective_analysis, a.effective_analysis);
    EXPECT_TRUE((table(again, "template").array() == table(a, "template").array()).all());
  }
  EXPECT_NE(a.template_history.find("2 canonical target runs"), std::string::npos) << a.template_history;
  EXPECT_NE(a.source_reference.find("../ref"), std::string::npos) << a.source_reference;

  // Bad input, each an error naming the problem, with nothing written.
  auto refused = [&](const std::string& text, const std::string& needle) {
    options.analysis = write("bad.toml", text);
    try {
      (void)wr::evaluate_sweep(root / "study/t1", options);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // A history sweep with no run of the class (the reference sweep's only target never ran).
  std::string no_class = analysis_text;
  no_class.replace(no_class.find("../hist"), 7, "../ref");
  refused(no_class, "no canonical target run of the template class \"format=e4m3/group=layer1.weight\"");
  // The scored sweep as its own history: its outcomes would be their own template.
  std::string itself = analysis_text;
  itself.replace(itself.find("../hist"), 7, ".");
  refused(itself, "must not contain the outcomes being scored");
  std::string no_dir = analysis_text;
  no_dir.replace(no_dir.find("../hist"), 7, "../nowhere");
  refused(no_dir, "template.history_sweep");
  EXPECT_FALSE(fs::exists(root / "study/t1/evaluations"));
  EXPECT_FALSE(fs::exists(root / "study/nowhere"));
}

TEST_F(StudyProtocol, RegistrationAfterOutcomesDeviationsOfUnknownCellsAndUnmatchedCellsAreRefused) {
  write("done.toml", base_spec("done", "seed = [1, 2]\n"));
  ASSERT_EQ(run("done.toml", "done").failed, 0u);
  const auto store = wr::SweepStore::open(root / "done");
  const fs::path analysis = write("late.toml",
                                  "[analysis]\npredictors = [\"source\", \"common-time\"]\n"
                                  "baselines = [\"common-time\"]\n");
  try {
    (void)wr::register_analysis(store, analysis, false, "tester");
    ADD_FAILURE() << "registered after the outcomes exist";
  } catch (const wr::RegistryError& e) {
    EXPECT_NE(std::string(e.what()).find("target/seed=1"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root / "done" / "registry")) << "a refused registration wrote something";

  try {
    (void)wr::record_deviation(store, "restarted", "by hand", {"target/seed=9"}, "tester");
    ADD_FAILURE() << "a deviation naming an unknown cell was recorded";
  } catch (const wr::RegistryError& e) {
    EXPECT_NE(std::string(e.what()).find("target/seed=9"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root / "done" / "deviations.jsonl"));

  // `run --cells` with a pattern that matches no cell: refused before the directory exists.
  try {
    (void)run("done.toml", "never", {"target/seed=7"});
    ADD_FAILURE() << "ran with an unmatched --cells pattern";
  } catch (const wr::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("target/seed=7"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root / "never"));
}

}  // namespace

namespace {

TEST(StudyAnalysisSpec, DeclaredSweepsAndCohortsAreCheckedWithFileLineAndKey) {
  auto refused = [](const std::string& text, const std::string& needle) {
    try {
      (void)wr::parse_analysis_spec(text, "a.toml");
      ADD_FAILURE() << "accepted:\n" << text;
    } catch (const wr::AnalysisError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("a.toml:", 0), 0u) << e.what();
    }
  };
  refused("[template]\nhistory = \"sweep\"\n", "template.history_sweep: required with history = \"sweep\"");
  refused("[template]\nhistory = \"leave-run-out\"\nhistory_sweep = \"../h\"\n", "contradicts template.history_sweep");
  refused("[template]\nhistory_sweep = \"\"\n", "template.history_sweep: empty path");
  refused("[source]\nsweep = \"\"\n", "source.sweep: empty path");
  refused("[analysis]\nscored_runs = []\n", "analysis.scored_runs: empty");
  refused("[template]\nhistory = \"earlier\"\n", "unknown history \"earlier\"");
  const auto ok = wr::parse_analysis_spec(
      "[analysis]\nscored_runs = [\"target/a*\"]\n[source]\nsweep = \"../r\"\n[template]\nhistory_sweep = \"../h\"\n",
      "b.toml");
  EXPECT_EQ(ok.history_sweep, "../h");
  EXPECT_EQ(ok.source_sweep, "../r");
  EXPECT_EQ(ok.scored_runs, std::vector<std::string>{"target/a*"});
}

}  // namespace
