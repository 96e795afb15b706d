#pragma once
// Local worker processes (ExecOptions::local_jobs > 1): whole cells run concurrently on one machine, as they do
// over MPI ranks, because the kernels of one cell are too small to keep several Kokkos threads busy.
//
// The parent starts up to local_jobs processes of ExecOptions::worker_command (for wbaudit: this same executable,
// `wbaudit worker DIR --kokkos-threads=T`) with posix_spawn, never a bare fork, since the parent's Kokkos/OpenMP
// state must not be copied into a child. Each worker answers on its stdout, one JSON object per line:
//   {"event":"ready","pid":P}                                      after checking its binary against the sweep
//   {"event":"started","cell":ID,"attempt":UUID}                    after begin_attempt
//   {"event":"finished","cell":ID,"ok":B,"seconds":S,"message":M}   after finish_attempt (M: the failure reason)
//   {"event":"error","message":M}                                   a store error; the worker then exits
// and reads one cell id per line on its stdin, which the parent writes whenever the worker is idle (dynamic
// distribution, so uneven cells balance). Closing its stdin tells a worker to exit.
//
// A worker that dies (crash, SIGKILL) while holding a cell: the cell is reported failed with the worker's signal
// or exit status, its attempt manifest is marked failed with that reason (SweepStore::fail_abandoned_attempt), the
// worker is reaped, and a replacement starts if cells remain. A worker that dies before it was ready, or that breaks
// the protocol, is a WorkerError; a store error in a worker is a StoreError of the parent. In both cases no further
// cells are handed out, the other workers finish their current cell, and then execute_sweep throws. If the parent
// itself throws, its workers are killed and reaped; if it dies, they get SIGKILL (PR_SET_PDEATHSIG).
#include <cstddef>
#include <vector>

#include "runners/exec/executor.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::runners {

// The worker side: serves cells of store on stdin/stdout (protocol above) with fn until stdin is closed. Standard
// output is reserved for the protocol: anything else written to it (by a cell or a library) goes to stderr instead.
// Returns false after a store error (already reported to the parent on stdout).
bool serve_cells(const SweepStore& store, const CellFn& fn);

namespace detail {
// The parent side, called by execute_sweep: runs the cells with indices `todo` in worker processes and adds the
// outcome to summary (completed, failed, failed_ids in cell order, cell_seconds).
void run_in_local_workers(const SweepStore& store, const std::vector<CellTask>& cells,
                          const std::vector<std::size_t>& todo, const ExecOptions& opts, ExecSummary& summary);
}  // namespace detail

}  // namespace wbaudit::runners
