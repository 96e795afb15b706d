#!/usr/bin/env bash
# Every example printed by `wbaudit <subcommand> --help` works when followed in order, as a newcomer on a fresh clone
# would (issues 16 and 31): one fresh directory holding only examples/, the subcommands in the order `wbaudit --help`
# lists them and each one's examples in the order printed, every one exiting 0 and printing something. Every listed
# subcommand has at least one example. Slurm is replaced by stand-ins on PATH that accept the jobs (sbatch prints a
# job id, nothing runs), so submit examples exercise wbaudit's side only, and a submitted sweep stays without outcomes.
#   help_examples_test.sh WBAUDIT SOURCE_DIR
set -euo pipefail
wbaudit=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# The sweeps' signing keys go to this test's own config directory, not the user's.
export XDG_CONFIG_HOME="$work/config"
unset WBAUDIT_KEY_FILE

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

# The examples: lines of each help text from its "Example..:" line on that call wbaudit, in the order printed.
subcommands=$("$wbaudit" --help | awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
[ "$(echo "$subcommands" | wc -w)" -ge 12 ] || fail "fewer than 12 subcommands listed: $subcommands"
: > "$work/examples"
for c in $subcommands; do
  "$wbaudit" "$c" --help | awk '/^Examples?( \(.*\))?:/ { on = 1 } on { sub(/^Examples?( \(.*\))?: */, ""); sub(/^ +/, ""); if ($0 ~ /wbaudit /) print }' \
    | sed 's/  *# .*$//' > "$work/examples.$c"
  [ -s "$work/examples.$c" ] || fail "wbaudit $c --help has no example"
  cat "$work/examples.$c" >> "$work/examples"
done

# A fresh clone's working directory: examples/ and nothing else (no runs/).
fresh="$work/clone"
mkdir "$fresh"
ln -s "$src/examples" "$fresh/examples"
n=0
while IFS= read -r example; do
  (cd "$fresh" && bash -c "$example") > "$work/out" 2>&1 < /dev/null || { cat "$work/out"; fail "example $((n + 1)) failed: $example"; }
  [ -s "$work/out" ] || fail "example printed nothing: $example"
  n=$((n + 1))
  echo "ok: $example"
done < "$work/examples"
echo "PASS ($n examples of $(echo "$subcommands" | wc -w) subcommands, in order, in one fresh directory)"
