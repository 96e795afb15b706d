#pragma once
// The training engine's view of a model (docs/engine.md): parameter tensors in a fixed order (the index is the tensor
// id that keys SR streams and names trace groups), forward + backward on the training batch of a step into fp32
// gradients, and, where the model has a held-out stream, a validation loss. Data belongs to the model's task, and
// every batch is a pure function of (seed, step), so a step number is the whole data position.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wbaudit::sim {

template <class ExecSpace>
class TrainableModel {
 public:
  using memory_space = typename ExecSpace::memory_space;
  using Vector = Kokkos::View<float*, memory_space>;

  TrainableModel() = default;
  TrainableModel(const TrainableModel&) = delete;
  TrainableModel& operator=(const TrainableModel&) = delete;
  virtual ~TrainableModel() = default;

  virtual int tensor_count() const = 0;
  virtual std::string tensor_name(int tensor) const = 0;
  virtual std::vector<std::int64_t> tensor_shape(int tensor) const = 0;  // e.g. {out, in} for a matrix
  virtual Vector parameter(int tensor) const = 0;                        // flat, row-major
  virtual Vector gradient(int tensor) const = 0;

  // Forward and backward on the training batch of `step` at the current parameters: fills every gradient(t) and
  // returns the training loss.
  virtual double loss_and_gradient(const ExecSpace& space, std::int64_t step) = 0;

  // Loss on the held-out stream at the current parameters (fp32 forward); nullopt when the task has none.
  virtual std::optional<double> validation_loss(const ExecSpace& space) = 0;
  // The lowest validation loss any model can reach on this task, when the data source knows it (e.g. the entropy
  // rate of a synthetic language); nullopt otherwise.
  virtual std::optional<double> optimal_validation_loss() const { return std::nullopt; }
};

}  // namespace wbaudit::sim
