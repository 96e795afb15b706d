// The scalar reference of the block-scaled write-back (block_writeback.hpp): the definitions of docs/formats.md
// ("Block-scaled formats") written block by block with plain loops and exact arithmetic. The kernels
// (block_writeback.cpp) must give the same bits; tests/sim/precision/test_block_writeback.cpp compares them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sim/precision/block_writeback.hpp"
#include "sim/precision/detail/block_element.hpp"
#include "sim/precision/detail/block_host.hpp"

namespace wbaudit::sim {
namespace {

using detail::BlockScale;

// The coordinates of block b, row by row.
std::vector<std::int64_t> block_coordinates(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::int64_t b) {
  const BlockLocation where = block_at(fmt, shape, b);
  std::vector<std::int64_t> idx;
  for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
    for (std::int64_t c = where.col_begin; c < where.col_end; ++c) {
      idx.push_back(r * shape.cols + c);
    }
  }
  return idx;
}

// What is rounded: w + u formed exactly, or (master variant) the updated master copy.
struct Inputs {
  std::span<const float> w, u;
  std::span<const float> master;  // empty: round w + u
  ExactSum value(std::int64_t i) const {
    return master.empty() ? exact_sum(w[i], u[i]) : ExactSum{static_cast<double>(master[i]), 0.0};
  }
  float value_fp32(std::int64_t i) const { return master.empty() ? w[i] + u[i] : master[i]; }  // fl32(value)
};

ExactSum magnitude(const ExactSum& x) {
  return std::signbit(x.hi) ? ExactSum{-x.hi, -x.lo} : x;
}
bool greater(const ExactSum& a, const ExactSum& b) {
  return a.hi > b.hi || (a.hi == b.hi && a.lo > b.lo);
}

// The scale a block's current values w imply (its old scale).
BlockScale old_scale(const BlockFormatParams& p, const Inputs& in, const std::vector<std::int64_t>& idx, float s_enc) {
  float amax = 0;
  for (const auto i : idx) {
    amax = std::max(amax, std::fabs(in.w[i]));
  }
  return p.family == BlockFamily::mx ? detail::mx_scale_of(p, ExactSum{amax, 0.0})
                                     : detail::nvfp4_scale_of(p, amax, s_enc);
}

// The scale recomputed from the values to round (its new scale), with the block's exact amax.
BlockScale new_scale(const BlockFormatParams& p, const Inputs& in, const std::vector<std::int64_t>& idx, float s_enc,
                     ExactSum& amax) {
  amax = ExactSum{};
  float amax32 = 0;
  for (const auto i : idx) {
    const ExactSum a = magnitude(in.value(i));
    if (greater(a, amax)) {
      amax = a;
    }
    amax32 = std::max(amax32, std::fabs(in.value_fp32(i)));
  }
  return p.family == BlockFamily::mx ? detail::mx_scale_of(p, amax) : detail::nvfp4_scale_of(p, amax32, s_enc);
}

// The write-back of every block (the arguments are checked and the input is finite): scales first, so that a block
// out of range is refused before anything is written; then block by block.
BlockWritebackCounts writeback_blocks(const BlockFormatSpec& fmt, const WritebackPolicy& policy, const RngKey& key,
                                      const RowMajorShape& shape, const Inputs& in, std::span<float> out,
                                      const BlockWritebackOptions& options, const std::string& context,
                                      BlockWritebackExplained* explained = nullptr) {
  const BlockFormatParams p = block_format_params(fmt);
  const std::int64_t n = shape.size();
  float s_old = 1, s_new = 1;  // NVFP4: the tensor's encode scales from w and from the values to round
  if (p.family == BlockFamily::nvfp4) {
    float amax_old = 0, amax_new = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      amax_old = std::max(amax_old, std::fabs(in.w[i]));
      const float a = std::fabs(in.value_fp32(i));
      if (std::isinf(a)) {
        detail::throw_block_range(context, fmt, shape, block_of_coordinate(fmt, shape, i).block,
                                  "|w + u| at coordinate " + std::to_string(i) + " rounds to infinity in fp32");
      }
      amax_new = std::max(amax_new, a);
    }
    s_old = nvfp4_tensor_scale(amax_old);
    s_new = nvfp4_tensor_scale(amax_new);
  }
  const std::int64_t blocks = block_count(fmt, shape);
  std::vector<BlockScale> olds(static_cast<std::size_t>(blocks)), news(static_cast<std::size_t>(blocks));
  for (std::int64_t b = 0; b < blocks; ++b) {
    const auto idx = block_coordinates(fmt, shape, b);
    ExactSum amax;
    olds[b] = old_scale(p, in, idx, s_old);
    news[b] = new_scale(p, in, idx, s_new, amax);
    if (p.family == BlockFamily::mx && !detail::mx_block_in_range(p, amax, news[b].exp)) {
      detail::throw_block_range(context, fmt, shape, b, detail::mx_range_reason(news[b].exp, amax.hi));
    }
  }
  BlockWritebackCounts counts;
  counts.blocks = blocks;
  if (explained != nullptr) {
    explained->events.assign(static_cast<std::size_t>(n), BlockEvent::unchanged);
    explained->saturated.assign(static_cast<std::size_t>(n), false);
    explained->scales.assign(static_cast<std::size_t>(blocks), BlockScaleChange{});
  }
  for (std::int64_t b = 0; b < blocks; ++b) {
    const auto idx = block_coordinates(fmt, shape, b);
    const int order = detail::scale_order(p, olds[b], news[b]);
    if (explained != nullptr) {
      explained->scales[b] = BlockScaleChange{olds[b].exp,   news[b].exp,   olds[b].s_b, news[b].s_b,
                                              olds[b].s_enc, news[b].s_enc, order,       false};
    }
    if (options.skip_unchanged_blocks && std::all_of(idx.begin(), idx.end(), [&](auto i) { return in.u[i] == 0; })) {
      counts.blocks_skipped += 1;
      if (explained != nullptr) {
        explained->scales[b].order = 0;
        explained->scales[b].skipped = true;
      }
      continue;
    }
    counts.rescaled_up += order > 0;
    counts.rescaled_down += order < 0;
    const double top_old = detail::largest_decoded(p, olds[b]);
    for (const auto i : idx) {
      const float w = in.w[i], u = in.u[i];
      const detail::ElementOutcome o = detail::round_element(
          p, news[b], policy, key, options.first_coordinate + static_cast<std::uint64_t>(i), in.value(i), w, u);
      BlockWritebackCounts one;
      detail::add_element_events(one, w, u, o, order != 0, std::fabs(static_cast<double>(w)) == top_old);
      counts += one;
      out[i] = o.value;
      if (explained != nullptr) {
        explained->saturated[i] = o.saturated;
        explained->events[i] = one.erased_grid         ? BlockEvent::erased_grid
                               : one.erased_saturation ? BlockEvent::erased_saturation
                               : one.erased_scale      ? BlockEvent::erased_scale
                               : one.applied           ? BlockEvent::applied
                               : one.flushed           ? BlockEvent::flushed
                               : one.collateral        ? BlockEvent::collateral
                                                       : BlockEvent::unchanged;
      }
    }
  }
  return counts;
}

// NonFiniteError when any of the arrays holds NaN/inf (names are "w", "u", ...).
void require_finite(const std::string& context, const BlockFormatSpec& fmt, const RowMajorShape& shape,
                    std::initializer_list<std::pair<const char*, std::span<const float>>> arrays) {
  std::int64_t count = 0, first = -1;
  for (std::int64_t i = 0; i < shape.size(); ++i) {
    bool bad = false;
    for (const auto& [name, a] : arrays) {
      bad = bad || !std::isfinite(a[i]);
    }
    if (bad && first < 0) {
      first = i;
    }
    count += bad;
  }
  if (count > 0) {
    std::string values;
    for (const auto& [name, a] : arrays) {
      values += (values.empty() ? "" : ", ") + std::string(name) + " = " + detail::block_float_text(a[first]);
    }
    detail::throw_block_nonfinite(context, fmt, shape, count, first, values);
  }
}

}  // namespace

BlockWritebackCounts block_writeback_reference(const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                               const RngKey& key, const RowMajorShape& shape, std::span<float> w,
                                               std::span<const float> u, const BlockWritebackOptions& options) {
  detail::check_block_shape("block_writeback_reference", shape, w.size(), u.size());
  detail::check_block_policy("block_writeback_reference", policy, key, options.first_coordinate, w.size());
  const std::string context = detail::block_context("block_writeback", key, fmt);
  require_finite(context, fmt, shape, {{"w", w}, {"u", u}});
  return writeback_blocks(fmt, policy, key, shape, Inputs{w, u, {}}, w, options, context);
}

BlockWritebackCounts block_writeback_master_reference(const BlockFormatSpec& fmt, const RngKey& key,
                                                      const RowMajorShape& shape, std::span<float> master,
                                                      std::span<float> w, std::span<const float> u,
                                                      const BlockWritebackOptions& options) {
  detail::check_block_shape("block_writeback_master_reference", shape, master.size(), u.size());
  detail::check_block_shape("block_writeback_master_reference", shape, w.size(), u.size());
  const std::string context = detail::block_context("block_writeback_master", key, fmt);
  std::vector<float> updated(master.size());
  for (std::size_t i = 0; i < master.size(); ++i) {
    updated[i] = master[i] + u[i];  // the fp32 master update
  }
  require_finite(context, fmt, shape, {{"master", master}, {"u", u}, {"w", w}, {"master + u", updated}});
  const BlockWritebackCounts counts =
      writeback_blocks(fmt, WritebackPolicy{}, key, shape, Inputs{w, u, updated}, w, options, context);
  std::copy(updated.begin(), updated.end(), master.begin());
  return counts;
}

BlockWritebackCounts block_project_reference(const BlockFormatSpec& fmt, const RngKey& key, const RowMajorShape& shape,
                                             std::span<const float> w, std::span<const float> u) {
  detail::check_block_shape("block_project_reference", shape, w.size(), u.size());
  const std::string context = detail::block_context("block_project", key, fmt);
  require_finite(context, fmt, shape, {{"w", w}, {"u", u}});
  std::vector<float> state(w.begin(), w.end());
  const std::vector<float> zeros(w.size(), 0.0f);
  writeback_blocks(fmt, WritebackPolicy{}, key, shape, Inputs{state, zeros, {}}, state, {}, context);  // q(w)
  std::vector<float> scratch(state);
  return writeback_blocks(fmt, WritebackPolicy{}, key, shape, Inputs{state, u, {}}, scratch, {}, context);
}

BlockWritebackExplained block_writeback_explain(const BlockFormatSpec& fmt, const WritebackPolicy& policy,
                                                const RngKey& key, const RowMajorShape& shape, std::span<float> w,
                                                std::span<const float> u, const BlockWritebackOptions& options) {
  detail::check_block_shape("block_writeback_explain", shape, w.size(), u.size());
  detail::check_block_policy("block_writeback_explain", policy, key, options.first_coordinate, w.size());
  const std::string context = detail::block_context("block_writeback", key, fmt);
  require_finite(context, fmt, shape, {{"w", w}, {"u", u}});
  BlockWritebackExplained e;
  e.counts = writeback_blocks(fmt, policy, key, shape, Inputs{w, u, {}}, w, options, context, &e);
  return e;
}

const char* block_event_name(BlockEvent e) {
  switch (e) {
    case BlockEvent::unchanged:
      return "unchanged";
    case BlockEvent::erased_grid:
      return "erased:grid";
    case BlockEvent::erased_saturation:
      return "erased:saturation";
    case BlockEvent::erased_scale:
      return "erased:scale";
    case BlockEvent::applied:
      return "applied";
    case BlockEvent::collateral:
      return "collateral";
    case BlockEvent::flushed:
      return "collateral:flushed";
  }
  return "?";
}

void block_quantize_reference(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::span<float> x) {
  detail::check_block_shape("block_quantize_reference", shape, x.size(), x.size());
  const std::string context = std::string("block_quantize (format ") + fmt.name + ")";
  require_finite(context, fmt, shape, {{"x", x}});
  const std::vector<float> zeros(x.size(), 0.0f);
  writeback_blocks(fmt, WritebackPolicy{}, RngKey{}, shape, Inputs{x, zeros, {}}, x, {}, context);
}

}  // namespace wbaudit::sim
