// Local executor with a cheap cell function (the executor's input): failures recorded, resume runs only what is
// missing, failed or non-canonical.
#include "runners/executor.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "runners/identity.hpp"

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
