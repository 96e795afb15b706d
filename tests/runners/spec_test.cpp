// Sweep spec parsing: grid expansion, shared references, lr_scale, and errors that name file, line and key.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runners/exec/sweep_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "sim/run.hpp"

namespace {

using wbaudit::runners::CellRole;
using wbaudit::runners::parse_sweep_spec;
using wbaudit::runners::SpecError;

// Line numbers matter below: line 1 is empty, `seed` is on line 2, `[model]` on line 6.
const std::string kBase = R"(
seed = 3
steps = 50
[sweep]
name = "tiny"
[model]
kind = "two_layer"
input_dim = 4
hidden = 8
output_dim = 2
[data]
batch = 8
[optimizer]
kind = "adam"
[schedule]
kind = "constant"
[record]
kind = "every"
[target]
policy = "nearest"
format = "bf16"
)";

std::string message_of(const std::string& text) {
  try {
    parse_sweep_spec(text, "spec.toml");
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SweepSpec, ReferencesAreSharedAcrossFormats) {
  // 2 formats x 2 absolute learning rates x 2 widths = 8 targets; a reference does not depend on the target
  // format, so 2 x 2 = 4 references serve them.
  auto spec = parse_sweep_spec(kBase + R"(
[grid]
"target.format" = ["bf16", "e4m3"]
"optimizer.lr" = [0.001, 0.01]
"model.hidden" = [8, 16]
)",
                               "spec.toml");
  EXPECT_EQ(spec.name, "tiny");
  EXPECT_EQ(spec.count(CellRole::target), 8u);
  EXPECT_EQ(spec.count(CellRole::reference), 4u);
  for (const auto& cell : spec.cells) {
    if (cell.role != CellRole::target) continue;
    const auto& ref = spec.cell(cell.reference);
    EXPECT_EQ(ref.role, CellRole::reference);
    EXPECT_EQ(ref.config.at("mode"), "reference");
    EXPECT_FALSE(ref.config.contains("target"));
    EXPECT_EQ(ref.config.at("optimizer").at("lr"), cell.config.at("optimizer").at("lr"));
    EXPECT_EQ(ref.config.at("model").at("hidden"), cell.config.at("model").at("hidden"));
    EXPECT_EQ(ref.config.at("seed"), 3);
    // Every reference projects every target format of the grid.
    EXPECT_EQ(ref.config.at("project_formats"), (nlohmann::json{"bf16", "e4m3"}));
  }
}

TEST(SweepSpec, ReferenceMarginFormatsReachTheReferencesOnlyWhenGiven) {
  const std::string grid = R"(
[grid]
"target.format" = ["bf16", "e4m3"]
)";
  for (const auto& cell : parse_sweep_spec(kBase + grid, "spec.toml").cells) {
    EXPECT_FALSE(cell.config.contains("margin_formats")) << cell.name;  // by default: ids as before
  }
  const auto spec =
      parse_sweep_spec(kBase + "[reference]\nmargin_formats = [\"int4\", \"e4m3\", \"bf16\"]\n" + grid, "spec.toml");
  ASSERT_EQ(spec.count(CellRole::reference), 1u);
  for (const auto& cell : spec.cells) {
    if (cell.role == CellRole::reference) {  // in the layout's order
      EXPECT_EQ(cell.config.at("margin_formats"), (nlohmann::json{"bf16", "e4m3", "int4"}));
    } else {
      EXPECT_FALSE(cell.config.contains("margin_formats")) << cell.name;
    }
  }
  EXPECT_NE(message_of(kBase + "[reference]\nmargin_formats = [\"e4m3\", \"fp32\"]\n" + grid)
                .find("spec.toml:" + std::to_string(std::count(kBase.begin(), kBase.end(), '\n') + 2) +
                      ": reference.margin_formats: margin histogram: format \"fp32\" (entry 1) is not one"),
            std::string::npos)
      << message_of(kBase + "[reference]\nmargin_formats = [\"e4m3\", \"fp32\"]\n" + grid);
  // every target format of the grid the histogram can record must be kept (block formats have their own record)
  EXPECT_NE(message_of(kBase + "[reference]\nmargin_formats = [\"e4m3\"]\n" + grid)
                .find(": reference.margin_formats: lacks \"bf16\", a target format of the grid"),
            std::string::npos)
      << message_of(kBase + "[reference]\nmargin_formats = [\"e4m3\"]\n" + grid);
  EXPECT_EQ(message_of(kBase + "[reference]\nmargin_formats = [\"e4m3\"]\n[grid]\n\"target.format\" = [\"e4m3\", "
                               "\"mxfp8_e4m3\"]\n"),
            "(no error)");
  EXPECT_NE(message_of(kBase + "[grid]\n\"target.format\" = [\"bf16\"]\nmargin_formats = [[\"bf16\"]]\n")
                .find("grid.margin_formats: cannot be a grid axis"),
            std::string::npos);
}

TEST(SweepSpec, LearningRateScaleIsRelativeToMantissaWidth) {
  // lr = s * 2^-(M+1): e4m3 has M = 3, so s = 2 gives 2 * 2^-4 = 0.125; bf16 has M = 7: 2 * 2^-8 = 0.0078125.
  auto spec = parse_sweep_spec(kBase + R"(
[grid]
"target.format" = ["e4m3", "bf16"]
"optimizer.lr_scale" = [2.0]
)",
                               "spec.toml");
  ASSERT_EQ(spec.count(CellRole::target), 2u);
  for (const auto& cell : spec.cells) {
    if (cell.role != CellRole::target) continue;
    double lr = cell.config.at("optimizer").at("lr").get<double>();
    EXPECT_FALSE(cell.config.at("optimizer").contains("lr_scale"));
    if (cell.config.at("target").at("format") == "e4m3") {
      EXPECT_EQ(lr, 0.125);
    }
    if (cell.config.at("target").at("format") == "bf16") {
      EXPECT_EQ(lr, 0.0078125);
    }
  }
  // Distinct learning rates: two references.
  EXPECT_EQ(spec.count(CellRole::reference), 2u);
}

// intK: lr = s / (2 L), L = 2^(K-1) - 1, half the step of a tensor of absmax 1 (docs/specs.md). By hand: int4 has
// L = 7, so s = 0.5 gives 0.5 / 14; int8 has L = 127, so s = 0.5 gives 0.5 / 254; int2 has L = 1: 0.5 / 2 = 0.25.
TEST(SweepSpec, LearningRateScaleOfIntegerFormatsIsRelativeToTheirStep) {
  auto spec = parse_sweep_spec(kBase + R"(
[grid]
"target.format" = ["int4", "int8", "int2"]
"optimizer.lr_scale" = [0.5]
)",
                               "spec.toml");
  ASSERT_EQ(spec.count(CellRole::target), 3u);
  std::map<std::string, double> lr;
  for (const auto& cell : spec.cells) {
    if (cell.role != CellRole::target) continue;
    EXPECT_FALSE(cell.config.at("optimizer").contains("lr_scale"));
    lr[cell.config.at("target").at("format").get<std::string>()] = cell.config.at("optimizer").at("lr").get<double>();
  }
  EXPECT_EQ(lr.at("int4"), 0.5 / 14);
  EXPECT_EQ(lr.at("int8"), 0.5 / 254);
  EXPECT_EQ(lr.at("int2"), 0.25);
  EXPECT_EQ(spec.count(CellRole::reference), 3u);  // three learning rates
}

// Cell names: the axes sorted by dotted path (not in file order), the last one varying fastest; references named by
// their non-target axes and lr (docs/specs.md "Cell names and their order").
TEST(SweepSpec, CellNamesFollowTheSortedAxes) {
  auto spec = parse_sweep_spec(kBase + R"(
[grid]
"target.format" = ["e4m3", "bf16"]
seed = [5, 6]
"optimizer.lr" = [0.5]
)",
                               "spec.toml");
  std::vector<std::string> targets, references;
  for (const auto& cell : spec.cells) (cell.role == CellRole::target ? targets : references).push_back(cell.name);
  EXPECT_EQ(targets,
            (std::vector<std::string>{"target/lr=0.5/seed=5/format=e4m3", "target/lr=0.5/seed=5/format=bf16",
                                      "target/lr=0.5/seed=6/format=e4m3", "target/lr=0.5/seed=6/format=bf16"}));
  EXPECT_EQ(references, (std::vector<std::string>{"reference/lr=0.5/seed=5", "reference/lr=0.5/seed=6"}));
}

TEST(SweepSpec, NestedGridTablesAreAxesToo) {
  auto spec = parse_sweep_spec(kBase + R"(
[grid.target]
format = ["e2m1", "e3m2", "e5m2"]
[grid.model]
hidden = [4, 8]
)",
                               "spec.toml");
  EXPECT_EQ(spec.count(CellRole::target), 6u);
}

TEST(SweepSpec, ErrorsNameFileLineAndKey) {
  EXPECT_NE(message_of("bogus = 1\n" + kBase + "[grid]\nseed = [1]\n").find("spec.toml:1: unknown key \"bogus\""),
            std::string::npos);
  // An empty axis: [grid] is on line 22 of kBase + this text, the axis on line 23.
  EXPECT_NE(message_of(kBase + "[grid]\nseed = []\n").find("spec.toml:23: grid.seed: empty axis"), std::string::npos);
  EXPECT_NE(message_of(kBase).find("no [grid] table"), std::string::npos);
  // Unknown format names the value and lists the known ones.
  std::string unknown = message_of(kBase + "[grid]\n\"target.format\" = [\"e4m4\"]\n");
  EXPECT_NE(unknown.find("spec.toml:"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("e4m4"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("e4m3"), std::string::npos) << unknown;
  // TOML syntax errors carry their line.
  EXPECT_NE(message_of("seed = = 1\n").find("spec.toml:1:"), std::string::npos);
  EXPECT_NE(message_of(kBase + "[evaluation]\nthreshold = 1.5\n[grid]\nseed = [1]\n")
                .find("spec.toml:23: evaluation.threshold: must be in (0, 1]"),
            std::string::npos);
  // A bad value inside the run configuration is caught by the simulator's parser and mapped to its line (3).
  std::string steps = kBase;
  steps.replace(steps.find("steps = 50"), 10, "steps = 0 ");
  std::string message = message_of(steps + "[grid]\nseed = [1]\n");
  EXPECT_NE(message.find("spec.toml:3: steps"), std::string::npos) << message;
}

// toml++ reports a redefined quoted or dotted key mangled ("tatarget.format"); the message names it as written.
TEST(SweepSpec, DuplicateKeysAreNamedAsWritten) {
  // [grid] is line 22, the first axis line 23, the duplicate line 24.
  const std::string quoted =
      message_of(kBase + "[grid]\n\"target.format\" = [\"bf16\"]\n\"target.format\" = [\"e4m3\"]\n");
  EXPECT_NE(quoted.find("spec.toml:24: duplicate key \"target.format\""), std::string::npos) << quoted;
  EXPECT_EQ(quoted.find("tatarget"), std::string::npos) << quoted;
  const std::string dotted = message_of("target.format = \"bf16\"\ntarget.format = \"e4m3\"\n");
  EXPECT_NE(dotted.find("spec.toml:2: duplicate key \"target.format\""), std::string::npos) << dotted;
  const std::string plain = message_of(kBase + "policy = \"stochastic\"\n");
  EXPECT_NE(plain.find("spec.toml:22: duplicate key \"policy\""), std::string::npos) << plain;
}

TEST(SweepSpec, EvaluationGroupsAreCheckedAgainstTheModelBeforeAnyCellRuns) {
  // [evaluation] on line 22, groups on line 23: a misspelt group is refused at parse time with its line.
  const std::string bad = message_of(kBase + "[evaluation]\ngroups = [\"layer1.weights\"]\n[grid]\nseed = [1]\n");
  EXPECT_NE(bad.find("spec.toml:23: evaluation.groups: \"layer1.weights\" is not a parameter group of target"),
            std::string::npos)
      << bad;
  EXPECT_NE(bad.find("layer1.weight, layer1.bias, layer2.weight, layer2.bias"), std::string::npos) << bad;
  EXPECT_EQ(message_of(kBase + "[evaluation]\ngroups = [\"layer2.weight\"]\n[grid]\nseed = [1]\n"), "(no error)");
  // The decoder's groups are its tensors.
  std::string decoder = kBase;
  decoder.replace(decoder.find("kind = \"two_layer\"\ninput_dim = 4\nhidden = 8\noutput_dim = 2"),
                  std::string("kind = \"two_layer\"\ninput_dim = 4\nhidden = 8\noutput_dim = 2").size(),
                  "kind = \"decoder\"\nvocab = 8\nwidth = 8\nheads = 2\nlayers = 1\nmlp_hidden = 8\nseq_len = 4");
  EXPECT_EQ(message_of(decoder + "[evaluation]\ngroups = [\"blocks.0.mlp.up.weight\"]\n[grid]\nseed = [1]\n"),
            "(no error)");
  EXPECT_NE(message_of(decoder + "[evaluation]\ngroups = [\"blocks.1.mlp.up.weight\"]\n[grid]\nseed = [1]\n")
                .find("\"blocks.1.mlp.up.weight\" is not a parameter group"),
            std::string::npos);
}

}  // namespace

namespace {

using wbaudit::runners::load_sweep_spec;

TEST(SpecLimits, SweepNamesThatLeaveRunsAreRefused) {
  for (const char* name : {"../../escape", "a/b", "..", ".hidden", "a\\\\b"}) {
    std::string text = kBase;
    text.replace(text.find("name = \"tiny\""), 13, std::string("name = \"") + name + "\"");
    const std::string m = message_of(text + "[grid]\n\"model.hidden\" = [8]\n");
    EXPECT_NE(m.find(":5: sweep.name:"), std::string::npos) << name << ": " << m;
  }
}

TEST(SpecLimits, HugeGridsAreRefusedBeforeExpansion) {
  // 1000 x 1000 x 1000 = 10^9 cells: refused at once, naming the limit and how to raise it.
  std::string axis = "[";
  for (int i = 0; i < 1000; ++i) axis += (i ? ", " : "") + std::to_string(i + 1);
  axis += "]";
  const std::string grid =
      "[grid]\n\"model.hidden\" = " + axis + "\n\"data.batch\" = " + axis + "\nseed = " + axis + "\n";
  const std::string m = message_of(kBase + grid);
  EXPECT_NE(m.find("more than 100000 target cells"), std::string::npos) << m;
  EXPECT_NE(m.find("max_cells"), std::string::npos) << m;
  // Raised explicitly, a grid of 4 x 4 = 16 passes a limit of 16 and fails one of 15.
  std::string small = kBase;
  small.replace(small.find("name = \"tiny\""), 13, "name = \"tiny\"\nmax_cells = 15");
  EXPECT_NE(message_of(small + "[grid]\n\"model.hidden\" = [1, 2, 3, 4]\nseed = [1, 2, 3, 4]\n").find("more than 15"),
            std::string::npos);
}

TEST(SpecLimits, OnlyBoundedRegularFilesAreRead) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("wbaudit_spec_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "fifo.toml").c_str(), 0600), 0);
  std::filesystem::create_symlink("/dev/zero", dir / "zero.toml");
  for (const char* name : {"fifo.toml", "zero.toml"}) {
    try {
      load_sweep_spec(dir / name);
      ADD_FAILURE() << name << " accepted";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

TEST(RunSweep, ACellThatCannotFitInMemoryIsRefusedBeforeAnythingIsWritten) {
  // hidden = 2e9 with input_dim 4: about 1.4e10 parameters, hundreds of GiB with their optimizer state.
  std::string huge = kBase;
  huge.replace(huge.find("hidden = 8"), 10, "hidden = 2000000000");
  const auto spec = parse_sweep_spec(huge + "[grid]\nseed = [1]\n", "huge.toml");
  wbaudit::runners::RunOptions options;
  options.out = std::filesystem::temp_directory_path() / ("wbaudit_huge_" + std::to_string(::getpid()));
  options.progress = false;
  try {
    (void)wbaudit::runners::run_sweep(spec, options);
    FAIL() << "a cell of terabytes was started";
  } catch (const SpecError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("needs about"), std::string::npos) << what;
    EXPECT_NE(what.find("GiB"), std::string::npos) << what;
    EXPECT_NE(what.find("of memory"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(options.out)) << "the sweep directory was created";
  // The estimate itself: at least 8 floats per parameter.
  const auto config = wbaudit::sim::run_config_from_json(spec.cells.front().config);
  const double params = 4.0 * 2e9 + 2e9 + 2e9 * 2 + 2;
  EXPECT_GT(wbaudit::sim::estimate_cell_bytes(config), 4.0 * 8 * params * 0.99);
}

// A decoder reference cell whose training fits a machine but whose recording does not: refused before it starts, the
// message naming the estimate (training and recording parts, in bytes) and the machine's memory; a machine with room
// for both runs it (no refusal). The recording's part has a floor computed here from the documented layout: training
// holds one recorded step's rows of every group, 8 bytes per counter of the d histogram (512 bins) and of the margin
// histogram (14 formats x 437 counters); writing the finished trace holds one block of one dataset (4 MiB), so the
// same cell recording every 10th of 2,000,000 steps needs only the reader's 24 bytes per recorded step more.
TEST(SweepSpec, ADecoderCellWhoseRecordingCannotFitIsRefusedNamingItsEstimate) {
  const std::string text = R"(
seed = 1
steps = 400
[sweep]
name = "big_decoder"
[model]
kind = "decoder"
vocab = 50257
width = 768
heads = 12
layers = 12
mlp_hidden = 2048
seq_len = 128
[data]
batch = 4
source = "markov"
[optimizer]
kind = "adam"
lr = 0.0003
[schedule]
kind = "constant"
[record]
kind = "every"
[reference]
project_formats = ["bf16", "e4m3"]
[target]
format = "e4m3"
policy = "nearest"
[grid]
seed = [1]
)";
  const auto spec = parse_sweep_spec(text, "big_decoder.toml");
  const wbaudit::runners::SweepCell* reference = nullptr;
  for (const auto& cell : spec.cells) {
    if (cell.role == CellRole::reference) {
      reference = &cell;
    }
  }
  ASSERT_NE(reference, nullptr);
  const auto config = wbaudit::sim::run_config_from_json(reference->config);
  const double training = wbaudit::sim::estimate_cell_bytes(config);
  const double recording = wbaudit::sim::estimate_recording_bytes(config, 2);
  const auto groups = static_cast<double>(wbaudit::sim::model_tensor_names(config.model).size());
  EXPECT_GE(recording, groups * 8 * (512 + 14 * 437)) << "one recorded step's rows of every group";
  auto long_config = config;
  long_config.steps = 2000000;
  long_config.record.kind = wbaudit::sim::RecordKind::every_k;
  long_config.record.k = 10;
  EXPECT_LE(wbaudit::sim::estimate_recording_bytes(long_config, 2), recording + 24.0 * 200000)
      << "finishing 200,000 recorded steps holds a block, not one group's rows of every step";
  wbaudit::runners::SweepSpec only_reference = spec;
  only_reference.cells = {*reference};
  const double physical = training + recording / 2;  // the training fits, the recording does not
  try {
    wbaudit::runners::check_cells_fit(only_reference, 1, 2, physical);
    FAIL() << "a cell whose recording cannot fit was accepted";
  } catch (const SpecError& e) {
    const std::string what = e.what();
    const auto bytes = [](double b) {
      std::ostringstream out;
      out << std::fixed << std::setprecision(0) << b;
      return out.str();
    };
    EXPECT_NE(what.find("cell " + reference->name + " needs about"), std::string::npos) << what;
    EXPECT_NE(what.find(bytes(training + recording) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("recording and writing its trace " + bytes(recording)), std::string::npos) << what;
    EXPECT_NE(what.find("machine's"), std::string::npos) << what;
    EXPECT_NE(what.find(bytes(physical) + " bytes) of memory"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(wbaudit::runners::check_cells_fit(only_reference, 1, 2, training + recording + 1));
  // two cells at a time need twice the memory
  EXPECT_THROW(wbaudit::runners::check_cells_fit(only_reference, 2, 2, training + recording + 1), SpecError);
}

}  // namespace

namespace {

// A hand-made target trace: groups with the given sizes and erased fractions on recorded steps 0, 5, 10, 20.
wbaudit::sim::Trace early_trace(const std::vector<std::pair<std::string, std::vector<double>>>& groups,
                                std::int64_t size = 128) {
  wbaudit::sim::Trace t;
  t.mode = "target";
  t.recorded_steps = {0, 5, 10, 20};
  for (const auto& [name, fractions] : groups) {
    wbaudit::sim::GroupTrace g;
    g.name = name;
    g.size = size;
    g.erased_fraction = fractions;
    t.groups.push_back(g);
  }
  return t;
}

}  // namespace

// The early-crossing warning (docs/specs.md): a group at or above the threshold at one of the first 3 recorded steps
// (0, 5, 10 here) or at a step up to the burn-in is named with its first such step and fraction; NaN is no crossing.
TEST(EarlyCrossingWarning, NamesTheCellGroupStepAndFraction) {
  using wbaudit::runners::early_crossing_warning;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto trace = early_trace({{"layer1.weight", {0.25, 0.75, 0.9, 1.0}},
                                  {"layer2.weight", {0.5, 0.5, 0.5, 0.5}},
                                  {"layer1.bias", {nan, 0.1, 0.2, 0.9}}});
  const std::string w = early_crossing_warning("target/format=e2m3", trace, {}, 0.5, 64, 0);
  EXPECT_EQ(w.rfind("target/format=e2m3: ", 0), 0u) << w;
  EXPECT_NE(w.find("layer1.weight 0.75 at step 5, layer2.weight 0.5 at step 0"), std::string::npos) << w;
  EXPECT_EQ(w.find("layer1.bias"), std::string::npos) << w;  // crosses at step 20 only, after the burn-in
  // With a burn-in of 20 steps, step 20 is early too.
  EXPECT_NE(early_crossing_warning("c", trace, {}, 0.5, 64, 20).find("layer1.bias 0.9 at step 20"), std::string::npos);
  EXPECT_EQ(early_crossing_warning("c", trace, {}, 0.5, 64, 19).find("layer1.bias"), std::string::npos);
  // Only the evaluation groups, when given; a threshold above every early fraction: no warning.
  const std::string only2 = early_crossing_warning("c", trace, {"layer2.weight"}, 0.5, 64, 0);
  EXPECT_EQ(only2.find("layer1.weight"), std::string::npos) << only2;
  EXPECT_NE(only2.find("layer2.weight 0.5 at step 0"), std::string::npos) << only2;
  EXPECT_EQ(early_crossing_warning("c", trace, {}, 0.95, 64, 0), "");
  // Groups below min_group_size are left out, as from the crossing headline.
  EXPECT_EQ(early_crossing_warning("c", early_trace({{"g", {1.0, 1.0, 1.0, 1.0}}}, 8), {}, 0.5, 64, 0), "");
  // A crossing after the first three recorded steps and the burn-in is an ordinary one.
  EXPECT_EQ(early_crossing_warning("c", early_trace({{"g", {0.1, 0.2, 0.3, 0.9}}}), {}, 0.5, 64, 10), "");
}

// Issue 31: typos get a "did you mean", with the file and line, in every table a user writes: top-level keys, the
// sweep-level tables, a cell table (optimizer.lr_scal -> lr_scale), formats; and a key of another model kind says
// which kind it belongs to.
TEST(SweepSpec, TyposGetADidYouMean) {
  const std::string top = message_of("steeps = 3\n" + kBase + "[grid]\nseed = [1]\n");
  EXPECT_NE(top.find("spec.toml:1: unknown key \"steeps\" (did you mean \"steps\"?)"), std::string::npos) << top;
  const std::string format = message_of(kBase + "[grid]\n\"target.format\" = [\"e4m4\"]\n");
  EXPECT_NE(format.find("did you mean \"e4m3\"?"), std::string::npos) << format;
  const std::string sweep = message_of(kBase + "[evaluation]\nthreshhold = 0.5\n[grid]\nseed = [1]\n");
  EXPECT_NE(sweep.find("evaluation.threshhold: unknown key (did you mean \"threshold\"?)"), std::string::npos) << sweep;
  std::string lr = kBase + "[grid]\nseed = [1]\n";
  lr.replace(lr.find("[optimizer]\n"), std::string("[optimizer]\n").size(), "[optimizer]\nlr_scal = 2.0\n");
  const std::string opt = message_of(lr);
  EXPECT_NE(opt.find("optimizer.lr_scal: unknown key (did you mean \"lr_scale\"?)"), std::string::npos) << opt;
  std::string decoder_key = kBase + "[grid]\nseed = [1]\n";
  decoder_key.replace(decoder_key.find("hidden = 8\n"), std::string("hidden = 8\n").size(), "hidden = 8\nwidth = 32\n");
  const std::string other = message_of(decoder_key);
  EXPECT_NE(other.find("model.width: unknown key (model.width belongs to model.kind = \"decoder\")"), std::string::npos)
      << other;
}
