#pragma once
// Counter-based randomness for stochastic write-back: Random123 Philox4x32-10, one stream per
// (run seed, step, tensor id, coordinate). A coordinate's draws depend on nothing else, so results are bitwise
// identical for any thread count, rank count, chunking or iteration order.
#include <Random123/philox.h>
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace wbaudit::sim {

// Keys the counter-based RNG (Philox4x32-10): one stream per (seed, step, tensor id, coordinate).
struct RngKey {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;  // must be < 2^32 (checked by the host-side entry points)
  std::uint32_t tensor_id = 0;
};

// Limits of the counter layout (checked on the host before a kernel runs).
inline constexpr std::uint64_t kRngMaxStep = std::uint64_t{1} << 32;
inline constexpr std::uint64_t kRngMaxCoordinate = std::uint64_t{1} << 48;

// The 32-bit words of one coordinate's stream, generated lazily four at a time.
// Philox key = seed (64 bits); counter = (coordinate low 32 | coordinate high 16 + block index 16 | step | tensor).
class PhiloxStream {
 public:
  KOKKOS_INLINE_FUNCTION PhiloxStream(const RngKey& key, std::uint64_t coordinate) {
    m_key = {{static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32)}};
    m_ctr = {{static_cast<std::uint32_t>(coordinate), static_cast<std::uint32_t>((coordinate >> 32) & 0xffffu),
              static_cast<std::uint32_t>(key.step), key.tensor_id}};
  }

  // Next uniformly distributed 32-bit word of this coordinate's stream.
  KOKKOS_INLINE_FUNCTION std::uint32_t next() {
    if (m_used == 4) {
      m_block = m_philox(m_ctr, m_key);
      m_ctr.v[1] += 0x10000u;  // next block of this coordinate (block index in the high 16 bits)
      m_used = 0;
    }
    return m_block.v[m_used++];
  }

 private:
  r123::Philox4x32 m_philox;
  r123::Philox4x32::ctr_type m_ctr;
  r123::Philox4x32::key_type m_key;
  r123::Philox4x32::ctr_type m_block{};
  int m_used = 4;
};

}  // namespace wbaudit::sim
