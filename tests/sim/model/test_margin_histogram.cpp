// The margin histogram (sim/trace/margin_histogram.hpp) recorded by the reference step's kernel
// (reference_histograms.hpp), against a brute force written from the definition: q_F(|w|) by binary search over the
// table of every finite value of F (tests/sim/precision/reference_formats.hpp), its gap on u's side from its neighbour
// in that table, kappa = floor(log2(|u| / (gap / 2))) by exact comparisons, the point m == 1 and the parity of q's
// code, saturation when u points away from max finite. Every ISA the CPU has, on weights spanning zero, fp32
// subnormals, every format's subnormal and normal range, binade edges, ties and saturation; and the size bound.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../precision/reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/writeback_blocks.hpp"
#include "sim/trace/margin_histogram.hpp"
#include "sim/trace/ratio_histogram.hpp"
#include "sim/trace/reference_histograms.hpp"

namespace {

using namespace wbaudit::sim;
using wbaudit::test::RefFormat;
using wbaudit::test::ValueCode;

// The counter of (w, u) in a block, from the layout's definition (docs/trace-format.md), written plainly.
int expected_counter(const MarginRows& r, int kappa, int sub, bool point, bool even) {
  int row = kappa - r.coarse_lo + 1;  // row 0: every kappa below coarse_lo; the last row: every kappa above
  row = std::max(0, std::min(row, r.coarse_hi - r.coarse_lo + 2));
  int offset = 1;
  for (int k = 0; k < row; ++k) {
    const int kk = k + r.coarse_lo - 1;
    offset += (kk >= r.fine_lo && kk <= r.fine_hi) ? kMarginSubBins + 2 : 3;
  }
  const bool fine = kappa >= r.fine_lo && kappa <= r.fine_hi;
  if (point) return offset + (fine ? kMarginSubBins : 1) + (even ? 0 : 1);
  return offset + (fine ? sub : 0);
}

struct Brute {
  std::vector<ValueCode> table;  // every finite value of F, ascending
  bool integer = false;
};

// (counter, whether the sub-bin is exact) of one coordinate, or -1 for saturation; `moment` the offset of its moments
// in the format's moment block (-1: none, a point, a coarse row or saturation) and `position` its p = floor(2^7 x),
// x its position in the sub-bin (schema 4; docs/trace-format.md).
int brute_counter(const Brute& b, const MarginRows& r, float w, float u, bool& sub_exact, int& moment, int& position) {
  moment = -1;
  position = 0;
  const double aw = std::fabs(static_cast<double>(w)), au = std::fabs(static_cast<double>(u));
  const double q = wbaudit::test::ref_nearest_search(b.table, aw);
  const auto it =
      std::lower_bound(b.table.begin(), b.table.end(), q, [](const ValueCode& a, double v) { return a.value < v; });
  const bool toward = w != 0 && std::signbit(w) != std::signbit(u);
  const bool even = (it->code & 1u) == 0;
  if (!toward && it + 1 == b.table.end()) return kMarginSaturated;
  const double gap = toward ? q - (it - 1)->value : (it + 1)->value - q;
  const double half = gap / 2;
  int kappa = std::ilogb(au) - std::ilogb(half) - 1;
  while (std::ldexp(half, kappa + 1) <= au) ++kappa;  // half 2^kappa <= |u| < half 2^(kappa + 1), exactly
  const double base = std::ldexp(half, kappa);
  const bool point = au == base;
  const double frac = (au - base) / base;  // exact difference, then one division
  int sub = static_cast<int>(std::floor(frac * kMarginSubBins));
  sub = std::min(sub, kMarginSubBins - 1);
  sub_exact = !b.integer;  // floating: m is u's own significand; intK's m is computed in fp32
  if (!point && kappa >= r.fine_lo && kappa <= r.fine_hi) {
    moment = 2 * ((kappa - r.fine_lo) * kMarginSubBins + sub);
    position = static_cast<int>(std::floor(frac * kMarginSubBins * 128)) - 128 * sub;  // frac * 2^12: exact
  }
  return expected_counter(r, kappa, sub, point, even);
}

struct Sample {
  std::vector<float> w, u;
};

Sample sample(std::uint64_t seed, double int_scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> normal(0, 1);
  Sample s;
  for (int i = 0; i < 60000; ++i) {
    const double r = unit(rng);
    double w;
    if (r < 0.03) {
      w = 0;
    } else if (r < 0.06) {
      w = std::ldexp(1.0, static_cast<int>(unit(rng) * 40) - 30);  // binade edges of every format
    } else if (r < 0.08) {
      w = std::ldexp(unit(rng), -140);  // fp32 subnormal
    } else if (r < 0.10) {
      w = 300 + unit(rng) * 70000;  // saturation of the small formats
    } else if (r < 0.12) {
      w = int_scale * std::round(unit(rng) * 20 - 10) * 1.0;  // on integer levels
    } else {
      w = std::exp2(unit(rng) * 36 - 30);
    }
    double u;
    const double v = unit(rng);
    if (v < 0.04) {
      u = std::ldexp(1.0, static_cast<int>(unit(rng) * 50) - 40);  // exact powers of two: ties of floats
    } else if (v < 0.06) {
      u = int_scale / 2 * std::ldexp(1.0, static_cast<int>(unit(rng) * 12) - 8);  // ties of intK
    } else if (v < 0.07) {
      u = std::ldexp(unit(rng), -135);  // fp32 subnormal proposals
    } else {
      u = (std::fabs(w) + 1e-6) * std::exp2(normal(rng) * 4 - 5);
    }
    if (unit(rng) < 0.5) w = -w;
    if (unit(rng) < 0.5) u = -u;
    if (unit(rng) < 0.02) u = 0;
    s.w.push_back(static_cast<float>(w));
    s.u.push_back(static_cast<float>(u));
  }
  return s;
}

TEST(MarginHistogram, EveryCounterIsTheBruteForceOneOnEveryIsa) {
  const double init_absmax = 0.37;  // intK scales from int_scale_for_absmax, as the simulator derives them
  const MarginLayout layout = default_margin_layout();
  const std::vector<MarginFormat> formats = margin_formats(layout, init_absmax);
  const int block = layout.rows.block();
  std::vector<Brute> brutes;
  for (const std::string& name : layout.formats) {
    Brute b;
    const FormatSpec spec = format_from_name(name);
    if (spec.kind == FormatKind::integer) {
      const int k = spec.bits;
      b.table = wbaudit::test::ref_table(wbaudit::test::ref_int_format(k, int_scale_for_absmax(k, init_absmax)));
      b.integer = true;
    } else {
      for (const RefFormat& f : wbaudit::test::ref_float_formats()) {
        if (f.name == name) b.table = wbaudit::test::ref_table(f);
      }
    }
    ASSERT_FALSE(b.table.empty()) << name;
    brutes.push_back(std::move(b));
  }
  const Sample s = sample(20261206, static_cast<double>(int_scale_for_absmax(4, init_absmax)));
  // brute force: counts per counter; intK also per row (sub-bins summed), its m being computed in fp32
  std::vector<std::int64_t> want(layout.bins(), 0);
  const std::size_t moments = layout.moments_begin(), mblock = static_cast<std::size_t>(layout.rows.moments());
  std::int64_t nonzero = 0;
  for (std::size_t i = 0; i < s.w.size(); ++i) {
    if (s.u[i] == 0) continue;
    ++nonzero;
    for (std::size_t f = 0; f < brutes.size(); ++f) {
      bool exact = true;
      int moment = -1, p = 0;
      ++want[f * block + brute_counter(brutes[f], layout.rows, s.w[i], s.u[i], exact, moment, p)];
      if (brutes[f].integer) {  // intK's m is computed in fp32: its moments from the plain definition (margin_bin)
        (void)margin_bin(layout.rows, formats[f], s.w[i], s.u[i], moment, p);
      }
      if (moment >= 0) {
        want[moments + f * mblock + moment] += p;
        want[moments + f * mblock + moment + 1] += p * p;
      }
    }
  }
  const auto row_sums = [&](const std::vector<std::int64_t>& c, std::size_t f) {
    std::vector<std::int64_t> rows;
    rows.push_back(c[f * block]);
    for (int r = 0; r < layout.rows.rows(); ++r) {
      const int lo = layout.rows.row_offset(r), hi = layout.rows.row_offset(r + 1);
      const bool fine = layout.rows.fine(r + layout.rows.coarse_lo - 1);
      std::int64_t interval = 0;
      for (int k = lo; k < hi - 2; ++k) interval += c[f * block + k];
      rows.push_back(interval);
      rows.push_back(c[f * block + hi - 2]);
      rows.push_back(c[f * block + hi - 1]);
      (void)fine;
    }
    return rows;
  };
  for (const auto isa : {detail::BlockIsa::portable, detail::BlockIsa::avx2, detail::BlockIsa::avx512}) {
    if (!detail::block_isa_supported(isa)) continue;
    detail::force_block_isa(isa);
    const ReferenceHistograms h = reference_histograms(Kokkos::DefaultHostExecutionSpace(), RatioHistogramLayout{},
                                                       layout, formats, s.w.data(), s.u.data(), s.w.size());
    const std::string where = std::string("ISA ") + detail::block_isa_name(isa);
    EXPECT_EQ(h.nonzero, nonzero) << where;
    ASSERT_EQ(h.margin.size(), layout.bins());
    for (std::size_t f = 0; f < brutes.size(); ++f) {
      std::int64_t total = 0;
      for (int k = 0; k < block; ++k) total += h.margin[f * block + k];
      EXPECT_EQ(total, nonzero) << where << " " << layout.formats[f];
      if (!brutes[f].integer) {
        for (int k = 0; k < block; ++k) {
          EXPECT_EQ(h.margin[f * block + k], want[f * block + k])
              << where << " " << layout.formats[f] << " counter " << k;
        }
      } else {
        EXPECT_EQ(row_sums(h.margin, f), row_sums(want, f)) << where << " " << layout.formats[f];
      }
      for (std::size_t k = 0; k < mblock; ++k) {
        EXPECT_EQ(h.margin[moments + f * mblock + k], want[moments + f * mblock + k])
            << where << " " << layout.formats[f] << " moment " << k;
      }
    }
  }
  detail::force_block_isa(detail::best_block_isa());
}

// The kernel's d histogram (computed in its vectorized pass) against the rule in double through std::log2 for every one
// of the 2^23 fractions of u, normal and subnormal, at exponent gaps reaching both clamped ends, on every ISA.
TEST(MarginHistogram, TheKernelsDHistogramIsTheLog2Rule) {
  const RatioHistogramLayout ratio;
  std::vector<float> w, u;
  for (std::uint32_t f = 0; f < (1u << 23); ++f) {
    const int e = static_cast<int>(f % 97) - 60;  // |w| / |u| over 2^-50 .. 2^70, beyond both ends
    w.push_back(std::ldexp(1.0f + static_cast<float>(f % 5) / 8, e));
    u.push_back(std::bit_cast<float>((f & 1 ? 0u : 0x3f800000u) | f));  // (1 + f 2^-23) or the subnormal f 2^-149
  }
  std::vector<std::int64_t> want(static_cast<std::size_t>(ratio.bins), 0);
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (u[i] != 0) ++want[ratio_bin_by_log2(ratio.d_min, ratio.bin_width, ratio.bins, w[i], u[i])];
  }
  for (const auto isa : {detail::BlockIsa::portable, detail::BlockIsa::avx2, detail::BlockIsa::avx512}) {
    if (!detail::block_isa_supported(isa)) continue;
    detail::force_block_isa(isa);
    const auto h = reference_histograms(Kokkos::DefaultHostExecutionSpace(), ratio, MarginLayout{}, {}, w.data(),
                                        u.data(), w.size());
    EXPECT_EQ(h.ratio, want) << detail::block_isa_name(isa);
  }
  detail::force_block_isa(detail::best_block_isa());
}

// The record's size is the layout's: 14 formats x (437 counters + 640 moments), whatever the tensor's size; intK of a
// tensor without a per-tensor scale is all zeros.
TEST(MarginHistogram, SizeIsBoundedAndIndependentOfTheTensor) {
  const MarginLayout layout = default_margin_layout();
  EXPECT_EQ(layout.formats.size(), 14u);
  EXPECT_EQ(layout.rows.block(), 437);    // 1 + 10 fine rows x 34 + 32 coarse rows x 3
  EXPECT_EQ(layout.rows.moments(), 640);  // 10 fine rows x 32 sub-bins x (sum p, sum p^2)
  EXPECT_EQ(layout.bins(), 14u * (437 + 640));
  MarginLayout schema3 = layout;
  schema3.moments = false;
  EXPECT_EQ(schema3.bins(), 6118u);
  for (const std::size_t n : {std::size_t{10}, std::size_t{100000}, std::size_t{1} << 21}) {
    std::vector<float> w(n, 0.01f), u(n, 1e-4f);
    const auto h = reference_histograms(Kokkos::DefaultHostExecutionSpace(), RatioHistogramLayout{}, layout,
                                        margin_formats(layout, 0.0), w.data(), u.data(), n);
    EXPECT_EQ(h.margin.size(), layout.bins()) << n;
    EXPECT_EQ(h.nonzero, static_cast<std::int64_t>(n));
    for (std::size_t f = 7; f < 14; ++f) {
      for (int k = 0; k < layout.rows.block(); ++k) EXPECT_EQ(h.margin[f * layout.rows.block() + k], 0);
      for (int k = 0; k < layout.rows.moments(); ++k)
        EXPECT_EQ(h.margin[layout.moments_begin() + f * layout.rows.moments() + k], 0);
    }
  }
}

}  // namespace
