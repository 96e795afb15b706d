// The block sample of a reference trace (block_sample.hpp).
#include "sim/trace/block_sample.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "sim/precision/storage_format.hpp"

namespace wbaudit::sim {

namespace {

std::int64_t block_elements(const BlockFormatSpec& fmt) {
  return fmt.tiles_2d ? static_cast<std::int64_t>(fmt.block_size) * fmt.block_size : fmt.block_size;
}

struct Line {
  float a = 0, b = 0;  // |a + s b|, normalized so that a > 0, or a == 0 and b >= 0
  bool operator<(const Line& o) const { return a < o.a || (a == o.a && b < o.b); }
  bool operator==(const Line& o) const = default;
};

double line_at(const Line& l, double s) {
  return std::fabs(static_cast<double>(l.a) + s * static_cast<double>(l.b));
}

// The points of [lo, hi] where the upper envelope of the lines +-(a + s b) changes line, with lo and hi: the envelope
// minus any one line is convex and piecewise linear with its kinks there, so its minimum over [lo, hi] is at one of
// them. Walks the envelope from lo: the next line is the one of larger slope that overtakes the current one first.
std::vector<double> envelope_kinks(const std::vector<Line>& lines, double lo, double hi) {
  struct Signed {
    double c, d;
  };
  std::vector<Signed> all;
  all.reserve(2 * lines.size());
  for (const Line& l : lines) {
    all.push_back({l.a, l.b});
    all.push_back({-static_cast<double>(l.a), -static_cast<double>(l.b)});
  }
  std::vector<double> kinks = {lo, hi};
  std::size_t cur = 0;
  for (std::size_t j = 1; j < all.size(); ++j) {
    const double vj = all[j].c + lo * all[j].d, vc = all[cur].c + lo * all[cur].d;
    if (vj > vc || (vj == vc && all[j].d > all[cur].d)) {
      cur = j;
    }
  }
  double s = lo;
  for (;;) {
    std::size_t next = all.size();
    double at = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < all.size(); ++j) {
      if (!(all[j].d > all[cur].d)) {
        continue;
      }
      const double x = std::max(s, (all[cur].c - all[j].c) / (all[j].d - all[cur].d));
      if (x < at || (x == at && next < all.size() && all[j].d > all[next].d)) {
        at = x;
        next = j;
      }
    }
    if (next == all.size() || !(at < hi)) {
      break;
    }
    kinks.push_back(at);
    s = at;
    cur = next;
  }
  return kinks;
}

}  // namespace

bool block_sample_has_tensor_rows(std::string_view format) {
  try {
    const StorageFormat f = storage_format_from_name(format);
    return f.block && f.blocks.family == BlockFamily::nvfp4;
  } catch (const std::exception&) {
    return false;
  }
}

std::uint64_t block_sample_step_bytes(const BlockSample& sample, std::string_view format) {
  if (sample.empty()) {
    return 0;
  }
  return 8 * static_cast<std::uint64_t>(sample.elements) +
         (block_sample_has_tensor_rows(format) ? 4 * kBlockSampleTensorWidth : 0) +
         8 * kBlockAnchorCounts * sample.anchor_scales.size();
}

std::vector<std::int64_t> block_sample_indices(const BlockFormatSpec& fmt, const RowMajorShape& shape) {
  const std::int64_t n = block_count(fmt, shape);
  const std::int64_t budget = std::max<std::int64_t>(1, kBlockSampleElements / block_elements(fmt));
  std::vector<std::int64_t> out;
  const std::int64_t k_max = std::min(n, budget);
  out.reserve(static_cast<std::size_t>(k_max));
  for (std::int64_t k = 0; k < k_max; ++k) {
    if (n <= budget) {
      out.push_back(k);
      continue;
    }
    // stratum k: [k n / B, (k + 1) n / B) (k n < 2^15 * 2^48: no overflow for any real tensor), its block at offset
    // k mod its width: consecutive strata take consecutive offsets, so that a stratum that is a row's blocks (or a
    // multiple of them) does not alias with the row's block positions (full blocks and the short one at the row's
    // end are sampled in proportion)
    const std::int64_t lo = k * n / budget, hi = (k + 1) * n / budget;
    out.push_back(lo + k % (hi - lo));
  }
  return out;
}

BlockSample block_sample_header(const BlockFormatSpec& fmt, const RowMajorShape& shape) {
  BlockSample s;
  s.rows = shape.rows;
  s.cols = shape.cols;
  s.blocks = block_sample_indices(fmt, shape);
  for (const std::int64_t b : s.blocks) {
    const BlockLocation where = block_at(fmt, shape, b);
    s.elements += (where.row_end - where.row_begin) * (where.col_end - where.col_begin);
  }
  if (static_cast<std::int64_t>(s.blocks.size()) < block_count(fmt, shape)) {  // sampled: the exact anchors too
    s.anchor_scales.assign(kBlockSampleAnchorScales.begin(), kBlockSampleAnchorScales.end());
  }
  return s;
}

void append_block_sample(const BlockFormatSpec& fmt, BlockSample& sample, std::span<const float> w,
                         std::span<const float> u, std::span<const float> q) {
  const RowMajorShape shape{sample.rows, sample.cols};
  if (static_cast<std::int64_t>(w.size()) != shape.size() || w.size() != u.size()) {
    throw std::invalid_argument("append_block_sample: w and u hold " + std::to_string(w.size()) + " and " +
                                std::to_string(u.size()) + " values for a tensor of " + std::to_string(shape.size()));
  }
  for (const std::int64_t b : sample.blocks) {
    const BlockLocation where = block_at(fmt, shape, b);
    for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
      const auto first = static_cast<std::size_t>(r * shape.cols + where.col_begin);
      const auto last = static_cast<std::size_t>(r * shape.cols + where.col_end);
      sample.w.insert(sample.w.end(), w.begin() + static_cast<std::ptrdiff_t>(first),
                      w.begin() + static_cast<std::ptrdiff_t>(last));
      sample.u.insert(sample.u.end(), u.begin() + static_cast<std::ptrdiff_t>(first),
                      u.begin() + static_cast<std::ptrdiff_t>(last));
    }
  }
  if (fmt.family == BlockFamily::nvfp4) {
    if (q.size() != w.size()) {
      throw std::invalid_argument("append_block_sample: NVFP4 needs q(w) of the whole tensor");
    }
    const std::vector<float> row = nvfp4_tensor_row(w, q, u);
    sample.tensor.insert(sample.tensor.end(), row.begin(), row.end());
  }
}

void append_block_anchor(BlockSample& sample, const BlockWritebackCounts& counts) {
  sample.anchors.insert(sample.anchors.end(), {counts.nonzero, counts.erased, counts.erased_grid,
                                               counts.erased_saturation, counts.erased_scale});
}

BlockWritebackCounts block_sample_anchor(const BlockSample& sample, std::size_t t, std::size_t a) {
  const std::size_t width = sample.anchor_scales.size() * kBlockAnchorCounts;
  if (a >= sample.anchor_scales.size() || (t + 1) * width > sample.anchors.size()) {
    throw std::invalid_argument("block_sample_anchor: no anchor " + std::to_string(a) + " for step entry " +
                                std::to_string(t));
  }
  const std::int64_t* c = sample.anchors.data() + t * width + a * kBlockAnchorCounts;
  BlockWritebackCounts out;
  out.nonzero = c[0];
  out.erased = c[1];
  out.erased_grid = c[2];
  out.erased_saturation = c[3];
  out.erased_scale = c[4];
  return out;
}

namespace {

// The maxima of nvfp4_tensor_row's first pass: max |w|, max |q| with the first index where it occurs, max |u|.
struct TensorRowMaxima {
  float amax_w = 0, amax_q = 0;
  std::size_t top = std::numeric_limits<std::size_t>::max();
  double umax = 0;
};

// Coordinates per work item of nvfp4_tensor_row's passes.
constexpr std::size_t kTensorRowChunk = std::size_t{1} << 15;

// nvfp4_tensor_row's first pass, one chunk per work item. The maxima are order-free, and (amax_q, top) keeps the
// smallest index among equal maxima, so every schedule gives one serial loop's first index (0 for an all-zero q).
struct TensorRowMaximaPass {
  using value_type = TensorRowMaxima;
  const float *w, *q, *u;
  std::size_t n;
  void init(value_type& v) const { v = value_type{}; }
  void join(volatile value_type& a, const volatile value_type& b) const {
    const float bw = b.amax_w, bq = b.amax_q, aw = a.amax_w, aq = a.amax_q;
    const std::size_t bt = b.top, at = a.top;
    const double bu = b.umax, au = a.umax;
    a.amax_w = std::max(aw, bw);
    if (bq > aq || (bq == aq && bt < at)) {
      a.amax_q = bq;
      a.top = bt;
    }
    a.umax = std::max(au, bu);
  }
  void operator()(const std::size_t c, value_type& v) const {
    const std::size_t end = std::min(n, (c + 1) * kTensorRowChunk);
    for (std::size_t i = c * kTensorRowChunk; i < end; ++i) {
      v.amax_w = std::max(v.amax_w, std::fabs(w[i]));
      const float aq = std::fabs(q[i]);
      if (aq > v.amax_q || (aq == v.amax_q && i < v.top)) {
        v.amax_q = aq;
        v.top = i;
      }
      v.umax = std::max(v.umax, static_cast<double>(std::fabs(u[i])));
    }
  }
};

}  // namespace

std::vector<float> nvfp4_tensor_row(std::span<const float> w, std::span<const float> q, std::span<const float> u) {
  std::vector<float> row(kBlockSampleTensorWidth, 0.0f);
  if (w.empty()) {
    return row;
  }
  // Both passes over the tensor run on the host space's threads, one chunk per work item; what they give does not
  // depend on the schedule (the reducer above; the lines are collected per chunk and joined in index order).
  using Space = Kokkos::DefaultHostExecutionSpace;
  const std::size_t n = w.size(), chunks = (n + kTensorRowChunk - 1) / kTensorRowChunk;
  const float* wp = w.data();
  const float* qp = q.data();
  const float* up = u.data();
  TensorRowMaxima m;
  Kokkos::parallel_reduce("wbaudit::sim::nvfp4_tensor_row::maxima", Kokkos::RangePolicy<Space>(0, chunks),
                          TensorRowMaximaPass{wp, qp, up, n}, m);
  row[0] = m.amax_w;
  row[1] = m.amax_q;
  const double lo = kBlockSampleScaleMin, hi = kBlockSampleScaleMax;
  // fp32 evaluation moves |q + fl32(s u)| by at most 2^-23 (|q| + 2 s |u|) from its exact value; a line that stays more
  // than tol below the envelope at every s never gives the fp32 maximum.
  const double tol = 0x1p-20 * (static_cast<double>(m.amax_q) + hi * m.umax);
  // The envelope is at least |q_top| - hi |u_top| everywhere; a line's largest value on [lo, hi] is at an end.
  const double floor_value = static_cast<double>(m.amax_q) - hi * std::fabs(static_cast<double>(u[m.top])) - tol;
  std::vector<std::vector<Line>> found(chunks);
  Kokkos::parallel_for("wbaudit::sim::nvfp4_tensor_row::lines", Kokkos::RangePolicy<Space>(0, chunks),
                       [&](const std::size_t c) {
                         const std::size_t end = std::min(n, (c + 1) * kTensorRowChunk);
                         for (std::size_t i = c * kTensorRowChunk; i < end; ++i) {
                           Line l{qp[i], up[i]};
                           if (std::max(line_at(l, lo), line_at(l, hi)) < floor_value) {
                             continue;
                           }
                           if (l.a < 0 || (l.a == 0 && l.b < 0)) {
                             l = Line{-l.a, -l.b};
                           }
                           found[c].push_back(l);
                         }
                       });
  Kokkos::fence();
  std::vector<Line> lines;  // in index order, as one loop over the tensor finds them
  for (const std::vector<Line>& f : found) {
    lines.insert(lines.end(), f.begin(), f.end());
  }
  std::sort(lines.begin(), lines.end());
  lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
  const std::vector<double> kinks = envelope_kinks(lines, lo, hi);
  std::vector<double> envelope(kinks.size(), 0.0);
  for (std::size_t k = 0; k < kinks.size(); ++k) {
    for (const Line& l : lines) {
      envelope[k] = std::max(envelope[k], line_at(l, kinks[k]));
    }
  }
  std::vector<std::pair<double, Line>> kept;  // (how close to the envelope, line)
  for (const Line& l : lines) {
    double margin = -std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < kinks.size(); ++k) {
      margin = std::max(margin, line_at(l, kinks[k]) - envelope[k]);
    }
    if (margin >= -tol) {
      kept.emplace_back(margin, l);
    }
  }
  // More than kBlockSampleLines near the envelope (not met on the references of docs/forecasting.md): the closest.
  std::stable_sort(kept.begin(), kept.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  if (kept.size() > static_cast<std::size_t>(kBlockSampleLines)) {
    kept.resize(static_cast<std::size_t>(kBlockSampleLines));
  }
  std::sort(kept.begin(), kept.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  for (std::size_t j = 0; j < kept.size(); ++j) {
    row[2 + 2 * j] = kept[j].second.a;
    row[3 + 2 * j] = kept[j].second.b;
  }
  return row;
}

float nvfp4_amax_at_scale(std::span<const float> row, double lr_scale) {
  if (!(lr_scale >= kBlockSampleScaleMin && lr_scale <= kBlockSampleScaleMax)) {
    throw std::invalid_argument("learning-rate scale " + std::to_string(lr_scale) +
                                " is outside the scales an NVFP4 block sample decides ([" +
                                std::to_string(kBlockSampleScaleMin) + ", " + std::to_string(kBlockSampleScaleMax) +
                                "]: the tensor scale follows the whole tensor's max |q(w) + s u|)");
  }
  if (row.size() != kBlockSampleTensorWidth) {
    throw std::invalid_argument("nvfp4_amax_at_scale: a tensor row of " + std::to_string(row.size()) + " values");
  }
  float amax = 0;
  for (int j = 0; j < kBlockSampleLines; ++j) {
    const float a = row[2 + 2 * j];
    const auto us = static_cast<float>(lr_scale * static_cast<double>(row[3 + 2 * j]));
    amax = std::max(amax, std::fabs(a + us));  // fl32(q + fl32(s u)), as block_project's maxima
  }
  return amax;
}

BlockWritebackCounts project_block_sample(const BlockFormatSpec& fmt, const BlockSample& sample, std::size_t t,
                                          double lr_scale) {
  const auto n = static_cast<std::size_t>(sample.elements);
  if ((t + 1) * n > sample.w.size() || sample.w.size() != sample.u.size()) {
    throw std::invalid_argument("project_block_sample: no rows for step entry " + std::to_string(t));
  }
  const bool nvfp4 = fmt.family == BlockFamily::nvfp4;
  BlockTensorMaxima maxima;
  if (nvfp4) {
    if ((t + 1) * kBlockSampleTensorWidth > sample.tensor.size()) {
      throw std::invalid_argument("project_block_sample: no NVFP4 tensor row for step entry " + std::to_string(t));
    }
    const std::span<const float> row(sample.tensor.data() + t * kBlockSampleTensorWidth, kBlockSampleTensorWidth);
    maxima = BlockTensorMaxima{row[0], row[1], nvfp4_amax_at_scale(row, lr_scale)};
  }
  const float* w = sample.w.data() + t * n;
  std::vector<float> us(n);
  for (std::size_t i = 0; i < n; ++i) {
    us[i] = static_cast<float>(lr_scale * static_cast<double>(sample.u[t * n + i]));
  }
  // A sample is at most kBlockSampleElements: a serial launch beats a team's barriers there (and the bits are the
  // same on every space).
#ifdef KOKKOS_ENABLE_SERIAL
  using Space = Kokkos::Serial;
#else
  using Space = Kokkos::DefaultHostExecutionSpace;
#endif
  using Unmanaged = Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  const RowMajorShape shape{sample.rows, sample.cols};
  const std::int64_t full_rows = fmt.tiles_2d ? fmt.block_size : 1;
  // The sampled blocks by shape (rows, columns), with their offsets in the step's row: the counts add, so the blocks
  // of one shape are projected together as one tensor whose blocks are exactly they (1-D blocks of c columns as the
  // rows of an [n x c] tensor, full-height tiles of c columns stacked as [16 n x c]); a tile cut short at the bottom
  // edge alone.
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::size_t>> by_shape;
  std::size_t offset = 0;
  for (const std::int64_t b : sample.blocks) {
    const BlockLocation where = block_at(fmt, shape, b);
    const std::int64_t rh = where.row_end - where.row_begin, cw = where.col_end - where.col_begin;
    by_shape[{rh, cw}].push_back(offset);
    offset += static_cast<std::size_t>(rh * cw);
  }
  BlockWritebackCounts total;
  std::vector<float> pw, pu;
  for (const auto& [dims, offsets] : by_shape) {
    const auto [rh, cw] = dims;
    const auto size = static_cast<std::size_t>(rh * cw);
    const std::size_t together = rh == full_rows ? offsets.size() : 1;
    for (std::size_t first = 0; first < offsets.size(); first += together) {
      pw.clear();
      pu.clear();
      for (std::size_t k = first; k < first + together; ++k) {
        pw.insert(pw.end(), w + offsets[k], w + offsets[k] + size);
        pu.insert(pu.end(), us.begin() + static_cast<std::ptrdiff_t>(offsets[k]),
                  us.begin() + static_cast<std::ptrdiff_t>(offsets[k] + size));
      }
      const RowMajorShape part{static_cast<std::int64_t>(together) * rh, cw};
      const Kokkos::View<const float*, Kokkos::HostSpace> wv(Unmanaged(pw.data(), pw.size()));
      const Kokkos::View<const float*, Kokkos::HostSpace> uv(Unmanaged(pu.data(), pu.size()));
      total += nvfp4 ? block_project(Space(), fmt, RngKey{}, part, wv, uv, maxima)
                     : block_project(Space(), fmt, RngKey{}, part, wv, uv);
    }
  }
  return total;
}

}  // namespace wbaudit::sim
