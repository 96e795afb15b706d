#!/usr/bin/env python3
"""The recorders at GPT-2-small scale (issues 32/33): step times, trace size and peak memory of ReferenceRecorder and
PersistentNative on a 124M-parameter GPT-2-shaped model trained with AdamW on the CPU.

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 nice -n 0 /usr/bin/python3 bench/python/gpt2_scale_bench.py

The model is bench/python/gpt2_model.py's GPT2 at GPT-2 small's shape (12 layers, width 768, 12 heads, vocabulary
50257, context 128, LM head tied to the token embedding: 124,439,808 parameters; attention by explicit matmuls and
softmax, torch 1.13 having no scaled_dot_product_attention), random token batches (--batch x 128), AdamW (lr 1e-4).

Timing, in this one process (ratios against the plain step measured in the same process; no timed assertions): for
each mode a fresh model from the same seed, --warmup steps, then --steps timed steps (forward + backward + optimizer
step, and the optimizer step alone), medians:
  plain       fp32 AdamW (the baseline)
  ref         fp32 AdamW inside ReferenceRecorder(formats e4m3, e5m2, bf16): recorded and non-recorded steps alternate
  ref-declared  the same with margin_formats="declared": the margin histogram of the three declared formats only,
              not of all 14 (the grid then forecasts only those; docs/forecasting.md, "Recording fewer formats")
  pn-e4m3     PersistentNative(AdamW, formats="e4m3", policy="nearest"), fp32 storage
  pn-bf16     PersistentNative(AdamW, formats="bf16"), fp32 storage
  bf16-plain  the model in bfloat16, plain AdamW on it (the bf16 baseline)
  bf16-pn     the bf16 model, PersistentNative(AdamW, formats=None): the storage dtype is the format (its fused
              AdamW step: wbaudit.torch's one pass for AdamW on bf16 / fp16 storage)
  bf16-pn-unfused  the same with fused=False (AdamW on fp32 copies of parameters and gradients, then the write-back)
The plain baseline runs first and again last (drift under load shows as the difference).

Memory (first, before this process builds a model: ru_maxrss survives exec): each of plain, ref (recording --mem-short and --mem-long steps: the recorder's memory must not grow with the
number of recorded steps), pn-e4m3 and bf16-pn runs in a fresh subprocess (this script with --mode X) that reports
ru_maxrss; the trace sizes come from the same runs (bytes per recorded step from the difference of the two ref runs).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402
from wbaudit.torch import PersistentNative, ReferenceRecorder  # noqa: E402

VOCAB, CTX = 50257, 128
REF_FORMATS = ["e4m3", "e5m2", "bf16"]


def build(args, dtype=torch.float32):
    torch.manual_seed(args.seed)
    model = gpt2_model.GPT2(vocab=VOCAB, d=768, layers=args.layers, heads=12, ctx=CTX)
    return model.to(dtype)


def batch(args, step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(0, VOCAB, (args.batch, CTX + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def make(mode, args, tmp, steps):
    """(model, optimizer-like, recorder or None, step function) for a mode."""
    dtype = torch.bfloat16 if mode.startswith("bf16") else torch.float32
    model = build(args, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rec = None
    if mode.startswith("ref"):
        # recorded steps: "ref" alternates (the even steps recorded), "ref-every" records every step
        sched = "every" if mode == "ref-every" else [s for s in range(steps) if s % 2 == 0]
        rec = ReferenceRecorder(model, formats=REF_FORMATS, schedule=sched, steps=steps,
                                path=os.path.join(tmp, mode, "trace.h5"),
                                margin_formats="declared" if mode == "ref-declared" else None)
    elif mode in ("pn-e4m3", "pn-bf16", "bf16-pn", "bf16-pn-unfused"):
        fmt = {"pn-e4m3": "e4m3", "pn-bf16": "bf16"}.get(mode)
        opt = PersistentNative(opt, formats=fmt, model=model, policy="nearest", schedule="every", steps=steps,
                               path=os.path.join(tmp, mode, "trace.h5"), fused=False if "unfused" in mode else None)
    return model, opt, rec


def one_step(model, opt, rec, x, y):
    """(total seconds, optimizer-step seconds) of one training step."""
    t0 = time.perf_counter()
    logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    t1 = time.perf_counter()
    if rec is not None:
        with rec.step(loss=loss.item(), lr=1e-4):
            opt.step()
    elif isinstance(opt, PersistentNative):
        opt.step(loss=loss.item(), lr=1e-4)
    else:
        opt.step()
    t2 = time.perf_counter()
    return t2 - t0, t2 - t1


def close(opt, rec):
    path = None
    if rec is not None:
        path = rec.close()
    elif isinstance(opt, PersistentNative):
        path = opt.close()
    return path


def time_mode(mode, args, tmp):
    """{"total": [...], "step": [...]} per step after the warm-up; ref: split into recorded / non-recorded."""
    n = args.warmup + args.steps
    alternate = mode in ("ref", "ref-declared")
    if alternate:  # a recorded and a non-recorded step in the warm-up; then args.steps of each
        n = 2 + 2 * args.steps
    model, opt, rec = make(mode, args, tmp, n)
    out = {}
    warm = 2 if alternate else args.warmup
    for s in range(n):
        x, y = batch(args, s)
        total, step = one_step(model, opt, rec, x, y)
        if s < warm:
            continue
        key = ("rec" if s % 2 == 0 else "norec") if alternate else mode
        if mode == "ref-declared":
            key += "-declared"
        out.setdefault(key, {"total": [], "step": []})
        out[key]["total"].append(total)
        out[key]["step"].append(step)
    close(opt, rec)
    del model, opt, rec
    return out


def mem_mode(args):
    """Runs one mode in this (fresh) process; prints a JSON line with ru_maxrss and the trace's size."""
    tmp = tempfile.mkdtemp(prefix="gpt2_mem_")
    mode = args.mode
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model, opt, rec = make("ref-every" if mode == "ref" else mode, args, tmp, args.mem_steps)
    for s in range(args.mem_steps):
        x, y = batch(args, s)
        one_step(model, opt, rec, x, y)
    path = close(opt, rec)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    nparams = sum(p.numel() for p in model.parameters())
    size = os.path.getsize(path) if path else 0
    hwm = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
    print(json.dumps({"mode": mode, "steps": args.mem_steps, "ru_maxrss_kb": rss, "rss_at_start_kb": rss0,
                      "vmhwm_kb": hwm,
                      "params": nparams, "trace_bytes": size}))


def spawn(mode, args, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode, "--mem-steps", str(steps), "--layers",
           str(args.layers), "--batch", str(args.batch), "--seed", str(args.seed)]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def med(v):
    return statistics.median(v)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=3, help="timed steps per mode (ref: this many of each kind)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--modes", default="plain,ref,pn-e4m3,pn-bf16,bf16-plain,bf16-pn")
    p.add_argument("--mem-short", type=int, default=4)
    p.add_argument("--mem-long", type=int, default=12)
    p.add_argument("--no-mem", action="store_true", help="skip the memory subprocesses")
    p.add_argument("--mode", help=argparse.SUPPRESS)  # a memory subprocess
    p.add_argument("--mem-steps", type=int, default=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.mode:
        return mem_mode(args)

    print(f"command: {' '.join(sys.argv)}")
    print(f"loadavg at start: {open('/proc/loadavg').read().strip()}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cores {os.cpu_count()}")
    # the parameter count without building the model here (the memory subprocesses inherit this process's ru_maxrss
    # through exec, so they run before the parent holds a model)
    d, L = 768, args.layers
    nparams = VOCAB * d + CTX * d + L * (12 * d * d + 13 * d) + 2 * d
    print(f"model: {args.layers} layers, width 768, 12 heads, vocabulary {VOCAB}, context {CTX}, tied head: "
          f"{nparams:,} parameters; batch {args.batch} x {CTX}")
    if not args.no_mem:
        print()
        runs = [("plain", args.mem_short), ("ref", args.mem_short), ("ref", args.mem_long),
                ("pn-e4m3", args.mem_short), ("bf16-plain", args.mem_short), ("bf16-pn", args.mem_short)]
        mem = []
        for mode, steps in runs:
            t0 = time.perf_counter()
            m = spawn(mode, args, steps)
            mem.append(m)
            print(f"  {mode} x {steps}: {time.perf_counter() - t0:.1f} s", flush=True)
        print("| process (fresh) | steps | recorded | ru_maxrss (MB) | - plain's | VmHWM (MB) | trace.h5 (bytes) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        plain_rss = mem[0]["ru_maxrss_kb"]
        for m in mem:
            recd = m["steps"] if m["mode"] in ("ref", "pn-e4m3", "bf16-pn") else 0
            print(f"| {m['mode']} | {m['steps']} | {recd} | {m['ru_maxrss_kb'] / 1024:.0f} | "
                  f"{(m['ru_maxrss_kb'] - plain_rss) / 1024:+.0f} | {m['vmhwm_kb'] / 1024:.0f} | {m['trace_bytes']:,} |")
        fp32_copy = nparams * 4 / 2**20
        print(f"(one fp32 copy of the parameters: {fp32_copy:.0f} MB)")
        short, long_ = mem[1], mem[2]
        per = (long_["trace_bytes"] - short["trace_bytes"]) / (long_["steps"] - short["steps"])
        print(f"reference trace: {per:,.0f} bytes per recorded step ({short['trace_bytes']:,} for "
              f"{short['steps']}, {long_['trace_bytes']:,} for {long_['steps']}); x50 = {50 * per / 1e6:.2f} MB "
              f"(+ {(short['trace_bytes'] - short['steps'] * per) / 1e6:.2f} MB fixed; target <= 100 MB)")
        tgt = mem[3]
        print(f"target trace (pn-e4m3): {tgt['trace_bytes'] / tgt['steps']:,.0f} bytes per recorded step "
              f"(whole file / steps)")
        print(f"reference recorder RSS growth from {short['steps']} to {long_['steps']} recorded steps: "
              f"{(long_['ru_maxrss_kb'] - short['ru_maxrss_kb']) / 1024:+.0f} MB")
    tmp = tempfile.mkdtemp(prefix="gpt2_bench_")
    modes = args.modes.split(",")
    res = {}
    t_start = time.perf_counter()
    for mode in modes + (["plain"] if "plain" in modes else []):
        t0 = time.perf_counter()
        r = time_mode(mode, args, tmp)
        for k, v in r.items():
            key = k if k not in res else k + " (again)"
            res[key] = v
        print(f"  {mode}: {time.perf_counter() - t0:.1f} s", flush=True)

    # the baseline: the faster of the two plain runs (the first one can be slowed by the memory phase or load)
    base = min((res[k] for k in ("plain", "plain (again)") if k in res), key=lambda v: med(v["total"]))
    b_tot, b_step = med(base["total"]), med(base["step"])
    names = {"plain": "plain fp32 AdamW", "rec": "ReferenceRecorder, recorded step",
             "norec": "ReferenceRecorder, non-recorded step",
             "rec-declared": "ReferenceRecorder, margin_formats=\"declared\", recorded step",
             "norec-declared": "ReferenceRecorder, margin_formats=\"declared\", non-recorded step", "pn-e4m3": "PersistentNative e4m3 nearest (fp32)",
             "pn-bf16": "PersistentNative bf16 nearest (fp32)", "plain (again)": "plain fp32 AdamW (again, last)",
             "bf16-plain": "plain bf16 AdamW (bf16 model)", "bf16-pn": "PersistentNative, bf16 storage",
             "bf16-pn-unfused": "PersistentNative, bf16 storage, fused=False"}
    print()
    print("| mode | step (s) | optimizer step (s) | step / plain | optimizer step / plain's |")
    print("|---|---:|---:|---:|---:|")
    for k, v in res.items():
        ref_tot, ref_step = (b_tot, b_step)
        if k.startswith("bf16-pn") and "bf16-plain" in res:
            ref_tot, ref_step = med(res["bf16-plain"]["total"]), med(res["bf16-plain"]["step"])
        tot, st = med(v["total"]), med(v["step"])
        print(f"| {names.get(k, k)} | {tot:.3f} | {st:.3f} | {tot / ref_tot:.3f}x | {st / ref_step:.2f}x |")
    print("(bf16-pn rows against bf16-plain; every other row against the faster plain fp32 run)")
    for suffix, what in (("", "every format"), ("-declared", "declared formats")):
        if "rec" + suffix not in res:
            continue
        rec_over = med(res["rec" + suffix]["total"]) - b_tot
        norec_over = med(res["norec" + suffix]["total"]) - b_tot
        print(f"margin histogram of {what}: recorded-step overhead {rec_over:.3f} s "
              f"({med(res['rec' + suffix]['total']) / b_tot:.3f}x; target <= 1.5x); non-recorded {norec_over:+.3f} s")
        print(f"  50 recorded steps in a 10^4-step run: 50 x {rec_over:.3f} / (10^4 x {b_tot:.3f}) = "
              f"{100 * 50 * rec_over / (1e4 * b_tot):.3f}% (target <= 5%); with the 9950 non-recorded steps' "
              f"{norec_over:+.3f} s: {100 * (50 * rec_over + 9950 * norec_over) / (1e4 * b_tot):+.2f}%")
    print(f"timing: {time.perf_counter() - t_start:.0f} s")

    print(f"loadavg at end: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
