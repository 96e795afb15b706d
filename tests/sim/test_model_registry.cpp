// The model registry (sim/model_registry.*): the built-in kinds, the error for an unknown kind (also where the old
// code silently took two_layer), registration errors, and every descriptor against the model it builds (tensor names
// and parameter count from the configuration alone = those of the constructed model).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/model_registry.hpp"
#include "sim/run.hpp"

namespace {

using wbaudit::sim::ConfigError;
using wbaudit::sim::find_model;
using wbaudit::sim::RunConfig;

// A small configuration of each built-in kind.
RunConfig small_config(const std::string& kind) {
  RunConfig c;
  c.model.kind = kind;
  c.data.batch = 2;
  c.model.shape = wbaudit::sim::TwoLayerShape{4, 5, 2, wbaudit::sim::Activation::tanh};
  c.model.teacher_hidden = 3;
  c.model.decoder.vocab = 8;
  c.model.decoder.width = 4;
  c.model.decoder.heads = 2;
  c.model.decoder.layers = 1;
  c.model.decoder.mlp_hidden = 6;
  c.model.decoder.seq_len = 3;
  return c;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(ModelRegistry, BuiltInKinds) {
  EXPECT_EQ(wbaudit::sim::known_model_kinds(), "decoder, two_layer");
  for (const std::string kind : {"two_layer", "decoder"}) {
    EXPECT_EQ(find_model(kind).kind(), kind);
  }
  const auto tables = wbaudit::sim::run_config_key_tables();
  for (const auto* model : wbaudit::sim::registered_models()) {
    EXPECT_EQ(tables.at("model/" + model->kind()), model->model_table());
    EXPECT_TRUE(model->model_table().count("kind"));
    EXPECT_EQ(tables.at("data/" + model->kind()), model->data_keys());
  }
}

TEST(ModelRegistry, UnknownKindIsAnErrorEverywhere) {
  const std::string expected = "model.kind: unknown model \"transformer\" (known: decoder, two_layer)";
  EXPECT_EQ(message_of([] { find_model("transformer"); }), expected);
  RunConfig c = small_config("transformer");
  // Before the registry, to_json and estimate_cell_bytes took any kind but "decoder" for two_layer.
  EXPECT_EQ(message_of([&] { wbaudit::sim::to_json(c); }), expected);
  EXPECT_EQ(message_of([&] { wbaudit::sim::estimate_cell_bytes(c); }), expected);
  EXPECT_EQ(message_of([&] { wbaudit::sim::model_tensor_names(c.model); }), expected);
  EXPECT_EQ(message_of([] {
              wbaudit::sim::run_config_from_json({{"steps", 5}, {"model", {{"kind", "transformer"}}}});
            }),
            expected);
}

// A descriptor of any kind that builds nothing: for registration errors only.
struct Copy final : wbaudit::sim::ModelDescriptorFor<Copy> {
  std::string kind() const override { return m_kind; }
  std::set<std::string> model_keys() const override { return {}; }
  std::set<std::string> data_keys() const override { return {}; }
  void parse(const nlohmann::json*, const nlohmann::json*, RunConfig&) const override {}
  void write(const RunConfig&, nlohmann::json&, nlohmann::json&) const override {}
  std::vector<std::string> tensor_names(const wbaudit::sim::ModelConfig&) const override { return {}; }
  wbaudit::sim::ModelSize size(const RunConfig&) const override { return {}; }
  wbaudit::sim::ModelSeconds seconds(const RunConfig&, double) const override { return {}; }
  template <class ExecSpace>
  std::unique_ptr<wbaudit::sim::TrainableModel<ExecSpace>> make_task(const ExecSpace&, const RunConfig&) const {
    return nullptr;
  }
  std::string m_kind;
};

TEST(ModelRegistry, RegistrationErrors) {
  EXPECT_THROW(wbaudit::sim::register_model(nullptr), std::invalid_argument);
  // A second two_layer, and an empty kind.
  for (const std::string kind : {"two_layer", ""}) {
    auto copy = std::make_shared<Copy>();
    copy->m_kind = kind;
    EXPECT_THROW(wbaudit::sim::register_model(copy), std::invalid_argument) << kind;
  }
  EXPECT_EQ(wbaudit::sim::known_model_kinds(), "decoder, two_layer");
}

// Hand-computed: parameters 4*5 + 5 + 5*2 + 2 = 37; activations 2*(2*4 + 4*5 + 4*2) + (4*3 + 3*2) = 90;
// 4 bytes * (8 floats per parameter * 37 + 90) = 1544.
TEST(ModelRegistry, TwoLayerMemoryEstimateByHand) {
  EXPECT_EQ(wbaudit::sim::estimate_cell_bytes(small_config("two_layer")), 1544.0);
}

// What a descriptor says from the configuration alone is what the model it builds has.
TEST(ModelRegistry, DescriptorsAgreeWithTheirModels) {
  for (const std::string kind : {"two_layer", "decoder"}) {
    const RunConfig c = wbaudit::sim::run_config_from_json(wbaudit::sim::to_json(small_config(kind)));
    const auto& descriptor = find_model(kind);
    const auto model = descriptor.make(Kokkos::Serial(), c);
    ASSERT_NE(model, nullptr);
    std::vector<std::string> names;
    double parameters = 0;
    for (int t = 0; t < model->tensor_count(); ++t) {
      names.push_back(model->tensor_name(t));
      double n = 1;
      for (const std::int64_t d : model->tensor_shape(t)) {
        n *= static_cast<double>(d);
      }
      EXPECT_EQ(n, static_cast<double>(model->parameter(t).extent(0))) << kind << " " << names.back();
      parameters += n;
    }
    EXPECT_EQ(descriptor.tensor_names(c.model), names) << kind;
    EXPECT_EQ(descriptor.size(c).parameters, parameters) << kind;
    EXPECT_GT(descriptor.size(c).activations, 0) << kind;
    EXPECT_GT(descriptor.seconds(c, 1.0).step, 0) << kind;
  }
}

}  // namespace
