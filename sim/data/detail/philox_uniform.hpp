#pragma once
// Counter-based uniform draws for the token sources: a pure function of (seed, domain, three coordinates), drawn
// with Philox4x32-10 (Random123) like sim/data/gaussian_stream.hpp but with the token sources' own domains, so no
// token stream ever shares a counter with a Gaussian stream of the same seed.
#include <Random123/philox.h>
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace wbaudit::sim::detail {

// Domains of the token sources (top byte of the last counter word; the Gaussian streams use 1..4).
enum class TokenDomain : std::uint32_t {
  markov_permutation = 0x41,
  markov_weight = 0x42,
  markov_training = 0x43,
  markov_validation = 0x44,
  text_training = 0x51,
};

// Uniform double in [0, 1) with 53 random bits. Key = (seed low word, seed high word); counter = (c0, c1, c2 low
// word, domain << 24 ^ c2 high word), so c0 and c1 may use all 32 bits and c2 its low 56.
KOKKOS_INLINE_FUNCTION double philox_uniform(std::uint64_t seed, TokenDomain domain, std::uint32_t c0, std::uint32_t c1,
                                             std::uint64_t c2) {
  r123::Philox4x32 rng;
  const r123::Philox4x32::key_type key = {{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
  const r123::Philox4x32::ctr_type ctr = {
      {c0, c1, static_cast<std::uint32_t>(c2),
       (static_cast<std::uint32_t>(domain) << 24) ^ static_cast<std::uint32_t>(c2 >> 32)}};
  const r123::Philox4x32::ctr_type r = rng(ctr, key);
  const std::uint64_t bits = ((static_cast<std::uint64_t>(r[1]) << 32) | r[0]) >> 11;
  return static_cast<double>(bits) * 0x1p-53;
}

// Uniform integer in [0, n) from a uniform u in [0, 1) (bias below n * 2^-53; the clamp guards rounding).
KOKKOS_INLINE_FUNCTION std::int64_t uniform_index(double u, std::int64_t n) {
  const auto i = static_cast<std::int64_t>(u * static_cast<double>(n));
  return i < n ? i : n - 1;
}

}  // namespace wbaudit::sim::detail
