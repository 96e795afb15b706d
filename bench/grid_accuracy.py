#!/usr/bin/python3
"""The analytic grid's accuracy on real traces (docs/forecasting.md): `wbaudit grid` at s = 1 minus the exact
projected/<format>/fraction of every reference trace of a sweep directory; max |difference| and RMS per format over
every group x recorded step, and again over the groups of >= 64 coordinates (the evaluation's min_group_size).

Usage: /usr/bin/python3 bench/grid_accuracy.py WBAUDIT SWEEP_DIR FORMATS
(FORMATS comma-separated; the references must project them, e.g. a spec with [reference] project_formats = [...]).
"""
import csv
import glob
import math
import os
import subprocess
import sys
import tempfile

import h5py

MIN_GROUP_SIZE = 64


def stat(v):
    if not v:
        return "0 | - | -"
    return f"{len(v)} | {max(abs(x) for x in v):.2g} | {math.sqrt(sum(x * x for x in v) / len(v)):.2g}"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    wbaudit, sweep, formats = sys.argv[1], sys.argv[2], sys.argv[3]
    every = {f: [] for f in formats.split(",")}
    large = {f: [] for f in every}
    references = 0
    for trace in sorted(glob.glob(os.path.join(sweep, "cells/*/attempts/*/trace.h5"))):
        with h5py.File(trace, "r") as h:
            if h.attrs.get("mode", b"") not in ("reference", b"reference"):
                continue
            size = {g: int(h[f"groups/{g}"].attrs["size"]) for g in h["groups"]}
            exact = {}
            for g in h["groups"]:
                for f in every:
                    key = f"groups/{g}/projected/{f}/fraction"
                    if key not in h:
                        sys.exit(f"{trace}: group {g} does not project {f}")
                    exact[(g, f)] = h[key][()]
            steps = {int(s): i for i, s in enumerate(h["recorded_steps"][()])}
        references += 1
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([wbaudit, "grid", trace, "--formats", formats, "--lr-scales", "1", "-o", out,
                            "--no-figure"], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(out, "grid.csv")) as f:
                for row in csv.DictReader(f):
                    e = exact[(row["group"], row["format"])][steps[int(row["step"])]]
                    a = float(row["erased_fraction"])
                    if math.isnan(e) and math.isnan(a):
                        continue
                    every[row["format"]].append(a - e)
                    if size[row["group"]] >= MIN_GROUP_SIZE:
                        large[row["format"]].append(a - e)
    print(f"{references} reference traces in {sweep}")
    print(f"| format | points | max abs | RMS | points (groups >= {MIN_GROUP_SIZE}) | max abs | RMS |")
    print("|---|---|---|---|---|---|---|")
    for f in every:
        print(f"| {f} | {stat(every[f])} | {stat(large[f])} |")


if __name__ == "__main__":
    main()
