#!/usr/bin/env bash
# Smoke test of examples/study3.sh and examples/study4.sh at a tiny size (STUDY_STEPS=40): each protocol runs end to
# end and its reports say what docs/studies.md promises (registered before the targets, gates with intervals, the
# non-canonical cell named, the retrospective analysis labelled with its cohort verdict).
# Usage: study_scripts_test.sh WBAUDIT SOURCE_DIR
set -euo pipefail
export WBAUDIT="$1" STUDY_STEPS=40 THREADS=1
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2'"; }

"$src/examples/study3.sh" "$tmp/s3" >"$tmp/s3.log" 2>&1 || { cat "$tmp/s3.log"; fail "study3.sh exited $?"; }
has "$tmp/s3.log" "outcomes 3 cells, none present yet"
r3="$tmp/s3/evaluation/report.md"
has "$r3" "preregistered"
has "$r3" "At a glance"
has "$r3" "matched-reference"
has "$r3" "n = 3 target runs"
for gate in "absolute accuracy" "skill against the template" "directional specificity"; do
  grep "^$gate,\|^\"$gate\"," "$tmp/s3/evaluation/gates.csv" | grep -Eq ',(pass|fail|inconclusive),' ||
    fail "gates.csv has no verdict for $gate"
done
has "$tmp/s3/evaluation/report.md" "history: the 3 canonical target runs of the sweep ../history"

"$src/examples/study4.sh" "$tmp/s4" >"$tmp/s4.log" 2>&1 || { cat "$tmp/s4.log"; fail "study4.sh exited $?"; }
cell="target/kind=cosine_restarts/seed=3"
grep "$cell" "$tmp/s4.log" | grep -q noncanonical || { cat "$tmp/s4.log"; fail "status does not name $cell non-canonical"; }
reg="$tmp/s4/evaluation-registered/gates.csv"
[[ $(tail -n +2 "$reg" | wc -l) -eq 3 ]] || fail "registered analysis: expected 3 gates"
while IFS= read -r line; do
  [[ "$line" == *",inconclusive,"* && "$line" == *"$cell"* ]] || fail "registered gate not inconclusive naming $cell: $line"
done < <(tail -n +2 "$reg")
retro="$tmp/s4/evaluation-retrospective/report.md"
has "$retro" "retrospective"
has "$retro" "negative: the recovered cell $cell cannot enter"
has "$retro" "disjoint"
has "$tmp/s4/evaluation-retrospective/cohort.csv" "$cell,false"
echo "study scripts: ok"
