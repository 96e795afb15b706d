// Local executor with a cheap cell function (the executor's input): failures recorded, resume runs only what is
// missing, failed or non-canonical.
#include "runners/exec/executor.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <set>

#include "runners/store/identity.hpp"

namespace fs = std::filesystem;
namespace wr = wbaudit::runners;

namespace {

std::vector<wr::StoredCell> cells(int n) {
  std::vector<wr::StoredCell> out;
  for (int i = 0; i < n; ++i)
    out.push_back({"", "cell" + std::to_string(i), "target", "", {{"schema", "wbaudit.cell/1"}, {"seed", i}}});
  return out;
}

// Writes out.txt = "seed=<seed>"; throws for the seeds in `failing`.
struct FakeCell {
  std::map<std::string, int> calls;
  std::set<int> failing;
  std::vector<std::string> operator()(const wr::CellTask& task, const fs::path& dir) {
    ++calls[task.name];
    const int seed = task.config.at("seed").get<int>();
    std::ofstream(dir / "out.txt") << "seed=" << seed;
    if (failing.count(seed)) throw std::runtime_error("seed " + std::to_string(seed) + " diverged");
    return {"out.txt"};
  }
};

wr::ExecOptions resuming() {
  wr::ExecOptions o;
  o.resume = true;
  return o;
}

wr::CreateOptions registered_binary(const fs::path& executable) {
  wr::CreateOptions o;
  o.executable = executable;
  return o;
}

struct ExecutorTest : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("wbaudit_exec_" + wr::random_uuid());
  void TearDown() override { fs::remove_all(dir); }
};

}  // namespace

TEST_F(ExecutorTest, FailuresAreRecordedAndTheSweepCarriesOn) {
  const auto store = wr::SweepStore::create(dir, "spec", cells(5));
  FakeCell fake;
  fake.failing = {1, 3};
  std::vector<wr::ProgressEvent> events;
  wr::ExecOptions opts;
  opts.progress = [&](const wr::ProgressEvent& e) { events.push_back(e); };
  const auto summary = wr::execute_sweep(
      store, wr::tasks_of(store), [&](auto& t, auto& d) { return fake(t, d); }, opts);
  EXPECT_EQ(summary.total, 5u);
  EXPECT_EQ(summary.completed, 3u);
  EXPECT_EQ(summary.failed, 2u);
  EXPECT_FALSE(summary.ok());
  ASSERT_EQ(summary.failed_ids.size(), 2u);
  EXPECT_EQ(summary.failed_ids[0], store.cells()[1].id);
  EXPECT_EQ(summary.failed_ids[1], store.cells()[3].id);
  EXPECT_EQ(events.size(), 10u);
  const auto status = store.cell_status(store.cells()[3].id);
  EXPECT_EQ(status.state, wr::CellState::failed);
  ASSERT_EQ(status.attempts.size(), 1u);
  EXPECT_EQ(status.attempts[0].exit_reason, "seed 3 diverged");
  EXPECT_EQ(store.cell_status(store.cells()[0].id).state, wr::CellState::done);
  // Without resume, a second run over cells that have attempts is refused.
  EXPECT_THROW((void)wr::execute_sweep(store, wr::tasks_of(store), [&](auto& t, auto& d) { return fake(t, d); }, {}),
               wr::StoreError);
}

TEST_F(ExecutorTest, ResumeRunsOnlyMissingFailedOrNonCanonicalCells) {
  const auto store = wr::SweepStore::create(dir, "spec", cells(6));
  FakeCell first;
  first.failing = {2};
  (void)wr::execute_sweep(store, wr::tasks_of(store), [&](auto& t, auto& d) { return first(t, d); }, {});
  // Cell 4: attempts removed (missing). Cell 5: output edited (non-canonical).
  fs::remove_all(dir / "cells" / store.cells()[4].id);
  for (const auto& e : fs::directory_iterator(dir / "cells" / store.cells()[5].id / "attempts"))
    std::ofstream(e.path() / "out.txt") << "tampered";
  FakeCell second;
  const auto summary = wr::execute_sweep(
      store, wr::tasks_of(store), [&](auto& t, auto& d) { return second(t, d); }, resuming());
  EXPECT_EQ(summary.skipped, 3u);
  EXPECT_EQ(summary.completed, 3u);
  EXPECT_EQ(summary.failed, 0u);
  const std::map<std::string, int> expected{{"cell2", 1}, {"cell4", 1}, {"cell5", 1}};
  EXPECT_EQ(second.calls, expected);
  for (const auto& s : store.status()) EXPECT_EQ(s.state, wr::CellState::done) << s.cell->name;
  // The rerun's output equals an uninterrupted run's: printf 'seed=5' | sha256sum
  const auto s5 = store.cell_status(store.cells()[5].id);
  EXPECT_EQ(s5.attempts[*s5.canonical_attempt].manifest["files"]["out.txt"],
            "21df5d9b21fca1b7c6c85295029cb45e0fbf526a09bb6e0f2d7ab32c316d12d9");
  // Nothing left to do.
  FakeCell third;
  const auto again = wr::execute_sweep(
      store, wr::tasks_of(store), [&](auto& t, auto& d) { return third(t, d); }, resuming());
  EXPECT_EQ(again.skipped, 6u);
  EXPECT_TRUE(third.calls.empty());
}

TEST_F(ExecutorTest, RefusesTasksOutsideTheSweepAndForeignBinaries) {
  const auto store = wr::SweepStore::create(dir, "spec", cells(2));
  FakeCell fake;
  std::vector<wr::CellTask> foreign{{wr::cell_id({{"schema", "wbaudit.cell/1"}, {"seed", 99}}), "x", {}}};
  EXPECT_THROW((void)wr::execute_sweep(store, foreign, [&](auto& t, auto& d) { return fake(t, d); }, {}),
               wr::StoreError);
  const fs::path other = dir.string() + "_other";
  const auto foreign_store = wr::SweepStore::create(other, "spec", cells(2), registered_binary("/bin/true"));
  try {
    (void)wr::execute_sweep(foreign_store, wr::tasks_of(foreign_store), [&](auto& t, auto& d) { return fake(t, d); },
                            {});
    FAIL() << "ran under a binary that is not the registered one";
  } catch (const wr::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("registered binary"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fake.calls.empty());
  fs::remove_all(other);
}

TEST_F(ExecutorTest, LocalJobsBelowOneAreRefused) {
  const auto store = wr::SweepStore::create(dir, "spec", cells(3));
  FakeCell fake;
  for (int jobs : {0, -2}) {
    wr::ExecOptions opts;
    opts.local_jobs = jobs;
    try {
      (void)wr::execute_sweep(
          store, wr::tasks_of(store), [&](auto& t, auto& d) { return fake(t, d); }, opts);
      FAIL() << "accepted local_jobs = " << jobs;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("local_jobs must be at least 1, not " + std::to_string(jobs)),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_TRUE(fake.calls.empty());
  EXPECT_FALSE(fs::exists(dir / "cells" / store.cells()[0].id));
}

// With a single cell to run there is nothing to run concurrently: it runs here, and no worker is started (the
// worker command would fail).
TEST_F(ExecutorTest, OneCellToRunRunsInThisProcess) {
  const auto store = wr::SweepStore::create(dir, "spec", cells(1));
  FakeCell fake;
  wr::ExecOptions opts;
  opts.local_jobs = 4;
  opts.worker_command = {"/nonexistent/wbaudit-worker"};
  const auto summary = wr::execute_sweep(
      store, wr::tasks_of(store), [&](auto& t, auto& d) { return fake(t, d); }, opts);
  EXPECT_EQ(summary.completed, 1u);
  EXPECT_EQ(fake.calls.at("cell0"), 1);
}

// Workers that cannot start, die before they are ready, or write something that is not the protocol: the sweep is
// an error naming what happened, no cell counts as run, and every child is reaped (no zombie, no orphan).
TEST_F(ExecutorTest, BrokenWorkersAreAnErrorAndAreReaped) {
  const auto store = wr::SweepStore::create(dir, "spec", cells(3));
  FakeCell fake;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"/nonexistent/wbaudit-worker"}, "cannot start the worker process /nonexistent/wbaudit-worker"},
      {{"/bin/sh", "-c", "exit 7"}, "exited with status 7 before it was ready"},
      {{"/bin/sh", "-c", "kill -9 $$"}, "was killed by signal 9 (Killed) before it was ready"},
      {{"/bin/sh", "-c", "echo hello; exec sleep 3600"}, "broke the worker protocol: unreadable line \"hello\""},
  };
  for (const auto& [command, expected] : cases) {
    wr::ExecOptions opts;
    opts.resume = true;
    opts.local_jobs = 2;
    opts.worker_command = command;
    try {
      (void)wr::execute_sweep(
          store, wr::tasks_of(store), [&](auto& t, auto& d) { return fake(t, d); }, opts);
      ADD_FAILURE() << "no error for the worker " << command.back();
    } catch (const wr::WorkerError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    // The protocol breaker is killed, not waited for: it sleeps an hour, past the test's timeout (600 s).
    errno = 0;
    EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1) << "a worker was left unreaped: " << command.back();
    EXPECT_EQ(errno, ECHILD);
  }
  EXPECT_TRUE(fake.calls.empty());
  for (const auto& s : store.status()) EXPECT_EQ(s.state, wr::CellState::pending) << s.cell->name;
}
