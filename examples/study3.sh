#!/usr/bin/env bash
# Study 3 (docs/studies.md): the prospective analytic-grid E4M3 audit, end to end, in the protocol's order:
#   1. the history: e4m3 runs at seeds 21-23 (examples/study3_history.toml), made before anything is registered;
#   2. the source: one fp32 reference trace at seed 10 (examples/study3_reference.toml, its reference cell only);
#   3. the target sweep is created empty and the analysis (examples/study3_analysis.toml) is registered in it while
#      no target outcome exists (`wbaudit register` refuses otherwise);
#   4. the three target seeds run (with their matched fp32 references, the privileged comparison);
#   5. `wbaudit evaluate` scores source, template, matched-reference and common-time under the registration.
# Usage: examples/study3.sh [OUT]   (default runs/study3; OUT must not exist)
# Environment: WBAUDIT (the executable, default build/release/cli/wbaudit), THREADS (default 2),
# STUDY_STEPS (shrinks the runs, e.g. 60 for a smoke test; default: the specs' 800 steps).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
wbaudit="${WBAUDIT:-$root/build/release/cli/wbaudit}"
threads="${THREADS:-2}"
out="${1:-runs/study3}"
if [[ -e "$out" ]]; then
  echo "study3.sh: $out exists; give a new directory" >&2
  exit 1
fi
mkdir -p "$out/specs"
# The specs as run (identical to examples/ unless STUDY_STEPS shrinks them, in all three alike).
for part in history reference targets; do
  if [[ -n "${STUDY_STEPS:-}" ]]; then
    sed "s/^steps = .*/steps = ${STUDY_STEPS}/" "$here/study3_$part.toml" >"$out/specs/$part.toml"
  else
    cp "$here/study3_$part.toml" "$out/specs/$part.toml"
  fi
done
cp "$here/study3_analysis.toml" "$out/specs/analysis.toml"
run() { echo "+ wbaudit $*" >&2; "$wbaudit" "$@"; }
start=$(date +%s)
run run "$out/specs/history.toml" --out "$out/history" --kokkos-threads="$threads" -q
run run "$out/specs/reference.toml" --out "$out/reference" --cells 'reference/*' --kokkos-threads="$threads" -q
run run "$out/specs/targets.toml" --out "$out/targets" --create-only -q
run register "$out/specs/analysis.toml" --sweep "$out/targets"
run run "$out/specs/targets.toml" --out "$out/targets" --resume --kokkos-threads="$threads" -q
set +e
run evaluate "$out/targets" --out "$out/evaluation" --check
status=$?
set -e
echo "study3.sh: protocol finished in $(($(date +%s) - start)) s; report: $out/evaluation/report.html" >&2
# --check: 0 every gate passes, 3 a gate fails, 4 one is inconclusive; all three are results, not errors.
[[ $status -eq 0 || $status -eq 3 || $status -eq 4 ]] || exit "$status"
