#!/usr/bin/env python3
"""Training-step time of the example GPT (examples/pytorch/train_gpt.py) with ReferenceRecorder recording every
step, with it recording log-spaced steps, and without it, side by side in one process.

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 /usr/bin/python3 bench/python/recorder_overhead.py

Targets (issue 15): <= 1.3x (every step) and <= 1.05x (log-spaced) the plain loop. Each variant runs --steps steps
from the same initialization and data, in --rounds interleaved rounds; the best round's mean step time is reported.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "pytorch"))
import train_gpt  # noqa: E402
from wbaudit.torch import ReferenceRecorder  # noqa: E402


def run(data, vocab, steps, recorder_schedule, tmp):
    torch.manual_seed(1)
    model = train_gpt.GPT(vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    rec = None
    if recorder_schedule is not None:
        rec = ReferenceRecorder(model, formats=["e4m3", "e5m2", "bf16"], schedule=recorder_schedule, steps=steps,
                                path=os.path.join(tmp, "trace.h5"))
    t0 = time.perf_counter()
    for x, y in train_gpt.batches(data, steps, 16, 64, 1):
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad()
        loss.backward()
        if rec is None:
            opt.step()
        else:
            with rec.step(loss=loss.item()):
                opt.step()
    seconds = (time.perf_counter() - t0) / steps
    return seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--points", type=int, default=40)
    args = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    import tempfile
    tmp = tempfile.mkdtemp()
    variants = {"plain": None, "every step": "every", f"log ({args.points} of {args.steps})":
                {"kind": "log", "points": args.points}}
    best = {k: float("inf") for k in variants}
    for _ in range(args.rounds):
        for k, sched in variants.items():
            best[k] = min(best[k], run(data, len(chars), args.steps, sched, tmp))
            if os.path.exists(os.path.join(tmp, "trace.h5")):
                os.unlink(os.path.join(tmp, "trace.h5"))
    params = sum(p.numel() for p in train_gpt.GPT(len(chars)).parameters())
    print(f"example GPT: {params} parameters, {args.steps} steps x {args.rounds} rounds, torch threads "
          f"{torch.get_num_threads()}")
    for k in variants:
        print(f"{k:20s} {best[k] * 1e3:8.2f} ms/step  {best[k] / best['plain']:.3f}x")


if __name__ == "__main__":
    main()
