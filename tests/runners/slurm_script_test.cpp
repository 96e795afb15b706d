// sbatch rendering against golden files written by hand (tests/slurm/golden/), task chunking against
// MaxArraySize, and the scontrol parser.
#include "runners/slurm/script.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

const sl::ScriptPaths kPaths{
    "/scratch/runs/tiny", "/scratch/runs/tiny/slurm/submit-1/tasks.json", "/scratch/runs/tiny/slurm/submit-1/logs", {}};

std::vector<std::string> ids(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("c" + std::to_string(i));
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
                              {}};
  EXPECT_EQ(sl::render_mpi_script(paths, o), golden("cells_mpi.sbatch"));
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
  // Without a key path nothing is exported (the golden scripts above).
  EXPECT_EQ(sl::render_array_script(kPaths, 2, full_options()).find("WBAUDIT_KEY_FILE"), std::string::npos);
}
