#pragma once
// The numeric identity of this process (issue 30, docs/contracts.md "Numeric identity"): what decides the bits of a
// run besides its configuration. The contract parts (the GEMM's summation contract, the C library's maths) must be
// the same for two runs of one cell to give the same trace; the ISA paths are recorded too, but the kernels of every
// path give identical results by construction (tested by forcing each path), so a differing path is informational.
#include <nlohmann/json.hpp>
#include <string>

namespace wbaudit::sim {

struct NumericIdentity {
  std::string gemm_contract;  // sim::gemm_numeric_identity(), e.g. "wbaudit-gemm/1 fma-sequential-k"
  std::string libm;           // e.g. "glibc 2.36 fma": glibc's version and the variant its ifuncs pick for exp,
                              // log, pow, sin, cos (fma when the CPU has FMA and AVX2, else sse2)
  std::string gemm_isa;       // the GEMM path: avx512, avx2, portable (informational)
  std::string writeback_isa;  // the write-back loops' path: avx512, avx2, portable (informational)
  nlohmann::json to_json() const;
  static NumericIdentity from_json(const nlohmann::json& j);  // missing members are empty
  // The parts that decide results; equal contracts give equal traces for equal configurations.
  std::string contract() const { return gemm_contract + "; " + libm; }
};

NumericIdentity numeric_identity();

}  // namespace wbaudit::sim
