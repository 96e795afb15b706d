// Write-back kernel throughput on 16M-element arrays for bf16, e4m3, e2m1 and int4 under each policy, as elements/s
// and as a ratio to a plain fp32 `w += u` loop measured in the same process (counter `x_fp32`). The row
// `philox_words` times the SR random words alone (the Philox4x32-10 part of every SR row). Shared machines drift
// (another tenant's load, the share of a large L3 the arrays get), so every write-back row also times one fp32 pass
// (on an array of its own) before each of its passes: `x_fp32_here` is the ratio to that interleaved baseline, the
// figure to read where the machine is not quiet.
// Run at 1 and 2 threads: bench_writeback --kokkos-threads=1, then --kokkos-threads=2.
// Targets (issue 2): nearest >= 0.5x the fp32 loop, SR >= 0.2x, 2 threads >= 1.6x one thread; on AVX2 (issue 14):
// nearest >= 0.8x, SR >= 0.35x, deadzone-sr >= 0.3x, master >= 0.5x, 2 threads >= 1.7x one thread.
// WBAUDIT_BENCH_ISA=avx512|avx2|portable forces the block loops (an ISA the CPU lacks falls back to the best one below
// it; WBAUDIT_BENCH_PORTABLE=1 is the older spelling of portable). The context lines say what ran: `cpu_model`,
// `block_loops_best` (what the CPU supports) and `block_loops` (the loops measured).
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_blocks.hpp"

namespace {

using namespace wbaudit::sim;

// 16M elements (the size); WBAUDIT_BENCH_ELEMENTS overrides it, e.g. 65536 to see the compute cost alone
// with the arrays in cache.
const std::int64_t kElements = [] {
  const char* text = std::getenv("WBAUDIT_BENCH_ELEMENTS");
  return text ? std::max<std::int64_t>(1, std::atoll(text)) : std::int64_t{1} << 24;
}();

double g_fp32_seconds_per_pass = 0;  // set by the baseline, which is registered (and so runs) first

struct Arrays {
  Kokkos::View<float*> w0, w, u, master, base;
};

// Allocated per benchmark (not static: Views must be released before Kokkos::finalize).
Arrays make_arrays() {
  return [] {
    Arrays r{Kokkos::View<float*>("wbaudit::bench::w0", kElements),
             Kokkos::View<float*>("wbaudit::bench::w", kElements), Kokkos::View<float*>("wbaudit::bench::u", kElements),
             Kokkos::View<float*>("wbaudit::bench::master", kElements),
             Kokkos::View<float*>("wbaudit::bench::base", kElements)};
    auto w0 = r.w0;
    auto u = r.u;
    // Deterministic pseudo-random weights in [-1, 1) and proposals spanning 2^-14..2^-4 (a mix of erased and
    // applied updates in every format).
    Kokkos::parallel_for(
        "wbaudit::bench::init", kElements, KOKKOS_LAMBDA(std::int64_t i) {
          std::uint64_t z = static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ull;
          z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
          z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
          z ^= z >> 31;
          w0(i) = static_cast<float>(static_cast<double>(z >> 40) * 0x1p-23 - 1.0);
          const double mag = std::ldexp(1.0, -4 - static_cast<int>((z >> 8) % 11));
          u(i) = static_cast<float>(((z & 1) ? mag : -mag) * (1.0 + static_cast<double>((z >> 16) & 0xff) / 256));
        });
    Kokkos::fence();
    return r;
  }();
}

void set_ratio(benchmark::State& state, double seconds, std::int64_t passes) {
  state.SetItemsProcessed(passes * kElements);
  const double per_pass = seconds / static_cast<double>(passes);
  if (g_fp32_seconds_per_pass > 0) {
    state.counters["x_fp32"] = g_fp32_seconds_per_pass / per_pass;
  }
}

// One pass of the fp32 baseline w += u (Kokkos::parallel_for over the whole array), in seconds.
double fp32_pass(const Kokkos::View<float*>& w, const Kokkos::View<float*>& u) {
  const auto t0 = std::chrono::steady_clock::now();
  Kokkos::parallel_for(
      "wbaudit::bench::fp32_add", kElements, KOKKOS_LAMBDA(std::int64_t i) { w(i) += u(i); });
  Kokkos::fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_fp32_add(benchmark::State& state) {
  Arrays a = make_arrays();
  Kokkos::deep_copy(a.w, a.w0);
  auto w = a.w;
  auto u = a.u;
  double seconds = 0;
  std::int64_t passes = 0;
  for (auto _ : state) {
    seconds += fp32_pass(w, u);
    ++passes;
  }
  g_fp32_seconds_per_pass = seconds / static_cast<double>(passes);
  set_ratio(state, seconds, passes);
}

// The first random words alone (Philox4x32-10 as keyed for SR, philox_first_words_in per block of kWritebackBlock
// coordinates), summed so the compiler cannot drop them: the share of an SR pass that is the random stream.
void BM_philox_words(benchmark::State& state) {
  double seconds = 0;
  std::int64_t passes = 0;
  std::uint64_t sink = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t total = 0;
    const RngKey key{1, static_cast<std::uint64_t>(passes), 0};
    Kokkos::parallel_reduce(
        "wbaudit::bench::philox_words", (kElements + detail::kWritebackBlock - 1) / detail::kWritebackBlock,
        KOKKOS_LAMBDA(std::int64_t block, std::uint64_t & acc) {
          alignas(64) std::uint32_t scratch[detail::kPhiloxScratch];
          const std::int64_t first = block * detail::kWritebackBlock;
          const std::int64_t len = std::min<std::int64_t>(detail::kWritebackBlock, kElements - first);
          const std::uint32_t* words =
              detail::philox_first_words_in(key, static_cast<std::uint64_t>(first), len, scratch);
          acc += words[0] ^ words[len - 1];
        },
        total);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += total;
    ++passes;
  }
  benchmark::DoNotOptimize(sink);
  set_ratio(state, seconds, passes);
}

FormatSpec bench_format(const std::string& name) {
  if (name == "int4") {
    return int_format(4, int_scale_for_absmax(4, 1.0));
  }
  return format_from_name(name);
}

void BM_writeback(benchmark::State& state, const std::string& format, const std::string& policy_text, int sr_bits,
                  const std::string& stream) {
  Arrays a = make_arrays();
  const FormatSpec fmt = bench_format(format);
  const WritebackPolicy policy = make_policy(policy_text, sr_bits, stream);
  Kokkos::deep_copy(a.w, a.w0);
  quantize(fmt, a.w);
  Kokkos::deep_copy(a.master, a.w0);
  Kokkos::deep_copy(a.base, a.w0);
  double seconds = 0, fp32_seconds = 0;
  std::int64_t passes = 0;
  WritebackCounts last;
  for (auto _ : state) {
    fp32_seconds += fp32_pass(a.base, a.u);  // the baseline interleaved pass by pass (x_fp32_here)
    const auto t0 = std::chrono::steady_clock::now();
    if (policy.policy == Policy::master) {
      last = writeback_master(fmt, a.master, a.w, a.u);
    } else {
      last = writeback(fmt, policy, RngKey{1, static_cast<std::uint64_t>(passes), 0}, a.w, a.u);
    }
    const double pass = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(pass);  // the write-back alone (manual time), not the interleaved baseline
    seconds += pass;
    ++passes;
  }
  set_ratio(state, seconds, passes);
  state.counters["x_fp32_here"] = fp32_seconds / seconds;
  state.counters["erased_frac"] = static_cast<double>(last.erased) / static_cast<double>(last.nonzero);
}

// The CPU's model name (/proc/cpuinfo), or "unknown".
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

detail::BlockIsa requested_isa() {
  const char* isa = std::getenv("WBAUDIT_BENCH_ISA");
  const char* portable = std::getenv("WBAUDIT_BENCH_PORTABLE");
  if (isa == nullptr) {
    return portable != nullptr && std::string(portable) == "1" ? detail::BlockIsa::portable : detail::best_block_isa();
  }
  for (const auto candidate : {detail::BlockIsa::avx512, detail::BlockIsa::avx2, detail::BlockIsa::portable}) {
    if (std::string(isa) == detail::block_isa_name(candidate)) {
      return candidate;
    }
  }
  std::fprintf(stderr, "bench_writeback: WBAUDIT_BENCH_ISA=%s is not one of avx512, avx2, portable\n", isa);
  std::exit(2);
}

struct Registration {
  Registration() {
    const detail::BlockIsa isa = detail::force_block_isa(requested_isa());
    benchmark::AddCustomContext("cpu_model", cpu_model());
    benchmark::AddCustomContext("block_loops_best", detail::block_isa_name(detail::best_block_isa()));
    benchmark::AddCustomContext("block_loops", detail::block_isa_name(isa));
    benchmark::RegisterBenchmark("fp32_add", BM_fp32_add)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark("philox_words", BM_philox_words)->Unit(benchmark::kMillisecond)->UseRealTime();
    for (const char* format : {"bf16", "e4m3", "e2m1", "int4"}) {
      struct Row {
        const char* policy;
        int bits;
        const char* stream;
      };
      // /packed: the named opt-in stream philox-packed (full width: two coordinates per Philox word, 16 bits each,
      // further bits from each coordinate's own words; r8: four coordinates per word)
      for (const Row& row :
           {Row{"nearest", 0, "philox"}, Row{"stochastic", 0, "philox"}, Row{"stochastic", 0, "philox-packed"},
            Row{"stochastic", 8, "philox"}, Row{"stochastic", 8, "philox-packed"}, Row{"deadzone-sr", 0, "philox"},
            Row{"deadzone-sr", 0, "philox-packed"}, Row{"deadzone-sr", 8, "philox-packed"},
            Row{"master", 0, "philox"}}) {
        const std::string stream = row.stream;
        const char* policy = row.policy;
        const int bits = row.bits;
        const std::string name = std::string("writeback/") + format + "/" + policy +
                                 (bits ? "/r" + std::to_string(bits) : "") +
                                 (stream == "philox-packed" ? "/packed" : "");
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& s) { BM_writeback(s, format, policy, bits, stream); })
            ->Unit(benchmark::kMillisecond)
            ->UseManualTime();
      }
    }
  }
} registration;

}  // namespace
