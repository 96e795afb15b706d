# Decoder training-step throughput (tokens/s, GFLOP/s); bench/decoder_torch_bench.py compares it with PyTorch CPU.
wbaudit_add_bench(wbaudit_decoder_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/decoder_bench.cpp LIBS wbaudit::sim)
