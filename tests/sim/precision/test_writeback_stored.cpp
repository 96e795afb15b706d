// The fused write-back of 16-bit stored parameters (writeback_stored.hpp): its bf16 / fp16 codecs against GCC's
// _Float16 and the bf16 field formula, and its values and counts against writeback() on the decoded arrays (2^20
// coordinates per format, policy and storage type, on the serial and OpenMP spaces), bad input.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "reference_formats.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_stored.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace {

// bf16 bits -> value from the fields (sign, 8 exponent bits, 7 fraction bits), written plainly.
double bf16_from_fields(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 7) & 0xff, man = h & 0x7f;
  const double mag = exp == 0 ? std::ldexp(man, -133) : std::ldexp(128 + man, exp - 127 - 7);
  return sign ? -mag : mag;
}

struct Stored {
  std::vector<std::uint16_t> bits;
  WritebackCounts counts;
};

template <class Space>
Stored run_stored(const FormatSpec& fmt, const WritebackPolicy& pol, Storage16 type,
                  const std::vector<std::uint16_t>& bits, const std::vector<float>& stepped,
                  const WritebackOptions& opt = {}) {
  using MS = typename Space::memory_space;
  Kokkos::View<std::uint16_t*, MS> s("s", bits.size());
  Kokkos::View<float*, MS> p("p", stepped.size());
  std::memcpy(s.data(), bits.data(), bits.size() * sizeof(std::uint16_t));
  std::memcpy(p.data(), stepped.data(), stepped.size() * sizeof(float));
  Stored out;
  out.counts = writeback_stored(Space{}, fmt, pol, RngKey{77, 12, 4}, type, s, Kokkos::View<const float*, MS>(p), opt);
  out.bits.assign(s.data(), s.data() + bits.size());
  return out;
}

// The reference: writeback() on float arrays w = the stored values and u = fl32(stepped - w), the result then read
// as storage bits through the test's own conversion (bf16: the upper half; fp16: _Float16).
struct Reference {
  std::vector<float> w_next;
  WritebackCounts counts;
};
Reference run_reference(const FormatSpec& fmt, const WritebackPolicy& pol, const std::vector<float>& w,
                        const std::vector<float>& stepped, std::uint64_t first_coordinate = 0) {
  const std::size_t n = w.size();
  Kokkos::View<float*, Kokkos::HostSpace> wv("w", n), uv("u", n);
  for (std::size_t i = 0; i < n; ++i) {
    wv(i) = w[i];
    uv(i) = stepped[i] - w[i];
  }
  WritebackOptions opt;
  opt.first_coordinate = first_coordinate;
  Reference r;
  r.counts = writeback(Kokkos::Serial{}, fmt, pol, RngKey{77, 12, 4}, wv,
                       Kokkos::View<const float*, Kokkos::HostSpace>(uv), opt);
  r.w_next.assign(wv.data(), wv.data() + n);
  return r;
}

float stored_value(Storage16 type, std::uint16_t h) {
  return type == Storage16::bf16 ? std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16)
                                 : static_cast<float>(std::bit_cast<_Float16>(h));
}
std::uint16_t storage_bits(Storage16 type, float v) {
  return type == Storage16::bf16 ? static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16)
                                 : std::bit_cast<std::uint16_t>(static_cast<_Float16>(v));
}

// n stored values of fmt (random fp32 draws rounded to fmt by quantize(), over its whole range) and the values an
// optimizer stepped them to: w + u with u over many scales, 1 in 10 u = 0, 1 in 50 far beyond max finite (but
// for bf16).
struct Case {
  std::vector<std::uint16_t> bits;
  std::vector<float> w, stepped;
};
Case make_case(const FormatSpec& fmt, Storage16 type, std::size_t n, std::uint64_t seed) {
  SplitMix rng{seed};
  Kokkos::View<float*, Kokkos::HostSpace> x("x", n);
  const double top = std::min(std::log2(fmt.max_finite), 100.0), bottom = std::log2(fmt.min_subnormal) - 1;
  for (std::size_t i = 0; i < n; ++i) {
    const double mag = std::exp2(bottom + (top - bottom) * rng.uniform());
    x(i) = static_cast<float>(rng.below(2) ? -mag : mag);
    if (rng.below(40) == 0) {
      x(i) = 0.0f;
    }
  }
  quantize(Kokkos::Serial{}, fmt, x);
  Case c;
  for (std::size_t i = 0; i < n; ++i) {
    const float w = x(i);
    const double scale = std::max(std::fabs(static_cast<double>(w)), fmt.min_subnormal);
    double u = (rng.uniform() - 0.5) * scale * std::ldexp(1.0, -static_cast<int>(rng.below(14)));
    if (rng.below(10) == 0) {
      u = 0;
    } else if (rng.below(50) == 0 && fmt.max_finite < 1e30) {  // saturation (bf16's would overflow fp32)
      u = (w < 0 ? -4.0 : 4.0) * fmt.max_finite;
    }
    c.bits.push_back(storage_bits(type, w));
    c.w.push_back(stored_value(type, c.bits.back()));
    c.stepped.push_back(static_cast<float>(static_cast<double>(w) + u));
  }
  return c;
}

const WritebackPolicy kPolicies[] = {{Policy::nearest, 0},
                                     {Policy::stochastic, 0},
                                     {Policy::stochastic, 8},
                                     {Policy::deadzone_sr, 0},
                                     {Policy::stochastic, 0, SrStream::philox_packed}};

}  // namespace

TEST(WritebackStored, Bf16CodecMatchesTheFieldFormula) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float v = decode_storage16(Storage16::bf16, bits);
    if (((h >> 7) & 0xff) == 0xff) {
      EXPECT_FALSE(std::isfinite(v)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(v), bf16_from_fields(bits)) << h;
    }
    ASSERT_EQ(encode_storage16(Storage16::bf16, v), bits) << h;  // NaN payloads kept
  }
}

TEST(WritebackStored, Fp16CodecMatchesFloat16) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float v = decode_storage16(Storage16::fp16, bits);
    const float ref = static_cast<float>(std::bit_cast<_Float16>(bits));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(v)) << h;
    } else {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(v), std::bit_cast<std::uint32_t>(ref)) << h;  // signed zeros too
    }
    ASSERT_EQ(encode_storage16(Storage16::fp16, v), bits) << h;
  }
}

// Every format that fits the storage, every policy: the stored result and the counts are writeback()'s on the
// decoded arrays, on both spaces, at any chunking, and for a slice with its coordinate offset.
TEST(WritebackStored, EqualsWritebackOnTheDecodedArrays) {
  struct Combo {
    FormatSpec fmt;
    Storage16 type;
  };
  std::vector<Combo> combos;
  for (const char* name : {"bf16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1"}) {
    combos.push_back({format_from_name(name), Storage16::bf16});
  }
  for (const char* name : {"fp16", "e4m3", "e5m2", "e2m1"}) {
    combos.push_back({format_from_name(name), Storage16::fp16});
  }
  combos.push_back({int_format(8, 0.0078125f), Storage16::bf16});
  combos.push_back({int_format(4, 0.375f), Storage16::fp16});
  constexpr std::size_t kN = std::size_t{1} << 20;
  std::uint64_t seed = 1;
  for (const Combo& combo : combos) {
    const Case c = make_case(combo.fmt, combo.type, kN, seed++);
    for (const WritebackPolicy& pol : kPolicies) {
      SCOPED_TRACE(std::string(combo.fmt.name) + (combo.type == Storage16::bf16 ? " in bf16 " : " in fp16 ") +
                   policy_name(pol.policy) + " r=" + std::to_string(pol.sr_bits) + " " + sr_stream_name(pol.stream));
      const Reference ref = run_reference(combo.fmt, pol, c.w, c.stepped);
      std::vector<std::uint16_t> want(kN);
      for (std::size_t i = 0; i < kN; ++i) {
        want[i] = storage_bits(combo.type, ref.w_next[i]);
        ASSERT_EQ(stored_value(combo.type, want[i]), ref.w_next[i]) << "the format does not fit, coordinate " << i;
      }
      const auto serial = run_stored<Kokkos::Serial>(combo.fmt, pol, combo.type, c.bits, c.stepped);
      EXPECT_EQ(serial.counts, ref.counts);
      EXPECT_TRUE(serial.bits == want);
      WritebackOptions chunked;
      chunked.chunk_size = 3;
      const auto omp = run_stored<Kokkos::OpenMP>(combo.fmt, pol, combo.type, c.bits, c.stepped, chunked);
      EXPECT_EQ(omp.counts, ref.counts);
      EXPECT_TRUE(omp.bits == want);
      // the second half as a slice starting at coordinate kN / 2 (the SR key)
      const std::vector<std::uint16_t> tail_bits(c.bits.begin() + kN / 2, c.bits.end());
      const std::vector<float> tail_stepped(c.stepped.begin() + kN / 2, c.stepped.end());
      WritebackOptions offset;
      offset.first_coordinate = kN / 2;
      const auto tail = run_stored<Kokkos::OpenMP>(combo.fmt, pol, combo.type, tail_bits, tail_stepped, offset);
      EXPECT_TRUE(std::equal(tail.bits.begin(), tail.bits.end(), want.begin() + kN / 2));
    }
  }
}

TEST(WritebackStored, RefusesFormatsTheStorageDoesNotHoldBeforeWriting) {
  const std::vector<std::uint16_t> bits(100, 0x3f80);  // 1.0 in bf16
  const std::vector<float> stepped(100, 1.001f);
  const WritebackPolicy nearest{Policy::nearest, 0};
  for (const auto& [fmt, type] :
       {std::pair{format_from_name("fp32"), Storage16::bf16}, std::pair{format_from_name("fp16"), Storage16::bf16},
        std::pair{format_from_name("bf16"), Storage16::fp16},
        std::pair{int_format(8, 1.0009765625f), Storage16::bf16}}) {
    SCOPED_TRACE(fmt.name);
    Kokkos::View<std::uint16_t*, Kokkos::HostSpace> s("s", bits.size());
    Kokkos::View<float*, Kokkos::HostSpace> p("p", stepped.size());
    std::memcpy(s.data(), bits.data(), bits.size() * 2);
    std::memcpy(p.data(), stepped.data(), stepped.size() * 4);
    try {
      writeback_stored(Kokkos::Serial{}, fmt, nearest, RngKey{}, type, s,
                       Kokkos::View<const float*, Kokkos::HostSpace>(p));
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("does not hold"), std::string::npos) << e.what();
    }
    EXPECT_EQ(0, std::memcmp(s.data(), bits.data(), bits.size() * 2)) << "storage written";
  }
}

// A NaN proposal: as writeback(), the coordinate keeps its value, every other one is written back, and the error
// names the count and the first coordinate.
TEST(WritebackStored, NonFiniteLeavesThoseCoordinatesAndNamesTheFirst) {
  const FormatSpec fmt = format_from_name("bf16");
  Case c = make_case(fmt, Storage16::bf16, 5000, 99);
  c.stepped[1234] = std::numeric_limits<float>::quiet_NaN();
  c.stepped[4321] = std::numeric_limits<float>::infinity();
  const WritebackPolicy nearest{Policy::nearest, 0};
  Kokkos::View<std::uint16_t*, Kokkos::HostSpace> s("s", c.bits.size());
  Kokkos::View<float*, Kokkos::HostSpace> p("p", c.stepped.size());
  std::memcpy(s.data(), c.bits.data(), c.bits.size() * 2);
  std::memcpy(p.data(), c.stepped.data(), c.stepped.size() * 4);
  try {
    writeback_stored(Kokkos::OpenMP{}, fmt, nearest, RngKey{77, 12, 4}, Storage16::bf16, s,
                     Kokkos::View<const float*, Kokkos::HostSpace>(p));
    ADD_FAILURE() << "no error";
  } catch (const NonFiniteError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("2 non-finite value(s); first at coordinate 1234"), std::string::npos) << m;
  }
  std::vector<float> stepped_ok = c.stepped;
  stepped_ok[1234] = c.w[1234];  // u = 0 there: the reference leaves them as they are
  stepped_ok[4321] = c.w[4321];
  const Reference ref = run_reference(fmt, nearest, c.w, stepped_ok);
  for (std::size_t i = 0; i < c.bits.size(); ++i) {
    ASSERT_EQ(s(i), storage_bits(Storage16::bf16, ref.w_next[i])) << i;
  }
}
