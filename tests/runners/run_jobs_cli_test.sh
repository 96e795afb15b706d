#!/usr/bin/env bash
# `wbaudit run --jobs N` end to end:
#  - examples/tiny.toml at --jobs 1 (in this process), --jobs 2 (2 worker processes) and the default at
#    --kokkos-threads=2 (2 workers of 1 thread): byte-identical traces (sha256 of every canonical trace.h5),
#    summary.csv and trajectories.csv; the attempts come from 1, 2 and 2 processes; progress lines still come;
#  - --jobs 0, -1 or not a number: a clear error, non-zero exit, nothing created;
#  - a worker SIGKILLed mid-run: exit 3 (no hang) with the signal named, `status` agrees, and --resume runs exactly the
#    cells that are not done, giving the traces of an uninterrupted run;
#  - the parent SIGKILLed: its workers go with it; --resume completes the sweep.
#   run_jobs_cli_test.sh WBAUDIT SOURCE_DIR
set -uo pipefail
wbaudit=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_PROC_BIND=false
unset OMP_NUM_THREADS
W=(timeout 300 "$wbaudit")
spec=$src/examples/tiny.toml

# "<cell id> <sha256>" of the trace of every cell's canonical attempt, sorted by cell id.
canonical_sums() {
  "$wbaudit" status "$1" --json --no-scheduler | python3 -c '
import json, sys
for c in json.load(sys.stdin)["cells"]:
    for a in c["attempts"]:
        if a["canonical"]:
            print(c["id"], sys.argv[1] + "/cells/" + c["id"] + "/attempts/" + a["uuid"] + "/trace.h5")' "$1" |
    while read -r cell path; do echo "$cell $(sha256sum < "$path" | cut -c1-64)"; done | sort
}
pids_of() { grep -h '"pid"' "$1"/cells/*/attempts/*/manifest.json | sort -u | wc -l; }
done_count() { "$wbaudit" status "$1" --json --no-scheduler | python3 -c 'import json, sys; print(json.load(sys.stdin)["counts"]["done"])'; }

# The same traces and tables at --jobs 1, --jobs 2 and the default (2 threads -> 2 workers).
"${W[@]}" run "$spec" --out "$work/j1" --kokkos-threads=1 --jobs 1 -q || fail "run --jobs 1"
"${W[@]}" run "$spec" --out "$work/j2" --kokkos-threads=1 --jobs 2 -q || fail "run --jobs 2"
"${W[@]}" run "$spec" --out "$work/jd" --kokkos-threads=2 2> "$work/jd.log" || { cat "$work/jd.log"; fail "run at 2 threads"; }
grep -q "(up to 2 worker processes, 1 thread each)" "$work/jd.log" || { cat "$work/jd.log"; fail "default --jobs is not the thread count"; }
grep -q "\[8/8\]" "$work/jd.log" || { cat "$work/jd.log"; fail "progress lines missing with workers"; }
grep -q "8 run, 0 already complete, 0 failed" "$work/jd.log" || { cat "$work/jd.log"; fail "summary line with workers"; }
canonical_sums "$work/j1" > "$work/j1.sums"
[ "$(wc -l < "$work/j1.sums")" -eq 8 ] || fail "--jobs 1: expected 8 canonical traces"
for d in j2 jd; do
  canonical_sums "$work/$d" > "$work/$d.sums"
  cmp -s "$work/j1.sums" "$work/$d.sums" || { diff "$work/j1.sums" "$work/$d.sums"; fail "$d: traces differ from --jobs 1"; }
  for f in summary.csv trajectories.csv; do
    cmp -s "$work/j1/$f" "$work/$d/$f" || fail "$d: $f differs from --jobs 1"
  done
done
[ "$(pids_of "$work/j1")" -eq 1 ] || fail "--jobs 1 ran cells in more than one process"
[ "$(pids_of "$work/j2")" -eq 2 ] || fail "--jobs 2: expected cells from 2 worker processes"
[ "$(pids_of "$work/jd")" -eq 2 ] || fail "default jobs at 2 threads: expected cells from 2 worker processes"

# Bad --jobs values.
for bad in "--jobs 0" "-j 0" "--jobs -1" "--jobs=-3" "--jobs many"; do
  # shellcheck disable=SC2086 # the option and its value are two words on purpose
  if "${W[@]}" run "$spec" --out "$work/bad" $bad -q 2> "$work/bad.err"; then fail "accepted $bad"; fi
  grep -q -- "--jobs" "$work/bad.err" || { cat "$work/bad.err"; fail "$bad: the error does not name --jobs"; }
  grep -q "at least 1\|not a number" "$work/bad.err" || { cat "$work/bad.err"; fail "$bad: unclear error"; }
  [ ! -e "$work/bad" ] || fail "$bad created the sweep directory"
done

# Slower cells for the kill tests, so that a kill lands while cells are running.
sed 's/^steps = 120$/steps = 6000/' "$spec" > "$work/slow.toml"
grep -q "^steps = 6000$" "$work/slow.toml" || fail "could not make the slow spec"
"${W[@]}" run "$work/slow.toml" --out "$work/ref" --kokkos-threads=1 --jobs 2 -q --no-report || fail "slow reference run"
canonical_sums "$work/ref" > "$work/ref.sums"

# Wait until the run in $1 (parent pid $2) has 2 workers and at least $3 finished traces.
wait_for_progress() {
  for _ in $(seq 1 1500); do
    [ "$(pgrep -P "$2" | wc -l)" -ge 2 ] && [ "$(find "$1/cells" -name trace.h5 2> /dev/null | wc -l)" -ge "$3" ] && return 0
    kill -0 "$2" 2> /dev/null || return 1
    sleep 0.02
  done
  return 1
}

# A worker SIGKILLed mid-run.
# (No `timeout` wrapper here: the workers must be children of the pid in $!; ctest's TIMEOUT catches a hang.)
"$wbaudit" run "$work/slow.toml" --out "$work/k" --kokkos-threads=1 --jobs 2 --no-report 2> "$work/k.log" &
parent=$!
wait_for_progress "$work/k" "$parent" 2 || { cat "$work/k.log"; fail "worker kill: the run did not get going"; }
victim=$(pgrep -P "$parent" | head -1)
kill -9 "$victim"
wait "$parent"
rc=$?
[ $rc -eq 3 ] || { cat "$work/k.log"; fail "worker kill: exit $rc, expected 3"; }
grep -q "^    reason: worker process $victim was killed by signal 9 (Killed)" "$work/k.log" \
  || { cat "$work/k.log"; fail "worker kill: the failure does not name the worker and the signal"; }
grep -q "1 cell(s) failed" "$work/k.log" || { cat "$work/k.log"; fail "worker kill: expected exactly 1 failed cell"; }
"$wbaudit" status "$work/k" --no-scheduler > "$work/k.status"
# The killed cell is failed with the signal as its reason (or pending, if the worker died before it began it).
if grep -q "^  failed" "$work/k.status"; then
  grep -q "failed: worker process $victim was killed by signal 9 (Killed) while running the cell" "$work/k.status" \
    || { cat "$work/k.status"; fail "worker kill: status does not say why the cell failed"; }
fi
grep -q "^cells .* 0 running," "$work/k.status" || { cat "$work/k.status"; fail "worker kill: a cell is still shown running"; }
done_before=$(done_count "$work/k")
# 7: the kill landed while the victim ran its cell. 8: it landed after the victim had finished its cell (manifest
# complete) but before it told the parent, so the parent reports the worker's death yet the cell is done; which of
# the two happens depends on scheduling, and both must lose nothing.
[ "$done_before" -eq 7 ] || [ "$done_before" -eq 8 ] \
  || { cat "$work/k.status"; fail "worker kill: $done_before cells done, expected 7 (or 8)"; }
rerun=$((8 - done_before))
before=$(find "$work/k/cells" -name manifest.json | wc -l)
"${W[@]}" run "$work/slow.toml" --out "$work/k" --kokkos-threads=1 --jobs 2 --no-report --resume 2> "$work/kr.log" \
  || { cat "$work/kr.log"; fail "resume after the worker kill"; }
[ "$(grep -c '^\[[0-9]*/8\] ' "$work/kr.log")" -eq "$rerun" ] || { cat "$work/kr.log"; fail "resume ran other than the $rerun unfinished cell(s)"; }
[ "$(find "$work/k/cells" -name manifest.json | wc -l)" -eq $((before + rerun)) ] || fail "resume added other than $rerun attempt(s)"
"$wbaudit" status "$work/k" --check --no-scheduler > /dev/null || fail "worker kill: not complete after resume"
canonical_sums "$work/k" > "$work/k.sums"
cmp -s "$work/k.sums" "$work/ref.sums" || { diff "$work/k.sums" "$work/ref.sums"; fail "worker kill: resumed traces differ"; }

# The parent SIGKILLed: no worker outlives it (a zombie counts as gone: a container's PID 1 may never reap it).
running() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2> /dev/null; }
"$wbaudit" run "$work/slow.toml" --out "$work/p" --kokkos-threads=1 --jobs 2 --no-report -q &
parent=$!
wait_for_progress "$work/p" "$parent" 1 || fail "parent kill: the run did not get going"
children=$(pgrep -P "$parent")
kill -9 "$parent"
wait "$parent" 2> /dev/null
for _ in $(seq 1 500); do
  alive=0
  for c in $children; do running "$c" && alive=1; done
  [ $alive -eq 0 ] && break
  sleep 0.02
done
[ $alive -eq 0 ] || fail "parent kill: workers $children outlived the parent"
"${W[@]}" run "$work/slow.toml" --out "$work/p" --kokkos-threads=1 --jobs 2 --no-report --resume -q \
  || fail "resume after the parent kill"
"$wbaudit" status "$work/p" --check --no-scheduler > /dev/null || fail "parent kill: not complete after resume"
canonical_sums "$work/p" > "$work/p.sums"
cmp -s "$work/p.sums" "$work/ref.sums" || { diff "$work/p.sums" "$work/ref.sums"; fail "parent kill: resumed traces differ"; }
echo "run_jobs_cli_test: all checks passed"
