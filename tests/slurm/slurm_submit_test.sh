#!/usr/bin/env bash
# Slurm integration: starts a real one-node cluster (slurmctld + slurmd on loopback, auth/none, state and spool in
# a temporary directory; stopped by pid on exit, even on failure), then:
#  1. a dry run chunks cells to respect the cluster's MaxArraySize (8 here);
#  2. `wbaudit submit` runs a small sweep as a job array (throttled to one task at a time) plus the report job
#     (afterany); one array task is cancelled while pending; everything else completes and is canonical;
#  3. `wbaudit submit --resume` submits only the cancelled cell, after which every cell is canonical and complete,
#     with exactly one attempt each;
#  4. a drained node (a node that never starts the job): status shows the scheduler's PENDING view while content
#     says pending; after scancel, --resume completes the sweep;
#  5. --mpi-ranks 2: the whole sweep as one MPI job, the sweep's signing key exported to both ranks; the same with
#     --launcher srun (ranks started by Slurm with PMIx);
#  6. cells longer than --time: each task is stopped at its limit, requeued once (--max-requeues 1), stopped again
#     and gives up; status reports both cells failed, naming SLURM_RESTART_COUNT and the cap.
#   slurm_submit_test.sh WBAUDIT SOURCE_DIR
set -uo pipefail
wbaudit=$1
src=$2
here="$src/tests/slurm"
work=$(mktemp -d /tmp/wbaudit-slurm.XXXXXX)
ctld_pid="" slurmd_pid=""

cleanup() {
  if [ -n "$ctld_pid" ]; then scancel --quiet --user="$(id -un)" 2>/dev/null; fi
  for pid in $slurmd_pid $ctld_pid; do kill "$pid" 2>/dev/null; done
  for pid in $slurmd_pid $ctld_pid; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/slurmctld.log "$work"/slurmd.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

for tool in slurmctld slurmd sbatch squeue scancel scontrol sinfo; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done

port=$((20000 + RANDOM % 20000))
mkdir -p "$work/state" "$work/spool"
cat > "$work/slurm.conf" <<CONF
ClusterName=wbaudit-test
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmUser=$(id -un)
SlurmdUser=root
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MaxArraySize=8
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$work/slurm.conf"
export OMP_PROC_BIND=false

slurmctld -D -c > "$work/slurmctld.out" 2>&1 &
ctld_pid=$!
slurmd -D -N localhost > "$work/slurmd.out" 2>&1 &
slurmd_pid=$!
state=""
for _ in $(seq 1 60); do
  state=$(sinfo -h -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 1
done
[ "$state" = idle ] || fail "the test cluster did not come up (node state '$state')"

# Waits (bounded) until none of the given jobs is in the queue.
wait_jobs() {
  for _ in $(seq 1 240); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 1
  done
  squeue >&2
  fail "jobs $1 still queued after 240 s"
}

# 1. Chunking against MaxArraySize: 21 cells, at most 8 array tasks -> 3 cells per task, 7 tasks.
"$wbaudit" submit "$here/wide_sweep.toml" --out "$work/wide" --dry-run --cells-per-task 1 --array-throttle 0 \
  > "$work/dry.txt" || fail "dry run"
grep -q "^# dry run: 21 cells in 7 task(s) of up to 3 cells$" "$work/dry.txt" || { cat "$work/dry.txt"; fail "chunking"; }
grep -q "^#SBATCH --array=0-6$" "$work/dry.txt" || fail "array range of the dry run"
[ -e "$work/wide" ] && fail "the dry run wrote the sweep directory"
# The defaults: --cells-per-task auto packs the 21 short cells (about 0.06 s each) into one task, throttled to 32.
"$wbaudit" submit "$here/wide_sweep.toml" --out "$work/wide" --dry-run > "$work/dry_auto.txt" || fail "auto dry run"
grep -q "^# dry run: 21 cells in 1 task(s) of up to 21 cells (--cells-per-task auto: " "$work/dry_auto.txt" \
  || { head -1 "$work/dry_auto.txt"; fail "auto packing of short cells"; }
grep -q "^#SBATCH --array=0-0%32$" "$work/dry_auto.txt" || fail "the default array throttle"
# Tasks of 0.006 s would give each cell its own task, 21 > MaxArraySize 8: the bound rises to 3 cells per task.
"$wbaudit" submit "$here/wide_sweep.toml" --out "$work/wide" --dry-run --task-minutes 0.0001 > "$work/dry_max.txt" \
  || fail "auto dry run against MaxArraySize"
grep -q "^# dry run: 21 cells in 7 task(s) of up to 3 cells (--cells-per-task auto: " "$work/dry_max.txt" \
  || { head -1 "$work/dry_max.txt"; fail "auto packing against MaxArraySize"; }

# 2. Submit the array, cancel one pending task.
sweep="$work/sweep"
"$wbaudit" submit "$here/tiny_sweep.toml" --out "$sweep" --cells-per-task 1 --array-throttle 1 --time 00:05:00 \
  --report-command "status --cells --no-scheduler" > "$work/submit1.txt" 2>&1 || { cat "$work/submit1.txt"; fail "submit"; }
cat "$work/submit1.txt"
cells_job=$(awk '/^cells job/ {print $3}' "$work/submit1.txt")
report_job=$(awk '/^report job/ {print $3}' "$work/submit1.txt")
[ -n "$cells_job" ] && [ -n "$report_job" ] || fail "submit printed no job ids"
grep -q "array of 8 tasks, 1 cells each" "$work/submit1.txt" || fail "expected an 8-task array"
scontrol show job "$report_job" | grep -q "Dependency=afterany:${cells_job}" || fail "report job lacks afterany:$cells_job"
scancel "${cells_job}_7" || fail "scancel of task 7"
cancelled=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tasks'][7][0])" "$sweep/slurm/submit-1/tasks.json")
wait_jobs "$cells_job,$report_job"
"$wbaudit" status "$sweep" --json --no-scheduler > "$work/status1.json" || fail "status"
python3 - "$work/status1.json" "$cancelled" <<'PY' || fail "state after the cancelled task"
import json, sys
s = json.load(open(sys.argv[1])); cancelled = sys.argv[2]
assert s["counts"] == {"done": 7, "noncanonical": 0, "running": 0, "failed": 0, "pending": 1}, s["counts"]
for c in s["cells"]:
    if c["id"] == cancelled:
        assert c["state"] == "pending", c
    else:
        assert c["state"] == "done" and len(c["attempts"]) == 1 and c["attempts"][0]["canonical"], c
PY
ls "$sweep"/slurm/submit-1/logs/*_0.out > /dev/null 2>&1 || fail "no %A_%a logs"
grep -q "7 done" "$sweep"/slurm/submit-1/logs/report_"$report_job".out || fail "the report job did not run after the array"
for f in summary.csv trajectories.csv report/report.html report/report.md; do
  [ -s "$sweep/$f" ] || fail "the report job did not write $f (wbaudit run's outputs)"
done
grep -h '"array_job_id"' "$sweep"/cells/*/attempts/*/manifest.json | grep -q "\"$cells_job\"" || fail "manifests lack the array job id"
if "$wbaudit" status "$sweep" --check --no-scheduler > /dev/null; then fail "status --check passed with a pending cell"; fi

# 3. Resume: only the cancelled cell is submitted again.
"$wbaudit" submit "$here/tiny_sweep.toml" --out "$sweep" --resume --report-command "status --no-scheduler" \
  > "$work/submit2.txt" 2>&1 || { cat "$work/submit2.txt"; fail "submit --resume"; }
cat "$work/submit2.txt"
grep -q "array of 1 tasks, up to 1 cells each (--cells-per-task auto: .*), 1 cells)" "$work/submit2.txt" \
  || fail "resume did not submit exactly one cell"
python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['tasks']; assert t == [[sys.argv[2]]], t" \
  "$sweep/slurm/submit-2/tasks.json" "$cancelled" || fail "resume submitted other cells"
job2=$(awk '/^cells job/ {print $3}' "$work/submit2.txt")
rep2=$(awk '/^report job/ {print $3}' "$work/submit2.txt")
wait_jobs "$job2,$rep2"
"$wbaudit" status "$sweep" --check --no-scheduler > "$work/status2.txt" || { cat "$work/status2.txt"; fail "not every cell canonical after resume"; }
[ "$(find "$sweep/cells" -name manifest.json | wc -l)" -eq 8 ] || fail "cells were run more than once"
# A spec changed after creation is refused.
sed 's/steps = 60/steps = 61/' "$here/tiny_sweep.toml" > "$work/changed.toml"
if "$wbaudit" submit "$work/changed.toml" --out "$sweep" --resume > "$work/changed.txt" 2>&1; then fail "changed spec accepted"; fi
grep -q "spec changed" "$work/changed.txt" || { cat "$work/changed.txt"; fail "changed spec: unclear message"; }

# 4. A node that never starts the job: pending in the scheduler and in content; recoverable.
scontrol update nodename=localhost state=drain reason=wbaudit-test || fail "drain"
sweep3="$work/sweep3"
"$wbaudit" submit "$here/tiny_sweep.toml" --out "$sweep3" --cells-per-task 4 --report-command status > "$work/submit3.txt" 2>&1 \
  || { cat "$work/submit3.txt"; fail "submit to a drained node"; }
job3=$(awk '/^cells job/ {print $3}' "$work/submit3.txt")
rep3=$(awk '/^report job/ {print $3}' "$work/submit3.txt")
sleep 2
"$wbaudit" status "$sweep3" > "$work/status3.txt"
grep -q "8 pending" "$work/status3.txt" || { cat "$work/status3.txt"; fail "content should say 8 pending"; }
grep -q "PENDING" "$work/status3.txt" || { cat "$work/status3.txt"; fail "status does not show the scheduler's view"; }
scancel "$job3" "$rep3"
wait_jobs "$job3,$rep3"
scontrol update nodename=localhost state=resume || fail "resume node"
"$wbaudit" submit "$here/tiny_sweep.toml" --out "$sweep3" --resume --report-command status > "$work/submit4.txt" 2>&1 \
  || { cat "$work/submit4.txt"; fail "resubmit"; }
job4=$(awk '/^cells job/ {print $3}' "$work/submit4.txt")
rep4=$(awk '/^report job/ {print $3}' "$work/submit4.txt")
wait_jobs "$job4,$rep4"
"$wbaudit" status "$sweep3" --check --no-scheduler > /dev/null || fail "sweep3 incomplete after resubmission"

# 5. The whole sweep as one MPI job (2 ranks inside one allocation).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sweep5="$work/sweep5"
"$wbaudit" submit "$here/tiny_sweep.toml" --out "$sweep5" --mpi-ranks 2 --report-command status > "$work/submit5.txt" 2>&1 \
  || { cat "$work/submit5.txt"; fail "submit --mpi-ranks"; }
grep -q "one MPI job, 2 ranks, 8 cells" "$work/submit5.txt" || { cat "$work/submit5.txt"; fail "MPI job plan"; }
job5=$(awk '/^cells job/ {print $3}' "$work/submit5.txt")
rep5=$(awk '/^report job/ {print $3}' "$work/submit5.txt")
wait_jobs "$job5,$rep5"
"$wbaudit" status "$sweep5" --check --no-scheduler > /dev/null || { cat "$sweep5"/slurm/submit-1/logs/*; fail "MPI job left cells undone"; }
[ "$(grep -h '"pid"' "$sweep5"/cells/*/attempts/*/manifest.json | sort -u | wc -l)" -eq 2 ] || fail "MPI job did not use 2 ranks"
# Both ranks signed and journaled their cells with the sweep's key (status --check above verifies it), which the
# script hands to the ranks explicitly (docs/contracts.md, "Signed provenance").
grep -q "export WBAUDIT_KEY_FILE=.*wbaudit/keys/" "$sweep5/slurm/submit-1/cells.sbatch" || fail "the MPI script does not export the key"
grep -q "mpirun .* -x WBAUDIT_KEY_FILE " "$sweep5/slurm/submit-1/cells.sbatch" || fail "the key is not passed to the MPI ranks"
[ "$(grep -c '"event":"finish"' "$sweep5/journal.jsonl")" -eq 8 ] || fail "the journal lacks the ranks' finish entries"

# 5b. The same MPI job with its ranks started by srun (--launcher srun; the cluster's MpiDefault is none, so PMIx is
#     chosen through SLURM_MPI_TYPE in the submitting environment, which sbatch copies into the job). Ranks that came
#     up without PMI would each be a whole MPI job and run every cell: exactly one attempt per cell, from two processes,
#     shows that the two ranks shared the cells.
sweep5b="$work/sweep5b"
SLURM_MPI_TYPE=pmix "$wbaudit" submit "$here/tiny_sweep.toml" --out "$sweep5b" --mpi-ranks 2 --launcher srun \
  --report-command status > "$work/submit5b.txt" 2>&1 || { cat "$work/submit5b.txt"; fail "submit --launcher srun"; }
grep -q '^srun --ntasks="$SLURM_NTASKS" .* --export=ALL,WBAUDIT_KEY_FILE ' "$sweep5b/slurm/submit-1/cells.sbatch" \
  || fail "the srun script does not launch the ranks with the key"
job5b=$(awk '/^cells job/ {print $3}' "$work/submit5b.txt")
rep5b=$(awk '/^report job/ {print $3}' "$work/submit5b.txt")
wait_jobs "$job5b,$rep5b"
"$wbaudit" status "$sweep5b" --check --no-scheduler > /dev/null || { cat "$sweep5b"/slurm/submit-1/logs/*; fail "srun job left cells undone"; }
[ "$(ls -d "$sweep5b"/cells/*/attempts/* | wc -l)" -eq 8 ] || { cat "$sweep5b"/slurm/submit-1/logs/*; fail "srun ranks did not share the cells (one attempt per cell)"; }
[ "$(grep -h '"pid"' "$sweep5b"/cells/*/attempts/*/manifest.json | sort -u | wc -l)" -eq 2 ] || fail "srun job did not use 2 ranks"

# 6. Cells longer than --time (20M steps, about 20 min each): USR1 50 s before the 1-minute limit stops each task
#    and requeues it once; stopped again, it gives up. Slurm delays a requeued job's start by about 2 minutes
#    (BeginTime); the test moves that start to 3 s from now, once per task, which changes nothing else. Not to now:
#    slurmd refuses a launch whose credential is no newer, in whole seconds, than the requeue that revoked the last
#    one ("Job credential revoked"), so a start in the requeue's own second would kill the task unstarted.
sweep6="$work/sweep6"
sed -e 's/^steps = 60$/steps = 20000000/' -e 's/^k = 10$/k = 5000000/' -e 's/^"target.format" = .*/"target.format" = ["bf16"]/' \
  -e 's/^"optimizer.lr_scale" = .*/"optimizer.lr_scale" = [0.5]/' "$here/tiny_sweep.toml" > "$work/long.toml"
"$wbaudit" submit "$work/long.toml" --out "$sweep6" --time 1 --signal-seconds 50 --max-requeues 1 \
  --report-command "status --no-scheduler" > "$work/submit6.txt" 2>&1 || { cat "$work/submit6.txt"; fail "submit long cells"; }
grep -q "array of 2 tasks, up to 1 cells each (--cells-per-task auto: " "$work/submit6.txt" \
  || { cat "$work/submit6.txt"; fail "auto packing gives each long cell its own task"; }
job6=$(awk '/^cells job/ {print $3}' "$work/submit6.txt")
rep6=$(awk '/^report job/ {print $3}' "$work/submit6.txt")
declare -A moved=()
for _ in $(seq 1 300); do
  [ -z "$(squeue -h -j "$job6" 2>/dev/null)" ] && break
  while read -r task; do
    [ -n "${moved[$task]:-}" ] && continue
    scontrol update jobid="$task" starttime=now+3 2>/dev/null && moved[$task]=1
  done < <(squeue -h -r -j "$job6" -o "%i %r" 2>/dev/null | awk '$2 == "BeginTime" {print $1}')
  sleep 1
done
wait_jobs "$job6,$rep6"
"$wbaudit" status "$sweep6" --json --no-scheduler > "$work/status6.json"
python3 - "$work/status6.json" <<'PY' || { cat "$sweep6"/slurm/submit-1/logs/*.err; fail "the requeue cap"; }
import json, sys
s = json.load(open(sys.argv[1]))
assert s["counts"]["failed"] == 2 and s["counts"]["done"] == 0, s["counts"]
for c in s["cells"]:
    # Two attempts: the one stopped by the requeue, and the one after it that gave up. Under load Slurm can deliver
    # the requeued task's USR1 as it starts (its time-limit check runs periodically), before run-cells begins a new
    # attempt; --give-up then marks the stopped one failed with the cap's reason: one attempt. The requeue itself is
    # checked in the task's log below.
    assert len(c["attempts"]) in (1, 2), c
    last = c["attempts"][-1]
    assert last["status"] == "failed", last
    assert "after 1 requeue(s) (SLURM_RESTART_COUNT=1, the cap of wbaudit submit --max-requeues 1)" in last["exit_reason"], last
    assert "--time 1" in last["exit_reason"], last
PY
grep -q "requeueing .* (requeue 1 of at most 1)" "$sweep6"/slurm/submit-1/logs/*_0.err || fail "no requeue before the cap"
grep -q "gives up" "$sweep6"/slurm/submit-1/logs/*_0.err || fail "the task did not give up at the cap"
echo "PASS: Slurm array, cancelled task resumed alone, afterany report job, drained node recovered, one MPI job (mpirun and srun), requeue cap"
