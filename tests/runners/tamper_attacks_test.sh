#!/usr/bin/env bash
# Attacks by someone who can write a sweep directory but does not hold its key (issue 27, docs/contracts.md "What it
# guards against"). Each case performs the attack and asserts that wbaudit detects or refuses it; each passed
# unnoticed before the fix:
#  1. key redirection: sweep.json's sweep_uuid pointed at a key file the attacker wrote inside the sweep, the journal,
#     every manifest and sweep.json re-signed with it and a trace edited -> status --check non-zero, evaluate refuses;
#     a sweep_uuid of /dev/zero or a FIFO -> status answers at once; a key readable by others, or a link -> refused;
#  2. planted links: .lock, report/, deviations.jsonl, a cell directory and foreign/ as symbolic links -> writers
#     refuse naming the path and write nothing through them, status lists them;
#  3. logs without a signed end: deviations.jsonl deleted, emptied or cut; a registration deleted; the journal's last
#     entries removed; an older copy of the sweep put back in place -> status --check non-zero, evaluate refuses;
#  4. trusted code: a library dropped into bin/lib/ -> status --check non-zero, and the Slurm script exits before the
#     key is exported or anything in bin/ runs;
#  5. one writer: two fresh runs into one new directory, concurrent deviate and register -> one consistent record; an
#     emptied journal -> resume refuses; a broken chain -> the key holder's signed repair.
#   tamper_attacks_test.sh WBAUDIT SOURCE_DIR
set -uo pipefail
wbaudit=$1
src=$2
spec=$src/tests/slurm/tiny_sweep.toml
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_PROC_BIND=false OMP_NUM_THREADS=1
export XDG_CONFIG_HOME="$work/config"
unset WBAUDIT_KEY_FILE WBAUDIT_FAULT_TORN_JOURNAL_ENTRY
W=("$wbaudit" --kokkos-threads=1)
py=/usr/bin/python3
analysis=$src/examples/two_layer_analysis.toml

# status --check must exit 2 (a problem found, nothing crashed) and print each expected text.
expect_check_fails() {  # expect_check_fails DIR WHAT TEXT...
  local dir=$1 what=$2
  shift 2
  timeout 60 "${W[@]}" status "$dir" --check --no-scheduler > "$work/check.out" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] || { cat "$work/check.out"; fail "$what: status --check exited $rc, expected 2"; }
  for text in "$@"; do
    grep -qF -- "$text" "$work/check.out" || { cat "$work/check.out"; fail "$what: status does not say '$text'"; }
  done
}
expect_evaluate_refuses() {  # expect_evaluate_refuses DIR WHAT TEXT
  if timeout 120 "${W[@]}" evaluate "$1" --analysis "$analysis" -o "$work/ev.$RANDOM" > "$work/ev.out" 2>&1; then
    cat "$work/ev.out"
    fail "$2: evaluate scored the sweep"
  fi
  grep -qF -- "$3" "$work/ev.out" || { cat "$work/ev.out"; fail "$2: evaluate does not say '$3'"; }
}
sweep_uuid() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["sweep_uuid"])' "$1/sweep.json"; }

base="$work/base"
"${W[@]}" run "$spec" --out "$base" -q --jobs 1 || fail "run the base sweep"
"${W[@]}" status "$base" --check --no-scheduler > /dev/null || fail "the fresh sweep does not verify"
fresh() {  # fresh NAME: a copy of the base sweep (the same sweep: its key verifies it) at a new path
  rm -rf "$work/$1"
  cp -a "$base" "$work/$1"
  echo "$work/$1"
}

# ---- 1. Key redirection, end to end: forge, re-sign, edit a trace ----
f=$(fresh forged)
"$py" - "$f" <<'PY' || fail "the forgery script"
import glob, hashlib, hmac, json, os, sys
d = sys.argv[1]
secret = os.urandom(32)
evil = os.path.join(d, "cells", ".k")          # a key file the attacker wrote inside the sweep
sweep = json.load(open(os.path.join(d, "sweep.json")))
sweep["sweep_uuid"] = evil                      # joined into the key path: an absolute path replaces it
open(evil, "w").write("wbaudit-sweep-key/1 %s %s\n" % (evil, secret.hex()))
os.chmod(evil, 0o600)
def canon(o): return json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
def sign(o, schema):
    body = {k: v for k, v in o.items() if k != "hmac"}
    o["hmac"] = hmac.new(secret, (schema + "\n" + canon(body)).encode(), hashlib.sha256).hexdigest()
# Edit one trace byte inside a dataset, then re-sign its manifest with the new hash.
import h5py
manifests = sorted(glob.glob(os.path.join(d, "cells/*/attempts/*/manifest.json")))
target = next(m for m in manifests if json.load(open(m))["cell_name"].startswith("target/"))
trace = os.path.join(os.path.dirname(target), "trace.h5")
with h5py.File(trace, "r") as h:
    offsets = []
    h.visititems(lambda n, o: offsets.append(o.id.get_offset()) if isinstance(o, h5py.Dataset) and o.id.get_offset() else None)
with open(trace, "r+b") as t:
    t.seek(offsets[0]); b = t.read(1); t.seek(offsets[0]); t.write(bytes([b[0] ^ 1]))
new_manifest_hash = {}
for m in manifests:
    man = json.load(open(m))
    man["sweep_uuid"] = evil
    for name in man["files"]:
        man["files"][name] = hashlib.sha256(open(os.path.join(os.path.dirname(m), name), "rb").read()).hexdigest()
    sign(man, "wbaudit.attempt/1")
    open(m, "w").write(json.dumps(man, indent=1) + "\n")
    new_manifest_hash[(man["cell_id"], man["uuid"])] = hashlib.sha256(canon(man).encode()).hexdigest()
sweep_text = json.dumps(sweep, indent=1) + "\n"
open(os.path.join(d, "sweep.json"), "w").write(sweep_text)
lines = open(os.path.join(d, "journal.jsonl")).read().splitlines()
out, prev = [], "0" * 64
for line in lines:
    e = json.loads(line)
    e["prev"] = prev
    if e["event"] == "sweep":
        e["sweep_sha256"] = hashlib.sha256(sweep_text.encode()).hexdigest(); e["sweep_uuid"] = evil
    if e["event"] == "finish":
        e["manifest_sha256"] = new_manifest_hash[(e["cell"], e["attempt"])]
    sign(e, "wbaudit.journal/1")
    text = canon(e); out.append(text); prev = hashlib.sha256(text.encode()).hexdigest()
open(os.path.join(d, "journal.jsonl"), "w").write("\n".join(out) + "\n")
PY
expect_check_fails "$f" "key redirection" "is not a UUID"
expect_evaluate_refuses "$f" "key redirection" "is not a UUID"
if "${W[@]}" run "$spec" --out "$f" --resume -q --no-report > "$work/r.out" 2>&1; then fail "resume trusted a forged sweep"; fi

# /dev/zero and a FIFO as the key: status answers (no 1 GB read, no hang), naming the problem.
for target in /dev/zero fifo; do
  f=$(fresh "special-${target//\//_}")
  [ "$target" = fifo ] && { mkfifo "$f/fifo"; target="$f/fifo"; }
  "$py" -c 'import json,sys; f=sys.argv[1]+"/sweep.json"; s=json.load(open(f)); s["sweep_uuid"]=sys.argv[2]; open(f,"w").write(json.dumps(s,indent=1)+"\n")' "$f" "$target"
  expect_check_fails "$f" "sweep_uuid $target" "is not a UUID"
done

# A FIFO where a manifest belongs: status answers (the cell is not canonical), nothing waits on it.
f=$(fresh fifo-manifest)
m=$(ls "$f"/cells/*/attempts/*/manifest.json | head -1)
rm "$m" && mkfifo "$m"
expect_check_fails "$f" "FIFO manifest" "not a regular file" "7 done, 1 non-canonical"

# A key that others may read, and a key reached through a link, are refused (the genuine key of the sweep).
key="$XDG_CONFIG_HOME/wbaudit/keys/$(sweep_uuid "$base")"
chmod 644 "$key"
expect_check_fails "$base" "world-readable key" "has mode 0644: others may read or write it"
chmod 600 "$key"
mv "$key" "$key.real" && ln -s "$key.real" "$key"
expect_check_fails "$base" "key through a link" "is a symbolic link; a key is never read through a link"
rm "$key" && mv "$key.real" "$key"
"${W[@]}" status "$base" --check --no-scheduler > /dev/null || fail "the base sweep after the key checks"

# ---- 2. Planted links: nothing is written through them ----
victim="$work/victim.txt"
echo "precious" > "$victim"
f=$(fresh link-lock)
rm -f "$f/.lock" && ln -s "$victim" "$f/.lock"
if "${W[@]}" run "$spec" --out "$f" --resume -q --no-report > "$work/r.out" 2>&1; then fail "resume through a .lock link"; fi
grep -q "is a symbolic link" "$work/r.out" || { cat "$work/r.out"; fail ".lock link not named"; }
[ "$(cat "$victim")" = precious ] || fail "the .lock link truncated the file it points to"

f=$(fresh link-report)
mkdir "$work/outside-report"
rm -rf "$f/report" && ln -s "$work/outside-report" "$f/report"
if "${W[@]}" report "$f" -q > "$work/r.out" 2>&1; then fail "report wrote through a report/ link"; fi
grep -q "$f/report is a symbolic link" "$work/r.out" || { cat "$work/r.out"; fail "report/ link not named"; }
[ -z "$(ls -A "$work/outside-report")" ] || fail "report wrote into the linked directory"
expect_check_fails "$f" "report/ link" "$f/report is a symbolic link"

f=$(fresh link-deviations)
ln -s "$victim" "$f/deviations.jsonl"
if "${W[@]}" deviate "$f" --reason "x" > "$work/r.out" 2>&1; then fail "deviate wrote through a link"; fi
[ "$(cat "$victim")" = precious ] || fail "deviate appended to the linked file"

f=$(fresh link-cell)
cell=$(ls "$f/cells" | head -1)
mv "$f/cells/$cell" "$work/moved-cell" && ln -s "$work/moved-cell" "$f/cells/$cell"
if "${W[@]}" run "$spec" --out "$f" --resume -q --no-report > "$work/r.out" 2>&1; then fail "resume through a cell link"; fi
grep -q "$f/cells/$cell is a symbolic link" "$work/r.out" || { cat "$work/r.out"; fail "cell link not named"; }
expect_check_fails "$f" "cell link" "$f/cells/$cell is a symbolic link"

f=$(fresh link-foreign)
mkdir "$work/outside-foreign" && ln -s "$work/outside-foreign" "$f/foreign"
cp -r "$(ls -d "$f"/cells/*/attempts/* | head -1)" "$(ls -d "$f"/cells/*/attempts | head -1)/handmade"
if "${W[@]}" run "$spec" --out "$f" --resume -q --no-report > "$work/r.out" 2>&1; then fail "resume through foreign/"; fi
[ -z "$(ls -A "$work/outside-foreign")" ] || fail "attempts were moved through the foreign/ link"

# ---- 3. Logs without a signed end ----
d=$(fresh logs)
"${W[@]}" register "$analysis" --sweep "$d" --retrospective > /dev/null || fail "register"
for n in 1 2 3; do "${W[@]}" deviate "$d" --reason "deviation $n" > /dev/null || fail "deviate $n"; done
"${W[@]}" status "$d" --check --no-scheduler > /dev/null || fail "the logged sweep does not verify"
cp -a "$d" "$work/logs.saved"
restore() { rm -rf "$d"; cp -a "$work/logs.saved" "$d"; }
rm "$d/deviations.jsonl"
expect_check_fails "$d" "deleted deviation log" "deviations.jsonl is missing, but the journal recorded 3 deviation(s)"
expect_evaluate_refuses "$d" "deleted deviation log" "the log was deleted"
restore; : > "$d/deviations.jsonl"
expect_check_fails "$d" "emptied deviation log" "has 0 entries, but the journal recorded 3"
restore; sed -i '$d' "$d/deviations.jsonl"
expect_check_fails "$d" "cut deviation log" "has 2 entries, but the journal recorded 3"
expect_evaluate_refuses "$d" "cut deviation log" "entries were removed from its end"
restore; rm -rf "$d"/registry/*
expect_check_fails "$d" "deleted registration" "is recorded in the journal but"
expect_evaluate_refuses "$d" "deleted registration" "(deleted)"
# The journal's own end: its last entries (the last deviation's) removed with the log's last line.
restore; sed -i '$d' "$d/journal.jsonl"; sed -i '$d' "$d/deviations.jsonl"
expect_check_fails "$d" "cut journal" "entries were removed from its end"
# An older copy of the whole sweep put back in place (before the last deviation).
restore; rm -rf "$work/older"; cp -a "$d" "$work/older"
"${W[@]}" deviate "$d" --reason "deviation 4" > /dev/null || fail "deviate 4"
rm -rf "$d"; cp -a "$work/older" "$d"
expect_check_fails "$d" "older copy put back" "entries were removed from its end"
# Edited analysis.toml: reported as a tampered registration, status goes on (exit 2, not 1).
restore; frozen=$(ls "$d"/registry/*/analysis.toml)
printf '#' >> "$frozen"
expect_check_fails "$d" "edited analysis.toml" "does not match its registered hash (edited)" "cells    8: 8 done"

# ---- 4. Trusted code: a library dropped into bin/lib/ ----
f=$(fresh planted-library)
printf 'not a library' > "$f/bin/lib/libm.so.6"
expect_check_fails "$f" "planted library" "bin/lib/libm.so.6 is not part of the frozen binary"
# The array script checks bin/ before the key is exported or anything in it runs (run here by bash, as Slurm would).
"${W[@]}" submit "$spec" --out "$f" --resume --dry-run > "$work/dry.out" 2>&1 || { cat "$work/dry.out"; fail "dry run"; }
sed -n '/^# ---- report.sbatch/,$p' "$work/dry.out" | tail -n +2 > "$work/report.sbatch"
grep -q "frozen_intact" "$work/report.sbatch" || fail "the report script does not check the frozen binary"
SLURM_CPUS_PER_TASK=1 bash "$work/report.sbatch" > "$work/job.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat "$work/job.out"; fail "the job ran with a planted library (exit $rc)"; }
grep -q "is not the frozen binary registered in sweep.json" "$work/job.out" || { cat "$work/job.out"; fail "job message"; }
grep -q "^sweep " "$work/job.out" && fail "the job ran wbaudit status despite the planted library"
rm "$f/bin/lib/libm.so.6"
SLURM_CPUS_PER_TASK=1 bash "$work/report.sbatch" > "$work/job.out" 2>&1
grep -q "is not the frozen binary" "$work/job.out" && { cat "$work/job.out"; fail "an intact binary refused"; }
grep -q "^sweep " "$work/job.out" || { cat "$work/job.out"; fail "the intact job did not run wbaudit status"; }

# ---- 5. One writer for every record ----
# Two fresh runs into one new directory: one creates and runs, the other refuses; the sweep verifies.
for trial in 1 2 3; do
  two="$work/two-$trial"
  "${W[@]}" run "$spec" --out "$two" -q --no-report > "$work/a.out" 2>&1 &
  pa=$!
  "${W[@]}" run "$spec" --out "$two" -q --no-report > "$work/b.out" 2>&1 &
  pb=$!
  wait $pa; ra=$?; wait $pb; rb=$?
  [ $((ra == 0)) -ne $((rb == 0)) ] || { cat "$work/a.out" "$work/b.out"; fail "trial $trial: exits $ra and $rb"; }
  "${W[@]}" status "$two" --check --no-scheduler > "$work/st.out" || { cat "$work/st.out"; fail "trial $trial"; }
done
# Concurrent deviate: the chain holds, every entry is there.
d=$(fresh concurrent)
for pair in 1 2 3 4 5; do
  "${W[@]}" deviate "$d" --reason "a$pair" > /dev/null & p1=$!
  "${W[@]}" deviate "$d" --reason "b$pair" > /dev/null & p2=$!
  wait $p1 || fail "deviate a$pair"; wait $p2 || fail "deviate b$pair"
done
[ "$(wc -l < "$d/deviations.jsonl")" -eq 10 ] || fail "concurrent deviations lost entries"
"${W[@]}" status "$d" --check --no-scheduler > "$work/st.out" || { cat "$work/st.out"; fail "concurrent deviate broke the log"; }
# Two register of one analysis at once: exactly one registers.
d=$(fresh concurrent-register)
"${W[@]}" register "$analysis" --sweep "$d" --retrospective > "$work/a.out" 2>&1 & p1=$!
"${W[@]}" register "$analysis" --sweep "$d" --retrospective > "$work/b.out" 2>&1 & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
[ $((r1 == 0)) -ne $((r2 == 0)) ] || { cat "$work/a.out" "$work/b.out"; fail "two registers: exits $r1 and $r2"; }
grep -q "already registered" "$work/a.out" "$work/b.out" || fail "the second register does not say it was registered"
# An emptied journal: resume refuses, saying what was lost, and runs nothing.
d=$(fresh empty-journal)
: > "$d/journal.jsonl"
if "${W[@]}" run "$spec" --out "$d" --resume -q --no-report > "$work/r.out" 2>&1; then fail "resume on an emptied journal"; fi
grep -q "journal.jsonl is empty" "$work/r.out" || { cat "$work/r.out"; fail "resume does not say the journal was emptied"; }
[ "$(ls -d "$d"/cells/*/attempts/* | wc -l)" -eq 8 ] || fail "resume on an emptied journal ran cells"
# A broken chain (an entry edited by hand before a later one): refused, then the key holder's repair.
d=$(fresh repair)
for n in 1 2 3; do "${W[@]}" deviate "$d" --reason "deviation $n" > /dev/null || fail "deviate $n"; done
sed -i '1s/"why":"deviation 1"/"why":"deviation one"/' "$d/deviations.jsonl"
if "${W[@]}" deviate "$d" --reason "more" > "$work/r.out" 2>&1; then fail "deviate extended a broken log"; fi
"${W[@]}" deviate "$d" --repair-log --reason "line 1 was edited by hand" > "$work/r.out" 2>&1 || { cat "$work/r.out"; fail "repair"; }
grep -q "kept 2 signed entries, dropped 1" "$work/r.out" || { cat "$work/r.out"; fail "repair summary"; }
"${W[@]}" status "$d" --check --no-scheduler > "$work/st.out" || { cat "$work/st.out"; fail "the repaired log does not verify"; }
grep -q "deviations 3" "$work/st.out" || { cat "$work/st.out"; fail "the repair is not itself a recorded deviation"; }

# ---- 6. Lower: what status covers, bounded reads, leftovers, bad input that used to half-succeed ----
# A directory of a cell the sweep does not have; an edited summary.csv (derived outputs are journaled) and its repair.
f=$(fresh unknown-cell)
mkdir -p "$f/cells/0000000000000000000000000000000000000000000000000000000000000000/attempts"
expect_check_fails "$f" "unknown cell directory" "cells/0000000000000000000000000000000000000000000000000000000000000000 is not a cell of this sweep"
f=$(fresh edited-summary)
sed -i '2s/,both_cross,/,neither,/; 2s/,neither,/,both_cross,/; 2s/$/ /' "$f/summary.csv"
expect_check_fails "$f" "edited summary.csv" "summary.csv differs from the one wbaudit wrote (edited)"
"${W[@]}" report "$f" -q || fail "report after the edit"
"${W[@]}" status "$f" --check --no-scheduler > "$work/st.out" || { cat "$work/st.out"; fail "report did not restore summary.csv"; }
# Temporaries of killed processes: --resume removes them (a dead pid in the name), the sweep verifies after.
f=$(fresh leftovers)
attempt=$(ls -d "$f"/cells/*/attempts/* | head -1)
echo partial > "$attempt/trace.h5.tmp.2147483646"
echo partial > "$f/report/report.md.tmp"
"${W[@]}" run "$spec" --out "$f" --resume -q --no-report > "$work/r.out" 2>&1 || { cat "$work/r.out"; fail "resume with leftovers"; }
[ ! -e "$attempt/trace.h5.tmp.2147483646" ] && [ ! -e "$f/report/report.md.tmp" ] || fail "resume left the temporaries"
[ "$(ls -d "$f"/cells/*/attempts/* | wc -l)" -eq 8 ] || fail "resume reran cells because of a temporary"
# A 22-byte .npy whose header claims 4 GB: refused from the file's size, nothing allocated (1 GB of address space).
t="$work/npy"; mkdir -p "$t"
"$py" -c 'import numpy as np, sys; np.save(sys.argv[1] + "/steps.npy", np.arange(2, dtype=np.int64))' "$t"
printf '\x93NUMPY\x02\x00\xff\xff\xff\xff0123456789' > "$t/w0.u.npy"
cp "$t/w0.u.npy" "$t/w0.w.npy"
(ulimit -v 1000000; "${W[@]}" audit "$t" --format e4m3 --policy nearest) > "$work/a.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat "$work/a.out"; fail "audit of a lying .npy header exited $rc"; }
grep -q "truncated .npy header (it says 4294967295 bytes, the file has 22)" "$work/a.out" || { cat "$work/a.out"; fail "npy"; }
# A tensor name that climbs out of the trajectory directory.
t="$work/climb"; mkdir -p "$t"
"$py" - "$t" <<'PY'
import json, numpy as np, sys
d = sys.argv[1]
np.save(d + "/steps.npy", np.arange(2, dtype=np.int64))
json.dump({"schema": "wbaudit.trajectory/1", "tensors": [{"name": "../escape"}]}, open(d + "/trajectory.json", "w"))
PY
if "${W[@]}" audit "$t" --format e4m3 --policy nearest > "$work/a.out" 2>&1; then fail "audit followed ../"; fi
grep -q 'tensor name "../escape" is not a file name' "$work/a.out" || { cat "$work/a.out"; fail "../ not named"; }
# A million-cell grid with max_cells raised: refused with its estimate, naming the grid (not std::bad_alloc).
big="$work/big.toml"
"$py" - "$spec" "$big" <<'PY'
import sys
text = open(sys.argv[1]).read()
text = text.replace("[sweep]\n", "[sweep]\nmax_cells = 2000000\n", 1)
text = text.replace("[grid]\n", "[grid]\n\"seed\" = [" + ",".join(str(i) for i in range(250000)) + "]\n", 1)
open(sys.argv[2], "w").write(text)
PY
if "${W[@]}" run "$big" --out "$work/big" -q > "$work/r.out" 2>&1; then fail "a million-cell grid ran"; fi
grep -q "grid: 1000000 target cells would need about" "$work/r.out" || { cat "$work/r.out" | cut -c1-300; fail "no estimate"; }
[ ! -e "$work/big" ] || fail "the refused grid left a directory"
# The same axis in two forms.
two="$work/two_forms.toml"
sed 's/^"optimizer.lr_scale" = \[0.5, 4.0\]$/"optimizer.lr_scale" = [0.5, 4.0]\n[grid.optimizer]\nlr_scale = [1.0]/' "$spec" > "$two"
if "${W[@]}" run "$two" --out "$work/two" -q > "$work/r.out" 2>&1; then fail "an axis given twice was accepted"; fi
grep -q "the same axis is given twice" "$work/r.out" || { cat "$work/r.out"; fail "axis twice"; }
# import: a malformed trace (a bogus mode; a NaN erased fraction) is refused with nothing imported; a duplicate
# --name is refused up front; a failing --report leaves nothing imported.
target_trace=$(ls "$base"/cells/*/attempts/*/trace.h5 | while read -r t; do
  "$py" -c 'import h5py,sys; sys.exit(0 if h5py.File(sys.argv[1],"r").attrs["mode"] in ("target", b"target") else 1)' "$t" && echo "$t"; done | head -1)
cp "$target_trace" "$work/bogus.h5"
"$py" -c 'import h5py,sys; f=h5py.File(sys.argv[1],"r+"); f.attrs["mode"]="bogus"' "$work/bogus.h5"
cp "$target_trace" "$work/nan.h5"
"$py" - "$work/nan.h5" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    g = f["groups"][list(f["groups"].keys())[0]]
    d = g["erased_fraction"]; v = d[...]; v[1] = float("nan"); d[...] = v
PY
for bad in bogus nan; do
  if "${W[@]}" import "$work/imp-$bad" "$work/$bad.h5" > "$work/i.out" 2>&1; then fail "import accepted $bad.h5"; fi
  grep -q "is not a well-formed trace" "$work/i.out" || { cat "$work/i.out"; fail "import $bad: no reason"; }
  [ -z "$(ls -A "$work/imp-$bad/external" 2>/dev/null)" ] || fail "import $bad left a run"
done
grep -q "is not erased / nonzero" "$work/i.out" || { cat "$work/i.out"; fail "the NaN fraction is not named"; }
if "${W[@]}" import "$work/imp-dup" "$target_trace" "$target_trace" --name a --name a > "$work/i.out" 2>&1; then
  fail "import accepted a duplicate --name"
fi
[ -z "$(ls -A "$work/imp-dup/external" 2>/dev/null)" ] || fail "a duplicate --name imported one run"
if "${W[@]}" import "$work/imp-report" "$target_trace" --report > "$work/i.out" 2>&1; then fail "--report without a reference"; fi
grep -q "removed the 1 run(s) imported above again" "$work/i.out" || { cat "$work/i.out"; fail "the rollback is not said"; }
[ -z "$(ls -A "$work/imp-report/external" 2>/dev/null)" ] || fail "a failing --report kept the import"
# grid: an error leaves no output directory behind.
ref_trace=$(ls "$base"/cells/*/attempts/*/trace.h5 | grep -v -F "$target_trace" | while read -r t; do
  "$py" -c 'import h5py,sys; sys.exit(0 if h5py.File(sys.argv[1],"r").attrs["mode"] in ("reference", b"reference") else 1)' "$t" && echo "$t"; done | head -1)
if "${W[@]}" grid "$ref_trace" -o "$work/grid-out" --formats e4m4 --no-figure > "$work/g.out" 2>&1; then fail "grid e4m4"; fi
[ ! -e "$work/grid-out" ] || fail "grid left an output directory after an error"
# evaluate -o an existing directory: refused before anything is computed (here the analysis would also fail).
mkdir -p "$work/ev-exists"
printf '[template]\nhistory_cells = ["target/*format=nothing*"]\n' > "$work/bad_analysis.toml"
if "${W[@]}" evaluate "$base" --analysis "$work/bad_analysis.toml" -o "$work/ev-exists" > "$work/e.out" 2>&1; then fail "evaluate -o existing"; fi
grep -q "already exists" "$work/e.out" || { cat "$work/e.out"; fail "evaluate -o: the existing directory is not what it refused"; }
# round: a NUL byte inside a line is an error, not the end of the number.
if printf '1.5\0000garbage\n' | "${W[@]}" round --format e4m3 > "$work/o.out" 2>&1; then fail "round accepted a NUL byte"; fi
grep -q "a NUL byte at column 4" "$work/o.out" || { cat "$work/o.out"; fail "round NUL"; }

# ---- 7. Numeric identity (issue 30): a cell that ran under another numeric contract than the sweep's is flagged ----
# Stand-in for a node with another C library: the sweep's recorded contract changed and its record re-signed with
# the sweep's own key (so only the numeric identity differs).
f=$(fresh numeric)
grep -q '"gemm_contract": "wbaudit-gemm/1' "$f/sweep.json" || fail "sweep.json does not record the numeric identity"
grep -q '"numeric"' "$(ls "$f"/cells/*/attempts/*/manifest.json | head -1)" || fail "a manifest lacks the numeric identity"
"$py" - "$f" "$XDG_CONFIG_HOME/wbaudit/keys/$(sweep_uuid "$f")" <<'PY' || fail "re-sign sweep.json"
import hashlib, hmac, json, os, sys
d, keyfile = sys.argv[1:]
secret = bytes.fromhex(open(keyfile).read().split()[2])
def canon(o): return json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
sweep = json.load(open(os.path.join(d, "sweep.json")))
sweep["numeric"]["libm"] = "glibc 0.0 elsewhere"
text = json.dumps(sweep, indent=1) + "\n"
open(os.path.join(d, "sweep.json"), "w").write(text)
lines = open(os.path.join(d, "journal.jsonl")).read().splitlines()
out, prev = [], "0" * 64
for line in lines:
    e = json.loads(line)
    e["prev"] = prev
    if e["event"] == "sweep":
        e["sweep_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    body = {k: v for k, v in e.items() if k != "hmac"}
    e["hmac"] = hmac.new(secret, ("wbaudit.journal/1\n" + canon(body)).encode(), hashlib.sha256).hexdigest()
    t = canon(e); out.append(t); prev = hashlib.sha256(t.encode()).hexdigest()
open(os.path.join(d, "journal.jsonl"), "w").write("\n".join(out) + "\n")
PY
# The key holder rewrote the journal: this location's signed head (keyed by the sweep's canonical path) goes with it.
rm -f "$XDG_CONFIG_HOME/wbaudit/keys/$(sweep_uuid "$f").heads/$(printf %s "$(realpath "$f")" | sha256sum | cut -c1-64)"
expect_check_fails "$f" "numeric identity" "ran under another numeric contract" "cells    8: 8 done"
echo "tamper attacks: all detected or refused"
