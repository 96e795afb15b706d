// Shared GoogleTest main: initializes Kokkos (which consumes --kokkos-threads=N) for the whole test program.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>

int main(int argc, char** argv) {
  // Unpinned threads: ranks and other processes share the cores; this also silences Kokkos' binding warning.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
