#pragma once
// The write-back kernel w <- q(w + u) over Kokkos Views, with exact per-group event counts.
#include <Kokkos_Core.hpp>
#include <cstdint>

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"

namespace wbaudit::sim {

struct WritebackCounts {
  std::int64_t nonzero = 0;     // u != 0
  std::int64_t erased = 0;      // u != 0 and q(w + u) == w
  std::int64_t saturated = 0;   // |w + u| beyond max finite (saturated to it)
  std::int64_t applied = 0;     // q(w + u) != w
  std::int64_t sr_applied = 0;  // SR policies: coordinates where the random draw (not nearest) decided the value
  std::int64_t nonfinite = 0;   // w or u NaN/inf (the host wrapper throws NonFiniteError when > 0)
};

class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Keys the counter-based RNG (Philox4x32-10): one stream per (seed, step, tensor id, coordinate).
struct RngKey {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  std::uint32_t tensor_id = 0;
};

// w holds values exactly representable in fmt (as fp32); u holds fp32 proposals. For Policy::master use
// writeback_master. Throws NonFiniteError naming tensor id and step when any w or u is NaN/inf (w is then
// left unchanged). Bitwise identical for any thread count and chunking.
template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u);

// Master-copy contrast: master += u in fp32, w = q_nearest(master). Events are counted against w.
template <class ExecSpace>
WritebackCounts writeback_master(const ExecSpace& space, const FormatSpec& fmt,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> master,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u);

// Projected events on an fp32 reference state (nothing is modified): counts u != 0 and
// q_F(q_F(w) + u) == q_F(w) under nearest. Returned in .nonzero and .erased.
template <class ExecSpace>
WritebackCounts project_erasure(const ExecSpace& space, const FormatSpec& fmt,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> u);

// Rounds every element of x into fmt (nearest); used to initialize persistent-native weights.
template <class ExecSpace>
void quantize(const ExecSpace& space, const FormatSpec& fmt, Kokkos::View<float*, typename ExecSpace::memory_space> x);

}  // namespace wbaudit::sim
