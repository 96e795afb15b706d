#pragma once
// The joint histogram of a reference trace (docs/trace-format.md, docs/forecasting.md "The analytic grid"): per
// recorded step, the proposals u != 0 counted by a key taken straight from the fp32 bit patterns of |w| and |u|:
//   w bin: the exponent field and the top `w_bits` fraction bits of |w|, and a sticky bit (any lower bit set);
//   u bin: the same for |u| with `u_bits` fraction bits;
//   toward: u points toward zero (w != 0 and sign(u) != sign(w)); w == 0 counts as away.
// A sticky bit of 0 means the value is exactly the bin's lower edge, so exact values (zero weights, powers of two,
// ties) keep their identity; sticky 1 is the open interval above it. Stored sparse: sorted (key, count) pairs.
#include <Kokkos_Core.hpp>
#include <bit>
#include <cmath>
#include <cstdint>

namespace wbaudit::sim {

// A reference trace also keeps, for every group of at most this many coordinates, each recorded step's w and u
// themselves (GroupTrace::exact_w / exact_u): in a small group one coordinate is 1/size of the erased fraction, more
// than any histogram's within-bin share can be trusted with, so the grid counts such groups exactly. 8 KiB per
// recorded step at most, less than the group's joint pairs (about one 16-byte pair per coordinate).
inline constexpr std::int64_t kJointExactMaxCoordinates = 1024;

struct JointHistogramLayout {
  int w_bits = 11;  // fraction bits of |w| kept (0..12): 11 resolves q(w) exactly per bin for M <= 10
  int u_bits = 4;   // fraction bits of |u| kept (0..12)
};

struct JointBin {
  std::uint32_t w_code = 0;  // |w| bits >> (23 - w_bits)
  bool w_sticky = false;
  std::uint32_t u_code = 0;  // |u| bits >> (23 - u_bits)
  bool u_sticky = false;
  bool toward = false;
};

KOKKOS_INLINE_FUNCTION std::uint64_t joint_key(int w_bits, int u_bits, float w, float u) {
  const std::uint32_t wb = std::bit_cast<std::uint32_t>(w), ub = std::bit_cast<std::uint32_t>(u);
  const std::uint32_t aw = wb & 0x7fffffffu, au = ub & 0x7fffffffu;
  const int ws = 23 - w_bits, us = 23 - u_bits;
  const std::uint64_t wk = (static_cast<std::uint64_t>(aw >> ws) << 1) | ((aw & ((1u << ws) - 1u)) != 0u);
  const std::uint64_t uk = (static_cast<std::uint64_t>(au >> us) << 1) | ((au & ((1u << us) - 1u)) != 0u);
  const std::uint64_t toward = aw != 0u && ((wb ^ ub) >> 31) != 0u;
  return (((wk << (10 + u_bits)) | uk) << 1) | toward;
}

inline JointBin decode_joint_key(int w_bits, int u_bits, std::uint64_t key) {
  JointBin b;
  b.toward = (key & 1u) != 0;
  key >>= 1;
  const std::uint64_t uk = key & ((std::uint64_t{1} << (10 + u_bits)) - 1u);
  const std::uint64_t wk = key >> (10 + u_bits);
  b.u_sticky = (uk & 1u) != 0;
  b.u_code = static_cast<std::uint32_t>(uk >> 1);
  b.w_sticky = (wk & 1u) != 0;
  b.w_code = static_cast<std::uint32_t>(wk >> 1);
  (void)w_bits;
  return b;
}

// The magnitudes a bin covers: [lo, hi) from the bit patterns (exactly lo when the sticky bit is 0).
inline void joint_bin_range(int bits, std::uint32_t code, double& lo, double& hi) {
  const int shift = 23 - bits;
  lo = static_cast<double>(std::bit_cast<float>(code << shift));
  const std::uint32_t next = (code + 1u) << shift;
  hi = next >= 0x7f800000u ? 0x1p128 : static_cast<double>(std::bit_cast<float>(next));
}

}  // namespace wbaudit::sim
