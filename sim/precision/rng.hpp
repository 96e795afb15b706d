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

// The 32-bit words of one coordinate's stream. The first word of coordinate c is word c % 4 of the Philox block
// with counter (c / 4, step, tensor) -- one Philox call serves four neighbouring coordinates, and the kernel can
// compute it once per group; further words (needed with probability 2^-32) come from a separate counter domain
// (high bit of counter word 1 set) indexed by (c, block j >= 1). Either way a word is a function of
// (seed, step, tensor id, coordinate) alone.
//
// Packed (the named opt-in stream philox-packed, r = packed_bits in 1..16: sr_bits, or 16 for exact SR):
// m = floor(32 / r) coordinates share one word. Coordinate c's first word is r bits of word j = floor(c / m) of the
// stream above (the word the per-coordinate stream gives coordinate j), bits (c mod m) * r .. (c mod m) * r + r - 1,
// placed in the top r bits; it carries r random bits (first_bits()): r-bit SR reads only those, exact SR continues
// with the coordinate's further words as above (the separate counter domain, blocks j >= 1).
class PhiloxStream {
 public:
  using Block = r123::Philox4x32::ctr_type;

  KOKKOS_INLINE_FUNCTION PhiloxStream(const RngKey& key, std::uint64_t coordinate, int packed_bits = 0)
      : m_key(make_key(key)),
        m_coordinate(coordinate),
        m_step(static_cast<std::uint32_t>(key.step)),
        m_tensor(key.tensor_id),
        m_packed_bits(packed_bits) {}

  // The Philox block holding the first words of coordinates 4g .. 4g+3.
  KOKKOS_INLINE_FUNCTION static Block first_words(const RngKey& key, std::uint64_t group) {
    r123::Philox4x32 philox;
    const Block ctr = {{static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32) & 0x3fffu,
                        static_cast<std::uint32_t>(key.step), key.tensor_id}};
    return philox(ctr, make_key(key));
  }

  // Random bits in the first word (its top bits): 32, or packed_bits when packed.
  KOKKOS_INLINE_FUNCTION int first_bits() const { return m_packed_bits > 0 ? m_packed_bits : 32; }

  // Next word of this coordinate's stream: uniformly distributed 32 bits, except a packed first word (first_bits()
  // random bits on top, zeros below).
  KOKKOS_INLINE_FUNCTION std::uint32_t next() {
    if (m_next_block == 0) {
      m_next_block = 1;
      if (m_packed_bits > 0) {
        const auto r = static_cast<std::uint32_t>(m_packed_bits);
        const std::uint64_t per = 32u / r;
        const std::uint32_t word = first_word(m_coordinate / per);
        const auto chunk = static_cast<std::uint32_t>((word >> ((m_coordinate % per) * r)) & ((1u << r) - 1u));
        return chunk << (32u - r);
      }
      return first_word(m_coordinate);
    }
    if (m_used == 4) {
      r123::Philox4x32 philox;
      const Block ctr = {
          {static_cast<std::uint32_t>(m_coordinate),
           0x80000000u | (m_next_block << 16) | (static_cast<std::uint32_t>(m_coordinate >> 32) & 0xffffu), m_step,
           m_tensor}};
      m_block = philox(ctr, m_key);
      ++m_next_block;
      m_used = 0;
    }
    return m_block.v[m_used++];
  }

 private:
  // The per-coordinate stream's first word of coordinate c.
  KOKKOS_INLINE_FUNCTION std::uint32_t first_word(std::uint64_t c) const {
    r123::Philox4x32 philox;
    const Block ctr = {
        {static_cast<std::uint32_t>(c >> 2), static_cast<std::uint32_t>(c >> 34) & 0x3fffu, m_step, m_tensor}};
    return philox(ctr, m_key).v[c & 3u];
  }

  KOKKOS_INLINE_FUNCTION static r123::Philox4x32::key_type make_key(const RngKey& key) {
    return {{static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32)}};
  }

  r123::Philox4x32::key_type m_key;
  std::uint64_t m_coordinate;
  std::uint32_t m_step;
  std::uint32_t m_tensor;
  int m_packed_bits = 0;           // 0: the per-coordinate stream; r: philox-packed
  std::uint32_t m_next_block = 0;  // 0: the first word is next; j >= 1: extra block j is next
  Block m_block{};
  int m_used = 4;
};

}  // namespace wbaudit::sim
