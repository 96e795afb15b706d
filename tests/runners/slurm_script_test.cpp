// sbatch rendering against golden files written by hand (tests/slurm/golden/), task chunking against
// MaxArraySize, automatic packing by estimated cost (against a brute force), and the scontrol parser.
#include "runners/exec/slurm/script.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runners/exec/slurm/submit.hpp"

namespace sl = wbaudit::runners::slurm;

namespace {

std::string golden(const std::string& name) {
  std::ifstream in(std::string(WBAUDIT_SOURCE_DIR) + "/tests/slurm/golden/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

sl::SlurmOptions full_options() {
  sl::SlurmOptions o;
  o.job_name = "wbaudit-tiny";
  o.partition = "debug";
  o.time = "00:10:00";
  o.account = "proj";
  o.qos = "normal";
  o.mem = "2G";
  o.cpus_per_task = 2;
  o.array_throttle = 3;
  return o;
}

// The golden scripts check this frozen binary (two files) before exporting the key.
const sl::ScriptPaths kPaths{"/scratch/runs/tiny",
                             "/scratch/runs/tiny/slurm/submit-1/tasks.json",
                             "/scratch/runs/tiny/slurm/submit-1/logs",
                             "/home/u/.config/wbaudit/keys/0f6c2a52-5d2b-4c43-9a4e-9b4c3d2e1f00",
                             {{"wbaudit", std::string(64, 'a')}, {"lib/libkokkoscore.so.3.4", std::string(64, 'b')}}};

std::vector<std::string> ids(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::ostringstream name;
    name << 'c' << i;
    out.push_back(name.str());
  }
  return out;
}

}  // namespace

TEST(SlurmScript, ArrayScriptMatchesGolden) {
  EXPECT_EQ(sl::render_array_script(kPaths, 4, full_options()), golden("cells_array.sbatch"));
}

TEST(SlurmScript, MpiScriptMatchesGoldenAndQuotesPaths) {
  sl::SlurmOptions o;
  o.mpi_ranks = 8;
  o.signal_seconds = 300;
  const sl::ScriptPaths paths{"/scratch/it's here",
                              "/scratch/it's here/slurm/submit-2/tasks.json",
                              "/scratch/it's here/slurm/submit-2/logs",
                              {},
                              {}};
  EXPECT_EQ(sl::render_mpi_script(paths, o), golden("cells_mpi.sbatch"));
}

// --launcher srun: Slurm starts the ranks (one per task of the allocation, with its CPUs) and hands them the job's
// environment with the sweep's key named explicitly, as mpirun's -x does; everything else as the mpirun script.
TEST(SlurmScript, SrunMpiScriptMatchesGolden) {
  sl::SlurmOptions o = full_options();
  o.mpi_ranks = 4;
  o.launcher = "srun";
  EXPECT_EQ(sl::render_mpi_script(kPaths, o), golden("cells_mpi_srun.sbatch"));
  // Without a key nothing names it; an unknown launcher is refused, naming it.
  sl::ScriptPaths keyless = kPaths;
  keyless.key_file.clear();
  const std::string plain = sl::render_mpi_script(keyless, o);
  EXPECT_NE(plain.find("--cpu-bind=none --export=ALL \"$sweep/bin/wbaudit\" run-cells"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("WBAUDIT_KEY_FILE"), std::string::npos) << plain;
  o.launcher = "mpiexec";
  try {
    (void)sl::render_mpi_script(kPaths, o);
    ADD_FAILURE() << "launcher mpiexec accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"mpiexec\" is neither mpirun nor srun"), std::string::npos) << e.what();
  }
}

TEST(SlurmScript, ReportScriptMatchesGolden) {
  EXPECT_EQ(sl::render_report_script(kPaths, full_options()), golden("report.sbatch"));
}

TEST(SlurmScript, RejectsUnsafeOrImpossibleOptions) {
  auto o = full_options();
  o.partition = "debug; rm -rf /";
  EXPECT_THROW((void)sl::render_array_script(kPaths, 4, o), std::invalid_argument);
  o = full_options();
  o.cpus_per_task = 0;
  EXPECT_THROW((void)sl::render_array_script(kPaths, 4, o), std::invalid_argument);
  o = full_options();
  o.report_command = "evaluate $(reboot)";
  EXPECT_THROW((void)sl::render_report_script(kPaths, o), std::invalid_argument);
  EXPECT_THROW((void)sl::render_array_script(kPaths, 0, full_options()), std::invalid_argument);
}

// sbatch's --time formats (man sbatch), by hand: the accepted forms with their seconds, and refused look-alikes.
TEST(SlurmScript, TimeLimitsInSlurmFormats) {
  const std::vector<std::pair<std::string, long>> accepted = {
      {"30", 1800},          {"90", 5400},    {"5:30", 330},           {"01:00:00", 3600},
      {"100:00:00", 360000}, {"2-0", 172800}, {"1-12", 129600},        {"1-12:30", 131400},
      {"1-00:00:01", 86401}, {"0-0:0:1", 1},  {"UNLIMITED", LONG_MAX}, {"INFINITE", LONG_MAX}};
  for (const auto& [text, seconds] : accepted) {
    const auto parsed = sl::slurm_time_seconds(text);
    ASSERT_TRUE(parsed.has_value()) << text;
    EXPECT_EQ(*parsed, seconds) << text;
  }
  for (const std::string bad : {"", "0", "00:00:00", "1h", "01:60:00", "1:2:3:4", "-1", "1-24", "1-1:60", "5:60", "1.5",
                                " 30", "30 ", "1--2", "unlimited", "1-", ":30"}) {
    EXPECT_FALSE(sl::slurm_time_seconds(bad).has_value()) << '"' << bad << '"';
  }
  auto o = full_options();
  o.time = "1h";
  try {
    (void)sl::render_array_script(kPaths, 4, o);
    ADD_FAILURE() << "--time 1h accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--time \"1h\" is not a Slurm time limit"), std::string::npos) << e.what();
  }
  // A limit not above the requeue lead time (USR1 signal_seconds before the limit) would requeue at once, forever.
  o.time = "2:00";
  o.signal_seconds = 120;
  EXPECT_THROW((void)sl::render_array_script(kPaths, 4, o), std::invalid_argument);
  o.time = "2:01";
  EXPECT_NO_THROW((void)sl::render_array_script(kPaths, 4, o));
}

// Other sbatch options pass through to the cells scripts (one line each), never to the report job; options wbaudit
// sets itself, or malformed ones, are refused.
TEST(SlurmScript, SbatchOptionsPassThroughToTheCellsJob) {
  auto o = full_options();
  o.sbatch_options = {"--gres=gpu:1", "--constraint=avx2", "--exclusive",
                      "--nodes=1",    "--mail-type=END",   "--mail-user=me@example.org"};
  for (const std::string& script : {sl::render_array_script(kPaths, 4, o), sl::render_mpi_script(kPaths, [&] {
                                      auto m = o;
                                      m.mpi_ranks = 2;
                                      return m;
                                    }())}) {
    std::size_t last = 0;
    for (const auto& extra : o.sbatch_options) {
      const std::size_t at = script.find("\n#SBATCH " + extra + "\n");
      ASSERT_NE(at, std::string::npos) << extra << "\n" << script;
      EXPECT_GT(at, last) << "in the given order: " << extra;
      last = at;
      EXPECT_LT(at, script.find("set -u")) << "directives precede the first command";
    }
  }
  EXPECT_EQ(sl::render_report_script(kPaths, o).find("--gres"), std::string::npos);
  for (const std::string bad : {"--array=0-3", "--time=1:00", "--output=x", "--requeue", "gres=gpu:1", "--gres gpu:1",
                                "--mail-user=$(id)", "--", "-N1"}) {
    o.sbatch_options = {bad};
    EXPECT_THROW((void)sl::render_array_script(kPaths, 4, o), std::invalid_argument) << bad;
  }
}

TEST(SlurmScript, ChunkingRespectsMaxArraySize) {
  // 10 cells, 3 per task: tasks of 3,3,3,1.
  auto plan = sl::plan_tasks(ids(10), 3, std::nullopt);
  ASSERT_EQ(plan.tasks.size(), 4u);
  EXPECT_EQ(plan.cells_per_task, 3);
  EXPECT_EQ(plan.tasks[3], std::vector<std::string>{"c9"});
  EXPECT_EQ(plan.tasks[1], (std::vector<std::string>{"c3", "c4", "c5"}));
  // 10 cells, 1 per task, but only 4 array indices allowed: ceil(10/4) = 3 per task -> 4 tasks.
  plan = sl::plan_tasks(ids(10), 1, 4);
  EXPECT_EQ(plan.cells_per_task, 3);
  EXPECT_EQ(plan.tasks.size(), 4u);
  // Exactly at the limit: 8 cells, 2 per task, MaxArraySize 4 -> unchanged.
  plan = sl::plan_tasks(ids(8), 2, 4);
  EXPECT_EQ(plan.cells_per_task, 2);
  EXPECT_EQ(plan.tasks.size(), 4u);
  // Every cell appears exactly once, in order.
  plan = sl::plan_tasks(ids(1001), 1, 1000);
  std::vector<std::string> flat;
  for (const auto& t : plan.tasks) flat.insert(flat.end(), t.begin(), t.end());
  EXPECT_EQ(flat, ids(1001));
  EXPECT_LE(plan.tasks.size(), 1000u);
  EXPECT_TRUE(sl::plan_tasks({}, 1, 4).tasks.empty());
  EXPECT_THROW((void)sl::plan_tasks(ids(3), 0, std::nullopt), std::invalid_argument);
}

TEST(SlurmScript, ParsesMaxArraySize) {
  const std::string config =
      "Configuration data as of 2026-12-02T14:00:00\nMaxArraySize            = 1001\nMaxJobCount             = 10000\n";
  EXPECT_EQ(sl::parse_max_array_size(config), 1001);
  EXPECT_EQ(sl::parse_max_array_size("MaxJobCount = 5\n"), std::nullopt);
  EXPECT_EQ(sl::shell_quote("a'b"), "'a'\\''b'");
}

// The sweep's signing key reaches the jobs (docs/contracts.md, "Signed provenance"): exported unless the job's
// environment names one, quoted, and passed to every MPI rank. Expected lines written by hand.
TEST(SlurmScript, ScriptsExportTheSigningKey) {
  sl::ScriptPaths paths = kPaths;
  paths.key_file = "/home/u/.config/wbaudit/keys/it's-a-key";
  const std::string line =
      "if [ -z \"${WBAUDIT_KEY_FILE:-}\" ]; then export "
      "WBAUDIT_KEY_FILE='/home/u/.config/wbaudit/keys/it'\\''s-a-key'; "
      "fi\n";
  sl::SlurmOptions mpi;
  mpi.mpi_ranks = 2;
  const std::string array = sl::render_array_script(paths, 2, full_options());
  const std::string ranks = sl::render_mpi_script(paths, mpi);
  const std::string report = sl::render_report_script(paths, full_options());
  EXPECT_NE(array.find(line), std::string::npos) << array;
  EXPECT_NE(ranks.find(line), std::string::npos) << ranks;
  EXPECT_NE(report.find(line), std::string::npos) << report;
  EXPECT_NE(ranks.find("mpirun -n \"$SLURM_NTASKS\" --bind-to none -x WBAUDIT_KEY_FILE "), std::string::npos) << ranks;
  // The export comes before the command that needs the key.
  EXPECT_LT(array.find(line), array.find("run-cells"));
  // Without a key path nothing is exported.
  sl::ScriptPaths keyless = kPaths;
  keyless.key_file.clear();
  EXPECT_EQ(sl::render_array_script(keyless, 2, full_options()).find("WBAUDIT_KEY_FILE"), std::string::npos);
  // The frozen binary is checked before the key is exported (issue 27: a library dropped into bin/lib/ would be
  // loaded by the frozen binary with the key in reach).
  for (const std::string& script : {array, ranks, report}) {
    EXPECT_LT(script.find("if ! frozen_intact; then"), script.find(line)) << script;
  }
}

// --cells-per-task auto: consecutive cells packed under the target; hand-worked cases, then the bound under a
// MaxArraySize against a brute force over every split of the cells into consecutive tasks.
TEST(SlurmScript, AutoPackingFillsTasksUpToTheTarget) {
  auto plan = sl::plan_tasks_by_cost(ids(5), {1, 2, 3, 4, 5}, 5, std::nullopt);
  ASSERT_EQ(plan.tasks.size(), 4u);  // [1 2] [3] [4] [5]: 1+2+3 = 6 > 5
  EXPECT_EQ(plan.tasks[0], (std::vector<std::string>{"c0", "c1"}));
  EXPECT_EQ(plan.tasks[3], std::vector<std::string>{"c4"});
  EXPECT_TRUE(plan.automatic);
  EXPECT_EQ(plan.cells_per_task, 2);
  EXPECT_EQ(plan.task_seconds, (std::vector<double>{3, 3, 4, 5}));
  // A cell above the target gets a task of its own.
  plan = sl::plan_tasks_by_cost(ids(3), {10, 1, 1}, 5, std::nullopt);
  ASSERT_EQ(plan.tasks.size(), 2u);
  EXPECT_EQ(plan.tasks[1], (std::vector<std::string>{"c1", "c2"}));
  // 68 cells of 0.1 s (the example): one task.
  EXPECT_EQ(sl::plan_tasks_by_cost(ids(68), std::vector<double>(68, 0.1), 600, std::nullopt).tasks.size(), 1u);
  // At most 2 array indices: [1 2 3] [4 5] (largest task 9) is the best split into 2 consecutive tasks.
  plan = sl::plan_tasks_by_cost(ids(5), {1, 2, 3, 4, 5}, 5, 2);
  ASSERT_EQ(plan.tasks.size(), 2u);
  EXPECT_EQ(plan.tasks[0], (std::vector<std::string>{"c0", "c1", "c2"}));
  EXPECT_NEAR(plan.target_seconds, 9, 1e-6);
  EXPECT_TRUE(sl::plan_tasks_by_cost({}, {}, 5, 2).tasks.empty());
  EXPECT_THROW((void)sl::plan_tasks_by_cost(ids(2), {1}, 5, std::nullopt), std::invalid_argument);
  EXPECT_THROW((void)sl::plan_tasks_by_cost(ids(2), {1, 1}, 0, std::nullopt), std::invalid_argument);

  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 8);
    const long max_tasks = 1 + static_cast<long>(rng() % 4);
    std::vector<double> cost;
    for (int i = 0; i < n; ++i) cost.push_back(static_cast<double>(1 + rng() % 9));
    const double target = static_cast<double>(1 + rng() % 12);
    // Brute force: every split (a bit per gap between neighbours); the smallest largest task among splits that
    // keep every task within the target (or hold one cell), else among those with at most max_tasks tasks.
    double best_capped = 1e300;
    std::size_t fewest = 1000;
    for (unsigned mask = 0; mask < (1u << (n - 1)); ++mask) {
      std::vector<double> sums{0};
      std::vector<int> counts{0};
      for (int i = 0; i < n; ++i) {
        if (i > 0 && (mask >> (i - 1)) & 1u) {
          sums.push_back(0);
          counts.push_back(0);
        }
        sums.back() += cost[static_cast<std::size_t>(i)];
        ++counts.back();
      }
      const double largest = *std::max_element(sums.begin(), sums.end());
      bool within = true;
      for (std::size_t t = 0; t < sums.size(); ++t) within = within && (sums[t] <= target || counts[t] == 1);
      if (within) fewest = std::min(fewest, sums.size());
      if (static_cast<long>(sums.size()) <= max_tasks) best_capped = std::min(best_capped, largest);
    }
    plan = sl::plan_tasks_by_cost(ids(n), cost, target, max_tasks);
    std::vector<std::string> flat;
    for (const auto& t : plan.tasks) flat.insert(flat.end(), t.begin(), t.end());
    EXPECT_EQ(flat, ids(n));
    ASSERT_LE(static_cast<long>(plan.tasks.size()), max_tasks);
    const double largest = *std::max_element(plan.task_seconds.begin(), plan.task_seconds.end());
    if (static_cast<long>(fewest) <= max_tasks) {
      // The target alone fits: the fewest tasks that keep within it.
      EXPECT_EQ(plan.tasks.size(), fewest) << "trial " << trial;
      EXPECT_LE(largest, std::max(target, *std::max_element(cost.begin(), cost.end())));
    } else {
      EXPECT_NEAR(largest, best_capped, 1e-6) << "trial " << trial;
    }
  }
}

// The automatic target: --task-minutes, at most half of what --time leaves after the requeue lead time.
TEST(SlurmScript, AutoTargetRespectsTheTimeLimit) {
  sl::SlurmOptions o;
  EXPECT_DOUBLE_EQ(sl::auto_task_seconds(o), 600);  // the default 10 minutes
  o.time = "00:10:00";                              // (600 - 120) / 2
  EXPECT_DOUBLE_EQ(sl::auto_task_seconds(o), 240);
  o.time = "2-00:00:00";
  EXPECT_DOUBLE_EQ(sl::auto_task_seconds(o), 600);
  o.time = "UNLIMITED";
  o.task_minutes = 30;
  EXPECT_DOUBLE_EQ(sl::auto_task_seconds(o), 1800);
  o.task_minutes = 0;
  EXPECT_THROW((void)sl::auto_task_seconds(o), std::invalid_argument);
}

// The cost estimate, worked by hand from the documented constants (runners/exec/slurm/submit.hpp) for a two-layer
// target cell: 13 coordinates, 5 x (6 x 9 + 2 x 12) = 390 FLOPs per step, one projection.
TEST(SlurmScript, CellCostEstimateFollowsItsFormula) {
  const nlohmann::json target = {
      {"schema", "wbaudit.cell/1"},
      {"mode", "target"},
      {"seed", 1},
      {"steps", 100},
      {"model", {{"kind", "two_layer"}, {"input_dim", 2}, {"hidden", 3}, {"output_dim", 1}, {"teacher_hidden", 4}}},
      {"data", {{"batch", 5}}},
      {"target", {{"format", "bf16"}}}};
  const double step = 30e-6 + 0.3e-9 * 390 + (5e-6 + 10e-9 * 13);
  EXPECT_NEAR(sl::estimate_cell_seconds(target), 0.05 + 100 * step, 1e-12);
  EXPECT_NEAR(sl::estimate_cell_seconds(target, 3), (0.05 + 100 * step) / 2, 1e-12);  // 3 threads: speed-up 2
  auto reference = target;
  reference["mode"] = "reference";
  reference.erase("target");
  reference["project_formats"] = {"bf16", "e4m3", "fp16"};
  EXPECT_NEAR(sl::estimate_cell_seconds(reference), 0.05 + 100 * (30e-6 + 0.3e-9 * 390 + 3 * (5e-6 + 10e-9 * 13)),
              1e-12);
  EXPECT_DOUBLE_EQ(sl::estimate_cell_seconds(nlohmann::json{{"steps", "many"}}), 60);
}

// Issue 31: what `wbaudit submit` warns about. The cost of a two-layer bf16 cell is worked by hand above:
// 0.05 + steps x step seconds; at 10^7 steps that is about 356 s > --time 1 (60 s); at 100 steps 0.05 + 100 step
// (about 3.6 ms) fits.
TEST(SlurmScript, SubmissionWarnings) {
  const nlohmann::json small = {
      {"schema", "wbaudit.cell/1"},
      {"mode", "target"},
      {"seed", 1},
      {"steps", 100},
      {"model", {{"kind", "two_layer"}, {"input_dim", 2}, {"hidden", 3}, {"output_dim", 1}, {"teacher_hidden", 4}}},
      {"data", {{"batch", 5}}},
      {"target", {{"format", "bf16"}}}};
  auto big = small;
  big["steps"] = 10000000;
  sl::SlurmOptions o;
  o.time = "1";  // one minute
  // A directory that is not node-local on any Linux machine (its nearest existing ancestor, /proc, is procfs, not a
  // tmpfs), so that the test does not depend on where the machine keeps /work or a clone.
  const std::filesystem::path shared = "/proc/wbaudit-not-node-local/sweep";
  auto w = sl::submission_warnings(shared, {"target/small", "target/big"}, {small, big}, o);
  ASSERT_EQ(w.size(), 1u) << (w.empty() ? "" : w[0]);
  EXPECT_NE(w[0].find("1 cell(s) are estimated to take longer than --time 1 (60 s; the longest, target/big"),
            std::string::npos)
      << w[0];
  o.time = "10";
  EXPECT_TRUE(sl::submission_warnings(shared, {"target/small", "target/big"}, {small, big}, o).empty());
  o.time.clear();
  w = sl::submission_warnings(shared, {"target/small"}, {small}, o);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("no --time"), std::string::npos) << w[0];
  o.time = "10";
  w = sl::submission_warnings("/tmp/some/sweep", {"target/small"}, {small}, o);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("node-local storage"), std::string::npos) << w[0];
  w = sl::submission_warnings("/dev/shm/sweep", {"target/small"}, {small}, o);
  ASSERT_EQ(w.size(), 1u);
}
