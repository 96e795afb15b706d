#pragma once
// The main job: run a sweep spec into a sweep directory (locally or across MPI ranks), then write the summary
// tables and the crossing report from the traces it produced.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "runners/executor.hpp"
#include "runners/spec.hpp"
#include "runners/store.hpp"
#include "runners/sweep_lock.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::runners {

struct RunOptions {
  std::filesystem::path out;  // sweep directory
  bool resume = false;
  bool report = true;    // write summary.csv and report/ after the cells ran
  bool progress = true;  // progress lines on stderr
  // Local runs (comm null): cells at a time, each in a worker process of this executable (`wbaudit worker`) with
  // worker_threads Kokkos threads; 1 runs every cell in this process. Ignored under MPI.
  int jobs = 1;
  int worker_threads = 1;
  // Run only the cells whose names match one of these shell patterns (each must match a cell); empty: every cell.
  // The others stay pending (a later `--resume` runs them).
  std::vector<std::string> only;
  // Create (or check) the sweep directory and run nothing: e.g. to register an analysis before any outcome exists.
  bool create_only = false;
};

// The cells of a spec as stored in a sweep directory (ids are filled in by SweepStore::create).
std::vector<StoredCell> stored_cells(const SweepSpec& spec);

// Refuses an output directory this spec cannot write before anything is written, saying why and what to do: one made
// by another spec (--resume continues a sweep only with the spec that created it), one of this spec without
// resume, a non-empty directory that is no sweep. Throws StoreError; returns for a new or an empty directory, and
// for this spec's own sweep with resume.
void check_sweep_directory(const std::filesystem::path& dir, const SweepSpec& spec, bool resume);

// Takes the sweep's lock (making the directory for it when it does not exist), then creates the sweep directory, or
// with resume reopens and checks it (SweepStore::create), all before any other process can write there; a creation
// that fails leaves no directory behind that it made. The lock is held until the returned value is destroyed.
struct LockedSweep {
  SweepLock lock;
  SweepStore store;
};
LockedSweep create_locked(const SweepSpec& spec, const std::filesystem::path& out, bool resume);

// The CellFn that runs one cell with the simulator and writes DIR/trace.h5 (atomically).
CellFn simulator_cell_fn();

// The early-crossing warning (docs/specs.md): a target run whose erased fraction, in a group of `groups` (empty:
// every group of at least min_group_size coordinates), is at or above `threshold` at a recorded step up to the
// crossing burn-in or among its first kEarlyRecordedSteps recorded steps is "above at initialization" or crosses
// before its trajectory is resolved: usually a learning rate or initialization the format cannot resolve. Returns
// the warning naming the cell and each such group with its first such step and fraction; empty when there is none.
// `wbaudit run` prints it after each such target cell.
inline constexpr std::size_t kEarlyRecordedSteps = 3;
std::string early_crossing_warning(const std::string& cell_name, const sim::Trace& target,
                                   const std::vector<std::string>& groups, double threshold,
                                   std::int64_t min_group_size, std::int64_t burn_in);

// Creates (or, with resume, reopens) the sweep directory and runs every cell that is not canonical and complete.
// Collective over comm when it is not MPI_COMM_NULL; rank 0 writes the report.
ExecSummary run_sweep(const SweepSpec& spec, const RunOptions& options, MPI_Comm comm = MPI_COMM_NULL);

struct SweepOutputs {
  std::filesystem::path summary_csv;
  std::filesystem::path trajectories_csv;
  std::filesystem::path report_html;
  std::filesystem::path loss_html;  // report/loss.html when any run has validation losses (studies 2, 5, 6)
  std::string loss_headline;        // the loss studies' headline lines (empty without them)
  std::string crossing_summary;     // one line, e.g. "55/72 both cross, 52/55 within 15%, ..."
  std::size_t evaluation_cells = 0;
  std::size_t missing_targets = 0;  // target runs without a canonical complete attempt (left out, listed in report)
};

// Reads the traces of a sweep directory and writes summary.csv, trajectories.csv and report/.
SweepOutputs write_sweep_outputs(const SweepStore& store, const SweepSpec& spec);
// The lines `wbaudit run` and `wbaudit report` print after writing them: crossings, the loss headline, the paths.
void print_outputs(std::ostream& out, const SweepOutputs& outputs);

}  // namespace wbaudit::runners
