#pragma once
// Compensated (Neumaier) summation: every reported sum in wbaudit::stats goes through this, so results do not
// degrade with table size and are exactly reproducible for a fixed summation order.
// Neumaier, "Rundungsfehleranalyse einiger Verfahren zur Summation endlicher Summen", ZAMM 54 (1974).
// Requires strict IEEE evaluation (no fast-math, no FMA contraction), which wbaudit_target_defaults enforces.
#include <Kokkos_Core.hpp>
#include <cmath>

namespace wbaudit::stats {

namespace detail {
// |x| inside kernels: Kokkos::Experimental::fabs up to Kokkos 3.6 (Debian's 3.4), Kokkos::fabs from 3.7 on (the
// Experimental spelling is gone in 4.x).
KOKKOS_INLINE_FUNCTION double magnitude(double x) {
#if KOKKOS_VERSION >= 30700
  return Kokkos::fabs(x);
#else
  return Kokkos::Experimental::fabs(x);
#endif
}
}  // namespace detail

class NeumaierSum {
 public:
  KOKKOS_INLINE_FUNCTION void add(double x) {
    double const t = m_sum + x;
    if (detail::magnitude(m_sum) >= detail::magnitude(x)) {
      m_compensation += (m_sum - t) + x;
    } else {
      m_compensation += (x - t) + m_sum;
    }
    m_sum = t;
  }
  KOKKOS_INLINE_FUNCTION double value() const { return m_sum + m_compensation; }

 private:
  double m_sum = 0.0;
  double m_compensation = 0.0;
};

// Compensated sum of a range of doubles (host).
template <class Range>
double compensated_sum(Range const& values) {
  NeumaierSum s;
  for (double v : values) {
    s.add(v);
  }
  return s.value();
}

}  // namespace wbaudit::stats
