#pragma once
// Block-scaled formats (docs/formats.md, "Block-scaled formats"): OCP Microscaling (MX v1.0: 32-element blocks along
// the last dimension sharing an E8M0 power-of-two scale X, elements FP8 E4M3/E5M2, FP6 E3M2/E2M3, FP4 E2M1 or INT8)
// and NVIDIA's NVFP4 (16-element blocks, an E4M3 block scale s_b times an fp32 tensor scale 1 / S_enc). A tensor is
// held as its decoded fp32 values; a BlockFormatSpec is a plain value usable inside Kokkos kernels.
//
// Layout: a tensor is a row-major [rows x cols] matrix (a 1-D tensor is one row; an N-D tensor has cols = its last
// dimension). Blocks run along rows: block j of a row holds columns j*B .. min((j+1)*B, cols) - 1, so a row whose
// length is not a multiple of B ends with a short block (any cols >= 1 fits). nvfp4:2d uses 16x16 tiles instead:
// tile (i, j) holds rows 16i .. 16i+15 and columns 16j .. 16j+15, short at the bottom and right edges.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "sim/precision/format.hpp"
#include "sim/precision/rounding.hpp"

namespace wbaudit::sim {

enum class BlockFamily : int { mx, nvfp4 };

// MX scale rules. floor: the OCP MX v1.0 rule, E = floor(log2 amax) - emax_elem. rceil: the smallest power of two X
// with amax / X <= max_elem (NVIDIA's libraries). Both are clamped below at E = -127 (amax = 0 gives 2^-127); an E
// above 127 leaves the E8M0 range and is refused by the write-back (BlockScaleError).
enum class ScaleRule : int { floor, rceil };

struct BlockFormatSpec {
  BlockFamily family = BlockFamily::mx;
  char name[24] = {};  // canonical name: "mxfp4_e2m1", "mxfp4_e2m1:rceil", "nvfp4", "nvfp4:2d"
  FormatSpec element;  // e4m3, e5m2, e3m2, e2m3, e2m1, or int8 with scale 2^-6 (MXINT8: levels -127..127)
  ScaleRule rule = ScaleRule::floor;  // MX only
  int block_size = 32;                // elements per block along a row (nvfp4:2d: the side of a square tile)
  bool tiles_2d = false;
  int emax_elem = 0;    // exponent of the element format's largest power of two: 8/15/4/2/2/0 (floor rule)
  double max_elem = 0;  // largest element magnitude: 448, 57344, 28, 7.5, 6, 127/64
};

// Names: mxfp8_e4m3, mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4_e2m1, mxint8, each optionally with ":floor" (the
// default, not part of the canonical name) or ":rceil"; nvfp4 and nvfp4:2d. Throws FormatError listing the known
// names for an unknown name, or naming the option and the known options for an unknown option.
BlockFormatSpec block_format_from_name(std::string_view name);
// Every canonical block format name (14).
std::vector<std::string> known_block_format_names();
// Whether `name` names a block format (no throw).
bool is_block_format_name(std::string_view name);

// A tensor's shape as the block layout sees it.
struct RowMajorShape {
  std::int64_t rows = 1;
  std::int64_t cols = 0;
  std::int64_t size() const { return rows * cols; }
};

// Where a block lies: its index (row-major over blocks: row by row, or tile-row by tile-row) and its rows and columns
// (half-open ranges).
struct BlockLocation {
  std::int64_t block = 0;
  std::int64_t row_begin = 0, row_end = 0;
  std::int64_t col_begin = 0, col_end = 0;
};
std::int64_t block_count(const BlockFormatSpec& fmt, const RowMajorShape& shape);
BlockLocation block_of_coordinate(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::int64_t coordinate);
BlockLocation block_at(const BlockFormatSpec& fmt, const RowMajorShape& shape, std::int64_t block);
std::string describe_block(const BlockLocation& where);  // "block 5 (row 0, columns 160..191)"

// ---- E8M0 (OCP MX v1.0 section 5.4): 8 exponent bits, bias 127, no sign, no zero, 0xFF is NaN ----
inline constexpr int kE8M0Bias = 127;
inline constexpr int kE8M0MinExponent = -127;  // code 0x00
inline constexpr int kE8M0MaxExponent = 127;   // code 0xFE
inline constexpr std::uint8_t kE8M0Nan = 0xFF;

// 2^(code - 127), NaN for 0xFF.
KOKKOS_INLINE_FUNCTION double e8m0_decode(std::uint8_t code) {
  if (code == kE8M0Nan) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return detail::pow2(static_cast<int>(code) - kE8M0Bias);
}
// The code of 2^exponent; throws FormatError for an exponent outside [-127, 127].
std::uint8_t e8m0_encode(int exponent);

// ---- Scale rules (exact: amax is an exact magnitude hi + lo, as the exact maximum of |w + u| over a block) ----

// floor(log2 amax) of an exact magnitude amax > 0 (normalized hi + lo).
KOKKOS_INLINE_FUNCTION int floor_log2_exact(const ExactSum& amax) {
  const int e = detail::exponent_of(amax.hi);
  return amax.lo < 0 && amax.hi == detail::pow2(e) ? e - 1 : e;  // just below a power of two
}

// floor (OCP MX v1.0 section 6.3): floor(log2 amax) - emax_elem, clamped below at -127; amax = 0 gives -127. A
// result above 127 is out of E8M0's range (the reference library microsoft/microxcaling sets such a scale to NaN).
KOKKOS_INLINE_FUNCTION int mx_floor_exponent(const ExactSum& amax, int emax_elem) {
  if (amax.hi == 0) {
    return kE8M0MinExponent;
  }
  const int E = floor_log2_exact(amax) - emax_elem;
  return E < kE8M0MinExponent ? kE8M0MinExponent : E;
}

// rceil: the smallest E >= -127 with amax <= max_elem * 2^E (so amax / 2^E never saturates); amax = 0 gives -127. A
// result above 127 is out of E8M0's range.
KOKKOS_INLINE_FUNCTION int mx_rceil_exponent(const ExactSum& amax, double max_elem, int emax_elem) {
  if (amax.hi == 0) {
    return kE8M0MinExponent;
  }
  // With f = floor(log2 amax) and 2^emax_elem <= max_elem < 2^(emax_elem + 1), E = f - emax_elem - 1 fails
  // (max_elem * 2^E < 2^f <= amax) and E = f - emax_elem + 1 holds (max_elem * 2^E >= 2^(f+1) > amax).
  int E = floor_log2_exact(amax) - emax_elem;
  if (detail::dd_greater(amax, max_elem * detail::pow2(E))) {
    E += 1;
  }
  return E < kE8M0MinExponent ? kE8M0MinExponent : E;
}

// ---- NVFP4 scales (fp32 arithmetic as NVIDIA Transformer Engine's NVFP4 cast kernels; docs/formats.md) ----

// S_enc = fl32(448 * 6 / amax_t), FLT_MAX when that overflows, 1 when amax_t is 0 (amax_t: the tensor's largest
// |value| in fp32).
KOKKOS_INLINE_FUNCTION float nvfp4_tensor_scale(float amax_t) {
  if (amax_t == 0.0f) {
    return 1.0f;
  }
  const float s = 2688.0f / amax_t;
  return s > std::numeric_limits<float>::max() ? std::numeric_limits<float>::max() : s;
}

// s_b = RNE_e4m3_saturating(fl32(amax_b * fl32(S_enc * fl32(1 / 6)))) (amax_b: the block's largest |value| in fp32).
// e4m3: format_params(format_from_name("e4m3")).
KOKKOS_INLINE_FUNCTION float nvfp4_block_scale(const FormatParams& e4m3, float amax_b, float s_enc) {
  constexpr float kInvSix = 1.0f / 6.0f;  // 0x1.555556p-3, as TE's fp4_max_inv
  const float target = amax_b * (s_enc * kInvSix);
  return static_cast<float>(round_nearest(e4m3, static_cast<double>(target)));
}

// The E2M1 magnitudes q_0 .. q_7 (codes 0..7).
inline constexpr float kE2M1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// A decoded NVFP4 value: fl32(q * s_b / S_enc), with q * s_b exact in fp32 (one rounding).
KOKKOS_INLINE_FUNCTION float nvfp4_decode(float q, float s_b, float s_enc) {
  return (q * s_b) / s_enc;
}

// ---- Kernel-side parameters ----
struct BlockFormatParams {
  BlockFamily family = BlockFamily::mx;
  ScaleRule rule = ScaleRule::floor;
  int block_size = 32;
  bool tiles_2d = false;
  int emax_elem = 0;
  double max_elem = 0;
  bool integer_elem = false;  // mxint8
  FormatParams elem;          // the element format
  FormatParams e4m3;          // NVFP4: the block scale's format
};
BlockFormatParams block_format_params(const BlockFormatSpec& fmt);

// The MX exponent of a block under the format's rule (see above).
KOKKOS_INLINE_FUNCTION int mx_scale_exponent(const BlockFormatParams& p, const ExactSum& amax) {
  return p.rule == ScaleRule::floor ? mx_floor_exponent(amax, p.emax_elem)
                                    : mx_rceil_exponent(amax, p.max_elem, p.emax_elem);
}

}  // namespace wbaudit::sim
