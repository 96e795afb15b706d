#!/usr/bin/env bash
# `wbaudit run SPEC --out DIR --extend` (issue 31): a sweep of examples/tiny.toml's shape (30 steps) extended by one
# more seed, then by another format. Every file of the existing cells keeps its bytes (SHA-256 before and after), the
# new cells run and are canonical (`status --check`), the journal records each extension, and the cell counts are
# those of the grids (written by hand). Refused: --resume with a changed spec (pointing to --extend), and an
# extension that changes a shared setting (naming it), both leaving the sweep as it was. A sweep.json put back to its
# state before the extension is detected as edited.
#   extend_cli_test.sh WBAUDIT SOURCE_DIR
set -euo pipefail
wbaudit=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export XDG_CONFIG_HOME="$work/config"
unset WBAUDIT_KEY_FILE
cd "$work"

# seed axis [7], format bf16, lr_scale 0.5: 1 target + 1 reference.
sed -e '/^seed = 7$/d' -e 's/^steps = 120$/steps = 30/' -e 's/^"target.format" = .*/"target.format" = ["bf16"]/' \
  -e 's/^"optimizer.lr_scale" = .*/"optimizer.lr_scale" = [0.5]\n"seed" = [7]/' "$src/examples/tiny.toml" > one.toml
grep -q '^"seed" = \[7\]$' one.toml && grep -q '^steps = 30$' one.toml || { cat one.toml; fail "spec edit"; }
sed 's/^"seed" = \[7\]$/"seed" = [7, 8]/' one.toml > seeds.toml
sed 's/^"target.format" = .*/"target.format" = ["bf16", "e4m3"]/' seeds.toml > formats.toml

cells() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cells"]))' runs/x/sweep.json; }
snapshot() { (cd runs/x && find cells -type f | LC_ALL=C sort | xargs sha256sum) > "$1"; }
extends() { grep -c '"event":"extend"' runs/x/journal.jsonl || true; }

"$wbaudit" run one.toml --out runs/x --threads 1 -q > /dev/null 2>&1 || fail "run one.toml"
[ "$(cells)" -eq 2 ] || fail "one.toml: $(cells) cells, not 2"
snapshot before1

# --resume with a changed spec refuses and points to --extend; nothing changes.
cp runs/x/sweep.json sweep.before
if "$wbaudit" run seeds.toml --out runs/x --resume -q > out 2>&1; then fail "--resume with a changed spec ran"; fi
grep -q -- "--extend" out || { cat out; fail "the refusal of --resume does not point to --extend"; }
cmp -s sweep.before runs/x/sweep.json || fail "a refused --resume changed sweep.json"

# One more seed: 2 targets + 2 references; the seed-7 cells untouched.
"$wbaudit" run seeds.toml --out runs/x --extend --threads 1 > out 2>&1 || { cat out; fail "--extend seeds.toml"; }
grep -q "extended runs/x by 2 cells (1 targets, 1 references); the 2 existing cells are kept" out || { cat out; fail "extension summary"; }
[ "$(cells)" -eq 4 ] || fail "seeds.toml: $(cells) cells, not 4"
(cd runs/x && sha256sum --quiet -c ../../before1) || fail "the extension changed files of existing cells"
[ "$(extends)" -eq 1 ] || fail "the journal does not record the extension once"
"$wbaudit" status runs/x --check --no-scheduler > out 2>&1 || { cat out; fail "status --check after the seed extension"; }
grep -q "cells *4: 4 done" out || { cat out; fail "not every cell done after the seed extension"; }
cmp -s seeds.toml runs/x/spec.toml || fail "spec.toml is not the extended spec"
[ -f "runs/x/specs/$(sha256sum < one.toml | cut -d' ' -f1).toml" ] || fail "the previous spec was not kept"
snapshot before2

# Another format (e4m3: its own learning rate, so its own references): 4 targets + 4 references; the bf16
# references stay as they ran (the new spec would have them project e4m3 too).
"$wbaudit" run formats.toml --out runs/x --extend --threads 1 > out 2>&1 || { cat out; fail "--extend formats.toml"; }
grep -q "extended runs/x by 4 cells (2 targets, 2 references)" out || { cat out; fail "format extension summary"; }
grep -q "stays as it ran" out || { cat out; fail "no note on the references kept"; }
[ "$(cells)" -eq 8 ] || fail "formats.toml: $(cells) cells, not 8"
(cd runs/x && sha256sum --quiet -c ../../before2) || fail "the format extension changed files of existing cells"
[ "$(extends)" -eq 2 ] || fail "the journal does not record both extensions"
"$wbaudit" status runs/x --check --no-scheduler > out 2>&1 || { cat out; fail "status --check after the format extension"; }
grep -q "cells *8: 8 done" out || { cat out; fail "not every cell done after the format extension"; }

# The same spec again with --extend: nothing to add, runs as --resume.
"$wbaudit" run formats.toml --out runs/x --extend -q > out 2>&1 || { cat out; fail "--extend with the sweep's own spec"; }
grep -q "already has this spec" out || { cat out; fail "--extend with the sweep's own spec says nothing"; }
[ "$(extends)" -eq 2 ] || fail "a no-op --extend journaled an extension"

# A changed shared setting (steps) is refused, naming it; nothing changes.
sed 's/^steps = 30$/steps = 40/' formats.toml > steps.toml
cp runs/x/sweep.json sweep.before
lines=$(wc -l < runs/x/journal.jsonl)
if "$wbaudit" run steps.toml --out runs/x --extend -q > out 2>&1; then fail "--extend with changed steps ran"; fi
grep -q "steps: 30 -> 40" out || { cat out; fail "the refusal does not name the changed setting"; }
cmp -s sweep.before runs/x/sweep.json || fail "a refused extension changed sweep.json"
[ "$(wc -l < runs/x/journal.jsonl)" -eq "$lines" ] || fail "a refused extension wrote to the journal"

# Tampering: sweep.json put back to its state before the last extension (a valid, once-signed record).
cp runs/x/sweep.json sweep.now
python3 - <<'PY'
import json
s = json.load(open("runs/x/sweep.json"))
s["cells"] = s["cells"][:4]
s["extensions"] = s["extensions"][:1]
s["spec_sha256"] = s["extensions"][0]["spec_sha256"]
open("runs/x/sweep.json", "w").write(json.dumps(s, indent=1, sort_keys=True) + "\n")
PY
if "$wbaudit" status runs/x --check --no-scheduler > out 2>&1; then fail "a rolled-back sweep.json passed status --check"; fi
grep -q "sweep.json differs from" out || { cat out; fail "the rolled-back sweep.json is not named"; }
cp sweep.now runs/x/sweep.json
"$wbaudit" status runs/x --check --no-scheduler > /dev/null 2>&1 || fail "the restored sweep.json fails status --check"
echo "PASS"
