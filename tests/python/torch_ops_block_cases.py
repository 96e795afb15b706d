"""Adversarial block-format write-back inputs for wbaudit.torch_ops against the C++ kernels (tests/python/
test_torch_ops_blocks.py): several shapes with short last blocks (and short 16x16 tiles), block magnitudes from E8M0's
clamp at 2^-127 up, NVFP4 blocks far below the tensor's max (E4M3-subnormal and zero block scales), zero blocks, blocks
with u all zero, and proposals that tie on the element grid, push the block max up (rescale up), cancel it (rescale
down), point outward at the max (saturation), cross zero or are fp32 subnormals."""
import functools

import numpy as np

import wbaudit
from wbaudit import torch_ops

SEED, STEP, TENSOR_ID = 0x9E3779B97F4A7C15, 77, 5
BLOCK_FORMATS = [f["name"] for f in wbaudit.block_formats()]
INFO = {f["name"]: f for f in wbaudit.block_formats()}
SHAPES = [(45,), (37, 45), (19, 71), (3, 5, 200), (33, 1000), (40, 33)]  # columns: short last blocks of 16 and 32


def _block_max(a, size):
    """Per element: the max |a| over its row-wise block of `size` columns."""
    cols = a.shape[-1]
    pad = (-cols) % size
    m = np.abs(np.pad(a.reshape(-1, cols), ((0, 0), (0, pad))))
    m = m.reshape(m.shape[0], -1, size).max(axis=2)
    return np.repeat(m, size, axis=1)[:, :cols].reshape(a.shape)


def _one(fmt, shape, rng):
    info = INFO[fmt]
    size = info["block_size"]
    cols = shape[-1]
    rows = int(np.prod(shape[:-1]))
    nb = (cols + size - 1) // size
    if info["family"] == "nvfp4":  # blocks down to 2^-26 of the tensor's max: E4M3-subnormal and zero block scales
        logf = rng.uniform(-26, 0, (rows, nb))
    else:  # from below E8M0's clamp (2^-127) to 2^60
        tiny = rng.random((rows, nb)) < 0.1
        logf = np.where(tiny, rng.uniform(-150, -120, (rows, nb)), rng.uniform(-40, 60, (rows, nb)))
    logf[rng.random((rows, nb)) < 0.05] = -np.inf  # zero blocks
    f = np.repeat(np.exp2(logf), size, axis=1)[:, :cols].reshape(shape)
    x = rng.standard_normal(shape) * f
    x[rng.random(shape) < 0.03] = 0.0
    w = wbaudit.round(x.astype(np.float32), fmt)
    wd = w.astype(np.float64)
    bmax = _block_max(wd, size)
    sign = rng.choice([-1.0, 1.0], shape)
    cls = rng.integers(0, 8, shape)
    u = np.zeros(shape)
    u = np.where(cls == 1, sign * np.abs(wd) * np.exp2(-rng.integers(1, 30, shape).astype(float)), u)
    u = np.where(cls == 2, sign * bmax * rng.choice([0.5, 0.25, 0.125, 1 / 32, 1 / 64, 2.0 ** -7, 3 / 16], shape), u)
    u = np.where(cls == 3, -wd * rng.choice([1.0, 0.5, 2.0, 1.5, 0.75], shape), u)
    u = np.where(cls == 4, sign * bmax * rng.choice([1.0, 2.0, 3.0, 1e3, 2.0 ** -20], shape), u)
    u = np.where(cls == 5, np.sign(wd) * np.abs(wd) * 2.0 ** -20, u)  # outward at the max: erased by saturation
    u = np.where(cls == 6, rng.standard_normal(shape) * bmax * np.exp2(-rng.uniform(0, 20, shape)), u)
    u = np.where(cls == 7, sign * rng.integers(1, 64, shape) * 2.0 ** -149, u)
    quiet = np.repeat(rng.random((rows, nb)) < 0.1, size, axis=1)[:, :cols].reshape(shape)
    u[quiet] = 0.0  # blocks with u all zero
    return w, u.astype(np.float32)


@functools.lru_cache(maxsize=None)
def cases(fmt, n):
    """Tensors of the shapes SHAPES (repeated) in fmt, about n coordinates in all: [(w, u), ...]."""
    rng = np.random.default_rng(sum(map(ord, fmt)) * 7919 + n)
    out, total, k = [], 0, 0
    while total < n:
        shape = SHAPES[k % len(SHAPES)]
        out.append(_one(fmt, shape, rng))
        total += int(np.prod(shape))
        k += 1
    return out


def stacked(fmt, n):
    """cases(fmt, n) as few large tensors: the cases of one shape stacked along a new leading axis."""
    by_shape = {}
    for w, u in cases(fmt, n):
        by_shape.setdefault(w.shape, []).append((w, u))
    return [(np.stack([w for w, _ in v]), np.stack([u for _, u in v])) for v in by_shape.values()]


def continued_draws(fmt, n):
    """1-D (w, u) of n coordinates whose exact SR draw on the default stream ties with the first word and continues
    with further Philox words: w = 1 (MX: whole blocks, so X is set by 1; NVFP4: 6 at each block's start, so S_enc =
    448, s_b = 448 and the grid is E2M1's own), and at coordinates whose first word r is below 2^23 a u with
    (|v| - 1) / spacing = (r + 1/2) / 2^32."""
    import torch
    info = INFO[fmt]
    w = np.ones(n, np.float32)
    if info["family"] == "nvfp4":
        w[::16] = 6.0
        spacing_log2 = -1  # between 1 and 1.5
    else:
        elem = info["element"]
        man = 6 if elem == "int8" else next(f for f in wbaudit.formats() if f["name"] == elem)["man_bits"]
        spacing_log2 = -man  # 1 / X = 2^emax; the element spacing at 2^emax is 2^(emax - man)
    r = torch_ops._first_words(SEED, STEP, TENSOR_ID, 0, n, torch.device("cpu")).numpy()
    idx = np.flatnonzero(r < (1 << 23))
    idx = idx[w[idx] == 1.0]
    u = np.zeros(n, np.float32)
    u[idx] = np.ldexp(2.0 * r[idx] + 1, spacing_log2 - 33).astype(np.float32)
    return w, u, idx.size
