#!/usr/bin/env bash
# A failed `wbaudit submit` leaves nothing behind (issue 31, item 11). Failures are injected with stand-ins for
# sbatch first on PATH (one that refuses every job, one that accepts the cells job and refuses the report job) and
# with no sbatch at all; nothing here runs a job.
#  1. a new sweep whose sbatch fails: the directory, the key and its journal heads that submit created are removed
#     and listed; the retry works without --resume;
#  2. an existing sweep (--resume) whose sbatch fails: left exactly as it was (same files), and the message says so;
#  3. sbatch not installed: as 1;
#  4. the cells job accepted, the report job refused: nothing is removed (a queued job uses the directory), the
#     message names the cells job.
#   submit_rollback_test.sh WBAUDIT SOURCE_DIR
set -euo pipefail
wbaudit=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export XDG_CONFIG_HOME="$work/config"
unset WBAUDIT_KEY_FILE
cd "$work"
mkdir refuse accept half none
printf '#!/bin/sh\necho "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2\nexit 1\n' > refuse/sbatch
printf '#!/bin/sh\necho 101\n' > accept/sbatch
cat > half/sbatch <<'SH'
#!/bin/sh
for a in "$@"; do case "$a" in --dependency=*) echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2; exit 1 ;; esac; done
echo 202
SH
for d in refuse accept half; do printf '#!/bin/sh\nexit 1\n' > "$d/scontrol"; chmod +x "$d/sbatch" "$d/scontrol"; done
keys() { find "$XDG_CONFIG_HOME" -mindepth 3 2>/dev/null | LC_ALL=C sort; }
# (.lock holds the last holder's pid, rewritten by every writer that takes the lock)
listing() { (cd runs/s && find . | LC_ALL=C sort; find . -type f ! -name .lock | LC_ALL=C sort | xargs sha256sum); }
submit() { local bin=$1; shift; PATH="$work/$bin:/usr/bin:/bin" "$wbaudit" submit "$src/examples/tiny.toml" --out runs/s --time 10 "$@"; }

# 1. A new sweep, sbatch refuses.
if submit refuse > out 2>&1; then fail "submit with a refusing sbatch succeeded"; fi
grep -q "Invalid partition name specified" out || { cat out; fail "sbatch's message is not shown"; }
grep -q "nothing was submitted; this submit created the sweep and removed what it made:" out || { cat out; fail "no roll-back message"; }
grep -q "^  runs/s$" out || { cat out; fail "the removed directory is not named"; }
grep -q "no --resume needed" out || { cat out; fail "the message does not say how to continue"; }
[ ! -e runs/s ] || fail "the sweep directory was left behind"
[ -z "$(keys)" ] || { keys; fail "the key or its heads were left behind"; }

# The retry works without --resume.
submit accept > out 2>&1 || { cat out; fail "the retry after a rolled-back submit"; }
grep -q "^report job 101" out || { cat out; fail "the retry did not submit"; }
[ "$(keys | wc -l)" -ge 1 ] || fail "no key after a successful submit"

# 2. The existing sweep, --resume, sbatch refuses: nothing changes.
listing > before
keys > keys.before
if submit refuse --resume > out 2>&1; then fail "--resume with a refusing sbatch succeeded"; fi
grep -q "existed before this submit and is left as it was" out || { cat out; fail "no message for the existing sweep"; }
listing > after
diff before after || fail "a failed --resume submit changed the sweep directory"
keys | diff keys.before - || fail "a failed --resume submit changed the keys"

# 3. No sbatch at all (a login node without Slurm).
rm -rf runs "$XDG_CONFIG_HOME"
if PATH="$work/none" "$wbaudit" submit "$src/examples/tiny.toml" --out runs/s --time 10 > out 2>&1; then
  fail "submit without sbatch succeeded"
fi
grep -q "removed what it made" out || { cat out; fail "no roll-back without sbatch"; }
[ ! -e runs/s ] && [ -z "$(keys)" ] || fail "submit without sbatch left files behind"

# 4. The cells job accepted, the report job refused: the sweep stays, the message names the queued job.
if submit half > out 2>&1; then fail "submit with a refused report job succeeded"; fi
grep -q "the cells job 202 was submitted" out || { cat out; fail "the accepted cells job is not named"; }
[ -f runs/s/slurm/submit-1/jobs.json ] && grep -q '"cells_job_id": "202"' runs/s/slurm/submit-1/jobs.json \
  || fail "the accepted cells job's record was removed"
echo "PASS"
