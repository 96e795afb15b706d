# Decoder step throughput against the same OpenBLAS's sgemm, and whole engine steps per mode (docs/performance.md).
wbaudit_add_bench(wbaudit_decoder_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/decoder_bench.cpp LIBS wbaudit::sim
                  PkgConfig::WBAUDIT_OPENBLAS)
