# Statistics: 10,000 bootstrap resamples of rmse_macro over a 72-cell x 500-step table (resampling cells), against
# one evaluation of the metrics on the same table (the baseline measured in the same process).
wbaudit_add_bench(bench_bootstrap SOURCES ${CMAKE_CURRENT_LIST_DIR}/bootstrap_bench.cpp LIBS wbaudit::stats)
