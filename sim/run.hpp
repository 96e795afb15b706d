#pragma once
// One run (a cell of a sweep): its configuration (the cell JSON of docs/contracts.md) and the engine that trains the
// two-layer teacher-student model in reference or target mode and records its trace.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/model/two_layer.hpp"
#include "sim/optim/optimizer.hpp"
#include "sim/optim/schedule.hpp"
#include "sim/precision/policy.hpp"
#include "sim/trace/record_schedule.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

inline constexpr const char* kCellSchema = "wbaudit.cell/1";

// A malformed cell configuration; the message starts with the key path ("optimizer.lr: expected a number").
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class RunMode : int { reference, target };

struct ModelConfig {
  std::string kind = "two_layer";
  TwoLayerShape shape;  // input_dim, hidden, output_dim, activation
  int teacher_hidden = 64;
  std::uint64_t teacher_seed = 1000;
  double init_scale = 1.0;
};

struct DataConfig {
  int batch = 64;
  double noise = 0.0;  // label noise standard deviation
};

struct TargetConfig {
  std::string format = "fp32";
  std::string policy = "nearest";
  int sr_bits = 0;
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
  TargetConfig target;                       // target mode only
  std::vector<std::string> project_formats;  // reference mode only
  // reference mode only: stochastic policies (stochastic / deadzone-sr with sr_bits) whose expected erased
  // fraction is projected for every format, besides nearest (sim/precision/expected_erasure.hpp)
  std::vector<WritebackPolicy> project_policies;
};

// Strict parsing: unknown keys, wrong types, non-positive steps/dimensions, unknown names and formats throw
// ConfigError naming the key path. Missing keys take the defaults above.
RunConfig run_config_from_json(const nlohmann::json& json);
// Canonical JSON: every field, keys sorted, "schema" included; only the mode's own section (target or
// project_formats, and project_policies when not empty, so that nearest-only reference cells keep their ids).
// run_config_from_json(to_json(c)) == c.
nlohmann::json to_json(const RunConfig& config);

// Observation hook for tests and audits: called after every write-back of every tensor with w[t], u[t], w[t+1]
// (host copies). Slows a run down; leave empty in production.
struct UpdateObservation {
  std::int64_t step = 0;
  int tensor = 0;
  std::span<const float> weight_before;
  std::span<const float> proposal;
  std::span<const float> weight_after;
};
struct RunHooks {
  std::function<void(const UpdateObservation&)> on_update;
};

using ProgressCallback = std::function<void(std::int64_t step, std::int64_t steps)>;

// Runs the cell on the given execution space instance (Kokkos::Serial or Kokkos::OpenMP); the trace is bitwise
// identical for both and any thread count. progress(t + 1, steps) is called after every step. Throws
// std::runtime_error naming tensor and step on non-finite weights or proposals.
template <class ExecSpace>
Trace run_cell(const ExecSpace& space, const RunConfig& config, const ProgressCallback& progress = {},
               const RunHooks& hooks = {});
// The same on Kokkos::DefaultExecutionSpace.
Trace run_cell(const RunConfig& config, const ProgressCallback& progress = {});

}  // namespace wbaudit::sim
