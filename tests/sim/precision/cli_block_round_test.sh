#!/usr/bin/env bash
# `wbaudit formats` and `wbaudit round` with block-scaled formats (issue 29), against outcomes derived by hand below
# from the definitions in docs/formats.md ("Block-scaled formats"); bad input refused naming what is wrong.
set -euo pipefail
wbaudit=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect FILE REGEX WHAT: an extended regex that must match a line of FILE.
expect() { grep -Eq -- "$2" "$1" || { cat "$1" >&2; fail "$3: expected /$2/"; }; }

# ---- formats: the block table, with the OCP MX parameters (element max, 32-element blocks) and NVFP4's 16 ----
"$wbaudit" formats > "$work/f" || fail "formats"
expect "$work/f" "^mxfp8_e4m3 +mx +e4m3 +8 +448 +32 along rows +floor" "mxfp8_e4m3 row"
expect "$work/f" "^mxfp4_e2m1:rceil +mx +e2m1 +4 +6 +32 along rows +rceil" "mxfp4_e2m1:rceil row"
expect "$work/f" "^mxint8 +mx +int8 +8 +1.984375 +32 along rows +floor" "mxint8 row (127 * 2^-6)"
expect "$work/f" "^nvfp4 +nvfp4 +e2m1 +4 +6 +16 along rows" "nvfp4 row"
expect "$work/f" "^nvfp4:2d +nvfp4 +e2m1 +4 +6 +16x16 tiles" "nvfp4:2d row"
"$wbaudit" formats --json > "$work/fj" || fail "formats --json"
/usr/bin/python3 - "$work/fj" <<'PY' || fail "formats --json block_formats"
import json, sys
j = json.load(open(sys.argv[1]))
names = [b["name"] for b in j["block_formats"]]
want = [f"{b}{o}" for o in ("", ":rceil") for b in
        ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "mxint8")] + ["nvfp4", "nvfp4:2d"]
assert names == want, names
e = {b["name"]: b for b in j["block_formats"]}
assert e["mxfp8_e5m2"]["max_elem"] == 57344 and e["mxfp8_e5m2"]["emax_elem"] == 15
assert e["mxfp6_e3m2"]["max_elem"] == 28 and e["mxfp6_e2m3"]["max_elem"] == 7.5
PY

# ---- (a) saturation erasure, floor, E2M1. w = [6, 1.5 x 31]: amax 6, E = floor(log2 6) - emax_elem(2) = 0, X = 1
# (E8M0 0x7f), every element on the grid. u_0 in {0.01, 0.5, 1}: v_0 < 8 keeps E = 0; v_0 / X > 6 saturates to 6 = w_0
# (w_0 is the block's max and u points outward): erased by saturation, nothing else moves.
for u0 in 0.01 0.5 1; do
  "$wbaudit" round --format mxfp4_e2m1 --row "6 1.5*31" --update "$u0 0*31" > "$work/a" || fail "(a) u0=$u0"
  expect "$work/a" "^block 0 \(row 0, columns 0\.\.31\): X = 2\^0 \(E8M0 0x7f\) -> X = 2\^0 \(E8M0 0x7f\) \(unchanged\)" "(a) scale, u0=$u0"
  expect "$work/a" "^0 +0 +0 +6 +6 +[0-9.e-]+ +6 +erased:saturation,saturated$" "(a) w_0 erased, u0=$u0"
  expect "$work/a" "^events: nonzero 1, erased 1 \(grid 0, saturation 1, scale 0\), applied 0, collateral 0 \(flushed 0\)" "(a) counts, u0=$u0"
  [ "$(grep -c ' unchanged$' "$work/a")" -eq 31 ] || { cat "$work/a"; fail "(a) the 31 others unchanged, u0=$u0"; }
done
# u_0 = 2: v_0 = 8, E = 3 - 2 = 1, X = 2 (0x80): 8 / 2 = 4 on the grid, w_0 -> 8 (applied); 1.5 / 2 = 0.75 is the tie
# between 0.5 (code 1) and 1 (code 2, even) -> 1, decoded 2: the 31 others move (collateral, not flushed).
"$wbaudit" round --format mxfp4_e2m1 --row "6 1.5*31" --update "2 0*31" > "$work/a2" || fail "(a) u0=2"
expect "$work/a2" "X = 2\^0 \(E8M0 0x7f\) -> X = 2\^1 \(E8M0 0x80\) \(rescaled up\)" "(a) u0=2 rescale"
expect "$work/a2" "^0 +0 +0 +6 +6 +2 +8 +applied$" "(a) u0=2 applied"
expect "$work/a2" "^1 +0 +1 +1.5 +1.5 +0 +2 +collateral$" "(a) u0=2 collateral"
expect "$work/a2" "applied 1, collateral 31 \(flushed 0\), saturated 0; blocks 1, rescaled up 1, rescaled down 0" "(a) u0=2 counts"

# ---- (b) scale-induced flush, floor. w = [3, 0.25 x 31]: E = floor(log2 3) - 2 = -1, X = 0.5 (0x7e); 3 / X = 6 and
# 0.25 / X = 0.5 on the grid. u_0 = 0.9 (fp32 0.899999976): v_0 = 3.9, E stays -1, 7.8 saturates -> w_0 = 3: erased
# (saturation), nothing moves. u_0 = 1: v_0 = 4, E = 0, X = 1: w_0 -> 4; 0.25 / 1 is the tie between 0 (even) and
# 0.5 -> 0: all 31 others flush to zero.
"$wbaudit" round --format mxfp4_e2m1 --row "3 0.25*31" --update "0.9 0*31" > "$work/b1" || fail "(b) u0=0.9"
expect "$work/b1" "X = 2\^-1 \(E8M0 0x7e\) -> X = 2\^-1 \(E8M0 0x7e\) \(unchanged\)" "(b) u0=0.9 scale"
expect "$work/b1" "nonzero 1, erased 1 \(grid 0, saturation 1, scale 0\), applied 0, collateral 0 \(flushed 0\)" "(b) u0=0.9 counts"
expect "$work/b1" "\[--update rounded to fp32\]" "(b) 0.9 is not an fp32 value"
"$wbaudit" round --format mxfp4_e2m1 --row "3 0.25*31" --update "1 0*31" > "$work/b2" || fail "(b) u0=1"
expect "$work/b2" "X = 2\^-1 \(E8M0 0x7e\) -> X = 2\^0 \(E8M0 0x7f\) \(rescaled up\)" "(b) u0=1 scale"
expect "$work/b2" "^0 +0 +0 +3 +3 +1 +4 +applied$" "(b) w_0 -> 4"
expect "$work/b2" "^31 +0 +31 +0.25 +0.25 +0 +0 +collateral:flushed$" "(b) last element flushed"
expect "$work/b2" "nonzero 1, erased 0 \(grid 0, saturation 0, scale 0\), applied 1, collateral 31 \(flushed 31\)" "(b) u0=1 counts"
# The same through a file of rows (two rows: two independent blocks), JSON counts.
printf '# two rows\n3 0.25*31\n6, 1.5*31\n' > "$work/rows.txt"
"$wbaudit" round --format mxfp4_e2m1 --update "1 0*31 0.01 0*31" --json "$work/rows.txt" > "$work/bj" || fail "(b) file"
/usr/bin/python3 - "$work/bj" <<'PY' || fail "(b) file of rows, json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["shape"] == [2, 32], j["shape"]
c = j["counts"]
# row 0: example (b) u0 = 1 (applied, 31 flushed, rescaled up); row 1: example (a) u0 = 0.01 (erased by saturation)
want = dict(nonzero=2, erased=1, erased_grid=0, erased_saturation=1, erased_scale=0, applied=1, collateral=31,
            flushed=31, blocks=2, rescaled_up=1, rescaled_down=0)
for k, v in want.items():
    assert c[k] == v, (k, c[k], v)
assert j["blocks"][0]["scale"]["exponent"] == -1 and j["blocks"][0]["scale_after"]["exponent"] == 0
assert j["values"][32]["event"] == "erased:saturation"
PY

# ---- (c) rceil: the smallest X with amax / X <= 6. w = [6, 1.5 x 31]: X = 1. u_0 = 2^-20 outward: amax > 6 makes
# X = 2; 6.00000095 / 2 rounds to 3 -> w_0 stays 6 (erased by the scale change) while 1.5 / 2 = 0.75 -> 1 -> 2
# (31 collateral moves).
"$wbaudit" round --format mxfp4_e2m1:rceil --row "6 1.5*31" --update "0x1p-20 0*31" > "$work/c" || fail "(c)"
expect "$work/c" "X = 2\^0 \(E8M0 0x7f\) -> X = 2\^1 \(E8M0 0x80\) \(rescaled up\)" "(c) scale"
expect "$work/c" "^0 +0 +0 +6 +6 +9.536743e-07 +6 +erased:scale$" "(c) erased by the scale"
expect "$work/c" "nonzero 1, erased 1 \(grid 0, saturation 0, scale 1\), applied 0, collateral 31 \(flushed 0\)" "(c) counts"
# The floor rule keeps X = 1 there (E = floor(log2 6.00000095) - 2 = 0) and erases w_0 by saturation.
"$wbaudit" round --format mxfp4_e2m1 --row "6 1.5*31" --update "0x1p-20 0*31" > "$work/c2" || fail "(c) floor"
expect "$work/c2" "erased 1 \(grid 0, saturation 1, scale 0\), applied 0, collateral 0" "(c) floor counts"
# A grid erasure: w = [6, 1.5 x 31], u_1 = 0.2: 1.7 rounds back to 1.5 (gap 0.5 at X = 1).
"$wbaudit" round --format mxfp4_e2m1 --row "6 1.5*31" --update "0 0.2 0*30" > "$work/g" || fail "grid"
expect "$work/g" "erased 1 \(grid 1, saturation 0, scale 0\)" "grid erasure"
# skip_unchanged_blocks: a block whose u is all zero is left as it is and counted as skipped.
"$wbaudit" round --format mxfp4_e2m1:skip_unchanged_blocks --row "6 1.5*31" --row "3 0.25*31" --update "0*32 0*32" \
  > "$work/s" || fail "skip"
expect "$work/s" "blocks 2, rescaled up 0, rescaled down 0, skipped 2" "skip_unchanged_blocks"

# ---- NVFP4: amax_t = 6 gives S_enc = 2688 / 6 = 448 and s_b = RNE_e4m3(6 * 448 / 6) = 448, so elements decode to
# their E2M1 values: 1.25 -> 1 and 0.75 -> 1 (ties to the even code 2), 5 -> 4 (tie between codes 6 and 7).
"$wbaudit" round --format nvfp4 --row "6 1.25 0.75 5 0*12" > "$work/n" || fail "nvfp4"
expect "$work/n" "s_b = 448, S_enc = 448" "nvfp4 scales"
expect "$work/n" "^1 +0 +1 +1.25 +1 *$" "nvfp4 1.25"
expect "$work/n" "^2 +0 +2 +0.75 +1 *$" "nvfp4 0.75"
expect "$work/n" "^3 +0 +3 +5 +4 *$" "nvfp4 5"

# ---- bad input: exit status != 0, the reason on stderr, nothing on stdout ----
refused() {  # refused REGEX WHAT ARGS...
  local regex=$1 what=$2
  shift 2
  if "$wbaudit" "$@" > "$work/o" 2> "$work/e"; then fail "$what: accepted"; fi
  [ ! -s "$work/o" ] || fail "$what: wrote to stdout"
  expect "$work/e" "$regex" "$what"
}
refused 'unknown scale rule "ceil" \(known: floor, rceil\)' "unknown rule" round --format mxfp4_e2m1:ceil --row 1
refused 'unknown option "3d" \(known: 2d\)' "unknown nvfp4 option" round --format nvfp4:3d --row 1
refused 'e4m3 is a per-tensor format and takes no options' "option on a per-tensor format" \
  round --format e4m3:skip_unchanged_blocks --row 1
refused 'unknown format "mxfp5" \(known: fp32.*mxfp8_e4m3' "unknown format" round --format mxfp5 --row 1
refused -- '--row 2: 3 values; the tensor.s rows have 2' "ragged rows" round --format mxfp8_e4m3 --row "1 2" --row "1 2 3"
refused -- '--update has 2 values; the tensor has 3' "update length" round --format mxfp8_e4m3 --row "1 2 3" --update "1 2"
refused 'non-finite value "nan"' "NaN input" round --format mxfp8_e4m3 --row "1 nan"
# v = w + u = 2^129 (exact): MXINT8's floor exponent 128 - 0 leaves E8M0; MXFP4's 2^126 * 6 would decode beyond fp32.
refused 'block 0 \(row 0, columns 0\.\.1\).*E8M0|block 0 \(row 0, columns 0\.\.1\).*127' "E8M0 range" \
  round --format mxint8 --row "0x1p127 0" --update "0x1p127 0"
refused 'block 0 \(row 0, columns 0\.\.1\)' "beyond fp32" round --format mxfp4_e2m1 --row "0x1p127 0" --update "0x1p127 0"
echo "cli block round: ok"
