#pragma once
// The exact *expected* erased events of a stochastic write-back policy into a block-scaled format, on an fp32
// reference state: the per-policy projection of a reference trace for block formats (the block analogue of
// expected_erasure.hpp; docs/formats.md, "Block-scaled formats").
//
// As block_project: q(w) is w quantized blockwise under nearest (block_quantize: scales from w, NVFP4's tensor scale
// from max |w|), and the write-back of v = q(w) + u (exact) re-quantizes every block (skip_unchanged_blocks off): the
// block's scale, and NVFP4's tensor scale from the whole tensor's max |fl32(v)|, are recomputed from v. Under SR the
// scales are not random (they depend on v only), so each coordinate's outcome depends on its own draw only: with the
// new scale fixed, v / scale lies between two grid neighbours a (toward zero) and b (away), P(b) = (|v| - a) / (b - a)
// (exact SR) or floor(2^r (|v| - a) / (b - a)) / 2^r (r-bit SR), and
//   P(erased) = [a == q(w)] (1 - P(b)) + [b == q(w)] P(b)     (decoded values compared in fp32; v on the grid or
//                                                               saturated: [q(v) == q(w)])
//   deadzone-sr: 0 where nearest moves q(w), else the stochastic P(erased).
// The expected erased count is the sum of P(erased) over the coordinates with u != 0 (detail::
// element_erasure_probability, the closed form of the write-back's own element rounding).
//
// Determinism: with r-bit SR every P(erased) is a multiple of 2^-r and the sum is an exact integer count of 2^-r
// units. With exact SR the probabilities are summed block by block in fixed chunks of kExpectedBlockChunk blocks
// (each block's coordinates in row-major order), and the chunk sums in chunk order: the same double for any thread
// count.
#include <Kokkos_Core.hpp>
#include <cstdint>

#include "sim/precision/block_format.hpp"
#include "sim/precision/expected_erasure.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"

namespace wbaudit::sim {

inline constexpr std::int64_t kExpectedBlockChunk = 64;

// The expected erased events of `policy` (stochastic or deadzone-sr, any sr_bits, either SR stream) writing back
// q(w) + u into the block format fmt, with q(w) and the scales as block_project's. Nothing is modified. key names
// the tensor and step in errors (the expectation does not depend on it). Throws std::invalid_argument for another
// policy, sr_bits outside 0..32 or a shape that does not match the extents; NonFiniteError naming the tensor, step,
// block and first coordinate when w or u holds NaN/inf; BlockScaleError for a block out of range (as block_project).
template <class ExecSpace>
ExpectedErasure expected_block_erasure(const ExecSpace& space, const BlockFormatSpec& fmt,
                                       const WritebackPolicy& policy, const RngKey& key, const RowMajorShape& shape,
                                       Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                       Kokkos::View<const float*, typename ExecSpace::memory_space> u);

inline ExpectedErasure expected_block_erasure(const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                              const RngKey& key, const RowMajorShape& shape,
                                              const Kokkos::View<const float*>& w,
                                              const Kokkos::View<const float*>& u) {
  return expected_block_erasure(Kokkos::DefaultExecutionSpace{}, fmt, policy, key, shape, w, u);
}

}  // namespace wbaudit::sim
