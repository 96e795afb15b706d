#!/usr/bin/env bash
# `wbaudit grid` end to end on a reference trace of examples/tiny.toml: table, grid.csv, grid_summary.csv and heat
# maps written; at s = 1 the e4m3 column equals the trace's exact projected/e4m3/fraction (read independently with
# h5py); bad input (unknown step, target trace, schema-1 trace without the joint histogram, bad scale) is a clear
# error with non-zero exit and no CSV written. A sweep with [reference] margin_formats grids its formats from the
# smaller histogram exactly as a sweep recording every format does, by default those formats only, refusing others.
set -euo pipefail
wbaudit=$1
src=$2
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$wbaudit" run "$src/examples/tiny.toml" --out "$work/t" --kokkos-threads=1 --jobs 1 --quiet --no-report || fail "run"
ref="" target=""
for f in "$work"/t/cells/*/attempts/*/trace.h5; do
  mode=$($py -c "import h5py,sys; print(h5py.File(sys.argv[1],'r').attrs['mode'])" "$f")
  if [ "$mode" = reference ] && [ -z "$ref" ]; then ref=$f; fi
  if [ "$mode" = target ] && [ -z "$target" ]; then target=$f; fi
done
[ -n "$ref" ] && [ -n "$target" ] || fail "no reference or target trace"

"$wbaudit" grid "$ref" --formats bf16,e4m3,int4 --lr-scales 0.5,1,3 --groups layer1.weight -o "$work/g" > "$work/out" \
  || { cat "$work/out"; fail "grid"; }
grep -q "e4m3" "$work/out" || fail "table lacks e4m3"
for f in grid.csv grid_summary.csv grid_layer1.weight.svg grid_layer1.weight.png; do
  [ -s "$work/g/$f" ] || fail "missing $f"
done
steps=$($py -c "import h5py,sys; print(len(h5py.File(sys.argv[1],'r')['recorded_steps']))" "$ref")
rows=$(($(wc -l < "$work/g/grid.csv") - 1))
[ "$rows" -eq $((9 * steps)) ] || fail "grid.csv has $rows rows, expected $((9 * steps))"
rows=$(($(wc -l < "$work/g/grid_summary.csv") - 1))
[ "$rows" -eq 9 ] || fail "grid_summary.csv has $rows rows, expected 9"
$py - "$ref" "$work/g/grid.csv" <<'PY' || fail "grid at s = 1 differs from the exact projection"
import csv, math, sys, h5py
f = h5py.File(sys.argv[1], "r")
exact = dict(zip(f["recorded_steps"][:], f["groups/layer1.weight/projected/e4m3/fraction"][:]))
n = 0
for r in csv.DictReader(open(sys.argv[2])):
    if r["format"] == "e4m3" and float(r["lr_scale"]) == 1.0:
        e = exact[int(r["step"])]
        if math.isnan(e):
            assert r["erased_fraction"] == "", r
        else:
            assert abs(float(r["erased_fraction"]) - e) <= 1e-12, (r, e)
        n += 1
assert n == len(exact), n
PY

# `evaluate` with the analytic grid holds the references without their histograms and reads them from each reference's
# file a block of recorded steps at a time: its `source` series ([source] method = "analytic-grid") is, cell by cell,
# the grid CLI's series of the cell's declared reference at the cell's format and s = 1 (a tiny target has its
# reference's learning rate), and the analytic-grid predictor is there for every cell.
printf '[analysis]\npredictors = ["source", "analytic-grid", "template", "common-time"]\nbaselines = ["template", "common-time"]\n[source]\nmethod = "analytic-grid"\n[bootstrap]\nresamples = 50\nmin_units = 2\n' \
  > "$work/analytic.toml"
"$wbaudit" evaluate "$work/t" --analysis "$work/analytic.toml" -o "$work/e" --no-figures > "$work/e.out" 2>&1 \
  || { cat "$work/e.out"; fail "evaluate with the analytic grid"; }
$py - "$wbaudit" "$work" <<'PY' || fail "evaluate's analytic-grid source differs from the grid CLI"
import csv, math, subprocess, sys
wbaudit, work = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(work + "/e/series.csv")))
assert rows and "source" in rows[0] and "analytic-grid" in rows[0], rows[:1]
by_cell = {}
for r in rows:
    by_cell.setdefault(r["cell"], {})[int(r["step"])] = r
n = 0
for cell, steps in sorted(by_cell.items()):
    target, group = cell.rsplit("/", 1)
    fmt = [p.split("=", 1)[1] for p in target.split("/") if p.startswith("format=")][0]
    out = "%s/g_%d" % (work, n)
    subprocess.run([wbaudit, "grid", work + "/t", "--cell", target, "--formats", fmt, "--lr-scales", "1",
                    "--groups", group, "--no-figure", "-o", out], check=True, stdout=subprocess.DEVNULL)
    grid = {int(g["step"]): g["erased_fraction"] for g in csv.DictReader(open(out + "/grid.csv"))}
    for step, r in steps.items():
        want, got = grid[step], r["source"]
        assert (want == "" and (got == "" or math.isnan(float(got)))) or float(got) == float(want), (cell, step, got, want)
        assert r["analytic-grid"] != "", (cell, step)
        n += 1
assert n > 0
PY

# One step; the summary then covers it alone.
step=$($py -c "import h5py,sys; print(h5py.File(sys.argv[1],'r')['recorded_steps'][2])" "$ref")
"$wbaudit" grid "$ref" --formats e2m1 --lr-scales 1 --groups layer2.weight --step "$step" --no-figure -o "$work/g1" \
  > /dev/null || fail "--step"
[ "$(($(wc -l < "$work/g1/grid.csv") - 1))" -eq 1 ] || fail "--step: expected 1 row"

expect_error() {  # expect_error PATTERN ARGS...: non-zero exit, message matches, no grid.csv in the output dir
  local pattern=$1; shift
  rm -rf "$work/bad"
  if "$wbaudit" grid "$@" -o "$work/bad" > "$work/bad.out" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$pattern" "$work/bad.out" || { cat "$work/bad.out"; fail "message for $* lacks '$pattern'"; }
  [ ! -e "$work/bad/grid.csv" ] || fail "grid.csv written despite the error: $*"
}
expect_error "not a recorded step" "$ref" --step 99999
expect_error "reference" "$target"
expect_error "learning-rate scale" "$ref" --lr-scales 0
expect_error "unknown" "$ref" --formats e9m9
cp "$ref" "$work/old.h5"
$py - "$work/old.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["schema"] = "wbaudit.trace/1"
    for g in f["groups"].values():
        del g["joint"]
PY
expect_error "regenerate" "$work/old.h5"

# examples/tiny.toml with 160 hidden units (layer1.weight: 1280 coordinates, above the 1024 a group keeps exactly, so the
# grid reads its margin histogram), as is and with [reference] margin_formats: each reference of the second records
# the margin histogram of bf16 and e4m3 only (its margin_formats attribute says so); the grid's default formats become
# those two, whose values equal the first sweep's grid of the same reference cell at every scale; another format is
# refused by name for the group the histogram serves.
sed 's/^hidden = 16$/hidden = 160/; s/^steps = 120$/steps = 40/' "$src/examples/tiny.toml" > "$work/wide.toml"
grep -q "^hidden = 160$" "$work/wide.toml" || fail "examples/tiny.toml no longer has 'hidden = 16'"
{ cat "$work/wide.toml"; printf '\n[reference]\nmargin_formats = ["e4m3", "bf16"]\n'; } > "$work/some.toml"
for spec in wide some; do
  "$wbaudit" run "$work/$spec.toml" --out "$work/$spec" --kokkos-threads=1 --jobs 1 --quiet --no-report 2> /dev/null \
    || fail "run $spec.toml"
done
n=0
for f in "$work"/some/cells/*/attempts/*/trace.h5; do
  [ "$($py -c "import h5py,sys; print(h5py.File(sys.argv[1],'r').attrs['mode'])" "$f")" = reference ] || continue
  formats=$($py -c "import h5py,sys; print(','.join(h5py.File(sys.argv[1],'r').attrs['margin_formats'].split()))" "$f")
  [ "$formats" = "bf16,e4m3" ] || fail "margin_formats attribute of $f: $formats"
  expect_error 'format "fp16" is not in this trace.s margin histogram (bf16, e4m3)' "$f" --formats fp16 \
    --groups layer1.weight
  n=$((n + 1))
done
[ "$n" -eq 4 ] || fail "$n references in the margin_formats sweep, expected 4"
for cell in $($py -c "import json,sys; print(' '.join(c['name'] for c in json.load(open(sys.argv[1]))['cells'] if c['name'].startswith('reference/')))" "$work/some/sweep.json"); do
  "$wbaudit" grid "$work/some" --cell "$cell" --lr-scales 0.3,1,3 --no-figure -o "$work/gs" > /dev/null \
    || fail "grid $cell (margin_formats)"
  "$wbaudit" grid "$work/wide" --cell "$cell" --formats bf16,e4m3 --lr-scales 0.3,1,3 --no-figure -o "$work/gf" \
    > /dev/null || fail "grid $cell (every format)"
  cmp -s "$work/gs/grid.csv" "$work/gf/grid.csv" || fail "grid of $cell differs from the default sweep's"
  grep -q "^layer1.weight,e4m3," "$work/gs/grid.csv" || fail "grid of $cell lacks layer1.weight at e4m3"
  n=$((n + 1))
done
[ "$n" -eq 8 ] || fail "compared $((n - 4)) reference cells, expected 4"
echo "grid CLI OK"
