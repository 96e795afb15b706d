// The erased count at s = 1 read from the margin histogram (sim/trace/margin_readout.hpp) against a brute force from
// the format definitions: q(w) by binary search over the table of every finite value of F
// (tests/sim/precision/reference_formats.hpp, round to nearest even, saturating), then q(q(w) + u) the same way, a
// coordinate erased iff u != 0 and q(q(w) + u) == q(w). Every format of the default layout (intK with the scale the
// simulator derives), on random inputs and adversarial ones: ties at the midpoints of both neighbours (even and odd
// levels), one fp32 ulp either side of them, binade edges approached from above, w at and beyond max finite with
// outward and inward u, zeros of both signs, fp32 subnormals and every format's subnormal range; on every ISA the CPU
// has. The readout must also equal the explicit pass it replaces (project_erasure), so traces keep their bytes.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../precision/reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_blocks.hpp"
#include "sim/trace/margin_histogram.hpp"
#include "sim/trace/margin_readout.hpp"
#include "sim/trace/reference_histograms.hpp"

namespace {

using namespace wbaudit::sim;
using wbaudit::test::ValueCode;

constexpr double kInitAbsmax = 0.37;

// The reference table of every format of the layout (intK at its simulator scale) and the FormatSpec projected.
struct Case {
  std::string name;
  std::vector<ValueCode> table;
  FormatSpec spec;
};

std::vector<Case> cases(const MarginLayout& layout) {
  std::vector<Case> out;
  for (const std::string& name : layout.formats) {
    Case c;
    c.name = name;
    const FormatSpec spec = format_from_name(name);
    if (spec.kind == FormatKind::integer) {
      const float scale = int_scale_for_absmax(spec.bits, kInitAbsmax);
      c.table = wbaudit::test::ref_table(wbaudit::test::ref_int_format(spec.bits, scale));
      c.spec = int_format(spec.bits, scale);
    } else {
      for (const wbaudit::test::RefFormat& f : wbaudit::test::ref_float_formats()) {
        if (f.name == name) {
          c.table = wbaudit::test::ref_table(f);
        }
      }
      c.spec = spec;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Erased coordinates by the definition. q(w) + u is exact in double wherever it can be near a midpoint (both have
// at most 24 significant bits within 50 binades of each other there).
std::int64_t brute_erased(const std::vector<ValueCode>& table, const std::vector<float>& w,
                          const std::vector<float>& u) {
  std::int64_t erased = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (u[i] == 0) {
      continue;
    }
    const double q = wbaudit::test::ref_nearest_search(table, static_cast<double>(w[i]));
    erased += wbaudit::test::ref_nearest_search(table, q + static_cast<double>(u[i])) == q ? 1 : 0;
  }
  return erased;
}

struct Sample {
  std::vector<float> w, u;
  void add(double wv, double uv) {  // finite inputs only (2 max of bf16 is not a float)
    if (std::isfinite(static_cast<float>(wv)) && std::isfinite(static_cast<float>(uv))) {
      w.push_back(static_cast<float>(wv));
      u.push_back(static_cast<float>(uv));
    }
  }
};

// Random weights and proposals over every format's range, zeros and fp32 subnormals.
void add_random(Sample& s, std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> normal(0, 1);
  for (int i = 0; i < n; ++i) {
    const double r = unit(rng);
    double w = std::exp2(unit(rng) * 40 - 32);
    if (r < 0.03) {
      w = 0;
    } else if (r < 0.05) {
      w = std::ldexp(unit(rng), -140);  // fp32 subnormal
    } else if (r < 0.08) {
      w = 300 + unit(rng) * 70000;  // saturation of the small formats
    }
    double u = (w + 1e-6) * std::exp2(normal(rng) * 4 - 5);
    if (unit(rng) < 0.03) {
      u = std::ldexp(unit(rng), -135);  // fp32 subnormal proposals
    } else if (unit(rng) < 0.03) {
      u = unit(rng) < 0.5 ? 0.0 : -0.0;
    }
    s.add(unit(rng) < 0.5 ? -w : w, unit(rng) < 0.5 ? -u : u);
  }
}

// At table value v with neighbours lo < v < hi: u at both half gaps and one fp32 ulp either side, toward and away
// from zero, and w slightly off v (still rounding to v).
void add_ties(Sample& s, std::mt19937_64& rng, const std::vector<ValueCode>& t, int n) {
  std::uniform_int_distribution<std::size_t> pick(1, t.size() - 2);
  for (int i = 0; i < n; ++i) {
    const std::size_t k = pick(rng);
    const double v = t[k].value, down = (v - t[k - 1].value) / 2, up = (t[k + 1].value - v) / 2;
    for (const double half : {down, up}) {
      const auto h = static_cast<float>(half);
      for (const float uv : {h, std::nextafter(h, 0.0f), std::nextafter(h, 1e30f), 3 * h, 2 * h}) {
        s.add(v, uv);
        s.add(v, -uv);
        s.add(v + std::min(down, up) / 4, uv);
        s.add(v - std::min(down, up) / 4, -uv);
      }
    }
  }
}

// The ends of a table: max finite and beyond with u outward and inward, zeros of both signs, the smallest values.
void add_ends(Sample& s, const std::vector<ValueCode>& t) {
  const double max = t.back().value, gap = max - t[t.size() - 2].value;
  const double smallest = t[t.size() / 2 + 1].value;  // the smallest positive value (the table is symmetric)
  for (const double w : {max, max + gap / 4, max + gap, 2 * max, max - gap / 4}) {
    for (const double u : {gap / 2, gap, 1e-30, 1e30, gap / 4}) {
      s.add(w, u);
      s.add(w, -u);
      s.add(-w, -u);
      s.add(-w, u);
    }
  }
  for (const double w : {0.0, -0.0, smallest, smallest / 2, smallest / 4, smallest * 1.5}) {
    for (const double u : {smallest / 2, smallest / 4, smallest, smallest * 1.5, 0.0, -0.0, 0x1p-149}) {
      s.add(w, u);
      s.add(w, -u);
    }
  }
}

Sample adversarial(const std::vector<Case>& formats) {
  std::mt19937_64 rng(20261206);
  Sample s;
  add_random(s, rng, 60000);
  for (const Case& c : formats) {
    add_ties(s, rng, c.table, 1500);
    add_ends(s, c.table);
  }
  return s;
}

TEST(MarginReadout, TheErasedCountAtUnitScaleIsTheBruteForceOneForEveryFormatOnEveryIsa) {
  const MarginLayout layout = default_margin_layout();
  const std::vector<MarginFormat> formats = margin_formats(layout, kInitAbsmax);
  const std::vector<Case> cs = cases(layout);
  const Sample s = adversarial(cs);
  std::int64_t nonzero = 0;
  for (const float u : s.u) {
    nonzero += u != 0 ? 1 : 0;
  }
  std::vector<std::int64_t> want;
  for (const Case& c : cs) {
    ASSERT_FALSE(c.table.empty()) << c.name;
    want.push_back(brute_erased(c.table, s.w, s.u));
    EXPECT_GT(want.back(), nonzero / 100) << c.name;  // the sample erases and applies plenty in every format
    EXPECT_LT(want.back(), nonzero - nonzero / 100) << c.name;
  }
  const Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> wv(s.w.data(), s.w.size()),
      uv(s.u.data(), s.u.size());
  for (const auto isa : {detail::BlockIsa::portable, detail::BlockIsa::avx2, detail::BlockIsa::avx512}) {
    if (!detail::block_isa_supported(isa)) {
      continue;
    }
    detail::force_block_isa(isa);
    const ReferenceHistograms h = reference_histograms(Kokkos::DefaultHostExecutionSpace(), RatioHistogramLayout{},
                                                       layout, formats, s.w.data(), s.u.data(), s.w.size());
    for (std::size_t f = 0; f < cs.size(); ++f) {
      const std::string where = std::string("ISA ") + detail::block_isa_name(isa) + ", " + cs[f].name;
      ASSERT_EQ(margin_block_of(layout, formats, cs[f].spec), static_cast<int>(f)) << where;
      EXPECT_EQ(margin_erased_at_unit_scale(layout, h.margin, f), want[f]) << where;
      EXPECT_EQ(project_erasure(cs[f].spec, wv, uv).erased, want[f]) << where;
    }
  }
  detail::force_block_isa(detail::best_block_isa());
}

// Formats the histogram did not record with the same rounding keep their explicit pass.
TEST(MarginReadout, OnlyTheSameRoundingIsReadOut) {
  const MarginLayout layout = default_margin_layout();
  const std::vector<MarginFormat> formats = margin_formats(layout, kInitAbsmax);
  const float scale = int_scale_for_absmax(8, kInitAbsmax);
  EXPECT_EQ(margin_block_of(layout, formats, format_from_name("fp32")), -1);
  EXPECT_EQ(margin_block_of(layout, formats, int_format(8, scale * 2)), -1);  // another per-tensor scale
  EXPECT_GE(margin_block_of(layout, formats, int_format(8, scale)), 0);
  EXPECT_GE(margin_block_of(layout, formats, format_from_name("bf16")), 0);
  // intK of a tensor without a per-tensor scale is not recorded
  const std::vector<MarginFormat> unscaled = margin_formats(layout, 0.0);
  EXPECT_EQ(margin_block_of(layout, unscaled, int_format(8, scale)), -1);
  EXPECT_GE(margin_block_of(layout, unscaled, format_from_name("e4m3")), 0);
  // rows without kappa = -1 and 0 of their own, a layout of other formats, a histogram of the wrong size
  MarginLayout high = layout;
  high.rows = MarginRows{1, 2, 3, 4};
  EXPECT_EQ(margin_block_of(high, margin_formats(high, kInitAbsmax), format_from_name("bf16")), -1);
  EXPECT_EQ(margin_block_of(MarginLayout{}, {}, format_from_name("bf16")), -1);
  const std::vector<std::int64_t> short_counts(layout.bins() - 1, 0);
  EXPECT_THROW((void)margin_erased_at_unit_scale(layout, short_counts, 0), std::invalid_argument);
  const std::vector<std::int64_t> counts(layout.bins(), 0);
  EXPECT_THROW((void)margin_erased_at_unit_scale(layout, counts, layout.formats.size()), std::invalid_argument);
}

}  // namespace
