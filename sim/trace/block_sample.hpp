#pragma once
// The block sample of a reference trace (docs/forecasting.md, "Block formats at any learning-rate scale"): what the
// grid needs to project a block-scaled format at any learning-rate scale s, bounded per tensor and recorded step.
//
// The joint (|w|, |u|) record of per-tensor formats cannot forecast a block format (the scale varies per block and is
// recomputed from q(w) + s u). Instead the reference keeps, per tensor, recorded step and declared block format, the
// fp32 w and u of at most kBlockSampleElements / (elements per block) of the format's blocks (its own layout: rows'
// 32- or 16-element blocks including the short ones at row ends, or nvfp4:2d's 16x16 tiles), one from each of that
// many equal strata of the block index (every block when there are no more), so the sample depends on the shape only.
// Projecting q(w) + s u on the sampled blocks with the write-back the engine projects with (sim::block_project) gives
// their events at scale s; for a tensor whose blocks are all sampled that is the exact projection.
//
// NVFP4's tensor scale comes from the whole tensor's max |q(w) + s u|, which a sample cannot see: the reference also
// keeps the tensor's max |w|, max |q(w)| and the lines (q(w_i), u_i) that can attain max_i |fl32(q(w_i) + fl32(s u_i))|
// for some s in [kBlockSampleScaleMin, kBlockSampleScaleMax] (within a tolerance that covers fp32 rounding), at most
// kBlockSampleLines of them (identical lines merged); that maximum is then exact at every s in the range.
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

// The element budget of one tensor's sample per recorded step (1024 MX blocks, 2048 NVFP4 blocks, 128 nvfp4:2d tiles):
// 2 x 4 x 32768 bytes = 256 KiB of w and u per tensor, step and block format, before compression. 16384 left a
// sampling error of 0.0104 on the decoder reference of docs/forecasting.md (Adam's first step, mxfp4_e2m1, s = 2).
inline constexpr std::int64_t kBlockSampleElements = 32768;
// NVFP4: the learning-rate scales whose tensor scale the kept lines decide, and how many lines are kept.
inline constexpr double kBlockSampleScaleMin = 0.125;
inline constexpr double kBlockSampleScaleMax = 8.0;
inline constexpr int kBlockSampleLines = 64;
// NVFP4's row per recorded step: max |w|, max |q(w)|, then kBlockSampleLines pairs (q(w_i), u_i), unused ones (0, 0).
inline constexpr std::size_t kBlockSampleTensorWidth = 2 + 2 * kBlockSampleLines;

// A sampled tensor's anchors: the learning-rate scales at which the reference also records the exact whole-tensor
// projection of q(w) + fl32(s u) (s = 1 is the recorded projection itself), so that the grid's difference estimator
// corrects the sample by the shifts of the anchors bracketing s, interpolated in log2 s (docs/forecasting.md). Powers
// of two inside NVFP4's [kBlockSampleScaleMin, kBlockSampleScaleMax]. Per anchor and recorded step kBlockAnchorCounts
// counts: nonzero, erased, erased_grid, erased_saturation, erased_scale.
inline constexpr std::array<double, 6> kBlockSampleAnchorScales{0.125, 0.25, 0.5, 2.0, 4.0, 8.0};
inline constexpr std::size_t kBlockAnchorCounts = 5;
static_assert(kBlockSampleAnchorScales.front() >= kBlockSampleScaleMin &&
              kBlockSampleAnchorScales.back() <= kBlockSampleScaleMax);

// Whether a projected block format's sample carries NVFP4 tensor rows (its family is NVFP4; a format name of
// sim::storage_format_from_name, false for a per-tensor or unknown name).
bool block_sample_has_tensor_rows(std::string_view format);
// The raw bytes one recorded step adds to a trace for this sample of `format` (0 when it is empty): w, u, NVFP4's
// tensor row and the anchors' counts.
std::uint64_t block_sample_step_bytes(const BlockSample& sample, std::string_view format);

// The sampled block indices of a tensor of this shape (increasing): all blocks when block_count n <= the budget's
// blocks B, else one block of each stratum [floor(k n / B), floor((k + 1) n / B)), k = 0 .. B - 1, the one at offset
// k mod the stratum's width (a plain stride aliases with the blocks of a row, e.g. stride 2 on rows of 2 blocks
// samples only the rows' first blocks; rotating offsets sample a row's block positions in proportion).
std::vector<std::int64_t> block_sample_indices(const BlockFormatSpec& fmt, const RowMajorShape& shape);

// The header of a tensor's sample (shape, indices, elements per step; no rows).
BlockSample block_sample_header(const BlockFormatSpec& fmt, const RowMajorShape& shape);

// Appends one recorded step's rows to `sample`: the sampled blocks' w and u (w, u: the whole tensor, host memory) and,
// for NVFP4, the tensor row from q (the whole tensor quantized blockwise, block_quantize of w).
void append_block_sample(const BlockFormatSpec& fmt, BlockSample& sample, std::span<const float> w,
                         std::span<const float> u, std::span<const float> q);

// Appends one recorded step's anchor counts (the exact projection at sample.anchor_scales[a], a = 0, 1, ..., in order).
void append_block_anchor(BlockSample& sample, const BlockWritebackCounts& counts);
// The exact whole-tensor counts at anchor a of step entry t (nonzero, erased and the three causes; the rest 0). Throws
// std::invalid_argument when the step has no anchor rows.
BlockWritebackCounts block_sample_anchor(const BlockSample& sample, std::size_t t, std::size_t a);

// NVFP4: the tensor row of w, q = q(w) and u (max |w|, max |q|, the lines; see above).
std::vector<float> nvfp4_tensor_row(std::span<const float> w, std::span<const float> q, std::span<const float> u);
// NVFP4: max_i |fl32(q_i + fl32(s u_i))| over the tensor, from its row; s in [kBlockSampleScaleMin,
// kBlockSampleScaleMax].
float nvfp4_amax_at_scale(std::span<const float> row, double lr_scale);

// The projected events of the sample's step t at learning-rate scale s: q(w) + fl32(s u) written back blockwise under
// nearest on the sampled blocks (sim::block_project; NVFP4 with the tensor row's scales). Throws std::invalid_argument
// for a step without rows or (NVFP4) a scale outside [kBlockSampleScaleMin, kBlockSampleScaleMax].
BlockWritebackCounts project_block_sample(const BlockFormatSpec& fmt, const BlockSample& sample, std::size_t t,
                                          double lr_scale);

}  // namespace wbaudit::sim
