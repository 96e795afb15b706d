#include "sim/numeric_identity.hpp"

#include <gnu/libc-version.h>

#include "sim/model/detail/gemm.hpp"
#include "sim/precision/writeback_blocks.hpp"

namespace wbaudit::sim {

nlohmann::json NumericIdentity::to_json() const {
  return {{"gemm_contract", gemm_contract}, {"libm", libm}, {"gemm_isa", gemm_isa}, {"writeback_isa", writeback_isa}};
}

NumericIdentity NumericIdentity::from_json(const nlohmann::json& j) {
  NumericIdentity id;
  if (!j.is_object()) {
    return id;
  }
  auto text = [&](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  id.gemm_contract = text("gemm_contract");
  id.libm = text("libm");
  id.gemm_isa = text("gemm_isa");
  id.writeback_isa = text("writeback_isa");
  return id;
}

NumericIdentity numeric_identity() {
  NumericIdentity id;
  id.gemm_contract = gemm_numeric_identity();
  // glibc's libm picks an FMA variant of exp/log/pow/sin/cos (ifunc) on CPUs with FMA and AVX2, and the SSE2 one
  // otherwise; the two can differ in the last bit, so the variant is part of the contract.
  __builtin_cpu_init();
  const bool fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
  id.libm = std::string("glibc ") + gnu_get_libc_version() + (fma ? " fma" : " sse2");
  id.gemm_isa = gemm_isa_path();
  id.writeback_isa = detail::block_isa_name(detail::active_block_isa());
  return id;
}

}  // namespace wbaudit::sim
