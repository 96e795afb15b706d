// model.kind = "two_layer": the teacher-student network of two_layer.hpp (sim/model_registry.hpp).
#include "sim/model/two_layer_task.hpp"
#include "sim/model_registry.hpp"

namespace wbaudit::sim {

namespace {

class TwoLayerDescriptor final : public ModelDescriptorFor<TwoLayerDescriptor> {
 public:
  std::string kind() const override { return "two_layer"; }
  std::set<std::string> model_keys() const override {
    return {"input_dim", "hidden", "output_dim", "activation", "teacher_hidden", "teacher_seed", "init_scale"};
  }
  std::set<std::string> data_keys() const override { return {"batch", "noise"}; }

  void parse(const nlohmann::json* model, const nlohmann::json* data, RunConfig& c) const override {
    if (model != nullptr) {
      const std::set<std::string> keys = model_table();
      const ConfigReader r(*model, "model", keys);
      r.integer("input_dim", c.model.shape.input_dim);
      r.integer("hidden", c.model.shape.hidden);
      r.integer("output_dim", c.model.shape.output_dim);
      std::string act = activation_name(c.model.shape.activation);
      r.string("activation", act);
      c.model.shape.activation = named("model.activation", [&] { return activation_from_name(act); });
      r.integer("teacher_hidden", c.model.teacher_hidden);
      r.integer("teacher_seed", c.model.teacher_seed);
      r.number("init_scale", c.model.init_scale);
    }
    require(c.model.shape.input_dim > 0, "model.input_dim", "must be positive");
    require(c.model.shape.hidden > 0, "model.hidden", "must be positive");
    require(c.model.shape.output_dim > 0, "model.output_dim", "must be positive");
    require(c.model.teacher_hidden > 0, "model.teacher_hidden", "must be positive");
    require(c.model.init_scale > 0, "model.init_scale", "must be positive");
    if (data != nullptr) {
      const std::set<std::string> keys = data_keys();
      const ConfigReader r(*data, "data", keys);
      r.integer("batch", c.data.batch);
      r.number("noise", c.data.noise);
    }
    require(c.data.noise >= 0, "data.noise", "must be non-negative");
  }

  void write(const RunConfig& c, nlohmann::json& model, nlohmann::json& data) const override {
    model = {{"input_dim", c.model.shape.input_dim},     {"hidden", c.model.shape.hidden},
             {"output_dim", c.model.shape.output_dim},   {"activation", activation_name(c.model.shape.activation)},
             {"teacher_hidden", c.model.teacher_hidden}, {"teacher_seed", c.model.teacher_seed},
             {"init_scale", c.model.init_scale}};
    data = {{"batch", c.data.batch}, {"noise", c.data.noise}};
  }

  std::vector<std::string> tensor_names(const ModelConfig&) const override {
    return {std::begin(kTwoLayerTensorNames), std::end(kTwoLayerTensorNames)};
  }

  ModelSize size(const RunConfig& c) const override {
    const ModelConfig& m = c.model;
    const double batch = c.data.batch;
    const double in = m.shape.input_dim, hid = m.shape.hidden, out = m.shape.output_dim, th = m.teacher_hidden;
    ModelSize s;
    s.parameters = in * hid + hid + hid * out + out;
    s.activations = batch * (2 * in + 4 * hid + 4 * out) + (in * th + th * out);  // + the teacher
    return s;
  }

  // Coarse costs for the Slurm planner's packing: a fixed overhead per step, a cost per flop, and per projected
  // format a fixed cost plus one per coordinate.
  ModelSeconds seconds(const RunConfig& c, double projections) const override {
    const ModelConfig& m = c.model;
    const double batch = c.data.batch;
    const double in = m.shape.input_dim, hid = m.shape.hidden, out = m.shape.output_dim, th = m.teacher_hidden;
    const double params = in * hid + hid + hid * out + out;
    const double flops = batch * (6 * (in * hid + hid * out) + 2 * (in * th + th * out));
    ModelSeconds s;
    s.step = 30e-6 + 0.3e-9 * flops + (5e-6 + 10e-9 * params) * projections;
    s.forward = 0.3e-9 * flops / 3;
    return s;
  }

  template <class ExecSpace>
  std::unique_ptr<TrainableModel<ExecSpace>> make_task(const ExecSpace& space, const RunConfig& config) const {
    const ModelConfig& m = config.model;
    return std::make_unique<TwoLayerTask<ExecSpace>>(space, m.shape, m.teacher_hidden, m.teacher_seed, config.seed,
                                                     config.data.batch, static_cast<float>(config.data.noise),
                                                     static_cast<float>(m.init_scale));
  }
};

}  // namespace

std::shared_ptr<const ModelDescriptor> two_layer_descriptor() {
  return std::make_shared<TwoLayerDescriptor>();
}

}  // namespace wbaudit::sim
