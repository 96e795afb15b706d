#!/usr/bin/env bash
# `wbaudit status` never shows a dead worker's cell as running (issue 16: for a while after the parent of
# `wbaudit run --jobs 2` was killed, its killed workers were counted as running). A killed worker is a zombie until
# its new parent reaps it, and a container's PID 1 may never do so; kill(pid, 0) still succeeds for a zombie. Here a
# Python subreaper that never reaps orphans stands in for such a PID 1, so the zombies stay for the whole check
# (deterministically, not by timing): the run starts, the test waits until a worker has written a `running`
# manifest (the cell's own signal that it runs), SIGKILLs the parent, waits until every worker is a zombie, and asks
# `status`: no cell running, the killed cells failed as interrupted.
#   status_liveness_test.sh WBAUDIT SOURCE_DIR
set -euo pipefail
wbaudit=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_PROC_BIND=false
unset OMP_NUM_THREADS
# Cells that run far longer than the check (they are killed).
sed 's/^steps = 120$/steps = 2000000/' "$src/examples/tiny.toml" > "$work/slow.toml"
grep -q '^steps = 2000000$' "$work/slow.toml" || { echo "FAIL: could not make the slow spec" >&2; exit 1; }

timeout 300 /usr/bin/python3 - "$wbaudit" "$work" <<'PY'
import ctypes, glob, json, os, signal, subprocess, sys, time

wbaudit, work = sys.argv[1], sys.argv[2]
PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, "prctl failed"
out = os.path.join(work, "s")

def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)

def running_manifests():
    found = []
    for path in glob.glob(os.path.join(out, "cells", "*", "attempts", "*", "manifest.json")):
        try:
            with open(path) as f:
                m = json.load(f)
        except (OSError, ValueError):
            continue  # being replaced
        if m.get("status") == "running":
            found.append(m)
    return found

def state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2]

parent = subprocess.Popen([wbaudit, "run", os.path.join(work, "slow.toml"), "--out", out, "--jobs", "2",
                           "--kokkos-threads=1", "--no-report", "-q"], stdin=subprocess.DEVNULL)
# The workers' signal: a manifest saying "running", written by the worker that began the cell.
while True:
    running = running_manifests()
    if running:
        break
    if parent.poll() is not None:
        fail("the run ended (exit %d) before a cell began" % parent.returncode)
    time.sleep(0.01)  # polling for the manifest, not a delay the result depends on
workers = sorted({m["pid"] for m in running})
os.kill(parent.pid, signal.SIGKILL)
parent.wait()
# The workers die with their parent (PR_SET_PDEATHSIG) and become our unreaped children: zombies.
while any(state(pid) not in (None, "Z", "X") for pid in workers):
    time.sleep(0.01)
zombies = [pid for pid in workers if state(pid) == "Z"]
if not zombies:
    fail("no worker stayed a zombie (the subreaper did not adopt them?)")
left = running_manifests()
if not left:
    fail("no attempt is left 'running' after the kill: the check would prove nothing")
status = subprocess.run([wbaudit, "status", out, "--json", "--no-scheduler"], capture_output=True, text=True)
if status.returncode != 0:
    fail("status exited %d: %s" % (status.returncode, status.stderr))
report = json.loads(status.stdout)
if report["counts"].get("running", 0) != 0:
    fail("status counts %d running cell(s) with every worker dead (zombies %s)" % (report["counts"]["running"], zombies))
interrupted = [c for c in report["cells"] if c["state"] == "failed"]
if len(interrupted) != len(left):
    fail("%d killed cell(s) should be failed, status says %d: %s" % (len(left), len(interrupted), status.stdout))
text = subprocess.run([wbaudit, "status", out, "--no-scheduler"], capture_output=True, text=True).stdout
for m in left:
    if "interrupted: process %d on %s no longer exists" % (m["pid"], m["host"]) not in text:
        fail("status does not say worker %d is gone:\n%s" % (m["pid"], text))
print("status_liveness_test: %d zombie worker(s), %d interrupted cell(s), 0 running: pass" % (len(zombies), len(left)))
PY
