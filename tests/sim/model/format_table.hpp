#pragma once
// Test reference: a floating format as the ascending table of its non-negative finite values (index = code), with
// round-to-nearest-even by search. Written independently of sim/precision.
#include <algorithm>
#include <cmath>
#include <vector>

namespace wbaudit::test {

struct FormatTable {
  std::vector<double> values;  // code c -> value, c = 0 .. max_code

  FormatTable(int exp_bits, int man_bits, int bias, int max_code) {
    for (int c = 0; c <= max_code; ++c) {
      const int e = c >> man_bits, m = c & ((1 << man_bits) - 1);
      values.push_back(e == 0 ? std::ldexp(m, 1 - bias - man_bits)
                              : std::ldexp(1.0 + std::ldexp(m, -man_bits), e - bias));
    }
    (void)exp_bits;
  }
  static FormatTable bf16() { return FormatTable(8, 7, 127, 0x7F7F); }
  static FormatTable e4m3() { return FormatTable(4, 3, 7, 0x7E); }   // OCP "fn": max 448
  static FormatTable e5m2() { return FormatTable(5, 2, 15, 0x7B); }  // max 57344

  double max_finite() const { return values.back(); }

  // Nearest value, ties to the even code; beyond the largest finite value, saturates to it.
  double nearest(long double x) const {
    const long double a = std::fabs(x);
    double r;
    if (a >= values.back()) {
      r = values.back();
    } else {
      const std::size_t hi = std::upper_bound(values.begin(), values.end(), static_cast<double>(a)) - values.begin();
      // upper_bound on the double of a is safe: every value is exact in double and a < max.
      std::size_t h = hi;
      while (h > 0 && static_cast<long double>(values[h - 1]) > a) {
        --h;
      }
      while (h < values.size() && static_cast<long double>(values[h]) <= a) {
        ++h;
      }
      const std::size_t lo = h - 1;
      if (static_cast<long double>(values[lo]) == a) {
        r = values[lo];
      } else {
        const long double dl = a - values[lo], dh = static_cast<long double>(values[h]) - a;
        r = dl < dh ? values[lo] : dh < dl ? values[h] : (lo % 2 == 0 ? values[lo] : values[h]);
      }
    }
    return x < 0 ? -r : r;
  }
};

}  // namespace wbaudit::test
