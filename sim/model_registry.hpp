#pragma once
// The model extension point (docs/extension_points_models_formats.md): one descriptor per model kind says everything
// the rest of wbaudit needs to know about a model — the keys of its [model] and [data] tables, how to read and write
// them, its parameter tensors (trace groups), what one run of it costs in memory and time, and how to build it on an
// execution space. `model.kind` is looked up here and nowhere else; the cell parser, the engine, the sweep spec and
// the Slurm planner ask the descriptor.
//
// Adding a model: a TrainableModel (sim/model/model.hpp) and a descriptor file (sim/model/<kind>_descriptor.cpp,
// e.g. two_layer_descriptor.cpp) listed in sim/sim_sources.cmake, and its line in builtin_models() in
// sim/model_registry.cpp. A model outside the library (a test, a plug-in) calls register_model instead.
#include <Kokkos_Core.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "sim/config_reader.hpp"
#include "sim/model/model.hpp"
#include "sim/run.hpp"

namespace wbaudit::sim {

// What one run of a model holds, from its configuration alone (estimate_cell_bytes adds the engine's share).
struct ModelSize {
  double parameters = 0;   // parameter coordinates
  double activations = 0;  // floats of one batch's forward + backward (plus any fixed data such as a teacher)
};

// About how long one run of a model takes on one core, from its configuration alone (the Slurm planner's
// estimate_cell_seconds adds validations and replays). Within a small factor; never measured.
struct ModelSeconds {
  double step = 0;     // one training step, with `projections` format projections per parameter (reference mode)
  double forward = 0;  // one forward pass of one batch (a validation batch)
};

class ModelDescriptor {
 public:
  ModelDescriptor() = default;
  ModelDescriptor(const ModelDescriptor&) = delete;
  ModelDescriptor& operator=(const ModelDescriptor&) = delete;
  virtual ~ModelDescriptor() = default;

  // The value of model.kind that selects this model ("two_layer").
  virtual std::string kind() const = 0;
  // The keys of its [model] table besides "kind", and of its [data] table (run_config_key_tables, docs/specs.md).
  virtual std::set<std::string> model_keys() const = 0;
  virtual std::set<std::string> data_keys() const = 0;

  // Reads the cell's "model" and "data" objects (nullptr when absent: every default stays) into config.model and
  // config.data with ConfigReader over model_table() and data_keys(), and checks their values; throws ConfigError
  // naming the key path ("model.width: must be positive, got 0"). The cell parser checks data.batch > 0 after.
  virtual void parse(const nlohmann::json* model, const nlohmann::json* data, RunConfig& config) const = 0;
  // Writes every key of the model's tables (but "kind") for the canonical cell JSON. Cell ids hash this JSON, so a
  // key added later must be written only when it differs from its default.
  virtual void write(const RunConfig& config, nlohmann::json& model, nlohmann::json& data) const = 0;

  // The parameter tensors in tensor order (the model's tensor_name(t)), from the configuration alone.
  virtual std::vector<std::string> tensor_names(const ModelConfig& model) const = 0;
  virtual ModelSize size(const RunConfig& config) const = 0;
  virtual ModelSeconds seconds(const RunConfig& config, double projections) const = 0;

  // The model of a run, initialized from config.seed, on each execution space the engine runs on. Derive from
  // ModelDescriptorFor<Derived> to get both from one template.
  virtual std::unique_ptr<TrainableModel<Kokkos::Serial>> make(const Kokkos::Serial& space,
                                                               const RunConfig& config) const = 0;
#if defined(KOKKOS_ENABLE_OPENMP)
  virtual std::unique_ptr<TrainableModel<Kokkos::OpenMP>> make(const Kokkos::OpenMP& space,
                                                               const RunConfig& config) const = 0;
#endif

  // model_keys() and "kind": what the [model] table may hold.
  std::set<std::string> model_table() const;
};

// Implements make() for every execution space from Derived's
//   template <class ExecSpace>
//   std::unique_ptr<TrainableModel<ExecSpace>> make_task(const ExecSpace& space, const RunConfig& config) const;
template <class Derived>
class ModelDescriptorFor : public ModelDescriptor {
 public:
  std::unique_ptr<TrainableModel<Kokkos::Serial>> make(const Kokkos::Serial& space,
                                                       const RunConfig& config) const override {
    return static_cast<const Derived&>(*this).template make_task<Kokkos::Serial>(space, config);
  }
#if defined(KOKKOS_ENABLE_OPENMP)
  std::unique_ptr<TrainableModel<Kokkos::OpenMP>> make(const Kokkos::OpenMP& space,
                                                       const RunConfig& config) const override {
    return static_cast<const Derived&>(*this).template make_task<Kokkos::OpenMP>(space, config);
  }
#endif
};

// The descriptor of model.kind `kind`; throws ConfigError("model.kind: unknown model \"x\" (known: decoder,
// two_layer)") for a kind nobody registered.
const ModelDescriptor& find_model(const std::string& kind);
// Every registered model, by kind.
std::vector<const ModelDescriptor*> registered_models();
// Their kinds, comma-separated in order ("decoder, two_layer").
std::string known_model_kinds();
// Adds a model beside the built-in ones (before any run or spec needs it). Throws std::invalid_argument for an empty
// or already registered kind. Safe to call from several threads; descriptors are never removed.
void register_model(std::shared_ptr<const ModelDescriptor> descriptor);

}  // namespace wbaudit::sim
