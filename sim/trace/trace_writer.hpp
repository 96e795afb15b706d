#pragma once
// Streaming a trace to disk as it is recorded (docs/trace-format.md, "Streaming"): each recorded step's rows are
// appended to `<path>.partial` and flushed, so the recorder's memory does not grow with the number of recorded steps
// and a crash loses at most the step in progress; finish() then writes `<path>` in the canonical layout (byte for byte
// what write_trace writes for the same trace) under a temporary name, renames it into place and removes the partial
// file.
//
// The partial file has the finished file's datasets with an unlimited step dimension, the root attribute
// `complete` = 0, and is written under HDF5's single-writer / multiple-reader protocol (SWMR): every flush leaves a
// file that a reader (TraceReader, h5py with swmr=True) can open at any time, also after the writer died. Its
// recorded steps are the entries of /recorded_steps, written last in each step. HDF5 never meets a full disk while it
// holds the file: before each step the writer reserves the file's next bytes (posix_fallocate), and a reservation
// that fails is a TraceFileError naming the file and the reason, with the partial file left readable.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

// How many rows a trace holds: recorded steps, validation losses, replayed checkpoints.
struct TraceRows {
  std::int64_t steps = 0, validations = 0, replays = 0;
  bool operator==(const TraceRows&) const = default;
};

// The partial file of the trace at `path`: path + ".partial".
std::filesystem::path partial_trace_path(const std::filesystem::path& path);

class TraceWriter {
 public:
  // Starts the trace of `path` with the header of `prototype` (every field but the rows: attributes, groups with their
  // projected formats and policies, replay series; validation datasets are always created) and the rows it holds.
  // An existing partial file is replaced (a run that starts over). Throws TraceFileError naming the file.
  TraceWriter(const std::filesystem::path& path, Trace& prototype);
  // Continues the partial file of `path` after its run stopped (the writer that held it must be gone): its header
  // must equal `prototype`'s (configuration, mode, groups, layouts), and its rows beyond `keep` (what the checkpoint
  // the run resumes from had written) are dropped. Throws TraceFileError naming the file and what differs.
  static TraceWriter resume(const std::filesystem::path& path, Trace& prototype, const TraceRows& keep);
  TraceWriter(TraceWriter&&) noexcept;
  TraceWriter& operator=(TraceWriter&&) noexcept;
  // Closes the partial file, which stays: the readable trace of an unfinished run.
  ~TraceWriter();

  // Appends the rows `trace` holds (its per-step series, validation losses and replayed checkpoints) to the file,
  // flushes it, and removes them from `trace`, leaving its header. `trace` must have the prototype's header.
  void append(Trace& trace);
  const TraceRows& rows() const;
  // Writes `path` from the partial file (canonical layout, temporary name then rename), removes the partial file and
  // closes the writer; `steps`: the run's optimizer steps when they were not known at the start (the recorders of
  // wbaudit.torch), else the header's. Throws TraceFileError naming the file.
  void finish(std::optional<std::int64_t> steps = std::nullopt);
  const std::filesystem::path& partial() const;
  // Bytes the writer itself holds (its dataset table and reservation bookkeeping), not HDF5's own caches: it does not
  // grow with the number of rows written.
  std::size_t held_bytes() const;

 private:
  struct State;
  TraceWriter() = default;
  std::unique_ptr<State> m;
};

}  // namespace wbaudit::sim
