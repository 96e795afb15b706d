#!/usr/bin/env bash
# `wbaudit run` under mpirun at 1 and 2 ranks gives the same cells and the same traces (every dataset, h5diff) as a
# local run, every cell canonical.
#   mpi_wbaudit_run_test.sh WBAUDIT SOURCE_DIR [SPEC CELLS]   (default: tests/slurm/tiny_sweep.toml, 8 cells)
set -uo pipefail
wbaudit=$1
spec=${3:-$2/tests/slurm/tiny_sweep.toml}
cells=${4:-8}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export OMP_PROC_BIND=false OMP_NUM_THREADS=1

"$wbaudit" run "$spec" --out "$work/local" --kokkos-threads=1 --no-report -q 2> "$work/local.err" || { cat "$work/local.err"; fail "local run"; }
for n in 1 2; do
  timeout 300 "${mpirun[@]}" -n $n "$wbaudit" run "$spec" --out "$work/n$n" --kokkos-threads=1 --no-report -q \
    2> "$work/n$n.err" || { cat "$work/n$n.err"; fail "run at $n ranks"; }
  "$wbaudit" status "$work/n$n" --check --no-scheduler > "$work/n$n.status" || { cat "$work/n$n.status"; fail "$n ranks: not all canonical"; }
  count=0
  for t in "$work"/local/cells/*/attempts/*/trace.h5; do
    cell=$(basename "$(dirname "$(dirname "$(dirname "$t")")")")
    other=$(ls "$work/n$n/cells/$cell"/attempts/*/trace.h5 2> /dev/null) || fail "$n ranks: cell $cell missing"
    h5diff -q "$t" "$other" || fail "$n ranks: trace of $cell differs from the local run"
    count=$((count + 1))
  done
  [ "$count" -eq "$cells" ] || fail "expected $cells cells, compared $count"
done
[ "$(grep -h '"pid"' "$work"/n2/cells/*/attempts/*/manifest.json | sort -u | wc -l)" -eq 2 ] || fail "2 ranks: cells not spread"
echo "PASS: wbaudit run locally, at 1 and at 2 ranks: identical traces, all canonical"
