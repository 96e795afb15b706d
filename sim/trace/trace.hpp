#pragma once
// A run's trace: per parameter group and recorded step, the write-back event counts (target mode) or the
// projected events and log2-ratio histograms (reference mode), plus the training loss. Stored as trace.h5;
// the layout is documented in docs/trace-format.md.
#include <array>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "sim/trace/joint_histogram.hpp"
#include "sim/trace/margin_histogram.hpp"
#include "sim/trace/trace_error.hpp"

namespace wbaudit::sim {

// Schema 4 (reference traces) adds to each step's margin histogram the moments of the proposals' position inside its
// fine sub-bins (margin_histogram.hpp), so that the analytic grid places a point mass (Adam's first step) instead of
// spreading it over the sub-bin; the rest is schema 3's. Schema 3 replaced schema 2's joint (|w|, |u|) pairs, whose
// number grows with the tensor, by the bounded margin histogram, stores the d histogram compressed, and marks a
// finished file `complete`. Target traces are unchanged and still written as schema 2, byte for byte. Schema 2 added
// the joint pairs to reference traces; schema-1, -2 and -3 files are still read (schema 3's margin histograms
// without moments: MarginLayout::moments false).
inline constexpr const char* kTraceSchema = "wbaudit.trace/4";
inline constexpr const char* kTraceSchemaV3 = "wbaudit.trace/3";
inline constexpr const char* kTraceSchemaV2 = "wbaudit.trace/2";
inline constexpr const char* kTraceSchemaV1 = "wbaudit.trace/1";
// The schema a trace of this mode is written with: reference kTraceSchema, target kTraceSchemaV2.
const char* trace_schema_for_mode(const std::string& mode);

// Histogram of d = floor(log2|w|) - log2|u| over coordinates with u != 0 and w != 0, in bins of 1/8 binade:
// bin b covers [d_min + b/8, d_min + (b+1)/8); the first and last bins also hold everything beyond them.
struct RatioHistogramLayout {
  double d_min = -16.0;
  double bin_width = 0.125;
  int bins = 512;  // d in [-16, 48)
};

struct ExpectedSeries {          // reference mode, one declared format under one stochastic policy
  std::vector<double> erased;    // [T] sum over u != 0 of P(q_F^pi(q_F(w) + u) == q_F(w)) (expected_erasure.hpp)
  std::vector<double> fraction;  // [T] erased / nonzero (NaN when nonzero == 0)
};

// Block-scaled formats (docs/formats.md, "Block-scaled formats"): the events by cause per recorded step, realized
// (target mode, a group held in a block format: /groups/<g>/block_events) or projected on the reference state
// (reference mode, a declared block format: /groups/<g>/projected/<format>/block_events). Written only for block
// formats (other traces are unchanged).
struct BlockEventSeries {
  std::vector<std::int64_t> erased_grid;        // [T] erased, the block's scale unchanged, the element rounds back
  std::vector<std::int64_t> erased_saturation;  // [T] erased, scale unchanged, w at +-max of its block, u outward
  std::vector<std::int64_t> erased_scale;       // [T] erased, the block's scale changed
  std::vector<std::int64_t> collateral;         // [T] u == 0 and w' != w
  std::vector<std::int64_t> flushed;            // [T] of those, w != 0 and w' == 0
  std::vector<std::int64_t> rescaled_up;        // [T] blocks whose decode scale grew
  std::vector<std::int64_t> rescaled_down;      // [T] blocks whose decode scale shrank
  std::int64_t blocks = 0;                      // blocks of the group
  bool empty() const { return blocks == 0; }
};

// The series of a BlockEventSeries with their dataset names, in the order they are written.
struct BlockEventField {
  const char* name;
  std::vector<std::int64_t> BlockEventSeries::*series;
};
inline constexpr std::array<BlockEventField, 7> kBlockEventFields{{
    {"erased_grid", &BlockEventSeries::erased_grid},
    {"erased_saturation", &BlockEventSeries::erased_saturation},
    {"erased_scale", &BlockEventSeries::erased_scale},
    {"collateral", &BlockEventSeries::collateral},
    {"flushed", &BlockEventSeries::flushed},
    {"rescaled_up", &BlockEventSeries::rescaled_up},
    {"rescaled_down", &BlockEventSeries::rescaled_down},
}};

// Block-scaled formats, reference mode (docs/forecasting.md, "Block formats at any learning-rate scale"): what `wbaudit
// grid` needs to project a block format at any learning-rate scale s (sim/trace/block_sample.hpp). Per recorded step,
// the fp32 w and u of a fixed, deterministic sample of the format's blocks (every block when the tensor has at most
// kBlockSampleElements / block elements of them, else one block of each of that many equal strata of the block index at
// a rotating offset), and for NVFP4 the tensor-level inputs the sample cannot see (the tensor's max |w|, max |q(w)| and
// the lines (q(w_i), u_i) that can attain max_i |q(w_i) + s u_i| for s in [kBlockSampleScaleMin,
// kBlockSampleScaleMax]). Stored at /groups/<g>/projected/<format>/block_sample; absent from traces written before it
// (the grid then refuses the format).
struct BlockSample {
  std::int64_t rows = 0, cols = 0;   // the tensor's shape as the block layout sees it (sim::RowMajorShape)
  std::vector<std::int64_t> blocks;  // the sampled block indices, increasing (header: the same at every step)
  std::int64_t elements = 0;         // values per step: the sampled blocks' sizes summed
  std::vector<float> w, u;           // [T * elements] block by block, each block's elements row by row
  std::vector<float> tensor;         // NVFP4 only: [T * kBlockSampleTensorWidth] (block_sample.hpp)
  // A sampled tensor (fewer blocks sampled than it has) only: the learning-rate scales at which the exact whole-tensor
  // projection is also recorded (header; kBlockSampleAnchorScales, empty for a tensor sampled whole or a trace written
  // before anchors), and per step and anchor its counts nonzero, erased, erased_grid, erased_saturation, erased_scale:
  // [T * anchor_scales.size() * kBlockAnchorCounts] (block_sample.hpp).
  std::vector<double> anchor_scales;
  std::vector<std::int64_t> anchors;
  bool empty() const { return blocks.empty(); }
};

struct ProjectedSeries {             // reference mode, one declared target format
  std::vector<std::int64_t> erased;  // [T] u != 0 and q_F(q_F(w) + u) == q_F(w), nearest
  std::vector<double> fraction;      // [T] erased / nonzero (NaN when nonzero == 0)
  // Keyed by projection name ("stochastic", "stochastic-r8", "deadzone-sr", ...: sim::projection_name); only the
  // policies the run's configuration declares (project_policies). Optional in the file: older traces have none.
  std::map<std::string, ExpectedSeries> expected;
  BlockEventSeries block_events;  // block formats only: the projected events by cause (nearest)
  BlockSample block_sample;       // block formats only: what the grid needs at any learning-rate scale
};

struct GroupTrace {
  std::string name;  // e.g. "layer1.weight"
  std::uint32_t tensor_id = 0;
  std::int64_t size = 0;                // coordinates in the group
  std::vector<std::int64_t> nonzero;    // [T] proposals u != 0
  std::vector<std::int64_t> erased;     // [T] target mode: realized erased events (empty in reference mode)
  std::vector<std::int64_t> saturated;  // [T] target mode
  std::vector<std::int64_t> applied;    // [T] target mode: w changed
  std::vector<double> erased_fraction;  // [T] target mode: erased / nonzero (NaN when nonzero == 0)
  std::string block_format;             // target mode: the group's block format ("" for a per-tensor format)
  BlockEventSeries block_events;        // target mode, block formats only
  std::map<std::string, ProjectedSeries> projected;  // reference mode, keyed by format name
  std::vector<std::int64_t> zero_weight;             // [T] reference mode: coordinates with u != 0 and w == 0
  std::vector<std::int64_t> ratio_histogram;         // [T * bins] reference mode, row-major by step
  // Reference mode, schema 3 (margin_histogram.hpp): step t's margin counters are entries
  // [t * margin.bins(), (t + 1) * margin.bins()) (Trace::margin gives the layout); empty when the trace has none.
  std::vector<std::int64_t> margin;
  // Reference mode, schema 2 (joint_histogram.hpp; read, never recorded any more): step t's sorted (key, count)
  // pairs are entries [joint_offsets[t], joint_offsets[t + 1]) of joint_keys / joint_counts; empty when none.
  std::vector<std::int64_t> joint_offsets;  // [T + 1]
  std::vector<std::uint64_t> joint_keys;
  std::vector<std::int64_t> joint_counts;
  double init_absmax = std::numeric_limits<double>::quiet_NaN();  // max |w| at initialization (intK scales)
  // Reference mode, groups of at most kJointExactMaxCoordinates (joint_histogram.hpp): step t's w and u are entries
  // [t * size, (t + 1) * size); empty otherwise (and in traces written before them).
  std::vector<float> exact_w, exact_u;
  bool has_pairs() const { return !joint_offsets.empty(); }
  bool has_margin() const { return !margin.empty(); }
  bool has_joint() const { return has_pairs() || has_margin(); }
  bool has_exact() const { return !exact_w.empty(); }
};

// Study 6 (checkpoint replay): one write-back policy's replays, from every checkpoint of the run, for the same
// number of steps on the same data.
struct ReplaySeries {
  std::string format;                   // storage format of the replayed weights (e.g. "int3")
  std::string policy;                   // write-back policy of the replay
  int sr_bits = 0;                      // SR random bits (0: exact probabilities)
  std::vector<double> validation_loss;  // [K] validation loss after replay_steps from checkpoint k
  std::string sr_stream = "philox";     // SR's random stream (written to the file only when not philox)
};

// The name of a replay series in the file (/replay/<name>): the policy, with -r<sr_bits> for r-bit SR.
std::string replay_series_name(const ReplaySeries& r);

struct Trace {
  std::string schema = kTraceSchema;
  std::string mode;    // "reference" or "target"
  std::string format;  // target format name ("fp32" for a reference)
  std::string policy;  // write-back policy name
  std::uint64_t seed = 0;
  std::int64_t steps = 0;   // optimizer steps run
  std::string config_json;  // the run's configuration, canonical JSON
  // The numeric contract the trace was computed under (sim::NumericIdentity::contract(): the GEMM's summation contract
  // and the C library's maths; docs/contracts.md "Numeric identity"): the root attribute `numeric_contract`, written by
  // the simulator's engine. Empty: not recorded (a trace written before issue 30, or by the Python module, whose model
  // arithmetic is PyTorch's). The ISA paths are not part of it: every path computes the same bits.
  std::string numeric_contract;
  std::vector<std::int64_t> recorded_steps;  // [T] step index t at which events of w[t] -> w[t+1] were recorded
  std::vector<double> loss;                  // [T] training loss at w[t]
  std::vector<double> learning_rate;         // [T] scheduled learning rate at step t
  RatioHistogramLayout histogram;
  JointHistogramLayout joint;  // schema 2: written only when some group has joint pairs
  MarginLayout margin;         // schema 3: written only when some group has a margin histogram
  // False for the trace of an unfinished run (read from a partial file with TraceReadOptions::allow_incomplete): the
  // steps present are those recorded before it stopped. Files record it as the root attribute `complete`.
  bool complete = true;
  std::vector<GroupTrace> groups;

  // Validation (models with a held-out stream; empty otherwise and then absent from the file).
  std::vector<std::int64_t> validation_steps;  // [V] validation loss measured at w[t]; t == steps: after the last step
  std::vector<double> validation_loss;         // [V] mean cross-entropy in nats on the held-out batches
  double optimal_validation_loss = std::numeric_limits<double>::quiet_NaN();  // the data source's known optimum

  // Checkpoint replay (empty unless the run's config asks for it).
  std::int64_t replay_steps = 0;                 // steps each replay runs
  std::vector<std::int64_t> replay_checkpoints;  // [K] step of each checkpoint (weights w[t])
  std::vector<double> replay_start_loss;         // [K] validation loss at the checkpoint
  std::vector<ReplaySeries> replays;             // one per replay policy

  const GroupTrace& group(const std::string& name) const;  // throws std::out_of_range naming the group
};

// Writes atomically (temporary name in the same directory, then rename). Throws on any HDF5 error, naming the file.
void write_trace(const std::filesystem::path& path, const Trace& trace);

struct TraceReadOptions {
  // Read the trace of an unfinished run (Trace::complete false: the steps recorded before it stopped). Without it
  // such a trace is refused with TraceIncompleteError, so that a partial record is never taken for a finished one.
  bool allow_incomplete = false;
  // False: skip what only the analytic grid reads (the ratio histogram, the margin histogram or joint pairs, and the
  // exact w/u of small groups); every other dataset is read and checked as usual. A reader that holds many traces at
  // once (`evaluate`, the sweep report) keeps ~1 KB instead of ~1 MB per reference cell when no predictor needs them.
  bool histograms = true;
};
// Throws naming the file and the missing dataset/attribute when the file is not a valid wbaudit trace, and
// TraceIncompleteError (naming the file and its last recorded step) for the trace of an unfinished run unless allowed.
Trace read_trace(const std::filesystem::path& path, const TraceReadOptions& options = {});
// What makes a trace that read_trace could parse malformed as a record of a run, one line each (empty when none): a
// mode other than reference/target, an unknown format or policy, recorded steps not strictly increasing within
// [0, steps], per-step arrays of the wrong length, counts that are negative or inconsistent (erased > nonzero >
// size), erased fractions that are not erased / nonzero (NaN exactly when nonzero is 0) or projected fractions
// outside [0, 1], infinite or negative learning rates (NaN: not recorded). `wbaudit import` refuses such a trace,
// naming the file.
std::vector<std::string> trace_problems(const Trace& trace);

// Only the root attribute config_json (the run's configuration), without reading the datasets: what the run store
// checks against an attempt's cell. Throws like read_trace.
std::string read_trace_config_json(const std::filesystem::path& path);

}  // namespace wbaudit::sim
