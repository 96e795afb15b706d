#pragma once
// Runs the cells of a sweep store: locally (one after another in this process, Kokkos threads inside each cell, or
// whole cells at a time in local worker processes: runners/exec/local_workers.hpp) or over the ranks of an MPI
// communicator with dynamic distribution (rank 0 hands out cell indices from a dispatcher thread while also running
// cells itself, so uneven cells balance and no rank idles as a pure master).
// A cell that throws is recorded as failed in its attempt manifest and the sweep carries on.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "runners/store/store.hpp"

namespace wbaudit::runners {

class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A local worker process could not be started, died before it was ready, or broke the protocol.
class WorkerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CellTask {
  std::string id;
  std::string name;
  nlohmann::json config;
};

// Runs one cell, writing its files into attempt_dir (already created); returns the paths written, relative to
// attempt_dir. Throwing marks the attempt failed with the exception's message.
using CellFn = std::function<std::vector<std::string>(const CellTask&, const std::filesystem::path& attempt_dir)>;

struct ProgressEvent {
  enum class Kind { started, completed, failed };
  Kind kind = Kind::started;
  std::string cell_id;
  std::string name;
  std::string message;  // failure reason
  std::string attempt;  // uuid of the cell's attempt; empty when none was begun (a worker died before it began)
  int rank = 0;
  double seconds = 0.0;  // completed/failed: time inside the cell function
};

struct ExecOptions {
  // false: refuse when any of the given cells already has an attempt. true: run only cells without a canonical
  // complete attempt (missing, failed, interrupted, non-canonical).
  bool resume = false;
  MPI_Comm comm = MPI_COMM_NULL;  // null: local; otherwise duplicated internally, all its ranks must call
  std::function<void(const ProgressEvent&)> progress;  // called on the rank that ran the cell (workers: the parent)
  // Local mode only: with local_jobs > 1 and more than one cell to run, the cells run in up to local_jobs worker
  // processes started from worker_command (runners/exec/local_workers.hpp), one cell at a time each; the workers run
  // the cell function their own executable passes to serve_cells, not `fn`. Ignored when comm is not null: the
  // ranks already run whole cells concurrently. Must be at least 1.
  int local_jobs = 1;
  // Executable path and arguments of one worker of this store, e.g. {"/path/wbaudit", "worker", DIR,
  // "--kokkos-threads=1"}; the executable must be the sweep's registered binary.
  std::vector<std::string> worker_command;
};

struct ExecSummary {
  std::size_t total = 0;                // cells given
  std::size_t skipped = 0;              // already canonical and complete
  std::size_t completed = 0;            // run now and completed
  std::size_t failed = 0;               // run now and failed
  std::vector<std::string> failed_ids;  // in cell order
  double wall_seconds = 0.0;
  // Sum over all ranks of the time spent inside the cell function; the rest of ranks x wall_seconds is the runner's
  // own cost (identity, manifests, hashing, distribution) plus idle ranks.
  double cell_seconds = 0.0;
  bool ok() const { return failed == 0; }
};

// Collective over opts.comm when it is not null; every rank gets the same summary. A store failure (not a cell
// failure) on any rank or worker is thrown (StoreError), after the other ranks or workers finished their current
// cell.
ExecSummary execute_sweep(const SweepStore& store, const std::vector<CellTask>& cells, const CellFn& fn,
                          const ExecOptions& opts);

// Runs one cell into a fresh attempt (begin_attempt, fn, finish_attempt), reporting started and then completed or
// failed to progress (when set). A cell that throws is recorded as failed; store failures propagate. Adds the time
// spent inside fn to cell_seconds. Returns whether the attempt completed.
bool run_cell_attempt(const SweepStore& store, const CellTask& task, const CellFn& fn,
                      const std::function<void(const ProgressEvent&)>& progress, int rank, double& cell_seconds);

// The tasks for all cells of a store (or the given ids, in that order).
std::vector<CellTask> tasks_of(const SweepStore& store);
std::vector<CellTask> tasks_of(const SweepStore& store, const std::vector<std::string>& ids);

// True when this process was started by an MPI launcher (mpirun/srun: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK).
bool launched_by_mpi();

// Initializes MPI (thread level MPI_THREAD_MULTIPLE requested) when launched_by_mpi() and not yet initialized, and
// finalizes it on destruction if it initialized it. The caller (the command line) passes MPI_COMM_WORLD to
// ExecOptions when active(); the library itself only ever uses the duplicate it makes.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  bool active() const { return m_active; }
  int rank() const { return m_rank; }
  int size() const { return m_size; }

 private:
  bool m_active = false;
  bool m_owner = false;
  int m_rank = 0;
  int m_size = 1;
};

}  // namespace wbaudit::runners
