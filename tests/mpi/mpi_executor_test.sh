#!/usr/bin/env bash
# MPI executor: the same sweep locally, at 1 and at 2 ranks gives identical cell outputs (hashes) and the same
# recorded failure; a rank killed mid-sweep (SIGKILL) leaves nothing that passes as complete, and --resume finishes
# the sweep with outputs identical to an uninterrupted run.
#   mpi_executor_test.sh PROBE
set -uo pipefail
probe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export OMP_PROC_BIND=false OMP_NUM_THREADS=1

"$probe" "$work/local" --fail-seed 6 > "$work/local.txt" 2> "$work/local.err"
[ $? -eq 3 ] || { cat "$work/local.err"; fail "local run should exit 3 (one failed cell)"; }
timeout 300 "${mpirun[@]}" -n 1 "$probe" "$work/n1" --fail-seed 6 > "$work/n1.txt" 2> "$work/n1.err"
[ $? -ne 0 ] || fail "1-rank run should fail (one failed cell)"
timeout 300 "${mpirun[@]}" -n 2 "$probe" "$work/n2" --fail-seed 6 > "$work/n2.txt" 2> "$work/n2.err"
[ $? -ne 0 ] || fail "2-rank run should fail (one failed cell)"
for f in local n1 n2; do
  grep -q "^summary total=16 completed=15 failed=1 skipped=0" "$work/$f.txt" || { cat "$work/$f.txt" "$work/$f.err"; fail "$f summary"; }
  grep -q "^cell/seed=6 failed -$" "$work/$f.txt" || { cat "$work/$f.txt"; fail "$f: seed 6 not recorded as failed"; }
  [ "$(grep -c ' done [0-9a-f]\{64\}$' "$work/$f.txt")" -eq 15 ] || { cat "$work/$f.txt"; fail "$f: 15 done cells expected"; }
  grep -v '^summary' "$work/$f.txt" > "$work/$f.cells"
done
grep -q "ranks=2" "$work/n2.txt" || fail "the 2-rank run did not see 2 ranks"
cmp -s "$work/local.cells" "$work/n1.cells" || { diff "$work/local.cells" "$work/n1.cells"; fail "1 rank differs from local"; }
cmp -s "$work/local.cells" "$work/n2.cells" || { diff "$work/local.cells" "$work/n2.cells"; fail "2 ranks differ from local"; }
# Both ranks ran cells (dynamic distribution, not everything on one rank).
hosts_pids=$(cat "$work"/n2/cells/*/attempts/*/manifest.json | grep '"pid"' | sort -u | wc -l)
[ "$hosts_pids" -eq 2 ] || fail "expected attempts from 2 processes, found $hosts_pids"

# Resume after the failure: only the failed cell runs again, and now completes.
timeout 300 "${mpirun[@]}" -n 2 "$probe" "$work/n2" --resume > "$work/n2r.txt" 2> "$work/n2r.err" || { cat "$work/n2r.err"; fail "resume"; }
grep -q "^summary total=16 completed=1 failed=0 skipped=15" "$work/n2r.txt" || { cat "$work/n2r.txt"; fail "resume ran more than the failed cell"; }
grep -v '^summary' "$work/n2r.txt" > "$work/n2r.cells"

# Killed rank: the process that runs seed 9 dies by SIGKILL; mpirun aborts the job.
timeout 300 "${mpirun[@]}" -n 2 "$probe" "$work/k2" --kill-seed 9 > "$work/k2.txt" 2> "$work/k2.err"
[ $? -ne 0 ] || fail "the killed run should not succeed"
"$probe" "$work/k2" --status-only > "$work/k2s.txt" 2>&1 || { cat "$work/k2s.txt"; fail "status after the kill"; }
grep -q "^cell/seed=9 \(failed\|running\) -$" "$work/k2s.txt" || { cat "$work/k2s.txt"; fail "the killed cell is not failed/running"; }
# Whatever finished before the kill is complete and identical to the uninterrupted run.
while read -r line; do
  grep -qxF "$line" "$work/n2r.cells" || fail "kept cell differs: $line"
done < <(grep ' done ' "$work/k2s.txt")
timeout 300 "${mpirun[@]}" -n 2 "$probe" "$work/k2" --resume > "$work/k2r.txt" 2> "$work/k2r.err" || { cat "$work/k2r.err"; fail "resume after kill"; }
grep -v '^summary' "$work/k2r.txt" > "$work/k2r.cells"
cmp -s "$work/k2r.cells" "$work/n2r.cells" || { diff "$work/k2r.cells" "$work/n2r.cells"; fail "resumed sweep differs from an uninterrupted one"; }
[ "$(grep -c ' done ' "$work/k2r.cells")" -eq 16 ] || fail "resume after kill left cells undone"
echo "PASS: local/1/2 ranks identical; failure recorded; resume reran 1 cell; killed run recovered"
