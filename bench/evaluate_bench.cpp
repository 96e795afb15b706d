// The full evaluation of a 72-cell sweep (issue 4: "the full evaluate of the 72-cell two-layer sweep in <= 10 s").
//   evaluate_bench [SPEC [WORKDIR [ANALYSIS]]] [--kokkos-threads=N]
// SPEC defaults to bench/evaluate_grid.toml, ANALYSIS to examples/two_layer_analysis.toml, WORKDIR to
// /tmp/wbaudit_evaluate_bench. The sweep is run once into WORKDIR/sweep (reused when it exists). Then, in this
// process: the baseline, reading every canonical trace once (what any evaluation must do), and the full evaluation
// (evaluate_sweep + write_evaluation_report with figures), reported in seconds and as a ratio to the baseline.
#include <sys/resource.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "runners/evaluate/evaluate.hpp"
#include "runners/evaluate/sweep_cells.hpp"
#include "runners/exec/sweep_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/store.hpp"

namespace wr = wbaudit::runners;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  const fs::path source = WBAUDIT_SOURCE_DIR;
  const fs::path spec_path = argc > 1 ? fs::path(argv[1]) : source / "bench/evaluate_grid.toml";
  const fs::path work = argc > 2 ? fs::path(argv[2]) : fs::path("/tmp/wbaudit_evaluate_bench");
  const fs::path analysis = argc > 3 ? fs::path(argv[3]) : source / "examples/two_layer_analysis.toml";
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  try {
    const auto spec = wr::load_sweep_spec(spec_path);
    const fs::path sweep = work / "sweep";
    if (!fs::exists(sweep / "sweep.json")) {
      wr::RunOptions options;
      options.out = sweep;
      options.resume = fs::exists(sweep);
      const auto t0 = clock::now();
      auto summary = wr::run_sweep(spec, options);
      std::printf("sweep: %zu cells run in %.1f s (%zu failed)\n", summary.completed, seconds(t0), summary.failed);
    }
    const auto store = wr::SweepStore::open(sweep);

    auto t0 = clock::now();
    wr::TraceCache cache(store);
    std::size_t traces = 0;
    for (const auto& cell : store.cells()) traces += cache.trace(cell.id) != nullptr;
    const double baseline = seconds(t0);

    wr::EvaluateOptions options;
    options.analysis = analysis;
    options.out = work / ("evaluation-" + std::to_string(::getpid()));
    auto cpu = [] {
      rusage u{};
      ::getrusage(RUSAGE_SELF, &u);
      return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    const double cpu0 = cpu();
    t0 = clock::now();
    auto result = wr::evaluate_sweep(sweep, options);
    const double computed = seconds(t0);
    wr::write_evaluation_report(result, options);
    const double total = seconds(t0);
    const double cpu_seconds = cpu() - cpu0;
    std::printf("threads: %d\n", Kokkos::DefaultHostExecutionSpace().concurrency());
    std::printf("cells x steps: %zu x %zu, predictors %zu, gates %zu, bootstrap %d resamples (%s)\n",
                result.cells.size(), result.steps.size(), result.predictors.size(), result.gates.size(),
                result.analysis.bootstrap.resamples,
                std::string(wbaudit::stats::to_string(result.analysis.bootstrap.method)).c_str());
    std::printf("baseline (read %zu traces): %.3f s\n", traces, baseline);
    std::printf("evaluate (compute): %.3f s\nevaluate (compute + report + figures): %.3f s  = %.1f x baseline\n",
                computed, total, total / baseline);
    std::printf("evaluate CPU time (this process, all threads; gnuplot children excluded): %.3f s\n", cpu_seconds);
    double load[1] = {0};
    if (::getloadavg(load, 1) == 1) std::printf("load average (1 min) at the end: %.2f\n", load[0]);
    std::printf("target: <= 10 s wall: %s\n", total <= 10 ? "met" : "NOT met");
    std::cout << wr::gate_summary(result) << "report: " << (options.out / "report.html").string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "evaluate_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
