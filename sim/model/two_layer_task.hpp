#pragma once
// The two-layer teacher-student task as a TrainableModel: the student network of two_layer.hpp and its data stream.
// It has no held-out stream (its traces carry no validation loss).
#include "sim/model/model.hpp"
#include "sim/model/two_layer.hpp"

namespace wbaudit::sim {

template <class ExecSpace>
class TwoLayerTask final : public TrainableModel<ExecSpace> {
 public:
  using typename TrainableModel<ExecSpace>::Vector;

  // Student init from GaussianStream(seed, student_init) with init_scale; the teacher from teacher_seed (both are
  // counter-based, so their order does not matter).
  TwoLayerTask(const ExecSpace& space, const TwoLayerShape& shape, int teacher_hidden, std::uint64_t teacher_seed,
               std::uint64_t seed, int batch, float noise, float init_scale)
      : m_model(shape, batch), m_data(space, teacher(shape, teacher_hidden), teacher_seed, seed, batch, noise) {
    m_model.initialize(space, GaussianStream{seed, StreamDomain::student_init}, init_scale);
  }

  int tensor_count() const override { return kTwoLayerTensors; }
  std::string tensor_name(int tensor) const override { return kTwoLayerTensorNames[tensor]; }
  std::vector<std::int64_t> tensor_shape(int tensor) const override {
    const std::int64_t d = m_model.shape().input_dim, h = m_model.shape().hidden, o = m_model.shape().output_dim;
    switch (tensor) {
      case 0:
        return {h, d};
      case 1:
        return {h};
      case 2:
        return {o, h};
      default:
        return {o};
    }
  }
  Vector parameter(int tensor) const override { return m_model.parameter(tensor); }
  Vector gradient(int tensor) const override { return m_model.gradient(tensor); }

  double loss_and_gradient(const ExecSpace& space, std::int64_t step) override {
    m_data.generate(space, step);
    return m_model.loss_and_gradient(space, m_data.x(), m_data.y());
  }
  std::optional<double> validation_loss(const ExecSpace&) override { return std::nullopt; }

 private:
  static TwoLayerShape teacher(TwoLayerShape shape, int hidden) {
    shape.hidden = hidden;
    return shape;
  }

  TwoLayerModel<ExecSpace> m_model;
  TeacherStudentData<ExecSpace> m_data;
};

}  // namespace wbaudit::sim
