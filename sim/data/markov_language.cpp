#include "sim/data/markov_language.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

namespace wbaudit::sim {

namespace {

// One row per work item: k i.i.d. uniform tokens, then each next token by inverse CDF on its own uniform draw keyed
// by (position, row, index). Sequential within a row, rows in parallel.
template <class MemorySpace>
struct MarkovRowSampler {
  Kokkos::View<const std::int32_t*, MemorySpace> next;
  Kokkos::View<const double*, MemorySpace> cdf;
  Kokkos::View<std::int32_t*, MemorySpace> out;
  std::uint64_t seed;
  detail::TokenDomain domain;
  std::uint64_t index;
  std::int64_t vocab;
  std::int64_t suffixes;
  int order;
  int branching;
  int row_length;

  KOKKOS_INLINE_FUNCTION void operator()(const int row) const {
    std::int32_t* tokens = out.data() + static_cast<std::int64_t>(row) * row_length;
    std::int64_t context = 0;
    for (int p = 0; p < row_length; ++p) {
      const double u =
          detail::philox_uniform(seed, domain, static_cast<std::uint32_t>(p), static_cast<std::uint32_t>(row), index);
      std::int64_t x = 0;
      if (p < order) {
        x = detail::uniform_index(u, vocab);
      } else {
        const std::int64_t suffix = context % suffixes;
        const double* c = cdf.data() + suffix * branching;
        // First j with u < c[j]; c[branching - 1] == 1 > u, so it exists.
        int lo = 0;
        int hi = branching - 1;
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (u < c[mid]) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        x = next(context * branching + lo);
      }
      tokens[p] = static_cast<std::int32_t>(x);
      context = (context % suffixes) * vocab + x;
    }
  }
};

}  // namespace

template <class ExecSpace>
MarkovLanguage<ExecSpace>::MarkovLanguage(int vocab, int order, int branching, std::uint64_t source_seed,
                                          std::uint64_t data_seed)
    : m_vocab(vocab), m_order(order), m_branching(branching), m_source_seed(source_seed), m_data_seed(data_seed) {
  if (vocab < 2) {
    throw DataError("MarkovLanguage: vocab must be >= 2, got " + std::to_string(vocab));
  }
  if (order < 1) {
    throw DataError("MarkovLanguage: order must be >= 1, got " + std::to_string(order));
  }
  if (branching < 1) {
    throw DataError("MarkovLanguage: branching must be >= 1, got " + std::to_string(branching));
  }
  // V^k * b without overflow.
  std::int64_t entries = branching;
  m_contexts = 1;
  for (int i = 0; i < order; ++i) {
    if (entries > kMarkovMaxTableEntries / vocab) {
      throw DataError("MarkovLanguage: vocab^order * branching = " + std::to_string(vocab) + "^" +
                      std::to_string(order) + " * " + std::to_string(branching) + " exceeds the table limit " +
                      std::to_string(kMarkovMaxTableEntries));
    }
    entries *= vocab;
    m_contexts *= vocab;
  }
  m_suffixes = m_contexts / vocab;
  const std::int64_t b = branching;

  m_next = Kokkos::View<std::int32_t*, memory_space>(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "wbaudit::data::MarkovLanguage::next"), entries);
  m_cdf = Kokkos::View<double*, memory_space>(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "wbaudit::data::MarkovLanguage::cdf"), m_suffixes * b);
  m_next_host = Kokkos::create_mirror_view(m_next);
  auto cdf_host = Kokkos::create_mirror_view(m_cdf);
  m_weight_host.assign(static_cast<std::size_t>(m_suffixes * b), 0.0);

  // Tables on the host, in a fixed order: Dirichlet(1) weights as normalized Exp(1) draws, permutations by
  // Fisher-Yates, each draw keyed by its own coordinates.
  std::vector<std::int32_t> perm(static_cast<std::size_t>(vocab));
  for (std::int64_t s = 0; s < m_suffixes; ++s) {
    double total = 0.0;
    for (std::int64_t j = 0; j < b; ++j) {
      const double u = detail::philox_uniform(source_seed, detail::TokenDomain::markov_weight,
                                              static_cast<std::uint32_t>(j), 0u, static_cast<std::uint64_t>(s));
      const double e = -std::log1p(-u);  // u in [0, 1): e finite and >= 0
      m_weight_host[s * b + j] = e;
      total += e;
    }
    if (!(total > 0.0)) {  // all draws exactly 0 (probability ~2^-53b): equal weights
      for (std::int64_t j = 0; j < b; ++j) {
        m_weight_host[s * b + j] = 1.0;
      }
      total = static_cast<double>(b);
    }
    double running = 0.0;
    for (std::int64_t j = 0; j < b; ++j) {
      m_weight_host[s * b + j] /= total;
      running += m_weight_host[s * b + j];
      cdf_host(s * b + j) = running;
    }
    cdf_host(s * b + b - 1) = 1.0;
    for (std::int64_t j = 0; j < b; ++j) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int i = vocab - 1; i > 0; --i) {
        const double u =
            detail::philox_uniform(source_seed, detail::TokenDomain::markov_permutation, static_cast<std::uint32_t>(i),
                                   static_cast<std::uint32_t>(j), static_cast<std::uint64_t>(s));
        std::swap(perm[i], perm[detail::uniform_index(u, i + 1)]);
      }
      for (std::int64_t a = 0; a < vocab; ++a) {
        m_next_host((a * m_suffixes + s) * b + j) = perm[a];
      }
    }
  }
  Kokkos::deep_copy(m_next, m_next_host);
  Kokkos::deep_copy(m_cdf, cdf_host);

  // Entropy rate: mean over contexts of the entropy of the merged outcome distribution (permutations may agree).
  double sum = 0.0;
  std::map<std::int32_t, double> merged;
  for (std::int64_t c = 0; c < m_contexts; ++c) {
    const std::int64_t s = c % m_suffixes;
    merged.clear();
    for (std::int64_t j = 0; j < b; ++j) {
      merged[m_next_host(c * b + j)] += m_weight_host[s * b + j];
    }
    double h = 0.0;
    for (const auto& [x, p] : merged) {
      if (p > 0.0) {
        h -= p * std::log(p);
      }
    }
    sum += h;
  }
  m_entropy_rate = sum / static_cast<double>(m_contexts);
}

template <class ExecSpace>
void MarkovLanguage<ExecSpace>::sample(const ExecSpace& space, detail::TokenDomain domain, std::uint64_t index,
                                       int rows, int seq_len, Tokens out) const {
  MarkovRowSampler<memory_space> f{m_next,  m_cdf,      out,     m_data_seed, domain,     index,
                                   m_vocab, m_suffixes, m_order, m_branching, seq_len + 1};
  Kokkos::parallel_for("wbaudit::data::MarkovLanguage::sample::rows", Kokkos::RangePolicy<ExecSpace>(space, 0, rows),
                       f);
  space.fence();
}

template <class ExecSpace>
void MarkovLanguage<ExecSpace>::training_batch(const ExecSpace& space, std::int64_t step, int rows, int seq_len,
                                               Tokens out) const {
  detail::check_batch_shape("MarkovLanguage::training_batch", rows, seq_len, out.extent(0));
  if (step < 0 || step >= (std::int64_t{1} << 56)) {
    throw DataError("MarkovLanguage::training_batch: step must be in [0, 2^56), got " + std::to_string(step));
  }
  sample(space, detail::TokenDomain::markov_training, static_cast<std::uint64_t>(step), rows, seq_len, out);
}

template <class ExecSpace>
void MarkovLanguage<ExecSpace>::validation_batch(const ExecSpace& space, int k, int rows, int seq_len,
                                                 Tokens out) const {
  detail::check_batch_shape("MarkovLanguage::validation_batch", rows, seq_len, out.extent(0));
  if (k < 0) {
    throw DataError("MarkovLanguage::validation_batch: k must be >= 0, got " + std::to_string(k));
  }
  sample(space, detail::TokenDomain::markov_validation, static_cast<std::uint64_t>(k), rows, seq_len, out);
}

template <class ExecSpace>
std::optional<double> MarkovLanguage<ExecSpace>::optimal_loss(int seq_len) const {
  if (seq_len < 1) {
    return std::nullopt;
  }
  const double uniform_targets = std::min(seq_len, m_order - 1);
  const double markov_targets = std::max(0, seq_len - m_order + 1);
  return (uniform_targets * std::log(static_cast<double>(m_vocab)) + markov_targets * m_entropy_rate) / seq_len;
}

template <class ExecSpace>
std::string MarkovLanguage<ExecSpace>::describe() const {
  std::ostringstream os;
  os.precision(6);
  os << "markov language: vocab " << m_vocab << ", order " << m_order << ", branching " << m_branching
     << ", source seed " << m_source_seed << ", data seed " << m_data_seed << ", entropy rate " << m_entropy_rate
     << " nats/token (uniform: " << std::log(static_cast<double>(m_vocab)) << ")";
  return os.str();
}

template <class ExecSpace>
double MarkovLanguage<ExecSpace>::probability(const std::vector<int>& context, int x) const {
  if (static_cast<int>(context.size()) != m_order) {
    throw DataError("MarkovLanguage::probability: context has " + std::to_string(context.size()) +
                    " tokens, order is " + std::to_string(m_order));
  }
  std::int64_t c = 0;
  for (int t : context) {
    if (t < 0 || t >= m_vocab) {
      throw DataError("MarkovLanguage::probability: token " + std::to_string(t) + " outside [0, " +
                      std::to_string(m_vocab) + ")");
    }
    c = c * m_vocab + t;
  }
  if (x < 0 || x >= m_vocab) {
    throw DataError("MarkovLanguage::probability: token " + std::to_string(x) + " outside [0, " +
                    std::to_string(m_vocab) + ")");
  }
  const std::int64_t s = c % m_suffixes;
  double p = 0.0;
  for (std::int64_t j = 0; j < m_branching; ++j) {
    if (m_next_host(c * m_branching + j) == x) {
      p += m_weight_host[s * m_branching + j];
    }
  }
  return p;
}

template class MarkovLanguage<Kokkos::Serial>;
#if defined(KOKKOS_ENABLE_OPENMP)
template class MarkovLanguage<Kokkos::OpenMP>;
#endif

}  // namespace wbaudit::sim
