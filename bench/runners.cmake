# Runner cost and MPI scaling (not a Google Benchmark program: it is MPI-launched; see runners_mpi_scaling.sh).
add_executable(runners_sweep_bench ${CMAKE_CURRENT_LIST_DIR}/runners_sweep_bench.cpp)
target_link_libraries(runners_sweep_bench PRIVATE wbaudit::runners)
wbaudit_target_defaults(runners_sweep_bench)
