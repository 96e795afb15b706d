#pragma once
// The main job: run a sweep spec into a sweep directory (locally or across MPI ranks). What `wbaudit run` writes
// after the cells (summary tables, reports) is evaluation: runners/evaluate/sweep_outputs.hpp.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "runners/exec/executor.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/lock.hpp"
#include "runners/store/store.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::runners {

struct RunOptions {
  std::filesystem::path out;  // sweep directory
  bool resume = false;
  // Extend the existing sweep by the cells the spec adds (runners/store/extend.hpp), then run what needs running; with
  // the sweep's own spec the same as resume.
  bool extend = false;
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
// for this spec's own sweep with resume. With extend: an existing sweep of any spec (plan_extension decides), no
// directory or one without a sweep is refused.
void check_sweep_directory(const std::filesystem::path& dir, const SweepSpec& spec, bool resume, bool extend = false);

// Refuses (SpecError) before anything runs a cell whose estimated memory, sim::estimate_cell_bytes (training) plus
// sim::estimate_recording_bytes for `threads` threads (recording and writing its trace), times `beside` cells running
// at once, exceeds `physical` bytes (the machine's memory; <= 0: no check); the message names the cell, its estimate in
// GiB and bytes with both parts, and the machine's memory.
void check_cells_fit(const SweepSpec& spec, int beside, int threads, double physical);

// Takes the sweep's lock (making the directory for it when it does not exist), then creates the sweep directory, or
// with resume reopens and checks it (SweepStore::create), all before any other process can write there; a creation
// that fails leaves no directory behind that it made. The lock is held until the returned value is destroyed.
// With extend: the existing sweep extended by the cells the spec adds (SweepStore::extend) before it is reopened as
// with resume; notes says what was added and kept.
struct LockedSweep {
  SweepLock lock;
  SweepStore store;
  std::vector<std::string> notes;
};
LockedSweep create_locked(const SweepSpec& spec, const std::filesystem::path& out, bool resume, bool extend = false);

// Undoes what create_locked made for a new sweep (not one reopened with resume) when what followed failed before
// anything ran or was submitted (`wbaudit submit` when sbatch fails): removes the sweep directory, its signing key
// (created fresh for it: never one that existed before) and the key's journal heads; with keep_directory (it existed,
// empty, before) only what is inside it. Returns the paths removed, in that order, for the message; one that cannot
// be removed is named with the reason.
std::vector<std::string> remove_created_sweep(LockedSweep& locked, bool keep_directory);

// The CellFn that runs one cell with the simulator and writes DIR/trace.h5 (atomically).
CellFn simulator_cell_fn();

// The early-crossing warning (docs/specs.md): a target run whose erased fraction, in a group of `groups` (empty:
// every group of at least min_group_size coordinates), is at or above `threshold` at a recorded step up to the
// crossing burn-in or among its first kEarlyRecordedSteps recorded steps is "above at initialization" or crosses
// before its trajectory is resolved: usually a learning rate or initialization the format cannot resolve. Returns
// the warning naming the cell and each such group with its first such step and fraction; empty when there is none.
// `wbaudit run` collects them: one line on stderr at the end of the run, the details in DIR/early_crossings.txt.
inline constexpr std::size_t kEarlyRecordedSteps = 3;
std::string early_crossing_warning(const std::string& cell_name, const sim::Trace& target,
                                   const std::vector<std::string>& groups, double threshold,
                                   std::int64_t min_group_size, std::int64_t burn_in);

// Creates (or, with resume, reopens) the sweep directory and runs every cell that is not canonical and complete.
// Collective over comm when it is not MPI_COMM_NULL. Writes no report (the caller does: report_run).
ExecSummary run_sweep(const SweepSpec& spec, const RunOptions& options, MPI_Comm comm = MPI_COMM_NULL);

}  // namespace wbaudit::runners
