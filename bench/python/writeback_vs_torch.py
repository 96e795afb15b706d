#!/usr/bin/env python3
"""wbaudit.writeback vs torch.Tensor.add_ on the same 16M-element float32 tensor, side by side in one process.

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 /usr/bin/python3 bench/python/writeback_vs_torch.py

Targets (issue 15): nearest >= 0.5x and SR >= 0.2x the elements/s of add_. Reports the best of --repeats timings of
each, interleaved, and the ratios; `in place` writes w_next into w (out=w, as PersistentNative does), `new array`
returns a fresh w_next (one extra copy).
"""
import argparse
import os
import time

import numpy as np
import torch

import wbaudit


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--elements", type=int, default=1 << 24)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--format", default="e4m3")
    args = p.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    w0 = wbaudit.round(rng.uniform(-1, 1, args.elements).astype(np.float32), args.format)
    u = (rng.choice([-1, 1], args.elements) * 2.0 ** -rng.integers(4, 15, args.elements)).astype(np.float32)
    tw, tu = torch.from_numpy(w0.copy()), torch.from_numpy(u)
    w = w0.copy()
    n = args.elements
    print(f"{n} elements, format {args.format}, wbaudit threads {wbaudit.threads()}, torch threads "
          f"{torch.get_num_threads()}")
    rows = []
    for label, policy, inplace in (("nearest, in place", "nearest", True), ("nearest, new array", "nearest", False),
                                   ("stochastic, in place", "stochastic", True),
                                   ("stochastic, new array", "stochastic", False),
                                   ("deadzone-sr, in place", "deadzone-sr", True)):
        t_add = t_wb = float("inf")
        for _ in range(args.repeats):  # interleaved, so load changes hit both
            t_add = min(t_add, best(lambda: tw.add_(tu), 1))
            np.copyto(w, w0)
            if inplace:
                t_wb = min(t_wb, best(lambda: wbaudit.writeback(w, u, args.format, policy, 1, 0, 0, out=w), 1))
            else:
                t_wb = min(t_wb, best(lambda: wbaudit.writeback(w, u, args.format, policy, 1, 0, 0), 1))
        rows.append((label, n / t_add, n / t_wb, t_add / t_wb))
    print(f"{'write-back':24s} {'add_ Melem/s':>14s} {'writeback Melem/s':>18s} {'ratio':>7s}")
    for label, a, b, r in rows:
        print(f"{label:24s} {a / 1e6:14.1f} {b / 1e6:18.1f} {r:7.2f}x")


if __name__ == "__main__":
    main()
