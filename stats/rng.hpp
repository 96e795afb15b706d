#pragma once
// Portable, seeded, counter-based randomness for resampling. Every draw is a pure function of its coordinates
// (seed, stream, draw), so a bootstrap gives bitwise the same resamples on any thread count, machine or compiler:
// Philox4x32-10 (Random123; Salmon et al., SC'11) with key = seed and counter = (stream, draw, attempt).
// Integers in [0, n) come from a 64-bit word by rejection of the lowest (2^64 mod n) values followed by `mod n`,
// which is exactly uniform (never std::uniform_int_distribution, whose algorithm differs between libraries).
#include <Random123/philox.h>
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace wbaudit::stats {

// Uniform integer in [0, n) at coordinates (seed, stream, draw); n >= 1, draw < 2^32.
KOKKOS_INLINE_FUNCTION std::uint64_t uniform_index(std::uint64_t seed, std::uint64_t stream, std::uint64_t draw,
                                                   std::uint64_t n) {
  KOKKOS_ASSERT(n >= 1);
  KOKKOS_ASSERT(draw < (std::uint64_t(1) << 32));
  r123::Philox4x32 philox;
  r123::Philox4x32::key_type const key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  std::uint64_t const reject_below = (std::uint64_t(0) - n) % n;  // 2^64 mod n
  for (std::uint32_t attempt = 0;; ++attempt) {
    r123::Philox4x32::ctr_type const ctr = {
        {std::uint32_t(stream), std::uint32_t(stream >> 32), std::uint32_t(draw), attempt}};
    r123::Philox4x32::ctr_type const out = philox(ctr, key);
    std::uint64_t const x0 = (std::uint64_t(out[0]) << 32) | out[1];
    if (x0 >= reject_below) {
      return x0 % n;
    }
    std::uint64_t const x1 = (std::uint64_t(out[2]) << 32) | out[3];
    if (x1 >= reject_below) {
      return x1 % n;
    }
  }
}

}  // namespace wbaudit::stats
