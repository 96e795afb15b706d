// Driver for the local worker tests (tests/runners/executor_jobs_test.sh): runs a 16-cell sweep of uneven,
// deterministic cells through execute_sweep with --jobs N worker processes (this same executable started with
// --worker), then prints one line per cell "<name> <state> <sha256 of out.bin of the canonical attempt>", a line
// "reason <name>: <reason>" for every cell that is not done, the failed cells of the summary in order, a check of the
// progress events, and a summary line.
//   executor_jobs_probe DIR [--jobs N] [--resume] [--status-only] [CELL OPTIONS]
//   executor_jobs_probe --worker DIR [CELL OPTIONS]
// Cell options (passed on to the workers): --fail-seed N (that cell throws: a recorded failure; repeatable),
// --kill-seed N (the process running that cell SIGKILLs itself inside the cell), --store-error-seed N (that cell
// replaces its attempt's manifest.json by a directory, so finish_attempt fails: a store error), --sleep-ms N (every
// cell sleeps that long), --slow-seed N (that cell sleeps --slow-ms more, default 500).
// --throw-in-progress: the parent's progress callback throws at the first finished cell (the parent's own error).
// After an error the parent prints whether it still has child processes ("children: none" when all were reaped).
#include <sys/wait.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "runners/exec/executor.hpp"
#include "runners/exec/local_workers.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/store.hpp"

namespace wr = wbaudit::runners;

namespace {

struct CellOptions {
  std::set<int> fail_seeds;
  int kill_seed = -1, store_error_seed = -1, sleep_ms = 0, slow_seed = -1, slow_ms = 500;
  std::vector<std::string> args() const {
    std::vector<std::string> out = {
        "--kill-seed", std::to_string(kill_seed), "--store-error-seed", std::to_string(store_error_seed),
        "--sleep-ms",  std::to_string(sleep_ms),  "--slow-seed",        std::to_string(slow_seed),
        "--slow-ms",   std::to_string(slow_ms)};
    for (int seed : fail_seeds) {
      out.push_back("--fail-seed");
      out.push_back(std::to_string(seed));
    }
    return out;
  }
};

// Uneven cost: `work` rounds of a xorshift stream; the output depends only on the configuration.
wr::CellFn cell_fn(const CellOptions& o) {
  return [o](const wr::CellTask& task, const std::filesystem::path& attempt) -> std::vector<std::string> {
    const int seed = task.config.at("seed").get<int>();
    if (o.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.sleep_ms));
    if (seed == o.slow_seed) std::this_thread::sleep_for(std::chrono::milliseconds(o.slow_ms));
    if (seed == o.kill_seed) std::raise(SIGKILL);
    std::uint64_t x = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(seed + 1);
    std::ofstream out(attempt / "out.bin", std::ios::binary);
    const int rounds = task.config.at("work").get<int>() * 200000;
    for (int r = 0; r < rounds; ++r) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      if (r % 1000 == 0) out.write(reinterpret_cast<const char*>(&x), sizeof x);
    }
    out.close();
    if (seed == o.store_error_seed) {
      std::filesystem::remove(attempt / "manifest.json");
      std::filesystem::create_directory(attempt / "manifest.json");
    }
    if (o.fail_seeds.count(seed)) throw std::runtime_error("seed " + std::to_string(seed) + " failed on purpose");
    return {"out.bin"};
  };
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  bool worker = false, resume = false, status_only = false, throw_in_progress = false;
  int jobs = 1;
  std::filesystem::path dir;
  CellOptions cell;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--worker")
      worker = true;
    else if (a == "--resume")
      resume = true;
    else if (a == "--status-only")
      status_only = true;
    else if (a == "--jobs" && has_value)
      jobs = std::stoi(argv[++i]);
    else if (a == "--throw-in-progress")
      throw_in_progress = true;
    else if (a == "--fail-seed" && has_value)
      cell.fail_seeds.insert(std::stoi(argv[++i]));
    else if (a == "--slow-seed" && has_value)
      cell.slow_seed = std::stoi(argv[++i]);
    else if (a == "--slow-ms" && has_value)
      cell.slow_ms = std::stoi(argv[++i]);
    else if (a == "--kill-seed" && has_value)
      cell.kill_seed = std::stoi(argv[++i]);
    else if (a == "--store-error-seed" && has_value)
      cell.store_error_seed = std::stoi(argv[++i]);
    else if (a == "--sleep-ms" && has_value)
      cell.sleep_ms = std::stoi(argv[++i]);
    else if (dir.empty() && a.rfind("--", 0) != 0)
      dir = a;
    else {
      std::cerr << "executor_jobs_probe: unknown argument " << a << "\n";
      return 64;
    }
  }
  if (dir.empty()) {
    std::cerr << "usage: executor_jobs_probe DIR [--jobs N] [--resume] [--status-only] [cell options]\n";
    return 64;
  }
  try {
    if (worker) return wr::serve_cells(wr::SweepStore::open(dir), cell_fn(cell)) ? 0 : 1;

    std::vector<wr::StoredCell> cells;
    for (int seed = 0; seed < 16; ++seed)
      cells.push_back({"",
                       "cell/seed=" + std::to_string(seed),
                       "target",
                       "",
                       {{"schema", "wbaudit.cell/1"}, {"seed", seed}, {"work", 1 + (seed % 4) * 3}}});
    if (!status_only) {
      wr::CreateOptions create;
      create.resume = resume;
      (void)wr::SweepStore::create(dir, "probe spec\n", cells, create);
    }
    const auto store = wr::SweepStore::open(dir);
    wr::ExecOptions opts;
    opts.resume = resume;
    opts.local_jobs = jobs;
    opts.worker_command = {wr::self_executable().string(), "--worker", dir.string()};
    for (const auto& a : cell.args()) opts.worker_command.push_back(a);
    // Progress events: every cell run gets "started" and then exactly one of completed/failed, with the attempt
    // uuid that the store holds for it.
    std::map<std::string, int> state;  // cell id -> 1 started, 2 finished
    std::map<std::string, std::string> attempt_of;
    std::string event_problem;
    std::size_t events = 0;
    opts.progress = [&](const wr::ProgressEvent& e) {
      ++events;
      int& s = state[e.cell_id];
      if (e.kind == wr::ProgressEvent::Kind::started) {
        if (s != 0) event_problem += " second start of " + e.name + ";";
        s = 1;
        attempt_of[e.cell_id] = e.attempt;
      } else {
        if (throw_in_progress) throw std::runtime_error("progress display failed on purpose");
        if (s != 1) event_problem += " " + e.name + " finished without a start;";
        if (e.attempt != attempt_of[e.cell_id]) event_problem += " " + e.name + ": attempt differs from its start;";
        s = 2;
        if (e.kind == wr::ProgressEvent::Kind::failed && e.message.empty())
          event_problem += " " + e.name + " failed without a reason;";
      }
    };
    const auto summary =
        status_only ? wr::ExecSummary{} : wr::execute_sweep(store, wr::tasks_of(store), cell_fn(cell), opts);
    for (const auto& s : store.status()) {
      std::cout << s.cell->name << " " << wr::to_string(s.state) << " "
                << (s.canonical_attempt
                        ? s.attempts[*s.canonical_attempt].manifest["files"]["out.bin"].get<std::string>()
                        : std::string("-"))
                << "\n";
      if (s.state == wr::CellState::done && !attempt_of.empty() && state.count(s.cell->id) &&
          attempt_of[s.cell->id] != s.attempts[*s.canonical_attempt].uuid)
        event_problem += " " + s.cell->name + ": the event's attempt is not the canonical one;";
    }
    for (const auto& s : store.status())
      for (const auto& r : s.reasons)
        if (s.state != wr::CellState::done) std::cout << "reason " << s.cell->name << ": " << r << "\n";
    if (!status_only) {
      std::cout << "failed_ids";
      for (const auto& id : summary.failed_ids) std::cout << " " << store.cell(id).name;
      std::cout << "\n";
      for (const auto& [id, s] : state)
        if (s != 2) event_problem += " " + store.cell(id).name + " started but never finished;";
      if (state.size() != summary.completed + summary.failed) event_problem += " events for the wrong number of cells;";
      std::cout << "events " << events << (event_problem.empty() ? " consistent" : " PROBLEM:" + event_problem) << "\n";
      std::cout << "summary total=" << summary.total << " completed=" << summary.completed
                << " failed=" << summary.failed << " skipped=" << summary.skipped << " jobs=" << jobs
                << " parent_pid=" << ::getpid() << " cell_seconds=" << summary.cell_seconds
                << " wall=" << summary.wall_seconds << "\n";
    }
    return summary.ok() ? 0 : 3;
  } catch (const std::exception& e) {
    std::cerr << "executor_jobs_probe: " << e.what() << "\n";
    errno = 0;
    const bool reaped = ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
    std::cerr << "children: " << (reaped ? "none" : "LEFT") << "\n";
    return 1;
  }
}
