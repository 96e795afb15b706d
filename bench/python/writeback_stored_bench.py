#!/usr/bin/env python3
"""The write-back of a bf16-stored parameter (issue 33): the four passes PersistentNative took before
(promote the storage to fp32, u = p_after - w, wbaudit.writeback in place, store back into bf16) against the fused
pass wbaudit._core.writeback_stored, in one process, alternating, min and median of 7; the two results are checked
bit for bit equal.

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 /usr/bin/python3 bench/python/writeback_stored_bench.py [n]
"""
import sys
import time

import torch

from wbaudit import _core, writeback

torch.set_num_threads(2)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000_000
torch.manual_seed(0)
storage = (torch.randn(n) * 0.02).bfloat16()
stepped = storage.float() + torch.randn(n) * 1e-4  # what an optimizer stepped w to
w32 = torch.empty(n)
u = torch.empty(n)


def four_passes():
    s = storage.clone()
    t = time.perf_counter()
    w32.copy_(s)
    torch.sub(stepped, w32, out=u)
    w = w32.numpy()
    writeback(w, u.numpy(), "bf16", "nearest", 0, 0, 0, 0, None, w)
    s.copy_(w32)
    return time.perf_counter() - t, s


def fused():
    s = storage.clone()
    t = time.perf_counter()
    _core.writeback_stored(s.view(torch.int16).numpy(), stepped.numpy(), "bf16", "bf16", "nearest", 0, 0, 0, 0)
    return time.perf_counter() - t, s


a, b = [], []
for _ in range(7):
    ta, sa = four_passes()
    tb, sb = fused()
    a.append(ta)
    b.append(tb)
assert torch.equal(sa.view(torch.int16), sb.view(torch.int16)), "the fused pass differs"
a.sort()
b.sort()
print(f"n = {n}: four passes min {a[0] * 1e3:.1f} ms, median {a[3] * 1e3:.1f}; fused min {b[0] * 1e3:.1f} ms, "
      f"median {b[3] * 1e3:.1f}; fused / four passes (minima) {b[0] / a[0]:.3f}")
