#!/usr/bin/env bash
# CLI consistency (issue 16): one spelling of each thing across commands and files. Cell labels are the same in
# every CSV; the statistic names `evaluate` prints are the names a gate accepts.
set -euo pipefail
wbaudit=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$wbaudit" run "$src/examples/tiny.toml" -o "$work/s" --kokkos-threads=1 -q || fail "run tiny"
"$wbaudit" evaluate "$work/s" --analysis "$src/examples/two_layer_analysis.toml" --out "$work/e" > "$work/eval.out" \
  || { cat "$work/eval.out"; fail "evaluate"; }

# Cell labels: the first column of summary.csv and trajectories.csv and the `cell` column of the evaluation's
# tables name the same cells the same way.
labels() {  # file, column name -> sorted unique values of that column (labels contain no commas)
  awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == col) c = i; next } { print $c }' "$1" | sort -u
}
labels "$work/s/summary.csv" cell > "$work/summary.labels"
[ "$(wc -l < "$work/summary.labels")" -eq 8 ] || fail "summary.csv: expected 8 cell labels"
for f in s/trajectories.csv e/cells.csv e/crossings.csv e/series.csv; do
  labels "$work/$f" cell > "$work/other.labels"
  diff "$work/summary.labels" "$work/other.labels" > "$work/diff" || { cat "$work/diff"; fail "cell labels of $f differ from summary.csv"; }
done
grep -q '^target/lr_scale=0.5/format=bf16/layer1.weight$' "$work/summary.labels" || { cat "$work/summary.labels"; fail "label form"; }

# Statistic names: every `name value` pair on evaluate's predictor lines is a statistic a gate accepts.
stats=$(grep -E '^  [a-z-]+: rmse_macro' "$work/eval.out" | sed 's/^  [a-z-]*: //' | tr ',' '\n' | awk '{print $1}' | sort -u)
[ -n "$stats" ] || { cat "$work/eval.out"; fail "no statistics printed"; }
echo "$stats" | grep -qx skill_vs_common_time || { echo "$stats"; fail "skill against common time not printed as skill_vs_common_time"; }
{
  printf '[analysis]\npredictors = ["source", "template", "common-time"]\nbaselines = ["template", "common-time"]\n'
  printf '[bootstrap]\nresamples = 50\n'
  for s in $stats; do
    printf '[[gates]]\nname = "%s"\nstatistic = "%s"\npredictor = "source"\ncomparator = ">="\nthreshold = -1e9\n' "$s" "$s"
  done
} > "$work/gates.toml"
"$wbaudit" evaluate "$work/s" --analysis "$work/gates.toml" --out "$work/e2" > "$work/eval2.out" 2>&1 \
  || { cat "$work/eval2.out"; fail "a printed statistic name is refused by a gate"; }
# -o wherever --out: every subcommand listed by `wbaudit --help` (hidden ones included) that takes --out offers -o.
subcommands=$("$wbaudit" --help | awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
[ -n "$subcommands" ] || fail "no subcommands listed"
for c in $subcommands run-cells worker; do
  "$wbaudit" "$c" --help > "$work/help" || fail "$c --help"
  if grep -q -- '--out' "$work/help"; then
    grep -q -- '-o,--out' "$work/help" || { cat "$work/help"; fail "$c takes --out but not -o"; }
  fi
done
# -q wherever there is progress output: with -q, report and evaluate write nothing to stderr.
"$wbaudit" report "$work/s" -q 2> "$work/report.err" > /dev/null || fail "report -q"
[ ! -s "$work/report.err" ] || { cat "$work/report.err"; fail "report -q printed progress"; }
"$wbaudit" evaluate "$work/s" -o "$work/e3" --no-figures > /dev/null 2> "$work/eval.err" || fail "evaluate -o"
[ -s "$work/e3/report.md" ] && [ ! -s "$work/eval.err" ] || { cat "$work/eval.err"; fail "evaluate -o"; }

# A directory made by another spec says so, with or without --resume (it never suggests a --resume that would
# refuse); the same spec without --resume suggests --resume; a non-empty non-sweep directory is refused untouched.
sed 's/^seed = 7/seed = 8/' "$src/examples/tiny.toml" > "$work/other.toml"
for resume in "" "--resume"; do
  if "$wbaudit" run "$work/other.toml" -o "$work/s" $resume -q 2> "$work/err"; then fail "ran another spec into s ($resume)"; fi
  grep -q "created by another spec" "$work/err" || { cat "$work/err"; fail "another spec ($resume): not said"; }
  if grep -q "use --resume" "$work/err"; then cat "$work/err"; fail "another spec ($resume): suggests --resume"; fi
  if "$wbaudit" submit "$work/other.toml" -o "$work/s" $resume --dry-run > /dev/null 2> "$work/err"; then fail "submit: another spec ($resume)"; fi
  grep -q "created by another spec" "$work/err" || { cat "$work/err"; fail "submit, another spec ($resume): not said"; }
done
if "$wbaudit" run "$src/examples/tiny.toml" -o "$work/s" -q 2> "$work/err"; then fail "reran into s"; fi
grep -q "use --resume" "$work/err" || { cat "$work/err"; fail "same spec without --resume: no hint"; }
mkdir "$work/junk" && echo keep > "$work/junk/notes.txt"
if "$wbaudit" run "$src/examples/tiny.toml" -o "$work/junk" --resume -q 2> "$work/err"; then fail "ran into a non-sweep directory"; fi
grep -q "not a sweep directory" "$work/err" || { cat "$work/err"; fail "non-sweep directory: unclear"; }
[ "$(ls "$work/junk")" = notes.txt ] || fail "a refused run wrote into junk/"

# Exit codes: the README's table lists exactly the codes the subcommands use, and each is produced as documented.
codes=$(awk '/^Exit codes, the same for every subcommand:/ { on = 1; next } on && /^\| [0-9]+ \|/ { print $2 } on && /^$/ && seen++ { exit }' "$src/README.md" | tr '\n' ' ')
[ "$codes" = "0 1 2 3 4 5 64 " ] || fail "README exit-code table lists '$codes'"
expect() {  # code, command...
  local want=$1 rc
  shift
  set +e
  "$@" > "$work/rc.out" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq "$want" ] || { cat "$work/rc.out"; fail "exit $rc, documented $want: $*"; }
}
expect 0 "$wbaudit" run --help
for usage in "nosuch" "run" "run $src/examples/tiny.toml --bogus" "run $src/examples/tiny.toml --jobs 0" \
             "run $work/absent.toml" "--threads x formats" "--kokkos-thread=1 formats" "evaluate"; do
  expect 64 "$wbaudit" $usage
done
printf 'steps = 10\n[grid]\n"target.format" = ["e4m4"]\n' > "$work/bad.toml"
expect 1 "$wbaudit" run "$work/bad.toml" -o "$work/bad"
expect 0 "$wbaudit" status "$work/s" --check --no-scheduler
gate() {  # comparator threshold -> an analysis with one accuracy gate
  printf '[analysis]\npredictors = ["source", "template"]\nbaselines = ["template"]\n[bootstrap]\nresamples = 50\nmin_units = 2\n# the tiny sweep has 4 target runs; this test is about exit codes\n'
  printf '[[gates]]\nname = "g"\nstatistic = "rmse_macro"\npredictor = "source"\ncomparator = "%s"\nthreshold = %s\n' "$1" "$2"
}
gate "<=" 1 > "$work/pass.toml"
gate "<=" 0 > "$work/fail.toml"
gate "<=" "$(awk -F, '$1 == "accuracy" { print $7 }' "$work/e/gates.csv")" > "$work/inconclusive.toml"
expect 0 "$wbaudit" evaluate "$work/s" --analysis "$work/pass.toml" -o "$work/g0" --no-figures --check
expect 3 "$wbaudit" evaluate "$work/s" --analysis "$work/fail.toml" -o "$work/g3" --no-figures --check
expect 4 "$wbaudit" evaluate "$work/s" --analysis "$work/inconclusive.toml" -o "$work/g4" --no-figures --check
# A retrospective pass (registered after the outcomes exist) is not a preregistered pass: exit 5 (issue 31).
"$wbaudit" register "$work/pass.toml" --sweep "$work/s" --retrospective > /dev/null
expect 5 "$wbaudit" evaluate "$work/s" -o "$work/g5" --no-figures --check
grep -q "every gate passes, under a retrospective analysis (exit 5)" "$work/rc.out" || { cat "$work/rc.out"; fail "no retrospective check line"; }
# CLI11's own errors carry the prefix every other error has (issue 31).
expect 64 "$wbaudit" evaluate
grep -q "^wbaudit: error: " "$work/rc.out" || { cat "$work/rc.out"; fail "a usage error without the wbaudit: error: prefix"; }
rm "$work/s/cells/"*/attempts/*/trace.h5 2> /dev/null || true
expect 2 "$wbaudit" status "$work/s" --check --no-scheduler

echo "PASS"
