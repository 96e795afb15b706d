#!/usr/bin/env bash
# End to end: `wbaudit run examples/blocks_tiny.toml` (e4m3, mxfp4_e2m1, mxfp4_e2m1:rceil and nvfp4 targets) runs,
# scores every target cell, and the traces hold the block events where they belong: each block-format target group
# has block_events whose causes sum to erased and whose collateral/flushed/rescaled counts are within their bounds; the
# references project the block formats with their causes; the e4m3 target and the e4m3 projections have none. The same
# traces at 1 and 2 threads (h5diff).
set -euo pipefail
wbaudit=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$wbaudit" run "$src/examples/blocks_tiny.toml" --out "$work/s1" --kokkos-threads=1 --quiet > "$work/log" 2>&1 ||
  { cat "$work/log"; fail "run at 1 thread"; }
"$wbaudit" run "$src/examples/blocks_tiny.toml" --out "$work/s2" --kokkos-threads=2 --jobs 1 --quiet > /dev/null 2>&1 ||
  fail "run at 2 threads"
# 4 targets x 2 evaluation groups, plus the header.
rows=$(wc -l < "$work/s1/summary.csv")
[ "$rows" -eq 9 ] || fail "summary.csv has $rows lines, expected 9"
for f in mxfp4_e2m1 'mxfp4_e2m1:rceil' nvfp4; do
  grep -q "format=$f/layer1.weight,.*,$f,nearest," "$work/s1/summary.csv" || fail "no scored cell for $f"
done
for t1 in "$work"/s1/cells/*/attempts/*/trace.h5; do
  cell=$(basename "$(dirname "$(dirname "$(dirname "$t1")")")")
  h5diff -q "$t1" "$(ls "$work"/s2/cells/"$cell"/attempts/*/trace.h5)" || fail "cell $cell differs between 1 and 2 threads"
done
/usr/bin/python3 - "$work/s1" <<'PY' || fail "block events in the traces"
import glob, sys
import h5py
BLOCK = ("mxfp4_e2m1", "mxfp4_e2m1:rceil", "nvfp4")
seen = set()
for path in glob.glob(sys.argv[1] + "/cells/*/attempts/*/trace.h5"):
    with h5py.File(path) as h:
        mode, fmt = h.attrs["mode"], h.attrs["format"]
        for name, g in h["groups"].items():
            if mode == "target":
                if fmt not in BLOCK:
                    assert "block_events" not in g, (path, name)
                    continue
                b = g["block_events"]
                assert b.attrs["format"] == fmt, (fmt, b.attrs["format"])
                erased, nonzero, size = g["erased"][:], g["nonzero"][:], g.attrs["size"]
                causes = b["erased_grid"][:] + b["erased_saturation"][:] + b["erased_scale"][:]
                assert (causes == erased).all(), (path, name, causes, erased)
                assert (b["flushed"][:] <= b["collateral"][:]).all()
                assert (b["collateral"][:] <= size - nonzero).all()
                assert (b["rescaled_up"][:] + b["rescaled_down"][:] <= b.attrs["blocks"]).all()
                seen.add(("target", fmt))
            else:
                for f, p in g["projected"].items():
                    if f in BLOCK:
                        e = p["block_events"]
                        causes = e["erased_grid"][:] + e["erased_saturation"][:] + e["erased_scale"][:]
                        assert (causes == p["erased"][:]).all(), (path, name, f)
                        seen.add(("reference", f))
                    else:
                        assert "block_events" not in p, (path, name, f)
assert seen == {(m, f) for m in ("target", "reference") for f in BLOCK}, seen
PY
echo "block sweep: ok"
