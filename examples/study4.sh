#!/usr/bin/env bash
# Study 4 (docs/studies.md): the persistent-native study under registration with a non-canonical cell, end to end:
#   1. the sweep of examples/study4.toml is created empty and examples/study4_analysis.toml registered in it (six
#      required target cells, none present);
#   2. five target cells (and all six fp32 references) run through the pipeline;
#   3. the sixth, target/kind=cosine_restarts/seed=3, is made outside it: restarted by hand in another directory
#      (examples/study4_recovery.toml) and its attempt (trace + manifest) copied into the registered sweep's cell;
#   4. `wbaudit status` names it non-canonical and why; `wbaudit evaluate` of the registered analysis gives
#      `inconclusive` for every gate, naming the cell;
#   5. `wbaudit deviate` logs the protocol deviation; the retrospective analysis (examples/study4_retrospective.toml)
#      is registered with --retrospective and evaluated: its report is labelled retrospective, states which cohort
#      is complete, whether the recovered cell can enter it, and the verdict that follows.
# Usage: examples/study4.sh [OUT]   (default runs/study4; OUT must not exist)
# Environment: WBAUDIT (default build/release/cli/wbaudit), THREADS (default 2), STUDY_STEPS (shrinks the runs,
# e.g. 60 for a smoke test; default: the specs' 800 steps).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
wbaudit="${WBAUDIT:-$root/build/release/cli/wbaudit}"
threads="${THREADS:-2}"
out="${1:-runs/study4}"
if [[ -e "$out" ]]; then
  echo "study4.sh: $out exists; give a new directory" >&2
  exit 1
fi
mkdir -p "$out/specs"
for part in "" _recovery; do
  if [[ -n "${STUDY_STEPS:-}" ]]; then
    sed "s/^steps = .*/steps = ${STUDY_STEPS}/" "$here/study4$part.toml" >"$out/specs/study4$part.toml"
  else
    cp "$here/study4$part.toml" "$out/specs/study4$part.toml"
  fi
done
cp "$here/study4_analysis.toml" "$here/study4_retrospective.toml" "$out/specs/"
run() { echo "+ wbaudit $*" >&2; "$wbaudit" "$@"; }
results() {  # evaluate --check exits 3 (a gate fails) or 4 (inconclusive): results, not errors
  set +e
  run "$@"
  local status=$?
  set -e
  [[ $status -eq 0 || $status -eq 3 || $status -eq 4 ]] || exit "$status"
}
start=$(date +%s)
sweep="$out/sweep"
recovered="target/kind=cosine_restarts/seed=3"

# 1. Register before any outcome exists.
run run "$out/specs/study4.toml" --out "$sweep" --create-only -q
run register "$out/specs/study4_analysis.toml" --sweep "$sweep"

# 2. Five target cells through the pipeline (the sixth stays pending).
run run "$out/specs/study4.toml" --out "$sweep" --resume --kokkos-threads="$threads" -q \
  --cells 'reference/*,target/kind=constant/*,target/kind=cosine_restarts/seed=1,target/kind=cosine_restarts/seed=2'

# 3. The sixth outside the pipeline: a hand restart elsewhere, its attempt copied into the registered cell.
run run "$out/specs/study4_recovery.toml" --out "$out/recovery" --cells 'target/*' --no-report \
  --kokkos-threads="$threads" -q
id=$(python3 -c 'import json, sys
print(next(c["id"] for c in json.load(open(sys.argv[1]))["cells"] if c["name"] == sys.argv[2]))' \
  "$out/recovery/sweep.json" "$recovered")
if [[ -z "$id" || ! -d "$out/recovery/cells/$id/attempts" ]] || ! grep -q "\"$id\"" "$sweep/sweep.json"; then
  echo "study4.sh: could not find the recovered cell's attempt (id '$id')" >&2
  exit 1
fi
mkdir -p "$sweep/cells/$id/attempts"
cp -r "$out/recovery/cells/$id/attempts/." "$sweep/cells/$id/attempts/"
echo "study4.sh: copied the hand-restarted attempt of $recovered ($id) into $sweep" >&2

# 4. Status and the registered evaluation.
set +e
run status "$sweep" --cells --no-scheduler
set -e
results evaluate "$sweep" --analysis "$out/specs/study4_analysis.toml" --out "$out/evaluation-registered" --check

# 5. The deviation and the retrospective analysis.
run deviate "$sweep" --cells "$recovered" \
  --what "$recovered was restarted by hand outside the pipeline and its trace copied into the sweep" \
  --reason "its pipeline run did not happen; the recovered run is non-canonical (another spec)"
run register "$out/specs/study4_retrospective.toml" --sweep "$sweep" --retrospective
results evaluate "$sweep" --analysis "$out/specs/study4_retrospective.toml" --out "$out/evaluation-retrospective" \
  --check
echo "study4.sh: protocol finished in $(($(date +%s) - start)) s; reports: $out/evaluation-registered/report.html," \
  "$out/evaluation-retrospective/report.html" >&2
