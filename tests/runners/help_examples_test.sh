#!/usr/bin/env bash
# Every example printed by `wbaudit <subcommand> --help` runs and exits 0 (issue 16: help examples named absent
# files and cell names that `run` never produces). Each example runs in a fresh directory holding examples/; one that
# works on an existing sweep (status, evaluate, report, deviate, --resume) gets a copy of the sweep the first `run`
# example made, `register` a copy of a sweep that was submitted but has not run. Slurm is replaced by stand-ins on
# PATH that accept the job (sbatch prints a job id), so submit examples exercise wbaudit's side only.
#   help_examples_test.sh WBAUDIT SOURCE_DIR
set -euo pipefail
wbaudit=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

mkdir "$work/bin"
ln -s "$wbaudit" "$work/bin/wbaudit"
cat > "$work/bin/sbatch" <<'SH'
#!/bin/sh
n=$(cat "$(dirname "$0")/jobs" 2>/dev/null || echo 100); n=$((n + 1)); echo $n > "$(dirname "$0")/jobs"; echo "$n"
SH
printf '#!/bin/sh\necho "MaxArraySize            = 1001"\n' > "$work/bin/scontrol"
printf '#!/bin/sh\nexit 0\n' > "$work/bin/squeue"
cp "$work/bin/squeue" "$work/bin/sacct"
chmod +x "$work/bin/sbatch" "$work/bin/scontrol" "$work/bin/squeue" "$work/bin/sacct"
export PATH="$work/bin:$PATH"

# The examples: lines of each help text from its "Example:"/"Examples:" line on that call wbaudit.
subcommands=$("$wbaudit" --help | awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
: > "$work/examples"
for c in $subcommands; do
  "$wbaudit" "$c" --help | awk '/^Examples?:/ { on = 1 } on { sub(/^Examples?: */, ""); sub(/^ +/, ""); if ($0 ~ /wbaudit /) print }' \
    | sed 's/  *# .*$//' >> "$work/examples"
done
[ "$(grep -c . "$work/examples")" -ge 10 ] || { cat "$work/examples"; fail "fewer than 10 examples found"; }

sandbox() {  # a fresh directory with examples/
  local d
  d=$(mktemp -d "$work/example.XXXXXX")
  ln -s "$src/examples" "$d/examples"
  echo "$d"
}
done_sweep="" submitted_sweep=""
# Examples that make the sweeps the others need run first.
first_run=$(grep -m1 '^wbaudit run ' "$work/examples")
first_submit=$(grep '^wbaudit submit ' "$work/examples" | grep -v -- '--resume\|--dry-run' | head -1)
{ echo "$first_run"; echo "$first_submit"; grep -vxF -e "$first_run" -e "$first_submit" "$work/examples"; } > "$work/ordered"
while IFS= read -r example; do
  dir=$(sandbox)
  command=$(echo "$example" | sed 's/.*wbaudit \([a-z-]*\).*/\1/')
  case "$command" in
    status | evaluate | report | deviate | grid) needs=done ;;
    register) needs=submitted ;;
    *) needs="" ;;
  esac
  if echo "$example" | grep -q -- '--resume'; then needs=done; fi
  if [ "$needs" = done ]; then cp -a "$done_sweep" "$dir/runs"; fi
  if [ "$needs" = submitted ]; then cp -a "$submitted_sweep" "$dir/runs"; fi
  (cd "$dir" && bash -c "$example") > "$work/out" 2>&1 < /dev/null || { cat "$work/out"; fail "example failed: $example"; }
  [ -s "$work/out" ] || fail "example printed nothing: $example"
  echo "ok: $example"
  if [ "$example" = "$first_run" ]; then done_sweep="$dir/runs"; fi
  if [ "$example" = "$first_submit" ]; then submitted_sweep="$dir/runs"; fi
done < "$work/ordered"
echo "PASS ($(grep -c . "$work/ordered") examples)"
