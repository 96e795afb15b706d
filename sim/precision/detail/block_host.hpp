#pragma once
// Internal to the precision layer: argument checks and error messages shared by the block write-back's scalar
// reference and its kernels, so both refuse the same input with the same words.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"

namespace wbaudit::sim::detail {

inline std::string block_float_text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// "block_writeback (tensor 3, step 7, format mxfp4_e2m1)"
inline std::string block_context(const char* where, const RngKey& key, const BlockFormatSpec& fmt) {
  return std::string(where) + " (tensor " + std::to_string(key.tensor_id) + ", step " + std::to_string(key.step) +
         ", format " + fmt.name + ")";
}

// Throws std::invalid_argument unless every extent equals shape.size() and the shape is a valid matrix.
inline void check_block_shape(const char* where, const RowMajorShape& shape, std::size_t n_a, std::size_t n_b) {
  if (shape.rows < 0 || shape.cols < 0 || (shape.rows > 0 && shape.cols == 0 && n_a > 0)) {
    throw std::invalid_argument(std::string(where) + ": shape [" + std::to_string(shape.rows) + " x " +
                                std::to_string(shape.cols) + "] is not a tensor shape");
  }
  if (static_cast<std::size_t>(shape.size()) != n_a || n_a != n_b) {
    throw std::invalid_argument(std::string(where) + ": shape [" + std::to_string(shape.rows) + " x " +
                                std::to_string(shape.cols) + "] holds " + std::to_string(shape.size()) +
                                " elements but the arrays hold " + std::to_string(n_a) + " and " + std::to_string(n_b));
  }
}

// Throws std::invalid_argument for a policy, step or coordinate range the write-back cannot key.
inline void check_block_policy(const char* where, const WritebackPolicy& policy, const RngKey& key,
                               std::uint64_t first_coordinate, std::size_t n) {
  if (policy.policy == Policy::master) {
    throw std::invalid_argument(std::string(where) + ": policy master needs the master copy; use the master variant");
  }
  if (policy.sr_bits < 0 || policy.sr_bits > 32) {
    throw std::invalid_argument(std::string(where) + ": sr_bits = " + std::to_string(policy.sr_bits) +
                                " is outside 0..32");
  }
  if (policy.stream == SrStream::philox_packed && policy.sr_bits > 16) {
    throw std::invalid_argument(std::string(where) + ": SR stream philox-packed needs sr_bits 0 or 1..16, not " +
                                std::to_string(policy.sr_bits));
  }
  if (key.step >= kRngMaxStep) {
    throw std::invalid_argument(std::string(where) + ": step " + std::to_string(key.step) +
                                " exceeds the RNG counter (< 2^32)");
  }
  if (first_coordinate + n > kRngMaxCoordinate) {
    throw std::invalid_argument(std::string(where) + ": coordinates up to " + std::to_string(first_coordinate + n) +
                                " exceed the RNG counter (< 2^48)");
  }
}

// NonFiniteError for the first coordinate whose input is NaN/inf; values names the arrays and their values there
// ("w = nan, u = 0.5").
[[noreturn]] inline void throw_block_nonfinite(const std::string& context, const BlockFormatSpec& fmt,
                                               const RowMajorShape& shape, std::int64_t count, std::int64_t coordinate,
                                               const std::string& values) {
  throw NonFiniteError(context + ": " + std::to_string(count) + " coordinate(s) with non-finite input; first in " +
                       describe_block(block_of_coordinate(fmt, shape, coordinate)) + " at coordinate " +
                       std::to_string(coordinate) + ": " + values + "; nothing was written");
}

// BlockScaleError for a block whose scale or decoded values leave the representable range.
[[noreturn]] inline void throw_block_range(const std::string& context, const BlockFormatSpec& fmt,
                                           const RowMajorShape& shape, std::int64_t block, const std::string& why) {
  throw BlockScaleError(context + ": " + describe_block(block_at(fmt, shape, block)) + ": " + why +
                        "; nothing was written");
}

// The reason text of an MX block out of range (exponent, and the block's largest |value| as a double).
inline std::string mx_range_reason(int exponent, double amax) {
  char buf[160];
  if (exponent > kE8M0MaxExponent) {
    std::snprintf(buf, sizeof buf, "its largest |w + u| = %.9g needs scale 2^%d, beyond E8M0's 2^127", amax, exponent);
  } else {
    std::snprintf(buf, sizeof buf, "its largest |w + u| = %.9g at scale 2^%d decodes beyond fp32's range", amax,
                  exponent);
  }
  return buf;
}

}  // namespace wbaudit::sim::detail
