// Write-back kernels and their explicit instantiations for the host execution spaces (Serial, OpenMP).
#include "sim/precision/writeback.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace wbaudit::sim {
namespace {

template <class MemorySpace>
using FloatView = Kokkos::View<float*, MemorySpace>;
template <class MemorySpace>
using ConstFloatView = Kokkos::View<const float*, MemorySpace>;

// Integer event counts are summed, so the totals do not depend on the order of the reduction.
struct CountsReducerBase {
  using value_type = WritebackCounts;
  KOKKOS_INLINE_FUNCTION void init(value_type& c) const { c = value_type{}; }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& a, const volatile value_type& b) const {
    a.nonzero = a.nonzero + b.nonzero;
    a.erased = a.erased + b.erased;
    a.saturated = a.saturated + b.saturated;
    a.applied = a.applied + b.applied;
    a.sr_applied = a.sr_applied + b.sr_applied;
    a.nonfinite = a.nonfinite + b.nonfinite;
    a.sr_truncated = a.sr_truncated + b.sr_truncated;
  }
};

KOKKOS_INLINE_FUNCTION bool finite(float v) {
  return std::isfinite(v);
}

template <class MemorySpace>
struct WritebackKernel : CountsReducerBase {
  FloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  WritebackPolicy policy;
  RngKey key;
  std::uint64_t first_coordinate;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, value_type& c) const {
    const float wi = w(i);
    const float ui = u(i);
    const WritebackOutcome out = writeback_value(p, policy, key, first_coordinate + i, wi, ui);
    const bool changed = out.value != wi;  // +0 and -0 compare equal
    c.nonzero += ui != 0;
    c.erased += ui != 0 && !changed;
    c.applied += changed;
    c.saturated += out.saturated;
    c.sr_applied += out.random;
    c.sr_truncated += out.truncated;
    w(i) = out.value;
  }
};

template <class MemorySpace>
struct NonFiniteCount {
  ConstFloatView<MemorySpace> a;
  ConstFloatView<MemorySpace> b;  // may be empty
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t& n) const {
    n += !finite(a(i)) || (b.extent(0) > 0 && !finite(b(i)));
  }
};

template <class MemorySpace>
struct FirstNonFinite {
  ConstFloatView<MemorySpace> a;
  ConstFloatView<MemorySpace> b;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t& first) const {
    if ((!finite(a(i)) || (b.extent(0) > 0 && !finite(b(i)))) && i < first) first = i;
  }
};

std::string float_text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// Throws NonFiniteError naming the context and the first offending coordinate when a or b holds NaN/inf.
template <class ExecSpace>
void require_finite(const ExecSpace& space, const std::string& context, const char* name_a,
                    ConstFloatView<typename ExecSpace::memory_space> a, const char* name_b,
                    ConstFloatView<typename ExecSpace::memory_space> b) {
  using MS = typename ExecSpace::memory_space;
  const auto n = static_cast<std::int64_t>(a.extent(0));
  std::int64_t bad = 0;
  Kokkos::parallel_reduce("wbaudit::sim::precision::require_finite::count", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
                          NonFiniteCount<MS>{a, b}, bad);
  if (bad == 0) return;
  std::int64_t first = n;
  Kokkos::parallel_reduce("wbaudit::sim::precision::require_finite::first", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
                          FirstNonFinite<MS>{a, b}, Kokkos::Min<std::int64_t>(first));
  auto ha =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, Kokkos::subview(a, Kokkos::make_pair(first, first + 1)));
  std::string msg = context + ": " + std::to_string(bad) + " non-finite value(s); first at coordinate " +
                    std::to_string(first) + ": " + name_a + " = " + float_text(ha(0));
  if (b.extent(0) > 0) {
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{},
                                                  Kokkos::subview(b, Kokkos::make_pair(first, first + 1)));
    msg += std::string(", ") + name_b + " = " + float_text(hb(0));
  }
  throw NonFiniteError(msg);
}

void require_same_extent(const char* where, std::size_t a, std::size_t b) {
  if (a != b) {
    throw std::invalid_argument(std::string(where) + ": extents differ (" + std::to_string(a) + " vs " +
                                std::to_string(b) + ")");
  }
}

template <class MemorySpace>
struct MasterKernel : CountsReducerBase {
  FloatView<MemorySpace> master;
  FloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, value_type& c) const {
    const float ui = u(i);
    const float m = master(i) + ui;  // the fp32 master update
    const float wi = w(i);
    if (!finite(m)) {  // overflow of the master copy itself
      c.nonfinite += 1;
      return;
    }
    const Bracket b = bracket_of(p, ExactSum{static_cast<double>(m), 0.0});
    const auto value = static_cast<float>(nearest_of(b));
    const bool changed = value != wi;
    c.nonzero += ui != 0;
    c.erased += ui != 0 && !changed;
    c.applied += changed;
    c.saturated += b.saturated;
    master(i) = m;
    w(i) = value;
  }
};

template <class MemorySpace>
struct ProjectKernel : CountsReducerBase {
  ConstFloatView<MemorySpace> w;
  ConstFloatView<MemorySpace> u;
  FormatParams p;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, value_type& c) const {
    const float ui = u(i);
    const auto wq = static_cast<float>(round_nearest(p, static_cast<double>(w(i))));
    const Bracket b = bracket_of(p, exact_sum(wq, ui));
    const auto value = static_cast<float>(nearest_of(b));
    const bool changed = value != wq;
    c.nonzero += ui != 0;
    c.erased += ui != 0 && !changed;
    c.applied += changed;
    c.saturated += b.saturated;
  }
};

template <class MemorySpace>
struct QuantizeKernel {
  FloatView<MemorySpace> x;
  FormatParams p;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    x(i) = static_cast<float>(round_nearest(p, static_cast<double>(x(i))));
  }
};

template <class ExecSpace>
Kokkos::RangePolicy<ExecSpace> range(const ExecSpace& space, std::size_t n, int chunk_size) {
  Kokkos::RangePolicy<ExecSpace> policy(space, 0, static_cast<std::int64_t>(n));
  if (chunk_size > 0) policy.set_chunk_size(chunk_size);
  return policy;
}

}  // namespace

template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u,
                          const WritebackOptions& options) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("writeback", w.extent(0), u.extent(0));
  if (policy.policy == Policy::master) {
    throw std::invalid_argument("writeback: policy master needs the master copy; use writeback_master");
  }
  if (policy.sr_bits < 0 || policy.sr_bits > 32) {
    throw std::invalid_argument("writeback: sr_bits = " + std::to_string(policy.sr_bits) + " is outside 0..32");
  }
  if (key.step >= kRngMaxStep) {
    throw std::invalid_argument("writeback: step " + std::to_string(key.step) + " exceeds the RNG counter (< 2^32)");
  }
  if (options.first_coordinate + w.extent(0) > kRngMaxCoordinate) {
    throw std::invalid_argument("writeback: coordinates up to " +
                                std::to_string(options.first_coordinate + w.extent(0)) +
                                " exceed the RNG counter (< 2^48)");
  }
  const FormatParams p = format_params(fmt);
  require_finite(space,
                 "writeback (tensor " + std::to_string(key.tensor_id) + ", step " + std::to_string(key.step) +
                     ", format " + fmt.name + "); w left unchanged",
                 "w", ConstFloatView<MS>(w), "u", u);
  WritebackCounts counts;
  Kokkos::parallel_reduce("wbaudit::sim::precision::writeback::kernel", range(space, w.extent(0), options.chunk_size),
                          WritebackKernel<MS>{{}, w, u, p, policy, key, options.first_coordinate}, counts);
  return counts;
}

template <class ExecSpace>
WritebackCounts writeback(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy, RngKey key,
                          Kokkos::View<float*, typename ExecSpace::memory_space> w,
                          Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  return writeback(space, fmt, policy, key, w, u, WritebackOptions{});
}

template <class ExecSpace>
WritebackCounts writeback_master(const ExecSpace& space, const FormatSpec& fmt,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> master,
                                 Kokkos::View<float*, typename ExecSpace::memory_space> w,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("writeback_master", master.extent(0), u.extent(0));
  require_same_extent("writeback_master", w.extent(0), u.extent(0));
  const FormatParams p = format_params(fmt);
  require_finite(space, std::string("writeback_master (format ") + fmt.name + ")", "master", ConstFloatView<MS>(master),
                 "u", u);
  require_finite(space, std::string("writeback_master (format ") + fmt.name + ")", "w", ConstFloatView<MS>(w), "w",
                 ConstFloatView<MS>());
  WritebackCounts counts;
  Kokkos::parallel_reduce("wbaudit::sim::precision::writeback_master::kernel", range(space, u.extent(0), 0),
                          MasterKernel<MS>{{}, master, w, u, p}, counts);
  if (counts.nonfinite > 0) {
    throw NonFiniteError("writeback_master (format " + std::string(fmt.name) +
                         "): the fp32 master copy overflowed at " + std::to_string(counts.nonfinite) +
                         " coordinate(s); those coordinates were left unchanged");
  }
  return counts;
}

template <class ExecSpace>
WritebackCounts project_erasure(const ExecSpace& space, const FormatSpec& fmt,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  require_same_extent("project_erasure", w.extent(0), u.extent(0));
  const FormatParams p = format_params(fmt);
  require_finite(space, std::string("project_erasure (format ") + fmt.name + ")", "w", w, "u", u);
  WritebackCounts counts;
  Kokkos::parallel_reduce("wbaudit::sim::precision::project_erasure::kernel", range(space, u.extent(0), 0),
                          ProjectKernel<MS>{{}, w, u, p}, counts);
  return counts;
}

template <class ExecSpace>
void quantize(const ExecSpace& space, const FormatSpec& fmt, Kokkos::View<float*, typename ExecSpace::memory_space> x) {
  using MS = typename ExecSpace::memory_space;
  const FormatParams p = format_params(fmt);
  require_finite(space, std::string("quantize (format ") + fmt.name + ")", "x", ConstFloatView<MS>(x), "x",
                 ConstFloatView<MS>());
  Kokkos::parallel_for("wbaudit::sim::precision::quantize::kernel", range(space, x.extent(0), 0),
                       QuantizeKernel<MS>{x, p});
}

#define WBAUDIT_INSTANTIATE_WRITEBACK(SPACE)                                                                           \
  template WritebackCounts writeback<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey,           \
                                            Kokkos::View<float*, SPACE::memory_space>,                                 \
                                            Kokkos::View<const float*, SPACE::memory_space>);                          \
  template WritebackCounts writeback<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey,           \
                                            Kokkos::View<float*, SPACE::memory_space>,                                 \
                                            Kokkos::View<const float*, SPACE::memory_space>, const WritebackOptions&); \
  template WritebackCounts writeback_master<SPACE>(                                                                    \
      const SPACE&, const FormatSpec&, Kokkos::View<float*, SPACE::memory_space>,                                      \
      Kokkos::View<float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>);                     \
  template WritebackCounts project_erasure<SPACE>(const SPACE&, const FormatSpec&,                                     \
                                                  Kokkos::View<const float*, SPACE::memory_space>,                     \
                                                  Kokkos::View<const float*, SPACE::memory_space>);                    \
  template void quantize<SPACE>(const SPACE&, const FormatSpec&, Kokkos::View<float*, SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_WRITEBACK(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_WRITEBACK(Kokkos::OpenMP)
#endif
#undef WBAUDIT_INSTANTIATE_WRITEBACK

}  // namespace wbaudit::sim
