#!/usr/bin/env bash
# Signed provenance through the command line (docs/contracts.md, "Signed provenance"), on tests/slurm/tiny_sweep.toml
# (8 cells). Each case would pass as canonical without the sweep's key and journal:
#  - an attempt copied from another sweep of the same spec, its manifest's uuid rewritten (every hash matching), and a
#    forged edit (a trace byte changed inside a dataset, the manifest's hash updated) are non-canonical, with reasons;
#  - a foreign attempt directory beside a canonical one fails `status --check`; `run --resume` moves it aside;
#  - the key absent: status says the attempts cannot be verified (0 done), resume refuses; WBAUDIT_KEY_FILE works;
#  - an edited journal entry and a truncated journal are detected; resume refuses an edited journal;
#  - a modified bin/wbaudit or spec.toml: evaluate refuses, `run --resume` restores both;
#  - SIGKILL half-way through a journal append (fault injection at a chosen entry, no timing): the done cells still
#    verify, resume completes the sweep, and its traces are byte-identical to an uninterrupted run's.
#   signed_provenance_test.sh WBAUDIT SOURCE_DIR
set -uo pipefail
wbaudit=$1
spec=$2/tests/slurm/tiny_sweep.toml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_PROC_BIND=false OMP_NUM_THREADS=1
export XDG_CONFIG_HOME="$work/config"
unset WBAUDIT_KEY_FILE WBAUDIT_FAULT_TORN_JOURNAL_ENTRY
W=("$wbaudit" --kokkos-threads=1)
py=/usr/bin/python3
cell_dir() { ls -d "$1"/cells/*/ | sed -n "${2}p" | sed 's#/$##'; }
one_attempt() { ls -d "$1"/attempts/*/ | head -1 | sed 's#/$##'; }
sweep_uuid() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["sweep_uuid"])' "$1/sweep.json"; }
set_json() {  # set_json FILE KEY VALUE: rewrite one top-level string member, keeping the rest
  "$py" -c 'import json,sys; f,k,v=sys.argv[1:]; m=json.load(open(f)); m[k]=v; open(f,"w").write(json.dumps(m,indent=1)+"\n")' "$@"
}
set_file_hash() {  # set_file_hash MANIFEST NAME: the manifest's hash of NAME updated to the file's
  "$py" -c 'import json,sys,hashlib,os; f,n=sys.argv[1:]; m=json.load(open(f));
m["files"][n]=hashlib.sha256(open(os.path.join(os.path.dirname(f),n),"rb").read()).hexdigest()
open(f,"w").write(json.dumps(m,indent=1)+"\n")' "$@"
}
count() { "$py" -c 'import json,sys; print(json.load(sys.stdin)["counts"][sys.argv[1]])' "$1"; }

# Two sweeps of the same spec (same cell ids, different keys); A with 2 worker processes appending concurrently.
a="$work/a"; b="$work/b"
"${W[@]}" run "$spec" --out "$a" --no-report -q --jobs 2 || fail "run a"
"${W[@]}" run "$spec" --out "$b" --no-report -q --jobs 1 || fail "run b"
"${W[@]}" status "$a" --check --no-scheduler > "$work/st" || { cat "$work/st"; fail "fresh sweep not canonical"; }
grep -q "signed   journal" "$work/st" || { cat "$work/st"; fail "status does not say the journal was checked"; }
key="$XDG_CONFIG_HOME/wbaudit/keys/$(sweep_uuid "$a")"
[ -f "$key" ] || fail "no key at $key"
[ "$(stat -c %a "$key")" = 600 ] || fail "key mode $(stat -c %a "$key"), expected 600"
case "$key" in "$a"/*) fail "key inside the sweep directory";; esac
[ "$(wc -l < "$a/journal.jsonl")" -eq 17 ] || fail "journal: expected 1 + 8 x 2 entries"
# The signatures, recomputed independently (Python's hmac over the documented message): every journal entry and
# every manifest of the fresh sweep.
"$py" - "$key" "$a" <<'PY' || fail "signatures do not match an independent HMAC-SHA256"
import glob, hashlib, hmac, json, sys
key = bytes.fromhex(open(sys.argv[1]).read().split()[2])
def check(obj, schema):
    body = {k: v for k, v in obj.items() if k != "hmac"}
    text = schema + "\n" + json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert hmac.new(key, text.encode(), hashlib.sha256).hexdigest() == obj["hmac"], (schema, obj)
lines = open(sys.argv[2] + "/journal.jsonl").read().splitlines()
for i, line in enumerate(lines):
    entry = json.loads(line)
    check(entry, "wbaudit.journal/1")
    assert entry["seq"] == i and entry["prev"] == (hashlib.sha256(lines[i - 1].encode()).hexdigest() if i else "0" * 64)
manifests = glob.glob(sys.argv[2] + "/cells/*/attempts/*/manifest.json")
assert len(manifests) == 8
for m in manifests:
    check(json.load(open(m)), "wbaudit.attempt/1")
PY
cp -r "$a" "$work/a_clean"; cp -r "$b" "$work/b_clean"

# 1. A hand-made attempt: sweep B's attempt of the same cell copied into A under a new uuid, its manifest's uuid
# rewritten (the trace is this cell's configuration, and every hash matches).
c1=$(cell_dir "$a" 1)
src=$(one_attempt "$b/cells/$(basename "$c1")")
rm -rf "$c1"/attempts/*
fake=$(cat /proc/sys/kernel/random/uuid)
cp -r "$src" "$c1/attempts/$fake"
set_json "$c1/attempts/$fake/manifest.json" uuid "$fake"
# 2. A forged edit: one byte of a dataset of the trace changed (the file stays a readable trace of this cell's
# configuration) and the manifest's hash updated.
c2=$(cell_dir "$a" 2)
t2=$(one_attempt "$c2")/trace.h5
"$py" - "$t2" <<'PY' || fail "cannot edit the trace"
import h5py, sys
path = sys.argv[1]
offset = None
with h5py.File(path, "r") as f:
    def visit(name, obj):
        global offset
        if offset is None and isinstance(obj, h5py.Dataset) and obj.id.get_offset() is not None and obj.nbytes >= 4:
            offset = obj.id.get_offset()
    f.visititems(visit)
assert offset is not None, "no contiguous dataset"
with open(path, "r+b") as out:
    out.seek(offset)
    byte = out.read(1)
    out.seek(offset)
    out.write(bytes([byte[0] ^ 0x01]))
PY
set_file_hash "$(one_attempt "$c2")/manifest.json" trace.h5
# 3. A foreign attempt directory beside a canonical one (a copy of it under another uuid).
c3=$(cell_dir "$a" 3)
other=$(cat /proc/sys/kernel/random/uuid)
cp -r "$(one_attempt "$c3")" "$c3/attempts/$other"
set_json "$c3/attempts/$other/manifest.json" uuid "$other"
"${W[@]}" status "$a" --no-scheduler > "$work/st1"
if "${W[@]}" status "$a" --check --no-scheduler > /dev/null; then fail "status --check passed a forged sweep"; fi
grep -q "6 done, 2 non-canonical" "$work/st1" || { cat "$work/st1"; fail "forged counts"; }
for reason in "manifest not signed by this sweep's key" "attempt not in the journal" \
  "foreign attempt directory $other" "2 foreign attempt directories"; do
  grep -q "$reason" "$work/st1" || { cat "$work/st1"; fail "status lacks '$reason'"; }
done
"${W[@]}" status "$a" --json --no-scheduler > "$work/st1.json"
"$py" - "$work/st1.json" "$(basename "$c1")" "$(basename "$c2")" "$(basename "$c3")" "$other" <<'PY' || fail "status --json"
import json, sys
s = json.load(open(sys.argv[1])); c1, c2, c3, other = sys.argv[2:]
cells = {c["id"]: c for c in s["cells"]}
assert cells[c1]["state"] == "noncanonical" and cells[c2]["state"] == "noncanonical", (cells[c1], cells[c2])
assert any("manifest not signed" in r for r in cells[c2]["reasons"]), cells[c2]["reasons"]
assert cells[c3]["state"] == "done" and cells[c3]["foreign_attempts"] == [other], cells[c3]
PY
"${W[@]}" run "$spec" --out "$a" --resume --no-report -q 2> "$work/res1" || { cat "$work/res1"; fail "resume after forgery"; }
grep -q "moved the foreign attempt directory $other" "$work/res1" || { cat "$work/res1"; fail "resume: foreign dir not moved"; }
[ -d "$a/foreign/$(basename "$c3")/$other" ] || fail "foreign directory not in foreign/"
"${W[@]}" status "$a" --check --no-scheduler > "$work/st2" || { cat "$work/st2"; fail "not canonical after resume"; }
# The forged cells were rerun (one attempt each), nothing else: 9 manifests under cells/ (the foreign copy of cell 1 moved out).
[ "$(find "$a/cells" -name manifest.json | wc -l)" -eq 9 ] || fail "resume ran other cells than the forged two"

# 4. The key absent: nothing is canonical, status says so; resume refuses; WBAUDIT_KEY_FILE gives the key back.
XDG_CONFIG_HOME="$work/nokeys" "${W[@]}" status "$a" --json --no-scheduler > "$work/nokey.json"
[ "$(count done < "$work/nokey.json")" -eq 0 ] || fail "cells counted done without the key"
XDG_CONFIG_HOME="$work/nokeys" "${W[@]}" status "$a" --no-scheduler > "$work/nokey"
grep -q "cannot be verified" "$work/nokey" || { cat "$work/nokey"; fail "status does not say 'cannot be verified'"; }
if XDG_CONFIG_HOME="$work/nokeys" "${W[@]}" status "$a" --check --no-scheduler > /dev/null; then fail "--check without key"; fi
if XDG_CONFIG_HOME="$work/nokeys" "${W[@]}" run "$spec" --out "$a" --resume --no-report -q 2> "$work/nokey.err"; then
  fail "resume without the key"
fi
grep -q "without its signing key" "$work/nokey.err" || { cat "$work/nokey.err"; fail "resume without key: unclear"; }
cp "$key" "$work/cluster.key"
WBAUDIT_KEY_FILE="$work/cluster.key" XDG_CONFIG_HOME="$work/nokeys" "${W[@]}" status "$a" --check --no-scheduler \
  > /dev/null || fail "WBAUDIT_KEY_FILE not used"
# A new sweep never reuses a key file: WBAUDIT_KEY_FILE naming an existing key is refused before DIR is written.
if WBAUDIT_KEY_FILE="$work/cluster.key" "${W[@]}" run "$spec" --out "$work/n" --no-report -q 2> "$work/n.err"; then
  fail "a new sweep reused an existing key file"
fi
grep -q "cluster.key: it already exists" "$work/n.err" || { cat "$work/n.err"; fail "key reuse: unclear refusal"; }
[ ! -e "$work/n/sweep.json" ] || fail "key reuse: a sweep was created anyway"
bkey="$XDG_CONFIG_HOME/wbaudit/keys/$(sweep_uuid "$b")"
WBAUDIT_KEY_FILE="$bkey" "${W[@]}" status "$a" --no-scheduler | grep -q "belongs to sweep $(sweep_uuid "$b")" \
  || fail "another sweep's key not named"

# 5. The journal: an edited entry (a finish entry's manifest hash) and a truncated journal are detected.
j="$work/b/journal.jsonl"
sed -i '5s/"manifest_sha256":"[0-9a-f]/"manifest_sha256":"X/' "$j"
"${W[@]}" status "$b" --no-scheduler > "$work/j1"
grep -q "journal entry #4 (line 5) is not signed by this sweep's key" "$work/j1" || { cat "$work/j1"; fail "edited entry"; }
if "${W[@]}" status "$b" --check --no-scheduler > /dev/null; then fail "--check passed an edited journal"; fi
if "${W[@]}" run "$spec" --out "$b" --resume --no-report -q 2> "$work/j1.err"; then fail "resume on an edited journal"; fi
grep -q "signed record was edited" "$work/j1.err" || { cat "$work/j1.err"; fail "edited journal: unclear refusal"; }
tr="$work/b_clean"
head -n 15 "$tr/journal.jsonl" > "$work/j" && cat "$work/j" > "$tr/journal.jsonl"  # the last cell's two entries gone
"${W[@]}" status "$tr" --no-scheduler > "$work/j2"
grep -q "7 done, 1 non-canonical" "$work/j2" || { cat "$work/j2"; fail "truncated journal: counts"; }
grep -q "attempt not in the journal (it began as entry #15 but the journal has 15 entries: truncated)" "$work/j2" \
  || { cat "$work/j2"; fail "truncated journal not named"; }
# sweep.json is covered by the creation record.
sed -i 's/"created": "/"created": "1/' "$work/a_clean/sweep.json"
"${W[@]}" status "$work/a_clean" --no-scheduler | grep -q "sweep.json differs from the record signed" \
  || fail "edited sweep.json not detected"

# 6. Modified frozen inputs: evaluate refuses, resume restores both and says so.
printf 'x' >> "$a/bin/wbaudit"
printf '# edited\n' >> "$a/spec.toml"
"${W[@]}" status "$a" --no-scheduler | grep -q "executable copy .* was modified" || fail "modified binary not flagged"
if "${W[@]}" evaluate "$a" > "$work/ev.out" 2> "$work/ev.err"; then fail "evaluate used a modified spec and binary"; fi
grep -q "cannot evaluate" "$work/ev.err" || { cat "$work/ev.err"; fail "evaluate: unclear refusal"; }
"${W[@]}" run "$spec" --out "$a" --resume --no-report -q 2> "$work/res2" || { cat "$work/res2"; fail "resume repair"; }
grep -q "restored from" "$work/res2" || { cat "$work/res2"; fail "resume did not say what it restored"; }
cmp -s "$a/bin/wbaudit" "$wbaudit" || fail "executable copy not restored"
cmp -s "$a/spec.toml" "$spec" || fail "spec.toml not restored"
"${W[@]}" status "$a" --check --no-scheduler > /dev/null || fail "not intact after the repair"

# 7. SIGKILL half-way through appending journal entry #6 (cell 3's finish), in a --jobs 1 run.
k="$work/k"
WBAUDIT_FAULT_TORN_JOURNAL_ENTRY=6 "${W[@]}" run "$spec" --out "$k" --no-report -q --jobs 1
rc=$?
[ "$rc" -eq 137 ] || fail "the fault injection did not kill the run (exit $rc)"
[ -n "$(tail -c 1 "$k/journal.jsonl")" ] || fail "the journal does not end in a torn line"
"${W[@]}" status "$k" --json --no-scheduler > "$work/k.json"
"$py" - "$work/k.json" <<'PY' || fail "after the kill"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["record_problems"] == [], s["record_problems"]
assert s["journal_torn_tail"], "torn tail not noticed"
assert s["counts"]["done"] == 2, s["counts"]
PY
"${W[@]}" run "$spec" --out "$k" --resume --no-report -q || fail "resume after the torn append"
"${W[@]}" status "$k" --check --no-scheduler > "$work/k.st" || { cat "$work/k.st"; fail "not canonical after resume"; }
[ "$(wc -l < "$k/journal.jsonl")" -eq 18 ] || fail "journal after resume: expected 17 + 1 entries (cell 3 twice, its torn finish dropped)"
[ -z "$(tail -c 1 "$k/journal.jsonl")" ] || fail "torn line left in the journal"
"${W[@]}" status "$k" --json --no-scheduler | "$py" -c '
import json, sys
for c in json.load(sys.stdin)["cells"]:
    for a in c["attempts"]:
        if a["canonical"]:
            print(c["id"], a["uuid"])' > "$work/k.canon"
[ "$(wc -l < "$work/k.canon")" -eq 8 ] || fail "resumed sweep: expected 8 canonical attempts"
while read -r cell uuid; do
  ref=$(one_attempt "$work/a_clean/cells/$cell")
  cmp -s "$k/cells/$cell/attempts/$uuid/trace.h5" "$ref/trace.h5" || fail "resumed trace of $cell differs"
done < "$work/k.canon"
echo "PASS: signed provenance"
