#pragma once
// Counter-based Gaussian samples: every value is a pure function of (seed, domain, step, sample, index), drawn with
// Philox4x32-10 (Random123), so data order and initial weights are identical across modes, thread counts and
// iteration orders.
#include <Random123/philox.h>
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>

namespace wbaudit::sim {

// Independent streams drawn from one seed.
enum class StreamDomain : std::uint32_t { input = 1, teacher = 2, student_init = 3, label_noise = 4, decoder_init = 5 };

struct GaussianStream {
  std::uint64_t seed = 0;
  StreamDomain domain = StreamDomain::input;

  // Standard normal sample for (step, sample, index): Box-Muller in double on two 32-bit Philox words, rounded to
  // fp32 once. Key = (seed low word, seed high word); counter = (index, sample, step low word, domain | step high).
  KOKKOS_INLINE_FUNCTION float operator()(std::uint64_t step, std::uint64_t sample, std::uint64_t index) const {
    r123::Philox4x32 rng;
    const r123::Philox4x32::key_type key = {{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
    const r123::Philox4x32::ctr_type ctr = {
        {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(sample), static_cast<std::uint32_t>(step),
         (static_cast<std::uint32_t>(domain) << 24) ^ static_cast<std::uint32_t>(step >> 32)}};
    const r123::Philox4x32::ctr_type r = rng(ctr, key);
    // u1 in (0, 1], u2 in [0, 1): the logarithm never sees 0.
    const double u1 = (static_cast<double>(r[0]) + 1.0) * 0x1p-32;
    const double u2 = static_cast<double>(r[1]) * 0x1p-32;
    constexpr double two_pi = 6.283185307179586476925286766559;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2));
  }
};

}  // namespace wbaudit::sim
