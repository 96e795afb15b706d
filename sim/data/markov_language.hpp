#pragma once
// A seeded synthetic language with a known entropy rate (docs/data.md): a sparse random order-k Markov source over
// V tokens. For every (k-1)-token suffix s of a context (a, s), with a the oldest token, the source draws
// `branching` random permutations pi_{s,j} of [0, V) and Dirichlet(1) weights p_{s,j}; then
//   P(x | a, s) = sum_j p_{s,j} [x == pi_{s,j}(a)].
// For each s the matrix M_s[a][x] is doubly stochastic, so the uniform distribution over the V^k contexts is
// stationary; rows start from k i.i.d. uniform tokens and stay uniform at every position. Hence the entropy rate is
// the plain mean of H(P(. | c)) over all V^k contexts, computed exactly in double.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/data/detail/philox_uniform.hpp"
#include "sim/data/token_source.hpp"

namespace wbaudit::sim {

// Largest V^k * branching accepted (the transition table holds that many int32 tokens: 64 MiB).
inline constexpr std::int64_t kMarkovMaxTableEntries = std::int64_t{1} << 24;

template <class ExecSpace>
class MarkovLanguage : public TokenSource<ExecSpace> {
 public:
  using typename TokenSource<ExecSpace>::memory_space;
  using typename TokenSource<ExecSpace>::Tokens;

  // Throws DataError for vocab < 2, order < 1, branching < 1 or V^order * branching above kMarkovMaxTableEntries.
  // The tables are a pure function of (vocab, order, branching, source_seed); the batches of data_seed.
  MarkovLanguage(int vocab, int order, int branching, std::uint64_t source_seed, std::uint64_t data_seed);

  int vocab() const override { return m_vocab; }
  int order() const { return m_order; }
  int branching() const { return m_branching; }
  std::int64_t contexts() const { return m_contexts; }  // V^order

  // Training row r of `step` from Philox(data_seed, markov_training) keyed by (position, row, step); validation
  // rows from the markov_validation domain keyed by (position, row, k): a separate stream, disjoint by construction.
  void training_batch(const ExecSpace& space, std::int64_t step, int rows, int seq_len, Tokens out) const override;
  void validation_batch(const ExecSpace& space, int k, int rows, int seq_len, Tokens out) const override;

  // Entropy rate in nats/token: mean over the V^k contexts of H(P(. | context)).
  double entropy_rate() const { return m_entropy_rate; }
  // Optimal mean cross-entropy over the targets at positions 1..S of a row (S = seq_len):
  //   (min(S, k-1) * log V + max(0, S-k+1) * H) / S
  // (positions 1..k-1 are independent uniform tokens, every later one has a uniform context).
  std::optional<double> optimal_loss(int seq_len) const override;
  std::string describe() const override;

  // Host-side: P(x | context), the context given as its k tokens oldest first. Throws DataError for a wrong
  // context length or a token outside [0, vocab).
  double probability(const std::vector<int>& context, int x) const;

 private:
  void sample(const ExecSpace& space, detail::TokenDomain domain, std::uint64_t index, int rows, int seq_len,
              Tokens out) const;

  int m_vocab = 0;
  int m_order = 0;
  int m_branching = 0;
  std::uint64_t m_source_seed = 0;
  std::uint64_t m_data_seed = 0;
  std::int64_t m_contexts = 0;  // V^k
  std::int64_t m_suffixes = 0;  // V^(k-1)
  double m_entropy_rate = 0.0;
  // Context c = a * V^(k-1) + s (a oldest); outcome j of c is m_next[c * b + j], chosen when u < m_cdf[s * b + j]
  // and u >= m_cdf[s * b + j - 1] (the weights depend on the suffix only; the last cdf entry is exactly 1).
  Kokkos::View<std::int32_t*, memory_space> m_next;
  Kokkos::View<double*, memory_space> m_cdf;
  typename Kokkos::View<std::int32_t*, memory_space>::HostMirror m_next_host;
  std::vector<double> m_weight_host;  // p_{s,j} at s * b + j
};

}  // namespace wbaudit::sim
