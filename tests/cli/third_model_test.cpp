// The model extension point (sim/model_registry.hpp) from outside the library: a third model, a tiny linear
// regression defined and registered here and nowhere else, runs through `wbaudit run` (cli::run_main) as a sweep of
// one fp32 reference and two low-precision targets. Its training loss is checked against the closed form of
// gradient descent on a quadratic, and its cells against the sweep's store.
//
// The data: for features d and batch n (a multiple of d), row i of the design is x_i = (j + 1) e_j with j = i mod d,
// and its label y_i = (j + 1) * target, so the loss L(w) = (1/n) sum_i (x_i . w - y_i)^2 / 2 is
// (1/2) sum_j lambda_j (w_j - target)^2 with lambda_j = (j + 1)^2 / d. From w = 0, SGD with rate eta gives
// w_j(t) - target = -target (1 - eta lambda_j)^t, hence
//   L(t) = (target^2 / 2) sum_j lambda_j (1 - eta lambda_j)^(2t).
// run_main initializes and finalizes Kokkos itself, so this program has a single test and calls it once.
#include <gtest/gtest.h>

#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/store.hpp"
#include "sim/model_registry.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace.hpp"

namespace {

namespace fs = std::filesystem;
using wbaudit::sim::ConfigReader;
using wbaudit::sim::ModelConfig;
using wbaudit::sim::RunConfig;
using wbaudit::sim::TrainableModel;

constexpr const char* kKind = "linear_regression";

int features_of(const ModelConfig& model) {
  return model.params.at("features").get<int>();
}

double target_of(const ModelConfig& model) {
  return model.params.at("target").get<double>();
}

template <class ExecSpace>
class LinearRegression final : public TrainableModel<ExecSpace> {
 public:
  using typename TrainableModel<ExecSpace>::Vector;

  LinearRegression(const ExecSpace&, const RunConfig& config)
      : m_features(features_of(config.model)),
        m_batch(config.data.batch),
        m_target(target_of(config.model)),
        m_weight("wbaudit::tests::LinearRegression::weight", static_cast<std::size_t>(m_features)),
        m_gradient("wbaudit::tests::LinearRegression::gradient", static_cast<std::size_t>(m_features)) {}

  int tensor_count() const override { return 1; }
  std::string tensor_name(int) const override { return "weight"; }
  std::vector<std::int64_t> tensor_shape(int) const override { return {m_features}; }
  Vector parameter(int) const override { return m_weight; }
  Vector gradient(int) const override { return m_gradient; }

  // Every step sees the same batch (the design above), so the step number does not enter.
  double loss_and_gradient(const ExecSpace& space, std::int64_t) override {
    space.fence();
    const auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m_weight);
    const auto g = Kokkos::create_mirror_view(m_gradient);
    std::vector<double> sum(static_cast<std::size_t>(m_features), 0.0);
    double loss = 0;
    for (int i = 0; i < m_batch; ++i) {
      const int j = i % m_features;
      const double x = j + 1;
      const double residual = x * w(j) - x * m_target;
      loss += 0.5 * residual * residual;
      sum[static_cast<std::size_t>(j)] += x * residual;
    }
    for (int j = 0; j < m_features; ++j) {
      g(j) = static_cast<float>(sum[static_cast<std::size_t>(j)] / m_batch);
    }
    Kokkos::deep_copy(space, m_gradient, g);
    space.fence();
    return loss / m_batch;
  }
  std::optional<double> validation_loss(const ExecSpace&) override { return std::nullopt; }

 private:
  int m_features, m_batch;
  double m_target;
  Vector m_weight, m_gradient;  // the weights start at zero
};

class LinearRegressionDescriptor final : public wbaudit::sim::ModelDescriptorFor<LinearRegressionDescriptor> {
 public:
  std::string kind() const override { return kKind; }
  std::set<std::string> model_keys() const override { return {"features", "target"}; }
  std::set<std::string> data_keys() const override { return {"batch"}; }

  void parse(const nlohmann::json* model, const nlohmann::json* data, RunConfig& c) const override {
    int features = 2;
    double target = 1.0;
    if (model != nullptr) {
      const std::set<std::string> keys = model_table();
      const ConfigReader r(*model, "model", keys);
      r.integer("features", features);
      r.number("target", target);
    }
    wbaudit::sim::require(features > 0, "model.features", "must be positive, got " + std::to_string(features));
    if (data != nullptr) {
      const std::set<std::string> keys = data_keys();
      const ConfigReader r(*data, "data", keys);
      r.integer("batch", c.data.batch);
    }
    wbaudit::sim::require(c.data.batch % features == 0, "data.batch", "must be a multiple of model.features");
    c.model.params = {{"features", features}, {"target", target}};
  }
  void write(const RunConfig& c, nlohmann::json& model, nlohmann::json& data) const override {
    model = c.model.params;
    data = {{"batch", c.data.batch}};
  }
  std::vector<std::string> tensor_names(const ModelConfig&) const override { return {"weight"}; }
  wbaudit::sim::ModelSize size(const RunConfig& c) const override {
    return {static_cast<double>(features_of(c.model)), 2.0 * c.data.batch};
  }
  wbaudit::sim::ModelSeconds seconds(const RunConfig&, double) const override { return {1e-6, 1e-7}; }

  template <class ExecSpace>
  std::unique_ptr<TrainableModel<ExecSpace>> make_task(const ExecSpace& space, const RunConfig& config) const {
    return std::make_unique<LinearRegression<ExecSpace>>(space, config);
  }
};

constexpr int kFeatures = 2, kBatch = 4, kSteps = 30;
constexpr double kTarget = 1.5, kRate = 0.1;

std::string spec_text(const std::string& kind) {
  return "seed = 3\nsteps = " + std::to_string(kSteps) +
         "\n"
         "[sweep]\nname = \"linear\"\n"
         "[model]\nkind = \"" +
         kind + "\"\nfeatures = " + std::to_string(kFeatures) + "\ntarget = " + std::to_string(kTarget) +
         "\n"
         "[data]\nbatch = " +
         std::to_string(kBatch) +
         "\n"
         "[optimizer]\nkind = \"sgd\"\nlr = " +
         std::to_string(kRate) +
         "\n"
         "[schedule]\nkind = \"constant\"\n"
         "[record]\nkind = \"every_k\"\nk = 1\n"
         "[target]\npolicy = \"nearest\"\n"
         "[grid]\n\"target.format\" = [\"bf16\", \"e4m3\"]\n"
         "[evaluation]\ngroups = [\"weight\"]\n";
}

// The closed form of the header comment.
double closed_form_loss(std::int64_t t) {
  double loss = 0;
  for (int j = 0; j < kFeatures; ++j) {
    const double lambda = (j + 1.0) * (j + 1.0) / kFeatures;
    loss += lambda * std::pow(1.0 - kRate * lambda, 2.0 * static_cast<double>(t));
  }
  return 0.5 * kTarget * kTarget * loss;
}

int run_main(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  return wbaudit::cli::run_main(static_cast<int>(argv.size()), argv.data());
}

TEST(ThirdModel, RegisteredFromATestRunsThroughWbauditRun) {
  wbaudit::sim::register_model(std::make_shared<LinearRegressionDescriptor>());
  EXPECT_EQ(wbaudit::sim::known_model_kinds(), "decoder, linear_regression, two_layer");

  // An unknown kind is an error naming the spec's file and line and every known kind, the new one included.
  try {
    wbaudit::runners::parse_sweep_spec(spec_text("quadratic"), "linear.toml");
    ADD_FAILURE() << "model.kind = \"quadratic\" accepted";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("linear.toml:6"), std::string::npos) << what;
    EXPECT_NE(what.find("unknown model \"quadratic\" (known: decoder, linear_regression, two_layer)"),
              std::string::npos)
        << what;
  }

  const fs::path dir = fs::temp_directory_path() / ("wbaudit_third_model_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path spec = dir / "linear.toml";
  { std::ofstream(spec) << spec_text(kKind); }
  const fs::path out = dir / "sweep";
  ASSERT_EQ(run_main({"wbaudit", "run", spec.string(), "--out", out.string(), "--jobs", "1", "--threads", "1", "-q",
                      "--no-report"}),
            0);

  const auto store = wbaudit::runners::SweepStore::open(out);
  int references = 0, targets = 0;
  for (const auto& st : store.status()) {
    ASSERT_EQ(st.state, wbaudit::runners::CellState::done) << st.cell->name;
    ASSERT_TRUE(st.canonical_attempt.has_value()) << st.cell->name;
    const auto trace = wbaudit::sim::read_trace(st.attempts[*st.canonical_attempt].dir / "trace.h5");
    ASSERT_EQ(trace.groups.size(), 1u);
    EXPECT_EQ(trace.groups[0].name, "weight");
    EXPECT_EQ(trace.groups[0].size, kFeatures);
    ASSERT_EQ(trace.recorded_steps.size(), trace.loss.size());
    ASSERT_EQ(trace.loss.size(), static_cast<std::size_t>(kSteps));
    if (st.cell->role == "reference") {
      ++references;
      // fp32 weights and gradients: the loss follows the closed form to float precision.
      for (std::size_t k = 0; k < trace.loss.size(); ++k) {
        const std::int64_t t = trace.recorded_steps[k];
        EXPECT_NEAR(trace.loss[k], closed_form_loss(t), 1e-5 * closed_form_loss(t)) << "step " << t;
      }
      EXPECT_LT(trace.loss.back(), 0.05 * trace.loss.front());
    } else {
      ++targets;
      // Rounded weights: the loss at step 0 (w = 0 in any format) is still the closed form's.
      EXPECT_NEAR(trace.loss.front(), closed_form_loss(0), 1e-6);
    }
  }
  EXPECT_EQ(references, 1);
  EXPECT_EQ(targets, 2);
  fs::remove_all(dir);
}

}  // namespace
