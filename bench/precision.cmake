# Precision layer: the write-back kernel against a plain fp32 w += u loop in the same binary.
wbaudit_add_bench(bench_writeback SOURCES ${CMAKE_CURRENT_LIST_DIR}/writeback_bench.cpp LIBS wbaudit::sim)
