#pragma once
// The bin of one coordinate in the reference trace's log2-ratio histogram (docs/trace-format.md): d =
// floor(log2|w|) - log2|u| in bins of RatioHistogramLayout, clamped into the first and last bins. The same rule
// as the simulator's reference recording (sim/run.cpp), as a function the Python recorder shares.
#include <Kokkos_Core.hpp>
#include <cmath>

#include "sim/trace/trace.hpp"

namespace wbaudit::sim {

inline constexpr int kRatioBinZeroProposal = -1;  // u == 0: not a proposal
inline constexpr int kRatioBinZeroWeight = -2;    // u != 0 and w == 0: counted in zero_weight, not binned
inline constexpr int kRatioBinNonFinite = -3;     // w or u NaN/inf

KOKKOS_INLINE_FUNCTION int ratio_bin(double d_min, double bin_width, int bins, float w, float u) {
  if (!std::isfinite(u) || !std::isfinite(w)) {
    return kRatioBinNonFinite;
  }
  if (u == 0.0f) {
    return kRatioBinZeroProposal;
  }
  if (w == 0.0f) {
    return kRatioBinZeroWeight;
  }
  const double d = static_cast<double>(std::ilogb(w)) - std::log2(std::fabs(static_cast<double>(u)));
  const double b = std::floor((d - d_min) / bin_width);
  return b < 0 ? 0 : (b >= bins ? bins - 1 : static_cast<int>(b));
}

}  // namespace wbaudit::sim
