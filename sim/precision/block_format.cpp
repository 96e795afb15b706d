#include "sim/precision/block_format.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace wbaudit::sim {
namespace {

struct MxRow {
  const char* name;
  const char* element;  // a built-in format name; "int8" means int_format(8, 2^-6)
  int emax_elem;
};

// OCP MX v1.0 section 5 (table of concrete formats): the element's emax is the exponent of its largest power of two.
constexpr MxRow kMxRows[] = {
    {"mxfp8_e4m3", "e4m3", 8}, {"mxfp8_e5m2", "e5m2", 15}, {"mxfp6_e3m2", "e3m2", 4},
    {"mxfp6_e2m3", "e2m3", 2}, {"mxfp4_e2m1", "e2m1", 2},  {"mxint8", "int8", 0},
};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) {
    s += (s.empty() ? "" : ", ") + n;
  }
  return s;
}

BlockFormatSpec mx_format(const MxRow& row, ScaleRule rule) {
  BlockFormatSpec f;
  f.family = BlockFamily::mx;
  f.rule = rule;
  std::snprintf(f.name, sizeof f.name, "%s%s", row.name, rule == ScaleRule::rceil ? ":rceil" : "");
  // MXINT8: 8-bit two's complement with an implicit scale 2^-6; wbaudit uses the symmetric levels -127..127
  // (docs/formats.md says why -2 = code 0x80 is not produced).
  f.element = std::string(row.element) == "int8" ? int_format(8, 0x1p-6f) : format_from_name(row.element);
  f.block_size = 32;
  f.emax_elem = row.emax_elem;
  f.max_elem = f.element.max_finite;
  return f;
}

BlockFormatSpec nvfp4_format(bool tiles_2d) {
  BlockFormatSpec f;
  f.family = BlockFamily::nvfp4;
  std::snprintf(f.name, sizeof f.name, "%s", tiles_2d ? "nvfp4:2d" : "nvfp4");
  f.element = format_from_name("e2m1");
  f.block_size = 16;
  f.tiles_2d = tiles_2d;
  f.emax_elem = 2;
  f.max_elem = 6.0;
  return f;
}

}  // namespace

std::vector<std::string> known_block_format_names() {
  std::vector<std::string> names;
  for (const auto& row : kMxRows) {
    names.emplace_back(row.name);
  }
  for (const auto& row : kMxRows) {
    names.push_back(std::string(row.name) + ":rceil");
  }
  names.emplace_back("nvfp4");
  names.emplace_back("nvfp4:2d");
  return names;
}

BlockFormatSpec block_format_from_name(std::string_view name) {
  const auto colon = name.find(':');
  const std::string_view base = name.substr(0, colon);
  const std::string_view option = colon == std::string_view::npos ? std::string_view{} : name.substr(colon + 1);
  for (const auto& row : kMxRows) {
    if (base != row.name) {
      continue;
    }
    if (colon == std::string_view::npos || option == "floor") {
      return mx_format(row, ScaleRule::floor);
    }
    if (option == "rceil") {
      return mx_format(row, ScaleRule::rceil);
    }
    throw FormatError("block format \"" + std::string(name) + "\": unknown scale rule \"" + std::string(option) +
                      "\" (known: floor, rceil)");
  }
  if (base == "nvfp4") {
    if (colon == std::string_view::npos) {
      return nvfp4_format(false);
    }
    if (option == "2d") {
      return nvfp4_format(true);
    }
    throw FormatError("block format \"" + std::string(name) + "\": unknown option \"" + std::string(option) +
                      "\" (known: 2d)");
  }
  throw FormatError("unknown block format \"" + std::string(name) + "\" (known: " + joined(known_block_format_names()) +
                    ")");
}

bool is_block_format_name(std::string_view name) {
  try {
    block_format_from_name(name);
    return true;
  } catch (const FormatError&) {
    return false;
  }
}

std::uint8_t e8m0_encode(int exponent) {
  if (exponent < kE8M0MinExponent || exponent > kE8M0MaxExponent) {
    throw FormatError("e8m0_encode: exponent " + std::to_string(exponent) +
                      " is outside E8M0's range [-127, 127] (0xFF is NaN, there is no zero)");
  }
  return static_cast<std::uint8_t>(exponent + kE8M0Bias);
}

BlockFormatParams block_format_params(const BlockFormatSpec& fmt) {
  BlockFormatParams p;
  p.family = fmt.family;
  p.rule = fmt.rule;
  p.block_size = fmt.block_size;
  p.tiles_2d = fmt.tiles_2d;
  p.emax_elem = fmt.emax_elem;
  p.max_elem = fmt.max_elem;
  p.integer_elem = fmt.element.kind == FormatKind::integer;
  p.elem = format_params(fmt.element);
  p.e4m3 = format_params(format_from_name("e4m3"));
  return p;
}

std::int64_t block_count(const BlockFormatSpec& fmt, const RowMajorShape& shape) {
  const std::int64_t b = fmt.block_size;
  const std::int64_t per_row = (shape.cols + b - 1) / b;
  const std::int64_t row_groups = fmt.tiles_2d ? (shape.rows + b - 1) / b : shape.rows;
  return per_row * row_groups;
}

BlockLocation block_at(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::int64_t block) {
  const std::int64_t b = fmt.block_size;
  const std::int64_t per_row = (shape.cols + b - 1) / b;
  BlockLocation where;
  where.block = block;
  const std::int64_t row_group = per_row > 0 ? block / per_row : 0;
  const std::int64_t j = per_row > 0 ? block % per_row : 0;
  where.col_begin = j * b;
  where.col_end = std::min(shape.cols, (j + 1) * b);
  where.row_begin = fmt.tiles_2d ? row_group * b : row_group;
  where.row_end = fmt.tiles_2d ? std::min(shape.rows, (row_group + 1) * b) : row_group + 1;
  return where;
}

BlockLocation block_of_coordinate(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::int64_t coordinate) {
  const std::int64_t b = fmt.block_size;
  const std::int64_t row = shape.cols > 0 ? coordinate / shape.cols : 0;
  const std::int64_t col = shape.cols > 0 ? coordinate % shape.cols : 0;
  const std::int64_t per_row = (shape.cols + b - 1) / b;
  return block_at(fmt, shape, (fmt.tiles_2d ? row / b : row) * per_row + col / b);
}

std::string describe_block(const BlockLocation& where) {
  const auto range = [](std::int64_t a, std::int64_t b) {
    return b - a == 1 ? std::to_string(a) : std::to_string(a) + ".." + std::to_string(b - 1);
  };
  return "block " + std::to_string(where.block) + " (row" + (where.row_end - where.row_begin == 1 ? " " : "s ") +
         range(where.row_begin, where.row_end) + ", column" + (where.col_end - where.col_begin == 1 ? " " : "s ") +
         range(where.col_begin, where.col_end) + ")";
}

}  // namespace wbaudit::sim
