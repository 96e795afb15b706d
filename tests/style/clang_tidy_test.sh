#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over every library and CLI translation unit of the build's
# compile_commands.json (sim, stats, forecast, runners, util, audit, cli, python): fails naming each warning.
#   clang_tidy_test.sh SOURCE_DIR BUILD_DIR RUN_CLANG_TIDY JOBS
set -euo pipefail
src=$1; build=$2; runner=$3; jobs=${4:-2}
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS)"; exit 1; }
mapfile -t files < <(python3 - "$build/compile_commands.json" "$src" <<'PY'
import json, sys
root = sys.argv[2].rstrip("/") + "/"
modules = ("sim/", "stats/", "forecast/", "runners/", "util/", "audit/", "cli/", "python/src/")
seen = sorted({e["file"] for e in json.load(open(sys.argv[1])) if e["file"].startswith(root) and e["file"][len(root):].startswith(modules)})
print("\n".join(seen))
PY
)
echo "clang-tidy: ${#files[@]} translation units, $jobs at a time"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$runner" -p "$build" -j "$jobs" -quiet "${files[@]}" >"$log" 2>&1 || true
if grep -q "warning:\|error:" "$log"; then
  grep -E "warning:|error:" "$log" | sed 's/\x1b\[[0-9;]*m//g' | sort -u
  echo "clang-tidy: $(grep -E 'warning:|error:' "$log" | sed 's/\x1b\[[0-9;]*m//g' | sort -u | wc -l) findings (see above)"
  exit 1
fi
echo "clang-tidy: no findings in ${#files[@]} translation units"
