#!/usr/bin/python3
"""The analytic grid's accuracy on a Python-recorded GPT reference (issue 32; docs/forecasting.md, "Accuracy").

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 nice /usr/bin/python3 bench/python/gpt_grid_accuracy.py \
        --wbaudit build/release/cli/wbaudit [--optimizer adamw --lr 1e-3 --steps 300 --points 10 ...]

Trains bench/python/gpt2_model.py's GPT-2-shaped model (pre-LayerNorm blocks, fused qkv attention, 4x GELU MLP, head
tied to the token embedding; default 4 layers, width 128, 4 heads, vocabulary 2048, context 64, batch 8) on
byte-pair tokens of the licence texts Debian ships (the --vocab - 1 most frequent non-overlapping byte pairs, the rest
one "other" token), in fp32, with wbaudit.torch.ReferenceRecorder around optimizer.step() recording --points steps on
the simulator's log schedule. AdamW: betas (0.9, 0.95), weight decay 0.1 on the matrices and embeddings, none on
biases and LayerNorm gains; SGD: plain (no momentum, no weight decay). Learning rate: linear warm-up over the first
10 steps, then cosine decay to a tenth of --lr.

At every recorded step it keeps each parameter's w (before the step) and u = p_after - w (fp32 torch.sub, the
proposal the recorder takes) only long enough to count the brute-force projection for every format F and
learning-rate scale s:
    exact(F, s) = #{u != 0 and q_F(q_F(w) + fl32(s u)) == q_F(w)} / #{u != 0}
with q_F round to nearest (wbaudit.round / wbaudit.writeback, the exact scalar write-back of sim/precision, which
the margin histogram's grid does not use) and intK on the per-tensor scale the recorder uses (int_scale_for_absmax of
the parameter's absmax at construction). Then `wbaudit grid` on the closed trace, same formats and scales, every
recorded step; prints the worst |grid - exact| per format and scale over every group x recorded step, and over the
groups of >= 64 coordinates, where it happened, and whether issue 32's targets hold (0.002 bf16/fp16, 0.01 e5m2 ...
e2m1 and int4; int8 has none). The groups of at most 1024 coordinates keep w and u in the trace and are counted
exactly by the grid; the others are read from the margin histogram (the path measured here). Exit status 0 whether
or not the targets hold (this is a measurement); 2 if the u captured here differs from the one the recorder kept.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402

FORMATS = ["bf16", "fp16", "e5m2", "e4m3", "e3m2", "e2m3", "e2m1", "int4", "int8"]
SCALES = [0.25, 0.3, 0.5, 0.7, 1.0, 1.3, 1.7, 2.0, 3.0, 4.0]
TARGET = {"bf16": 0.002, "fp16": 0.002, "e5m2": 0.01, "e4m3": 0.01, "e3m2": 0.01, "e2m3": 0.01, "e2m1": 0.01,
          "int4": 0.01}
MIN_GROUP_SIZE = 64  # the evaluation's min_group_size


def byte_pair_tokens(vocab):
    """The licence texts as non-overlapping byte pairs, the vocab - 1 most frequent each a token, the rest token
    vocab - 1."""
    data = gpt2_model.byte_text()
    pairs = data[: len(data) // 2 * 2].view(-1, 2)
    ids = pairs[:, 0] * 256 + pairs[:, 1]
    counts = torch.bincount(ids, minlength=65536)
    order = torch.argsort(counts, descending=True, stable=True)
    table = torch.full((65536,), vocab - 1, dtype=torch.long)
    table[order[: vocab - 1]] = torch.arange(vocab - 1)
    return table[ids]


def batches(tokens, steps, batch, ctx, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(0, len(tokens) - ctx - 1, (batch,), generator=g)
        x = torch.stack([tokens[j:j + ctx + 1] for j in i])
        yield x[:, :-1], x[:, 1:]


def int_scale(fmt, absmax):
    import wbaudit
    return wbaudit.int_scale_for_absmax(int(fmt[3:]), absmax) if fmt.startswith("int") else None


def brute_force(w, u, absmax, formats, scales):
    """{(format, s): erased fraction} of one tensor's (w, u) (1-D float32), by the exact write-back of every
    coordinate: erased iff u != 0 and q_F(q_F(w) + fl32(s u)) == q_F(w). intK: undefined (absent) without a scale."""
    import wbaudit
    nonzero = u != 0
    n = int(np.count_nonzero(nonzero))
    u64 = u.astype(np.float64)
    scaled = [(s * u64).astype(np.float32) for s in scales]  # fl32(s u), as the C++ reference test forms it
    out = {}
    buf = np.empty_like(w)
    for f in formats:
        if f.startswith("int") and not (absmax > 0):
            continue
        k = int_scale(f, absmax)
        wq = wbaudit.round(w, f, scale=k)
        for s, us in zip(scales, scaled):
            w_next, _ = wbaudit.writeback(wq, us, f, "nearest", scale=k, out=buf)
            erased = int(np.count_nonzero(nonzero & (w_next == wq)))
            out[(f, s)] = erased / n if n else float("nan")
    return out


def train(args, trace_path):
    """Trains with the recorder writing trace_path; returns the brute-force record: {"exact": {"group|step|format|s":
    fraction}, "sizes", "recorded_steps", "loss", "seconds", "brute_force_seconds", "u_mismatches"} (the last: the
    groups the trace keeps whole whose kept u differs from the u captured here)."""
    import wbaudit
    from wbaudit.torch import ReferenceRecorder
    torch.manual_seed(args.seed)
    tokens = byte_pair_tokens(args.vocab)
    model = gpt2_model.GPT2(vocab=args.vocab, d=args.d, layers=args.layers, heads=args.heads, ctx=args.ctx)
    params = list(model.named_parameters())
    if args.optimizer == "adamw":
        decay = [p for _, p in params if p.dim() >= 2]
        no_decay = [p for _, p in params if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=args.lr, betas=(0.9, 0.95))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    recorded = [int(s) for s in wbaudit.recorded_steps("log", args.steps, 10, args.points)]
    absmax = {n: float(p.detach().abs().max()) for n, p in params}  # what the recorder reads at construction
    rec = ReferenceRecorder(model, formats=FORMATS, schedule=recorded, steps=args.steps, path=trace_path,
                            config={"bench": "gpt_grid_accuracy", "args": vars(args)})
    exact, kept_u, losses = {}, {}, {}
    brute_seconds = 0.0
    t0 = time.time()
    for step, (x, y) in enumerate(batches(tokens, args.steps, args.batch, args.ctx, args.seed)):
        lr = args.lr * min(1.0, (step + 1) / 10) * (0.1 + 0.45 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss = F.cross_entropy(model(x).view(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        record = step in recorded
        before = [p.detach().clone() for _, p in params] if record else None
        with rec.step(loss=loss.item(), lr=lr):
            opt.step()
        if record:
            t1 = time.time()
            for (name, p), w in zip(params, before):
                u = torch.sub(p.detach(), w)  # the recorder's proposal: p_after - w_before in fp32
                wf, uf = w.numpy().reshape(-1), u.numpy().reshape(-1)
                for (f, s), e in brute_force(wf, uf, absmax[name], FORMATS, SCALES).items():
                    exact[f"{name}|{step}|{f}|{s!r}"] = e
                if uf.size <= wbaudit._core.JOINT_EXACT_MAX:
                    kept_u[(name, step)] = uf.copy()
            brute_seconds += time.time() - t1
            losses[step] = loss.item()
            print(f"  step {step:4d}  loss {loss.item():.3f}  lr {lr:.3g}  ({time.time() - t0:.0f} s)", flush=True)
    rec.close()
    seconds = time.time() - t0
    trace = wbaudit.read_trace(trace_path)
    steps = [int(s) for s in trace["recorded_steps"]]
    mismatched = sum(not np.array_equal(trace["groups"][name]["joint"]["u"][steps.index(step)].reshape(-1), u)
                     for (name, step), u in kept_u.items())
    return {"args": vars(args), "exact": exact, "sizes": {n: p.numel() for n, p in params}, "recorded_steps": steps,
            "loss": [losses[t] for t in steps], "seconds": seconds, "brute_force_seconds": brute_seconds,
            "u_mismatches": mismatched}


def run_grid(wbaudit_exe, trace_path):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([wbaudit_exe, "grid", trace_path, "--formats", ",".join(FORMATS), "--lr-scales",
                        ",".join(repr(s) for s in SCALES), "--step", "all", "-o", tmp, "--no-figure"], check=True,
                       stdout=subprocess.DEVNULL)
        grid = {}
        with open(os.path.join(tmp, "grid.csv")) as f:
            for row in csv.DictReader(f):
                s = min(SCALES, key=lambda c: abs(c - float(row["lr_scale"])))
                v = row["erased_fraction"]  # empty: undefined (intK of a tensor without a scale, no u != 0)
                grid[(row["group"], int(row["step"]), row["format"], s)] = float(v) if v else float("nan")
    return grid


def table(worst, title):
    lines = [title, "| format | " + " | ".join(f"{s:g}" for s in SCALES) + " | target | holds |",
             "|---|" + "---|" * (len(SCALES) + 2)]
    for f in FORMATS:
        cells = [worst.get((f, s)) for s in SCALES]
        vals = [c[0] for c in cells if c is not None]
        target = TARGET.get(f)
        holds = "-" if target is None or not vals else ("yes" if max(vals) <= target else "**no**")
        lines.append(f"| {f} | " + " | ".join("-" if c is None else f"{c[0]:.1e}" for c in cells) +
                     f" | {'-' if target is None else target} | {holds} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--wbaudit", default=os.environ.get("WBAUDIT_EXE", "wbaudit"), help="the wbaudit binary")
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--points", type=int, default=10, help="recorded steps (the simulator's log schedule)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="keep the trace (trace.h5) and the brute-force fractions (exact.json) here")
    p.add_argument("--compare", metavar="DIR", help="no training: grid DIR/trace.h5 against DIR/exact.json (an "
                   "earlier --out DIR); the model options are read from there")
    p.add_argument("--json", help="write the per-format, per-scale worst errors here")
    args = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))

    with tempfile.TemporaryDirectory() as tmp:
        if args.compare:
            trace_path = os.path.join(args.compare, "trace.h5")
            with open(os.path.join(args.compare, "exact.json")) as f:
                record = json.load(f)
            args = argparse.Namespace(**{**record["args"], "wbaudit": args.wbaudit, "json": args.json})
        else:
            trace_path = os.path.join(args.out or tmp, "trace.h5")
            record = train(args, trace_path)
            if args.out:
                with open(os.path.join(args.out, "exact.json"), "w") as f:
                    json.dump(record, f)
        t0 = time.time()
        grid = run_grid(args.wbaudit, trace_path)
        grid_s = time.time() - t0
    import wbaudit
    sizes, steps, losses, mismatched = (record[k] for k in ("sizes", "recorded_steps", "loss", "u_mismatches"))
    exact = {}
    for key, e in record["exact"].items():
        name, step, f, s = key.split("|")
        exact.setdefault((name, int(step)), {})[(f, float(s))] = e

    every, large = {}, {}
    failures = []
    compared = 0
    for (name, step), fractions in exact.items():
        for (f, s), e in fractions.items():
            a = grid.get((name, step, f, s), float("nan"))
            if math.isnan(e) and math.isnan(a):
                continue
            d = abs(a - e) if not (math.isnan(a) or math.isnan(e)) else float("inf")
            compared += 1
            entry = (d, name, step, a, e)
            for worst, counted in ((every, True), (large, sizes[name] >= MIN_GROUP_SIZE)):
                if counted and ((f, s) not in worst or d > worst[(f, s)][0]):
                    worst[(f, s)] = entry
            if f in TARGET and d > TARGET[f]:
                failures.append((f, s) + entry)

    n_hist = sum(1 for n in sizes if sizes[n] > wbaudit._core.JOINT_EXACT_MAX)
    print(f"\nGPT {args.layers} layers, width {args.d}, {args.heads} heads, vocab {args.vocab}, context {args.ctx}, "
          f"batch {args.batch}: {sum(sizes.values()):,} parameters in {len(sizes)} groups ({n_hist} above "
          f"{wbaudit._core.JOINT_EXACT_MAX} coordinates, read from the margin histogram); {args.optimizer} lr "
          f"{args.lr:g}, {args.steps} steps, recorded {steps}; loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"train + record {record['seconds']:.0f} s (brute force {record['brute_force_seconds']:.0f} s of it), "
          f"wbaudit grid {grid_s:.1f} s; "
          f"{compared} (group, step, format, scale) points compared; u mismatches against the trace's kept u: "
          f"{mismatched}")
    print()
    print(table(every, "worst |grid - exact| over every group x recorded step:"))
    print()
    print(table(large, f"worst |grid - exact| over the groups of >= {MIN_GROUP_SIZE} coordinates:"))
    print("\nworst per format (all groups):")
    for f in FORMATS:
        cand = [(every[(f, s)], s) for s in SCALES if (f, s) in every]
        if cand:
            (d, name, step, a, e), s = max(cand, key=lambda c: c[0][0])
            print(f"  {f:5s} {d:.2e} at s={s:g} {name} step {step} (grid {a:.6f}, exact {e:.6f})")
    if failures:
        print(f"\ntargets missed at {len(failures)} points:")
        for f, s, d, name, step, a, e in sorted(failures, key=lambda r: -r[2])[:20]:
            print(f"  {f} s={s:g} {name} step {step}: grid {a:.6f} exact {e:.6f} (|d| {d:.2e} > {TARGET[f]})")
    else:
        print("\nissue 32's targets hold at every group, recorded step and scale")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "recorded_steps": steps,
                       "worst": {f"{f}@{s:g}": every[(f, s)][0] for (f, s) in every},
                       "worst_large": {f"{f}@{s:g}": large[(f, s)][0] for (f, s) in large},
                       "failures": len(failures), "u_mismatches": mismatched}, f, indent=1)
    return 2 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
