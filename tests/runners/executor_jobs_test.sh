#!/usr/bin/env bash
# Local worker processes (execute_sweep with local_jobs > 1), through executor_jobs_probe:
#  - 1, 2 and 3 jobs give the same cell outputs (hashes), the same recorded failure and the same failed cells in cell
#    order; with 2 jobs the attempts come from 2 worker processes, none from the parent;
#  - a worker killed by SIGKILL inside a cell: the run ends (no hang) with that cell failed, its attempt says which
#    signal, a replacement runs the remaining cells, and --resume runs exactly that cell, with outputs identical to
#    an uninterrupted run;
#  - a store error inside a worker is an error of the parent (exit 1, message), not a failed cell;
#  - the parent killed by SIGKILL leaves no worker behind, and --resume completes the sweep.
#   executor_jobs_test.sh PROBE
set -uo pipefail
probe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_PROC_BIND=false OMP_NUM_THREADS=1
P=(timeout 120 "$probe")
cells_of() { grep -v '^\(summary\|events\|failed_ids\|reason\)' "$1"; }
pids_of() { grep -h '"pid"' "$1"/cells/*/attempts/*/manifest.json | sort -u | wc -l; }

# Same outputs and the same recorded failure at 1, 2 and 3 jobs.
for j in 1 2 3; do
  "${P[@]}" "$work/j$j" --jobs $j --fail-seed 6 > "$work/j$j.txt" 2> "$work/j$j.err"
  rc=$?
  [ $rc -eq 3 ] || { cat "$work/j$j.txt" "$work/j$j.err"; fail "jobs $j: exit $rc, expected 3 (one failed cell)"; }
  grep -q "^summary total=16 completed=15 failed=1 skipped=0 jobs=$j" "$work/j$j.txt" || { cat "$work/j$j.txt"; fail "jobs $j: summary"; }
  grep -qx "failed_ids cell/seed=6" "$work/j$j.txt" || { cat "$work/j$j.txt"; fail "jobs $j: failed_ids"; }
  grep -q "^events 32 consistent$" "$work/j$j.txt" || { cat "$work/j$j.txt"; fail "jobs $j: progress events"; }
  grep -qx "reason cell/seed=6: attempt .*: failed: seed 6 failed on purpose" "$work/j$j.txt" \
    || { cat "$work/j$j.txt"; fail "jobs $j: the failure reason is not recorded in the attempt"; }
  [ "$(cells_of "$work/j$j.txt" | grep -c ' done [0-9a-f]\{64\}$')" -eq 15 ] || fail "jobs $j: 15 done cells expected"
  cells_of "$work/j$j.txt" > "$work/j$j.cells"
done
cmp -s "$work/j1.cells" "$work/j2.cells" || { diff "$work/j1.cells" "$work/j2.cells"; fail "2 jobs differ from 1"; }
cmp -s "$work/j1.cells" "$work/j3.cells" || { diff "$work/j1.cells" "$work/j3.cells"; fail "3 jobs differ from 1"; }
[ "$(pids_of "$work/j1")" -eq 1 ] || fail "1 job: attempts from more than one process"
[ "$(pids_of "$work/j2")" -eq 2 ] || fail "2 jobs: expected attempts from 2 worker processes, found $(pids_of "$work/j2")"
parent_pid=$(sed -n 's/.* parent_pid=\([0-9]*\).*/\1/p' "$work/j2.txt")
if grep -q "\"pid\": $parent_pid," "$work"/j2/cells/*/attempts/*/manifest.json; then fail "2 jobs: the parent ran a cell"; fi
# An uninterrupted run without failures, the reference for the resumed ones below.
"${P[@]}" "$work/ref" --jobs 2 > "$work/ref.txt" 2>&1 || { cat "$work/ref.txt"; fail "clean run"; }
cells_of "$work/ref.txt" > "$work/ref.cells"
[ "$(grep -c ' done ' "$work/ref.cells")" -eq 16 ] || fail "clean run: 16 done cells expected"

# failed_ids are in cell order, not in the order the cells finished: seed=2 (slow) fails after seed=3.
"${P[@]}" "$work/order" --jobs 2 --fail-seed 2 --fail-seed 3 --slow-seed 2 > "$work/order.txt" 2> "$work/order.err"
[ $? -eq 3 ] || { cat "$work/order.txt" "$work/order.err"; fail "two failures: exit code"; }
grep -qx "failed_ids cell/seed=2 cell/seed=3" "$work/order.txt" || { cat "$work/order.txt"; fail "failed_ids not in cell order"; }
grep -q "^summary total=16 completed=14 failed=2" "$work/order.txt" || { cat "$work/order.txt"; fail "two failures: summary"; }

# A worker SIGKILLed inside the cell seed=9: reported failed with the signal, the rest completed by the others.
"${P[@]}" "$work/k" --jobs 2 --kill-seed 9 > "$work/k.txt" 2> "$work/k.err"
rc=$?
[ $rc -eq 3 ] || { cat "$work/k.txt" "$work/k.err"; fail "killed worker: exit $rc, expected 3 (124: hung)"; }
grep -q "^summary total=16 completed=15 failed=1 skipped=0" "$work/k.txt" || { cat "$work/k.txt"; fail "killed worker: summary"; }
grep -qx "failed_ids cell/seed=9" "$work/k.txt" || { cat "$work/k.txt"; fail "killed worker: failed_ids"; }
grep -q "^events 32 consistent$" "$work/k.txt" || { cat "$work/k.txt"; fail "killed worker: progress events"; }
grep -q "^cell/seed=9 failed -$" "$work/k.txt" || { cat "$work/k.txt"; fail "killed worker: cell not failed in the store"; }
grep -q "^reason cell/seed=9: .*worker process [0-9]* was killed by signal 9 (Killed) while running the cell" "$work/k.txt" \
  || { cat "$work/k.txt"; fail "killed worker: the attempt does not name the signal"; }
# The replacement worker ran cells too: 2 workers at the start plus 1.
[ "$(pids_of "$work/k")" -eq 3 ] || fail "killed worker: expected attempts from 3 worker processes, found $(pids_of "$work/k")"
"${P[@]}" "$work/k" --jobs 2 --resume > "$work/kr.txt" 2> "$work/kr.err" || { cat "$work/kr.txt" "$work/kr.err"; fail "resume after the killed worker"; }
grep -q "^summary total=16 completed=1 failed=0 skipped=15" "$work/kr.txt" || { cat "$work/kr.txt"; fail "resume ran more or less than the killed cell"; }
cells_of "$work/kr.txt" > "$work/kr.cells"
cmp -s "$work/kr.cells" "$work/ref.cells" || { diff "$work/kr.cells" "$work/ref.cells"; fail "resumed sweep differs from an uninterrupted one"; }

# A store error inside a worker: the parent fails with it (exit 1), and leaves no worker running.
"${P[@]}" "$work/se" --jobs 2 --store-error-seed 5 > "$work/se.txt" 2> "$work/se.err"
rc=$?
[ $rc -eq 1 ] || { cat "$work/se.txt" "$work/se.err"; fail "store error in a worker: exit $rc, expected 1"; }
grep -q "worker process [0-9]*: cannot rename .*manifest.json" "$work/se.err" || { cat "$work/se.err"; fail "store error: unclear message"; }
grep -qx "children: none" "$work/se.err" || { cat "$work/se.err"; fail "store error: workers left unreaped"; }
if pgrep -f -- "--worker $work/se" > /dev/null; then fail "store error: a worker outlived the parent"; fi

# The parent's own error mid-sweep (its progress display throws): busy workers are killed and reaped at once.
# The first cell ends after 0.5 s, while the other worker sleeps 10 minutes in seed=1: a parent that waited for it
# would be stopped by `timeout 120` (exit 124, not 1), with seed=1 done.
"${P[@]}" "$work/te" --jobs 2 --sleep-ms 500 --throw-in-progress --slow-seed 1 --slow-ms 600000 > "$work/te.txt" 2> "$work/te.err"
rc=$?
[ $rc -eq 1 ] || { cat "$work/te.txt" "$work/te.err"; fail "parent error: exit $rc, expected 1"; }
grep -q "progress display failed on purpose" "$work/te.err" || { cat "$work/te.err"; fail "parent error: message"; }
grep -qx "children: none" "$work/te.err" || { cat "$work/te.err"; fail "parent error: workers left unreaped"; }
"${P[@]}" "$work/te" --jobs 2 --status-only > "$work/tes.txt" 2>&1 || true
grep -q " done " "$work/tes.txt" && ! grep -q "^cell/seed=1 done " "$work/tes.txt" \
  || { cat "$work/tes.txt"; fail "parent error: expected a cell done and seed=1 not (its worker killed, not waited for)"; }

# The parent SIGKILLed mid-sweep: its workers go with it (no orphans), and --resume completes the sweep.
# The kill waits for a finished cell in the journal (written after its manifest), not for a time; the sweep takes
# at least 4 s (16 cells of 0.5 s on 2 workers), so it is still partly done when the kill lands.
"$probe" "$work/pk" --jobs 2 --sleep-ms 500 > /dev/null 2>&1 &
parent=$!
for _ in $(seq 1 1500); do
  [ "$(pgrep -P "$parent" | wc -l)" -ge 2 ] && grep -q '"event":"finish"' "$work/pk/journal.jsonl" 2> /dev/null && break
  sleep 0.02
done
children=$(pgrep -P "$parent")
[ "$(echo "$children" | wc -w)" -eq 2 ] || fail "parent kill: expected 2 workers, found: $children"
kill -9 "$parent"
wait "$parent" 2> /dev/null
# A zombie counts as gone: whoever inherited it (PID 1 of a container) may never reap it.
running() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2> /dev/null; }
for _ in $(seq 1 500); do
  alive=0
  for c in $children; do running "$c" && alive=1; done
  [ $alive -eq 0 ] && break
  sleep 0.02
done
[ $alive -eq 0 ] || fail "parent kill: workers $children outlived the parent"
"${P[@]}" "$work/pk" --jobs 2 --status-only > "$work/pks.txt" 2>&1 || true
grep -q " done " "$work/pks.txt" && ! grep -q "^cell/seed=15 done" "$work/pks.txt" \
  || { cat "$work/pks.txt"; fail "parent kill: expected a partly done sweep"; }
"${P[@]}" "$work/pk" --jobs 2 --resume > "$work/pkr.txt" 2> "$work/pkr.err" || { cat "$work/pkr.txt" "$work/pkr.err"; fail "resume after the parent kill"; }
cells_of "$work/pkr.txt" > "$work/pkr.cells"
cmp -s "$work/pkr.cells" "$work/ref.cells" || { diff "$work/pkr.cells" "$work/ref.cells"; fail "resumed sweep differs after the parent kill"; }
echo "PASS: 1/2/3 jobs identical; failure recorded; killed worker reported and resumed; store error surfaced; no orphans"
