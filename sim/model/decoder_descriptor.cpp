// model.kind = "decoder": the NeoX-style decoder of docs/decoder.md on a token source (sim/model_registry.hpp).
#include <utility>

#include "sim/model/decoder_task.hpp"
#include "sim/model_registry.hpp"

namespace wbaudit::sim {

namespace {

void parse_decoder_model(const nlohmann::json* model, const std::set<std::string>& keys, DecoderConfig& dc) {
  if (model != nullptr) {
    const ConfigReader r(*model, "model", keys);
    r.integer("vocab", dc.vocab);
    r.integer("width", dc.width);
    r.integer("heads", dc.heads);
    r.integer("layers", dc.layers);
    r.integer("mlp_hidden", dc.mlp_hidden);
    r.integer("seq_len", dc.seq_len);
    r.number("rotary_fraction", dc.rotary_fraction);
    r.number("rotary_base", dc.rotary_base);
    r.number("norm_eps", dc.norm_eps);
    r.boolean("parallel_residual", dc.parallel_residual);
    r.number("init_std", dc.init_std);
  }
  for (const auto& [key, value] : {std::pair<const char*, int>{"model.vocab", dc.vocab},
                                   {"model.width", dc.width},
                                   {"model.heads", dc.heads},
                                   {"model.layers", dc.layers},
                                   {"model.mlp_hidden", dc.mlp_hidden},
                                   {"model.seq_len", dc.seq_len}}) {
    require(value > 0, key, "must be positive, got " + std::to_string(value));
  }
  require(dc.width % dc.heads == 0, "model.heads",
          std::to_string(dc.heads) + " heads do not divide width " + std::to_string(dc.width));
  require(dc.rotary_fraction >= 0 && dc.rotary_fraction <= 1, "model.rotary_fraction",
          "must be in [0, 1], got " + number_text(dc.rotary_fraction));
  require(dc.rotary_base > 0, "model.rotary_base", "must be positive, got " + number_text(dc.rotary_base));
  require(dc.norm_eps >= 0, "model.norm_eps", "must be non-negative, got " + number_text(dc.norm_eps));
  require(dc.init_std > 0, "model.init_std", "must be positive, got " + number_text(dc.init_std));
}

void parse_decoder_data(const nlohmann::json* data, const std::set<std::string>& keys, int vocab, DataConfig& d) {
  if (data != nullptr) {
    const ConfigReader r(*data, "data", keys);
    r.integer("batch", d.batch);
    r.string("source", d.source);
    r.string("path", d.path);
    r.string("sha256", d.sha256);
    r.number("validation_fraction", d.validation_fraction);
    r.integer("markov_order", d.markov_order);
    r.integer("markov_branching", d.markov_branching);
    r.integer("markov_seed", d.markov_seed);
  }
  require(d.source == "markov" || d.source == "text", "data.source",
          "unknown source \"" + d.source + "\" (known: markov, text)");
  require(d.source != "text" || !d.path.empty(), "data.path", "required for data.source = \"text\"");
  require(d.source == "text" || d.path.empty(), "data.path", "only for data.source = \"text\"");
  require(d.validation_fraction > 0 && d.validation_fraction < 1, "data.validation_fraction",
          "must be in (0, 1), got " + number_text(d.validation_fraction));
  require(d.markov_order > 0, "data.markov_order", "must be positive");
  require(d.markov_branching > 0, "data.markov_branching", "must be positive");
  require(d.source != "text" || vocab >= 256, "model.vocab",
          "byte-level text needs vocab >= 256, got " + std::to_string(vocab));
}

class DecoderDescriptor final : public ModelDescriptorFor<DecoderDescriptor> {
 public:
  std::string kind() const override { return "decoder"; }
  std::set<std::string> model_keys() const override {
    return {"vocab",   "width",           "heads",       "layers",   "mlp_hidden",
            "seq_len", "rotary_fraction", "rotary_base", "norm_eps", "parallel_residual",
            "init_std"};
  }
  std::set<std::string> data_keys() const override {
    return {"batch",        "source",           "path",       "sha256", "validation_fraction",
            "markov_order", "markov_branching", "markov_seed"};
  }

  void parse(const nlohmann::json* model, const nlohmann::json* data, RunConfig& c) const override {
    parse_decoder_model(model, model_table(), c.model.decoder);
    parse_decoder_data(data, data_keys(), c.model.decoder.vocab, c.data);
  }

  void write(const RunConfig& c, nlohmann::json& model, nlohmann::json& data) const override {
    const DecoderConfig& dc = c.model.decoder;
    model = {{"vocab", dc.vocab},
             {"width", dc.width},
             {"heads", dc.heads},
             {"layers", dc.layers},
             {"mlp_hidden", dc.mlp_hidden},
             {"seq_len", dc.seq_len},
             {"rotary_fraction", dc.rotary_fraction},
             {"rotary_base", dc.rotary_base},
             {"norm_eps", dc.norm_eps},
             {"parallel_residual", dc.parallel_residual},
             {"init_std", dc.init_std}};
    data = {{"batch", c.data.batch},
            {"source", c.data.source},
            {"validation_fraction", c.data.validation_fraction},
            {"markov_order", c.data.markov_order},
            {"markov_branching", c.data.markov_branching},
            {"markov_seed", c.data.markov_seed}};
    if (c.data.source == "text") {
      data["path"] = c.data.path;
      data["sha256"] = c.data.sha256;
    }
  }

  std::vector<std::string> tensor_names(const ModelConfig& model) const override {
    std::vector<std::string> names;
    for (const auto& [name, dims] : decoder_tensors(decoder_shape(model.decoder))) {
      names.push_back(name);
    }
    return names;
  }

  ModelSize size(const RunConfig& c) const override {
    const DecoderConfig& dc = c.model.decoder;
    const double batch = c.data.batch;
    const double V = dc.vocab, D = dc.width, F = dc.mlp_hidden, L = dc.layers, S = dc.seq_len, H = dc.heads;
    ModelSize s;
    s.parameters = 2 * V * D + D + L * (2 * D + 4 * D * D + 3 * F * D);
    s.activations = batch * S * (2 * V + L * (12 * D + 4 * F)) + L * batch * H * S * S * 2;
    return s;
  }

  // Coarse costs for the Slurm planner's packing: a cost per flop of forward + backward (6 per parameter and token
  // outside the embedding, plus attention), and per projected format one per coordinate.
  ModelSeconds seconds(const RunConfig& c, double projections) const override {
    const DecoderConfig& dc = c.model.decoder;
    const double batch = c.data.batch;
    const double V = dc.vocab, D = dc.width, F = dc.mlp_hidden, L = dc.layers, S = dc.seq_len;
    const double params = 2 * V * D + D + L * (2 * D + 4 * D * D + 3 * F * D);
    const double flops = 6 * batch * S * (params - V * D) + 12 * L * batch * S * S * D;
    ModelSeconds s;
    s.step = 20e-12 * flops + 50e-9 * params * projections;
    s.forward = 20e-12 * flops / 3;
    return s;
  }

  template <class ExecSpace>
  std::unique_ptr<TrainableModel<ExecSpace>> make_task(const ExecSpace& space, const RunConfig& config) const {
    return std::make_unique<DecoderTask<ExecSpace>>(space, config);
  }
};

}  // namespace

std::shared_ptr<const ModelDescriptor> decoder_descriptor() {
  return std::make_shared<DecoderDescriptor>();
}

}  // namespace wbaudit::sim
