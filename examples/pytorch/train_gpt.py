#!/usr/bin/env python3
"""A small GPT-style character model in PyTorch, trained on a text file, instrumented with wbaudit:

  1. fp32 with ReferenceRecorder            -> OUT/reference/trace.h5  (projected e4m3/e5m2/bf16 events), and
     its analytic grid (wbaudit grid: 7 formats x 4 learning-rate scales, before any low-precision run) -> OUT/grid
  2. persistent-native e4m3 (PersistentNative, same init and data order)
                                            -> OUT/e4m3/trace.h5 and OUT/e4m3/trajectory.h5
  3. wbaudit audit of that trajectory, wbaudit import of both traces, the forecast-vs-measured report and
     wbaudit evaluate of the imported runs (OUT/evaluation: skill vs common time, crossings; exploratory).

Run from the repository root after the build (see docs/python.md):
    PYTHONPATH=build/release/python /usr/bin/python3 examples/pytorch/train_gpt.py --out runs/pytorch
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import wbaudit
from wbaudit.torch import PersistentNative, ReferenceRecorder


class Block(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.heads)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d=64, layers=2, heads=4, ctx=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*[Block(d, heads, ctx) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


def batches(data, steps, batch, ctx, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(0, len(data) - ctx - 1, (batch,), generator=g)
        yield torch.stack([data[j:j + ctx] for j in i]), torch.stack([data[j + 1:j + ctx + 1] for j in i])


def lr_at(step, steps, lr_max, lr_min):
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + math.cos(math.pi * step / steps))  # cosine decay


def train(args, data, vocab, wrap):
    """One run with the same initialization, data order and schedule; wrap(model, optimizer) -> (step_fn, close)."""
    torch.manual_seed(args.seed)
    model = GPT(vocab, args.d, args.layers, args.heads, args.ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    step_fn, close = wrap(model, opt)
    start = time.time()
    for step, (x, y) in enumerate(batches(data, args.steps, args.batch, args.ctx, args.seed)):
        lr = lr_at(step, args.steps, args.lr, args.lr_min)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad()
        loss.backward()
        step_fn(loss.item(), lr)
    seconds = time.time() - start
    close()
    with torch.no_grad():
        val = sum(F.cross_entropy(model(x).view(-1, vocab), y.view(-1)).item()
                  for x, y in batches(data, 8, args.batch, args.ctx, 12345)) / 8
    return val, seconds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--out", default="runs/pytorch")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-2)
    p.add_argument("--lr-min", type=float, default=3e-4)
    p.add_argument("--points", type=int, default=40, help="log-spaced recorded steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--wbaudit", default=shutil.which("wbaudit") or "build/release/cli/wbaudit")
    args = p.parse_args()
    if os.path.exists(args.out):
        sys.exit(f"train_gpt.py: {args.out} exists (choose a new --out)")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    text = open(args.text, encoding="utf-8", errors="replace").read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    vocab = len(chars)
    schedule = {"kind": "log", "points": args.points}
    print(f"text {args.text}: {len(text)} characters, vocabulary {vocab}; {args.steps} steps, AdamW, cosine lr "
          f"{args.lr} -> {args.lr_min}; wbaudit threads {wbaudit.threads()}, torch threads {torch.get_num_threads()}")

    def reference(model, opt):
        rec = ReferenceRecorder(model, formats=["e4m3", "e5m2", "bf16"], schedule=schedule, steps=args.steps,
                                path=f"{args.out}/reference/trace.h5", seed=args.seed)

        def step(loss, lr):
            with rec.step(loss=loss, lr=lr):
                opt.step()
        return step, rec.close

    def e4m3(model, opt):
        pn = PersistentNative(opt, formats="e4m3", model=model, policy="nearest", seed=args.seed,
                              path=f"{args.out}/e4m3/trace.h5", schedule=schedule, steps=args.steps,
                              trajectory=f"{args.out}/e4m3/trajectory.h5")
        return (lambda loss, lr: pn.step(loss=loss, lr=lr)), pn.close

    os.makedirs(f"{args.out}/e4m3")
    val_ref, t_ref = train(args, data, vocab, reference)
    print(f"fp32 reference:          validation loss {val_ref:.4f} ({t_ref:.1f} s) -> {args.out}/reference/trace.h5")
    # Before any low-precision run: the analytic grid of the one reference over formats x learning-rate scales.
    subprocess.run([args.wbaudit, "grid", f"{args.out}/reference/trace.h5", "--formats",
                    "bf16,e5m2,e4m3,e3m2,e2m3,e2m1,int4", "--lr-scales", "0.25,0.5,1,2", "--out",
                    f"{args.out}/grid"], check=True)
    val_e4m3, t_e4m3 = train(args, data, vocab, e4m3)
    print(f"persistent-native e4m3:  validation loss {val_e4m3:.4f} ({t_e4m3:.1f} s) -> {args.out}/e4m3/trace.h5")
    subprocess.run([args.wbaudit, "audit", f"{args.out}/e4m3/trajectory.h5", "--out", f"{args.out}/audit"],
                   check=True)
    subprocess.run([args.wbaudit, "import", f"{args.out}/sweep", f"{args.out}/reference/trace.h5",
                    f"{args.out}/e4m3/trace.h5", "--name", "gpt-fp32-reference", "--name", "gpt-e4m3-nearest",
                    "--report"], check=True)
    # The skill report of the imported runs (exploratory, never canonical): one run per format, so the bootstrap
    # resamples parameter tensors (unit "cell"), and the baseline is common time.
    subprocess.run([args.wbaudit, "evaluate", f"{args.out}/sweep", "--analysis",
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "analysis.toml"), "--out",
                    f"{args.out}/evaluation"], check=True)


if __name__ == "__main__":
    main()
