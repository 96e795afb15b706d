#include "runners/exec/executor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "runners/exec/local_workers.hpp"
#include "runners/store/identity.hpp"

namespace wbaudit::runners {
namespace {

constexpr int kTagRequest = 7101;
constexpr int kTagAssign = 7102;
constexpr long long kNoMoreWork = -1;

void check_mpi(int rc, const char* call, const std::string& context = "") {
  if (rc == MPI_SUCCESS) {
    return;
  }
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw MpiError(std::string("execute_sweep: ") + call + " failed" + (context.empty() ? "" : " (" + context + ")") +
                 ": " + std::string(text, static_cast<std::size_t>(std::max(length, 0))));
}

struct CommGuard {
  MPI_Comm comm = MPI_COMM_NULL;
  ~CommGuard() {
    if (comm != MPI_COMM_NULL) {
      MPI_Comm_free(&comm);
    }
  }
};

std::vector<std::size_t> select_work(const SweepStore& store, const std::vector<CellTask>& cells, bool resume,
                                     std::size_t& skipped) {
  std::vector<std::size_t> to_run;
  skipped = 0;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const CellStatus status = store.cell_status(cells[i].id);
    if (!resume && !status.attempts.empty()) {
      throw StoreError("cell \"" + cells[i].name + "\" (" + cells[i].id + ") already has attempts in " +
                       store.dir().string() + "; use --resume");
    }
    if (status.state == CellState::done) {
      ++skipped;
    } else {
      to_run.push_back(i);
    }
  }
  return to_run;
}

void check_runnable(const SweepStore& store, const std::vector<CellTask>& cells) {
  for (const auto& task : cells) {
    const StoredCell& cell = store.cell(task.id);  // throws for a cell that is not in the sweep
    if (cell.name != task.name) {
      throw StoreError("task \"" + task.name + "\" has the id of the sweep's cell \"" + cell.name + "\"");
    }
  }
  store.require_key("run cells of");
  if (self_executable_sha256() != store.binary_sha256()) {
    throw StoreError("this executable (" + self_executable().string() + ", hash " + self_executable_sha256() +
                     ") is not the sweep's registered binary (hash " + store.binary_sha256() + "); run " +
                     store.executable_path().string() + " instead so that results stay canonical");
  }
}

}  // namespace

bool run_cell_attempt(const SweepStore& store, const CellTask& task, const CellFn& fn,
                      const std::function<void(const ProgressEvent&)>& progress, int rank, double& cell_seconds) {
  Attempt attempt = store.begin_attempt(task.id);
  if (progress) {
    progress({ProgressEvent::Kind::started, task.id, task.name, "", attempt.uuid(), rank, 0.0});
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> files;
  std::string error;
  try {
    files = fn(task, attempt.dir());
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cell_seconds += seconds;
  const AttemptRecord record =
      store.finish_attempt(attempt, error.empty() ? AttemptStatus::complete : AttemptStatus::failed, error, files);
  const bool ok = record.status == AttemptStatus::complete;
  if (progress) {
    progress({ok ? ProgressEvent::Kind::completed : ProgressEvent::Kind::failed, task.id, task.name,
              ok ? "" : record.exit_reason, attempt.uuid(), rank, seconds});
  }
  return ok;
}

std::vector<CellTask> tasks_of(const SweepStore& store) {
  std::vector<CellTask> out;
  for (const auto& cell : store.cells()) {
    out.push_back({cell.id, cell.name, cell.config});
  }
  return out;
}

std::vector<CellTask> tasks_of(const SweepStore& store, const std::vector<std::string>& ids) {
  std::vector<CellTask> out;
  for (const auto& id : ids) {
    const StoredCell& cell = store.cell(id);
    out.push_back({cell.id, cell.name, cell.config});
  }
  return out;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Without a communicator: the cells run in this process, or in local worker processes (opts.local_jobs).
void execute_locally(const SweepStore& store, const std::vector<CellTask>& cells, const CellFn& fn,
                     const ExecOptions& opts, ExecSummary& summary) {
  if (opts.local_jobs < 1) {
    throw std::invalid_argument("execute_sweep: local_jobs must be at least 1, not " + std::to_string(opts.local_jobs));
  }
  check_runnable(store, cells);
  const auto to_run = select_work(store, cells, opts.resume, summary.skipped);
  if (opts.local_jobs > 1 && to_run.size() > 1) {
    detail::run_in_local_workers(store, cells, to_run, opts, summary);
    return;
  }
  for (std::size_t i : to_run) {
    if (run_cell_attempt(store, cells[i], fn, opts.progress, 0, summary.cell_seconds)) {
      ++summary.completed;
    } else {
      ++summary.failed;
      summary.failed_ids.push_back(cells[i].id);
    }
  }
}

// One rank's part of a sweep run over a communicator (the duplicate execute_sweep made).
struct MpiRun {
  const SweepStore& store;
  const std::vector<CellTask>& cells;
  const CellFn& fn;
  const ExecOptions& opts;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

// What one rank did: cells completed, indices into cells that failed, time inside the cell function, and a store
// failure (not a cell failure).
struct RankOutcome {
  std::size_t completed = 0;
  std::vector<int> failed;
  double cell_seconds = 0.0;
  std::string error;
};

// Rank 0 validates and decides the work; an error there is shared so that every rank throws instead of hanging.
// Every rank gets `skipped`; only rank 0 gets the indices to run.
std::vector<std::size_t> plan_work(const MpiRun& run, std::size_t& skipped) {
  std::vector<std::size_t> to_run;
  std::string setup_error;
  if (run.rank == 0) {
    try {
      check_runnable(run.store, run.cells);
      to_run = select_work(run.store, run.cells, run.opts.resume, skipped);
    } catch (const std::exception& e) {
      setup_error = e.what();
      if (setup_error.empty()) {
        setup_error = "setup failed";
      }
    }
  }
  long long header[2] = {static_cast<long long>(setup_error.size()), static_cast<long long>(skipped)};
  check_mpi(MPI_Bcast(header, 2, MPI_LONG_LONG, 0, run.comm), "MPI_Bcast", "setup");
  if (header[0] > 0) {
    setup_error.resize(static_cast<std::size_t>(header[0]));
    check_mpi(MPI_Bcast(setup_error.data(), static_cast<int>(header[0]), MPI_CHAR, 0, run.comm), "MPI_Bcast", "error");
    throw StoreError(setup_error);
  }
  skipped = static_cast<std::size_t>(header[1]);
  return to_run;
}

void run_index(const MpiRun& run, std::size_t i, RankOutcome& outcome) {
  if (run_cell_attempt(run.store, run.cells[i], run.fn, run.opts.progress, run.rank, outcome.cell_seconds)) {
    ++outcome.completed;
  } else {
    outcome.failed.push_back(static_cast<int>(i));
  }
}

// Waits for the next work request from another rank; returns the requesting rank.
int receive_work_request(MPI_Comm comm) {
  long long request = 0;
  MPI_Request handle;
  check_mpi(MPI_Irecv(&request, 1, MPI_LONG_LONG, MPI_ANY_SOURCE, kTagRequest, comm, &handle), "MPI_Irecv");
  int done = 0;
  MPI_Status status;
  auto wait = std::chrono::microseconds(50);
  while (true) {
    check_mpi(MPI_Test(&handle, &done, &status), "MPI_Test");
    if (done) {
      break;
    }
    // Sleep instead of spinning: the dispatcher shares a core with the cell computation.
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, std::chrono::microseconds(2000));
  }
  return status.MPI_SOURCE;
}

// The dispatcher thread of rank 0: answers work requests from the other ranks with the next index of `to_run`,
// sharing the counter `next` with rank 0's own loop, until every other rank was told that no work is left. Returns
// the error that stopped it, or "".
std::string dispatch_work(const MpiRun& run, const std::vector<std::size_t>& to_run, std::atomic<std::size_t>& next) {
  try {
    int stopped = 0;
    while (stopped < run.size - 1) {
      const int source = receive_work_request(run.comm);
      const std::size_t i = next.fetch_add(1);
      long long assign = i < to_run.size() ? static_cast<long long>(to_run[i]) : kNoMoreWork;
      if (assign == kNoMoreWork) {
        ++stopped;
      }
      check_mpi(MPI_Send(&assign, 1, MPI_LONG_LONG, source, kTagAssign, run.comm), "MPI_Send",
                "assignment to rank " + std::to_string(source));
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Rank 0: runs cells of `to_run` itself while its dispatcher thread hands the others out. Only the dispatcher calls
// MPI until it is joined (MPI_THREAD_SERIALIZED).
void run_as_dispatcher(const MpiRun& run, const std::vector<std::size_t>& to_run, RankOutcome& outcome) {
  std::atomic<std::size_t> next{0};
  std::string dispatch_error;
  std::thread dispatcher([&] { dispatch_error = dispatch_work(run, to_run, next); });
  try {
    for (std::size_t i = next.fetch_add(1); i < to_run.size(); i = next.fetch_add(1)) {
      run_index(run, to_run[i], outcome);
    }
  } catch (const std::exception& e) {
    outcome.error = e.what();
    next.store(to_run.size());  // hand out no more work
  }
  dispatcher.join();
  if (!dispatch_error.empty() && outcome.error.empty()) {
    outcome.error = dispatch_error;
  }
}

// The other ranks: ask rank 0 for a cell index until it says there is no more work.
void run_as_worker(const MpiRun& run, RankOutcome& outcome) {
  while (true) {
    long long request = 0, assign = kNoMoreWork;
    check_mpi(MPI_Send(&request, 1, MPI_LONG_LONG, 0, kTagRequest, run.comm), "MPI_Send", "work request");
    check_mpi(MPI_Recv(&assign, 1, MPI_LONG_LONG, 0, kTagAssign, run.comm, MPI_STATUS_IGNORE), "MPI_Recv",
              "work assignment");
    if (assign == kNoMoreWork) {
      break;
    }
    if (assign < 0 || static_cast<std::size_t>(assign) >= run.cells.size()) {
      throw MpiError("execute_sweep: rank 0 assigned cell index " + std::to_string(assign) + " of " +
                     std::to_string(run.cells.size()));
    }
    if (outcome.error.empty()) {
      try {
        run_index(run, static_cast<std::size_t>(assign), outcome);
      } catch (const std::exception& e) {
        outcome.error = e.what();  // keep answering so that rank 0 can finish; reported below
      }
    }
  }
}

// Collects counts, failed indices and errors on every rank into the summary; throws when any rank had a store
// failure.
void combine_outcomes(const MpiRun& run, const RankOutcome& mine, ExecSummary& summary) {
  long long counts[2] = {static_cast<long long>(mine.completed), static_cast<long long>(mine.failed.size())};
  long long totals[2] = {0, 0};
  check_mpi(MPI_Allreduce(counts, totals, 2, MPI_LONG_LONG, MPI_SUM, run.comm), "MPI_Allreduce", "counts");
  const int my_count = static_cast<int>(mine.failed.size());
  std::vector<int> per_rank(static_cast<std::size_t>(run.size)), offsets(static_cast<std::size_t>(run.size), 0);
  check_mpi(MPI_Allgather(&my_count, 1, MPI_INT, per_rank.data(), 1, MPI_INT, run.comm), "MPI_Allgather");
  for (int r = 1; r < run.size; ++r) {
    offsets[r] = offsets[r - 1] + per_rank[r - 1];
  }
  std::vector<int> all_failed(static_cast<std::size_t>(totals[1]));
  check_mpi(MPI_Allgatherv(mine.failed.data(), my_count, MPI_INT, all_failed.data(), per_rank.data(), offsets.data(),
                           MPI_INT, run.comm),
            "MPI_Allgatherv", "failed cells");
  check_mpi(MPI_Allreduce(&mine.cell_seconds, &summary.cell_seconds, 1, MPI_DOUBLE, MPI_SUM, run.comm), "MPI_Allreduce",
            "cell seconds");
  int my_error = mine.error.empty() ? 0 : 1, any_error = 0;
  check_mpi(MPI_Allreduce(&my_error, &any_error, 1, MPI_INT, MPI_MAX, run.comm), "MPI_Allreduce", "errors");
  if (!mine.error.empty()) {
    throw StoreError("rank " + std::to_string(run.rank) + ": " + mine.error);
  }
  if (any_error) {
    throw StoreError("rank " + std::to_string(run.rank) + ": another rank failed (see its message)");
  }

  std::sort(all_failed.begin(), all_failed.end());
  summary.completed = static_cast<std::size_t>(totals[0]);
  summary.failed = static_cast<std::size_t>(totals[1]);
  for (int i : all_failed) {
    summary.failed_ids.push_back(run.cells[static_cast<std::size_t>(i)].id);
  }
}

// With a communicator: collective over a duplicate of opts.comm.
void execute_with_mpi(const SweepStore& store, const std::vector<CellTask>& cells, const CellFn& fn,
                      const ExecOptions& opts, ExecSummary& summary) {
  CommGuard guard;
  check_mpi(MPI_Comm_dup(opts.comm, &guard.comm), "MPI_Comm_dup");
  MpiRun run{store, cells, fn, opts, guard.comm};
  check_mpi(MPI_Comm_rank(run.comm, &run.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(run.comm, &run.size), "MPI_Comm_size");

  const std::vector<std::size_t> to_run = plan_work(run, summary.skipped);
  RankOutcome mine;
  if (run.rank == 0) {
    run_as_dispatcher(run, to_run, mine);
  } else {
    run_as_worker(run, mine);
  }
  combine_outcomes(run, mine, summary);
}

}  // namespace

ExecSummary execute_sweep(const SweepStore& store, const std::vector<CellTask>& cells, const CellFn& fn,
                          const ExecOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  ExecSummary summary;
  summary.total = cells.size();
  if (opts.comm == MPI_COMM_NULL) {
    execute_locally(store, cells, fn, opts, summary);
  } else {
    execute_with_mpi(store, cells, fn, opts, summary);
  }
  summary.wall_seconds = seconds_since(start);
  return summary;
}

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(name)) {
      return true;
    }
  }
  return false;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (!launched_by_mpi()) {
      return;
    }
    int provided = 0;
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    m_owner = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      throw MpiError("MpiSession: the MPI library provides thread level " + std::to_string(provided) +
                     ", below MPI_THREAD_SERIALIZED which the dispatcher thread needs");
    }
  }
  m_active = true;
  // MPI_COMM_WORLD here only to report rank and size; execute_sweep works on a duplicate of what it is given.
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &m_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &m_size), "MPI_Comm_size");
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (m_owner && !finalized) {
    MPI_Finalize();
  }
}

}  // namespace wbaudit::runners
