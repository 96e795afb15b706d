#!/usr/bin/env python3
"""wbaudit.torch_ops on an accelerator against the C++ kernels on host copies (scripts/device_check.sh runs it).

    PYTHONPATH=build/release/python:tests/python /usr/bin/python3 bench/python/device_check.py [--device cuda]

For every per-tensor format and every (policy, sr_bits, sr_stream) the C++ accepts, >= 10^6 adversarial coordinates
(tests/python/torch_ops_cases.py): w_next must equal wbaudit.writeback's bit for bit and the counts exactly. Then
every block format (tests/python/torch_ops_block_cases.py, n coordinates in a few tensors; with and without
:skip_unchanged_blocks) under nearest, exact SR on both streams, r-bit SR and deadzone-sr. Then the write-back time of
the torch path against p.add_(u) on the same device (bf16, e4m3, mxfp8_e4m3 and nvfp4, nearest and stochastic).
Prints every mismatch; exit status 1 if any. Without a CUDA device (--device cuda): prints a SKIP line, exits 0.
--device cpu runs the same checks on the host (a dry run of this script).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch


def timed(fn, device, repeats):
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=None, help="coordinates per check (default 1_000_000)")
    ap.add_argument("--bench-elements", type=int, default=1 << 24)
    ap.add_argument("--formats", default=None, help="comma-separated subset (default: every per-tensor format)")
    ap.add_argument("--block-formats", default=None,
                    help="comma-separated subset of the block formats (default: every one; 'none' skips them)")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"SKIP: no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False); "
              "wbaudit.torch_ops was not checked on an accelerator")
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
    import wbaudit
    from wbaudit import torch_ops
    import torch_ops_cases as cases

    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "host CPU"
    n = args.n or cases.N
    formats = args.formats.split(",") if args.formats else cases.FORMATS
    print(f"device {device} ({name}), torch {torch.__version__}, wbaudit threads {wbaudit.threads()}, "
          f"{n} coordinates per check")
    t_start = time.perf_counter()
    checks = mismatches = 0
    for fmt in formats:
        w, u = cases.inputs(fmt, n)
        scale = cases.scale_of(fmt)
        tw, tu = torch.from_numpy(w).to(device), torch.from_numpy(u).to(device)
        for policy, sr_bits, stream in cases.variants():
            ref, ref_counts = wbaudit.writeback(w, u, fmt, policy, cases.SEED, cases.STEP, cases.TENSOR_ID, sr_bits,
                                                scale, None, 0, "", stream)
            got, counts = torch_ops.writeback(tw, tu, fmt, policy, cases.SEED, cases.STEP, cases.TENSOR_ID, sr_bits,
                                              scale, stream)
            got = got.cpu().numpy()
            bad = np.flatnonzero(ref.view(np.int32) != got.view(np.int32))
            checks += 1
            if bad.size or counts != ref_counts:
                mismatches += 1
                i = bad[0] if bad.size else None
                detail = (f"first at {i}: w={w[i]!r} u={u[i]!r} C++ {ref[i]!r} torch {got[i]!r}" if bad.size else "")
                print(f"MISMATCH {fmt} {policy} sr_bits={sr_bits} {stream}: {bad.size} values {detail}; "
                      f"counts C++ {ref_counts} torch {counts}")
        print(f"  {fmt}: {len(cases.variants())} policy variants checked ({time.perf_counter() - t_start:.1f} s)",
              flush=True)
    import torch_ops_block_cases as block_cases
    block_formats = (block_cases.BLOCK_FORMATS if args.block_formats is None else
                     [] if args.block_formats == "none" else args.block_formats.split(","))
    block_variants = [("nearest", 0, "philox"), ("stochastic", 0, "philox"), ("deadzone-sr", 0, "philox"),
                      ("stochastic", 0, "philox-packed"), ("stochastic", 3, "philox"),
                      ("stochastic", 5, "philox-packed"), ("stochastic", 32, "philox"), ("deadzone-sr", 8, "philox")]
    for fmt in block_formats:
        for w, u in block_cases.stacked(fmt, n):  # a few tensors of n coordinates in all (short blocks and tiles)
            tw, tu = torch.from_numpy(w).to(device), torch.from_numpy(u).to(device)
            for policy, sr_bits, stream in block_variants:
                for name in (fmt, fmt + ":skip_unchanged_blocks"):
                    ref, ref_counts = wbaudit.writeback(w, u, name, policy, block_cases.SEED, block_cases.STEP,
                                                        block_cases.TENSOR_ID, sr_bits, None, None, 0, "", stream)
                    got, counts = torch_ops.writeback(tw, tu, name, policy, block_cases.SEED, block_cases.STEP,
                                                      block_cases.TENSOR_ID, sr_bits, None, stream)
                    got = got.cpu().numpy()
                    bad = np.flatnonzero(ref.view(np.int32) != got.view(np.int32))
                    checks += 1
                    if bad.size or counts != ref_counts:
                        mismatches += 1
                        print(f"MISMATCH {name} {policy} sr_bits={sr_bits} {stream} shape {w.shape}: {bad.size} "
                              f"values; counts C++ {ref_counts} torch {counts}")
        print(f"  {fmt}: {2 * len(block_variants)} block variants checked ({time.perf_counter() - t_start:.1f} s)",
              flush=True)
    print(f"bit-identity: {checks} checks, {mismatches} with mismatches")

    m = args.bench_elements
    rng = np.random.default_rng(0)
    print(f"write-back time, {m} elements on {device} (best of 5): torch_ops.writeback vs p.add_(u)")
    for fmt in ("bf16", "e4m3", "mxfp8_e4m3", "nvfp4"):
        shape = (m // 1024, 1024)
        w = torch.from_numpy(wbaudit.round(rng.uniform(-1, 1, shape).astype(np.float32), fmt)).to(device)
        u = torch.from_numpy((rng.standard_normal(shape) * 1e-3).astype(np.float32)).to(device)
        p = w.clone()
        t_add = timed(lambda: p.add_(u), device, 5)
        for policy in ("nearest", "stochastic"):
            t = timed(lambda: torch_ops.writeback(w, u, fmt, policy, 1, 0, 0), device, 5)
            print(f"  {fmt:10s} {policy:10s} torch_ops {t * 1e3:8.2f} ms  add_ {t_add * 1e3:7.3f} ms  "
                  f"ratio {t / t_add:6.1f}  ({m / t / 1e9:.2f} Gcoord/s)")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
