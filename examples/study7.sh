#!/usr/bin/env bash
# Study 7 (docs/studies.md): what block scaling does to erased updates, end to end:
#   1. the sweep examples/decoder_blocks.toml: the decoder's matrices persistent-native in e4m3, mxfp8_e4m3, e2m1,
#      mxfp4_e2m1, mxfp4_e2m1:rceil and nvfp4 under nearest and stochastic write-back, 3 seeds, with the fp32
#      reference of each seed (which projects every target format); its report gives the loss gap to fp32 and the
#      share SR recovers (report/loss.html) and the erased fraction by cause, collateral moves, flushes and rescales
#      (report/blocks.html, block_summary.csv);
#   2. `wbaudit evaluate` scores each format's erased fraction forecast from the fp32 references
#      (examples/decoder_blocks_analysis.toml; exploratory, not registered).
# Usage: examples/study7.sh [OUT]   (default runs/study7; OUT must not exist)
# Environment: WBAUDIT (the executable, default build/release/cli/wbaudit), THREADS (default 2), SPEC (the sweep
# spec, default examples/decoder_blocks.toml; the ctest runners.study7 passes a tiny decoder).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
wbaudit="${WBAUDIT:-$root/build/release/cli/wbaudit}"
threads="${THREADS:-2}"
spec="${SPEC:-$here/decoder_blocks.toml}"
out="${1:-runs/study7}"
if [[ -e "$out" ]]; then
  echo "study7.sh: $out exists; give a new directory" >&2
  exit 1
fi
run() { echo "+ wbaudit $*" >&2; "$wbaudit" "$@"; }
start=$(date +%s)
run run "$spec" --out "$out/sweep" --kokkos-threads="$threads"
set +e
run evaluate "$out/sweep" --analysis "$here/decoder_blocks_analysis.toml" --out "$out/evaluation" --check
status=$?
set -e
echo "study7.sh: finished in $(($(date +%s) - start)) s; reports: $out/sweep/report/loss.html," \
  "$out/sweep/report/blocks.html, $out/evaluation/report.html" >&2
# --check: 0 every gate passes, 3 a gate fails, 4 one is inconclusive or the analysis is not registered (5:
# retrospective); all are results, not errors.
[[ $status -eq 0 || $status -eq 3 || $status -eq 4 || $status -eq 5 ]] || exit "$status"
