#pragma once
// Checkpoints (HDF5, written atomically; docs/engine.md): the whole state of a run at the start of a step — the
// weights in their storage format, the optimizer states, fp32 master copies, and the trace recorded so far. Every
// batch and every SR draw is a pure function of (seed, step), so the step is the whole data position and RNG
// state: resuming from a checkpoint is bitwise identical to not stopping.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/trace/trace.hpp"
#include "sim/trace/trace_writer.hpp"

namespace wbaudit::sim {

inline constexpr const char* kCheckpointSchema = "wbaudit.checkpoint/1";
inline constexpr const char* kCheckpointSchemaStreamed = "wbaudit.checkpoint/2";  // + the streamed row counts

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorState {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> weight;  // stored values (values of the storage format)
  std::vector<float> first;   // optimizer first moment (empty for sgd)
  std::vector<float> second;  // Adam second moment (empty otherwise)
  std::vector<float> master;  // fp32 master copy (master policy only)
};

struct Checkpoint {
  std::string config_json;  // canonical cell JSON of the run that wrote it
  std::string model_kind;
  std::int64_t step = 0;  // weights are w[step]: steps 0 .. step-1 are done
  std::vector<TensorState> tensors;
  Trace trace;  // recorded up to (not including) `step`; a streaming run's: its header only
  // A streaming run (run_cell_to_file): its recorded rows are in the partial trace file, which held streamed_rows of
  // them at this checkpoint (schema wbaudit.checkpoint/2); otherwise `trace` holds every row (wbaudit.checkpoint/1).
  bool streamed = false;
  TraceRows streamed_rows;
};

// Writes `path` atomically (temporary name in the same directory, then rename); throws CheckpointError naming it.
void write_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);
// Throws CheckpointError naming the file and what is wrong: missing, not HDF5 (e.g. truncated), another schema, a
// missing or mis-sized dataset.
Checkpoint read_checkpoint(const std::filesystem::path& path);

}  // namespace wbaudit::sim
