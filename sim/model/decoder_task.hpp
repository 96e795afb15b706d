#pragma once
// The decoder language-modelling task as a TrainableModel: the NeoX-style decoder of decoder.hpp trained on a token
// source (the synthetic Markov language or the bytes of a text file), with a held-out validation stream.
#include <memory>
#include <stdexcept>

#include "sim/data/byte_text.hpp"
#include "sim/data/markov_language.hpp"
#include "sim/data/token_source.hpp"
#include "sim/model/decoder.hpp"
#include "sim/model/model.hpp"
#include "sim/run.hpp"

namespace wbaudit::sim {

inline DecoderShape decoder_shape(const DecoderConfig& c) {
  DecoderShape s;
  s.vocab = c.vocab;
  s.width = c.width;
  s.heads = c.heads;
  s.layers = c.layers;
  s.mlp_hidden = c.mlp_hidden;
  s.seq_len = c.seq_len;
  s.rotary_fraction = c.rotary_fraction;
  s.rotary_base = c.rotary_base;
  s.norm_eps = c.norm_eps;
  s.parallel_residual = c.parallel_residual;
  return s;
}

template <class ExecSpace>
std::unique_ptr<TokenSource<ExecSpace>> make_token_source(const RunConfig& config) {
  const DataConfig& d = config.data;
  if (d.source == "text") {
    auto text = std::make_unique<ByteText<ExecSpace>>(d.path, d.validation_fraction, config.seed);
    if (!d.sha256.empty() && text->sha256() != d.sha256) {
      throw std::runtime_error("data.path: " + d.path + " has SHA-256 " + text->sha256() +
                               ", but the cell was made for " + d.sha256 +
                               " (the file changed after the spec was read)");
    }
    return text;
  }
  return std::make_unique<MarkovLanguage<ExecSpace>>(config.model.decoder.vocab, d.markov_order, d.markov_branching,
                                                     d.markov_seed, config.seed);
}

template <class ExecSpace>
class DecoderTask final : public TrainableModel<ExecSpace> {
 public:
  using typename TrainableModel<ExecSpace>::Vector;
  using memory_space = typename ExecSpace::memory_space;

  DecoderTask(const ExecSpace& space, const RunConfig& config)
      : m_model(decoder_shape(config.model.decoder), config.data.batch),
        m_source(make_token_source<ExecSpace>(config)),
        m_batch(config.data.batch),
        m_seq_len(config.model.decoder.seq_len),
        m_validation_batches(config.validation.batches),
        m_tokens("wbaudit::sim::DecoderTask::tokens", static_cast<std::size_t>(m_batch) * (m_seq_len + 1)) {
    if (m_source->vocab() > config.model.decoder.vocab) {
      throw std::invalid_argument("model.vocab: " + std::to_string(config.model.decoder.vocab) +
                                  " is smaller than the data's " + std::to_string(m_source->vocab()) + " tokens");
    }
    m_model.initialize(space, config.seed, config.model.decoder.init_std);
  }

  int tensor_count() const override { return m_model.tensor_count(); }
  std::string tensor_name(int tensor) const override { return m_model.tensor_name(tensor); }
  std::vector<std::int64_t> tensor_shape(int tensor) const override { return m_model.tensor_shape(tensor); }
  Vector parameter(int tensor) const override { return m_model.parameter(tensor); }
  Vector gradient(int tensor) const override { return m_model.gradient(tensor); }

  double loss_and_gradient(const ExecSpace& space, std::int64_t step) override {
    m_source->training_batch(space, step, m_batch, m_seq_len, m_tokens);
    return m_model.loss_and_gradient(space, m_tokens);
  }

  // The mean over `validation.batches` held-out batches (each the mean over its positions), summed in order.
  std::optional<double> validation_loss(const ExecSpace& space) override {
    double sum = 0.0;
    for (int k = 0; k < m_validation_batches; ++k) {
      m_source->validation_batch(space, k, m_batch, m_seq_len, m_tokens);
      sum += m_model.loss(space, m_tokens);
    }
    return sum / m_validation_batches;
  }
  std::optional<double> optimal_validation_loss() const override { return m_source->optimal_loss(m_seq_len); }

 private:
  DecoderModel<ExecSpace, float> m_model;
  std::unique_ptr<TokenSource<ExecSpace>> m_source;
  int m_batch, m_seq_len, m_validation_batches;
  Kokkos::View<std::int32_t*, memory_space> m_tokens;
};

}  // namespace wbaudit::sim
