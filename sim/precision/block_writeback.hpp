#pragma once
// Write-back into a block-scaled format with exact per-coordinate events (docs/formats.md, "Block-scaled formats").
//
// w holds the decoded fp32 values of a block-quantized tensor and u fp32 proposals. The write-back forms v = w + u
// exactly, recomputes each block's scale from v (NVFP4: the tensor scale too, from the whole tensor's v) and
// re-quantizes every element of the block with the write-back policy, saturating at +-max_elem. A block's current
// scale is the rule applied to its current values (for floor and NVFP4 at a normal block scale that is the scale it
// was written with; otherwise the canonical scale that decodes to the same values). Events compare decoded values
// (+0 == -0).
//
// Two implementations give identical bits (values and counts): the scalar reference *_reference (plain loops over host
// arrays, exact arithmetic, written to be read) and the Kokkos kernels, whose vectorized block loops (AVX-512, AVX2,
// portable; the ISA the precision layer's block loops use, detail::active_block_isa()) decide almost every coordinate
// and leave the rest to the exact per-element path. Results do not depend on the thread count.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "sim/precision/block_format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"
#include "sim/precision/writeback.hpp"

namespace wbaudit::sim {

// A block whose scale would leave the E8M0 range (exponent above 127), or whose values would decode beyond fp32's
// range (only possible when |w + u| is near 2^128); names the tensor, step and block. Nothing is written.
class BlockScaleError : public std::range_error {
 public:
  using std::range_error::range_error;
};

struct BlockWritebackCounts {
  std::int64_t nonzero = 0;            // u != 0
  std::int64_t erased = 0;             // u != 0 and w' == w (= erased_grid + erased_saturation + erased_scale)
  std::int64_t erased_grid = 0;        //   the block's scale is unchanged and the element rounds back to w
  std::int64_t erased_saturation = 0;  //   the scale is unchanged, w is at +-max of the block and u points outward
  std::int64_t erased_scale = 0;       //   the block's scale changed and the element still decodes to w
  std::int64_t applied = 0;            // u != 0 and w' != w
  std::int64_t collateral = 0;         // u == 0 and w' != w (moved by a rescale of its block)
  std::int64_t flushed = 0;            //   of those: w != 0 and w' == 0
  std::int64_t saturated = 0;          // |v| / scale beyond max_elem (the element saturated), any u
  std::int64_t sr_applied = 0;         // SR decided the value (v strictly between two neighbours, both possible)
  std::int64_t sr_truncated = 0;       // r-bit SR: v off the grid with its away-from-zero probability truncated to 0
  std::int64_t blocks = 0;             // blocks of the tensor
  std::int64_t blocks_skipped = 0;     // skip_unchanged_blocks: blocks left as they were (u all zero)
  std::int64_t rescaled_up = 0;        // blocks whose decode scale grew (MX: X; NVFP4: s_b / S_enc)
  std::int64_t rescaled_down = 0;      // blocks whose decode scale shrank

  BlockWritebackCounts& operator+=(const BlockWritebackCounts& o) {
    nonzero += o.nonzero;
    erased += o.erased;
    erased_grid += o.erased_grid;
    erased_saturation += o.erased_saturation;
    erased_scale += o.erased_scale;
    applied += o.applied;
    collateral += o.collateral;
    flushed += o.flushed;
    saturated += o.saturated;
    sr_applied += o.sr_applied;
    sr_truncated += o.sr_truncated;
    blocks += o.blocks;
    blocks_skipped += o.blocks_skipped;
    rescaled_up += o.rescaled_up;
    rescaled_down += o.rescaled_down;
    return *this;
  }
  friend bool operator==(const BlockWritebackCounts&, const BlockWritebackCounts&) = default;
};

struct BlockWritebackOptions {
  // Blocks whose u is all zero are left as they are (not re-quantized). Default: every block is re-quantized each
  // step, which differs where re-quantization is not idempotent (NVFP4 at an E4M3-subnormal block scale; SR).
  bool skip_unchanged_blocks = false;
  // Coordinate of element 0 within its tensor (RNG counter), for a tensor held in slices of whole rows.
  std::uint64_t first_coordinate = 0;
};

// w <- q^policy(w + u) blockwise, in place. shape.size() must equal the extents. Policy::master is refused (use
// block_writeback_master). NaN/inf in w or u: NonFiniteError naming the tensor id, step, block and the first such
// coordinate; a block out of range: BlockScaleError. Both are raised before anything is written.
template <class ExecSpace>
BlockWritebackCounts block_writeback(const ExecSpace& space, const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                     const RngKey& key, const RowMajorShape& shape,
                                     Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                     Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                     const BlockWritebackOptions& options = {});

// Master-copy contrast: master <- fl32(master + u), w <- q_nearest(master) blockwise; events are counted against the
// old w with the proposal u (nothing is erased in the master). key names the tensor and step in errors. NaN/inf in
// master, w or u, or an fp32 overflow of the master update: NonFiniteError before anything is written.
template <class ExecSpace>
BlockWritebackCounts block_writeback_master(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                            const RowMajorShape& shape,
                                            Kokkos::View<float*, typename ExecSpace::memory_space> master,
                                            Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                            Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                            const BlockWritebackOptions& options = {});

// Projected events on an fp32 reference state (nothing is modified): the counts of writing back q(w) + u under
// nearest, where q(w) is w quantized blockwise (block_quantize). key names the tensor and step in errors.
template <class ExecSpace>
BlockWritebackCounts block_project(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                   const RowMajorShape& shape,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> u);

// NVFP4's tensor-level inputs, for a projection whose w and u are some of a larger tensor's blocks (the grid's block
// sample, sim/trace/block_sample.hpp): the larger tensor's fp32 max |w| (the encode scale of q(w)), max |q(w)| (the old
// scale) and max |fl32(q(w) + u)| (the new scale). MX formats have no tensor scale and ignore them.
struct BlockTensorMaxima {
  float w = 0, q = 0, v = 0;
};
// block_project with the NVFP4 tensor scales taken from `maxima` instead of from w and u themselves; the blocks of
// `shape` are projected exactly as the same blocks inside the larger tensor.
template <class ExecSpace>
BlockWritebackCounts block_project(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                   const RowMajorShape& shape,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                   Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                   const BlockTensorMaxima& maxima);

// block_project at several learning-rate scales: element k of the result is block_project(w, fl32(scales[k] * u))
// (the product in double, rounded once), with q(w) computed once per block instead of once per scale (a reference's
// block-sample anchors, sim/trace/block_reference.hpp). Inputs whose checks could fail (non-finite values, |values|
// near fp32's top), 2-D tiles and more than 8 scales take block_project once per scale, so errors are its own.
// q_out (optional; w's length): receives q(w), block_quantize of w (NVFP4's 1-D path writes it from the pass that
// computes it anyway; the other paths quantize a copy of w after the projections).
template <class ExecSpace>
std::vector<BlockWritebackCounts> block_project_scales(const ExecSpace& space, const BlockFormatSpec& fmt,
                                                       const RngKey& key, const RowMajorShape& shape,
                                                       Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                                       Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                                       std::span<const double> scales,
                                                       Kokkos::View<float*, typename ExecSpace::memory_space> q_out =
                                                           Kokkos::View<float*, typename ExecSpace::memory_space>());

// Quantizes x blockwise under nearest (scales from x itself); used to initialize persistent-native weights.
template <class ExecSpace>
void block_quantize(const ExecSpace& space, const BlockFormatSpec& fmt, const RowMajorShape& shape,
                    Kokkos::View<float*, typename ExecSpace::memory_space> x);

// The same operations on the default execution space.
inline BlockWritebackCounts block_writeback(const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                            const RngKey& key, const RowMajorShape& shape,
                                            const Kokkos::View<float*>& w, const Kokkos::View<const float*>& u,
                                            const BlockWritebackOptions& options = {}) {
  return block_writeback(Kokkos::DefaultExecutionSpace{}, fmt, policy, key, shape, w, u, options);
}
inline BlockWritebackCounts block_writeback_master(const BlockFormatSpec& fmt, const RngKey& key,
                                                   const RowMajorShape& shape, const Kokkos::View<float*>& master,
                                                   const Kokkos::View<float*>& w, const Kokkos::View<const float*>& u,
                                                   const BlockWritebackOptions& options = {}) {
  return block_writeback_master(Kokkos::DefaultExecutionSpace{}, fmt, key, shape, master, w, u, options);
}
inline BlockWritebackCounts block_project(const BlockFormatSpec& fmt, const RngKey& key, const RowMajorShape& shape,
                                          const Kokkos::View<const float*>& w, const Kokkos::View<const float*>& u) {
  return block_project(Kokkos::DefaultExecutionSpace{}, fmt, key, shape, w, u);
}
inline void block_quantize(const BlockFormatSpec& fmt, const RowMajorShape& shape, const Kokkos::View<float*>& x) {
  block_quantize(Kokkos::DefaultExecutionSpace{}, fmt, shape, x);
}

// ---- The scalar reference (host arrays; the definition written plainly, block by block) ----
BlockWritebackCounts block_writeback_reference(const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                               const RngKey& key, const RowMajorShape& shape, std::span<float> w,
                                               std::span<const float> u, const BlockWritebackOptions& options = {});
BlockWritebackCounts block_writeback_master_reference(const BlockFormatSpec& fmt, const RngKey& key,
                                                      const RowMajorShape& shape, std::span<float> master,
                                                      std::span<float> w, std::span<const float> u,
                                                      const BlockWritebackOptions& options = {});
BlockWritebackCounts block_project_reference(const BlockFormatSpec& fmt, const RngKey& key, const RowMajorShape& shape,
                                             std::span<const float> w, std::span<const float> u);
void block_quantize_reference(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::span<float> x);

// ---- One write-back explained (the scalar reference, per coordinate and block; `wbaudit round`, Python) ----
enum class BlockEvent : std::uint8_t {
  unchanged,          // u == 0 and w' == w
  erased_grid,        // u != 0, w' == w, the block's scale unchanged and the element rounds back
  erased_saturation,  // u != 0, w' == w, the scale unchanged, w at +-max of the block and u pointing outward
  erased_scale,       // u != 0, w' == w, the block's scale changed
  applied,            // u != 0, w' != w
  collateral,         // u == 0, w' != w, w' != 0 or w == 0
  flushed,            // u == 0, w != 0, w' == 0 (a collateral move to zero)
};
const char* block_event_name(BlockEvent e);  // "erased:grid", "applied", "collateral:flushed", ...

struct BlockScaleChange {
  // MX: X = 2^exp (exp_old from w, exp_new from w + u). NVFP4: the decode scale s_b / S_enc, from w and from w + u.
  int exp_old = 0, exp_new = 0;
  float s_b_old = 0, s_b_new = 0, s_enc_old = 1, s_enc_new = 1;
  int order = 0;         // +1 rescaled up, -1 rescaled down, 0 unchanged
  bool skipped = false;  // skip_unchanged_blocks left the block as it was
};

struct BlockWritebackExplained {
  BlockWritebackCounts counts;
  std::vector<BlockEvent> events;        // per coordinate
  std::vector<bool> saturated;           // per coordinate: |v| / scale beyond max_elem
  std::vector<BlockScaleChange> scales;  // per block
};

// block_writeback_reference, returning each coordinate's event and each block's scales as well (w is updated).
BlockWritebackExplained block_writeback_explain(const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                                const RngKey& key, const RowMajorShape& shape, std::span<float> w,
                                                std::span<const float> u, const BlockWritebackOptions& options = {});

}  // namespace wbaudit::sim
