#pragma once
// One recorded step of a reference's projection of a block-scaled format (docs/forecasting.md, "Block formats at any
// learning-rate scale"): the events of writing back q(w) + u blockwise under nearest, by cause (block_project), and
// the block sample the grid forecasts other learning-rate scales from (block_sample.hpp). The engine's reference
// recording and the Python module's ReferenceRecorder both record through this one function, so the same w and u
// give the same rows in either trace.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/trace/block_sample.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

// One step's events by cause appended to a group's block event series (a target's write-back, a reference's block
// projection, an audit's recomputation).
inline void append_block_events(BlockEventSeries& e, const BlockWritebackCounts& b) {
  e.erased_grid.push_back(b.erased_grid);
  e.erased_saturation.push_back(b.erased_saturation);
  e.erased_scale.push_back(b.erased_scale);
  e.collateral.push_back(b.collateral);
  e.flushed.push_back(b.flushed);
  e.rescaled_up.push_back(b.rescaled_up);
  e.rescaled_down.push_back(b.rescaled_down);
}

// The header of a block format's projected series (before any step): its block count and its sample's blocks.
inline ProjectedSeries block_projection_header(const BlockFormatSpec& fmt, const RowMajorShape& shape) {
  ProjectedSeries series;
  series.block_events.blocks = block_count(fmt, shape);
  series.block_sample = block_sample_header(fmt, shape);
  return series;
}

// Appends one recorded step to `series` (a block_projection_header of fmt and shape): erased, fraction, the events by
// cause and the sample's rows (a sampled tensor: with the exact projection's counts at the anchor scales, one more
// block projection per anchor). w and u: the whole tensor, in memory the host can read; key names tensor and step in
// errors. Returns the step's counts.
template <class ExecSpace>
BlockWritebackCounts record_block_projection(const ExecSpace& space, const BlockFormatSpec& fmt, const RngKey& key,
                                             const RowMajorShape& shape,
                                             Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                             Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                                             ProjectedSeries& series) {
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible,
                "the block sample reads w and u in host memory");
  using memory_space = typename ExecSpace::memory_space;
  // The projection at s = 1 (fl32(1 u) == u) and, for a sampled tensor, at the anchor scales (below), together:
  // block_project_scales computes q(w) once for all of them, and hands NVFP4's q(w) of the whole tensor (the tensor
  // row's input) to q.
  std::vector<double> scales = {1.0};
  scales.insert(scales.end(), series.block_sample.anchor_scales.begin(), series.block_sample.anchor_scales.end());
  const auto n = static_cast<std::size_t>(w.extent(0));
  Kokkos::View<float*, memory_space> q;
  if (fmt.family == BlockFamily::nvfp4) {
    q = Kokkos::View<float*, memory_space>(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::record_block_projection::q"), n);
  }
  const std::vector<BlockWritebackCounts> at =
      block_project_scales(space, fmt, key, shape, w, u, std::span<const double>(scales), q);
  space.fence();
  const BlockWritebackCounts b = at.front();
  series.erased.push_back(b.erased);
  series.fraction.push_back(b.nonzero == 0 ? std::numeric_limits<double>::quiet_NaN()
                                           : static_cast<double>(b.erased) / static_cast<double>(b.nonzero));
  series.block_events.blocks = block_count(fmt, shape);
  append_block_events(series.block_events, b);
  // What the grid needs at other learning-rate scales (block_sample.hpp); NVFP4 also q(w) of the whole tensor.
  append_block_sample(fmt, series.block_sample, std::span<const float>(w.data(), n),
                      std::span<const float>(u.data(), n), std::span<const float>(q.data(), q.extent(0)));
  // A sampled tensor: the exact projection of q(w) + fl32(s u) at the anchor scales (the difference estimator's
  // anchors), fl32(s u) formed exactly as project_block_sample forms it, so that at an anchor the grid's projection and
  // this one are of the same values (computed above, after s = 1).
  for (std::size_t a = 1; a < at.size(); ++a) {
    append_block_anchor(series.block_sample, at[a]);
  }
  return b;
}

}  // namespace wbaudit::sim
