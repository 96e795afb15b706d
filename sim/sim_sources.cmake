# Sources of models, optimizers, data, traces and the cell runner (list them relative to sim/).
list(APPEND WBAUDIT_SIM_SOURCES model/two_layer.cpp optim/optimizer.cpp optim/schedule.cpp optim/torch_adamw.cpp optim/torch_adamw_avx2.cpp
     trace/record_schedule.cpp
     trace/trace.cpp trace/block_sample.cpp trace/trace_reader.cpp trace/trace_writer.cpp trace/margin_histogram.cpp trace/margin_kernel.cpp
     trace/margin_kernel_avx2.cpp trace/margin_kernel_avx512.cpp config_reader.cpp run.cpp engine.cpp checkpoint.cpp)
# The model registry and one descriptor per built-in model kind (sim/model_registry.hpp).
list(APPEND WBAUDIT_SIM_SOURCES model_registry.cpp model/two_layer_descriptor.cpp model/decoder_descriptor.cpp)
# The decoder (docs/decoder.md) and its matrix product: one summation order on every CPU (model/detail/gemm.hpp), a
# path per instruction set chosen at run time (each file selects its own with a target pragma: no flags here).
list(APPEND WBAUDIT_SIM_SOURCES model/decoder.cpp model/detail/gemm.cpp model/detail/gemm_avx2.cpp
     model/detail/gemm_avx512.cpp)
# The token sources of language models (docs/data.md).
list(APPEND WBAUDIT_SIM_SOURCES data/markov_language.cpp data/byte_text.cpp)
# The numeric identity recorded with every attempt (GEMM contract, libm variant, ISA paths).
list(APPEND WBAUDIT_SIM_SOURCES numeric_identity.cpp)
# The reference step's histogram kernel (sim/trace/detail/margin_kernel.hpp): its loops vectorize only if GCC may
# if-convert the selects between floating-point values (-fno-trapping-math; no result changes, -ffp-contract=off holds).
set_source_files_properties(trace/margin_kernel.cpp trace/margin_kernel_avx2.cpp trace/margin_kernel_avx512.cpp
                            PROPERTIES COMPILE_OPTIONS "-fno-trapping-math")
