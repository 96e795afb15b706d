// trace.h5: a hand-built trace survives write + read field by field; bad files are rejected with their name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <system_error>

#include <boost/multiprecision/cpp_int.hpp>

#include "sim/trace/ratio_histogram.hpp"
#include "sim/trace/trace.hpp"
#include "trace_compare.hpp"

namespace {

using namespace wbaudit::sim;
namespace fs = std::filesystem;

// A file of this process's scratch directory, which is removed when the test binary exits.
fs::path scratch(const std::string& name) {
  struct Scratch {
    fs::path dir = fs::temp_directory_path() / ("wbaudit_trace_test_" + std::to_string(::getpid()));
    Scratch() { fs::create_directories(dir); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  };
  static const Scratch scratch_dir;
  return scratch_dir.dir / name;
}

Trace sample_trace(const std::string& mode) {
  Trace t;
  t.mode = mode;
  t.format = mode == "target" ? "e4m3" : "fp32";
  t.policy = "nearest";
  t.seed = 0xFFFFFFFF12345ull;
  t.steps = 1000;
  t.config_json = R"({"mode":")" + mode + R"(","schema":"wbaudit.cell/1","ünï":"cödé"})";
  t.recorded_steps = {0, 1, 10, 999};
  t.loss = {1.5, 0.25, 1e-300, std::numeric_limits<double>::infinity()};
  t.learning_rate = {1e-3, 1e-3, 5e-4, 0.0};
  t.histogram.bins = 8;
  t.histogram.d_min = -2;
  t.histogram.bin_width = 0.5;
  for (std::uint32_t id : {0u, 1u}) {
    GroupTrace g;
    g.name = id == 0 ? "layer1.weight" : "layer1.bias";
    g.tensor_id = id;
    g.size = 100 + id;
    g.nonzero = {100, 99, 0, 7};
    if (mode == "target") {
      g.erased = {1, 2, 0, 7};
      g.saturated = {0, 1, 0, 0};
      g.applied = {99, 97, 0, 0};
      g.erased_fraction = {0.01, 2.0 / 99, std::numeric_limits<double>::quiet_NaN(), 1.0};
    } else {
      g.zero_weight = {0, 1, 0, 2};
      for (int i = 0; i < 32; ++i) {
        g.ratio_histogram.push_back(i * 3 + id);
      }
      g.projected["e4m3"] = ProjectedSeries{{5, 6, 0, 1}, {0.05, 6.0 / 99, std::nan(""), 1.0 / 7}, {}};
      // Per-policy expected projections (optional; traces without them read back with none).
      g.projected["e4m3"].expected["stochastic"] = {{7.25, 6.5, 0, 1.75}, {0.0725, 6.5 / 99, std::nan(""), 0.25}};
      g.projected["e4m3"].expected["deadzone-sr-r8"] = {{3, 2.5, 0, 1}, {0.03, 2.5 / 99, std::nan(""), 1.0 / 7}};
      g.projected["bf16"] = ProjectedSeries{{0, 0, 0, 0}, {0.0, 0.0, std::nan(""), 0.0}, {}};
      // schema 3's margin histogram: 4 steps of the default layout's counters
      t.margin = default_margin_layout();
      for (std::size_t k = 0; k < 4 * t.margin.bins(); ++k)
        g.margin.push_back(static_cast<std::int64_t>((k * 7 + id) % 11));
      g.init_absmax = 0.5 + id;
    }
    t.groups.push_back(g);
  }
  return t;
}

void expect_equal(const Trace& a, const Trace& b) {
  wbaudit::test::expect_same_trace(a, b);
}

TEST(Trace, RoundTripTargetAndReference) {
  for (const std::string mode : {"target", "reference"}) {
    const Trace t = sample_trace(mode);
    const fs::path path = scratch(mode + ".h5");
    fs::remove(path);
    write_trace(path, t);
    expect_equal(t, read_trace(path));
    // Atomic write: no temporary left behind, and rewriting replaces the file.
    for (const auto& entry : fs::directory_iterator(path.parent_path())) {
      EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
    }
    Trace changed = t;
    changed.steps = 7;
    write_trace(path, changed);
    EXPECT_EQ(read_trace(path).steps, 7);
  }
}

TEST(Trace, GroupLookup) {
  const Trace t = sample_trace("target");
  EXPECT_EQ(t.group("layer1.bias").tensor_id, 1u);
  try {
    t.group("layer9.weight");
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("layer9.weight"), std::string::npos);
  }
}

TEST(Trace, BadFilesNameTheFile) {
  const fs::path text = scratch("not_hdf5.h5");
  std::ofstream(text) << "hello";
  const auto message = [](const fs::path& p) {
    try {
      read_trace(p);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(text).find(text.string()), std::string::npos);
  EXPECT_NE(message(scratch("missing.h5")).find("missing.h5"), std::string::npos);
  // Writing into a missing directory fails with the file named and leaves nothing behind.
  const fs::path nowhere = scratch("no_such_dir") / "trace.h5";
  try {
    write_trace(nowhere, sample_trace("target"));
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(nowhere.parent_path()));
}

}  // namespace

// The d histogram's bin from the bits (ratio_bin) against the rule in double through std::log2 (what every trace so far
// was written with) for every one of the 2^23 fractions of u, with u normal and with u subnormal (all 2^23 of them),
// at exponent gaps that reach both clamped ends; then, near each threshold 2^(j/8), against exact integer arithmetic:
// log2(1 + f 2^-23) > j/8  <=>  (2^23 + f)^8 > 2^(184 + j).
TEST(RatioHistogram, BinFromBitsEqualsLog2RuleForEveryFraction) {
  const RatioHistogramLayout layout;
  const auto by_log2 = [&](float w, float u) {
    return ratio_bin_by_log2(layout.d_min, layout.bin_width, layout.bins, w, u);
  };
  const auto fast = [&](float w, float u) { return ratio_bin(layout.d_min, layout.bin_width, layout.bins, w, u); };
  std::int64_t mismatches = 0;
  for (std::uint32_t f = 0; f < (1u << 23); ++f) {
    const float u_normal = std::bit_cast<float>((127u << 23) | f);  // 1 + f 2^-23
    const float u_sub = std::bit_cast<float>(std::max(f, 1u));      // subnormal
    for (float w : {1.0f, -3.0f, 0x1p-20f, 0x1p+20f, 0x1p-149f, 0x1p+127f}) {
      const float us[] = {u_normal, -u_normal, std::ldexp(u_normal, -30), std::ldexp(u_normal, 40), u_sub};
      for (float u : us) {
        mismatches += fast(w, u) != by_log2(w, u) ? 1 : 0;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  // The clamped ends are reached (the loop above covers them): d = 0 - 40 -> bin 0; d = 127 + 149 -> the last bin.
  EXPECT_EQ(fast(1.0f, 0x1p+40f), 0);
  EXPECT_EQ(fast(0x1p+127f, 0x1p-149f), layout.bins - 1);
  // Exact thresholds: with w = 1 (e_w = 0) and u = 1 + f 2^-23, bin = 8 * 16 - ceil(8 log2 u).
  using boost::multiprecision::cpp_int;
  const std::uint32_t near[] = {759234, 1587185, 2490071, 3474676, 4548395, 5719293, 6996167};
  for (int j = 1; j <= 7; ++j) {
    const cpp_int limit = cpp_int(1) << (184 + j);
    for (std::int64_t d = -300; d <= 300; ++d) {
      const auto f = static_cast<std::uint32_t>(static_cast<std::int64_t>(near[j - 1]) + d);
      cpp_int m8 = cpp_int((1u << 23) + f);
      m8 = m8 * m8;
      m8 = m8 * m8;
      m8 = m8 * m8;
      int ceil8 = f != 0 ? 1 : 0;  // ceil(8 lambda) = 1 + #{k in 1..7 : lambda > k / 8} for lambda > 0
      for (int k = 1; k <= 7; ++k) ceil8 += m8 > (cpp_int(1) << (184 + k)) ? 1 : 0;
      const float u = std::bit_cast<float>((127u << 23) | f);
      ASSERT_EQ(fast(1.0f, u), 128 - ceil8) << "f = " << f;
      ASSERT_EQ((m8 > limit), f >= near[j - 1]) << "threshold " << j << " at f = " << f;
    }
  }
  // Zero, non-finite and zero-weight cases keep their codes.
  EXPECT_EQ(fast(1.0f, 0.0f), kRatioBinZeroProposal);
  EXPECT_EQ(fast(0.0f, 1.0f), kRatioBinZeroWeight);
  EXPECT_EQ(fast(std::numeric_limits<float>::infinity(), 1.0f), kRatioBinNonFinite);
  EXPECT_EQ(fast(1.0f, std::numeric_limits<float>::quiet_NaN()), kRatioBinNonFinite);
}
