// The fused write-back of a 16-bit stored parameter (writeback_stored.hpp).
#include "sim/precision/writeback_stored.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "sim/precision/writeback_blocks.hpp"

namespace wbaudit::sim {

namespace {

template <class MemorySpace, Storage16 Type>
struct StoredKernel : detail::WritebackCountsReducer {
  static constexpr std::int64_t kBlock = detail::kWritebackBlock;
  Kokkos::View<std::uint16_t*, MemorySpace> storage;
  Kokkos::View<const float*, MemorySpace> stepped;
  detail::BlockWriteback wb;
  std::uint64_t first_coordinate = 0;
  std::int64_t n = 0;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t block, value_type& c) const {
    const std::int64_t begin = block * kBlock;
    const std::int64_t len = (begin + kBlock < n ? begin + kBlock : n) - begin;
    alignas(64) float w[kBlock];
    alignas(64) float u[kBlock];
    std::uint16_t* s = storage.data() + begin;
    const float* p = stepped.data() + begin;
    for (std::int64_t k = 0; k < len; ++k) {
      w[k] = decode_storage16(Type, s[k]);
      u[k] = p[k] - w[k];  // the optimizer's fp32 proposal, as fl32(stepped - w) anywhere else
    }
    detail::BlockCounts bc;
    // in place in w; a coordinate with NaN/inf in w or u keeps its w (so its bits below)
    c.nonfinite += detail::writeback_block(wb, first_coordinate + static_cast<std::uint64_t>(begin), w, u, len, bc);
    for (std::int64_t k = 0; k < len; ++k) {
      s[k] = encode_storage16(Type, w[k]);
    }
    detail::add_block_counts(c, bc);
  }
};

// The first coordinate whose decoded w or u = fl32(stepped - w) is NaN/inf (those keep their storage, so it reads
// the same after the write-back).
template <class MemorySpace>
struct FirstBad {
  Kokkos::View<std::uint16_t*, MemorySpace> storage;
  Kokkos::View<const float*, MemorySpace> stepped;
  Storage16 type;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t& first) const {
    const float w = decode_storage16(type, storage(i));
    if ((!std::isfinite(w) || !std::isfinite(stepped(i) - w)) && i < first) {
      first = i;
    }
  }
};

const char* storage_name(Storage16 s) {
  return s == Storage16::bf16 ? "bf16" : "fp16";
}

std::string number_text(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::string storage16_misfit(const FormatSpec& fmt, Storage16 s) {
  const FormatSpec storage = format_from_name(storage_name(s));
  if (fmt.kind == FormatKind::integer) {
    for (int level = 0; level <= fmt.int_max_level; ++level) {
      const double v = static_cast<double>(level) * static_cast<double>(fmt.int_scale);
      const auto f = static_cast<float>(v);
      if (static_cast<double>(f) != v || decode_storage16(s, encode_storage16(s, f)) != f) {
        return std::string(fmt.name) + " with scale " + number_text(fmt.int_scale) + " has the value " +
               number_text(v) + ", which " + storage_name(s) + " does not hold";
      }
    }
    return {};
  }
  if (fmt.man_bits > storage.man_bits || fmt.max_finite > storage.max_finite ||
      fmt.min_subnormal < storage.min_subnormal) {
    return std::string(fmt.name) + " has values that " + storage_name(s) + " does not hold (" +
           std::to_string(fmt.man_bits) + " mantissa bits, range " + number_text(fmt.min_subnormal) + ".." +
           number_text(fmt.max_finite) + "; " + storage_name(s) + ": " + std::to_string(storage.man_bits) + ", " +
           number_text(storage.min_subnormal) + ".." + number_text(storage.max_finite) + ")";
  }
  return {};
}

template <class ExecSpace>
WritebackCounts writeback_stored(const ExecSpace& space, const FormatSpec& fmt, const WritebackPolicy& policy,
                                 RngKey key, Storage16 storage_type,
                                 Kokkos::View<std::uint16_t*, typename ExecSpace::memory_space> storage,
                                 Kokkos::View<const float*, typename ExecSpace::memory_space> stepped,
                                 const WritebackOptions& options) {
  using MS = typename ExecSpace::memory_space;
  if (storage.extent(0) != stepped.extent(0)) {
    throw std::invalid_argument("writeback_stored: extents differ (" + std::to_string(storage.extent(0)) + " vs " +
                                std::to_string(stepped.extent(0)) + ")");
  }
  if (policy.policy == Policy::master) {
    throw std::invalid_argument("writeback_stored: policy master needs the master copy; use writeback_master");
  }
  if (policy.sr_bits < 0 || policy.sr_bits > 32) {
    throw std::invalid_argument("writeback_stored: sr_bits = " + std::to_string(policy.sr_bits) + " is outside 0..32");
  }
  if (key.step >= kRngMaxStep) {
    throw std::invalid_argument("writeback_stored: step " + std::to_string(key.step) +
                                " exceeds the RNG counter (< 2^32)");
  }
  if (options.first_coordinate + storage.extent(0) > kRngMaxCoordinate) {
    throw std::invalid_argument("writeback_stored: coordinates up to " +
                                std::to_string(options.first_coordinate + storage.extent(0)) +
                                " exceed the RNG counter (< 2^48)");
  }
  if (const std::string why = storage16_misfit(fmt, storage_type); !why.empty()) {
    throw std::invalid_argument("writeback_stored: " + why);
  }
  const auto n = static_cast<std::int64_t>(storage.extent(0));
  const detail::BlockWriteback wb = detail::block_writeback(format_params(fmt), policy, key);
  WritebackCounts counts;
  auto launch = [&](auto kernel) {
    constexpr std::int64_t block = decltype(kernel)::kBlock;
    kernel.storage = storage;
    kernel.stepped = stepped;
    kernel.wb = wb;
    kernel.first_coordinate = options.first_coordinate;
    kernel.n = n;
    auto range = Kokkos::RangePolicy<ExecSpace>(space, 0, (n + block - 1) / block);
    if (options.chunk_size > 0) {
      range = range.set_chunk_size(options.chunk_size);
    }
    Kokkos::parallel_reduce("wbaudit::sim::precision::writeback_stored", range, kernel, counts);
  };
  if (storage_type == Storage16::bf16) {
    launch(StoredKernel<MS, Storage16::bf16>{});
  } else {
    launch(StoredKernel<MS, Storage16::fp16>{});
  }
  if (counts.nonfinite > 0) {
    std::int64_t first = n;
    Kokkos::parallel_reduce("wbaudit::sim::precision::writeback_stored::first",
                            Kokkos::RangePolicy<ExecSpace>(space, 0, n), FirstBad<MS>{storage, stepped, storage_type},
                            Kokkos::Min<std::int64_t>(first));
    space.fence();
    const float w = decode_storage16(storage_type, storage(first));
    throw NonFiniteError(
        "writeback (tensor " + std::to_string(key.tensor_id) + ", step " + std::to_string(key.step) + ", format " +
        fmt.name + "); the coordinates with non-finite input were left unchanged: " + std::to_string(counts.nonfinite) +
        " non-finite value(s); first at coordinate " + std::to_string(first) + ": w = " + number_text(w) +
        ", u = " + number_text(stepped(first) - w));
  }
  return counts;
}

#define WBAUDIT_INSTANTIATE_WRITEBACK_STORED(SPACE)                                                                 \
  template WritebackCounts writeback_stored<SPACE>(const SPACE&, const FormatSpec&, const WritebackPolicy&, RngKey, \
                                                   Storage16, Kokkos::View<std::uint16_t*, SPACE::memory_space>,    \
                                                   Kokkos::View<const float*, SPACE::memory_space>,                 \
                                                   const WritebackOptions&);

#ifdef KOKKOS_ENABLE_SERIAL
WBAUDIT_INSTANTIATE_WRITEBACK_STORED(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
WBAUDIT_INSTANTIATE_WRITEBACK_STORED(Kokkos::OpenMP)
#endif
#undef WBAUDIT_INSTANTIATE_WRITEBACK_STORED

}  // namespace wbaudit::sim
