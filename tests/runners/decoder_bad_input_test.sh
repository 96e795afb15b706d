#!/usr/bin/env bash
# Bad decoder input through `wbaudit run` (issue 11): a spec value the model cannot take (heads not dividing the
# width, rotary_fraction out of [0, 1]) is refused before anything is created, naming file:line and the value; a
# text file that is empty or shorter than one sequence, and a run whose loss goes NaN, fail their cells with the
# reason named (file, step), exit non-zero, and leave every completed cell's trace as it was.
set -euo pipefail
wbaudit=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
spec=$src/tests/mpi/decoder_sweep.toml

# Refused at spec time: exit 1, file:line and the value named, no sweep directory.
check_refused() {  # name, sed program, expected message
  sed "$2" "$spec" > "$work/$1.toml"
  set +e
  "$wbaudit" run "$work/$1.toml" --out "$work/$1" -q 2> "$work/$1.err"
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] || { cat "$work/$1.err"; fail "$1: exit $rc, expected 1"; }
  grep -q "$3" "$work/$1.err" || { cat "$work/$1.err"; fail "$1: message does not say: $3"; }
  [ ! -e "$work/$1" ] || fail "$1: the refused spec created its output directory"
}
check_refused heads 's/^heads = 2/heads = 3/' "heads.toml:11: model.heads: 3 heads do not divide width 16"
sed -n 11p "$spec" | grep -q '^heads = 2' || fail "the test's line number assumes heads on line 11 of $spec"
check_refused rotary 's/^init_std = 0.1/init_std = 0.1\nrotary_fraction = 1.5/' \
  "model.rotary_fraction: must be in \[0, 1\], got 1.5"

# Fail at run time: exit 3 (cells failed), the reason per cell names the file or the step; `status` lists it.
text_spec() {  # file, seq_len
  sed "s|^source = \"markov\"|source = \"text\"\npath = \"$1\"|; s/^vocab = 16/vocab = 256/; s/^markov_order = 1//; s/^seq_len = 8/seq_len = $2/" "$spec"
}
check_failed() {  # name, expected reason
  set +e
  "$wbaudit" run "$work/$1.toml" --out "$work/$1" 2> "$work/$1.err"
  local rc=$?
  set -e
  [ "$rc" -eq 3 ] || { cat "$work/$1.err"; fail "$1: exit $rc, expected 3"; }
  grep -q "reason: .*$2" "$work/$1.err" || { cat "$work/$1.err"; fail "$1: no reason saying: $2"; }
  "$wbaudit" status "$work/$1" > "$work/$1.status" 2>&1 || true
  grep -q "failed: .*$2" "$work/$1.status" || { cat "$work/$1.status"; fail "$1: status does not list: $2"; }
}
: > "$work/empty.txt"
text_spec "$work/empty.txt" 8 > "$work/empty.toml"
check_failed empty "data.path: $work/empty.txt: the file is empty"
head -c 300 "$spec" > "$work/short.txt"  # 300 bytes: 30 held out, far below one window
text_spec "$work/short.txt" 4096 > "$work/short.toml"
check_failed short "short.txt: the held-out part has 30 bytes, fewer than one window of seq_len + 1 = 4097"

# One learning rate diverges, the other does not: the diverging cells fail naming the step, the others complete, and
# --resume retries only the failed ones, leaving the completed traces byte for byte.
sed 's/^kind = "adam"/kind = "sgd"/; s/^"target.policy" = .*/"optimizer.lr" = [0.01, 1e30]/; s/^seed = \[1, 2\]/seed = [1]/' \
  "$spec" > "$work/nan.toml"
check_failed nan "run_cell: training loss is -\?nan at step 1"
good=$(find "$work/nan/cells" -name trace.h5 | sort)
[ "$(echo "$good" | grep -c .)" -eq 2 ] || fail "expected the 2 cells at lr 0.01 complete, found: $good"
sums=$(sha256sum $good)
set +e
"$wbaudit" run "$work/nan.toml" --out "$work/nan" --resume -q 2> "$work/nan.resume.err"
rc=$?
set -e
[ "$rc" -eq 3 ] || { cat "$work/nan.resume.err"; fail "resume of the diverging sweep: exit $rc, expected 3"; }
[ "$sums" = "$(sha256sum $good)" ] || fail "a completed trace changed when the failed cells were retried"
echo "decoder_bad_input_test: all checks passed"
