#!/usr/bin/env bash
# Wall time of a real sweep at 1 and 2 MPI ranks (1 Kokkos thread each), the runner's own cost, and the speedup.
#   bench/runners_mpi_scaling.sh BUILD_DIR [SPEC]
# Prints one line per rank count from runners_sweep_bench, then "speedup_2_over_1=<x>".
set -euo pipefail
build=$1
spec=${2:-$(dirname "$0")/runners_grid.toml}
bench=$build/bench/runners_sweep_bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_PROC_BIND=false OMP_NUM_THREADS=1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
one=$("${mpirun[@]}" -n 1 "$bench" "$spec" "$work" --kokkos-threads=1)
echo "$one"
two=$("${mpirun[@]}" -n 2 "$bench" "$spec" "$work" --kokkos-threads=1)
echo "$two"
w1=$(sed -n 's/.*wall_s=\([0-9.]*\).*/\1/p' <<< "$one")
w2=$(sed -n 's/.*wall_s=\([0-9.]*\).*/\1/p' <<< "$two")
awk -v a="$w1" -v b="$w2" 'BEGIN { printf "speedup_2_over_1=%.3f\n", a / b }'
