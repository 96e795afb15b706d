"""Adversarial write-back inputs for wbaudit.torch_ops against the C++ kernels, shared by tests/python/test_torch_ops.py
and bench/python/device_check.py (no pytest here: the device check imports it on a machine without pytest)."""
import functools
import math

import numpy as np
import torch

import wbaudit
from wbaudit import torch_ops

N = 1_000_000  # coordinates per format x policy
N_VARIANT = 1 << 17  # per further (sr_bits, stream) variant of a policy in the tests
SEED, STEP, TENSOR_ID = 0x9E3779B97F4A7C15, 77, 5  # a 64-bit seed: both Philox key words matter

FORMATS = [f["name"] for f in wbaudit.formats()]
INFO = {f["name"]: f for f in wbaudit.formats()}


def scale_of(fmt):
    if INFO[fmt]["kind"] != "integer":
        return None
    k = int(fmt[3:])
    return wbaudit.int_scale_for_absmax(k, 0.0371 * k)  # an odd factor != 1: the general integer grid


def ulp_of(fmt, scale, w):
    """The grid spacing above |w| (float64), for values w of fmt."""
    if scale is not None:
        return np.full(w.shape, scale, np.float64)
    info = INFO[fmt]
    emin = 1 - info["bias"]
    _, ex = np.frexp(np.abs(w).astype(np.float64))
    e = np.maximum(ex - 1, emin)
    return np.ldexp(1.0, e - info["man_bits"])


@functools.lru_cache(maxsize=None)
def inputs(fmt, n):
    """Adversarial (w, u) of n coordinates: w on fmt's grid (log-uniform magnitudes from below the smallest subnormal
    to beyond max, so also saturated, zeros and -0, 1% at +-max), u in ten classes: exact ties (+-half a gap),
    quarter-gap multiples, tiny relative to w (erasures), any magnitude, +-0, crossing zero (-w, -1.5 w, ...),
    at and beyond max (saturation), gradient-like, fp32 subnormals, near-ties; and, for exact SR on the default
    stream, updates whose first Philox draw ties with the remainder (the draw continues with further words)."""
    rng = np.random.default_rng(sum(map(ord, fmt)) * 7919 + n)
    scale = scale_of(fmt)
    info = INFO[fmt]
    fmax = info["max_level"] * scale if scale is not None else info["max_finite"]
    fmin = scale / 8 if scale is not None else info["min_subnormal"] / 4
    f32max = float(np.finfo(np.float32).max)
    mag = np.exp(rng.uniform(math.log(fmin), math.log(min(fmax * 2, f32max)), n))
    w = rng.choice([-1.0, 1.0], n) * mag
    w[rng.random(n) < 0.02] = 0.0
    w[rng.random(n) < 0.02] = -0.0
    w = wbaudit.round(w.astype(np.float32), fmt, scale=scale)  # on the grid (saturated beyond max)
    wd = w.astype(np.float64)
    ulp = ulp_of(fmt, scale, w)
    sign = rng.choice([-1.0, 1.0], n)
    cls = rng.integers(0, 10, n)
    u = np.zeros(n)
    pick = [cls == k for k in range(10)]
    u = np.where(pick[0], sign * ulp / 2, u)  # exact ties (both signs)
    u = np.where(pick[1], sign * ulp * rng.choice([0.25, 0.75, 1.25, 1.5, 2.5, 1 / 1024], n), u)
    u = np.where(pick[2], wd * sign * np.ldexp(1.0, -rng.integers(9, 60, n)), u)  # tiny relative to w: erasures
    lo, hi = math.log(2.0 ** -149), math.log(min(fmax * 4, f32max))
    u = np.where(pick[3], sign * np.exp(rng.uniform(lo, hi, n)), u)  # any magnitude
    u = np.where(pick[4], np.where(sign > 0, 0.0, -0.0), u)  # zero and -0
    u = np.where(pick[5], -wd * rng.choice([1.0, 0.5, 1.5, 2.0, 3.0, 1 - 2.0 ** -20], n), u)  # crosses zero
    u = np.where(pick[6], sign * fmax * rng.choice([0.5, 1.0, 2.0, 1e3, 1 + 2.0 ** -12], n), u)  # saturation
    u = np.where(pick[7], rng.standard_normal(n) * np.abs(wd) * np.ldexp(1.0, -rng.integers(0, 14, n)), u)
    u = np.where(pick[8], sign * rng.integers(1, 64, n) * 2.0 ** -149, u)  # fp32 subnormals
    u = np.where(pick[9], sign * ulp * (rng.integers(0, 4, n) + 0.5 + rng.choice([-1, 1], n) * 2.0 ** -20), u)
    u = np.clip(u, -f32max, f32max).astype(np.float32)
    # Values at and beyond max on the weights too.
    at_max = rng.random(n) < 0.01
    w = np.where(at_max, np.float32(min(fmax, f32max)) * sign.astype(np.float32), w).astype(np.float32)
    if scale is None:
        # Exact SR on the default stream: where a coordinate's first word r is below 2^23, a u with
        # (w + u - w) / ulp = (r + 1/2) / 2^32 ties the first draw, so the draw continues with further Philox words.
        r = torch_ops._first_words(SEED, STEP, TENSOR_ID, 0, n, torch.device("cpu")).numpy()
        idx = np.flatnonzero((r < (1 << 23)) & (rng.random(n) < 0.5))
        w[idx] = 1.0
        u[idx] = np.ldexp(2.0 * r[idx] + 1, -(33 + info["man_bits"])).astype(np.float32)
    return w, u



def variants():
    """Every (policy, sr_bits, sr_stream) the C++ accepts for a per-tensor write-back."""
    out = [("nearest", 0, "philox")]
    for policy in ("stochastic", "deadzone-sr"):
        for sr_bits in (0, 1, 3, 8, 16):
            out.append((policy, sr_bits, "philox"))
            out.append((policy, sr_bits, "philox-packed"))
        out.append((policy, 32, "philox"))
    return out
