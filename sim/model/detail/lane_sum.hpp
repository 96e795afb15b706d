#pragma once
// Row reductions of the decoder's kernels (softmax, its backward, RMSNorm, cross-entropy max) in a fixed order that
// vectorizes: element j goes to lane j % 8, each lane sums its elements in increasing j, and the lanes are combined
// as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)). The order depends on n alone, so results are the same at any thread
// count; a single sequential accumulator would keep every such loop scalar (no reassociation is allowed:
// -ffp-contract=off, no fast-math).
#include <Kokkos_Core.hpp>

namespace wbaudit::sim::detail {

inline constexpr int kLanes = 8;

template <class Acc>
KOKKOS_INLINE_FUNCTION Acc combine_lanes(const Acc* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// sum_{j < n} term(j) in Acc.
template <class Acc, class Term>
KOKKOS_INLINE_FUNCTION Acc lane_sum(int n, const Term& term) {
  Acc a[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      a[l] += term(j + l);
    }
  }
  for (int l = 0; j < n; ++j, ++l) {
    a[l] += term(j);
  }
  return combine_lanes(a);
}

// max_j x[j] for n >= 1 (exact in any order for non-NaN input; a NaN entry may or may not propagate, as before).
template <class Scalar>
KOKKOS_INLINE_FUNCTION Scalar lane_max(const Scalar* x, int n) {
  Scalar a[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    a[l] = x[0];
  }
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      a[l] = x[j + l] > a[l] ? x[j + l] : a[l];
    }
  }
  for (int l = 0; j < n; ++j, ++l) {
    a[l] = x[j] > a[l] ? x[j] : a[l];
  }
  Scalar m = a[0];
  for (int l = 1; l < kLanes; ++l) {
    m = a[l] > m ? a[l] : m;
  }
  return m;
}

}  // namespace wbaudit::sim::detail
