#!/usr/bin/env bash
# Provenance through the command line, on a small real sweep (tests/slurm/tiny_sweep.toml):
#  - status reports every cell done and canonical;
#  - an edited trace, a hand-made attempt directory, a corrupt manifest, an attempt recorded by another binary and
#    another cell's attempt copied in with its manifest rewritten to this cell (all hashes matching) are reported non-canonical with their reasons, and `run --resume` reruns exactly those cells;
#  - a missing executable copy is reported and restored by `run --resume`; a changed spec is refused;
#  - the executable's non-system shared libraries are frozen into bin/lib/ and loaded from there (also from a copy of
#    the sweep moved elsewhere: ldd and LD_DEBUG=libs); a modified one is reported and restored by `run --resume`;
#  - a killed run (SIGKILL) leaves nothing that passes as complete and --resume finishes it;
#  - register refuses once outcomes exist (unless --retrospective); deviate appends to the log;
#  - a full disk (small tmpfs, when this user may mount one) fails with a clear message, loses nothing, and
#    --resume completes the sweep once there is space.
#   provenance_cli_test.sh WBAUDIT SOURCE_DIR
set -uo pipefail
wbaudit=$1
spec=$2/tests/slurm/tiny_sweep.toml
work=$(mktemp -d)
mounted=""
mounted2=""
cleanup() {
  [ -n "$mounted" ] && umount "$mounted" 2> /dev/null
  [ -n "$mounted2" ] && umount "$mounted2" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_PROC_BIND=false OMP_NUM_THREADS=1
W=("$wbaudit" --kokkos-threads=1)
cell_dir() { ls -d "$1"/cells/*/ | sed -n "${2}p"; }
attempts() { find "$1/cells" -name manifest.json | wc -l; }

d="$work/s"
"${W[@]}" run "$spec" --out "$d" --no-report -q || fail "run"
"${W[@]}" status "$d" --check > "$work/st0" || { cat "$work/st0"; fail "fresh sweep not canonical"; }
grep -q "8 done, 0 non-canonical" "$work/st0" || fail "status counts"

# Tampering, one kind per cell.
c1=$(cell_dir "$d" 1); c2=$(cell_dir "$d" 2); c3=$(cell_dir "$d" 3); c4=$(cell_dir "$d" 4)
printf 'x' >> "$(ls "$c1"/attempts/*/trace.h5)"                                   # edited trace
mkdir -p "$c2/attempts/handmade" && cp "$(ls "$c3"/attempts/*/trace.h5)" "$c2/attempts/handmade/trace.h5"
rm -rf "$c2"/attempts/[0-9a-f]*-*                                                  # only the hand-made one left
truncate -s 40 "$(ls "$c3"/attempts/*/manifest.json)"                              # corrupt manifest
m4=$(ls "$c4"/attempts/*/manifest.json)                                            # another binary
sed -i 's/"executable_sha256": "[0-9a-f]*"/"executable_sha256": "'"$(printf other | sha256sum | cut -c1-64)"'"/' "$m4"
c5=$(cell_dir "$d" 5); c6=$(cell_dir "$d" 6)                                       # another cell's attempt, its
rm -rf "$c5"/attempts/*                                                            # manifest rewritten to this cell
cp -r "$(ls -d "$c6"/attempts/*/)" "$c5/attempts/"                                 # (every hash still matches)
sed -i 's/"cell_id": "[0-9a-f]*"/"cell_id": "'"$(basename "$c5")"'"/' "$(ls "$c5"/attempts/*/manifest.json)"
"${W[@]}" status "$d" --no-scheduler > "$work/st1"
if "${W[@]}" status "$d" --check --no-scheduler > /dev/null; then fail "status --check passed a tampered sweep"; fi
grep -q "3 done, 5 non-canonical" "$work/st1" || { cat "$work/st1"; fail "tampered counts"; }
for reason in "trace.h5: SHA-256 differs from the signed manifest" "no manifest.json" "corrupt manifest" "run by another binary" \
  "trace.h5 is the run of another configuration"; do
  grep -q "$reason" "$work/st1" || { cat "$work/st1"; fail "status lacks the reason '$reason'"; }
done
"${W[@]}" run "$spec" --out "$d" --resume --no-report -q || fail "resume after tampering"
"${W[@]}" status "$d" --check --no-scheduler > /dev/null || fail "resume did not repair the tampered cells"
# The hand-made and the copied attempt directories are foreign (not in the journal): resume moves them to foreign/.
[ -d "$d/foreign/$(basename "$c2")/handmade" ] || fail "resume did not move the hand-made attempt aside"
[ "$(attempts "$d")" -eq 11 ] || fail "resume should add exactly 5 attempts to the 6 manifests left (now $(attempts "$d"))"

# Missing executable copy: reported, restored by --resume; a changed spec is refused.
rm "$d/bin/wbaudit"
"${W[@]}" status "$d" --no-scheduler | grep -q "executable copy .* is missing" || fail "missing executable not reported"
"${W[@]}" run "$spec" --out "$d" --resume --no-report -q || fail "resume with a missing executable copy"
cmp -s "$d/bin/wbaudit" "$wbaudit" || fail "executable copy not restored"
# The frozen executable's shared libraries from outside the system directories (Kokkos from ~/.cache here): frozen
# into bin/lib/, every one of them, and found there by the copy (RUNPATH $ORIGIN/lib), also in a copy of the sweep
# moved elsewhere; a modified one is reported and restored by --resume.
outside_libs() { ldd "$1" | awk '$3 ~ "^/" {print $3}' | grep -Ev '^/(usr/)?lib(32|64)?/' ; }
if [ -n "$(outside_libs "$wbaudit")" ]; then
  for lib in $(outside_libs "$wbaudit"); do
    cmp -s "$lib" "$d/bin/lib/$(basename "$lib")" || fail "$lib is not frozen in bin/lib"
  done
  cp -a "$d" "$work/moved"
  outside_libs "$work/moved/bin/wbaudit" | grep -v "^$work/moved/bin/lib/" > "$work/outside"
  [ -s "$work/outside" ] && fail "the frozen copy resolves libraries outside its sweep: $(cat "$work/outside")"
  # What the loader actually initialises when the moved copy runs.
  LD_DEBUG=libs "$work/moved/bin/wbaudit" status "$work/moved" --check --no-scheduler 2> "$work/ld.txt" > "$work/moved.st" \
    || { cat "$work/moved.st"; fail "the moved copy of the sweep does not check"; }
  grep "calling init: " "$work/ld.txt" | awk '{print $NF}' | grep -Ev '^/(usr/)?lib(32|64)?/' \
    | grep -v "^$work/moved/bin/lib/" > "$work/inits" && fail "the moved copy loaded $(cat "$work/inits")"
  grep -q "calling init: $work/moved/bin/lib/" "$work/ld.txt" || fail "the moved copy did not load its frozen libraries"
  grep -q "and its [0-9]* librar.* in bin/lib/ intact" "$work/moved.st" || { cat "$work/moved.st"; fail "status: libraries"; }
  lib=$(ls "$d"/bin/lib/* | head -1)
  printf 'x' >> "$lib"
  "${W[@]}" status "$d" --no-scheduler > "$work/stlib"
  grep -q "frozen library $lib was modified" "$work/stlib" || { cat "$work/stlib"; fail "modified library not reported"; }
  if "${W[@]}" status "$d" --check --no-scheduler > /dev/null; then fail "status --check passed a modified library"; fi
  "${W[@]}" run "$spec" --out "$d" --resume --no-report -q 2> "$work/libres" || { cat "$work/libres"; fail "resume with a modified library"; }
  grep -q "frozen library $lib was modified.*restored" "$work/libres" || { cat "$work/libres"; fail "library repair not said"; }
  "${W[@]}" status "$d" --check --no-scheduler > /dev/null || fail "resume did not restore the library"
else
  echo "SKIP (part): this build loads no shared library from outside the system directories"
fi
sed 's/steps = 60/steps = 61/' "$spec" > "$work/changed.toml"
if "${W[@]}" run "$work/changed.toml" --out "$d" --resume --no-report -q 2> "$work/err"; then fail "changed spec accepted"; fi
grep -q "spec changed" "$work/err" || { cat "$work/err"; fail "changed spec: unclear message"; }

# SIGKILL in the middle of a sweep.
k="$work/k"
"${W[@]}" run "$spec" --out "$k" --no-report -q &
pid=$!
for _ in $(seq 1 200); do
  [ "$(find "$k/cells" -name trace.h5 2> /dev/null | wc -l)" -ge 2 ] && break
  sleep 0.02
done
kill -9 "$pid"
wait "$pid" 2> /dev/null
"${W[@]}" status "$k" --json --no-scheduler > "$work/k.json" || fail "status after kill"
python3 - "$work/k.json" <<'PY' || fail "a killed run left something that passes as complete"
import json, sys
s = json.load(open(sys.argv[1]))
for c in s["cells"]:
    for a in c["attempts"]:
        if a["canonical"]:
            assert a["status"] == "complete" and a["complete"], a
        else:
            assert c["state"] != "done", c
print(s["counts"])
PY
"${W[@]}" run "$spec" --out "$k" --resume --no-report -q || fail "resume after SIGKILL"
"${W[@]}" status "$k" --check --no-scheduler > /dev/null || fail "not complete after resume"
# The resumed sweep's traces equal those of the uninterrupted (repaired) sweep, cell by cell.
canonical_traces() {
  "${W[@]}" status "$1" --json --no-scheduler | python3 -c '
import json, sys
for c in json.load(sys.stdin)["cells"]:
    for a in c["attempts"]:
        if a["canonical"]:
            print(c["id"], a["uuid"])'
}
n=0
while read -r cell uuid; do
  other=$(canonical_traces "$d" | awk -v c="$cell" '$1 == c {print $2}' | tail -1)
  [ -n "$other" ] || fail "cell $cell has no canonical attempt in the reference sweep"
  h5diff -q "$k/cells/$cell/attempts/$uuid/trace.h5" "$d/cells/$cell/attempts/$other/trace.h5" \
    || fail "resumed trace of $cell differs"
  n=$((n + 1))
done < <(canonical_traces "$k")
[ "$n" -eq 8 ] || fail "compared $n resumed traces, expected 8"

# Registration and deviations.
printf 'required_cells = ["target/*"]\n' > "$work/analysis.toml"
if "${W[@]}" register "$work/analysis.toml" --sweep "$d" > "$work/reg" 2>&1; then fail "registered after outcomes exist"; fi
grep -q "outcomes it names already exist" "$work/reg" || { cat "$work/reg"; fail "register: unclear refusal"; }
"${W[@]}" register "$work/analysis.toml" --sweep "$d" --retrospective | grep -q "retrospective" || fail "retrospective register"
"${W[@]}" deviate "$d" --reason "reran tampered cells" --cells "$(basename "$c1")" > /dev/null || fail "deviate"
"${W[@]}" deviate "$d" --reason "second" > /dev/null || fail "deviate 2"
[ "$(wc -l < "$d/deviations.jsonl")" -eq 2 ] || fail "deviation log should have 2 lines"
"${W[@]}" status "$d" --no-scheduler | grep -q "deviations 2" || fail "status does not show the deviations"
if "${W[@]}" deviate "$d" --reason "x" --cells no/such/cell 2> /dev/null; then fail "deviate accepted an unknown cell"; fi
# The registry and the deviation log are signed: an edited last deviation (which no hash chain covers) and an edited
# registration are flagged by status, and evaluate does not count the edited registration as one.
"${W[@]}" status "$d" --no-scheduler | grep -q "PROBLEM  .*\(registration\|deviation\)" && fail "signed records flagged before any edit"
cp "$d/deviations.jsonl" "$work/deviations.saved"
sed -i '2s/"why":"second"/"why":"third"/' "$d/deviations.jsonl"
grep -q '"why":"third"' "$d/deviations.jsonl" || fail "could not edit the deviation"
"${W[@]}" status "$d" --no-scheduler > "$work/dev.status" || true
# (The journal recorded the log's end when the deviation was appended, so the edit contradicts it; issue 27.)
grep -q "^PROBLEM  .*deviations.jsonl: its first 2 entries differ from those the journal recorded" "$work/dev.status" \
  || { cat "$work/dev.status"; fail "status does not flag the edited deviation"; }
cp "$work/deviations.saved" "$d/deviations.jsonl"
reg=$(ls "$d"/registry/*/registration.json)
cp "$reg" "$work/registration.saved"
sed -i 's/"retrospective": true/"retrospective": false/' "$reg"
grep -q '"retrospective": false' "$reg" || fail "could not edit the registration"
"${W[@]}" status "$d" --json --no-scheduler | python3 -c '
import json, sys
p = json.load(sys.stdin)["signature_problems"]
assert len(p) == 1 and p[0].startswith("registration ") and "not signed by this sweep" in p[0], p' \
  || fail "status --json does not flag the edited registration"
"${W[@]}" evaluate "$d" -o "$work/ev-edited" > "$work/ev-edited.out" 2>&1 || { cat "$work/ev-edited.out"; fail "evaluate after the registration edit"; }
grep -q "(not preregistered (the registration is not verified))" "$work/ev-edited.out" \
  || { cat "$work/ev-edited.out"; fail "evaluate counted an edited registration"; }
cp "$work/registration.saved" "$reg"

# Full disk: a tmpfs just large enough for the sweep's frozen inputs and a few traces.
f="$work/full"
mkdir -p "$f"
size_kb=$(( $(stat -c %s "$wbaudit") / 1024 + 160 ))
for lib in $(outside_libs "$wbaudit"); do size_kb=$(( size_kb + $(stat -L -c %s "$lib") / 1024 + 4 )); done  # bin/lib/
if mount -t tmpfs -o size=${size_kb}k tmpfs "$f" 2> /dev/null; then
  mounted="$f"
  "${W[@]}" run "$spec" --out "$f/s" --no-report -q 2> "$work/full.err"
  rc=$?
  [ "$rc" -ne 0 ] || fail "a full disk went unnoticed"
  # Traces are built in memory and written with plain writes, so HDF5 never holds a file it cannot close: no crash
  # in its exit-time cleanup (this used to end in a segfault, exit 139, with the cells run in this process).
  [ "$rc" -lt 128 ] || { cat "$work/full.err"; fail "wbaudit died by signal $((rc - 128)) after the disk filled"; }
  "${W[@]}" status "$f/s" --no-scheduler > "$work/full.status" || fail "status on the full disk"
  grep -q "failed: .*trace.h5" "$work/full.status" || grep -qi "no space left" "$work/full.err" \
    || { cat "$work/full.err" "$work/full.status"; fail "full disk: no failure recorded and no clear message"; }
  done_before=$("${W[@]}" status "$f/s" --json --no-scheduler | python3 -c "import json,sys; print(json.load(sys.stdin)['counts']['done'])")
  # Freed space: traces are streamed, and each cell reserves its trace's whole size before writing its first step
  # (so that HDF5 never meets a full disk mid-file); two cells run at once, a reference reserving ~2.9 MB: free 32 MB.
  mount -o remount,size=$((size_kb + 32768))k "$f" || fail "remount"
  "${W[@]}" run "$spec" --out "$f/s" --resume --no-report -q 2> "$work/full2.err" || { cat "$work/full2.err"; fail "resume after freeing space"; }
  "${W[@]}" status "$f/s" --check --no-scheduler > /dev/null || fail "full-disk sweep incomplete after resume"
  # Cells finished before the disk filled were kept, not rerun: one attempt each plus one per failed cell.
  [ "$(attempts "$f/s")" -eq $((8 + 8 - done_before)) ] || fail "full disk: finished cells were rerun or lost"
  echo "full disk: $done_before cells finished before the disk filled; all 8 after resume"
  # A disk too small for the executable copy: "no space left", and no temporary copy left behind.
  small="$work/small"
  mkdir -p "$small"
  mount -t tmpfs -o size=$((size_kb / 2))k tmpfs "$small" || fail "mount a small tmpfs"
  mounted2="$small"
  if "${W[@]}" run "$spec" --out "$small/s" --no-report -q 2> "$work/small.err"; then fail "ran without room for the executable"; fi
  grep -q "no space left on device" "$work/small.err" || { cat "$work/small.err"; fail "executable copy: no clear message"; }
  [ -z "$(find "$small" -name '.wbaudit.tmp.*' 2> /dev/null)" ] || fail "executable copy: temporary left behind"
else
  echo "SKIP (part): cannot mount a tmpfs for the full-disk case"
fi
echo "PASS: provenance checks through the command line"
