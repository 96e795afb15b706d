// wbaudit evaluate on a real (small) sweep run by the simulator: the CSV numbers against plain recomputations from
// the trace files, leave-run-out templates, gate verdicts, required cells, bad analysis specs, and reports that
// never overwrite earlier ones.
#include "runners/evaluate/evaluate.hpp"
#include "runners/evaluate/gates.hpp"
#include "runners/evaluate/sweep_outputs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "runners/exec/sweep_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/registry.hpp"
#include "runners/store/store.hpp"
#include "sim/trace/trace.hpp"

namespace fs = std::filesystem;
namespace wr = wbaudit::runners;

namespace {

// 2 formats x 2 learning-rate scales: each (format, group) template class has two runs, so leave-run-out leaves one.
const char* kSpec = R"(seed = 7
steps = 60
[sweep]
name = "evaluate-test"
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
[schedule]
kind = "constant"
[record]
kind = "every_k"
k = 5
[target]
policy = "nearest"
[grid]
"target.format" = ["bf16", "e4m3"]
"optimizer.lr_scale" = [0.5, 4.0]
[evaluation]
groups = ["layer1.weight", "layer2.weight"]
)";

void spit(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A minimal CSV reader (fields may be quoted; no embedded newlines in these files).
std::vector<std::map<std::string, std::string>> read_csv(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  auto split = [](const std::string& line) {
    std::vector<std::string> out;
    std::string field;
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      char c = line[i];
      if (quoted) {
        if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else if (c == '"') {
          quoted = false;
        } else {
          field += c;
        }
      } else if (c == '"') {
        quoted = true;
      } else if (c == ',') {
        out.push_back(field);
        field.clear();
      } else {
        field += c;
      }
    }
    out.push_back(field);
    return out;
  };
  std::string line;
  std::getline(in, line);
  auto header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    auto fields = split(line);
    EXPECT_EQ(fields.size(), header.size()) << line;
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size() && i < fields.size(); ++i) row[header[i]] = fields[i];
    rows.push_back(row);
  }
  return rows;
}

// The trace of a cell's (only) attempt, found by listing its directory: independent of the store's status logic.
wbaudit::sim::Trace trace_of(const fs::path& sweep, const wr::SweepStore& store, const std::string& name) {
  const auto* cell = store.find_by_name(name);
  EXPECT_NE(cell, nullptr) << name;
  for (const auto& attempt : fs::directory_iterator(sweep / "cells" / cell->id / "attempts"))
    if (fs::exists(attempt.path() / "trace.h5")) return wbaudit::sim::read_trace(attempt.path() / "trace.h5");
  ADD_FAILURE() << "no trace for " << name;
  return {};
}

class EvaluateTest : public ::testing::Test {
 protected:
  static fs::path root;
  static fs::path sweep;

  static void SetUpTestSuite() {
    root = fs::temp_directory_path() / ("wbaudit_evaluate_" + wr::random_uuid());
    fs::create_directories(root);
    spit(root / "spec.toml", kSpec);
    wr::SweepSpec spec = wr::load_sweep_spec(root / "spec.toml");
    wr::RunOptions options;
    options.out = root / "sweep";
    options.progress = false;
    auto summary = wr::run_sweep(spec, options);
    ASSERT_EQ(summary.failed, 0u);
    sweep = options.out;
  }
  static void TearDownTestSuite() { fs::remove_all(root); }

  // A copy of the sweep (for tests that change it).
  static fs::path copy_sweep(const std::string& tag) {
    fs::path dir = root / ("copy_" + tag);
    fs::copy(sweep, dir, fs::copy_options::recursive);
    return dir;
  }

  static fs::path analysis(const std::string& tag, const std::string& text) {
    fs::path path = root / (tag + ".toml");
    spit(path, text);
    return path;
  }

  static std::string basic_analysis(const std::string& extra = "") {
    return std::string(R"([analysis]
predictors = ["source", "template", "common-time"]
baselines = ["template", "common-time"]
[bootstrap]
resamples = 200
seed = 11
method = "percentile"
unit = "run"
min_units = 4               # the fixture's four target runs (the default minimum is 5)
)") + extra;
  }
};
fs::path EvaluateTest::root;
fs::path EvaluateTest::sweep;

const char* kGates = R"(
[[gates]]
name = "rmse bounded"
statistic = "rmse_macro"
predictor = "source"
comparator = "<="
threshold = 10.0

[[gates]]
name = "rmse impossible"
statistic = "rmse_pooled"
predictor = "source"
comparator = ">="
threshold = 5.0

[[gates]]
name = "skill vs common time"
statistic = "skill_vs_common_time"
predictor = "template"
comparator = ">="
threshold = -1000.0
)";

}  // namespace

TEST_F(EvaluateTest, SourceRmseOfOneCellMatchesPlainRecomputationFromTraces) {
  wr::EvaluateOptions options;
  options.analysis = analysis("plain", basic_analysis());
  options.figures = false;
  auto result = wr::evaluate_sweep(sweep, options);
  auto dir = wr::write_evaluation_report(result, options);

  const auto store = wr::SweepStore::open(sweep);
  const std::string target = "target/lr_scale=4.0/format=e4m3";
  const auto* cell = store.find_by_name(target);
  ASSERT_NE(cell, nullptr);
  const auto t = trace_of(sweep, store, target);
  const auto r = trace_of(sweep, store, cell->reference);
  ASSERT_EQ(t.recorded_steps, r.recorded_steps);
  const auto& measured = t.group("layer1.weight").erased_fraction;
  const auto& projected = r.group("layer1.weight").projected.at("e4m3").fraction;
  double sum = 0;
  for (std::size_t k = 0; k < measured.size(); ++k) sum += (projected[k] - measured[k]) * (projected[k] - measured[k]);
  const double rmse = std::sqrt(sum / static_cast<double>(measured.size()));

  bool found = false;
  for (auto& row : read_csv(dir / "cells.csv")) {
    if (row["predictor"] != "source" || row["cell"] != target + "/layer1.weight") continue;
    found = true;
    EXPECT_NEAR(std::stod(row["rmse_cell"]), rmse, 1e-9 * std::max(1.0, rmse));
  }
  EXPECT_TRUE(found);
  // Every statistic row names its definition; predictors carry their labels.
  for (auto& row : read_csv(dir / "statistics.csv")) {
    if (row["statistic"] == "rmse_macro") {
      EXPECT_FALSE(row["definition"].empty());
    }
    if (row["predictor"] == "common-time") {
      EXPECT_EQ(row["predictor_label"], "post-outcome");
    }
    if (row["predictor"] == "source") {
      EXPECT_EQ(row["predictor_label"], "forecast");
    }
  }
}

TEST_F(EvaluateTest, TheEffectiveAnalysisIsCompleteAndRepeatsWordForWord) {
  // No analysis file: the defaults are written out in full and hashed (not the hash of an empty string), and
  // evaluating that written-out text again gives the same text and hash.
  wr::EvaluateOptions options;
  options.figures = false;
  const auto first = wr::evaluate_sweep(sweep, options);
  EXPECT_NE(first.analysis_sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(first.analysis_sha256, wr::sha256_hex(first.effective_analysis));
  for (const char* key : {"predictors", "baselines", "resamples", "method", "confidence", "threshold", "burn_in"}) {
    EXPECT_NE(first.effective_analysis.find(key), std::string::npos) << key << " not explicit in\n"
                                                                     << first.effective_analysis;
  }
  options.analysis = analysis("effective", first.effective_analysis);
  const auto again = wr::evaluate_sweep(sweep, options);
  EXPECT_EQ(again.effective_analysis, first.effective_analysis);
  EXPECT_EQ(again.analysis_sha256, first.analysis_sha256);
}

TEST_F(EvaluateTest, TheEffectiveAnalysisRecordsTheDeclaredCrossingSettings) {
  // A declared tolerance (and threshold, burn-in, minimum group size) is what the crossings use and what the
  // effective analysis says, so that evaluating the effective text repeats the evaluation.
  wr::EvaluateOptions options;
  options.figures = false;
  options.analysis = analysis("crossing", basic_analysis("[crossing]\nthreshold = 0.4\nburn_in = 3\ntolerance = 0.3\n"
                                                         "min_group_size = 2\n"));
  const auto first = wr::evaluate_sweep(sweep, options);
  EXPECT_EQ(first.crossing_options.tolerance, 0.3);
  const auto written = wr::parse_analysis_spec(first.effective_analysis, "effective.toml");
  ASSERT_TRUE(written.tolerance.has_value()) << first.effective_analysis;
  EXPECT_EQ(*written.tolerance, 0.3) << first.effective_analysis;
  EXPECT_EQ(written.threshold, std::optional<double>(0.4));
  EXPECT_EQ(written.burn_in, std::optional<std::int64_t>(3));
  EXPECT_EQ(written.min_group_size, std::optional<std::int64_t>(2));
  options.analysis = analysis("crossing_again", first.effective_analysis);
  const auto again = wr::evaluate_sweep(sweep, options);
  EXPECT_EQ(again.crossing_options.tolerance, 0.3);
  EXPECT_EQ(again.effective_analysis, first.effective_analysis);
  // The declared burn-in (3) is not the sweep report's (0.5% of 60 steps: 0): the report says so and why the two
  // crossing headlines differ; a declared burn-in equal to the sweep's says nothing more.
  EXPECT_NE(first.burn_in_how.find("the sweep report counts crossings from t0 = 0"), std::string::npos)
      << first.burn_in_how;
  options.analysis = analysis("crossing_same", basic_analysis("[crossing]\nburn_in = 0\n"));
  const auto same = wr::evaluate_sweep(sweep, options);
  EXPECT_EQ(same.burn_in_how, "declared in the analysis' [crossing]");
}

TEST_F(EvaluateTest, SkillByStepAndByFactorMatchPlainRecomputation) {
  wr::EvaluateOptions options;
  options.analysis = analysis("by_step", basic_analysis());
  options.figures = false;
  const auto r = wr::evaluate_sweep(sweep, options);
  const wbaudit::forecast::PredictorTable* source = nullptr;
  for (const auto& t : r.tables)
    if (t.name == "source") source = &t;
  ASSERT_NE(source, nullptr);
  const auto& y = r.outcome.values;
  const auto& f = source->table.values;
  ASSERT_EQ(y.rows(), f.rows());
  ASSERT_EQ(y.cols(), f.cols());
  const wr::PredictorEvaluation* eval = nullptr;
  for (const auto& p : r.predictors)
    if (p.name == "source") eval = &p;
  ASSERT_NE(eval, nullptr);
  // By step: sqrt(mean over cells of (f - y)^2) at each step, written here as a plain double loop.
  ASSERT_EQ(eval->by_step.size(), static_cast<std::size_t>(y.cols()));
  for (Eigen::Index k = 0; k < y.cols(); ++k) {
    double sum = 0;
    for (Eigen::Index c = 0; c < y.rows(); ++c) sum += (f(c, k) - y(c, k)) * (f(c, k) - y(c, k));
    const double want = std::sqrt(sum / static_cast<double>(y.rows()));
    EXPECT_EQ(eval->by_step[static_cast<std::size_t>(k)].step, r.steps[static_cast<std::size_t>(k)]);
    EXPECT_NEAR(eval->by_step[static_cast<std::size_t>(k)].rmse, want, 1e-12 * std::max(1.0, want)) << "step " << k;
  }
  // By format: rmse_macro of a level = mean over its cells of the per-cell RMSE over steps.
  int checked = 0;
  for (const auto& row : r.breakdown) {
    if (row.factor != "format" || row.predictor != "source") continue;
    double sum = 0;
    int cells = 0;
    for (Eigen::Index c = 0; c < y.rows(); ++c) {
      if (r.factors[static_cast<std::size_t>(c)].at("format") != row.level) continue;
      double se = 0;
      for (Eigen::Index k = 0; k < y.cols(); ++k) se += (f(c, k) - y(c, k)) * (f(c, k) - y(c, k));
      sum += std::sqrt(se / static_cast<double>(y.cols()));
      ++cells;
    }
    ASSERT_GT(cells, 0) << row.level;
    EXPECT_EQ(row.cells, cells) << row.level;
    EXPECT_NEAR(row.rmse_macro, sum / cells, 1e-12) << row.level;
    ++checked;
  }
  EXPECT_EQ(checked, 2);  // bf16 and e4m3
}

TEST_F(EvaluateTest, TemplateIsLeaveRunOut) {
  wr::EvaluateOptions options;
  options.analysis = analysis("template", basic_analysis());
  options.figures = false;
  auto result = wr::evaluate_sweep(sweep, options);
  auto dir = wr::write_evaluation_report(result, options);
  const auto store = wr::SweepStore::open(sweep);
  // Class (e4m3, layer2.weight) has runs lr_scale=0.5 and lr_scale=4; the template of each is the other's outcome.
  const auto a = trace_of(sweep, store, "target/lr_scale=0.5/format=e4m3").group("layer2.weight").erased_fraction;
  const auto b = trace_of(sweep, store, "target/lr_scale=4.0/format=e4m3").group("layer2.weight").erased_fraction;
  const auto steps = trace_of(sweep, store, "target/lr_scale=4.0/format=e4m3").recorded_steps;
  bool differs = false;
  int checked = 0;
  for (auto& row : read_csv(dir / "series.csv")) {
    if (row["cell"] != "target/lr_scale=4.0/format=e4m3/layer2.weight") continue;
    const auto k = std::find(steps.begin(), steps.end(), std::stoll(row["step"])) - steps.begin();
    ASSERT_LT(std::size_t(k), steps.size());
    EXPECT_NEAR(std::stod(row["template"]), a[k], 1e-12);  // the other run only
    EXPECT_NEAR(std::stod(row["outcome"]), b[k], 1e-12);
    differs = differs || std::abs(0.5 * (a[k] + b[k]) - a[k]) > 1e-9;  // including itself would change it
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(steps.size()));
  EXPECT_TRUE(differs) << "the two runs' outcomes coincide: the test could not tell leave-run-out apart";
}

TEST_F(EvaluateTest, DeclaredHistoryIsRunsOfThisSweepThatAreNeverScored) {
  // history = "declared": the lr_scale=0.5 runs are historical, the lr_scale=4.0 runs are scored. Each class
  // (format, group) has one historical run, so the template of a scored run is that run's outcome, read here from
  // its trace file; a historical run is never scored, and declaring a scored run historical is refused.
  const std::string text = R"([analysis]
predictors = ["source", "template", "common-time"]
baselines = ["template", "common-time"]
scored_runs = ["target/lr_scale=4.0/*"]
[template]
history = "declared"
history_cells = ["target/lr_scale=0.5/*"]
[bootstrap]
resamples = 200
seed = 11
method = "percentile"
unit = "run"
)";
  wr::EvaluateOptions options;
  options.analysis = analysis("declared_history", text);
  options.figures = false;
  auto result = wr::evaluate_sweep(sweep, options);
  EXPECT_NE(result.template_history.find("declared historical"), std::string::npos) << result.template_history;
  auto dir = wr::write_evaluation_report(result, options);
  const auto store = wr::SweepStore::open(sweep);
  int checked = 0;
  std::set<std::string> scored;
  for (const char* format : {"bf16", "e4m3"}) {
    const std::string name = std::string("target/lr_scale=4.0/format=") + format;
    const auto history = trace_of(sweep, store, std::string("target/lr_scale=0.5/format=") + format);
    const auto steps = trace_of(sweep, store, name).recorded_steps;
    for (auto& row : read_csv(dir / "series.csv")) {
      scored.insert(row["cell"]);
      if (row["cell"].rfind(name + "/", 0) != 0) continue;
      const std::string group = row["cell"].substr(name.size() + 1);
      const auto a = history.group(group).erased_fraction;
      const auto k = std::find(steps.begin(), steps.end(), std::stoll(row["step"])) - steps.begin();
      ASSERT_LT(std::size_t(k), a.size());
      EXPECT_NEAR(std::stod(row["template"]), a[k], 1e-12) << row["cell"] << " step " << row["step"];
      ++checked;
    }
  }
  EXPECT_EQ(checked,
            4 * static_cast<int>(trace_of(sweep, store, "target/lr_scale=4.0/format=bf16").recorded_steps.size()));
  for (auto& cell : scored)
    EXPECT_EQ(cell.find("lr_scale=0.5"), std::string::npos) << "a historical run was scored: " << cell;

  // A run both historical and scored: refused, naming it.
  std::string overlap = text;
  overlap.replace(overlap.find("target/lr_scale=0.5/*"), 21, "target/*format=bf16");
  options.analysis = analysis("declared_overlap", overlap);
  try {
    (void)wr::evaluate_sweep(sweep, options);
    FAIL() << "a scored run was accepted as history";
  } catch (const wr::AnalysisError& e) {
    EXPECT_NE(std::string(e.what()).find("target/lr_scale=4.0/format=bf16 is declared historical and is also scored"),
              std::string::npos)
        << e.what();
  }
  // Without a cohort every target run is scored, so any declared history overlaps it.
  std::string no_cohort = text;
  no_cohort.erase(no_cohort.find("scored_runs"), std::string("scored_runs = [\"target/lr_scale=4.0/*\"]\n").size());
  options.analysis = analysis("declared_no_cohort", no_cohort);
  try {
    (void)wr::evaluate_sweep(sweep, options);
    FAIL() << "declared history without a cohort was accepted";
  } catch (const wr::AnalysisError& e) {
    EXPECT_NE(std::string(e.what()).find("every target run is scored"), std::string::npos) << e.what();
  }
  // history = "declared" needs history_cells.
  std::string no_cells = text;
  no_cells.erase(no_cells.find("history_cells"), std::string("history_cells = [\"target/lr_scale=0.5/*\"]\n").size());
  EXPECT_THROW((void)wr::parse_analysis_spec(no_cells, "c.toml"), wr::AnalysisError);
}

TEST_F(EvaluateTest, EveryDeclaredGateHasAVerdictWithItsInterval) {
  wr::EvaluateOptions options;
  options.analysis = analysis("gates", basic_analysis(kGates));
  options.figures = true;
  auto result = wr::evaluate_sweep(sweep, options);
  auto dir = wr::write_evaluation_report(result, options);
  auto gates = read_csv(dir / "gates.csv");
  ASSERT_EQ(gates.size(), 3u);
  std::map<std::string, std::map<std::string, std::string>> by_name;
  for (auto& g : gates) by_name[g["gate"]] = g;
  // An erased fraction lies in [0, 1], so any RMSE interval lies in [0, 1]: <= 10 passes, >= 5 fails.
  EXPECT_EQ(by_name["rmse bounded"]["verdict"], "pass");
  EXPECT_EQ(by_name["rmse impossible"]["verdict"], "fail");
  EXPECT_EQ(by_name["skill vs common time"]["verdict"], "pass");
  for (auto& g : gates) {
    EXPECT_EQ(g["resamples"], "200");
    EXPECT_EQ(g["seed"], "11");
    EXPECT_EQ(g["n_units"], "4");  // four target runs
    EXPECT_LE(std::stod(g["ci_lower"]), std::stod(g["ci_upper"]));
  }
  EXPECT_TRUE(fs::exists(dir / "report.md"));
  EXPECT_TRUE(fs::exists(dir / "report.html"));
  EXPECT_TRUE(fs::exists(dir / "figures" / "decomposition.svg"));
  EXPECT_TRUE(fs::exists(dir / "figures" / "anomaly_scatter.png"));
  EXPECT_TRUE(fs::exists(dir / "figures" / "most_predictable.svg"));
  EXPECT_TRUE(fs::exists(dir / "figures" / "least_predictable.svg"));
  // `--check`: one gate fails, so the check fails (exit 3), whatever the others say.
  EXPECT_EQ(wr::gate_check_status(result), wr::kCheckFail);
}

TEST_F(EvaluateTest, CheckStatusIsZeroOnlyWhenEveryDeclaredGatePasses) {
  wr::EvaluateOptions options;
  options.figures = false;
  options.analysis = analysis("check_pass", basic_analysis(R"(
[[gates]]
name = "rmse bounded"
statistic = "rmse_macro"
predictor = "source"
comparator = "<="
threshold = 10.0
)"));
  auto pass = wr::evaluate_sweep(sweep, options);
  ASSERT_EQ(pass.gates.size(), 1u);
  ASSERT_EQ(pass.gates[0].result.verdict, wbaudit::stats::Verdict::pass);
  EXPECT_EQ(wr::gate_check_status(pass), wr::kCheckPass);
  // No gate declared: nothing was checked, which a CI check must not read as a pass.
  options.analysis = analysis("check_none", basic_analysis());
  EXPECT_EQ(wr::gate_check_status(wr::evaluate_sweep(sweep, options)), wr::kCheckInconclusive);
}

// The CSV tables print round-trip precision (17 significant digits): parsing them gives back the exact doubles, so
// every statistic can be recomputed from them.
TEST_F(EvaluateTest, CsvNumbersRoundTripExactly) {
  wr::EvaluateOptions options;
  options.analysis = analysis("roundtrip", basic_analysis());
  options.figures = false;
  auto result = wr::evaluate_sweep(sweep, options);
  auto dir = wr::write_evaluation_report(result, options);
  const auto& source = result.predictor("source");
  int checked = 0;
  for (auto& row : read_csv(dir / "statistics.csv")) {
    if (row["predictor"] != "source") continue;
    if (row["statistic"] == "rmse_macro") {
      EXPECT_EQ(std::stod(row["estimate"]), source.metrics.rmse_macro);
      EXPECT_EQ(std::stod(row["ci_lower"]), source.intervals.at("rmse_macro").lower);
      ++checked;
    }
    if (row["statistic"] == "mae") {
      EXPECT_EQ(std::stod(row["estimate"]), source.metrics.mae);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
  const auto store = wr::SweepStore::open(sweep);
  const std::string target = "target/lr_scale=4.0/format=e4m3";
  const auto t = trace_of(sweep, store, target);
  const auto& measured = t.group("layer1.weight").erased_fraction;
  int rows = 0;
  for (auto& row : read_csv(dir / "series.csv")) {
    if (row["cell"] != target + "/layer1.weight") continue;
    const auto k =
        std::find(t.recorded_steps.begin(), t.recorded_steps.end(), std::stoll(row["step"])) - t.recorded_steps.begin();
    ASSERT_LT(std::size_t(k), measured.size());
    EXPECT_EQ(std::stod(row["outcome"]), measured[std::size_t(k)]) << row["outcome"];
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int>(measured.size()));
}

TEST_F(EvaluateTest, MissingRequiredCellMakesEveryGateInconclusiveWithTheReason) {
  const fs::path copy = copy_sweep("missing");
  const auto store = wr::SweepStore::open(copy);
  const std::string gone = "target/lr_scale=0.5/format=bf16";
  fs::remove_all(copy / "cells" / store.find_by_name(gone)->id / "attempts");
  // Without the removed run its class has no history left: declared inconclusive (not an error) here.
  auto path =
      analysis("required", "required_cells = [\"target/*\"]\n" +
                               basic_analysis(std::string("[template]\nmissing_class = \"inconclusive\"\n") + kGates));
  // Registered (retrospectively: the other outcomes exist) and evaluated without --analysis.
  (void)wr::register_analysis(store, path, /*retrospective=*/true, "tester");
  wr::EvaluateOptions options;
  options.figures = false;
  auto result = wr::evaluate_sweep(copy, options);
  EXPECT_EQ(result.standing, "retrospective");
  ASSERT_EQ(result.gates.size(), 3u);
  for (auto& g : result.gates) {
    EXPECT_EQ(g.result.verdict, wbaudit::stats::Verdict::inconclusive) << g.spec.gate.name;
    std::string reasons;
    for (auto& r : g.result.reasons) reasons += r + "\n";
    EXPECT_NE(reasons.find(gone), std::string::npos) << reasons;
    EXPECT_NE(reasons.find("missing"), std::string::npos) << reasons;
  }
  EXPECT_EQ(result.cells.size(), 6u);  // the three present runs x two groups are still scored
  EXPECT_EQ(wr::gate_check_status(result), wr::kCheckInconclusive);
}

TEST_F(EvaluateTest, NeverOverwritesAnEarlierEvaluation) {
  const fs::path copy = copy_sweep("twice");
  wr::EvaluateOptions options;
  options.analysis = analysis("twice", basic_analysis());
  options.figures = false;
  auto first = wr::evaluate_sweep(copy, options);
  auto a = wr::write_evaluation_report(first, options);
  auto second = wr::evaluate_sweep(copy, options);
  auto b = wr::write_evaluation_report(second, options);
  EXPECT_NE(a, b);
  EXPECT_TRUE(fs::exists(a / "report.md"));
  EXPECT_TRUE(fs::exists(b / "report.md"));
  // An explicit --out that exists is refused, and its content is kept.
  options.out = a;
  const auto before = fs::last_write_time(a / "report.md");
  EXPECT_THROW(wr::write_evaluation_report(second, options), wr::StoreError);
  EXPECT_EQ(fs::last_write_time(a / "report.md"), before);
}

TEST_F(EvaluateTest, TemplateClassWithoutHistoryIsAnErrorOrInconclusiveAsDeclared) {
  const std::string only_bf16 = "[template]\nhistory_cells = [\"target/*format=bf16\"]\n";
  wr::EvaluateOptions options;
  options.figures = false;
  options.analysis = analysis("nohistory", basic_analysis(only_bf16));
  try {
    (void)wr::evaluate_sweep(sweep, options);
    FAIL() << "a template class without history gave a number";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3"), std::string::npos) << e.what();
  }
  options.analysis =
      analysis("nohistory_inconclusive", basic_analysis(only_bf16 + "missing_class = \"inconclusive\"\n" + kGates));
  auto result = wr::evaluate_sweep(sweep, options);
  EXPECT_FALSE(result.predictor("template").unavailable.empty());
  for (auto& g : result.gates) {
    if (g.spec.predictor == "template") {
      EXPECT_EQ(g.result.verdict, wbaudit::stats::Verdict::inconclusive);
      ASSERT_FALSE(g.result.reasons.empty());
      EXPECT_NE(g.result.reasons.front().find("without history"), std::string::npos) << g.result.reasons.front();
    }
  }
}

TEST(AnalysisSpec, UnknownStatisticNamesItAndTheLine) {
  const std::string text =
      "[analysis]\npredictors = [\"source\", \"template\"]\nbaselines = [\"template\"]\n\n[[gates]]\n"
      "name = \"g\"\nstatistic = \"rmse_typo\"\npredictor = \"source\"\ncomparator = \"<=\"\nthreshold = 0.1\n";
  try {
    (void)wr::parse_analysis_spec(text, "a.toml");
    FAIL() << "accepted an unknown statistic";
  } catch (const wr::AnalysisError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rmse_typo"), std::string::npos) << what;
    EXPECT_NE(what.find("a.toml:7:"), std::string::npos) << what;
    EXPECT_NE(what.find("gates[0].statistic"), std::string::npos) << what;
  }
}

TEST(AnalysisSpec, BadInputIsRefusedWithFileLineAndKey) {
  auto message = [](const std::string& text) {
    try {
      (void)wr::parse_analysis_spec(text, "b.toml");
    } catch (const wr::AnalysisError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("[analysis]\npredictors = [\"oracle\"]\n")
                .find("b.toml:2: analysis.predictors: unknown "
                      "predictor \"oracle\""),
            std::string::npos);
  EXPECT_NE(message("[bootstrap]\nresampels = 10\n").find("b.toml:2: bootstrap.resampels: unknown key"),
            std::string::npos);
  EXPECT_NE(message("[bootstrap]\nmethod = \"student\"\n").find("bootstrap.method"), std::string::npos);
  // A statistic stats knows but evaluate does not compute.
  EXPECT_NE(message("[[gates]]\nname = \"r\"\nstatistic = \"recovery\"\ncomparator = \"<=\"\nthreshold = 1\n")
                .find("not computed by wbaudit evaluate"),
            std::string::npos);
  // skill against a baseline the analysis does not declare.
  EXPECT_NE(message("[analysis]\npredictors = [\"source\", \"template\"]\nbaselines = [\"template\"]\n[[gates]]\n"
                    "name = \"s\"\nstatistic = \"skill_vs_common_time\"\npredictor = \"source\"\ncomparator = "
                    "\">=\"\nthreshold = 0\n")
                .find("common-time is not a declared baseline"),
            std::string::npos);
  EXPECT_NE(message("[[gates]]\nname = \"n\"\nstatistic = \"bias\"\npredictor = \"source\"\ncomparator = "
                    "\"<=\"\nthreshold = nan\n")
                .find("non-finite"),
            std::string::npos);
  // [source] method: the two known values; anything else names the file, line and key.
  EXPECT_NE(message("[source]\nmethod = \"grid\"\n").find("b.toml:2: source.method: unknown value \"grid\""),
            std::string::npos);
  EXPECT_EQ(wr::parse_analysis_spec("[source]\nmethod = \"analytic-grid\"\n", "m.toml").source_method, "analytic-grid");
  EXPECT_EQ(wr::parse_analysis_spec("[source]\nreference = \"declared\"\n", "m.toml").source_method, "projection");
  // [gates.NAME] tables are accepted too.
  auto spec = wr::parse_analysis_spec(
      "[gates.acc]\nstatistic = \"rmse_macro\"\npredictor = \"source\"\ncomparator = \"<=\"\nthreshold = 0.1\n",
      "c.toml");
  ASSERT_EQ(spec.gates.size(), 1u);
  EXPECT_EQ(spec.gates[0].gate.name, "acc");
  EXPECT_EQ(spec.gates[0].gate.direction, wbaudit::stats::GateDirection::at_most);
}

// A sweep whose targets differ only in write-back policy: each target is scored against the projection of its own
// policy (the reference's expected erased fraction under SR / dead-zone SR, the exact projected events under
// nearest), the report and cells.csv name it, and summary.csv of `wbaudit run` uses the same series.
TEST(EvaluatePolicies, EachTargetIsScoredAgainstTheProjectionOfItsOwnPolicy) {
  const fs::path root = fs::temp_directory_path() / ("wbaudit_evaluate_policy_" + wr::random_uuid());
  fs::create_directories(root);
  std::string spec_text = kSpec;
  spec_text.replace(spec_text.find("[grid]"), std::string::npos,
                    "[grid]\n\"target.format\" = [\"e4m3\"]\n\"optimizer.lr_scale\" = [1.0, 4.0]\n"
                    "\"target.policy\" = [\"nearest\", \"stochastic\", \"deadzone-sr\"]\n"
                    "[evaluation]\ngroups = [\"layer1.weight\", \"layer2.weight\"]\n");
  spit(root / "spec.toml", spec_text);
  wr::SweepSpec spec = wr::load_sweep_spec(root / "spec.toml");
  wr::RunOptions run;
  run.out = root / "sweep";
  run.progress = false;
  ASSERT_EQ(wr::run_sweep(spec, run).failed, 0u);
  (void)wr::write_sweep_outputs(wr::SweepStore::open(run.out), spec);  // what `wbaudit run` writes after the cells

  wr::EvaluateOptions options;
  options.figures = false;
  options.out = root / "eval";
  std::ofstream(root / "a.toml") << "[analysis]\npredictors = [\"source\", \"common-time\"]\nbaselines = "
                                    "[\"common-time\"]\n[bootstrap]\nresamples = 50\nmethod = \"percentile\"\n";
  options.analysis = root / "a.toml";
  auto result = wr::evaluate_sweep(run.out, options);
  auto dir = wr::write_evaluation_report(result, options);
  const auto store = wr::SweepStore::open(run.out);
  ASSERT_EQ(result.cells.size(), 12u);
  int sr_cells = 0;
  bool some_differ = false;
  auto series = read_csv(dir / "series.csv");
  for (std::size_t i = 0; i < result.cells.size(); ++i) {
    const std::string& run_name = result.runs[i];
    const std::string policy = run_name.substr(run_name.rfind('=') + 1);
    ASSERT_EQ(result.projections[i], policy) << run_name;  // the projection named after the target's policy
    const auto ref = trace_of(run.out, store, store.find_by_name(run_name)->reference);
    const auto& projected = ref.group(result.groups[i]).projected.at("e4m3");
    const auto& expected = policy == "nearest" ? projected.fraction : projected.expected.at(policy).fraction;
    int k = 0;
    for (auto& row : series) {
      if (row["cell"] != result.cells[i]) continue;
      ASSERT_LT(std::size_t(k), expected.size());
      EXPECT_EQ(std::stod(row["source"]), expected[std::size_t(k)]) << result.cells[i] << " step " << row["step"];
      some_differ = some_differ || std::fabs(expected[std::size_t(k)] - projected.fraction[std::size_t(k)]) > 0.02;
      ++k;
    }
    EXPECT_EQ(k, static_cast<int>(expected.size()));
    sr_cells += policy != "nearest";
  }
  EXPECT_EQ(sr_cells, 8);
  EXPECT_TRUE(some_differ) << "SR and nearest projections coincide here: the test cannot tell them apart";
  std::stringstream md;
  md << std::ifstream(dir / "report.md").rdbuf();
  EXPECT_NE(md.str().find("| source projection | deadzone-sr for 4 cells, nearest for 4 cells, stochastic for 4 cells"),
            std::string::npos);
  for (auto& row : read_csv(dir / "cells.csv"))
    EXPECT_EQ(row["projection"], row["run"].substr(row["run"].rfind('=') + 1));
  for (auto& row : read_csv(run.out / "summary.csv")) EXPECT_EQ(row["projection"], row["policy"]) << row["cell"];
  fs::remove_all(root);
}

// Under a drop policy the report states what was kept and dropped.csv lists every dropped cell or step. The missing
// outcomes are made for real: a `step` schedule with gamma = 1e-30 drives the fp32 learning rate to 0 after two
// decays (lr * 1e-60 underflows), so from step 40 on every proposal is 0 and erased / nonzero is undefined (NaN) in
// the cells with that schedule, while the constant-schedule cells stay complete. The expected drops are read from
// the traces' nonzero counts, not from evaluate.
TEST(EvaluateMissing, DropPoliciesStateTheCountsAndListEveryDropInDroppedCsv) {
  const fs::path root = fs::temp_directory_path() / ("wbaudit_evaluate_drop_" + wr::random_uuid());
  fs::create_directories(root);
  std::string spec_text = kSpec;
  spec_text.replace(spec_text.find("[schedule]\nkind = \"constant\"\n"),
                    std::string("[schedule]\nkind = \"constant\"\n").size(),
                    "[schedule]\nkind = \"constant\"\nstep_size = 20\ngamma = 1e-30\n");
  spec_text.replace(spec_text.find("[grid]"), std::string::npos,
                    "[grid]\n\"target.format\" = [\"bf16\", \"e4m3\"]\n\"optimizer.lr_scale\" = [0.5, 4.0]\n"
                    "\"schedule.kind\" = [\"constant\", \"step\"]\n"
                    "[evaluation]\ngroups = [\"layer1.weight\", \"layer2.weight\"]\n");
  spit(root / "spec.toml", spec_text);
  wr::SweepSpec spec = wr::load_sweep_spec(root / "spec.toml");
  wr::RunOptions run;
  run.out = root / "sweep";
  run.progress = false;
  ASSERT_EQ(wr::run_sweep(spec, run).failed, 0u);
  (void)wr::write_sweep_outputs(wr::SweepStore::open(run.out), spec);  // what `wbaudit run` writes after the cells

  // Independent expectation from the target traces: (cell label, step) pairs with no nonzero proposal.
  const auto store = wr::SweepStore::open(run.out);
  std::set<std::string> incomplete_cells, all_cells;
  std::set<std::int64_t> incomplete_steps;
  std::vector<std::int64_t> steps;
  for (const auto& cell : store.cells()) {
    if (cell.role != "target") continue;
    const auto t = trace_of(run.out, store, cell.name);
    steps = t.recorded_steps;
    for (const char* g : {"layer1.weight", "layer2.weight"}) {
      const std::string label = cell.name + "/" + g;
      all_cells.insert(label);
      const auto& nonzero = t.group(g).nonzero;
      for (std::size_t k = 0; k < nonzero.size(); ++k) {
        if (nonzero[k] != 0) continue;
        incomplete_cells.insert(label);
        incomplete_steps.insert(t.recorded_steps[k]);
      }
    }
  }
  ASSERT_EQ(all_cells.size(), 16u);
  ASSERT_EQ(incomplete_cells.size(), 8u) << "every step-schedule cell should lose its late proposals";
  ASSERT_FALSE(incomplete_steps.empty());
  ASSERT_LT(incomplete_steps.size(), steps.size());

  auto evaluate_with = [&](const std::string& policy) {
    wr::EvaluateOptions options;
    options.figures = false;
    options.out = root / ("eval_" + policy);
    std::ofstream(root / (policy + ".toml"))
        << "[analysis]\npredictors = [\"source\", \"common-time\"]\nbaselines = [\"common-time\"]\nmissing = \""
        << policy << "\"\n[bootstrap]\nresamples = 50\nmethod = \"percentile\"\n";
    options.analysis = root / (policy + ".toml");
    auto result = wr::evaluate_sweep(run.out, options);
    auto dir = wr::write_evaluation_report(result, options);
    std::stringstream md;
    md << std::ifstream(dir / "report.md").rdbuf();
    return std::tuple{result, read_csv(dir / "dropped.csv"), md.str()};
  };

  {
    auto [result, dropped, md] = evaluate_with("drop_incomplete_cells");
    std::set<std::string> outcome_dropped;
    for (auto& row : dropped) {
      EXPECT_EQ(row["kind"], "cell") << "a cell policy drops no step";
      if (row["table"] == "outcome") outcome_dropped.insert(row["label"]);
    }
    EXPECT_EQ(outcome_dropped, incomplete_cells);
    EXPECT_EQ(result.kept_cells, all_cells.size() - incomplete_cells.size());
    EXPECT_EQ(result.kept_steps, steps.size());
    const std::string expected = "16 x " + std::to_string(steps.size()) +
                                 " before drop_incomplete_cells; the outcome kept 8 x " + std::to_string(steps.size());
    EXPECT_NE(md.find(expected), std::string::npos) << expected << "\nnot in\n" << md;
  }
  {
    auto [result, dropped, md] = evaluate_with("drop_incomplete_steps");
    std::set<std::int64_t> outcome_dropped;
    for (auto& row : dropped) {
      EXPECT_EQ(row["kind"], "step") << "a step policy drops no cell";
      if (row["table"] == "outcome") outcome_dropped.insert(std::stoll(row["label"]));
    }
    EXPECT_EQ(outcome_dropped, incomplete_steps);
    EXPECT_EQ(result.kept_cells, all_cells.size());
    EXPECT_EQ(result.kept_steps, steps.size() - incomplete_steps.size());
    const std::string expected = "16 x " + std::to_string(steps.size()) +
                                 " before drop_incomplete_steps; the outcome kept 16 x " +
                                 std::to_string(steps.size() - incomplete_steps.size());
    EXPECT_NE(md.find(expected), std::string::npos) << expected << "\nnot in\n" << md;
  }
  fs::remove_all(root);
}

// Issue 30: run-level directional specificity. The anomalies are taken against the mean over the runs of the same
// parameter group; the test recomputes run_anomaly_correlation of `source` from series.csv (the group is the cell's
// last path component), plainly, and checks the estimate. `common-time` is the same for every run of a group at each
// step, so it has no run-specific signal: a gate on its run-level correlation fails with that reason, while the
// across-cells statistic of the same predictor is undefined (inconclusive), as before.
TEST_F(EvaluateTest, RunLevelDirectionalStatisticsAndTheirGates) {
  wr::EvaluateOptions options;
  options.figures = false;
  // Units = cells: with 4 runs, a resample of runs often draws one run only, which has no run-level contrast.
  std::string text = basic_analysis(R"(
[[gates]]
name = "common-time run level"
statistic = "run_anomaly_correlation"
predictor = "common-time"
comparator = ">="
threshold = 0.3

[[gates]]
name = "common-time across cells"
statistic = "anomaly_correlation"
predictor = "common-time"
comparator = ">="
threshold = 0.3

[[gates]]
name = "source run level"
statistic = "run_anomaly_correlation"
predictor = "source"
comparator = ">="
threshold = -1.0
)");
  text.replace(text.find("unit = \"run\""), std::string("unit = \"run\"").size(), "unit = \"cell\"");
  options.analysis = analysis("run_level", text);
  auto result = wr::evaluate_sweep(sweep, options);
  auto dir = wr::write_evaluation_report(result, options);
  // unit = "cell" on cells that share runs (two groups per run): warned, in the result and in the report.
  ASSERT_EQ(result.warnings.size(), 1u);
  EXPECT_NE(result.warnings[0].find("correlated cells"), std::string::npos) << result.warnings[0];
  std::ifstream md(dir / "report.md");
  const std::string report((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(report.find("Warning: bootstrap unit = \"cell\""), std::string::npos);
  ASSERT_EQ(result.gates.size(), 3u);
  EXPECT_EQ(result.gates[0].result.verdict, wbaudit::stats::Verdict::fail);
  ASSERT_FALSE(result.gates[0].result.reasons.empty());
  EXPECT_NE(result.gates[0].result.reasons[0].find("no run-specific signal"), std::string::npos)
      << result.gates[0].result.reasons[0];
  EXPECT_EQ(result.gates[1].result.verdict, wbaudit::stats::Verdict::inconclusive);
  EXPECT_EQ(result.gates[2].result.verdict, wbaudit::stats::Verdict::pass)  // a correlation is >= -1
      << (result.gates[2].result.reasons.empty() ? "" : result.gates[2].result.reasons[0]);

  // Plain recomputation from series.csv: group -> step -> run values, then the within-group anomalies.
  std::map<std::string, std::map<std::string, std::map<std::string, std::pair<double, double>>>> by_group;
  for (auto& row : read_csv(dir / "series.csv")) {
    const std::string cell = row["cell"];
    const std::string group = cell.substr(cell.rfind('/') + 1);
    by_group[group][row["step"]][cell] = {std::stod(row["outcome"]), std::stod(row["source"])};
  }
  long double sxy = 0, sxx = 0, syy = 0;
  for (auto& [group, steps] : by_group) {
    for (auto& [step, cells] : steps) {
      long double my = 0, mp = 0;
      for (auto& [cell, v] : cells) {
        my += v.first;
        mp += v.second;
      }
      my /= cells.size();
      mp /= cells.size();
      for (auto& [cell, v] : cells) {
        const long double ay = v.first - my, ap = v.second - mp;
        sxy += ap * ay;
        sxx += ap * ap;
        syy += ay * ay;
      }
    }
  }
  const double expected = double(sxy / std::sqrt(sxx * syy));
  const auto& source = result.predictor("source");
  ASSERT_TRUE(source.run_directional.anomaly_correlation.has_value());
  EXPECT_NEAR(*source.run_directional.anomaly_correlation, expected, 1e-12);
  EXPECT_TRUE(source.run_directional_note.empty());
  EXPECT_FALSE(result.predictor("common-time").run_directional_note.empty());
  // statistics.csv carries the run-level rows next to the across-cells ones.
  int run_rows = 0;
  for (auto& row : read_csv(dir / "statistics.csv")) {
    if (row["predictor"] == "source" && row["statistic"] == "run_anomaly_correlation") {
      EXPECT_EQ(std::stod(row["estimate"]), *source.run_directional.anomaly_correlation);
      ++run_rows;
    }
  }
  EXPECT_EQ(run_rows, 1);
}

// Issue 31: typos in an analysis get a "did you mean": a predictor, a gate statistic, a key.
TEST(AnalysisSpec, TyposGetADidYouMean) {
  auto message = [](const std::string& text) {
    try {
      (void)wr::parse_analysis_spec(text, "a.toml");
    } catch (const wr::AnalysisError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string predictor = message("[analysis]\npredictors = [\"sorce\"]\n");
  EXPECT_NE(predictor.find("unknown predictor \"sorce\" (did you mean \"source\"?)"), std::string::npos) << predictor;
  const std::string statistic = message(
      "[[gates]]\nname = \"x\"\nstatistic = \"rmse_macr\"\npredictor = \"source\"\ncomparator = \"<=\"\n"
      "threshold = 1.0\n");
  EXPECT_NE(statistic.find("a.toml:3:"), std::string::npos) << statistic;
  EXPECT_NE(statistic.find("did you mean \"rmse_macro\"?"), std::string::npos) << statistic;
  const std::string key = message("[bootstrap]\nresampels = 100\n");
  EXPECT_NE(key.find("did you mean \"resamples\"?"), std::string::npos) << key;
}

// Issue 31: too few resampling units decide no gate. The fixture has 4 target runs (35 distinct resamples): under the
// default minimum of 5 units every gate is inconclusive, naming n and the count; min_units = 4 decides them.
TEST_F(EvaluateTest, TooFewUnitsMakeEveryGateInconclusive) {
  wr::EvaluateOptions options;
  options.figures = false;
  std::string text = basic_analysis(kGates);
  text.erase(text.find("min_units = 4"), text.find('\n', text.find("min_units = 4")) - text.find("min_units = 4") + 1);
  options.analysis = analysis("few_units", text);
  auto result = wr::evaluate_sweep(sweep, options);
  ASSERT_EQ(result.gates.size(), 3u);
  for (const auto& g : result.gates) {
    EXPECT_EQ(g.result.verdict, wbaudit::stats::Verdict::inconclusive) << g.spec.gate.name;
    ASSERT_FALSE(g.result.reasons.empty());
    EXPECT_NE(g.result.reasons[0].find("n = 4 resampling units give only 35 distinct bootstrap resamples, below the "
                                       "analysis' minimum of 5 units"),
              std::string::npos)
        << g.result.reasons[0];
  }
  EXPECT_NE(result.effective_analysis.find("min_units = 5"), std::string::npos);
  options.analysis = analysis("enough_units", basic_analysis(kGates));
  auto decided = wr::evaluate_sweep(sweep, options);
  EXPECT_EQ(decided.gates[0].result.verdict, wbaudit::stats::Verdict::pass);
}

// C(2n - 1, n), checked against the closed values: n = 1..5 -> 1, 3, 10, 35, 126; n = 30 -> C(59, 30).
TEST(GateUnits, DistinctResamplesAreMultisetsOfUnits) {
  EXPECT_EQ(wbaudit::runners::evaluation::distinct_resamples_text(1), "1");
  EXPECT_EQ(wbaudit::runners::evaluation::distinct_resamples_text(2), "3");
  EXPECT_EQ(wbaudit::runners::evaluation::distinct_resamples_text(3), "10");
  EXPECT_EQ(wbaudit::runners::evaluation::distinct_resamples_text(4), "35");
  EXPECT_EQ(wbaudit::runners::evaluation::distinct_resamples_text(5), "126");
  EXPECT_EQ(wbaudit::runners::evaluation::distinct_resamples_text(30), "59132290782430712");
  EXPECT_EQ(wbaudit::runners::evaluation::distinct_resamples_text(100), "more than 10^18");
}
