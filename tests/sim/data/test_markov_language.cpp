// The synthetic Markov language against independent references: the entropy rate against the stationary
// distribution found by power iteration on the explicit transition matrix, the optimal loss against forward
// propagation of the context distribution, the sample against the source's probabilities (law of large numbers and
// transition frequencies), and batches bitwise identical on the Serial and the default execution space.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <vector>

#include "sim/data/markov_language.hpp"

namespace {

using namespace wbaudit::sim;
using Space = Kokkos::DefaultExecutionSpace;

// Context index c = sum_i token_i * V^(k-1-i), oldest first (the same digits as the tokens, not the class's layout).
std::vector<int> context_tokens(std::int64_t c, int vocab, int order) {
  std::vector<int> t(static_cast<std::size_t>(order));
  for (int i = order - 1; i >= 0; --i) {
    t[static_cast<std::size_t>(i)] = static_cast<int>(c % vocab);
    c /= vocab;
  }
  return t;
}

// The explicit transition matrix over V^k contexts: context (a, s) -> (s, x) with probability P(x | a, s).
std::vector<std::vector<double>> transition_matrix(const MarkovLanguage<Space>& m) {
  const int v = m.vocab();
  const int k = m.order();
  const auto n = static_cast<std::int64_t>(std::pow(v, k));
  std::vector<std::vector<double>> t(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(n)));
  for (std::int64_t c = 0; c < n; ++c) {
    const auto ctx = context_tokens(c, v, k);
    for (int x = 0; x < v; ++x) {
      const std::int64_t next = (c % (n / v)) * v + x;
      t[static_cast<std::size_t>(c)][static_cast<std::size_t>(next)] += m.probability(ctx, x);
    }
  }
  return t;
}

double context_entropy(const MarkovLanguage<Space>& m, std::int64_t c) {
  double h = 0.0;
  const auto ctx = context_tokens(c, m.vocab(), m.order());
  for (int x = 0; x < m.vocab(); ++x) {
    const double p = m.probability(ctx, x);
    if (p > 0.0) {
      h -= p * std::log(p);
    }
  }
  return h;
}

TEST(MarkovLanguage, EntropyRateIsTheStationaryMeanFoundByPowerIteration) {
  const MarkovLanguage<Space> m(5, 2, 3, 11, 1);
  const auto t = transition_matrix(m);
  const std::size_t n = t.size();
  for (const auto& row : t) {
    double s = 0.0;
    for (double p : row) s += p;
    EXPECT_NEAR(s, 1.0, 1e-12);
  }
  // Power iteration from a point mass (not from uniform, so uniformity is found, not assumed). Lazy chain
  // (I + T) / 2 has the same stationary distribution and cannot oscillate.
  std::vector<double> pi(n, 0.0);
  pi[0] = 1.0;
  for (int it = 0; it < 20000; ++it) {
    std::vector<double> next(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      next[i] += 0.5 * pi[i];
      for (std::size_t j = 0; j < n; ++j) next[j] += 0.5 * pi[i] * t[i][j];
    }
    pi = next;
  }
  double h = 0.0;
  for (std::size_t c = 0; c < n; ++c) {
    EXPECT_NEAR(pi[c], 1.0 / static_cast<double>(n), 1e-9) << "context " << c;
    h += pi[c] * context_entropy(m, static_cast<std::int64_t>(c));
  }
  EXPECT_NEAR(m.entropy_rate(), h, 1e-9);
  EXPECT_GT(h, 0.1);
  EXPECT_LT(h, std::log(5.0) - 0.05);  // sparse: well below the uniform entropy
}

TEST(MarkovLanguage, OptimalLossIsTheForwardPropagatedExpectedEntropy) {
  for (int order : {1, 2, 3}) {
    const MarkovLanguage<Space> m(4, order, 2, 3, 1);
    const int v = m.vocab();
    const auto n = static_cast<std::size_t>(std::pow(v, order));
    const auto t = transition_matrix(m);
    for (int seq_len : {1, 2, 5, 9}) {
      // Row positions 0..seq_len; the target at position p >= order has the context of positions p-order..p-1,
      // whose distribution is uniform at p = order (i.i.d. start) and propagated by T afterwards. Targets p < order
      // are i.i.d. uniform: log V each.
      double total = 0.0;
      std::vector<double> dist(n, 1.0 / static_cast<double>(n));
      for (int p = 1; p <= seq_len; ++p) {
        if (p < order) {
          total += std::log(static_cast<double>(v));
          continue;
        }
        if (p > order) {
          std::vector<double> next(n, 0.0);
          for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < n; ++j) next[j] += dist[i] * t[i][j];
          dist = next;
        }
        for (std::size_t c = 0; c < n; ++c) total += dist[c] * context_entropy(m, static_cast<std::int64_t>(c));
      }
      ASSERT_TRUE(m.optimal_loss(seq_len).has_value());
      EXPECT_NEAR(*m.optimal_loss(seq_len), total / seq_len, 1e-12) << "order " << order << ", seq_len " << seq_len;
    }
  }
}

std::vector<std::int32_t> host_batch(const MarkovLanguage<Space>& m, std::int64_t step, int rows, int seq_len,
                                     bool validation) {
  Kokkos::View<std::int32_t*, Space::memory_space> out("out", static_cast<std::size_t>(rows) * (seq_len + 1));
  if (validation) {
    m.validation_batch(Space(), static_cast<int>(step), rows, seq_len, out);
  } else {
    m.training_batch(Space(), step, rows, seq_len, out);
  }
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  return std::vector<std::int32_t>(h.data(), h.data() + h.extent(0));
}

TEST(MarkovLanguage, SampleMatchesTheSourceProbabilities) {
  const int v = 6;
  const int order = 2;
  const MarkovLanguage<Space> m(v, order, 3, 21, 8);
  const int rows = 64;
  const int seq_len = 1200;
  const auto tokens = host_batch(m, 0, rows, seq_len, false);
  // Law of large numbers: mean -log P(x_t | context) -> H, within 5 standard errors of the sample.
  double sum = 0.0;
  double sum2 = 0.0;
  std::int64_t count = 0;
  std::vector<double> observed(static_cast<std::size_t>(v * v * v), 0.0);
  std::vector<double> context_count(static_cast<std::size_t>(v * v), 0.0);
  for (int r = 0; r < rows; ++r) {
    const std::int32_t* row = tokens.data() + static_cast<std::size_t>(r) * (seq_len + 1);
    for (int p = 0; p <= seq_len; ++p) {
      ASSERT_GE(row[p], 0);
      ASSERT_LT(row[p], v);
    }
    for (int p = order; p <= seq_len; ++p) {
      const double prob = m.probability({row[p - 2], row[p - 1]}, row[p]);
      ASSERT_GT(prob, 0.0) << "row " << r << " position " << p << " drew an impossible token";
      const double nll = -std::log(prob);
      sum += nll;
      sum2 += nll * nll;
      ++count;
      const int c = row[p - 2] * v + row[p - 1];
      observed[static_cast<std::size_t>(c * v + row[p])] += 1.0;
      context_count[static_cast<std::size_t>(c)] += 1.0;
    }
  }
  const double mean = sum / count;
  const double se = std::sqrt((sum2 / count - mean * mean) / count);
  EXPECT_NEAR(mean, m.entropy_rate(), 5.0 * se);
  // Transition frequencies: Pearson chi-square over every (context, next) cell with positive probability, against
  // its degrees of freedom (mean df, sd sqrt(2 df)): a bound of df + 6 sd fails for a wrong table, not by chance.
  double chi2 = 0.0;
  int df = 0;
  for (int c = 0; c < v * v; ++c) {
    int cells = 0;
    for (int x = 0; x < v; ++x) {
      const double p = m.probability({c / v, c % v}, x);
      if (p == 0.0) {
        EXPECT_EQ(observed[static_cast<std::size_t>(c * v + x)], 0.0);
        continue;
      }
      const double e = p * context_count[static_cast<std::size_t>(c)];
      const double o = observed[static_cast<std::size_t>(c * v + x)];
      chi2 += (o - e) * (o - e) / e;
      ++cells;
    }
    df += cells - 1;
  }
  EXPECT_LT(chi2, df + 6.0 * std::sqrt(2.0 * df)) << "df " << df;
}

TEST(MarkovLanguage, BatchesAreBitwiseTheSameOnEverySpaceDistinctAcrossStepsAndHeldOut) {
  const MarkovLanguage<Space> m(16, 2, 4, 5, 77);
  const MarkovLanguage<Kokkos::Serial> serial(16, 2, 4, 5, 77);
  const int rows = 7;
  const int seq_len = 33;
  Kokkos::View<std::int32_t*, Kokkos::HostSpace> s("s", static_cast<std::size_t>(rows) * (seq_len + 1));
  for (std::int64_t step : {0, 1, 1000000007}) {
    serial.training_batch(Kokkos::Serial(), step, rows, seq_len, s);
    const auto d = host_batch(m, step, rows, seq_len, false);
    EXPECT_EQ(std::vector<std::int32_t>(s.data(), s.data() + s.extent(0)), d) << "step " << step;
  }
  EXPECT_NE(host_batch(m, 0, rows, seq_len, false), host_batch(m, 1, rows, seq_len, false));
  EXPECT_NE(host_batch(m, 0, rows, seq_len, false), host_batch(m, 0, rows, seq_len, true));
  EXPECT_EQ(host_batch(m, 3, rows, seq_len, true), host_batch(m, 3, rows, seq_len, true));
  const MarkovLanguage<Space> other_data(16, 2, 4, 5, 78);
  EXPECT_NE(host_batch(m, 0, rows, seq_len, false), host_batch(other_data, 0, rows, seq_len, false));
  // The language itself depends on the source seed only: the same probabilities for another data seed.
  EXPECT_EQ(m.probability({1, 2}, 3), other_data.probability({1, 2}, 3));
  EXPECT_DOUBLE_EQ(m.entropy_rate(), other_data.entropy_rate());
}

TEST(MarkovLanguage, BadInputIsRefusedNamingTheValue) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no DataError");
  };
  EXPECT_NE(message([] { MarkovLanguage<Space>(1, 1, 1, 1, 1); }).find("1"), std::string::npos);
  EXPECT_NE(message([] { MarkovLanguage<Space>(4, 0, 1, 1, 1); }), "no DataError");
  EXPECT_NE(message([] { MarkovLanguage<Space>(4, 1, 0, 1, 1); }), "no DataError");
  EXPECT_NE(message([] { MarkovLanguage<Space>(256, 3, 2, 1, 1); }), "no DataError");  // 2^25 table entries
  const MarkovLanguage<Space> m(4, 1, 2, 1, 1);
  Kokkos::View<std::int32_t*, Space::memory_space> wrong("wrong", 10);
  EXPECT_NE(message([&] { m.training_batch(Space(), 0, 2, 5, wrong); }).find("rows * (seq_len + 1)"),
            std::string::npos);
  EXPECT_NE(message([&] { m.training_batch(Space(), 0, 0, 4, wrong); }).find("rows must be >= 1"), std::string::npos);
  EXPECT_NE(message([&] { m.probability({0, 1}, 0); }).find("order is 1"), std::string::npos);
}

}  // namespace
