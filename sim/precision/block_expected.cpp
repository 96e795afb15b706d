// The expected erased events of SR into a block-scaled format (block_expected.hpp) and its explicit instantiations
// for the host execution spaces (Serial, OpenMP). Three passes: the inputs' finiteness (a reduction), q(w)
// (block_quantize, as block_project's), and, NVFP4 only, the tensor's max |fl32(q(w) + u)|; then one pass over fixed
// chunks of blocks, each block's new scale from its exact maximum of |q(w) + u| and each coordinate's closed-form
// P(erased) (detail::element_erasure_probability), summed per chunk in block and coordinate order.
#include "sim/precision/block_expected.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "sim/precision/block_writeback.hpp"
#include "sim/precision/detail/block_element.hpp"
#include "sim/precision/detail/block_host.hpp"

namespace wbaudit::sim {
namespace {

// One chunk's share: proposals u != 0, the probability sum as an exact count of 2^-r units (r-bit SR) or a double
// summed in block and coordinate order (exact SR), and the first MX block out of range (-1: none).
struct ChunkSum {
  std::int64_t nonzero = 0;
  std::int64_t units = 0;
  double sum = 0;
  std::int64_t first_bad_block = -1;
};

template <class MS>
struct ExpectedChunkKernel {
  Kokkos::View<const float*, MS> q, u;  // q(w) and the proposals
  Kokkos::View<ChunkSum*, MS> chunks;
  BlockFormatSpec fmt;
  BlockFormatParams p;
  WritebackPolicy policy;
  RowMajorShape shape;
  float s_new = 1;  // NVFP4: the tensor's encode scale from max |fl32(q(w) + u)|
  double two_r = 1;
  std::int64_t blocks = 0;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t chunk) const {
    ChunkSum c;
    const bool mx = p.family == BlockFamily::mx;
    const std::int64_t end = std::min(blocks, (chunk + 1) * kExpectedBlockChunk);
    for (std::int64_t b = chunk * kExpectedBlockChunk; b < end; ++b) {
      const BlockLocation where = block_at(fmt, shape, b);
      ExactSum amax{};
      float amax32 = 0;
      for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
        for (std::int64_t col = where.col_begin; col < where.col_end; ++col) {
          const std::int64_t i = r * shape.cols + col;
          ExactSum v = exact_sum(q(i), u(i));
          v = std::signbit(v.hi) ? ExactSum{-v.hi, -v.lo} : v;
          if (v.hi > amax.hi || (v.hi == amax.hi && v.lo > amax.lo)) {
            amax = v;
          }
          amax32 = std::max(amax32, std::fabs(q(i) + u(i)));
        }
      }
      const detail::BlockScale news = mx ? detail::mx_scale_of(p, amax) : detail::nvfp4_scale_of(p, amax32, s_new);
      if (mx && !detail::mx_block_in_range(p, amax, news.exp)) {
        if (c.first_bad_block < 0) {
          c.first_bad_block = b;
        }
        continue;
      }
      for (std::int64_t r = where.row_begin; r < where.row_end; ++r) {
        for (std::int64_t col = where.col_begin; col < where.col_end; ++col) {
          const std::int64_t i = r * shape.cols + col;
          const float qi = q(i), ui = u(i);
          if (ui == 0) {
            continue;
          }
          ++c.nonzero;
          const double prob = detail::element_erasure_probability(p, news, policy, exact_sum(qi, ui), qi);
          if (policy.sr_bits > 0) {
            c.units += static_cast<std::int64_t>(prob * two_r);  // exact: prob is a multiple of 2^-r
          } else {
            c.sum += prob;
          }
        }
      }
    }
    chunks(chunk) = c;
  }
};

}  // namespace

template <class ExecSpace>
ExpectedErasure expected_block_erasure(const ExecSpace& space, const BlockFormatSpec& fmt,
                                       const WritebackPolicy& policy, const RngKey& key, const RowMajorShape& shape,
                                       Kokkos::View<const float*, typename ExecSpace::memory_space> w,
                                       Kokkos::View<const float*, typename ExecSpace::memory_space> u) {
  using MS = typename ExecSpace::memory_space;
  if (policy.policy != Policy::stochastic && policy.policy != Policy::deadzone_sr) {
    throw std::invalid_argument("expected_block_erasure: policy " + policy_name(policy.policy) +
                                " is not stochastic (known: stochastic, deadzone-sr)");
  }
  if (policy.sr_bits < 0 || policy.sr_bits > 32) {
    throw std::invalid_argument("expected_block_erasure: sr_bits " + std::to_string(policy.sr_bits) + " outside 0..32");
  }
  detail::check_block_shape("expected_block_erasure", shape, w.extent(0), u.extent(0));
  const std::int64_t n = shape.size();
  if (policy.sr_bits > 0 && n >= (std::int64_t{1} << 30)) {
    throw std::invalid_argument("expected_block_erasure: " + std::to_string(n) +
                                " coordinates overflow the exact 2^-r unit count (at most 2^30)");
  }
  if (n == 0) {
    return ExpectedErasure{};
  }
  const std::string context =
      detail::block_context("expected_block_erasure", key, fmt) + " (policy " + projection_name(policy) + ")";
  // NaN/inf in w or u: refused before q(w) is formed, naming the first coordinate.
  std::int64_t bad = 0, first = std::numeric_limits<std::int64_t>::max();
  Kokkos::parallel_reduce(
      "wbaudit::sim::precision::expected_block_erasure::finite", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& count, std::int64_t& lowest) {
        if (!std::isfinite(w(i)) || !std::isfinite(u(i))) {
          count += 1;
          lowest = i < lowest ? i : lowest;
        }
      },
      bad, Kokkos::Min<std::int64_t>(first));
  if (bad > 0) {
    auto wh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
    auto uh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, u);
    detail::throw_block_nonfinite(
        context, fmt, shape, bad, first,
        "w = " + detail::block_float_text(wh(first)) + ", u = " + detail::block_float_text(uh(first)));
  }
  // q(w): w quantized blockwise under nearest, as block_project's.
  Kokkos::View<float*, MS> q(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::precision::expected_block_erasure::q"), n);
  Kokkos::deep_copy(space, q, w);
  block_quantize(space, fmt, shape, q);
  ExpectedChunkKernel<MS> kernel;
  kernel.q = q;
  kernel.u = u;
  kernel.fmt = fmt;
  kernel.p = block_format_params(fmt);
  kernel.policy = policy;
  kernel.shape = shape;
  kernel.two_r = std::ldexp(1.0, policy.sr_bits);
  kernel.blocks = block_count(fmt, shape);
  if (kernel.p.family == BlockFamily::nvfp4) {
    // The tensor's new encode scale from max |fl32(q(w) + u)| (bit patterns of non-negative floats order as values).
    std::uint32_t amax_bits = 0;
    Kokkos::parallel_reduce(
        "wbaudit::sim::precision::expected_block_erasure::amax", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i, std::uint32_t& m) {
          const std::uint32_t bits = std::bit_cast<std::uint32_t>(q(i) + u(i)) & 0x7fffffffu;
          m = bits > m ? bits : m;
        },
        Kokkos::Max<std::uint32_t>(amax_bits));
    if (amax_bits >= 0x7f800000u) {
      auto qh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, Kokkos::View<const float*, MS>(q));
      auto uh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, u);
      std::int64_t at = 0;
      while (std::isfinite(qh(at) + uh(at))) {
        ++at;
      }
      detail::throw_block_range(context, fmt, shape, block_of_coordinate(fmt, shape, at).block,
                                "|w + u| at coordinate " + std::to_string(at) + " rounds to infinity in fp32");
    }
    kernel.s_new = nvfp4_tensor_scale(std::bit_cast<float>(amax_bits));
  }
  const std::int64_t nchunks = (kernel.blocks + kExpectedBlockChunk - 1) / kExpectedBlockChunk;
  kernel.chunks = Kokkos::View<ChunkSum*, MS>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "wbaudit::sim::precision::expected_block_erasure::chunks"),
      nchunks);
  Kokkos::parallel_for("wbaudit::sim::precision::expected_block_erasure::kernel",
                       Kokkos::RangePolicy<ExecSpace>(space, 0, nchunks), kernel);
  auto chunks = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, kernel.chunks);
  ExpectedErasure out;
  std::int64_t units = 0;
  for (std::int64_t c = 0; c < nchunks; ++c) {  // chunk order: independent of the threads that filled them
    if (chunks(c).first_bad_block >= 0) {
      detail::throw_block_range(context, fmt, shape, chunks(c).first_bad_block,
                                "its largest |q(w) + u| needs a scale beyond E8M0 or decodes beyond fp32's range");
    }
    out.nonzero += chunks(c).nonzero;
    units += chunks(c).units;
    out.expected_erased += chunks(c).sum;
  }
  if (policy.sr_bits > 0) {
    out.expected_erased = std::ldexp(static_cast<double>(units), -policy.sr_bits);
  }
  return out;
}

#define WBAUDIT_INSTANTIATE_EXPECTED_BLOCK_ERASURE(SPACE)                                                \
  template ExpectedErasure expected_block_erasure<SPACE>(                                                \
      const SPACE&, const BlockFormatSpec&, const WritebackPolicy&, const RngKey&, const RowMajorShape&, \
      Kokkos::View<const float*, SPACE::memory_space>, Kokkos::View<const float*, SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_EXPECTED_BLOCK_ERASURE(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_EXPECTED_BLOCK_ERASURE(Kokkos::OpenMP)
#endif
#undef WBAUDIT_INSTANTIATE_EXPECTED_BLOCK_ERASURE

}  // namespace wbaudit::sim
