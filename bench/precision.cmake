# Precision layer: the write-back kernel against a plain fp32 w += u loop in the same binary.
wbaudit_add_bench(bench_writeback SOURCES ${CMAKE_CURRENT_LIST_DIR}/writeback_bench.cpp LIBS wbaudit::sim)
# Block-scaled formats (MX, NVFP4): the block write-back and projection against the same fp32 loop.
wbaudit_add_bench(bench_block_writeback SOURCES ${CMAKE_CURRENT_LIST_DIR}/block_writeback_bench.cpp LIBS wbaudit::sim)
