#pragma once
// Reading a trace a bounded block of recorded steps at a time (docs/trace-format.md, "Reading"): the header (every
// attribute, the per-step root series, validation and replay) is read when the file is opened; a group's rows (its
// per-step series, d histogram, margin histogram or joint pairs, kept w and u) are read for the steps asked for only,
// so a caller's memory does not grow with the number of recorded steps. Reads every schema (1, 2, 3) and the partial
// trace of an unfinished run (a file with root attribute `complete` 0, opened under HDF5's single-writer /
// multiple-reader protocol while its writer may still be appending): its recorded steps are the entries of
// /recorded_steps, and every per-step dataset is read to that length (a step in progress, written to some datasets
// but not yet to /recorded_steps, is not read).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

class TraceReader {
 public:
  // Opens `path`; throws TraceFileError naming the file (missing, not HDF5, not a trace, a dataset shorter than the
  // recorded steps) and TraceIncompleteError for an unfinished run's trace unless options allow it.
  explicit TraceReader(const std::filesystem::path& path, const TraceReadOptions& options = {});
  ~TraceReader();
  TraceReader(TraceReader&&) noexcept;
  TraceReader& operator=(TraceReader&&) noexcept;

  // Every field but the groups' per-step rows (the groups carry name, tensor id, size, init absmax and the names of
  // their projected formats and policies, with empty series). complete() is header().complete.
  const Trace& header() const;
  bool complete() const;
  std::size_t recorded_steps() const;  // T: header().recorded_steps.size()
  std::size_t group_count() const;

  // Group g's rows at recorded steps [first, first + count) (first + count <= T): a GroupTrace whose series hold
  // exactly those steps (joint pairs rebased: offsets from 0). Throws TraceFileError naming the file, group and step
  // for a dataset that cannot be read.
  GroupTrace read_group(std::size_t g, std::size_t first, std::size_t count) const;
  // Every group's rows at recorded step index t: header() with one recorded step.
  Trace read_step(std::size_t t) const;
  // The whole trace (what read_trace returns).
  Trace read_all() const;
  // Which joint record group g has: schema 3's margin histogram, schema 2's pairs (their total count: pair_count).
  bool group_has_margin(std::size_t g) const;
  bool group_has_pairs(std::size_t g) const;
  std::size_t pair_count() const;
  // Whether group g keeps its coordinates' w and u (joint/w, joint/u).
  bool group_has_exact(std::size_t g) const;

  // Values [first, first + count) of group g's per-step dataset `path` (its path under the group: "nonzero",
  // "ratio_histogram", "joint/margin", "projected/e4m3/expected/stochastic/erased", ...) of `width` values per
  // recorded step, viewed flat and row-major (step t holds values [t * width, (t + 1) * width)), within the recorded
  // steps' values: one dataset a block at a time, whatever its layout (what TraceWriter::finish and the analytic grid
  // of `evaluate` read). Throws TraceFileError naming the file and the dataset (missing, shorter than the recorded
  // steps, or for a finished file a length other than T x width).
  void read_group_values(std::size_t g, const std::string& path, std::size_t width, std::size_t first,
                         std::size_t count, std::int64_t* out) const;
  void read_group_values(std::size_t g, const std::string& path, std::size_t width, std::size_t first,
                         std::size_t count, double* out) const;
  void read_group_values(std::size_t g, const std::string& path, std::size_t width, std::size_t first,
                         std::size_t count, float* out) const;

  // For a checkpoint's embedded trace: reads from an open HDF5 group (the file stays owned by the caller).
  static Trace read_all_from(long long root, const std::string& file, const TraceReadOptions& options);

 private:
  struct State;
  TraceReader() = default;
  std::unique_ptr<State> m;
};

}  // namespace wbaudit::sim
