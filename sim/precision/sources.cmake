# Sources of the precision layer (formats, rounding, write-back, events, RNG).
list(APPEND WBAUDIT_SIM_SOURCES precision/format.cpp precision/policy.cpp precision/writeback.cpp
     precision/writeback_blocks.cpp precision/writeback_blocks_avx512.cpp precision/writeback_blocks_avx2.cpp
     precision/audit.cpp precision/expected_erasure.cpp precision/writeback_stored.cpp)
# Block-scaled formats (MX, NVFP4): names and scales, the scalar reference, the kernels and their vectorized loops.
list(APPEND WBAUDIT_SIM_SOURCES precision/block_format.cpp precision/block_reference.cpp precision/block_writeback.cpp
     precision/block_loops.cpp precision/block_loops_avx2.cpp precision/block_expected.cpp precision/storage_format.cpp)
# The vectorized write-back loops: without -fno-trapping-math GCC does not if-convert selects between floating-point
# values and leaves the loops scalar. It changes no result (only what is promised about FP exception flags, which
# the code never reads); -ffp-contract=off still holds (tests compare every coordinate with the exact scalar path).
set_source_files_properties(precision/writeback_blocks.cpp precision/block_loops.cpp PROPERTIES COMPILE_OPTIONS
                            "-fno-trapping-math")
