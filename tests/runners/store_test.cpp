// Sweep store: creation and resume rules, manifests, and the canonical check against hand-made, edited and
// foreign-binary attempts.
#include "runners/store/store.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <set>
#include <sstream>

#include "runners/store/identity.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_writer.hpp"

namespace fs = std::filesystem;
namespace wr = wbaudit::runners;

namespace {

const std::string kSpec = "name = \"store-test\"\n[grid]\nseed = [1, 2, 3]\n";

std::vector<wr::StoredCell> three_cells() {
  std::vector<wr::StoredCell> cells;
  cells.push_back(
      {"", "ref/seed=1", "reference", "", {{"schema", "wbaudit.cell/1"}, {"mode", "reference"}, {"seed", 1}}});
  for (int seed = 1; seed <= 2; ++seed)
    cells.push_back({"",
                     "target/seed=" + std::to_string(seed),
                     "target",
                     "ref/seed=1",
                     {{"schema", "wbaudit.cell/1"}, {"mode", "target"}, {"seed", seed}}});
  return cells;
}

wr::CreateOptions options(bool resume, const fs::path& executable = {}) {
  wr::CreateOptions o;
  o.resume = resume;
  o.executable = executable;
  return o;
}

fs::path fresh_dir(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_store_" + tag + "_" + wr::random_uuid());
  return dir;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A complete attempt written through the store, with one output file.
wr::AttemptRecord complete_attempt(const wr::SweepStore& store, const std::string& id, const std::string& payload) {
  wr::Attempt attempt = store.begin_attempt(id);
  spit(attempt.dir() / "trace.h5", payload);
  return store.finish_attempt(attempt, wr::AttemptStatus::complete, "", {"trace.h5"});
}

bool has_reason(const std::vector<std::string>& reasons, const std::string& part) {
  for (const auto& r : reasons)
    if (r.find(part) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& reasons) {
  std::string out;
  for (const auto& r : reasons) out += r + " | ";
  return out;
}

struct StoreTest : ::testing::Test {
  fs::path dir = fresh_dir("t");
  void TearDown() override { fs::remove_all(dir); }
};

}  // namespace

TEST_F(StoreTest, CreateFreezesSpecAndExecutable) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  EXPECT_EQ(slurp(dir / "spec.toml"), kSpec);
  EXPECT_EQ(store.spec_sha256(), wr::sha256_hex(kSpec));
  EXPECT_EQ(wr::sha256_file(dir / "bin" / "wbaudit"), wr::sha256_file(wr::self_executable()));
  EXPECT_EQ(store.binary_sha256(), wr::self_executable_sha256());
  EXPECT_TRUE(store.check_frozen_inputs().empty());
  ASSERT_EQ(store.cells().size(), 3u);
  // The id is the hash of the canonical configuration, written by hand here.
  EXPECT_EQ(store.cells()[1].id, wr::sha256_hex(R"({"mode":"target","schema":"wbaudit.cell/1","seed":1})"));
  const auto reopened = wr::SweepStore::open(dir);
  EXPECT_EQ(reopened.cells()[2].name, "target/seed=2");
  EXPECT_EQ(reopened.cells()[2].reference, "ref/seed=1");
  for (const auto& status : reopened.status()) EXPECT_EQ(status.state, wr::CellState::pending);
}

TEST_F(StoreTest, RefusesExistingDirectoryAndChangedSpec) {
  (void)wr::SweepStore::create(dir, kSpec, three_cells());
  EXPECT_THROW((void)wr::SweepStore::create(dir, kSpec, three_cells()), wr::StoreError);
  try {
    (void)wr::SweepStore::create(dir, kSpec + "# edited\n", three_cells(), options(true));
    FAIL() << "changed spec accepted on resume";
  } catch (const wr::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("spec changed"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)wr::SweepStore::create(dir, kSpec, three_cells(), options(true)));
}

TEST_F(StoreTest, RejectsBadCellLists) {
  auto duplicate = three_cells();
  duplicate[2].config = duplicate[1].config;
  EXPECT_THROW((void)wr::SweepStore::create(dir, kSpec, duplicate), wr::StoreError);
  auto dangling = three_cells();
  dangling[1].reference = "ref/seed=9";
  EXPECT_THROW((void)wr::SweepStore::create(fresh_dir("dangling"), kSpec, dangling), wr::StoreError);
}

TEST_F(StoreTest, MissingExecutableCopyIsReportedAndRestoredOnResume) {
  (void)wr::SweepStore::create(dir, kSpec, three_cells());
  fs::remove(dir / "bin" / "wbaudit");
  const auto store = wr::SweepStore::open(dir);
  const auto problems = store.check_frozen_inputs();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("missing"), std::string::npos) << problems[0];
  // Another binary cannot stand in for the registered one.
  EXPECT_THROW((void)wr::SweepStore::create(dir, kSpec, three_cells(), options(true, "/bin/true")), wr::StoreError);
  EXPECT_FALSE(fs::exists(dir / "bin" / "wbaudit"));
  const auto resumed = wr::SweepStore::create(dir, kSpec, three_cells(), options(true));
  EXPECT_TRUE(resumed.check_frozen_inputs().empty());
}

TEST_F(StoreTest, ManifestRecordsProvenanceAndFileHashes) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[0].id;
  ::setenv("SLURM_ARRAY_JOB_ID", "4242", 1);
  ::setenv("SLURM_ARRAY_TASK_ID", "7", 1);
  wr::Attempt attempt = store.begin_attempt(id);
  ::unsetenv("SLURM_ARRAY_JOB_ID");
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  EXPECT_EQ(attempt.dir(), dir / "cells" / id / "attempts" / attempt.uuid());
  auto running = nlohmann::json::parse(slurp(attempt.dir() / "manifest.json"));
  EXPECT_EQ(running["status"], "running");
  EXPECT_EQ(store.cell_status(id).state, wr::CellState::running);  // this process is alive
  fs::create_directories(attempt.dir() / "sub");
  spit(attempt.dir() / "out.bin", "abc");
  spit(attempt.dir() / "sub" / "x.csv", "");
  const auto record = store.finish_attempt(attempt, wr::AttemptStatus::complete, "", {"out.bin", "sub/x.csv"});
  EXPECT_TRUE(record.canonical) << joined(record.reasons);
  const auto m = nlohmann::json::parse(slurp(attempt.dir() / "manifest.json"));
  EXPECT_EQ(m["uuid"], attempt.uuid());
  EXPECT_EQ(m["cell_id"], id);
  EXPECT_EQ(m["status"], "complete");
  EXPECT_EQ(m["slurm"]["array_job_id"], "4242");
  EXPECT_EQ(m["slurm"]["array_task_id"], "7");
  EXPECT_EQ(m["executable_sha256"], wr::sha256_file(wr::self_executable()));
  EXPECT_TRUE(m["build"].contains("git_commit"));
  EXPECT_TRUE(m["end"].is_string());
  // printf abc | sha256sum ; printf '' | sha256sum
  EXPECT_EQ(m["files"]["out.bin"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(m["files"]["sub/x.csv"], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(store.cell_status(id).state, wr::CellState::done);
  // Nothing but manifest.json and the outputs: no temporaries left behind.
  int entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(attempt.dir())) entries += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 3);
}

TEST_F(StoreTest, MissingOutputMakesTheAttemptFailed) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[1].id;
  wr::Attempt attempt = store.begin_attempt(id);
  const auto record = store.finish_attempt(attempt, wr::AttemptStatus::complete, "", {"trace.h5"});
  EXPECT_EQ(record.status, wr::AttemptStatus::failed);
  EXPECT_NE(record.exit_reason.find("not written"), std::string::npos) << record.exit_reason;
  EXPECT_EQ(store.cell_status(id).state, wr::CellState::failed);
}

TEST_F(StoreTest, EditedTraceIsNonCanonical) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[1].id;
  const auto record = complete_attempt(store, id, "original trace");
  ASSERT_TRUE(record.canonical);
  spit(record.dir / "trace.h5", "edited trace");
  const auto status = store.cell_status(id);
  EXPECT_EQ(status.state, wr::CellState::noncanonical);
  EXPECT_TRUE(has_reason(status.reasons, "trace.h5: SHA-256 differs")) << joined(status.reasons);
  EXPECT_TRUE(status.needs_run());
}

TEST_F(StoreTest, HandMadeDirectoryIsNonCanonical) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[2].id;
  const fs::path fake = dir / "cells" / id / "attempts" / "handmade";
  fs::create_directories(fake);
  spit(fake / "trace.h5", "made by hand");
  auto status = store.cell_status(id);
  EXPECT_EQ(status.state, wr::CellState::noncanonical);
  EXPECT_TRUE(has_reason(status.reasons, "no manifest.json")) << joined(status.reasons);
  // A manifest copied from another cell's genuine attempt does not make it canonical either.
  const auto genuine = complete_attempt(store, store.cells()[0].id, "x");
  fs::copy_file(genuine.dir / "manifest.json", fake / "manifest.json");
  spit(fake / "trace.h5", "x");
  status = store.cell_status(id);
  EXPECT_EQ(status.state, wr::CellState::noncanonical);
  EXPECT_TRUE(has_reason(status.reasons, "manifest names cell")) << joined(status.reasons);
  EXPECT_TRUE(has_reason(status.reasons, "does not match its directory")) << joined(status.reasons);
  // A trace dropped next to the attempts is reported too.
  const std::string other = store.cells()[1].id;
  fs::create_directories(dir / "cells" / other);
  spit(dir / "cells" / other / "trace.h5", "stray");
  EXPECT_EQ(store.cell_status(other).state, wr::CellState::noncanonical);
}

TEST_F(StoreTest, OtherBinaryIsNonCanonical) {
  // The sweep registers /bin/true as its binary; this test program then runs an attempt.
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells(), options(false, "/bin/true"));
  EXPECT_EQ(store.binary_sha256(), wr::sha256_file("/bin/true"));
  const auto record = complete_attempt(store, store.cells()[0].id, "x");
  EXPECT_TRUE(record.complete);
  EXPECT_FALSE(record.canonical);
  EXPECT_TRUE(has_reason(record.reasons, "run by another binary")) << joined(record.reasons);
  EXPECT_EQ(store.cell_status(store.cells()[0].id).state, wr::CellState::noncanonical);
}

TEST_F(StoreTest, CorruptManifestIsReported) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[0].id;
  const auto record = complete_attempt(store, id, "x");
  const std::string text = slurp(record.dir / "manifest.json");
  spit(record.dir / "manifest.json", text.substr(0, text.size() / 2));  // truncated
  const auto status = store.cell_status(id);
  EXPECT_EQ(status.state, wr::CellState::noncanonical);
  EXPECT_TRUE(has_reason(status.reasons, "corrupt manifest")) << joined(status.reasons);
}

TEST_F(StoreTest, TemporaryManifestNeverCountsAsComplete) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[0].id;
  // A crash between writing the temporary and renaming it: the complete text sits under the temporary name while
  // manifest.json still says running.
  wr::Attempt attempt = store.begin_attempt(id);
  const auto finished = complete_attempt(store, store.cells()[1].id, "x");
  std::string complete_text = slurp(finished.dir / "manifest.json");
  spit(attempt.dir() / ".manifest.json.tmp.12345", complete_text);
  spit(attempt.dir() / "trace.h5", "x");
  EXPECT_NE(store.cell_status(id).state, wr::CellState::done);
}

TEST_F(StoreTest, KilledProcessLeavesAnInterruptedAttempt) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[1].id;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    wr::Attempt attempt = store.begin_attempt(id);
    std::ofstream(attempt.dir() / "trace.h5") << "half a tr";
    ::raise(SIGKILL);
    ::_exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  const auto status = store.cell_status(id);
  EXPECT_EQ(status.state, wr::CellState::failed);
  EXPECT_TRUE(has_reason(status.reasons, "interrupted")) << joined(status.reasons);
  ASSERT_EQ(status.attempts.size(), 1u);
  EXPECT_FALSE(status.attempts[0].complete);
}

// The parent of a worker that died marks the worker's running attempt failed with the reason it saw.
TEST_F(StoreTest, AbandonedAttemptIsMarkedFailedWithItsReason) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[1].id;
  wr::Attempt attempt = store.begin_attempt(id);
  std::ofstream(attempt.dir() / "trace.h5") << "half a tr";
  const std::string reason = "worker process 4711 was killed by signal 9 (Killed) while running the cell";
  const auto record = store.fail_abandoned_attempt(id, attempt.uuid(), reason);
  EXPECT_EQ(record.status, wr::AttemptStatus::failed);
  EXPECT_EQ(record.exit_reason, reason);
  EXPECT_FALSE(record.end.empty());
  const auto status = store.cell_status(id);
  EXPECT_EQ(status.state, wr::CellState::failed);
  EXPECT_EQ(joined(status.reasons), "attempt " + attempt.uuid() + ": failed: " + reason + " | ");
  EXPECT_TRUE(status.needs_run());
  // A finished attempt is left as it is.
  const auto done = complete_attempt(store, store.cells()[2].id, "x");
  const std::string before = slurp(done.dir / "manifest.json");
  EXPECT_EQ(store.fail_abandoned_attempt(store.cells()[2].id, done.uuid, reason).status, wr::AttemptStatus::complete);
  EXPECT_EQ(slurp(done.dir / "manifest.json"), before);
  EXPECT_EQ(store.cell_status(store.cells()[2].id).state, wr::CellState::done);
  // The uuid comes from another process: nothing but an attempt directory of this cell can be named.
  EXPECT_THROW((void)store.fail_abandoned_attempt(id, "../../" + store.cells()[2].id, reason), wr::StoreError);
  EXPECT_THROW((void)store.fail_abandoned_attempt(id, "0123-abcd", reason), wr::StoreError);  // no such attempt
}

// An attempt that stopped mid-run leaves its streamed trace as trace.h5.partial: status names it with how far it got
// (two hand-made recorded steps, 3 and 7, of a 20-step run), and the trace itself is never taken as complete.
TEST_F(StoreTest, AnUnfinishedAttemptsPartialTraceIsNamedWithItsLastStep) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const std::string id = store.cells()[1].id;
  wr::Attempt attempt = store.begin_attempt(id);
  wbaudit::sim::Trace t;
  t.schema = wbaudit::sim::trace_schema_for_mode("target");
  t.mode = "target";
  t.format = "e4m3";
  t.policy = "nearest";
  t.steps = 20;
  t.recorded_steps = {3, 7};
  t.loss = {1.0, 0.5};
  t.learning_rate = {0.1, 0.1};
  wbaudit::sim::GroupTrace g;
  g.name = "w";
  g.size = 10;
  g.nonzero = {10, 9};
  g.erased = {1, 2};
  g.saturated = {0, 0};
  g.applied = {9, 7};
  g.erased_fraction = {0.1, 2.0 / 9};
  t.groups.push_back(g);
  {
    wbaudit::sim::TraceWriter writer(attempt.dir() / "trace.h5", t);  // the run stops here: no finish()
  }
  const auto record = store.fail_abandoned_attempt(id, attempt.uuid(), "killed");
  EXPECT_EQ(record.status, wr::AttemptStatus::failed);
  const std::string reasons = joined(store.cell_status(id).reasons);
  EXPECT_NE(reasons.find("incomplete trace trace.h5.partial: 2 recorded steps, the last at step 7 of 20"),
            std::string::npos)
      << reasons;
  EXPECT_FALSE(fs::exists(attempt.dir() / "trace.h5"));
}

TEST(AtomicWrite, ReplacesContentAndLeavesNoTemporary) {
  const fs::path dir = fresh_dir("atomic");
  fs::create_directories(dir);
  wr::write_file_atomic(dir / "a.json", "first");
  wr::write_file_atomic(dir / "a.json", "second");
  EXPECT_EQ(slurp(dir / "a.json"), "second");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1);
  EXPECT_THROW(wr::write_file_atomic(dir / "missing" / "a.json", "x"), wr::StoreError);
  fs::remove_all(dir);
}

namespace {
// A real (empty) trace whose config_json is the engine's serialization of `config`, as a run of it writes.
void write_trace_of(const fs::path& path, const nlohmann::json& config) {
  wbaudit::sim::Trace t;
  t.mode = "reference";
  t.format = "fp32";
  t.policy = "nearest";
  t.config_json = wbaudit::sim::to_json(wbaudit::sim::run_config_from_json(config)).dump();
  wbaudit::sim::write_trace(path, t);
}
}  // namespace

TEST_F(StoreTest, AnotherCellsTraceUnderARewrittenManifestIsNonCanonical) {
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  const auto& cell = store.cells()[0];  // a reference run: its configuration is a simulator run
  wr::Attempt own = store.begin_attempt(cell.id);
  write_trace_of(own.dir() / "trace.h5", cell.config);
  const auto good = store.finish_attempt(own, wr::AttemptStatus::complete, "", {"trace.h5"});
  EXPECT_TRUE(good.canonical) << joined(good.reasons);
  // The same pipeline, every hash right, but the trace is the run of another configuration (seed 9).
  wr::Attempt forged = store.begin_attempt(cell.id);
  nlohmann::json other = cell.config;
  other["seed"] = 9;
  write_trace_of(forged.dir() / "trace.h5", other);
  const auto bad = store.finish_attempt(forged, wr::AttemptStatus::complete, "", {"trace.h5"});
  EXPECT_FALSE(bad.canonical);
  EXPECT_TRUE(has_reason(bad.reasons, "trace.h5 is the run of another configuration")) << joined(bad.reasons);
  // A file that is not a trace at all cannot be checked, and is not canonical either.
  wr::Attempt junk = store.begin_attempt(cell.id);
  spit(junk.dir() / "trace.h5", "not hdf5");
  const auto unreadable = store.finish_attempt(junk, wr::AttemptStatus::complete, "", {"trace.h5"});
  EXPECT_FALSE(unreadable.canonical);
  EXPECT_TRUE(has_reason(unreadable.reasons, "cannot be checked against the cell")) << joined(unreadable.reasons);
}

// The executable's shared libraries from outside the system directories are frozen into bin/lib/ (checked against
// the process' memory map, independently of the dl_iterate_phdr list the store uses), registered in sweep.json,
// checked, repaired on resume, and part of an attempt's canonical identity.
TEST_F(StoreTest, FrozenLibrariesAreCheckedRepairedAndPartOfTheIdentity) {
  std::set<std::string> mapped;  // SHA-256 of every non-system shared object mapped into this process
  {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      const auto slash = line.find('/');
      if (slash == std::string::npos) continue;
      const fs::path file = line.substr(slash);
      const std::string text = file.string();
      if (text.find(".so") == std::string::npos) continue;
      bool system = false;
      for (const char* d : {"/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/"}) {
        system = system || text.rfind(d, 0) == 0;
      }
      if (!system) mapped.insert(wr::sha256_file(file));
    }
  }
  if (mapped.empty()) GTEST_SKIP() << "this build loads no shared library from outside the system directories";
  const auto store = wr::SweepStore::create(dir, kSpec, three_cells());
  std::set<std::string> frozen;
  for (const auto& entry : fs::directory_iterator(dir / "bin" / "lib")) frozen.insert(wr::sha256_file(entry.path()));
  EXPECT_EQ(frozen, mapped);
  const auto sweep = nlohmann::json::parse(slurp(dir / "sweep.json"));
  ASSERT_EQ(sweep.at("libraries").size(), store.libraries().size());
  for (const auto& library : sweep["libraries"]) {
    EXPECT_EQ(wr::sha256_file(dir / "bin" / "lib" / library["name"].get<std::string>()), library["sha256"]);
  }
  // An attempt records the libraries it ran with: canonical with the registered ones.
  const std::string id = store.cells()[0].id;
  wr::Attempt attempt = store.begin_attempt(id);
  spit(attempt.dir() / "out.bin", "abc");
  const auto record = store.finish_attempt(attempt, wr::AttemptStatus::complete, "", {"out.bin"});
  EXPECT_TRUE(record.canonical) << joined(record.reasons);
  const std::string name = store.libraries().begin()->first;
  auto manifest = nlohmann::json::parse(slurp(attempt.dir() / "manifest.json"));
  manifest["libraries"][name] = wr::sha256_hex("another build");
  spit(attempt.dir() / "manifest.json", manifest.dump(1));
  const auto other = store.read_attempt(attempt.dir(), id);
  EXPECT_FALSE(other.canonical);
  EXPECT_NE(joined(other.reasons).find("run with another " + name), std::string::npos) << joined(other.reasons);
  // A modified library is reported, another executable cannot restore it, a resume with this one does.
  const fs::path lib = dir / "bin" / "lib" / name;
  const std::string original = slurp(lib);
  spit(lib, original + "x");
  const auto problems = wr::SweepStore::open(dir).check_frozen_inputs();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("frozen library " + lib.string() + " was modified"), std::string::npos) << problems[0];
  const auto resumed = wr::SweepStore::create(dir, kSpec, three_cells(), options(true));
  EXPECT_TRUE(resumed.check_frozen_inputs().empty());
  EXPECT_EQ(slurp(lib), original);
  ASSERT_EQ(resumed.repairs().size(), 1u);
  EXPECT_NE(resumed.repairs()[0].find("restored"), std::string::npos) << resumed.repairs()[0];
}
