#pragma once
// Number formats: IEEE-like and OCP floating formats, and symmetric integer formats with a per-tensor scale.
// A FormatSpec is a plain value usable inside Kokkos kernels.
#include <Kokkos_Core.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace wbaudit::sim {

class FormatError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class FormatKind : int { floating, integer };

struct FormatSpec {
  FormatKind kind = FormatKind::floating;
  char name[16] = {};         // "e4m3", "int4", ...
  int bits = 32;              // storage width
  int exp_bits = 8;           // E (floating)
  int man_bits = 23;          // M (floating)
  int bias = 127;             // exponent bias (floating)
  bool has_inf = true;        // IEEE-like inf codes
  bool has_nan = true;        // any NaN code
  bool ieee_specials = true;  // top exponent reserved for inf/NaN (false for e4m3 "fn" and the FP6/FP4 formats)
  bool subnormals = true;
  double max_finite = 0;
  double min_normal = 0;
  double min_subnormal = 0;
  // integer formats: value = scale * n, n in [-int_max_level, int_max_level]
  int int_max_level = 0;
  float int_scale = 1.0f;
};

// Built-in names: fp32 bf16 fp16 e5m2 e4m3 e3m2 e2m3 e2m1, and int2..int8 (scale 1 until set with with_scale).
// Throws FormatError listing the known names when the name is unknown.
FormatSpec format_from_name(std::string_view name);
std::vector<std::string> known_format_names();
// Integer format intK (K = 2..8) with the given scale; throws FormatError for K outside 2..8 or a bad scale.
FormatSpec int_format(int k, float scale);
// The scale docs/science.md prescribes for intK: absmax at initialization / level max, rounded so that every
// scale * n is exactly representable in fp32 (documented in docs/formats.md).
float int_scale_for_absmax(int k, double absmax);

}  // namespace wbaudit::sim
