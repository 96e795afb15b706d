#!/usr/bin/env python3
"""wbaudit.torch_ops.writeback (torch operations) vs wbaudit.writeback (the C++ kernels) on CPU tensors shaped like
GPT-2 small, in one process on the same data; and, for bf16 storage, an AdamW step with and without the write-back.

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 /usr/bin/python3 bench/python/torch_ops_bench.py \\
        [--layers 12 --wte] [--formats bf16,e4m3,mxfp8_e4m3,nvfp4]

Shapes: GPT-2 small's (wpe 1024x768; per layer ln 768, c_attn 768x2304 + 2304, c_proj 768x768 + 768, c_fc 768x3072
+ 3072, mlp c_proj 3072x768 + 768; ln_f; wte 50257x768 with --wte). --layers 12 --wte is the full 124,439,808
parameters; the default (2 layers, no wte) is a representative 14,963,712. Reports the best of --repeats timings of
each write-back over every tensor (interleaved) and the ratio torch_ops / C++ (target: <= 2), the C++ kernels
returning a new array (as torch_ops does) and writing into a preallocated one (out=, its fastest use).
AdamW: (a) torch.optim.AdamW on bf16 parameters (plain bf16 training), (b) AdamW on fp32 parameters holding bf16
values followed by the exact write-back w = q_bf16^policy(w + u) with torch_ops (what a recorder on any device does);
ratio b / a (target <= 1.3).
"""
import argparse
import os
import time

import numpy as np
import torch

import wbaudit
from wbaudit import torch_ops


def gpt2_shapes(layers, wte):
    shapes = [(50257, 768)] if wte else []
    shapes.append((1024, 768))
    for _ in range(layers):
        shapes += [(768,), (768,), (768, 2304), (2304,), (768, 768), (768,), (768,), (768,), (768, 3072), (3072,),
                   (3072, 768), (768,)]
    shapes += [(768,), (768,)]
    return shapes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--wte", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--adamw-steps", type=int, default=3)
    ap.add_argument("--formats", default="bf16,e4m3",
                    help="comma-separated formats (block formats too: blocks along each tensor's last dimension)")
    args = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    shapes = gpt2_shapes(args.layers, args.wte)
    total = sum(int(np.prod(s)) for s in shapes)
    print(f"GPT-2 small shapes: {len(shapes)} tensors, {total:,} parameters; wbaudit threads {wbaudit.threads()}, "
          f"torch threads {torch.get_num_threads()}, torch {torch.__version__}")
    rng = np.random.default_rng(0)
    for fmt in args.formats.split(","):
        ws, us = [], []
        for s in shapes:
            m = int(np.prod(s))
            ws.append(wbaudit.round((rng.standard_normal(m) * 0.05).astype(np.float32).reshape(s), fmt))
            us.append((rng.standard_normal(m) * 1e-4).astype(np.float32).reshape(s))
        tws = [torch.from_numpy(w) for w in ws]
        tus = [torch.from_numpy(u) for u in us]
        for policy in ("nearest", "stochastic"):
            t_cpp = t_out = t_ops = float("inf")
            outs = [np.empty_like(w) for w in ws]
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for i, (w, u) in enumerate(zip(ws, us)):
                    wbaudit.writeback(w, u, fmt, policy, 1, 0, i)
                t_cpp = min(t_cpp, time.perf_counter() - t0)
                t0 = time.perf_counter()
                for i, (w, u, o) in enumerate(zip(ws, us, outs)):
                    wbaudit.writeback(w, u, fmt, policy, 1, 0, i, out=o)
                t_out = min(t_out, time.perf_counter() - t0)
                t0 = time.perf_counter()
                for i, (w, u) in enumerate(zip(tws, tus)):
                    torch_ops.writeback(w, u, fmt, policy, 1, 0, i)
                t_ops = min(t_ops, time.perf_counter() - t0)
            print(f"  {fmt:16s} {policy:10s} C++ {t_cpp * 1e3:7.1f} ms ({t_cpp / total * 1e9:5.2f} ns/param), out= "
                  f"{t_out * 1e3:7.1f} ms ({t_out / total * 1e9:5.2f})  torch_ops {t_ops * 1e3:7.1f} ms "
                  f"({t_ops / total * 1e9:6.2f})  ratio {t_ops / t_cpp:5.1f} (vs out=: {t_ops / t_out:5.1f})")

    # AdamW with bf16 storage.
    params16 = [torch.nn.Parameter((torch.randn(s) * 0.05).to(torch.bfloat16)) for s in shapes]
    params32 = [torch.nn.Parameter(p.detach().float()) for p in params16]
    grads = [torch.randn(s) * 1e-2 for s in shapes]
    for p, g in zip(params16, grads):
        p.grad = g.to(torch.bfloat16)
    for p, g in zip(params32, grads):
        p.grad = g.clone()
    opt16 = torch.optim.AdamW(params16, lr=1e-3)
    opt32 = torch.optim.AdamW(params32, lr=1e-3)

    def plain():
        opt16.step()

    def with_writeback(policy):
        before = [p.detach().clone() for p in params32]
        opt32.step()
        with torch.no_grad():
            for i, (p, w) in enumerate(zip(params32, before)):
                w_next, _ = torch_ops.writeback(w, p - w, "bf16", policy, 1, 0, i)
                p.copy_(w_next)

    def best(fn):
        fn()  # optimizer state allocated outside the timing
        times = []
        for _ in range(args.adamw_steps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    t_plain = best(plain)
    print(f"AdamW step, bf16 storage, {total:,} parameters: plain bf16 {t_plain * 1e3:.1f} ms")
    for policy in ("nearest", "stochastic"):
        t = best(lambda: with_writeback(policy))
        print(f"  fp32 AdamW + torch_ops write-back ({policy}): {t * 1e3:.1f} ms, ratio {t / t_plain:.2f}")


if __name__ == "__main__":
    main()
