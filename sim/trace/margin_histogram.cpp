// The formats of the margin histogram (margin_histogram.hpp) as its kernel applies them, and the counter of one
// coordinate written plainly.
#include "sim/trace/margin_histogram.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace wbaudit::sim {

std::vector<std::string> margin_format_names() {
  std::vector<std::string> names;
  for (const std::string& name : known_format_names()) {
    if (name != "fp32") {
      names.push_back(name);
    }
  }
  return names;
}

MarginLayout default_margin_layout() {
  MarginLayout l;
  l.formats = margin_format_names();
  return l;
}

MarginLayout margin_layout_for(const std::vector<std::string>& names) {
  const std::vector<std::string> all = margin_format_names();
  if (names.empty()) {
    throw FormatError("margin histogram: no formats (give at least one of the recorded formats, or the default)");
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (std::find(all.begin(), all.end(), names[i]) == all.end()) {
      std::string known;
      for (const std::string& n : all) {
        known += (known.empty() ? "" : ", ") + n;
      }
      throw FormatError("margin histogram: format \"" + names[i] + "\" (entry " + std::to_string(i) +
                        ") is not one it records (" + known + ")");
    }
    if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), names[i]) !=
        names.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw FormatError("margin histogram: format \"" + names[i] + "\" listed twice (entry " + std::to_string(i) + ")");
    }
  }
  MarginLayout l;
  for (const std::string& n : all) {
    if (std::find(names.begin(), names.end(), n) != names.end()) {
      l.formats.push_back(n);
    }
  }
  return l;
}

namespace {

MarginFormat floating_margin_format(const std::string& name, const FormatSpec& spec) {
  if (!spec.subnormals || spec.man_bits > 22 || name == "fp32") {
    throw FormatError("margin histogram: format \"" + name + "\" is not recorded (fp32 is the reference's own; the " +
                      "kernel needs subnormals and M <= 22)");
  }
  MarginFormat f;
  f.man_bits = spec.man_bits;
  f.emin = 1 - spec.bias;
  f.emin_bits = static_cast<std::uint32_t>(f.emin + 127) << 23;
  f.max_bits = std::bit_cast<std::uint32_t>(static_cast<float>(spec.max_finite));
  f.sub_level_a = 0x1p64f;
  f.sub_level_b = std::ldexp(1.0f, f.man_bits - f.emin - 64);
  f.params = format_params(spec);
  return f;
}

MarginFormat integer_margin_format(const FormatSpec& spec, double init_absmax) {
  MarginFormat f;
  f.integer = true;
  if (!(init_absmax > 0) || !std::isfinite(init_absmax)) {
    f.defined = false;
    return f;
  }
  const int k = spec.bits;
  const FormatSpec scaled = int_format(k, int_scale_for_absmax(k, init_absmax));
  const float t = scaled.int_scale / 2.0f;  // exact: the scale is a normal fp32 value
  detail::margin_exponent_fraction(std::bit_cast<std::uint32_t>(t), f.e_t, f.f_t);
  f.inv_significand_t = 1.0f / std::bit_cast<float>(f.f_t | 0x3f800000u);
  // (level max - 1/2) scale: at most 8 + 16 significant bits (int_scale_for_absmax), so exact in fp32.
  f.saturates_above = static_cast<float>((scaled.int_max_level - 0.5) * static_cast<double>(scaled.int_scale));
  f.params = format_params(scaled);
  return f;
}

}  // namespace

std::vector<MarginFormat> margin_formats(const MarginLayout& layout, double init_absmax) {
  if (!layout.rows.valid()) {
    throw FormatError("margin histogram: invalid rows (coarse " + std::to_string(layout.rows.coarse_lo) + ".." +
                      std::to_string(layout.rows.coarse_hi) + ", fine " + std::to_string(layout.rows.fine_lo) + ".." +
                      std::to_string(layout.rows.fine_hi) + ")");
  }
  std::vector<MarginFormat> out;
  for (const std::string& name : layout.formats) {
    const FormatSpec spec = format_from_name(name);
    if (spec.kind == FormatKind::integer) {
      out.push_back(integer_margin_format(spec, init_absmax));
    } else {
      if (!out.empty() && out.back().integer) {
        throw FormatError("margin histogram: floating format \"" + name + "\" listed after an integer format");
      }
      out.push_back(floating_margin_format(name, spec));
    }
  }
  return out;
}

int margin_bin(const MarginRows& rows, const MarginFormat& f, float w, float u) {
  int moment = 0, position = 0;
  return margin_bin(rows, f, w, u, moment, position);
}

int margin_bin(const MarginRows& rows, const MarginFormat& f, float w, float u, int& moment, int& position) {
  moment = -1;
  position = 0;
  const std::uint32_t wb = std::bit_cast<std::uint32_t>(w), ub = std::bit_cast<std::uint32_t>(u);
  const std::uint32_t aw = wb & 0x7fffffffu;
  const bool toward = aw != 0u && ((wb ^ ub) >> 31) != 0u;
  int eu;
  std::uint32_t fu;
  detail::margin_exponent_fraction(ub & 0x7fffffffu, eu, fu);
  // q_F(|w|) and half its gap on u's side, 2^c (floating) or t (intK); kappa = floor(log2|u| - log2(g/2)).
  int kappa, sub = 0;
  bool point, even;
  if (!f.integer) {
    const double q = round_nearest(f.params, static_cast<double>(std::fabs(w)));
    if (q == f.params.max_finite && !toward) {
      return kMarginSaturated;
    }
    int eq = q == 0 ? f.emin : std::ilogb(q);
    const bool edge = toward && q == std::ldexp(1.0, eq) && eq > f.emin;
    eq = eq < f.emin ? f.emin : eq;
    const int c = eq - f.man_bits - 1 - (edge ? 1 : 0);
    kappa = eu - c;
    point = fu == 0u;
    sub = static_cast<int>(fu >> (23 - 5));
    position = static_cast<int>((fu >> kMarginMomentShift) & 0x7fu);
    const double level = q / std::ldexp(1.0, eq - f.man_bits);  // an integer below 2^(M + 1)
    even = std::fmod(level, 2.0) == 0;
  } else {
    const double aw_value = std::fabs(static_cast<double>(w));
    const double q = round_nearest(f.params, aw_value);
    if (q == f.params.max_finite && !toward && aw_value != 0) {
      return kMarginSaturated;
    }
    kappa = eu - f.e_t - (fu < f.f_t ? 1 : 0);
    point = fu == f.f_t;
    const float m = std::bit_cast<float>(fu | 0x3f800000u) * f.inv_significand_t * (fu < f.f_t ? 2.0f : 1.0f);
    const int j = static_cast<int>((m - 1.0f) * static_cast<float>(kMarginSubBins));
    sub = j < 0 ? 0 : (j > kMarginSubBins - 1 ? kMarginSubBins - 1 : j);
    // m's fraction bits, clamped into [1, 2) as sub is
    const std::int32_t bits = std::bit_cast<std::int32_t>(m) - 0x3f800000;
    const std::int32_t clamped = bits < 0 ? 0 : (bits > 0x7fffff ? 0x7fffff : bits);
    position = static_cast<int>((clamped >> kMarginMomentShift) & 0x7f);
    even = std::fmod(q / static_cast<double>(f.params.scale), 2.0) == 0;
  }
  const bool fine = rows.fine(kappa);
  if (fine && !point) {
    moment = rows.moment_offset(kappa, sub);
  }
  const int column = point ? (fine ? kMarginSubBins : 1) + (even ? 0 : 1) : (fine ? sub : 0);
  return rows.row_offset(rows.row(kappa)) + column;
}

}  // namespace wbaudit::sim
