#pragma once
// Independent references for the precision tests, written plainly from the format definitions (docs/science.md §2):
// a hand-written parameter table, a decoder from the bit layout, sorted tables of all finite values, and
// brute-force round-to-nearest-even. Nothing here calls the rounding code under test.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace wbaudit::test {

struct RefFormat {
  std::string name;
  int E = 0, M = 0, bias = 0;
  bool ieee = false;     // top exponent field is inf/NaN
  bool nan_111 = false;  // e4m3 fn: only S.1111.111 is NaN
  double max_finite = 0, min_normal = 0, min_subnormal = 0;
  int int_bits = 0;  // intK: K, with scale below
  double scale = 1;
  int bits() const { return int_bits ? int_bits : 1 + E + M; }
};

// Hand-computed parameters (OCP FP8/FP6/FP4 specs, IEEE 754).
inline std::vector<RefFormat> ref_float_formats() {
  return {
      {"fp32", 8, 23, 127, true, false, 0x1.fffffep127, 0x1p-126, 0x1p-149},
      {"bf16", 8, 7, 127, true, false, 0x1.fep127, 0x1p-126, 0x1p-133},
      {"fp16", 5, 10, 15, true, false, 65504.0, 0x1p-14, 0x1p-24},
      {"e5m2", 5, 2, 15, true, false, 57344.0, 0x1p-14, 0x1p-16},
      {"e4m3", 4, 3, 7, false, true, 448.0, 0x1p-6, 0x1p-9},
      {"e3m2", 3, 2, 3, false, false, 28.0, 0x1p-2, 0x1p-4},
      {"e2m3", 2, 3, 1, false, false, 7.5, 1.0, 0.125},
      {"e2m1", 2, 1, 1, false, false, 6.0, 1.0, 0.5},
  };
}

inline RefFormat ref_int_format(int k, double scale) {
  RefFormat f;
  f.name = "int" + std::to_string(k);
  f.int_bits = k;
  f.scale = scale;
  const int levels = (1 << (k - 1)) - 1;
  f.max_finite = levels * scale;
  f.min_normal = f.min_subnormal = scale;
  return f;
}

// Value of a code from the bit layout: (-1)^s * 2^(e - bias) * (1 + m / 2^M), subnormal when e == 0.
inline double ref_decode(const RefFormat& f, std::uint32_t code) {
  if (f.int_bits) {
    const int k = f.int_bits;
    int n = static_cast<int>(code & ((1u << k) - 1));
    if (n >= (1 << (k - 1))) {
      n -= (1 << k);
    }
    if (n == -(1 << (k - 1))) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    return n * f.scale;
  }
  const int s = (code >> (f.E + f.M)) & 1;
  const int e = (code >> f.M) & ((1 << f.E) - 1);
  const int m = code & ((1 << f.M) - 1);
  double v;
  if (f.ieee && e == (1 << f.E) - 1) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (f.nan_111 && e == (1 << f.E) - 1 && m == (1 << f.M) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.M);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.M), e - f.bias);
  }
  return s ? -v : v;
}

struct ValueCode {
  double value;
  std::uint32_t code;
};

// All finite values, sorted ascending; +0 and -0 kept once (as +0).
inline std::vector<ValueCode> ref_table(const RefFormat& f) {
  std::vector<ValueCode> t;
  const std::uint32_t n = 1u << f.bits();
  for (std::uint32_t c = 0; c < n; ++c) {
    const double v = ref_decode(f, c);
    if (!std::isfinite(v)) {
      continue;
    }
    if (v == 0 && std::signbit(v)) {
      continue;
    }
    t.push_back({v, c});
  }
  std::sort(t.begin(), t.end(), [](const ValueCode& a, const ValueCode& b) { return a.value < b.value; });
  return t;
}

// Round-to-nearest-even by scanning every finite value (the definition); |x| > max saturates to +-max.
inline double ref_nearest_scan(const std::vector<ValueCode>& table, double x) {
  const double max = table.back().value;
  if (x > max) {
    return max;
  }
  if (x < -max) {
    return -max;
  }
  double best = table[0].value;
  std::uint32_t best_code = table[0].code;
  double best_dist = std::fabs(x - best);  // exact: both operands have few bits relative to double
  for (const auto& vc : table) {
    const double d = std::fabs(x - vc.value);
    if (d < best_dist || (d == best_dist && (vc.code & 1u) == 0 && (best_code & 1u) != 0)) {
      best = vc.value;
      best_code = vc.code;
      best_dist = d;
    }
  }
  return best;
}

// The same rule via binary search over the sorted table (for 16-bit formats where a scan per input is too slow).
inline double ref_nearest_search(const std::vector<ValueCode>& table, double x) {
  const double max = table.back().value;
  if (x > max) {
    return max;
  }
  if (x < -max) {
    return -max;
  }
  auto hi = std::lower_bound(table.begin(), table.end(), x, [](const ValueCode& a, double v) { return a.value < v; });
  if (hi->value == x) {
    return x;
  }
  auto lo = hi - 1;
  const double dl = x - lo->value, dh = hi->value - x;
  if (dl < dh) {
    return lo->value;
  }
  if (dh < dl) {
    return hi->value;
  }
  return (lo->code & 1u) == 0 ? lo->value : hi->value;
}

// Neighbours in the table of a table value v: {pred, succ} (+-inf at the ends).
inline std::pair<double, double> ref_neighbours(const std::vector<ValueCode>& table, double v) {
  auto it = std::lower_bound(table.begin(), table.end(), v, [](const ValueCode& a, double x) { return a.value < x; });
  const double inf = std::numeric_limits<double>::infinity();
  const double lo = it == table.begin() ? -inf : (it - 1)->value;
  const double hi = (it + 1) == table.end() ? inf : (it + 1)->value;
  return {lo, hi};
}

// splitmix64: a portable generator for test inputs (fixed seeds).
struct SplitMix {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  std::uint64_t below(std::uint64_t n) { return next() % n; }
};

}  // namespace wbaudit::test
