#pragma once
// The write-back of a parameter stored in 16 bits (bf16 or fp16, the raw bits as PyTorch holds them), fused into one
// pass: for each coordinate, w is decoded exactly from the storage, the proposal is u = fl32(stepped - w) (stepped: the
// fp32 value an optimizer stepped w to), and q(w + u) is encoded back into the storage. Values, counts and SR draws
// are exactly those of writeback() on the decoded w and on u (the same block loops, one kWritebackBlock block of w and
// u at a time in thread-local buffers), so a bf16 model's step reads 2 + 4 bytes and writes 2 per coordinate instead
// of materializing fp32 copies of w and u and converting the result back.
#include <Kokkos_Core.hpp>
#include <bit>
#include <cstdint>
#include <string>

#include "sim/precision/writeback.hpp"

namespace wbaudit::sim {

enum class Storage16 { bf16, fp16 };

// The exact fp32 value of 16 storage bits, and the bits of an fp32 value the storage holds exactly (or of NaN/inf).
KOKKOS_INLINE_FUNCTION float decode_storage16(Storage16 s, std::uint16_t h);
KOKKOS_INLINE_FUNCTION std::uint16_t encode_storage16(Storage16 s, float v);

// Whether every value of fmt is representable in the storage type (so that q(w + u) can be stored exactly), or
// why not (empty: it fits).
std::string storage16_misfit(const FormatSpec& fmt, Storage16 s);

// storage <- q^policy(w + u) with w = decode(storage), u = fl32(stepped - w), counts as writeback(). The format's
// values must fit the storage (std::invalid_argument otherwise, before anything is written). A coordinate whose w or
// u is NaN/inf is left unchanged, the others are written back, and the call then throws NonFiniteError naming the
// tensor id, step, the count and the first such coordinate (as writeback() does). Bitwise identical for any thread
// count.
template <class ExecSpace>
WritebackCounts writeback_stored(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy,
                                 RngKey key, Storage16 storage_type,
                                 Kokkos::View<std::uint16_t*, typename ExecSpace::memory_space> storage,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> stepped,
                                 const WritebackOptions& options = {});

// ---- inline definitions ----

KOKKOS_INLINE_FUNCTION float decode_storage16(Storage16 s, std::uint16_t h) {
  if (s == Storage16::bf16) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
  }
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man 2^-24, exact in fp32
    const float mag = static_cast<float>(man) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) | sign);
  }
  if (exp == 0x1f) {  // inf / NaN (payload kept)
    return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

KOKKOS_INLINE_FUNCTION std::uint16_t encode_storage16(Storage16 s, float v) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(v);
  if (s == Storage16::bf16) {
    return static_cast<std::uint16_t>(b >> 16);  // v is a bf16 value (or NaN/inf decoded from one)
  }
  const std::uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf / NaN decoded from fp16 bits: their payload fits 10 bits
    return static_cast<std::uint16_t>(sign | 0x7c00u | ((a & 0x7fffffu) >> 13));
  }
  if (a >= 0x38800000u) {  // normal in fp16 (>= 2^-14)
    return static_cast<std::uint16_t>(sign | (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13));
  }
  const float mag = std::bit_cast<float>(a) * 0x1p24f;  // a multiple of 2^-24 below 2^-14: an integer < 1024
  return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(mag));
}

}  // namespace wbaudit::sim
