"""The write-back w_next = q_F^policy(w + u) in torch operations, on any device, bit-identical to the C++ kernels.

`writeback(w, u, fmt, ...)` takes float32 torch tensors on any device (CPU, CUDA) and returns `(w_next, counts)` equal
bit for bit (w_next) and exactly (counts) to `wbaudit.writeback` on the host copies, for every per-tensor format
(`wbaudit.formats()`) and every policy (nearest, stochastic with exact or r-bit probabilities, deadzone-sr) on both SR
streams (philox, philox-packed). It mirrors the C++ scalar path operation by operation (sim/precision/rounding.hpp,
writeback.hpp, rng.hpp):

- w + u is carried as the exact double-double hi + lo (Knuth's TwoSum in float64, as `exact_sum`);
- |x| is scaled by a power of two into units of the local grid spacing, the level below it and the exact remainder
  follow from floor and TwoSum (`bracket_of`, `divmod_exact`); nearest compares twice the remainder with the level
  spacing (ties to the even level);
- SR draws are the Philox4x32-10 words of rng.hpp keyed by (seed, step, tensor id, coordinate), computed with int64
  tensor operations (every 32x32-bit product split into two products below 2^48, so nothing overflows); exact SR
  consumes further words lazily exactly as `draw_below` does (a loop over rounds, never over coordinates).

Only float64/int64 element-wise operations present in torch 1.13 and 2.x are used (no uint32 dtype). Block-scaled
formats (mxfp*, mxint8, nvfp4) are not implemented here (NotImplementedError); use `wbaudit.writeback` on host arrays.
`round_tensor(x, fmt, scale=None)` rounds any real tensor to nearest (ties to even, saturating) into a format, as
`wbaudit.round(x, fmt, scale=scale)`.
"""
import functools
import math

import numpy as np
import torch

from . import _core

__all__ = ["writeback", "round_tensor", "philox4x32"]

_MASK32 = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
_MANTISSA64 = (1 << 52) - 1

_COUNT_KEYS = ("nonzero", "erased", "saturated", "applied", "sr_applied", "sr_truncated")
_POLICIES = {"nearest": 0, "stochastic": 1, "deadzone-sr": 2}


def _chunk_for(device):
    # Coordinates per pass: large on accelerators (few kernel launches), cache-sized on CPUs.
    return (1 << 22) if device.type != "cpu" else (1 << 16)


class _HostThreads:
    """On CPU tensors, runs torch's element-wise ops on one thread while a write-back runs (restored afterwards). A pass
    is dozens of small ops, each of which would end in a barrier of the intra-op threads; on a loaded machine a barrier
    costs a scheduler time slice (measured: 2 threads on 2 busy cores 10-100x slower than one)."""

    def __init__(self, device):
        self.active = device.type == "cpu"

    def __enter__(self):
        if self.active:
            self.saved = torch.get_num_threads()
            torch.set_num_threads(1)

    def __exit__(self, *exc):
        if self.active:
            torch.set_num_threads(self.saved)


# ---- Philox4x32-10 (Random123) in int64 tensor operations ----------------------------------------------------------

def _mulhilo(m, x):
    """(hi, lo) 32-bit halves of m * x for a Python int m < 2^32 and x (int64 tensor or int) in [0, 2^32)."""
    if isinstance(x, int):
        p = m * x
        return p >> 32, p & _MASK32
    p_hi = x * (m >> 16)  # < 2^48
    p_lo = x * (m & 0xFFFF)  # < 2^48
    t = ((p_hi & 0xFFFF) << 16) + p_lo  # < 2^49
    return (p_hi >> 16) + (t >> 32), t & _MASK32


def philox4x32(c0, c1, c2, c3, seed):
    """Philox4x32-10 of counters (c0, c1, c2, c3) (int64 tensors or Python ints in [0, 2^32)) under the key
    (seed mod 2^32, seed >> 32 mod 2^32); returns the four output words as int64 tensors/ints in [0, 2^32)."""
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    for rnd in range(10):
        if rnd:
            k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _first_words(seed, step, tensor_id, start, count, device):
    """The per-coordinate stream's first words (rng.hpp first_word) of coordinates start .. start + count - 1: word
    c % 4 of the Philox block with counter (c / 4 mod 2^32, (c >> 34) & 0x3fff, step, tensor id)."""
    g0 = start >> 2
    g1 = (start + count - 1) >> 2
    g = torch.arange(g0, g1 + 1, dtype=torch.int64, device=device)
    c1 = (g >> 32) & 0x3FFF if (g1 >> 32) else 0
    words = philox4x32(g & _MASK32, c1, step & _MASK32, tensor_id, seed)
    words = [x if torch.is_tensor(x) else torch.full_like(g, x) for x in words]
    flat = torch.stack(words, dim=1).reshape(-1)
    off = start - 4 * g0
    return flat[off:off + count]


def _first_draws(seed, step, tensor_id, start, count, bits, packed, device):
    """The first draw of coordinates start .. start + count - 1 as an int64 tensor: the top `bits` bits of the
    coordinate's first word (philox), or its r-bit share of a shared word (philox-packed, r = bits)."""
    if not packed:
        words = _first_words(seed, step, tensor_id, start, count, device)
        return words >> (32 - bits) if bits < 32 else words
    r = bits
    m = 32 // r
    j0 = start // m
    j1 = (start + count - 1) // m
    shared = _first_words(seed, step, tensor_id, j0, j1 - j0 + 1, device)
    shifts = torch.arange(m, dtype=torch.int64, device=device) * r
    chunks = ((shared[:, None] >> shifts[None, :]) & ((1 << r) - 1)).reshape(-1)
    off = start - j0 * m
    return chunks[off:off + count]


def _words_at(seed, step, tensor_id, coords):
    """The per-coordinate stream's first words at the coordinates `coords` (int64 tensor), one Philox call each."""
    c1 = (coords >> 34) & 0x3FFF
    words = philox4x32((coords >> 2) & _MASK32, c1, step & _MASK32, tensor_id, seed)
    lane = coords & 3
    out = words[3]
    for k in (2, 1, 0):
        out = torch.where(lane == k, words[k], out)
    return out


def _draws_at(seed, step, tensor_id, coords, bits, packed):
    """_first_draws for the coordinates `coords` (int64 tensor): for a few coordinates out of many."""
    if not packed:
        words = _words_at(seed, step, tensor_id, coords)
        return words >> (32 - bits) if bits < 32 else words
    m = 32 // bits
    words = _words_at(seed, step, tensor_id, torch.div(coords, m, rounding_mode="floor"))
    return (words >> (torch.remainder(coords, m) * bits)) & ((1 << bits) - 1)


def _extra_words(seed, step, tensor_id, coords, block):
    """Extra block `block` >= 1 of each coordinate's stream (rng.hpp next(): counter (c mod 2^32, 0x80000000 |
    block << 16 | (c >> 32) & 0xffff, step, tensor id)); returns its four words."""
    c1 = ((coords >> 32) & 0xFFFF) | (0x80000000 | (block << 16))
    return philox4x32(coords & _MASK32, c1, step & _MASK32, tensor_id, seed)


# ---- Exact rounding (rounding.hpp) in float64 tensor operations ----------------------------------------------------

class _Params:
    """FormatParams of format.cpp/format_params for a per-tensor format."""

    def __init__(self, name, scale):
        info = _format_table()[name]
        self.name = name
        self.integer = info["kind"] == "integer"
        self.man_bits = info["man_bits"]
        self.emin = 1 - info["bias"]
        self.min_normal = info["min_normal"]
        if self.integer:
            s = float(np.float32(1.0 if scale is None else scale))
            self.scale = s
            self.max_finite = info["max_level"] * s
            m, e = math.frexp(s)
            odd = math.ldexp(m, 53)
            k = e - 53
            while math.fmod(odd, 2.0) == 0:
                odd /= 2
                k += 1
            self.S = odd
            self.inv_S = 1.0 / odd
            self.unit = math.ldexp(1.0, k)
            self.inv_unit = 1.0 / self.unit
        else:
            self.max_finite = info["max_finite"]
            self.S = 1.0


@functools.lru_cache(maxsize=None)
def _format_table():
    return {f["name"]: f for f in _core.formats()}


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _dd_less(hi, lo, c):
    return (hi < c) | ((hi == c) & (lo < 0))


def _dd_greater(hi, lo, c):
    return (hi > c) | ((hi == c) & (lo > 0))


def _divmod_exact(zh, zl, S, inv_S):
    """level = floor(z / S), rem = z - level * S in [0, S) exactly (S = 1: inv_S is None)."""
    if inv_S is None:
        level = torch.floor(zh)
        rh, rl = _two_sum(zh - level, zl)
    else:
        level = torch.floor(zh * inv_S)
        rh, rl = _two_sum(zh - level * S, zl)
    low = _dd_less(rh, rl, 0.0)
    high = ~_dd_less(rh, rl, S)
    fix = low | high
    if bool(fix.any()):
        level = level - low.to(level.dtype) + high.to(level.dtype)
        if inv_S is None:
            rh, rl = _two_sum(zh - level, zl)
        else:
            rh, rl = _two_sum(zh - level * S, zl)
    return level, rh, rl


class _Bracket:
    pass


def _bracket(p, hi, lo):
    """bracket_of(p, hi + lo) for float64 tensors hi, lo (|lo| <= ulp(hi) / 2), element-wise: the toward-zero and
    away neighbours' magnitudes tz, away, the level of tz and the exact remainder rh + rl in [0, S)."""
    b = _Bracket()
    b.hi = hi
    ax = hi.abs()
    ae = torch.where(torch.signbit(hi), -lo, lo)
    b.saturated = _dd_greater(ax, ae, p.max_finite)
    if p.integer:
        zh = ax * p.inv_unit
        zl = ae * p.inv_unit
        level, rh, rl = _divmod_exact(zh, zl, p.S, p.inv_S)
        b.tz = (level * p.S) * p.unit
        b.away = ((level + 1) * p.S) * p.unit
        b.exact = ((rh == 0) & (rl == 0)) | b.saturated
    else:
        bits = ax.view(torch.int64)
        e = torch.clamp((bits >> 52) - 1023, min=p.emin)  # C++'s e: emin below min_normal, else the exponent
        # Binade edge: just below |x| = 2^e the spacing is half the spacing above it.
        edge = (ae < 0) & (e > p.emin) & ((bits & _MANTISSA64) == 0)
        qe = torch.where(edge, e - (p.man_bits + 1), e - p.man_bits)
        inv = ((1023 - qe) << 52).view(torch.float64)
        unit = ((1023 + qe) << 52).view(torch.float64)
        zh = ax * inv
        zl = ae * inv
        # divmod_exact with S = 1: z.hi - floor(z.hi) is exact and the remainder lies in [0, 1) except where z.hi
        # is an integer and z.lo < 0: there the level is one lower and the remainder 1 + z.lo.
        level = torch.floor(zh)
        r0 = zh - level
        low = (r0 == 0) & (zl < 0)
        level = level - low.to(torch.float64)
        r0 = r0 + low.to(torch.float64)
        rh, rl = _two_sum(r0, zl)
        b.tz = level * unit
        b.away = (level + 1) * unit
        b.exact = (rh == 0) | b.saturated  # rh == 0 implies rl == 0 (TwoSum)
    b.level, b.rh, b.rl = level, rh, rl
    return b


def _nearest_value(p, b):
    """nearest_of (signed, saturated) as float64."""
    half = 0.5 * p.S
    odd = torch.remainder(b.level, 2.0) != 0
    away = (b.rh > half) | ((b.rh == half) & ((b.rl > 0) | ((b.rl == 0) & odd)))
    mag = torch.where(away, b.away, b.tz)
    # Saturated (|x| > max finite): tz >= max finite there, so the clamp gives max finite; elsewhere mag <= max.
    return torch.copysign(torch.clamp(mag, max=p.max_finite), b.hi)


def _draw_below_first(p, rh, rl, r, bits):
    """First round of draw_below: (decided_true, pending, next_rem_hi, next_rem_lo) for draws r of `bits` bits."""
    scale = math.ldexp(1.0, bits)
    zh = rh * scale
    zl = rl * scale
    a = r.to(torch.float64) * p.S
    no = ~_dd_greater(zh, zl, a)
    yes = ~_dd_less(zh, zl, a + p.S)
    pending = ~no & ~yes
    return yes, pending, zh, zl, a


def _continue_draws(p, rh, rl, coords, key):
    """draw_below's rounds 1..47 for the (few) coordinates `coords` whose first draw tied with the remainder;
    rh, rl: the remainder after round 0. Returns the bool outcome per coordinate."""
    seed, step, tensor_id = key
    result = torch.zeros(coords.shape, dtype=torch.bool, device=coords.device)
    idx = torch.arange(coords.numel(), device=coords.device)
    words = None
    for rnd in range(1, 48):
        if idx.numel() == 0:
            break
        slot = (rnd - 1) % 4
        if slot == 0:
            words = _extra_words(seed, step, tensor_id, coords[idx], (rnd - 1) // 4 + 1)
        r = words[slot]
        zh = rh * 4294967296.0
        zl = rl * 4294967296.0
        a = r.to(torch.float64) * p.S
        no = ~_dd_greater(zh, zl, a)
        yes = ~_dd_less(zh, zl, a + p.S)
        result[idx[yes]] = True
        pending = ~no & ~yes
        rh, rl = _two_sum(zh - a, zl)
        idx, rh, rl = idx[pending], rh[pending], rl[pending]
        words = [x[pending] for x in words]
    return result


# ---- Argument checks (the C++ entry point's own, so the messages are the same) -------------------------------------

@functools.lru_cache(maxsize=256)
def _check(fmt, policy, seed, step, tensor_id, sr_bits, scale, tensor, sr_stream):
    z = np.zeros(1, np.float32)
    _, counts = _core.writeback(z, z, fmt, policy, seed, step, tensor_id, sr_bits, scale, None, 0, tensor, sr_stream)
    if "blocks" in counts:
        raise NotImplementedError(
            f"wbaudit.torch_ops: block-scaled format {fmt!r} (mxfp*, mxint8, nvfp4) is not implemented in torch "
            "operations; use wbaudit.writeback on host arrays")
    return True


def _float_text(v):
    """%.9g as C's printf writes it (glibc: nan, -nan, inf, -inf)."""
    if math.isnan(v):
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return "%.9g" % v


def _require_float32(t, what, fmt):
    if not torch.is_tensor(t):
        raise TypeError(f"{what} must be a torch tensor, not {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"{what} has dtype {t.dtype}; wbaudit needs float32 (values of {fmt} are held as float32, "
                        "proposals are fp32; a float16 tensor cannot hold bf16, e4m3 or e5m2 values exactly and a "
                        "float64 proposal would round first)")


# ---- Public functions ----------------------------------------------------------------------------------------------

def writeback(w, u, fmt, policy="nearest", seed=0, step=0, tensor_id=0, sr_bits=0, scale=None, sr_stream="philox",
              tensor="", first_coordinate=0):
    """w_next = q_fmt^policy(w + u), formed exactly, -> (w_next, counts), in torch operations on w's device.

    Equal bit for bit (w_next) and exactly (counts) to
    `wbaudit.writeback(w.numpy(), u.numpy(), fmt, policy, seed, step, tensor_id, sr_bits, scale, None,
    first_coordinate, tensor, sr_stream)`. w: float32 tensor of values of fmt; u: float32 proposals of the same shape
    and device. counts: dict of ints nonzero, erased, saturated, applied, sr_applied, sr_truncated. Raises ValueError
    (the C++ message) for NaN/inf in w or u, naming tensor, step and the first coordinate; ValueError for an unknown
    format/policy/sr_stream or a combination the C++ refuses; TypeError for a dtype other than float32;
    NotImplementedError for a block-scaled format.
    """
    _check(fmt, policy, int(seed), int(step), int(tensor_id), int(sr_bits), scale, tensor, sr_stream)
    _require_float32(w, "w", fmt)
    _require_float32(u, "u", fmt)
    if w.shape != u.shape:
        raise ValueError(f"shape mismatch: w has shape {tuple(w.shape)}, u {tuple(u.shape)}")
    if w.device != u.device:
        raise ValueError(f"w is on {w.device}, u on {u.device}")
    n = w.numel()
    if first_coordinate + n > (1 << 48):
        raise ValueError(f"writeback: coordinates up to {first_coordinate + n} exceed the RNG counter (< 2^48)")
    p = _Params(fmt, scale)
    mode = _POLICIES[policy]
    packed = sr_stream == "philox-packed"
    key = (int(seed), int(step), int(tensor_id))
    wf = w.detach().reshape(-1)
    uf = u.detach().reshape(-1)
    out = torch.empty_like(wf)
    totals = torch.zeros(7, dtype=torch.int64, device=w.device)
    chunk = _chunk_for(w.device)
    with _HostThreads(w.device):
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            vals, counts = _writeback_chunk(p, mode, sr_bits, packed, key, first_coordinate + start, wf[start:stop],
                                            uf[start:stop])
            out[start:stop] = vals
            totals += counts
    t = totals.tolist()
    if t[6] > 0:
        bad = ~(torch.isfinite(wf) & torch.isfinite(uf))
        first = int(bad.nonzero()[0, 0])
        where = f"tensor {tensor}, step {step}: " if tensor else ""
        raise ValueError(
            f"{where}writeback (tensor {tensor_id}, step {step}, format {fmt}); the coordinates with non-finite input "
            f"were left unchanged: {t[6]} non-finite value(s); first at coordinate {first}: "
            f"w = {_float_text(float(wf[first]))}, u = {_float_text(float(uf[first]))}")
    return out.reshape(w.shape), dict(zip(_COUNT_KEYS, t[:6]))


def _writeback_chunk(p, mode, sr_bits, packed, key, first, w, u):
    """One pass over coordinates first .. first + len(w) - 1: (values float32, counts int64[7]). Coordinates with
    NaN/inf input are only counted (the caller raises)."""
    wd = w.to(torch.float64)
    hi, lo = _two_sum(wd, u.to(torch.float64))
    b = _bracket(p, hi, lo)
    value = _nearest_value(p, b)
    random = truncated = None
    if mode != 0:
        use_sr = ~b.exact
        if mode == 2:
            use_sr &= (u != 0) & (value == wd)
        value = _stochastic(p, b, use_sr, value, sr_bits, packed, key, first)
        random, truncated = value[1], value[2]
        value = value[0]
    vf = value.to(torch.float32)
    nonzero = u != 0
    changed = vf != w
    flags = [nonzero, nonzero & ~changed, b.saturated, changed]
    if random is not None:
        flags.append(random)
    if truncated is not None:
        flags.append(truncated)
    sums = torch.stack([f.sum() for f in flags])  # (one sum per flag: each stays below torch's grain size)
    nonfinite = (~torch.isfinite(hi)).sum()  # hi = w + u in float64 is finite iff w and u are
    zero = torch.zeros(6 - len(flags), dtype=torch.int64, device=w.device)
    return vf, torch.cat([sums, zero, nonfinite.reshape(1)])


def _stochastic(p, b, use_sr, nearest, sr_bits, packed, key, first):
    """stochastic_of where use_sr, nearest elsewhere: (value float64, random, truncated)."""
    seed, step, tensor_id = key
    n = use_sr.numel()
    bits = (sr_bits if sr_bits else 16) if packed else (sr_bits if sr_bits else 32)
    idx = None
    if use_sr.device.type == "cpu":
        count = int(use_sr.sum())
        if count * 4 < n:  # few draws (deadzone-sr): one Philox call per drawing coordinate
            idx = use_sr.nonzero().reshape(-1)
    if idx is None:
        draws = _first_draws(seed, step, tensor_id, first, n, bits, packed, use_sr.device)
        rh, rl, tz, away = b.rh, b.rl, b.tz, b.away
    else:
        draws = _draws_at(seed, step, tensor_id, idx + first, bits, packed)
        rh, rl, tz, away = b.rh[idx], b.rl[idx], b.tz[idx], b.away[idx]
    truncated = None
    if sr_bits == 0:
        yes, pending, zh, zl, a = _draw_below_first(p, rh, rl, draws, bits)
        if idx is None:
            pending &= use_sr
        if bool(pending.any()):
            at = pending.nonzero().reshape(-1)
            crh, crl = _two_sum(zh[at] - a[at], zl[at])
            coords = (at if idx is None else idx[at]) + first
            yes[at] = _continue_draws(p, crh, crl, coords, key)
        up = yes
        random = use_sr
    else:
        two_r = math.ldexp(1.0, sr_bits)
        if p.integer:
            d, _, _ = _divmod_exact(rh * two_r, rl * two_r, p.S, p.inv_S)
        else:  # divmod_exact with S = 1, as in _bracket
            zh, zl = rh * two_r, rl * two_r
            d = torch.floor(zh)
            d = d - ((zh == d) & (zl < 0)).to(torch.float64)
        up = draws.to(torch.float64) < d
        if idx is None:
            random = use_sr & (d > 0)
            truncated = use_sr & (d == 0)
        else:
            random = torch.zeros_like(use_sr)
            truncated = torch.zeros_like(use_sr)
            random[idx] = d > 0
            truncated[idx] = d == 0
    if idx is None:
        sr_value = torch.copysign(torch.where(up, away, tz), b.hi)
        value = torch.where(use_sr, sr_value, nearest)
    else:
        value = nearest.clone()
        value[idx] = torch.copysign(torch.where(up, away, tz), b.hi[idx])
    return value, random, truncated


def round_tensor(x, fmt, scale=None):
    """Rounds every value of x (a torch tensor of any real dtype on any device, read exactly as float64) to nearest
    (ties to even; beyond the largest finite value: saturated) into the per-tensor format fmt; returns a float32
    tensor on x's device, equal bit for bit to `wbaudit.round(x.numpy(), fmt, scale=scale)`. Raises ValueError for
    NaN/inf or an unknown format, NotImplementedError for a block-scaled format."""
    _check(fmt, "nearest", 0, 0, 0, 0, scale, "", "philox")
    p = _Params(fmt, scale)
    xf = x.detach().reshape(-1)
    if xf.dtype in (torch.complex64, torch.complex128) or xf.dtype == torch.bool:
        raise TypeError(f"round: x has dtype {x.dtype} (expected a real tensor)")
    out = torch.empty(xf.shape, dtype=torch.float32, device=x.device)
    chunk = _chunk_for(x.device)
    with _HostThreads(x.device):
        _round_chunks(p, xf, out, chunk)
    return out.reshape(x.shape)


def _round_chunks(p, xf, out, chunk):
    for start in range(0, xf.numel(), chunk):
        xd = xf[start:start + chunk].to(torch.float64)
        bad = ~torch.isfinite(xd)
        if bool(bad.any()):
            i = start + int(bad.nonzero()[0, 0])
            raise ValueError(f"round: non-finite value at index {i} (NaN/inf are not rounded)")
        b = _bracket(p, xd, torch.zeros_like(xd))
        out[start:start + chunk] = _nearest_value(p, b).to(torch.float32)
