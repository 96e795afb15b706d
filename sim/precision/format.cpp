#include "sim/precision/format.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "sim/precision/rounding.hpp"
#include "util/text.hpp"

namespace wbaudit::sim {
namespace {

struct FloatRow {
  const char* name;
  int exp_bits;
  int man_bits;
  bool ieee_specials;  // top exponent reserved for inf/NaN
  bool has_nan;        // e4m3 "fn": only S.1111.111 is NaN
};

// docs/science.md §2: IEEE-like fp32/bf16/fp16/e5m2; OCP e4m3 "fn" (no inf, NaN = S.1111.111, max 448); OCP FP6
// e3m2/e2m3 and FP4 e2m1 (all codes finite). All have subnormals.
constexpr FloatRow kFloatRows[] = {
    {"fp32", 8, 23, true, true},  {"bf16", 8, 7, true, true},   {"fp16", 5, 10, true, true},
    {"e5m2", 5, 2, true, true},   {"e4m3", 4, 3, false, true},  {"e3m2", 3, 2, false, false},
    {"e2m3", 2, 3, false, false}, {"e2m1", 2, 1, false, false},
};

FormatSpec float_format(const FloatRow& row) {
  FormatSpec f;
  f.kind = FormatKind::floating;
  std::snprintf(f.name, sizeof f.name, "%s", row.name);
  f.exp_bits = row.exp_bits;
  f.man_bits = row.man_bits;
  f.bits = 1 + row.exp_bits + row.man_bits;
  f.bias = (1 << (row.exp_bits - 1)) - 1;
  f.ieee_specials = row.ieee_specials;
  f.has_inf = row.ieee_specials;
  f.has_nan = row.has_nan;
  f.subnormals = true;
  const int emin = 1 - f.bias;
  const int top_field = (1 << row.exp_bits) - 1;
  double max_significand;  // in units of the top binade's ulp
  int emax;
  if (row.ieee_specials) {  // top exponent field reserved
    emax = top_field - 1 - f.bias;
    max_significand = std::ldexp(2.0, row.man_bits) - 1;
  } else if (row.has_nan) {  // top field usable except its all-ones mantissa
    emax = top_field - f.bias;
    max_significand = std::ldexp(2.0, row.man_bits) - 2;
  } else {
    emax = top_field - f.bias;
    max_significand = std::ldexp(2.0, row.man_bits) - 1;
  }
  f.max_finite = std::ldexp(max_significand, emax - row.man_bits);
  f.min_normal = std::ldexp(1.0, emin);
  f.min_subnormal = std::ldexp(1.0, emin - row.man_bits);
  return f;
}

std::string known_list() {
  std::string s;
  for (const auto& n : known_format_names()) {
    s += (s.empty() ? "" : ", ") + n;
  }
  return s;
}

}  // namespace

std::vector<std::string> known_format_names() {
  std::vector<std::string> names;
  for (const auto& row : kFloatRows) {
    names.emplace_back(row.name);
  }
  for (int k = 2; k <= 8; ++k) {
    names.push_back("int" + std::to_string(k));
  }
  return names;
}

FormatSpec format_from_name(std::string_view name) {
  for (const auto& row : kFloatRows) {
    if (name == row.name) {
      return float_format(row);
    }
  }
  if (name.size() >= 4 && name.substr(0, 3) == "int") {
    const std::string digits(name.substr(3));
    if (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() <= 3) {
      const int k = std::stoi(digits);
      if (k < 2 || k > 8) {
        throw FormatError("unknown format \"" + std::string(name) +
                          "\": integer formats are int2..int8 (K = " + digits + " is outside 2..8)");
      }
      return int_format(k, 1.0f);
    }
  }
  throw FormatError("unknown format \"" + std::string(name) + "\"" + util::did_you_mean(name, known_format_names()) +
                    " (known: " + known_list() + ")");
}

FormatSpec int_format(int k, float scale) {
  if (k < 2 || k > 8) {
    throw FormatError("int_format: K = " + std::to_string(k) + " is outside 2..8");
  }
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw FormatError("int_format: scale " + std::to_string(scale) + " must be positive and finite");
  }
  FormatSpec f;
  f.kind = FormatKind::integer;
  std::snprintf(f.name, sizeof f.name, "int%d", k);
  f.bits = k;
  f.exp_bits = 0;
  f.man_bits = 0;
  f.bias = 0;
  f.has_inf = false;
  f.has_nan = false;
  f.ieee_specials = false;
  f.subnormals = false;
  f.int_max_level = (1 << (k - 1)) - 1;
  f.int_scale = scale;
  // Every level n * scale must be an fp32 value, so that weights stored as fp32 are exactly on the grid.
  for (int n = 1; n <= f.int_max_level; ++n) {
    const double exact = static_cast<double>(n) * scale;
    if (static_cast<double>(static_cast<float>(exact)) != exact || std::isinf(static_cast<float>(exact))) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%a", static_cast<double>(scale));
      throw FormatError("int_format: scale " + std::string(buf) + " for int" + std::to_string(k) + ": level " +
                        std::to_string(n) +
                        " * scale is not exactly representable in fp32 (use int_scale_for_absmax to round it)");
    }
  }
  f.max_finite = f.int_max_level * static_cast<double>(scale);
  f.min_normal = scale;
  f.min_subnormal = scale;
  return f;
}

float int_scale_for_absmax(int k, double absmax) {
  if (k < 2 || k > 8) {
    throw FormatError("int_scale_for_absmax: K = " + std::to_string(k) + " is outside 2..8");
  }
  if (!(absmax > 0) || !std::isfinite(absmax)) {
    throw FormatError("int_scale_for_absmax: absmax " + std::to_string(absmax) + " must be positive and finite");
  }
  const int level_max = (1 << (k - 1)) - 1;
  // Round absmax / level_max UP to 16 significant bits: levels * scale then need at most 16 + 7 = 23 bits, so they
  // are exact in fp32, and level_max * scale >= absmax, so no initial weight saturates.
  const double target = absmax / level_max;
  int e = 0;
  std::frexp(target, &e);  // target in [2^(e-1), 2^e)
  const double quantum = std::ldexp(1.0, e - 16);
  double scale = std::ceil(target / quantum) * quantum;
  if (scale * level_max < absmax) {
    scale += quantum;  // guard the division's rounding
  }
  const auto result = static_cast<float>(scale);
  if (static_cast<double>(result) != scale || std::isinf(result) || result == 0) {
    throw FormatError("int_scale_for_absmax: absmax " + std::to_string(absmax) + " gives a scale outside fp32");
  }
  int_format(k, result);  // validates
  return result;
}

FormatParams format_params(const FormatSpec& fmt) {
  FormatParams p;
  p.integer = fmt.kind == FormatKind::integer;
  p.bits = fmt.bits;
  p.exp_bits = fmt.exp_bits;
  p.man_bits = fmt.man_bits;
  p.bias = fmt.bias;
  p.emin = 1 - fmt.bias;
  p.ieee_specials = fmt.ieee_specials;
  p.has_nan = fmt.has_nan;
  p.max_finite = fmt.max_finite;
  p.min_normal = fmt.min_normal;
  p.min_subnormal = fmt.min_subnormal;
  if (p.integer) {
    if (!(fmt.int_scale > 0) || !std::isfinite(fmt.int_scale)) {
      throw FormatError("format " + std::string(fmt.name) + ": scale " + std::to_string(fmt.int_scale) +
                        " must be positive and finite");
    }
    p.max_level = fmt.int_max_level;
    p.scale = fmt.int_scale;
    int e = 0;
    const double m = std::frexp(static_cast<double>(fmt.int_scale), &e);
    double odd = std::ldexp(m, 53);
    int k = e - 53;
    while (std::fmod(odd, 2.0) == 0) {
      odd /= 2;
      ++k;
    }
    p.scale_odd = odd;
    p.scale_exp = k;
  }
  return p;
}

}  // namespace wbaudit::sim
