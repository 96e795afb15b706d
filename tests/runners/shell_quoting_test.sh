#!/usr/bin/env bash
# A sweep directory whose path holds spaces, $(touch PWNED), a backtick and quotes: `run` writes its report with
# figures, `evaluate` and `grid` their figures, and no file PWNED appears anywhere (gnuplot is started without a
# shell; before issue 28 the report's figure command went through std::system with gnuplot-style quoting).
#   shell_quoting_test.sh WBAUDIT SOURCE_DIR
set -uo pipefail
wbaudit=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 XDG_CONFIG_HOME="$work/config"
cd "$work" || exit 1
dir="$work/a b \$(touch PWNED) \`touch PWNED2\` it's \"here\""
"$wbaudit" --threads 1 run "$src/tests/slurm/tiny_sweep.toml" --out "$dir" -q > run.log 2>&1 || { cat run.log; fail "run"; }
ls "$dir"/report/figures/*.svg > /dev/null 2>&1 || fail "the report has no figures"
"$wbaudit" --threads 1 evaluate "$dir" --analysis "$src/examples/two_layer_analysis.toml" -o "$dir/ev" > ev.log 2>&1 \
  || { cat ev.log; fail "evaluate"; }
ls "$dir"/ev/figures/*.svg > /dev/null 2>&1 || fail "the evaluation has no figures"
ref=$(ls "$dir"/cells/*/attempts/*/trace.h5 | while read -r t; do
  /usr/bin/python3 -c 'import h5py,sys; sys.exit(0 if h5py.File(sys.argv[1],"r").attrs["mode"] in ("reference", b"reference") else 1)' "$t" && echo "$t"; done | head -1)
"$wbaudit" --threads 1 grid "$ref" -o "$dir/grid" --formats e4m3 --lr-scales 1 > grid.log 2>&1 || { cat grid.log; fail "grid"; }
ls "$dir"/grid/*.svg > /dev/null 2>&1 || fail "the grid has no heat map"
found=$(find "$work" /tmp "$src" \( -name PWNED -o -name PWNED2 \) 2>/dev/null | head -3)
[ -z "$found" ] || fail "the shell ran a command from the sweep path: $found"
echo "shell quoting: report, evaluation and grid figures written; nothing executed"
