#!/usr/bin/python3
"""The analytic grid against the exact projection on a real AdamW GPT run (docs/forecasting.md, "Accuracy").

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/grid_validation.py train OUT [--d 256 ...]
    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/grid_validation.py compare OUT WBAUDIT

`train` trains bench/python/gpt2_model.py's GPT-2-shaped model (byte-level, AdamW with warm-up and cosine decay, weight
decay 0.1) with wbaudit.torch.ReferenceRecorder on a log schedule, and at every recorded step also dumps each
parameter's w (before the step) and u (the step's proposal) to OUT/dump/step_<t>.npz, with the initialization's absmax
per parameter (the intK scales).

`compare` counts, on those dumps, the exact projection at every format F and learning-rate scale s: #{u != 0 and
q_F(q_F(w) + fl32(s u)) == q_F(w)} / #{u != 0}, with wbaudit's own exact scalar write-back (sim/precision through
wbaudit.round / wbaudit.writeback; the grid never calls it), and prints max / RMS of analytic minus exact over every
tensor and recorded step, per format and scale, for `wbaudit grid OUT/reference/trace.h5` (WBAUDIT: the binary).
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402

FORMATS = ["bf16", "fp16", "e5m2", "e4m3", "e3m2", "e2m3", "e2m1", "int4", "int8"]
SCALES = [0.25, 0.3, 0.5, 0.7, 1.0, 1.3, 1.7, 2.0, 3.0, 4.0]


def train(args):
    import wbaudit
    from wbaudit.torch import ReferenceRecorder
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = gpt2_model.GPT2(vocab=256, d=args.d, layers=args.layers, heads=args.heads, ctx=args.ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    steps = wbaudit._core.recorded_steps("log", args.steps, 10, args.points)
    os.makedirs(os.path.join(args.out, "dump"), exist_ok=True)
    absmax = {n: float(p.detach().abs().max()) for n, p in model.named_parameters()}
    with open(os.path.join(args.out, "dump", "init_absmax.json"), "w") as f:
        json.dump(absmax, f)
    rec = ReferenceRecorder(model, formats=["bf16", "e4m3"], schedule=steps, steps=args.steps,
                            path=os.path.join(args.out, "reference", "trace.h5"))
    data = gpt2_model.byte_text()
    for step, (x, y) in enumerate(gpt2_model.batches(data, args.steps, args.batch, args.ctx, args.seed)):
        lr = args.lr * min(1.0, (step + 1) / 10) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        opt.zero_grad()
        loss.backward()
        record = step in steps
        before = {n: p.detach().clone() for n, p in model.named_parameters()} if record else None
        with rec.step(loss=loss.item(), lr=lr):
            opt.step()
        if record:
            arrays = {}
            for n, p in model.named_parameters():
                arrays["w/" + n] = before[n].numpy().reshape(-1)
                arrays["u/" + n] = (p.detach() - before[n]).numpy().reshape(-1)
            np.savez(os.path.join(args.out, "dump", f"step_{step}.npz"), **arrays)
            print(f"step {step} loss {loss.item():.3f} lr {lr:.3g}", flush=True)
    rec.close()


def exact_fraction(w, u, fmt, scale_k, s):
    import wbaudit
    wq = wbaudit.round(w, fmt, scale=scale_k)
    us = (np.float64(s) * u.astype(np.float64)).astype(np.float32)
    _, c = wbaudit._core.writeback(wq, us, fmt, "nearest", 0, 0, 0, 0, scale_k)
    nz = int(np.count_nonzero(u))
    # erased counts u != 0 whose scaled value is still nonzero; a proposal that underflows to 0 when scaled is
    # erased too (q(q(w) + 0) == q(w)), as the trace's projection counts it
    underflow = int(np.count_nonzero((u != 0) & (us == 0)))
    return (c["erased"] + underflow) / nz if nz else float("nan")


def compare(args):
    import wbaudit
    out = args.out
    trace = os.path.join(out, "reference", "trace.h5")
    with open(os.path.join(out, "dump", "init_absmax.json")) as f:
        absmax = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.wbaudit, "grid", trace, "--formats", ",".join(FORMATS), "--lr-scales",
                        ",".join(str(s) for s in SCALES), "--step", "all", "-o", tmp, "--no-figure"], check=True,
                       stdout=subprocess.DEVNULL)
        grid = {}
        with open(os.path.join(tmp, "grid.csv")) as f:
            for row in csv.DictReader(f):
                grid[(row["group"], row["format"], float(row["lr_scale"]), int(row["step"]))] = \
                    float(row["erased_fraction"])
    diffs = {}
    worst = {}
    steps = sorted(int(n[5:-4]) for n in os.listdir(os.path.join(out, "dump")) if n.startswith("step_"))
    for t in steps:
        z = np.load(os.path.join(out, "dump", f"step_{t}.npz"))
        for key in z.files:
            if not key.startswith("w/"):
                continue
            name = key[2:]
            w, u = z["w/" + name], z["u/" + name]
            if w.size <= args.min_size:
                continue
            for fmt in FORMATS:
                k = int(fmt[3:]) if fmt.startswith("int") else None
                scale_k = wbaudit.int_scale_for_absmax(k, absmax[name]) if k else None
                for s in SCALES:
                    e = exact_fraction(w, u, fmt, scale_k, s)
                    a = grid.get((name, fmt, s, t), float("nan"))
                    if math.isnan(e) and math.isnan(a):
                        continue
                    d = a - e
                    diffs.setdefault((fmt, s), []).append(d)
                    if abs(d) > abs(worst.get((fmt, s), (0,))[0]):
                        worst[(fmt, s)] = (d, name, t, e)
    print("format | " + " | ".join(f"s={s}" for s in SCALES))
    for fmt in FORMATS:
        cells = []
        for s in SCALES:
            v = diffs.get((fmt, s), [])
            cells.append(f"{max(abs(x) for x in v):.1e}" if v else "-")
        print(f"{fmt} | " + " | ".join(cells))
    print("worst per format:")
    for fmt in FORMATS:
        cand = [worst[(fmt, s)] + (s,) for s in SCALES if (fmt, s) in worst]
        if cand:
            d, name, t, e, s = max(cand, key=lambda c: abs(c[0]))
            print(f"  {fmt}: {d:+.2e} at s={s} {name} step {t} (exact {e:.4f})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "compare"])
    p.add_argument("out")
    p.add_argument("wbaudit", nargs="?")
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--points", type=int, default=12)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-size", type=int, default=1024, help="only tensors above this size (the histogram path)")
    args = p.parse_args()
    train(args) if args.what == "train" else compare(args)


if __name__ == "__main__":
    main()
