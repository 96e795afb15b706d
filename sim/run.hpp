#pragma once
// One run (a cell of a sweep): its configuration (the cell JSON of docs/contracts.md) and the engine that trains its
// model (sim/model_registry.hpp) in reference or target mode and records its trace.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/config_reader.hpp"  // ConfigError
#include "sim/model/two_layer.hpp"
#include "sim/optim/optimizer.hpp"
#include "sim/optim/schedule.hpp"
#include "sim/precision/policy.hpp"
#include "sim/trace/margin_histogram.hpp"
#include "sim/trace/record_schedule.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_writer.hpp"

namespace wbaudit::sim {

inline constexpr const char* kCellSchema = "wbaudit.cell/1";

enum class RunMode : int { reference, target };

// model.kind = "decoder": the NeoX-style decoder of docs/decoder.md.
struct DecoderConfig {
  int vocab = 256;
  int width = 128;
  int heads = 4;
  int layers = 2;
  int mlp_hidden = 344;
  int seq_len = 128;
  double rotary_fraction = 1.0;  // share of each head's dimensions rotated (NeoX rotary_pct)
  double rotary_base = 10000.0;
  double norm_eps = 1e-5;
  bool parallel_residual = false;  // GPT-NeoX: x + attn(n1(x)) + mlp(n2(x))
  double init_std = 0.02;
};

// model.kind names a registered model (sim/model_registry.hpp: "two_layer", "decoder", or one registered at run
// time); its descriptor reads and writes the fields of its kind.
struct ModelConfig {
  std::string kind = "two_layer";
  DecoderConfig decoder;  // decoder only
  TwoLayerShape shape;    // two_layer only: input_dim, hidden, output_dim, activation
  int teacher_hidden = 64;
  std::uint64_t teacher_seed = 1000;
  double init_scale = 1.0;
  // A model without fields of its own here (one registered by a test or a plug-in) keeps its [model] keys in this
  // object, as its descriptor reads and writes them.
  nlohmann::json params = nlohmann::json::object();
};

struct DataConfig {
  int batch = 64;
  double noise = 0.0;  // two_layer: label noise standard deviation
  // decoder: the token source
  std::string source = "markov";     // "markov" (synthetic language, known entropy rate) or "text" (bytes of a file)
  std::string path;                  // text: the file (made absolute by the spec loader)
  std::string sha256;                // text: SHA-256 of the file's content (checked when the run starts; filled by the
                                     // spec loader when absent)
  double validation_fraction = 0.1;  // text: the held-out tail of the file
  int markov_order = 1;
  int markov_branching = 4;
  std::uint64_t markov_seed = 7;  // the language itself (the run seed draws the batches)
};

struct TargetConfig {
  std::string format = "fp32";  // storage format of every group not named in group_formats
  std::string policy = "nearest";
  int sr_bits = 0;
  // Per-group storage formats: a tensor name or a glob pattern ('*' and '?') -> format name. An exact name wins over
  // patterns; two patterns that match one tensor with different formats are an error. Groups held in fp32 take the
  // plain fp32 update whatever the policy.
  std::map<std::string, std::string> group_formats;
  std::string sr_stream = "philox";  // SR's random stream (policy.hpp SrStream): philox or philox-packed (r-bit SR)
};

// The storage format of tensor `name`: its entry in group_formats, else `format` (throws ConfigError on
// conflicting patterns).
std::string storage_format_of(const std::string& format, const std::map<std::string, std::string>& group_formats,
                              const std::string& name);

struct ValidationConfig {
  std::int64_t every = 0;  // validation loss at steps 0, every, 2*every, ... and after the last step (0: never)
  int batches = 4;         // held-out batches averaged per validation
};

// Study 6: at `checkpoints` evenly spaced steps c_k = k * steps / checkpoints (k = 1..checkpoints) the run's state is
// replayed for `steps` steps under each of `policies`, with the weights held in `format` (intK: per-tensor scale from
// the absmax of the checkpoint's weights) on the run's own data, and the validation loss after the replay recorded.
struct ReplayConfig {
  int checkpoints = 0;  // 0: no replay
  std::int64_t steps = 0;
  std::string format = "int3";
  std::map<std::string, std::string> group_formats;  // as TargetConfig::group_formats
  int sr_bits = 0;
  std::vector<std::string> policies = {"nearest", "stochastic"};
  std::string sr_stream = "philox";  // as TargetConfig::sr_stream
};

struct RunConfig {
  RunMode mode = RunMode::reference;
  std::uint64_t seed = 1;  // student init, data order and SR stream
  std::int64_t steps = 2000;
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  RecordConfig record;
  TargetConfig target;  // target mode only
  ValidationConfig validation;
  ReplayConfig replay;
  std::vector<std::string> project_formats;  // reference mode only
  // reference mode only: stochastic policies (stochastic / deadzone-sr with sr_bits) whose expected erased
  // fraction is projected for every format, besides nearest (sim/precision/expected_erasure.hpp)
  std::vector<WritebackPolicy> project_policies;
  // reference mode only: the formats of the margin histogram the analytic grid forecasts from (margin_layout_for);
  // empty: every format (default_margin_layout). Fewer formats record faster; the grid refuses the others.
  std::vector<std::string> margin_formats;
};

// Strict parsing: unknown keys, wrong types, non-positive steps/dimensions, unknown names and formats throw
// ConfigError naming the key path. Missing keys take the defaults above.
RunConfig run_config_from_json(const nlohmann::json& json);
// The keys run_config_from_json accepts, by table: "" (the top level), "model/<kind>" and "data/<kind>" for each
// registered model (sim/model_registry.hpp: "model/two_layer", "data/decoder", ...), "optimizer", "schedule",
// "record", "target", "validation", "replay", "project_policies[]" (each entry). The parser reads its known keys from
// here (docs/specs.md is tested against it).
std::map<std::string, std::set<std::string>> run_config_key_tables();
// Canonical JSON: every field, keys sorted, "schema" included; only the mode's own section (target or
// project_formats, and project_policies and margin_formats when not empty, so that nearest-only reference cells
// recording every margin format keep their ids).
// run_config_from_json(to_json(c)) == c.
nlohmann::json to_json(const RunConfig& config);
// The margin histogram a reference cell records: of its margin_formats, or (none given) of every format.
MarginLayout reference_margin_layout(const RunConfig& config);

// Observation hook for tests and audits: called after every write-back of every tensor with w[t], u[t], w[t+1]
// (host copies). Slows a run down; leave empty in production.
struct UpdateObservation {
  std::int64_t step = 0;
  int tensor = 0;
  std::span<const float> weight_before;
  std::span<const float> proposal;
  std::span<const float> weight_after;
};
// File checkpoints of one run (not part of its identity: they change nothing in the trace).
struct CheckpointOptions {
  std::filesystem::path dir;          // where checkpoint-<step>.h5 files are written (empty: none)
  std::int64_t every = 0;             // a checkpoint at the start of every step t with t % every == 0, t > 0
  std::filesystem::path resume_from;  // start from this checkpoint of the same run instead of step 0
};

struct RunHooks {
  std::function<void(const UpdateObservation&)> on_update;
  CheckpointOptions checkpoints;
  // Called after each checkpoint file is in place (tests use it to stop a run at a known point).
  std::function<void(std::int64_t step, const std::filesystem::path& file)> on_checkpoint;
  // Called after each recorded step, once its rows are in the trace (streaming: appended and flushed to the partial
  // file); tests use it to stop a run at a chosen recorded step.
  std::function<void(std::int64_t step)> on_recorded;
};

using ProgressCallback = std::function<void(std::int64_t step, std::int64_t steps)>;

// The parameter tensors (trace groups) of a model, in tensor order, from its configuration alone (nothing allocated):
// what a spec's [evaluation] groups are checked against before any cell runs. Throws ConfigError for an unknown kind
// (its descriptor's tensor_names, sim/model_registry.hpp).
std::vector<std::string> model_tensor_names(const ModelConfig& model);
// About how many bytes one run of `config` holds at its peak (parameters with their gradients, optimizer state,
// storage copies and recording buffers, plus the activations of one batch), from the configuration alone: what
// `wbaudit run` checks against this machine's memory before it starts. An estimate (within about 2x), never an
// allocation; it saturates instead of overflowing.
double estimate_cell_bytes(const RunConfig& config);

// Runs the cell on the given execution space instance (Kokkos::Serial or Kokkos::OpenMP); the trace is bitwise
// identical for both and any thread count. progress(t + 1, steps) is called after every step. Throws
// std::runtime_error naming tensor and step on non-finite weights or proposals.
template <class ExecSpace>
Trace run_cell(const ExecSpace& space, const RunConfig& config, const ProgressCallback& progress = {},
               const RunHooks& hooks = {});
// The same on Kokkos::DefaultExecutionSpace.
Trace run_cell(const RunConfig& config, const ProgressCallback& progress = {});

// Runs the cell streaming its trace to `trace_path` (docs/trace-format.md, "Streaming"): every recorded step is
// appended to trace_path + ".partial" as it is recorded, so the memory held for the trace does not grow with the
// number of recorded steps, and trace_path is written (byte for byte the file write_trace(trace_path, run_cell(...))
// writes) and the partial file removed when the run completes. With hooks.checkpoints.resume_from (a checkpoint of a
// streaming run of this cell) the run continues from it and so does the partial file: the rows it holds beyond the
// checkpoint are recorded again. A run that stops (an error, a signal) leaves the partial file: readable, marked
// incomplete. Throws like run_cell, and TraceFileError naming the file for the trace's own errors (a full disk).
template <class ExecSpace>
void run_cell_to_file(const ExecSpace& space, const RunConfig& config, const std::filesystem::path& trace_path,
                      const ProgressCallback& progress = {}, const RunHooks& hooks = {});
void run_cell_to_file(const RunConfig& config, const std::filesystem::path& trace_path,
                      const ProgressCallback& progress = {});

// About how many bytes the recording of one run of `config` holds besides the training state, for `threads` threads:
// the margin histogram kernel's per-thread scratch, one recorded step's rows of every group while training (the trace
// is streamed), one block of one dataset and the reader's root series (24 bytes per recorded step) while the finished
// file is written (it is written a block at a time), HDF5's own state. What `wbaudit run` adds to estimate_cell_bytes
// before it starts a cell; it grows with the recorded steps only through those 24 bytes per recorded step.
double estimate_recording_bytes(const RunConfig& config, int threads);

}  // namespace wbaudit::sim
