// The vectorized write-back loops against independent references, coordinate by coordinate:
// - the block Philox generator against Random123's Philox4x32-10 called directly;
// - nearest write-back against brute-force rounding of the exact sum (sorted tables of every value of each format
//   of 16 bits or fewer; fp32 against the hardware's correctly rounded fp32 addition);
// - every policy against the exact scalar path writeback_value (itself checked against brute force and exact
//   probabilities in test_rounding.cpp and test_stochastic.cpp), values and every event count;
// on adversarial inputs: exact and near ties (also ties that only the low part of w + u breaks), binade edges,
// subnormals, zero sums, saturation edges, fp32 overflow of the sum, huge exponent gaps, and NaN/inf.
#include <gtest/gtest.h>

#include <Random123/philox.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_blocks.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace {

// Runs f with every implementation of the block loops this CPU supports: AVX-512, AVX2, portable.
template <class F>
void for_each_implementation(F&& f) {
  for (const auto isa : {detail::BlockIsa::avx512, detail::BlockIsa::avx2, detail::BlockIsa::portable}) {
    if (!detail::block_isa_supported(isa)) {
      std::printf("%s loops: not supported by this CPU\n", detail::block_isa_name(isa));
      continue;
    }
    ASSERT_EQ(detail::force_block_isa(isa), isa);
    SCOPED_TRACE(std::string(detail::block_isa_name(isa)) + " loops");
    std::printf("%s loops\n", detail::block_isa_name(isa));
    f();
  }
  detail::force_block_isa(detail::best_block_isa());
}

TEST(WritebackBlocks, PhiloxWordsEqualRandom123) {
  for_each_implementation([&] {
    SplitMix rng{5};
    for (int trial = 0; trial < 400; ++trial) {
      const RngKey key{rng.next(), rng.next() & 0xffffffffu, static_cast<std::uint32_t>(rng.next())};
      // offsets anywhere, including blocks that straddle the 2^32 group boundary (counter word 1 carries)
      std::uint64_t first =
          trial % 4 == 0 ? (std::uint64_t{1} << 34) - rng.below(600) : rng.below(std::uint64_t{1} << 47);
      const auto len = static_cast<std::int64_t>(1 + rng.below(detail::kWritebackBlock));
      std::uint32_t words[detail::kWritebackBlock];
      detail::philox_first_words(key, first, len, words);
      for (std::int64_t k = 0; k < len; ++k) {
        const std::uint64_t c = first + static_cast<std::uint64_t>(k);
        r123::Philox4x32 philox;
        const r123::Philox4x32::ctr_type ctr = {{static_cast<std::uint32_t>(c >> 2),
                                                 static_cast<std::uint32_t>(c >> 34) & 0x3fffu,
                                                 static_cast<std::uint32_t>(key.step), key.tensor_id}};
        const r123::Philox4x32::key_type pk = {
            {static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32)}};
        ASSERT_EQ(words[k], philox(ctr, pk).v[c & 3u]) << "coordinate " << c;
        PhiloxStream stream(key, c);
        ASSERT_EQ(words[k], stream.next()) << "coordinate " << c;
      }
    }
  });
}

// philox-packed: coordinate c's word is r bits of Random123's word j = floor(c / m) (m = floor(32 / r)), computed here
// from Random123 directly: bits (c mod m) * r upward, in the word's top r bits; the block words and PhiloxStream agree.
TEST(WritebackBlocks, PackedWordsAreTheChunksOfRandom123Words) {
  for_each_implementation([&] {
    SplitMix rng{9};
    std::int64_t checked = 0;
    for (int trial = 0; trial < 300; ++trial) {
      const RngKey key{rng.next(), rng.next() & 0xffffffffu, static_cast<std::uint32_t>(rng.next())};
      const int r = std::array{1, 2, 3, 4, 5, 7, 8, 11, 16}[trial % 9];
      const WritebackPolicy pol = make_policy(trial % 2 ? "stochastic" : "deadzone-sr", r, "philox-packed");
      const std::uint64_t m = 32u / static_cast<std::uint64_t>(r);
      const std::uint64_t first =
          trial % 5 == 0 ? (std::uint64_t{m} << 34) - rng.below(3000) : rng.below(std::uint64_t{1} << 46);
      const auto len = static_cast<std::int64_t>(1 + rng.below(detail::kWritebackBlock));
      alignas(64) std::uint32_t scratch[detail::kPhiloxScratch];
      const std::uint32_t* words = detail::sr_first_words_in(key, pol, first, len, scratch);
      const r123::Philox4x32::key_type pk = {
          {static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32)}};
      for (std::int64_t k = 0; k < len; ++k) {
        const std::uint64_t c = first + static_cast<std::uint64_t>(k), j = c / m;
        r123::Philox4x32 philox;
        const r123::Philox4x32::ctr_type ctr = {{static_cast<std::uint32_t>(j >> 2),
                                                 static_cast<std::uint32_t>(j >> 34) & 0x3fffu,
                                                 static_cast<std::uint32_t>(key.step), key.tensor_id}};
        const std::uint32_t word = philox(ctr, pk).v[j & 3u];
        const std::uint32_t chunk = (word >> ((c % m) * static_cast<std::uint64_t>(r))) & ((1u << r) - 1u);
        ASSERT_EQ(words[k], chunk << (32 - r)) << "r = " << r << ", coordinate " << c;
        PhiloxStream stream = sr_stream_of(pol, key, c);
        ASSERT_EQ(words[k], stream.next()) << "r = " << r << ", coordinate " << c;
        ++checked;
      }
    }
    std::printf("checked %lld packed words\n", static_cast<long long>(checked));
  });
}

// The packed stream's draws behave as independent uniform r-bit draws: over 2^20 coordinates, r-bit SR of values a
// fraction D / 2^r above a grid point rounds up with frequency D / 2^r, and two coordinates sharing a word draw the
// same chunk with frequency 2^-r (binomial limits of 6 standard deviations; a shared or shifted chunk fails both).
TEST(WritebackBlocks, PackedDrawsAreUniformAndDistinctWithinAWord) {
  const FormatSpec fmt = format_from_name("bf16");
  for (const int r : {4, 8, 16}) {
    SCOPED_TRACE("r = " + std::to_string(r));
    const WritebackPolicy pol = make_policy("stochastic", r, "philox-packed");
    const std::int64_t n = std::int64_t{1} << 20;
    const RngKey key{2024, 9, 4};
    alignas(64) std::uint32_t scratch[detail::kPhiloxScratch];
    std::int64_t same = 0, pairs = 0;
    for (std::int64_t first = 0; first < n; first += detail::kWritebackBlock) {
      const std::uint32_t* words =
          detail::sr_first_words_in(key, pol, static_cast<std::uint64_t>(first), detail::kWritebackBlock, scratch);
      for (std::int64_t k = 0; k + 1 < detail::kWritebackBlock; k += 2) {
        same += words[k] == words[k + 1];
        ++pairs;
      }
    }
    const double p_same = std::ldexp(1.0, -r);
    EXPECT_NEAR(static_cast<double>(same) / static_cast<double>(pairs), p_same,
                6 * std::sqrt(p_same * (1 - p_same) / static_cast<double>(pairs)));
    // w = 1 (a bf16 value, ulp 2^-7), u = 3/8 ulp: rounds up with probability floor(3/8 * 2^r) / 2^r = 3/8
    Kokkos::View<float*> w("w", n), u("u", n);
    Kokkos::deep_copy(w, 1.0f);
    Kokkos::deep_copy(u, 0x1.8p-9f);
    writeback(fmt, pol, key, w, Kokkos::View<const float*>(u));
    auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
    std::int64_t up = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      up += hw(i) != 1.0f;
    }
    EXPECT_NEAR(static_cast<double>(up) / static_cast<double>(n), 0.375, 6 * std::sqrt(0.375 * 0.625 / n));
  }
}

struct Case {
  FormatSpec fmt;
  wbaudit::test::RefFormat ref;
  bool table = true;  // a brute-force table exists (<= 16 bits)
};

std::vector<Case> all_formats() {
  std::vector<Case> cases;
  for (const auto& ref : wbaudit::test::ref_float_formats()) {
    cases.push_back({format_from_name(ref.name), ref, ref.name != "fp32"});
  }
  // intK: a simple scale, a scale from int_scale_for_absmax (odd factor), and extreme scales (the fp64 lanes)
  for (int k = 2; k <= 8; ++k) {
    for (float scale : {0.375f, int_scale_for_absmax(k, 0.7), 0x1.4p-120f, 0x1.8p100f}) {
      cases.push_back({int_format(k, scale), wbaudit::test::ref_int_format(k, scale), true});
    }
  }
  return cases;
}

float next_float(float x, int steps) {
  for (int i = 0; i < std::abs(steps); ++i) {
    x = std::nextafter(x, steps > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
  }
  return x;
}

// Weights: format values (edges and random ones); proposals: ties, near ties, tiny, huge, zero sums, ...
void make_inputs(const Case& c, const std::vector<wbaudit::test::ValueCode>& table, int n, std::uint64_t seed,
                 std::vector<float>& w, std::vector<float>& u) {
  SplitMix rng{seed};
  const double max = c.fmt.max_finite;
  auto random_value = [&]() -> float {
    if (!c.table) {  // fp32: random bit patterns of finite floats
      std::uint32_t b;
      do {
        b = static_cast<std::uint32_t>(rng.next());
      } while ((b & 0x7f800000u) == 0x7f800000u);
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    switch (rng.below(8)) {
      case 0:
        return 0.0f;
      case 1:
        return static_cast<float>(rng.below(2) ? max : -max);
      case 2:
        return static_cast<float>((rng.below(2) ? 1 : -1) * c.fmt.min_subnormal);
      case 3:
        return static_cast<float>((rng.below(2) ? 1 : -1) * c.fmt.min_normal);
      default:
        return static_cast<float>(table[rng.below(table.size())].value);
    }
  };
  auto gap_up = [&](float v) -> double {
    if (!c.table) {
      return static_cast<double>(next_float(v, 1)) - v;
    }
    return wbaudit::test::ref_neighbours(table, v).second - v;
  };
  auto gap_down = [&](float v) -> double {
    if (!c.table) {
      return v - static_cast<double>(next_float(v, -1));
    }
    return v - wbaudit::test::ref_neighbours(table, v).first;
  };
  for (int i = 0; i < n; ++i) {
    const float wi = random_value();
    double ui = 0;
    const double sign = rng.below(2) ? 1.0 : -1.0;
    const double g = sign > 0 ? gap_up(wi) : gap_down(wi);
    const double gg = std::isfinite(g) ? g : max;
    switch (rng.below(14)) {
      case 0:
        ui = 0;
        break;
      case 1:  // exact tie
        ui = sign * gg / 2;
        break;
      case 2: {  // a tie in fp32 broken by the low part of the exact sum
        const double tiny = std::ldexp(gg, -30 - static_cast<int>(rng.below(20)));
        ui = sign * (gg / 2 + (rng.below(2) ? tiny : -tiny));
        break;
      }
      case 3:  // one fp32 step around the tie
        ui = static_cast<double>(next_float(static_cast<float>(sign * gg / 2), rng.below(2) ? 1 : -1));
        break;
      case 4:  // tiny relative to w (the sum is not exact in fp32; huge gaps: not in double either)
        ui = sign *
             std::ldexp(std::max(std::fabs(static_cast<double>(wi)), 1e-30), -20 - static_cast<int>(rng.below(60)));
        break;
      case 5:  // zero sum and just off it
        ui = -static_cast<double>(wi) * (rng.below(2) ? 1.0 : 1.0 + std::ldexp(1.0, -20));
        break;
      case 6:  // saturation edges: to max and just beyond
        ui = max - std::fabs(static_cast<double>(wi)) + (rng.below(2) ? 0.0 : std::ldexp(max, -30));
        ui *= std::signbit(wi) ? -1 : 1;
        break;
      case 7:  // huge (saturates; for bf16/fp32 the fp32 sum may overflow)
        ui = sign * std::ldexp(max, -static_cast<int>(rng.below(3)));
        break;
      case 8:  // a multiple of the gap plus a random fraction
        ui = sign * gg * (static_cast<double>(rng.below(5)) + rng.uniform());
        break;
      case 9:  // toward zero across a binade edge
        ui = -static_cast<double>(wi) * std::ldexp(1.0, -1 - static_cast<int>(rng.below(4)));
        break;
      default:  // random over many scales
        ui = sign * gg * std::ldexp(rng.uniform(), 4 - static_cast<int>(rng.below(40)));
        break;
    }
    float uf = static_cast<float>(ui);
    if (!std::isfinite(uf)) {
      uf = sign > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
    }
    w.push_back(wi);
    u.push_back(uf);
  }
}

// A device view holding the values, and the values back from one.
Kokkos::View<float*> to_view(const std::vector<float>& v, const std::string& label) {
  Kokkos::View<float*> out(label, v.size());
  auto host = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < v.size(); ++i) {
    host(i) = v[i];
  }
  Kokkos::deep_copy(out, host);
  return out;
}
std::vector<float> from_view(const Kokkos::View<float*>& v) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v);
  return {host.data(), host.data() + host.extent(0)};
}

const WritebackPolicy kPolicies[] = {{Policy::nearest, 0},
                                     {Policy::stochastic, 0},
                                     {Policy::stochastic, 1},
                                     {Policy::stochastic, 8},
                                     {Policy::stochastic, 32},
                                     {Policy::deadzone_sr, 0},
                                     {Policy::deadzone_sr, 4},
                                     {Policy::stochastic, 8, SrStream::philox_packed},
                                     {Policy::stochastic, 16, SrStream::philox_packed},
                                     {Policy::deadzone_sr, 3, SrStream::philox_packed},
                                     {Policy::stochastic, 0, SrStream::philox_packed},
                                     {Policy::deadzone_sr, 0, SrStream::philox_packed}};

std::string describe(const FormatSpec& f, const WritebackPolicy& p) {
  return std::string(f.name) + " scale " + std::to_string(f.int_scale) + " " + policy_name(p.policy) +
         " r=" + std::to_string(p.sr_bits) + " " + sr_stream_name(p.stream);
}

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

}  // namespace

TEST(WritebackBlocks, EveryPolicyEqualsTheExactScalarPathAndNearestEqualsBruteForce) {
  for_each_implementation([&] {
    std::int64_t checked = 0;
    for (const Case& c : all_formats()) {
      const auto table = c.table ? wbaudit::test::ref_table(c.ref) : std::vector<wbaudit::test::ValueCode>{};
      std::vector<float> w, u;
      make_inputs(c, table, 6007, 11 + static_cast<std::uint64_t>(c.fmt.bits), w, u);
      const FormatParams p = format_params(c.fmt);
      const auto n = w.size();
      for (const auto& pol : kPolicies) {
        SCOPED_TRACE(describe(c.fmt, pol));
        const RngKey key{0x1234567890abcdefull, 77, 3};
        Kokkos::View<float*> wv = to_view(w, "w"), uv = to_view(u, "u");
        WritebackOptions opt;
        opt.first_coordinate = 5;  // blocks not aligned with the Philox groups
        const WritebackCounts got =
            writeback(Kokkos::DefaultExecutionSpace{}, c.fmt, pol, key, wv, Kokkos::View<const float*>(uv), opt);
        const std::vector<float> hw = from_view(wv);
        WritebackCounts want;
        for (std::size_t i = 0; i < n; ++i) {
          const WritebackOutcome o = writeback_value(p, pol, key, opt.first_coordinate + i, w[i], u[i]);
          ASSERT_EQ(bits_of(hw[i]), bits_of(o.value))
              << "coordinate " << i << ": w = " << w[i] << " (" << std::hexfloat << w[i] << "), u = " << u[i]
              << ", kernel " << hw[i] << ", exact " << o.value << std::defaultfloat;
          want.nonzero += u[i] != 0;
          want.erased += u[i] != 0 && o.value == w[i];
          want.applied += o.value != w[i];
          want.saturated += o.saturated;
          want.sr_applied += o.random;
          want.sr_truncated += o.truncated;
          if (pol.policy == Policy::nearest) {
            // brute force: the nearest format value (ties to even) of the exact sum, saturating
            double ref;
            if (c.table) {
              ref = wbaudit::test::ref_nearest_search(table, static_cast<double>(w[i]) + static_cast<double>(u[i]));
            } else {
              const float s = w[i] + u[i];  // the hardware's correctly rounded fp32 sum
              ref = std::isinf(s) || std::fabs(static_cast<double>(w[i]) + u[i]) > c.fmt.max_finite
                        ? std::copysign(c.fmt.max_finite, static_cast<double>(s))
                        : s;
            }
            ASSERT_EQ(static_cast<double>(hw[i]), ref)
                << "coordinate " << i << ": w = " << std::hexfloat << w[i] << ", u = " << u[i];
          }
          ++checked;
        }
        EXPECT_EQ(got, want);
      }
    }
    std::printf("checked %lld coordinate write-backs\n", static_cast<long long>(checked));
  });
}

TEST(WritebackBlocks, NonFiniteCoordinatesAreLeftUnchangedAndCounted) {
  for_each_implementation([&] {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (const Case& c : all_formats()) {
      const FormatParams p = format_params(c.fmt);
      for (const auto& pol : kPolicies) {
        SCOPED_TRACE(describe(c.fmt, pol));
        const std::size_t n = 700;
        std::vector<float> w(n), u(n);
        SplitMix rng{3};
        for (std::size_t i = 0; i < n; ++i) {
          w[i] = static_cast<float>(round_nearest(p, (rng.uniform() - 0.5) * c.fmt.max_finite));
          u[i] = static_cast<float>((rng.uniform() - 0.5) * c.fmt.max_finite * 0x1p-6);
        }
        w[1] = nan;
        w[300] = -inf;
        w[301] = inf;
        u[7] = inf;
        u[255] = -inf;
        u[256] = nan;
        u[301] = -inf;
        u[699] = nan;
        Kokkos::View<float*> wv = to_view(w, "w"), uv = to_view(u, "u");
        const RngKey key{9, 4, 2};
        try {
          writeback(c.fmt, pol, key, wv, uv);
          FAIL() << "no throw";
        } catch (const NonFiniteError& e) {
          EXPECT_NE(std::string(e.what()).find("7 non-finite"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("first at coordinate 1"), std::string::npos) << e.what();
        }
        const std::vector<float> hw = from_view(wv);
        for (std::size_t i = 0; i < n; ++i) {
          const bool bad = !std::isfinite(w[i]) || !std::isfinite(u[i]);
          if (bad) {
            ASSERT_EQ(bits_of(hw[i]), bits_of(w[i])) << "coordinate " << i << " (non-finite input) was changed";
          } else {
            ASSERT_EQ(bits_of(hw[i]), bits_of(writeback_value(p, pol, key, i, w[i], u[i]).value)) << "coordinate " << i;
          }
        }
      }
    }
  });
}

TEST(WritebackBlocks, ProjectedErasureEqualsAPlainRecount) {
  for_each_implementation([&] {
    for (const Case& c : all_formats()) {
      if (!c.table) {
        continue;
      }
      SCOPED_TRACE(describe(c.fmt, WritebackPolicy{}));
      const auto table = wbaudit::test::ref_table(c.ref);
      std::vector<float> w, u;
      make_inputs(c, table, 3001, 99, w, u);
      // fp32 reference weights: perturb the format values off the grid (projection rounds them first)
      SplitMix rng{4};
      for (auto& x : w) {
        x = static_cast<float>(x * (1 - rng.uniform() * 0x1p-6));  // stays within max finite
      }
      std::int64_t nonzero = 0, erased = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const double wq = wbaudit::test::ref_nearest_search(table, w[i]);
        nonzero += u[i] != 0;
        erased += u[i] != 0 && wbaudit::test::ref_nearest_search(table, wq + static_cast<double>(u[i])) == wq;
      }
      const WritebackCounts got = project_erasure(c.fmt, to_view(w, "w"), to_view(u, "u"));
      EXPECT_EQ(got.nonzero, nonzero);
      EXPECT_EQ(got.erased, erased);
    }
  });
}

// The master-copy contrast against brute force: m = master + u in fp32 (the hardware's addition), w = the nearest
// format value of m (sorted tables; fp32: m itself, saturating), events against the old w, on masters in sync with w,
// off the grid by ties, near ties and random amounts, and beyond max finite; a coordinate whose master, u or w is
// NaN/inf or whose update overflows fp32 is left unchanged and reported (the count and the first coordinate).
TEST(WritebackBlocks, MasterCopyEqualsBruteForce) {
  for_each_implementation([&] {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::int64_t checked = 0;
    for (const Case& c : all_formats()) {
      SCOPED_TRACE(describe(c.fmt, WritebackPolicy{Policy::master, 0}));
      const auto table = c.table ? wbaudit::test::ref_table(c.ref) : std::vector<wbaudit::test::ValueCode>{};
      std::vector<float> w, u, w2, u2;
      make_inputs(c, table, 6007, 21 + static_cast<std::uint64_t>(c.fmt.bits), w, u);
      make_inputs(c, table, 6007, 22 + static_cast<std::uint64_t>(c.fmt.bits), w2, u2);
      SplitMix rng{8};
      std::vector<float> master(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        const float off = w[i] + u2[i];  // w moved by an adversarial proposal: ties, near ties, beyond max, ...
        master[i] = rng.below(3) == 0 || !std::isfinite(off) ? w[i] : off;
      }
      master[3] = nan;
      w[10] = -inf;
      u[17] = inf;
      w[40] = nan;
      u[41] = nan;
      WritebackCounts want;
      std::int64_t bad = 0, first = -1;
      std::vector<float> want_master = master, want_w = w;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const float m = master[i] + u[i];
        if (!std::isfinite(m) || !std::isfinite(w[i])) {
          first = first < 0 ? static_cast<std::int64_t>(i) : first;
          ++bad;
          continue;
        }
        double q;
        if (c.table) {
          q = wbaudit::test::ref_nearest_search(table, m);
        } else {
          q = std::fabs(static_cast<double>(m)) > c.fmt.max_finite ? std::copysign(c.fmt.max_finite, m) : m;
        }
        want_master[i] = m;
        want_w[i] = static_cast<float>(q);
        want.nonzero += u[i] != 0;
        want.erased += u[i] != 0 && q == w[i];
        want.applied += q != w[i];
        want.saturated += std::fabs(static_cast<double>(m)) > c.fmt.max_finite;
      }
      Kokkos::View<float*> mv = to_view(master, "master"), wv = to_view(w, "w"), uv = to_view(u, "u");
      try {
        writeback_master(c.fmt, mv, wv, uv);
        FAIL() << "no throw";
      } catch (const NonFiniteError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(std::to_string(bad) + " coordinate(s)"), std::string::npos) << what;
        EXPECT_NE(what.find("first at coordinate " + std::to_string(first) + ":"), std::string::npos) << what;
      }
      const std::vector<float> hm = from_view(mv), hw = from_view(wv);
      for (std::size_t i = 0; i < w.size(); ++i) {
        ASSERT_EQ(bits_of(hm[i]), bits_of(want_master[i])) << "coordinate " << i << ": master " << master[i];
        ASSERT_TRUE(bits_of(hw[i]) == bits_of(want_w[i]) || hw[i] == want_w[i])  // +0 == -0 (left unchanged: bits)
            << "got " << hw[i] << ", want " << want_w[i] << " at coordinate " << i << ": master " << std::hexfloat
            << master[i] << ", u " << u[i] << ", w " << w[i];
      }
      // the counts, on the finite coordinates alone (no throw)
      std::vector<float> fm, fw, fu;
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (std::isfinite(master[i] + u[i]) && std::isfinite(w[i])) {
          fm.push_back(master[i]);
          fw.push_back(w[i]);
          fu.push_back(u[i]);
        }
      }
      EXPECT_EQ(writeback_master(c.fmt, to_view(fm, "master"), to_view(fw, "w"), to_view(fu, "u")), want);
      checked += static_cast<std::int64_t>(w.size());
    }
    std::printf("checked %lld master write-backs\n", static_cast<long long>(checked));
  });
}

// The SR decision at its boundary, with the random word chosen: for the exact sum x (exact in double here), the
// toward-zero and away neighbours from the brute-force table, frac = (|x| - tz) / (away - tz) and
// z = floor(frac * 2^32) computed in double, words z - 1, z and z + 1 must give away, (undecided: flagged, unless
// frac * 2^32 is an integer: toward zero) and toward zero; r-bit SR compares word >> (32 - r) with floor(frac * 2^r).
TEST(WritebackBlocks, StochasticDecisionAtTheBoundaryOfTheRandomWord) {
  for_each_implementation([&] {
    std::int64_t checked = 0;
    for (const Case& c : all_formats()) {
      if (!c.table || c.fmt.kind != FormatKind::floating) {
        continue;
      }
      const auto table = wbaudit::test::ref_table(c.ref);
      const FormatParams p = format_params(c.fmt);
      std::vector<float> w, u;
      make_inputs(c, table, 20011, 5 + static_cast<std::uint64_t>(c.fmt.bits), w, u);
      // plus sums just below powers of two by a fraction of the fp32 ulp there (the step below is half as wide)
      SplitMix rng{77};
      for (int i = 0; i < 4000; ++i) {
        const int e = static_cast<int>(rng.below(12)) - 6;
        const double pw = std::ldexp(1.0, e);
        if (pw > c.fmt.max_finite || pw < c.fmt.min_normal) {
          continue;
        }
        w.push_back(static_cast<float>(rng.below(2) ? pw : -pw));
        const double frac_ulp = std::ldexp(1.0 + rng.uniform(), -static_cast<int>(rng.below(8)) - 2);
        u.push_back(static_cast<float>(-std::copysign(frac_ulp * std::ldexp(pw, -24), static_cast<double>(w.back()))));
      }
      // r = -16: exact SR from the packed stream's 16-bit first draws (bp.sr_span = 2^16): a word fixes
      // U * 2^16 = its top 16 bits + [0, 1), and is undecided (more bits drawn) only at floor(frac * 2^16)
      for (int r : {0, 1, 8, 32, -16}) {
        const int bits = r == 0 ? 32 : r < 0 ? -r : r;
        detail::BlockParams bp = detail::block_params(p, r > 0 ? r : 0);
        if (r < 0) {
          bp.sr_span = 1u << 16;
        }
        for (std::size_t i = 0; i < w.size(); ++i) {
          const double x = static_cast<double>(w[i]) + static_cast<double>(u[i]);
          if (x - static_cast<double>(w[i]) != static_cast<double>(u[i]) ||
              x - static_cast<double>(u[i]) != static_cast<double>(w[i]) || std::fabs(x) > c.fmt.max_finite || x == 0) {
            continue;  // not exact in double, saturating or zero: covered by the comparison with the exact path
          }
          const double ax = std::fabs(x);
          auto hi = std::lower_bound(table.begin(), table.end(), ax,
                                     [](const wbaudit::test::ValueCode& a, double v) { return a.value < v; });
          const double tz = hi->value == ax ? ax : (hi - 1)->value;
          const double away = hi->value;
          const double frac = away == tz ? 0.0 : (ax - tz) / (away - tz);
          const double scaled = std::ldexp(frac, bits);
          const double zf = std::floor(scaled);
          const auto z = static_cast<std::uint64_t>(zf);
          // words at the threshold and one step either side, and (where they exist) words well outside the
          // uncertainty window of the AVX-512 loops (they decide from the fraction of the fp32 sum and flag words
          // within 2^(K+1) of the threshold, K = 32 - (23 - M))
          const int kbits = 9 + c.fmt.man_bits;
          const std::int64_t far = r == 0  ? std::int64_t{1} << (kbits + 2)
                                   : r < 0 ? std::max<std::int64_t>(2, std::int64_t{1} << std::max(0, kbits + 2 - 16))
                                           : 2;
          for (std::int64_t dz : {-far, std::int64_t{-1}, std::int64_t{0}, std::int64_t{1}, far}) {
            const std::int64_t target = static_cast<std::int64_t>(z) + dz;
            if (target < 0 || target >= (std::int64_t{1} << bits)) {
              continue;
            }
            const std::uint32_t word =
                bits == 32 ? static_cast<std::uint32_t>(target) : static_cast<std::uint32_t>(target) << (32 - bits);
            float wk = w[i];
            unsigned char flag = 0;
            detail::BlockCounts counts;
            const std::int64_t flagged = detail::stochastic_block(bp, false, 1, &wk, &u[i], &word, &flag, 1, counts);
            double want;
            bool want_flag = false;
            if (frac == 0 || dz > 0) {
              want = tz;
            } else if (dz < 0) {
              want = away;
            } else {
              want = tz;
              want_flag = r <= 0 && scaled != zf;
            }
            SCOPED_TRACE(std::string(c.fmt.name) + " r=" + std::to_string(r) + " dz " + std::to_string(dz));
            ASSERT_EQ(flagged, flag != 0 ? 1 : 0);
            if (flag != 0) {
              // a flagged coordinate is left unchanged for the exact path; the portable loops flag exactly the
              // undecidable draws, the AVX-512 and AVX2 loops also the words near the threshold (and, r-bit, a fraction
              // whose r-bit part may be 0 or 1)
              ASSERT_EQ(bits_of(wk), bits_of(w[i]));
              const double z32 = std::ldexp(frac, 32), window = std::ldexp(1.0, kbits + 1);
              const double word_at = bits == 32 ? static_cast<double>(target) : std::ldexp(target, 32 - bits);
              const double step = bits == 32 ? 1.0 : std::ldexp(1.0, 32 - bits);
              const bool near =
                  std::fabs(word_at - z32) <= window + step ||
                  (r > 0 && std::floor((z32 - window) / step) <= 0 && std::floor((z32 + window) / step) >= 1);
              ASSERT_TRUE(want_flag || (detail::active_block_isa() != detail::BlockIsa::portable && near))
                  << "needless flag: w = " << std::hexfloat << w[i] << ", u = " << u[i] << ", frac = " << frac;
            } else {
              ASSERT_FALSE(want_flag) << "w = " << std::hexfloat << w[i] << ", u = " << u[i];
              ASSERT_EQ(std::fabs(static_cast<double>(wk)), want)
                  << "w = " << std::hexfloat << w[i] << ", u = " << u[i] << ", frac = " << frac;
            }
            ++checked;
          }
        }
      }
    }
    std::printf("checked %lld boundary decisions\n", static_cast<long long>(checked));
  });
}

// intK SR in fp32 lanes decides from an fp32 estimate z of the threshold frac * 2^32 and flags the words within
// kMargin = 2048 of it (writeback_blocks_avx512.cpp, stochastic_integer; the AVX2 loop's conversion is within 2, not
// 1/2). Words at the threshold, one step either side and 2^13 away, for w on the grid of int3, int4, int8 (scales
// 0.375 and from int_scale_for_absmax) and u spanning 2^-20 .. 4 levels: a decided word must give the neighbour a
// long double computation of the threshold says, and a flagged one must lie near the threshold (within kMargin + 3;
// the portable loops: their own rule).
TEST(WritebackBlocks, IntegerStochasticDecisionAtTheBoundaryOfTheRandomWord) {
  for_each_implementation([&] {
    std::int64_t checked = 0, flagged_near = 0;
    for (int k : {3, 4, 8}) {
      for (float scale : {0.375f, int_scale_for_absmax(k, 0.7)}) {
        const FormatParams p = format_params(int_format(k, scale));
        const int qmax = (1 << (k - 1)) - 1;
        SplitMix rng{1000u + static_cast<std::uint64_t>(k)};
        for (int i = 0; i < 3000; ++i) {
          const int m = static_cast<int>(rng.below(2 * static_cast<std::uint64_t>(qmax) + 1)) - qmax;
          const float w = static_cast<float>(m) * scale;
          const double mag = std::ldexp(1.0 + rng.uniform(), -static_cast<int>(rng.below(22))) * scale;
          const float u = static_cast<float>(rng.below(2) ? mag : -mag);
          const double x = static_cast<double>(w) + static_cast<double>(u);  // exact: spans < 53 bits
          const long double ax = std::fabs(static_cast<long double>(x));
          const long double level = std::floor(ax / static_cast<long double>(scale));
          if (level + 1 > qmax || u == 0) {
            continue;  // saturating: covered by the comparison with the exact path
          }
          const long double tz = level * scale, rest = ax - tz;  // exact in long double (64-bit significand)
          if (rest == 0) {
            continue;
          }
          for (int r : {0, 8, -16}) {  // -16: exact SR from the packed stream's 16-bit first draws
            const int bits = r == 0 ? 32 : r < 0 ? -r : r;
            detail::BlockParams bp = detail::block_params(p, r > 0 ? r : 0);
            if (r < 0) {
              bp.sr_span = 1u << 16;
            }
            const long double t = std::ldexp(rest / static_cast<long double>(scale), bits);
            const long double zf = std::floor(t);
            if (t - zf < 0x1p-20L || zf + 1 - t < 0x1p-20L) {
              continue;  // the threshold too close to an integer for a long double to place it
            }
            const auto z = static_cast<std::int64_t>(zf);
            const std::int64_t far = r == 0 ? std::int64_t{1} << 13 : 2;
            for (std::int64_t dz : {-far, std::int64_t{-1}, std::int64_t{0}, std::int64_t{1}, far}) {
              const std::int64_t target = z + dz;
              if (target < 0 || target >= (std::int64_t{1} << bits)) {
                continue;
              }
              const std::uint32_t word =
                  bits == 32 ? static_cast<std::uint32_t>(target) : static_cast<std::uint32_t>(target) << (32 - bits);
              float wk = w;
              unsigned char flag = 0;
              detail::BlockCounts counts;
              const std::int64_t flagged = detail::stochastic_block(bp, true, 1, &wk, &u, &word, &flag, 1, counts);
              SCOPED_TRACE("int" + std::to_string(k) + " scale " + std::to_string(scale) + " r=" + std::to_string(r) +
                           " dz " + std::to_string(dz));
              ASSERT_EQ(flagged, flag != 0 ? 1 : 0);
              // away iff the word (r-bit: its top bits) is below the threshold; at the threshold itself a full-width
              // draw is undecided by its first word (the exact path draws more)
              const bool undecidable = r <= 0 && dz == 0;
              if (flag != 0) {
                ASSERT_EQ(bits_of(wk), bits_of(w));
                const long double word_at =
                    bits == 32 ? target : std::ldexp(static_cast<long double>(target), 32 - bits);
                const long double z32 = std::ldexp(rest / static_cast<long double>(scale), 32);
                // the portable loops (fp64 lanes) flag instead fractions within 2^-20 of 0 or 1 (r-bit: of the
                // fraction times 2^r) and words within 2^-8 of the threshold
                const long double frac = rest / static_cast<long double>(scale);
                const long double fr = t - zf;
                const bool portable_near =
                    detail::active_block_isa() == detail::BlockIsa::portable &&
                    (frac < 0x1p-20L || frac > 1 - 0x1p-20L || (r > 0 && (fr < 0x1p-20L || fr > 1 - 0x1p-20L)));
                // r = -16: the word's span [word, word + 2^16) within the loops' margin (2048, plus the threshold's
                // own error, at most 2048) of the threshold
                const bool near =
                    r < 0 ? word_at > z32 - 0x1p16L - 4096 - 3 && word_at < z32 + 4096 + 3
                          : std::fabs(word_at - z32) <= 2048 + 3 + (bits == 32 ? 0 : std::ldexp(1.0L, 32 - bits));
                ASSERT_TRUE(undecidable || portable_near || near)
                    << "needless flag: w = " << std::hexfloat << w << ", u = " << u;
                flagged_near += !undecidable;
              } else {
                ASSERT_FALSE(undecidable) << "w = " << std::hexfloat << w << ", u = " << u;
                const long double want = dz < 0 ? tz + scale : tz;
                ASSERT_EQ(static_cast<long double>(std::fabs(wk)), want)
                    << "w = " << std::hexfloat << w << ", u = " << u << ", word " << word;
              }
              ++checked;
            }
          }
        }
      }
    }
    std::printf("checked %lld intK boundary decisions (%lld flagged near the threshold)\n",
                static_cast<long long>(checked), static_cast<long long>(flagged_near));
    EXPECT_GT(checked, 20000);
  });
}

// The AVX2 loops decide a vector (8 coordinates) without the subnormal work when none of its lanes lies at or below
// the format's min normal (nearest: every floating format; SR: min normal <= 2^-4). Vectors of 8 normal lanes
// alternate here with vectors holding one lane at the edge (w at +-min normal or subnormal; sums on the grid around
// the min normal, and sums within an fp32 rounding of w, whose SR step down from the min normal is the wide one), in
// every position; every coordinate must equal the exact scalar path, and nearest the brute force.
TEST(WritebackBlocks, VectorsWithAndWithoutSubnormalLanesEqualTheExactPath) {
  for_each_implementation([&] {
    std::int64_t checked = 0;
    for (const Case& c : all_formats()) {
      if (!c.table || c.fmt.kind != FormatKind::floating || c.fmt.min_normal <= 0x1p-126) {
        continue;  // only formats whose subnormal range lies in fp32's normal range
      }
      const auto table = wbaudit::test::ref_table(c.ref);
      std::vector<float> normal;  // format values of magnitude >= 4 * min normal
      for (const auto& v : table) {
        if (std::fabs(v.value) >= 4 * c.fmt.min_normal && std::isfinite(v.value)) {
          normal.push_back(static_cast<float>(v.value));
        }
      }
      ASSERT_FALSE(normal.empty());
      SplitMix rng{41};
      const double mn = c.fmt.min_normal, ms = c.fmt.min_subnormal;
      std::vector<float> w, u;
      for (int vec = 0; vec < 2048; ++vec) {
        const int edge_lane = vec % 2 == 0 ? -1 : static_cast<int>(rng.below(8));
        for (int lane = 0; lane < 8; ++lane) {
          float wi, ui;
          if (lane == edge_lane) {
            const double sign = rng.below(2) ? 1.0 : -1.0;
            wi = static_cast<float>(sign * (rng.below(2) ? mn : ms * static_cast<double>(1 + rng.below(3))));
            const double steps[] = {-1.5, -1, -0.5, -0.25, 0.25, 0.5, 1, 1.5};
            if (rng.below(2) == 0) {  // sums on or off the format's grid near the edge
              ui = static_cast<float>(sign * ms * steps[rng.below(8)] * (rng.below(4) == 0 ? 1.0 + 0x1p-20 : 1.0));
            } else {  // sums that round (in fp32) to w itself, just below or above it
              ui = static_cast<float>((rng.below(2) ? 1.0 : -1.0) * mn *
                                      std::ldexp(1.0, -24 - static_cast<int>(rng.below(16))));
            }
          } else {
            wi = normal[rng.below(normal.size())];
            // an update below half the spacing up to a few spacings: erased, rounded, stochastic
            ui = static_cast<float>(std::fabs(wi) * std::ldexp(rng.uniform() - 0.5, -static_cast<int>(rng.below(8))));
          }
          w.push_back(wi);
          u.push_back(ui);
        }
      }
      const FormatParams p = format_params(c.fmt);
      for (const auto& pol : kPolicies) {
        SCOPED_TRACE(describe(c.fmt, pol));
        const RngKey key{0xfeedull, 12, 1};
        Kokkos::View<float*> wv = to_view(w, "w"), uv = to_view(u, "u");
        writeback(c.fmt, pol, key, wv, uv);
        const std::vector<float> hw = from_view(wv);
        for (std::size_t i = 0; i < w.size(); ++i) {
          const WritebackOutcome o = writeback_value(p, pol, key, i, w[i], u[i]);
          ASSERT_EQ(bits_of(hw[i]), bits_of(o.value))
              << "coordinate " << i << ": w = " << std::hexfloat << w[i] << ", u = " << u[i] << std::defaultfloat;
          if (pol.policy == Policy::nearest) {
            ASSERT_EQ(static_cast<double>(hw[i]),
                      wbaudit::test::ref_nearest_search(table, static_cast<double>(w[i]) + static_cast<double>(u[i])))
                << "coordinate " << i;
          }
          ++checked;
        }
      }
    }
    std::printf("checked %lld coordinate write-backs\n", static_cast<long long>(checked));
  });
}

// Exact SR from the packed stream (sr_bits 0): coordinate c's U = (its 16-bit chunk + e / 2^32) / 2^16, e the first
// word of its own further stream (Random123 with counter (c, 2^31 | 1 << 16 | c >> 32, step, tensor), word 0). With
// w = 1 in bf16 and u placing frac * 2^32 = chunk * 2^16 + G (G = 2^8 * (1..255)), the first 16 bits tie and the draw
// goes up iff e < G * 2^16: every coordinate goes to the exact path's continuation, checked against that reference.
TEST(WritebackBlocks, PackedExactDrawsContinueWithTheCoordinatesOwnWords) {
  for_each_implementation([&] {
    const WritebackPolicy pol = make_policy("stochastic", 0, "philox-packed");
    const RngKey key{0x5eed5eed12345678ull, 41, 6};
    const r123::Philox4x32::key_type pk = {
        {static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32)}};
    const std::uint64_t first = 12345;
    const std::int64_t n = 4096;
    SplitMix rng{31};
    std::vector<float> w(n, 1.0f), u(n);
    std::vector<bool> up(n);
    std::int64_t ups = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      const std::uint64_t c = first + static_cast<std::uint64_t>(k), j = c / 2;
      r123::Philox4x32 philox;
      const std::uint32_t word =
          philox({{static_cast<std::uint32_t>(j >> 2), static_cast<std::uint32_t>(j >> 34) & 0x3fffu,
                   static_cast<std::uint32_t>(key.step), key.tensor_id}},
                 pk)
              .v[j & 3u];
      const std::uint32_t chunk = (word >> ((c % 2) * 16)) & 0xffffu;
      const std::uint32_t e = philox({{static_cast<std::uint32_t>(c),
                                       0x80000000u | (1u << 16) | (static_cast<std::uint32_t>(c >> 32) & 0xffffu),
                                       static_cast<std::uint32_t>(key.step), key.tensor_id}},
                                     pk)
                                  .v[0];
      const auto g = static_cast<std::uint32_t>(256 * (1 + rng.below(255)));
      // frac * 2^32 = chunk * 2^16 + g: u = that * 2^-39 (bf16's step at 1 is 2^-7), exact in fp32 (g a multiple of
      // 2^8: at most 24 significant bits)
      u[k] = static_cast<float>(std::ldexp(static_cast<double>((std::uint64_t{chunk} << 16) + g), -39));
      ASSERT_EQ(std::ldexp(static_cast<double>(u[k]), 39), static_cast<double>((std::uint64_t{chunk} << 16) + g));
      up[k] = static_cast<std::uint64_t>(e) < (std::uint64_t{g} << 16);
      ups += up[k];
    }
    Kokkos::View<float*> wv = to_view(w, "w"), uv = to_view(u, "u");
    WritebackOptions opt;
    opt.first_coordinate = first;
    writeback(Kokkos::DefaultExecutionSpace{}, format_from_name("bf16"), pol, key, wv, Kokkos::View<const float*>(uv),
              opt);
    const std::vector<float> got = from_view(wv);
    for (std::int64_t k = 0; k < n; ++k) {
      ASSERT_EQ(got[k], up[k] ? 1.0f + 0x1p-7f : 1.0f)
          << "coordinate " << first + k << ", u = " << std::hexfloat << u[k];
    }
    EXPECT_GT(ups, n / 4);  // both outcomes occur
    EXPECT_LT(ups, 3 * n / 4);
  });
}
