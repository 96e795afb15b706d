# Simulator step throughput: plain fp32 vs target write-back vs reference recording (ratios in one process).
wbaudit_add_bench(wbaudit_step_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/step_bench.cpp LIBS wbaudit::sim)
# The decoder on the engine: target write-back and reference recording vs the plain fp32 step.
wbaudit_add_bench(wbaudit_decoder_engine_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/decoder_engine_bench.cpp LIBS wbaudit::sim)
