// Shared Google Benchmark main: Kokkos is initialized once (it consumes --kokkos-threads=N).
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>

int main(int argc, char** argv) {
  // Unpinned threads: ranks and other processes share the cores; this also silences Kokkos' binding warning.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
