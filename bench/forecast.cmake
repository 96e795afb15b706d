# Forecast benchmarks: crossings, the analytic grid and table building at the size of the 72-cell two-layer study.
wbaudit_add_bench(bench_forecast SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_forecast.cpp LIBS wbaudit::forecast)
