// wbaudit's write-back side by side with CPFloat (bench/cpfloat_compare.sh builds and runs this program; it is not
// part of wbaudit's build and wbaudit never depends on CPFloat).
//
// Workload on both sides: w <- round(w + u) over the bench_writeback inputs (w in [-1, 1) quantized to the format
// first, u spanning 2^-14 .. 2^-4), counting erased coordinates (u != 0 and the result == w). wbaudit runs its
// write-back kernel (writeback, one fused pass); CPFloat runs cpf_addf into a buffer in cache, then the count and the
// copy back (cpfloat_side.c). Each pair times both, in alternating order, for at least --min-time seconds each;
// the table gives medians over the pairs (G elements/s) and the median, min and max of the per-pair ratios. The
// erased fractions of the first pass of each pair (from the same w) cross-check both implementations: equal counts
// for nearest, equal to about 4 digits for SR.
//
// Options: --elements N (16M), --pairs N (5), --min-time S (0.2), --formats a,b,... (bf16,e4m3,e2m1; also fp16,
// e5m2), --isa avx512|avx2|portable (wbaudit's block loops; default: the best the CPU has), and Kokkos' own
// (--kokkos-threads=N).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpfloat_side.h"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_blocks.hpp"

namespace {

using namespace wbaudit::sim;

struct Options {
  std::int64_t elements = std::int64_t{1} << 24;
  int pairs = 5;
  double min_time = 0.2;
  std::vector<std::string> formats = {"bf16", "e4m3", "e2m1"};
  std::string isa;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "cpfloat_compare: %s\n", what.c_str());
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--kokkos", 0) == 0) {
      continue;
    }
    if (i + 1 >= argc) {
      usage_error("option " + arg + " needs a value (or is unknown)");
    }
    const std::string value = argv[++i];
    if (arg == "--elements") {
      o.elements = std::atoll(value.c_str());
    } else if (arg == "--pairs") {
      o.pairs = std::atoi(value.c_str());
    } else if (arg == "--min-time") {
      o.min_time = std::atof(value.c_str());
    } else if (arg == "--isa") {
      o.isa = value;
    } else if (arg == "--formats") {
      o.formats.clear();
      std::stringstream in(value);
      for (std::string f; std::getline(in, f, ',');) {
        o.formats.push_back(f);
      }
    } else {
      usage_error("unknown option " + arg);
    }
  }
  if (o.elements < 1 || o.pairs < 1 || !(o.min_time >= 0)) {
    usage_error("--elements and --pairs must be >= 1, --min-time >= 0");
  }
  return o;
}

// CPFloat's parameters of a wbaudit format: significand bits including the implicit one, emin, emax. e4m3 is OCP's
// "fn" in wbaudit (max 448) and has emax 8 in CPFloat (max 480): no input here comes near either.
struct CpfFormat {
  const char* name;
  int precision, emin, emax;
};
constexpr CpfFormat kCpfFormats[] = {
    {"bf16", 8, -126, 127}, {"fp16", 11, -14, 15}, {"e5m2", 3, -14, 15}, {"e4m3", 4, -6, 8}, {"e2m1", 2, 0, 2}};

const CpfFormat& cpf_format(const std::string& name) {
  for (const auto& f : kCpfFormats) {
    if (name == f.name) {
      return f;
    }
  }
  usage_error("format " + name + " is not compared (bf16, fp16, e5m2, e4m3, e2m1)");
}

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

// The bench_writeback inputs (bench/writeback_bench.cpp).
void fill_inputs(std::vector<float>& w0, std::vector<float>& u) {
  for (std::size_t i = 0; i < w0.size(); ++i) {
    std::uint64_t z = static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    w0[i] = static_cast<float>(static_cast<double>(z >> 40) * 0x1p-23 - 1.0);
    const double mag = std::ldexp(1.0, -4 - static_cast<int>((z >> 8) % 11));
    u[i] = static_cast<float>(((z & 1) ? mag : -mag) * (1.0 + static_cast<double>((z >> 16) & 0xff) / 256));
  }
}

struct Pass {
  std::int64_t nonzero = 0, erased = 0;
};

// Runs pass(k) for k = 0, 1, ... until min_time has passed (at least once); returns seconds per pass and the
// counts of pass 0.
double timed_passes(double min_time, const std::function<Pass(std::int64_t)>& pass, Pass& first) {
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t k = 0;
  double elapsed = 0;
  do {
    const Pass p = pass(k);
    if (k == 0) {
      first = p;
    }
    ++k;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_time);
  return elapsed / static_cast<double>(k);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const Options& o) {
  if (!o.isa.empty()) {
    bool known = false;
    for (const auto isa : {detail::BlockIsa::avx512, detail::BlockIsa::avx2, detail::BlockIsa::portable}) {
      if (o.isa == detail::block_isa_name(isa)) {
        detail::force_block_isa(isa);
        known = true;
      }
    }
    if (!known) {
      usage_error("--isa " + o.isa + " is not one of avx512, avx2, portable");
    }
  }
  std::printf("cpu_model: %s\n", cpu_model().c_str());
  std::printf("block_loops_best: %s, block_loops: %s\n", detail::block_isa_name(detail::best_block_isa()),
              detail::block_isa_name(detail::active_block_isa()));
  std::printf("kokkos threads: %d, elements: %lld, pairs: %d, min time per side and pair: %.2f s\n",
              Kokkos::DefaultExecutionSpace().concurrency(), static_cast<long long>(o.elements), o.pairs, o.min_time);
  std::printf("CPFloat generator: %s\n\n",
              cpf_side_uses_pcg() ? "pcg-c (pcg_variants.h)" : "CPFloat's fallback (no pcg-c: SR statistics are off)");
  std::printf(
      "| format | policy | wbaudit G/s | CPFloat G/s | ratio (min-max) | wbaudit erased | CPFloat erased | erased "
      "counts |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");

  const auto n = static_cast<std::size_t>(o.elements);
  std::vector<float> w0(n), u(n), wq(n), wc(n);
  fill_inputs(w0, u);
  Kokkos::View<float*> w("wbaudit::cpfloat_compare::w", n);
  Kokkos::View<float*> uv("wbaudit::cpfloat_compare::u", n);
  auto uh = Kokkos::create_mirror_view(uv);
  std::copy(u.begin(), u.end(), uh.data());
  Kokkos::deep_copy(uv, uh);
  auto wh = Kokkos::create_mirror_view(w);

  for (const std::string& format : o.formats) {
    const CpfFormat& cf = cpf_format(format);
    const FormatSpec fmt = format_from_name(format);
    // w quantized to the format once (wbaudit's quantize, nearest); both sides start each pair from it.
    std::copy(w0.begin(), w0.end(), wh.data());
    Kokkos::deep_copy(w, wh);
    quantize(fmt, w);
    Kokkos::deep_copy(wh, w);
    std::copy(wh.data(), wh.data() + n, wq.begin());
    // stochastic, packed: wbaudit's opt-in stream philox-packed (exact SR from 16-bit first draws, two coordinates per
    // Philox word) against the same CPFloat SR
    struct Row {
      const char* label;
      const char* policy;
      const char* stream;
    };
    for (const Row& row : {Row{"nearest", "nearest", "philox"}, Row{"stochastic", "stochastic", "philox"},
                           Row{"stochastic, packed", "stochastic", "philox-packed"}}) {
      const char* policy_name = row.label;
      const WritebackPolicy policy = make_policy(row.policy, 0, row.stream);
      const bool stochastic = policy.policy != Policy::nearest;
      cpf_side* side = cpf_side_create(cf.precision, cf.emin, cf.emax, stochastic ? 1 : 0, 42);
      if (side == nullptr) {
        std::fprintf(stderr, "cpfloat_compare: CPFloat refused format %s\n", format.c_str());
        return 1;
      }
      std::vector<double> wb_rate, cpf_rate, ratio;
      double wb_erased = 0, cpf_erased = 0;
      std::int64_t count_gap = 0;  // largest |wbaudit - CPFloat| erased count of a first pass
      std::uint64_t step = 0;
      for (int pair = 0; pair < o.pairs; ++pair) {
        Pass wb_first, cpf_first;
        double wb_sec = 0, cpf_sec = 0;
        const auto run_wbaudit = [&] {
          std::copy(wq.begin(), wq.end(), wh.data());
          Kokkos::deep_copy(w, wh);
          wb_sec = timed_passes(
              o.min_time,
              [&](std::int64_t) {
                const WritebackCounts c = writeback(fmt, policy, RngKey{1, step++, 0}, w, uv);
                return Pass{c.nonzero, c.erased};
              },
              wb_first);
        };
        const auto run_cpfloat = [&] {
          std::copy(wq.begin(), wq.end(), wc.begin());
          cpf_sec = timed_passes(
              o.min_time,
              [&](std::int64_t) {
                Pass p;
                cpf_side_round_add(side, wc.data(), u.data(), o.elements, &p.nonzero, &p.erased);
                return p;
              },
              cpf_first);
        };
        if (pair % 2 == 0) {
          run_wbaudit();
          run_cpfloat();
        } else {
          run_cpfloat();
          run_wbaudit();
        }
        wb_rate.push_back(static_cast<double>(o.elements) / wb_sec * 1e-9);
        cpf_rate.push_back(static_cast<double>(o.elements) / cpf_sec * 1e-9);
        ratio.push_back(cpf_sec / wb_sec);
        wb_erased += static_cast<double>(wb_first.erased) / static_cast<double>(wb_first.nonzero);
        cpf_erased += static_cast<double>(cpf_first.erased) / static_cast<double>(cpf_first.nonzero);
        count_gap = std::max(count_gap, std::abs(wb_first.erased - cpf_first.erased));
      }
      cpf_side_destroy(side);
      const std::string counts = count_gap == 0 ? "equal" : "differ by up to " + std::to_string(count_gap);
      std::printf("| %s | %s | %.3g | %.3g | %.2fx (%.2f-%.2f) | %.4f | %.4f | %s |\n", format.c_str(), policy_name,
                  median(wb_rate), median(cpf_rate), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()), wb_erased / o.pairs, cpf_erased / o.pairs,
                  counts.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  try {
    return run(parse_options(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpfloat_compare: %s\n", e.what());
    return 1;
  }
}
