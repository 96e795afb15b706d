#pragma once
// The exact *expected* erased events of a stochastic write-back policy on an fp32 reference state: the projection
// that matches a target run whose write-back is `stochastic` (exact or r-bit) or `deadzone-sr`.
//
// For a coordinate with reference weight w and proposal u != 0, let wq = q_F(w) (nearest, as the nearest
// projection does) and x = wq + u (exact). With a and b the neighbours of x in F toward and away from zero and
// p = P(away) (exact SR: (|x| - a)/(b - a); r-bit SR: floor(2^r (|x| - a)/(b - a)) / 2^r, zero inside the r-bit
// dead zone),
//   P(erased) = [a == wq] (1 - p) + [b == wq] p        (stochastic; x on the grid or saturated: [q(x) == wq])
//   deadzone-sr: 0 where nearest applies the update (q_nearest(x) != wq), else the stochastic P(erased).
// The expected erased count of a group is the sum of P(erased) over its coordinates with u != 0; it is the mean
// of the realized erased count over the SR random streams (tested against many SR write-backs).
//
// Determinism: with r-bit SR every P(erased) is a multiple of 2^-r, so the sum is an exact integer count of 2^-r
// units. With exact SR the probabilities are summed in fixed blocks of kExpectedErasureBlock coordinates, each
// block in index order, and the block sums in block order: the same total for any thread count.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rounding.hpp"

namespace wbaudit::sim {

inline constexpr std::int64_t kExpectedErasureBlock = 1024;

struct ExpectedErasure {
  std::int64_t nonzero = 0;    // u != 0
  double expected_erased = 0;  // sum over u != 0 of P(q(wq + u) == wq)
};

// P(q^pi(wq + u) == wq) for one coordinate; wq must be a value of F (as a double), u finite. Policies stochastic
// and deadzone-sr (with policy.sr_bits); nearest gives 0 or 1. Usable inside kernels.
KOKKOS_INLINE_FUNCTION double erasure_probability(const FormatParams& p, const WritebackPolicy& policy, double wq,
                                                  float u) {
  const Bracket b = bracket_of(p, exact_sum(static_cast<float>(wq), u));
  const double nearest = nearest_of(b);
  const bool use_sr = policy.policy == Policy::stochastic || (policy.policy == Policy::deadzone_sr && nearest == wq);
  if (!use_sr || b.exact) {
    return nearest == wq ? 1.0 : 0.0;
  }
  double p_away;
  if (policy.sr_bits == 0) {
    p_away = (b.rem.hi + b.rem.lo) / b.S;  // exact rem / S, rounded once (S = 1 for floating formats)
  } else {
    const double two_r = detail::pow2(policy.sr_bits);
    double d;
    ExactSum unused;
    detail::divmod_exact(ExactSum{b.rem.hi * two_r, b.rem.lo * two_r}, b.S, 1.0 / b.S, d, unused);
    p_away = d / two_r;  // D / 2^r exactly
  }
  const double toward = b.sign * b.tz;
  const double away = b.sign * b.away;
  return (toward == wq ? 1.0 - p_away : 0.0) + (away == wq ? p_away : 0.0);
}

// The expected erased events of `policy` (stochastic or deadzone-sr, any sr_bits) over an fp32 reference state w
// with proposals u, in format fmt (for intK: the scale the target would use). Nothing is modified. Throws
// std::invalid_argument for another policy or extents that differ, NonFiniteError (writeback.hpp) naming the
// format, the count and the first coordinate when w or u holds NaN/inf.
template <class ExecSpace>
ExpectedErasure expected_erasure(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u);

inline ExpectedErasure expected_erasure(const FormatSpec& fmt, const WritebackPolicy& policy,
                                        const Kokkos::View<const float*>& w, const Kokkos::View<const float*>& u) {
  return expected_erasure(Kokkos::DefaultExecutionSpace{}, fmt, policy, w, u);
}

// The name of a projected policy as stored in traces and named in reports: "stochastic", "stochastic-r8",
// "deadzone-sr", "deadzone-sr-r8" (r = sr_bits), "nearest".
std::string projection_name(const WritebackPolicy& policy);

}  // namespace wbaudit::sim
