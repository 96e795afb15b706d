#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: install what is missing, build (release preset), run the controlled
# two-layer study (docs/science.md study 1) as a local sweep and write its report.
#   scripts/main.sh            reduced grid (72 evaluation cells, shorter runs; a few minutes on 2 cores)
#   scripts/main.sh --full     the full-length grid
# Extra arguments after the flags go to `wbaudit run` (e.g. --resume).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
spec=examples/two_layer_grid_quick.toml
out=runs/two_layer_grid_quick
if [ "${1:-}" = "--full" ]; then
  spec=examples/two_layer_grid.toml
  out=runs/two_layer_grid
  shift
fi
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target wbaudit
if [ -d "$out" ] && [[ "$*" != *--resume* ]]; then
  # A finished sweep is never overwritten: keep it under a timestamped name.
  mv "$out" "$out.$(date +%Y%m%d-%H%M%S)"
fi
export OMP_PROC_BIND=false
build/release/cli/wbaudit formats
build/release/cli/wbaudit run "$spec" --out "$out" --kokkos-threads="$(nproc)" "$@"
echo "report: $root/$out/report/report.html (Markdown: $out/report/report.md; tables: $out/summary.csv)"
