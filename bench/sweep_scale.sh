#!/usr/bin/env bash
# Scale of a sweep's CLI in the number of cells (issue 32): the tiny spec (examples/tiny.toml, 40 steps) with a seed
# axis of S1 and S2 values (4 x S target runs each, plus their references), timed with /usr/bin/time -v:
# run (--no-report), status, report, evaluate (an analysis without the analytic grid, and optionally with it).
#   bench/sweep_scale.sh WBAUDIT WORKDIR [S1 [S2 [--with-grid]]]     (defaults: S1 25, S2 250)
# Prints one line per command and size (wall seconds, peak RSS in MB) and the ratio S2 / S1 of each.
set -euo pipefail
exe=$(realpath "$1"); work=$2; s1=${3:-25}; s2=${4:-250}; grid=${5:-}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"; cd "$work"
measure() {  # label, command...: appends "label seconds MB"
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o time.txt "$@" >/dev/null 2>log.txt || { cat log.txt >&2; exit 1; }
  read -r sec kb <time.txt
  echo "$label $sec $((kb / 1024))" | tee -a results.txt
}
sed -e '/^predictors = /s/"analytic-grid", //' "$src/examples/two_layer_analysis.toml" >no_grid.toml
rm -f results.txt
for s in "$s1" "$s2"; do
  seeds=$(seq -s ', ' 1 "$s")
  sed -e 's/^steps = 120/steps = 40/' -e '/^seed = /d' \
      -e "s/^\"optimizer.lr_scale\" = \[0.5, 4.0\]/\"optimizer.lr_scale\" = [0.5, 4.0]\n\"seed\" = [$seeds]/" \
      "$src/examples/tiny.toml" >"spec$s.toml"
  rm -rf "sweep$s" "eval$s" "evalgrid$s"
  measure "run:$s" "$exe" run "spec$s.toml" --out "sweep$s" --no-report -q
  measure "status:$s" "$exe" status "sweep$s"
  measure "report:$s" "$exe" report "sweep$s"
  measure "evaluate:$s" "$exe" evaluate "sweep$s" --analysis no_grid.toml --out "eval$s"
  if [ -n "$grid" ]; then
    measure "evaluate-analytic-grid:$s" "$exe" evaluate "sweep$s" --analysis "$src/examples/two_layer_analysis.toml" --out "evalgrid$s"
  fi
  echo "cells:$s $(find "sweep$s/cells" -name trace.h5 | wc -l) traces, $(du -sm "sweep$s" | cut -f1) MB" | tee -a results.txt
done
echo "ratios ($s2 / $s1 seeds = $((s2 / s1))x cells): time, memory"
for c in run status report evaluate evaluate-analytic-grid; do
  a=$(grep "^$c:$s1 " results.txt || true); b=$(grep "^$c:$s2 " results.txt || true)
  [ -n "$a" ] && [ -n "$b" ] || continue
  awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "%-24s %6.2fx time  %6.2fx memory\n", c, y[2] / x[2], y[3] / x[3] }'
done
