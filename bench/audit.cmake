# `wbaudit audit`: auditing a trajectory against merely reading it, in the same binary.
wbaudit_add_bench(bench_audit SOURCES ${CMAKE_CURRENT_LIST_DIR}/audit_bench.cpp LIBS wbaudit::audit)
