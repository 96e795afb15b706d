# The full `wbaudit evaluate` of a 72-cell two-layer sweep (not a Google Benchmark program: it times one whole
# evaluation of a sweep directory it creates once; see bench/evaluate_bench.cpp).
add_executable(evaluate_bench ${CMAKE_CURRENT_LIST_DIR}/evaluate_bench.cpp)
target_link_libraries(evaluate_bench PRIVATE wbaudit::runners)
wbaudit_target_defaults(evaluate_bench)
target_compile_definitions(evaluate_bench PRIVATE WBAUDIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
