#pragma once
// The model-independent training engine behind run_cell (docs/engine.md). A Training holds one run in progress: the
// model (chosen by model.kind), its optimizer state, the write-back state (formats, master copies) and the trace
// recorded so far; step() advances it by one optimizer step.
#include <memory>
#include <string>
#include <vector>

#include "sim/checkpoint.hpp"
#include "sim/model/model.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/run.hpp"
#include "sim/trace/margin_histogram.hpp"
#include "sim/trace/trace_writer.hpp"

namespace wbaudit::sim {

// The model of a run's configuration; throws ConfigError listing the known kinds for an unknown model.kind.
template <class ExecSpace>
std::unique_ptr<TrainableModel<ExecSpace>> make_model(const ExecSpace& space, const RunConfig& config);

// The format a tensor is held in (or projected to); intK takes its per-tensor scale from the absmax of `values`
// (the fp32 initialization, DESIGN §2 in docs/formats.md).
FormatSpec tensor_format(const std::string& name, const std::vector<float>& values);

// The format a target tensor is held in: a per-tensor format (tensor_format) or a block-scaled one with the tensor's
// row-major shape (blocks along its last dimension).
struct TargetFormat {
  FormatSpec scalar;  // per-tensor formats (block formats: the element format, unused by the write-back)
  bool block = false;
  BlockFormatSpec blocks;
  BlockWritebackOptions options;
  RowMajorShape shape;
};
TargetFormat target_format(const std::string& name, const std::vector<float>& values,
                           const std::vector<std::int64_t>& dims);

template <class ExecSpace>
class Training {
 public:
  using memory_space = typename ExecSpace::memory_space;

  Training(const ExecSpace& space, const RunConfig& config);
  ~Training();
  Training(const Training&) = delete;
  Training& operator=(const Training&) = delete;

  // One optimizer step: validation when due (at w[t]), forward/backward, proposals, write-back (target) or fp32
  // update with projections (reference), recording.
  void step(const RunHooks& hooks = {});
  // Steps until `end` (<= config.steps), then the final validation when the run is complete.
  void run(std::int64_t end, const ProgressCallback& progress = {}, const RunHooks& hooks = {});

  // The state at the start of the current step, and its restoration: same_run (resume) also restores the trace and
  // requires the checkpoint's cell JSON to equal this run's; otherwise (replay) only the model, data, seed and
  // optimizer must agree. Throws CheckpointError naming what differs.
  Checkpoint checkpoint() const;
  void restore(const Checkpoint& checkpoint, bool same_run);

  std::int64_t current_step() const { return m_step; }
  // The trace recorded so far; while streaming (stream_to), only the header and the rows not yet appended.
  const Trace& trace() const { return m_trace; }
  // From now on, every recorded step's rows (and validation and replay entries) are appended to `writer` at the end of
  // the step and dropped from memory (nullptr: keep them in memory again). The writer must outlive the streaming.
  void stream_to(TraceWriter* writer);
  // Rows appended to the writer so far (zero when not streaming).
  TraceRows streamed_rows() const;
  // Bytes the recorder holds between steps (the trace's rows not yet appended, the margin formats): constant in the
  // number of recorded steps while streaming.
  std::size_t recorder_bytes() const;
  // The trace with its header only (what a writer is created from).
  Trace& mutable_trace() { return m_trace; }
  const RunConfig& config() const { return m_config; }
  TrainableModel<ExecSpace>& model() { return *m_model; }

 private:
  bool validation_due(std::int64_t step) const;
  std::vector<std::int64_t> replay_steps() const;
  void replay_from_here();
  void requantize_from_current();
  void validate_now();
  void flush_rows();  // streaming: the rows held so far to the writer
  // One tensor's part of step(): a reference records its histograms and projections (at recorded steps) and applies
  // the plain fp32 update; a target writes back and records its events.
  void record_reference(int tensor, Kokkos::View<const float*, memory_space> w,
                        Kokkos::View<const float*, memory_space> u, std::int64_t step);
  void fp32_update(int tensor, Kokkos::View<float*, memory_space> w, Kokkos::View<const float*, memory_space> u,
                   std::int64_t step);
  void record_target(int tensor, const WritebackCounts& c, const BlockWritebackCounts& b);
  WritebackCounts write_back(int tensor, Kokkos::View<float*, memory_space> w,
                             Kokkos::View<const float*, memory_space> u, BlockWritebackCounts* block_counts);
  void hold_in_target_format(int tensor, const std::vector<float>& values);

  ExecSpace m_space;
  RunConfig m_config;
  std::unique_ptr<TrainableModel<ExecSpace>> m_model;
  std::unique_ptr<Optimizer<ExecSpace>> m_optimizer;
  std::int64_t m_schedule_steps;  // the step count the schedule spans (a replay continues its run's schedule)
  WritebackPolicy m_policy;
  std::vector<std::int64_t> m_recorded;
  std::size_t m_next = 0;  // index of the next recorded step
  std::int64_t m_step = 0;
  Trace m_trace;
  std::vector<Kokkos::View<float*, memory_space>> m_proposals, m_masters;
  std::vector<std::vector<MarginFormat>> m_margin_formats;   // reference: per tensor, the margin histogram's formats
  std::vector<TargetFormat> m_target_formats;                // target: per tensor
  std::vector<std::vector<TargetFormat>> m_project_formats;  // reference: per tensor, per declared format
  TraceWriter* m_writer = nullptr;                           // streaming: where rows go after each step
  TraceRows m_streamed;                                      // rows of the trace already in the writer
};

}  // namespace wbaudit::sim
