#!/usr/bin/env python3
"""wbaudit's command-line tools on 124M-parameter traces (issue 32): time and peak memory of `grid`, `audit`,
`import` and `evaluate` on the traces of a GPT-2-small-shaped model, and `audit`'s speed against reading the file.

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 /usr/bin/python3 bench/python/gpt2_tools_bench.py \\
        build/release/cli/wbaudit [--ref-steps 5] [--target-steps 2] [--dir DIR]

It writes, in DIR (default: a temporary directory, removed at the end):
  ref/trace.h5     ReferenceRecorder(e4m3, e5m2, bf16) recording every one of --ref-steps AdamW steps
  e4m3/trace.h5    PersistentNative(AdamW, e4m3, nearest) for --target-steps steps, and e4m3/traj.h5 its trajectory
                   (w, u, w_next of every parameter at every step: 12 bytes per parameter per step)
then runs each tool under /usr/bin/time (wall seconds, peak RSS) and prints one table. `audit`'s read speed is the
file's bytes over its wall time, against the same bytes read by h5py (dataset by dataset, warm page cache: both run
after the file was written and read once). The model is bench/python/gpt2_model.py's (12 layers, width 768, context
128, tied head: 123,751,680 parameters at --layers 12).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402
from wbaudit.torch import PersistentNative, ReferenceRecorder  # noqa: E402

VOCAB, CTX = 50257, 128


def train(args, opt_of, steps, closer):
    torch.manual_seed(args.seed)
    model = gpt2_model.GPT2(vocab=VOCAB, d=768, layers=args.layers, heads=12, ctx=CTX)
    opt, step = opt_of(model)
    for s in range(steps):
        g = torch.Generator().manual_seed(1000 + s)
        x = torch.randint(0, VOCAB, (1, CTX + 1), generator=g)
        loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        step(loss.item())
    return closer(), sum(p.numel() for p in model.parameters())


def reference(args, path):
    holder = {}

    def opt_of(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        rec = ReferenceRecorder(model, formats=["e4m3", "e5m2", "bf16"], steps=args.ref_steps, path=path, seed=1)
        holder["rec"] = rec

        def step(loss):
            with rec.step(loss=loss):
                opt.step()
        return opt, step
    return train(args, opt_of, args.ref_steps, lambda: holder["rec"].close())


def target(args, path, traj):
    holder = {}

    def opt_of(model):
        pn = PersistentNative(torch.optim.AdamW(model.parameters(), lr=1e-4), formats="e4m3", model=model, path=path,
                              trajectory=traj, seed=1, steps=args.target_steps)
        holder["pn"] = pn
        return pn, lambda loss: pn.step(loss=loss)
    return train(args, opt_of, args.target_steps, lambda: holder["pn"].close())


def timed(cmd):
    """(wall seconds, peak RSS in MB, stdout) of a command under /usr/bin/time."""
    r = subprocess.run(["/usr/bin/time", "-f", "WBTIME %e %M", *cmd], capture_output=True, text=True)
    if r.returncode not in (0, 2):  # audit exits 2 when inconsistent, which is a result here
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    m = re.search(r"WBTIME ([0-9.]+) ([0-9]+)", r.stderr)
    return float(m.group(1)), int(m.group(2)) / 1024, r.stdout


def h5_read_seconds(path):
    t0 = time.perf_counter()
    n = 0
    with h5py.File(path, "r") as f:
        def visit(_, obj):
            nonlocal n
            if isinstance(obj, h5py.Dataset):
                n += obj[()].nbytes
        f.visititems(visit)
    return time.perf_counter() - t0, n


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("wbaudit")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--ref-steps", type=int, default=5)
    p.add_argument("--target-steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dir")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    keep = args.dir is not None
    d = args.dir or tempfile.mkdtemp(prefix="wbaudit_gpt2_tools_")
    os.makedirs(d, exist_ok=True)
    ref, params = reference(args, os.path.join(d, "ref", "trace.h5"))
    tgt, _ = target(args, os.path.join(d, "e4m3", "trace.h5"), os.path.join(d, "e4m3", "traj.h5"))
    traj = os.path.join(d, "e4m3", "traj.h5")
    rows = []
    w, m, _ = timed([args.wbaudit, "grid", ref, "--formats", "e4m3,e5m2,bf16", "--lr-scales", "0.25,0.5,1,2,4",
                     "-o", os.path.join(d, "grid"), "--no-figure"])
    rows.append(("grid (3 formats x 5 scales)", w, m, os.path.getsize(ref)))
    h5_read_seconds(traj)  # warm the page cache once, as audit will find it
    read_s, read_bytes = h5_read_seconds(traj)
    w, m, out = timed([args.wbaudit, "audit", traj, "--out", os.path.join(d, "audit")])
    rows.append(("audit (e4m3 nearest trajectory)", w, m, os.path.getsize(traj)))
    runs = os.path.join(d, "runs")
    w, m, _ = timed([args.wbaudit, "import", runs, ref, tgt, "--name", "ref", "--name", "e4m3"])
    rows.append(("import (reference + target)", w, m, os.path.getsize(ref) + os.path.getsize(tgt)))
    analysis = os.path.join(d, "a.toml")
    with open(analysis, "w") as f:
        f.write('[analysis]\npredictors = ["source", "common-time"]\nbaselines = ["common-time"]\n'
                '[bootstrap]\nresamples = 200\nmethod = "percentile"\n')
    w, m, _ = timed([args.wbaudit, "evaluate", runs, "--analysis", analysis, "--out", os.path.join(d, "eval"),
                     "--no-figures"])
    rows.append(("evaluate (source, common-time)", w, m, os.path.getsize(ref) + os.path.getsize(tgt)))
    print(f"model: {params:,} parameters; reference {args.ref_steps} recorded steps, target {args.target_steps} steps")
    print(f"| tool | wall (s) | peak RSS (MB) | input (MB) |")
    print(f"|---|---:|---:|---:|")
    for name, wall, mb, size in rows:
        print(f"| {name} | {wall:.2f} | {mb:.0f} | {size / 1e6:.1f} |")
    audit_s = rows[1][1]
    print(f"audit: {read_bytes / 1e6:.0f} MB of trajectory data in {audit_s:.2f} s wall "
          f"({read_bytes / 1e6 / audit_s:.0f} MB/s); h5py reads the same datasets in {read_s:.2f} s "
          f"({read_bytes / 1e6 / read_s:.0f} MB/s): audit at {read_s / audit_s:.2f}x the read speed")
    print("audit output:", " | ".join(line.strip() for line in out.splitlines()[:3]))
    if not keep:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
