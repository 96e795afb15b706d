// The analytic grid read from a margin histogram (schema 3; forecast/joint_grid.hpp, sim/trace/margin_histogram.hpp)
// against a brute-force projection: synthetic weights spanning zero, subnormals, normals, binade edges and saturation
// of every format, proposals around the erasure threshold including exact ties, and q_F(q_F(w) + fl(s u)) == q_F(w)
// counted per coordinate with sim/precision's exact scalar rounding (the grid never calls it). Powers of two are
// exact for every format (intK included); other scales are within the documented interpolation error. Also: the
// step-wise reader gives the in-memory values, scales outside the record are refused by name.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "forecast/error.hpp"
#include "forecast/joint_grid.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/trace/reference_histograms.hpp"
#include "sim/trace/trace_reader.hpp"

namespace wbaudit::forecast {
namespace {

constexpr double kInitAbsmax = 0.61;

struct Sample {
  std::vector<float> w, u;
};

// |w| log-uniform over [2^-40, 2^18] (every format's subnormal and normal range and beyond max finite), 3% zeros, 3%
// on a power of two, 2% on intK levels; u = +-(|w| + 2^-30) 2^N(-5, 4), 3% exact powers of two (ties at powers of
// two), 2% exact multiples of int4's half scale (its ties), 1% u == 0.
Sample synthetic(std::uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> normal(0, 1);
  const double int4 = sim::int_scale_for_absmax(4, kInitAbsmax);
  Sample s;
  for (int i = 0; i < n; ++i) {
    double w = std::exp2(unit(rng) * 58 - 40);
    const double r = unit(rng);
    if (r < 0.03)
      w = 0;
    else if (r < 0.06)
      w = std::exp2(std::round(std::log2(w)));
    else if (r < 0.08)
      w = int4 * std::round(unit(rng) * 14 - 7);
    double u = (std::fabs(w) + 0x1p-30) * std::exp2(normal(rng) * 4 - 5);
    const double v = unit(rng);
    if (v < 0.03)
      u = std::exp2(std::round(std::log2(u)));
    else if (v < 0.05)
      u = int4 / 2 * std::exp2(std::round(normal(rng) * 2));
    else if (v < 0.06)
      u = 0;
    s.w.push_back(static_cast<float>(unit(rng) < 0.5 ? -w : w));
    s.u.push_back(static_cast<float>(unit(rng) < 0.5 ? -u : u));
  }
  return s;
}

// One group holding the sample as `steps` recorded steps (the sample's consecutive slices), its margin histogram of
// `layout`'s formats.
sim::Trace trace_of(const Sample& s, int steps, const sim::MarginLayout& layout = sim::default_margin_layout()) {
  sim::Trace t;
  t.schema = sim::kTraceSchema;
  t.mode = "reference";
  t.format = "fp32";
  t.policy = "nearest";
  t.margin = layout;
  sim::GroupTrace g;
  g.name = "w";
  g.size = static_cast<std::int64_t>(s.w.size()) / steps;
  g.init_absmax = kInitAbsmax;
  const auto formats = sim::margin_formats(t.margin, kInitAbsmax);
  for (int k = 0; k < steps; ++k) {
    const std::size_t lo = static_cast<std::size_t>(k) * static_cast<std::size_t>(g.size);
    const auto h = sim::reference_histograms(Kokkos::DefaultHostExecutionSpace(), t.histogram, t.margin, formats,
                                             s.w.data() + lo, s.u.data() + lo, static_cast<std::size_t>(g.size));
    g.nonzero.push_back(h.nonzero);
    g.zero_weight.push_back(h.zero_weight);
    g.ratio_histogram.insert(g.ratio_histogram.end(), h.ratio.begin(), h.ratio.end());
    g.margin.insert(g.margin.end(), h.margin.begin(), h.margin.end());
    t.recorded_steps.push_back(k);
    t.loss.push_back(0);
    t.learning_rate.push_back(1e-3);
  }
  t.groups.push_back(std::move(g));
  return t;
}

double brute_force(const sim::FormatSpec& f, const Sample& s, std::size_t lo, std::size_t n, double scale) {
  const sim::FormatParams p = sim::format_params(f);
  double erased = 0, nonzero = 0;
  for (std::size_t i = lo; i < lo + n; ++i) {
    if (s.u[i] == 0.0f) continue;
    nonzero += 1;
    const auto wq = static_cast<float>(sim::round_nearest(p, static_cast<double>(s.w[i])));
    const auto us = static_cast<float>(scale * static_cast<double>(s.u[i]));
    erased += sim::writeback_value(p, sim::WritebackPolicy{}, sim::RngKey{}, 0, wq, us).value == wq;
  }
  return erased / nonzero;
}

TEST(MarginGrid, PowersOfTwoAreExactAndOtherScalesWithinTheInterpolationError) {
  const int steps = 2;
  const Sample s = synthetic(20261206, 2 * 150000);
  const sim::Trace t = trace_of(s, steps);
  const std::vector<std::string> formats = {"bf16", "fp16", "e5m2", "e4m3", "e3m2", "e2m3", "e2m1",
                                            "int2", "int3", "int4", "int5", "int6", "int7", "int8"};
  const std::vector<double> scales = {1.0 / 32, 0.25, 0.3, 0.5, 0.7, 1.0, 1.3, 1.7, 2.0, 3.0, 4.0, 16, 31, 1 << 19};
  const FormatGrid grid = format_grid(t, "w", formats, scales);
  for (std::size_t f = 0; f < formats.size(); ++f) {
    const sim::FormatSpec spec = grid_format(t.groups[0], formats[f]);
    std::printf("  %-5s", formats[f].c_str());
    for (std::size_t k = 0; k < scales.size(); ++k) {
      double worst = 0;
      for (int step = 0; step < steps; ++step) {
        const auto n = static_cast<std::size_t>(t.groups[0].size);
        const double exact = brute_force(spec, s, static_cast<std::size_t>(step) * n, n, scales[k]);
        const double a = grid.at(f, k, static_cast<std::size_t>(step));
        const std::string where = formats[f] + " s " + std::to_string(scales[k]) + " step " + std::to_string(step);
        int e = 0;
        if (std::frexp(scales[k], &e) == 0.5) {
          EXPECT_EQ(a, exact) << where;
        } else {
          EXPECT_LE(std::abs(a - exact), 5e-4) << where << ": analytic " << a << " exact " << exact;
        }
        worst = std::max(worst, std::abs(a - exact));
      }
      std::printf(" %8.1e", worst);
    }
    std::printf("\n");
  }
}

// A reference that records the margin histogram of some formats only (margin_layout_for): the layout keeps the
// default's order whatever the order asked, each recorded format's blocks are the full layout's, its grid is the
// brute-force count at powers of two, and a format it did not record is refused by name; bad lists are refused.
TEST(MarginGrid, ALayoutOfSomeFormatsGridsThemAndRefusesTheOthers) {
  const sim::MarginLayout some = sim::margin_layout_for({"int4", "e4m3", "bf16"});
  EXPECT_EQ(some.formats, (std::vector<std::string>{"bf16", "e4m3", "int4"}));
  EXPECT_EQ(some.rows, sim::default_margin_layout().rows);
  const Sample s = synthetic(20261207, 60000);
  const sim::Trace full = trace_of(s, 1), t = trace_of(s, 1, some);
  ASSERT_EQ(t.groups[0].margin.size(), some.bins());
  const auto& names = full.margin.formats;
  const auto block = static_cast<std::size_t>(some.rows.block()),
             moments = static_cast<std::size_t>(some.rows.moments());
  for (std::size_t f = 0; f < some.formats.size(); ++f) {
    const auto g = static_cast<std::size_t>(std::find(names.begin(), names.end(), some.formats[f]) - names.begin());
    for (std::size_t b = 0; b < block; ++b) {
      ASSERT_EQ(t.groups[0].margin[f * block + b], full.groups[0].margin[g * block + b]) << some.formats[f] << " " << b;
    }
    for (std::size_t b = 0; b < moments; ++b) {
      ASSERT_EQ(t.groups[0].margin[some.moments_begin() + f * moments + b],
                full.groups[0].margin[full.margin.moments_begin() + g * moments + b])
          << some.formats[f] << " moment " << b;
    }
  }
  const std::vector<std::string> formats = {"e4m3", "int4", "bf16"};
  const std::vector<double> scales = {0.25, 1.0, 4.0};
  const FormatGrid grid = format_grid(t, "w", formats, scales);
  for (std::size_t f = 0; f < formats.size(); ++f) {
    for (std::size_t k = 0; k < scales.size(); ++k) {
      const double exact = brute_force(grid_format(t.groups[0], formats[f]), s, 0, s.w.size(), scales[k]);
      EXPECT_EQ(grid.at(f, k, 0), exact) << formats[f] << " s " << scales[k];
    }
  }
  try {
    const std::vector<std::string> with_fp16 = {"e4m3", "fp16"};
    const std::vector<double> one = {1.0};
    (void)format_grid(t, "w", with_fp16, one);
    ADD_FAILURE() << "fp16 is not in the margin histogram";
  } catch (const ForecastError& e) {
    EXPECT_NE(std::string(e.what()).find("\"fp16\" is not in this trace's margin histogram (bf16, e4m3, int4)"),
              std::string::npos)
        << e.what();
  }
  const auto refused = [](const std::vector<std::string>& names, const std::string& part) {
    try {
      (void)sim::margin_layout_for(names);
      ADD_FAILURE() << "accepted " << part;
    } catch (const sim::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused({}, "no formats");
  refused({"e4m3", "fp32"}, "\"fp32\" (entry 1) is not one it records");
  refused({"mxfp8_e4m3"}, "\"mxfp8_e4m3\" (entry 0) is not one it records");
  refused({"int4", "e4m3", "int4"}, "\"int4\" listed twice (entry 2)");
}

// Adam's first step: every |u| the learning rate, a point mass inside one sub-bin of m (3e-3 = 1.536 2^-9: sub-bin
// 17, [1.53125, 1.5625)), which the threshold of s = 1.3 (m < 2 / 1.3 = 1.53846) splits. Brute force: B =
// erased(1) - erased(2) proposals lie in the boundary row, all below the threshold. Schema 4's moments place the mass:
// the grid is the brute-force count. The same record as a schema-3 trace on disk (no moments) is still read and
// gridded by the uniform rule: erased(2) + B (tau - 1.53125) 32.
TEST(MarginGrid, APointMassIsPlacedByTheMomentsAndASchema3TraceIsGriddedUniformly) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0, 1);
  Sample s;
  for (int i = 0; i < 40000; ++i) {
    s.w.push_back(static_cast<float>((unit(rng) < 0.5 ? -1 : 1) * std::exp2(unit(rng) * 12 - 10)));
    s.u.push_back((unit(rng) < 0.5 ? -3e-3f : 3e-3f) * std::exp2f(static_cast<float>(std::floor(unit(rng) * 8)) - 4));
  }
  const sim::Trace t = trace_of(s, 1);
  sim::Trace t3 = t;  // schema 3: the counters only
  t3.schema = sim::kTraceSchemaV3;
  t3.margin.moments = false;
  t3.groups[0].margin.resize(t3.margin.bins());
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("wbaudit_margin_v3_" + std::to_string(::getpid()) + ".h5");
  sim::write_trace(path, t3);
  const sim::TraceReader reader(path);
  EXPECT_FALSE(reader.header().margin.moments);
  const double tau = 2 / 1.3, share = (tau - 1.53125) * 32;
  for (const std::string f : {"bf16", "e5m2", "e4m3"}) {
    const sim::FormatSpec spec = grid_format(t.groups[0], f);
    const double n = static_cast<double>(s.w.size());
    const double e1 = brute_force(spec, s, 0, s.w.size(), 1.0), e2 = brute_force(spec, s, 0, s.w.size(), 2.0);
    const double b = (e1 - e2) * n, exact = brute_force(spec, s, 0, s.w.size(), 1.3);
    ASSERT_GT(b, 1000) << f;  // the boundary row holds mass
    EXPECT_EQ(exact, e1) << f;
    const std::vector<std::string> formats = {f};
    const std::vector<double> scales = {1.3};
    EXPECT_NEAR(format_grid(t, "w", formats, scales).at(0, 0, 0), exact, 1e-12) << f;
    EXPECT_NEAR(format_grid(reader, "w", formats, scales).at(0, 0, 0), (e2 * n + b * share) / n, 1e-12) << f;
  }
  std::filesystem::remove(path);
}

TEST(MarginGrid, TheStepwiseReaderGivesTheInMemoryValuesAndScalesOutsideAreRefused) {
  const sim::Trace t = trace_of(synthetic(7, 3 * 20000), 3);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("wbaudit_margin_grid_" + std::to_string(::getpid()) + ".h5");
  sim::write_trace(path, t);
  const std::vector<std::string> formats = {"e4m3", "int4", "bf16"};
  const std::vector<double> scales = {0.3, 1.0, 2.0};
  const FormatGrid a = format_grid(t, "w", formats, scales);
  const FormatGrid b = format_grid(sim::TraceReader(path), "w", formats, scales);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.steps, b.steps);
  for (const double bad : {0.01, 40.0, 0x1p21}) {
    try {
      (void)format_grid(t, "w", formats, std::vector<double>{bad});
      ADD_FAILURE() << "scale " << bad << " accepted";
    } catch (const ForecastError& e) {
      EXPECT_NE(std::string(e.what()).find("outside what this trace's margin histogram resolves"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW((void)format_grid(t, "w", std::vector<std::string>{"fp32"}, scales), ForecastError);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace wbaudit::forecast
