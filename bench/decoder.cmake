# Decoder step throughput against OpenBLAS's sgemm (the baseline of the speed targets; the decoder itself does not use
# OpenBLAS), and wbaudit's GEMM per path against the same sgemm (docs/performance.md). Debian's OpenBLAS
# (libopenblas-dev) through its pkg-config module `openblas`, whose include directory holds the matching cblas.h (not
# find_package(BLAS): that finds whichever libblas.so the alternatives system points at, possibly the reference BLAS,
# and no cblas header).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(WBAUDIT_OPENBLAS QUIET IMPORTED_TARGET openblas)
endif()
if(WBAUDIT_OPENBLAS_FOUND)
  wbaudit_add_bench(wbaudit_decoder_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/decoder_bench.cpp LIBS wbaudit::sim
                    PkgConfig::WBAUDIT_OPENBLAS)
else()
  message(WARNING "wbaudit: OpenBLAS (pkg-config module openblas) was not found: wbaudit_decoder_bench, which "
                  "measures the decoder against its sgemm, is not built (apt-get install libopenblas-dev pkg-config)")
endif()
