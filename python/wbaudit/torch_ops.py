"""The write-back w_next = q_F^policy(w + u) in torch operations, on any device, bit-identical to the C++ kernels.

`writeback(w, u, fmt, ...)` takes float32 torch tensors on any device (CPU, CUDA) and returns `(w_next, counts)` equal
bit for bit (w_next) and exactly (counts) to `wbaudit.writeback` on the host copies, for every per-tensor format
(`wbaudit.formats()`), every block-scaled format (`wbaudit.block_formats()`) and every policy (nearest, stochastic
with exact or r-bit probabilities, deadzone-sr) on both SR streams (philox, philox-packed). It mirrors the C++ scalar
path operation by operation (sim/precision/rounding.hpp, writeback.hpp, rng.hpp):

- w + u is carried as the exact double-double hi + lo (Knuth's TwoSum in float64, as `exact_sum`);
- |x| is scaled by a power of two into units of the local grid spacing, the level below it and the exact remainder
  follow from floor and TwoSum (`bracket_of`, `divmod_exact`); nearest compares twice the remainder with the level
  spacing (ties to the even level);
- SR draws are the Philox4x32-10 words of rng.hpp keyed by (seed, step, tensor id, coordinate), computed with int64
  tensor operations (every 32x32-bit product split into two products below 2^48, so nothing overflows); exact SR
  consumes further words lazily exactly as `draw_below` does (a loop over rounds, never over coordinates).

Block-scaled formats (mxfp*, mxint8, each floor or rceil; nvfp4, nvfp4:2d; :skip_unchanged_blocks) follow the block
write-back (block_reference.cpp, detail/block_element.hpp): per-block scatter maxima of the exact |w + u|, |w| and
|fl32(w + u)| give the old and new scales (MX: E8M0 exponents; NVFP4: the fp32 tensor scale and E4M3 block scales, fp32
arithmetic done in float64 and rounded once), then each element is rounded at its block's new scale (MX: the element
format's exact rounding above of (w + u) / 2^E; NVFP4: on the block's decoded grid, SR in 16-bit digits) and the events
are classified by cause. Input the C++ refuses is refused by calling the C++ write-back on host copies (its message).

Only float64/int64 element-wise operations present in torch 1.13 and 2.x are used (no uint32 dtype), and
scatter_reduce's amax (torch >= 1.12) for the block maxima.

`round_tensor(x, fmt, scale=None)` rounds any real tensor to nearest (ties to even, saturating) into a format, as
`wbaudit.round(x, fmt, scale=scale)`.
"""
import functools
import math
import warnings

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
    return "blocks" in counts  # a block-scaled format


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
    and device. counts: dict of ints nonzero, erased, saturated, applied, sr_applied, sr_truncated (block formats:
    also erased_grid, erased_saturation, erased_scale, collateral, flushed, blocks, blocks_skipped, rescaled_up,
    rescaled_down; blocks run along w's last dimension). Raises ValueError (the C++ message) for NaN/inf in w or u,
    naming tensor, step and the first coordinate, and for a block out of range; ValueError for an unknown
    format/policy/sr_stream or a combination the C++ refuses; TypeError for a dtype other than float32.
    """
    block = _check(fmt, policy, int(seed), int(step), int(tensor_id), int(sr_bits), scale, tensor, sr_stream)
    _require_float32(w, "w", fmt)
    _require_float32(u, "u", fmt)
    if w.shape != u.shape:
        raise ValueError(f"shape mismatch: w has shape {tuple(w.shape)}, u {tuple(u.shape)}")
    if w.device != u.device:
        raise ValueError(f"w is on {w.device}, u on {u.device}")
    n = w.numel()
    if block:
        return _block_writeback(w, u, fmt, policy, seed, step, tensor_id, sr_bits, sr_stream, tensor, first_coordinate)
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
    (ties to even; beyond the largest finite value: saturated) into the format fmt (a block format: blockwise along
    the last dimension with the scales x implies; x must hold fp32 values); returns a float32 tensor on x's device,
    equal bit for bit to `wbaudit.round(x.numpy(), fmt, scale=scale)`. Raises ValueError for NaN/inf or an unknown
    format."""
    block = _check(fmt, "nearest", 0, 0, 0, 0, scale, "", "philox")
    xf = x.detach().reshape(-1)
    if xf.dtype in (torch.complex64, torch.complex128) or xf.dtype == torch.bool:
        raise TypeError(f"round: x has dtype {x.dtype} (expected a real tensor)")
    if block:
        return _round_blocks(x, xf, fmt)
    p = _Params(fmt, scale)
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


# ---- Block-scaled formats (block_format.hpp, detail/block_element.hpp, block_reference.cpp) -------------------------

_BLOCK_COUNT_KEYS = ("nonzero", "erased", "erased_grid", "erased_saturation", "erased_scale", "applied", "collateral",
                     "flushed", "saturated", "sr_applied", "sr_truncated", "blocks", "blocks_skipped", "rescaled_up",
                     "rescaled_down")
_SKIP = ":skip_unchanged_blocks"
_FLT_MAX = float(np.finfo(np.float32).max)
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # kE2M1Magnitudes


@functools.lru_cache(maxsize=None)
def _block_table():
    return {f["name"]: f for f in _core.block_formats()}


class _BlockParams:
    """BlockFormatParams of a block format name the C++ accepted (":floor" and ":skip_unchanged_blocks" included)."""

    def __init__(self, fmt):
        self.skip = fmt.endswith(_SKIP)
        base = fmt[:-len(_SKIP)] if self.skip else fmt
        if base.endswith(":floor"):
            base = base[:-len(":floor")]
        info = _block_table()[base]
        self.name_without_skip = base
        self.name = base + (_SKIP if self.skip else "")
        self.nvfp4 = info["family"] == "nvfp4"
        self.size = int(info["block_size"])
        self.tiles = bool(info["tiles_2d"])
        self.rceil = info["scale_rule"] == "rceil"
        self.emax = int(info["emax_elem"])
        self.max_elem = float(info["max_elem"])
        self.elem = _Params("int8", 2.0 ** -6) if info["element"] == "int8" else _Params(info["element"], None)
        self.e4m3 = _Params("e4m3", None)


def _pow2(e):
    """2^e as float64 for an int64 tensor e in [-1022, 1023]."""
    return ((e + 1023) << 52).view(torch.float64)


def _exponent(x):
    """The binary exponent of normal float64 values x > 0 (int64)."""
    return ((x.view(torch.int64) >> 52) & 0x7FF) - 1023


def _f32(x):
    """Rounds float64 values to fp32 and back: fl32 of an exact double, or of a float64 sum/product/quotient of two
    fp32 values (double rounding through float64 is innocuous for those: 53 >= 2 * 24 + 2)."""
    return x.to(torch.float32).to(torch.float64)


class _Layout:
    """The block of each coordinate (block_format.cpp's block_of_coordinate) for a tensor of `shape`."""

    def __init__(self, bp, shape):
        self.cols = int(shape[-1]) if len(shape) else 1
        n = math.prod(shape)
        self.rows = n // self.cols if self.cols else 0
        self.per_row = (self.cols + bp.size - 1) // bp.size
        groups = (self.rows + bp.size - 1) // bp.size if bp.tiles else self.rows
        self.blocks = self.per_row * groups
        self.size = bp.size
        self.tiles = bp.tiles

    def block_ids(self, start, count, device):
        i = torch.arange(start, start + count, dtype=torch.int64, device=device)
        row = torch.div(i, self.cols, rounding_mode="floor")
        col = i - row * self.cols
        group = torch.div(row, self.size, rounding_mode="floor") if self.tiles else row
        return group * self.per_row + torch.div(col, self.size, rounding_mode="floor")


def _magnitude(hi, lo):
    neg = torch.signbit(hi)
    return hi.abs(), torch.where(neg, -lo, lo)


def _scatter_max(target, ids, values):
    with warnings.catch_warnings():  # torch 1.13 calls scatter_reduce beta (an order-free max: deterministic)
        warnings.filterwarnings("ignore", message="scatter_reduce")
        target.scatter_reduce_(0, ids, values, reduce="amax", include_self=True)


class _BlockStats:
    """Per block: the exact max |w + u| (hi, lo), max |w|, max |fl32(w + u)| and whether any u != 0."""


def _block_stats(bp, layout, wf, uf, chunk):
    dev = wf.device
    s = _BlockStats()
    nb = layout.blocks
    s.vhi = torch.zeros(nb, dtype=torch.float64, device=dev)
    s.vlo = torch.full((nb,), -math.inf, dtype=torch.float64, device=dev)
    s.wmax = torch.zeros(nb, dtype=torch.float64, device=dev)
    s.v32 = torch.zeros(nb, dtype=torch.float64, device=dev)
    s.moved = torch.zeros(nb, dtype=torch.float64, device=dev)
    n = wf.numel()
    for start in range(0, n, chunk):  # the maxima of hi, |w|, |fl32(v)|, u != 0
        w, u = wf[start:start + chunk], uf[start:start + chunk]
        ids = layout.block_ids(start, w.numel(), dev)
        hi, _ = _two_sum(w.to(torch.float64), u.to(torch.float64))
        _scatter_max(s.vhi, ids, hi.abs())
        _scatter_max(s.wmax, ids, w.abs().to(torch.float64))
        _scatter_max(s.v32, ids, _f32(hi).abs())
        _scatter_max(s.moved, ids, (u != 0).to(torch.float64))
    for start in range(0, n, chunk):  # the largest lo among the elements at the block's max hi
        w, u = wf[start:start + chunk], uf[start:start + chunk]
        ids = layout.block_ids(start, w.numel(), dev)
        ah, al = _magnitude(*_two_sum(w.to(torch.float64), u.to(torch.float64)))
        _scatter_max(s.vlo, ids, torch.where(ah == s.vhi[ids], al, torch.full_like(al, -math.inf)))
    s.vlo = torch.where(s.vhi == 0, torch.zeros_like(s.vlo), s.vlo)
    return s


def _mx_exponent(bp, hi, lo):
    """mx_scale_exponent of exact magnitudes hi + lo (int64 tensor; may exceed 127: out of E8M0's range)."""
    e = _exponent(torch.where(hi == 0, torch.ones_like(hi), hi))
    at_pow2 = (hi.view(torch.int64) & _MANTISSA64) == 0
    E = e - ((lo < 0) & at_pow2).to(torch.int64) - bp.emax  # floor_log2_exact - emax_elem
    if bp.rceil:
        E = E + _dd_greater(hi, lo, bp.max_elem * _pow2(E)).to(torch.int64)
    E = torch.clamp(E, min=-127)
    return torch.where(hi == 0, torch.full_like(E, -127), E)


def _mx_in_range(bp, hi, lo, E):
    """mx_block_in_range: E <= 127 and the grid value at or above amax / 2^E, times 2^E, is a finite fp32 value."""
    Ec = torch.clamp(E, max=200)
    inv = _pow2(-Ec)
    b = _bracket(bp.elem, hi * inv, lo * inv)
    top = torch.clamp(torch.where(b.exact, b.tz, b.away), max=bp.elem.max_finite)
    return (E <= 127) & (top * _pow2(Ec) <= _FLT_MAX)


def _nvfp4_tensor_scale(amax):
    """nvfp4_tensor_scale in fp32 (a Python float)."""
    if amax == 0:
        return 1.0
    with np.errstate(over="ignore"):
        s = np.float32(2688.0) / np.float32(amax)
    return float(min(s, np.float32(_FLT_MAX)))


def _nvfp4_grid(bp, amax_b, s_enc):
    """The decoded magnitudes fl32(q_k * s_b / S_enc) of blocks with fp32 maxima amax_b (float64 tensor): [blocks, 8],
    and s_b."""
    k = float(np.float32(s_enc) * (np.float32(1.0) / np.float32(6.0)))  # fl32(S_enc * fl32(1 / 6))
    target = _f32(amax_b * k)
    b = _bracket(bp.e4m3, target, torch.zeros_like(target))
    s_b = _nearest_value(bp.e4m3, b)
    q = torch.tensor(_E2M1, dtype=torch.float64, device=amax_b.device)
    exact = q[None, :] * s_b[:, None]  # exact in fp32
    # A tensor divisor: CUDA divides by a host scalar as a product with its reciprocal (not correctly rounded).
    return _f32(exact / torch.full_like(exact, s_enc)), s_b


class _BlockScales:
    pass


def _block_scales(bp, layout, stats, wf, uf, writeback_args):
    """The old and new scale of every block, the order of their change and the old largest decoded magnitude; calls the
    C++ write-back (which raises its BlockScaleError) for a block out of range."""
    sc = _BlockScales()
    if bp.nvfp4:
        if bool(torch.isinf(stats.v32).any()):
            _raise_from_cpp(wf, uf, writeback_args)
        s_old = _nvfp4_tensor_scale(float(stats.wmax.max())) if stats.wmax.numel() else 1.0
        s_new = _nvfp4_tensor_scale(float(stats.v32.max())) if stats.v32.numel() else 1.0
        grid_old, sb_old = _nvfp4_grid(bp, stats.wmax, s_old)
        sc.grid, sb_new = _nvfp4_grid(bp, stats.v32, s_new)
        lhs, rhs = sb_new * s_old, sb_old * s_new
        sc.order = (lhs > rhs).to(torch.int64) - (lhs < rhs).to(torch.int64)
        sc.top_old = grid_old[:, 7]
        return sc
    E_new = _mx_exponent(bp, stats.vhi, stats.vlo)
    if not bool(_mx_in_range(bp, stats.vhi, stats.vlo, E_new).all()):
        _raise_from_cpp(wf, uf, writeback_args)
    E_old = _mx_exponent(bp, stats.wmax, torch.zeros_like(stats.wmax))
    sc.exp = E_new
    sc.order = (E_new > E_old).to(torch.int64) - (E_new < E_old).to(torch.int64)
    sc.top_old = bp.max_elem * _pow2(E_old)
    return sc


def _raise_from_cpp(wf, uf, args):
    """Refused input (NaN/inf, a block out of range): the C++ write-back on host copies raises with its own words."""
    fmt, policy, seed, step, tensor_id, sr_bits, first_coordinate, tensor, sr_stream, shape = args
    w = wf.detach().cpu().numpy().reshape(shape)
    u = uf.detach().cpu().numpy().reshape(shape)
    _core.writeback(w, u, fmt, policy, seed, step, tensor_id, sr_bits, None, None, first_coordinate, tensor, sr_stream)
    raise RuntimeError(f"wbaudit.torch_ops: the block write-back in {fmt} refused input the C++ write-back accepts "
                       "(a bug: please report it)")


def _block_writeback(w, u, fmt, policy, seed, step, tensor_id, sr_bits, sr_stream, tensor, first_coordinate):
    bp = _BlockParams(fmt)
    shape = tuple(w.shape)
    args = (fmt, policy, int(seed), int(step), int(tensor_id), int(sr_bits), int(first_coordinate), tensor, sr_stream,
            shape)
    wf = w.detach().reshape(-1)
    uf = u.detach().reshape(-1)
    n = wf.numel()
    if n == 0:
        out, counts = _core.writeback(np.zeros(shape, np.float32), np.zeros(shape, np.float32), fmt, policy, seed, step,
                                      tensor_id, sr_bits, None, None, first_coordinate, tensor, sr_stream)
        return torch.empty_like(w), counts
    if first_coordinate + n > (1 << 48) or not bool((torch.isfinite(wf) & torch.isfinite(uf)).all()):
        _raise_from_cpp(wf, uf, args)
    layout = _Layout(bp, shape)
    chunk = _chunk_for(w.device)
    mode = _POLICIES[policy]
    packed = sr_stream == "philox-packed"
    key = (int(seed), int(step), int(tensor_id))
    with _HostThreads(w.device):
        stats = _block_stats(bp, layout, wf, uf, chunk)
        sc = _block_scales(bp, layout, stats, wf, uf, args)
        skipped = (stats.moved == 0) if bp.skip else torch.zeros(layout.blocks, dtype=torch.bool, device=w.device)
        out = torch.empty_like(wf)
        totals = torch.zeros(11, dtype=torch.int64, device=w.device)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            ids = layout.block_ids(start, stop - start, w.device)
            vals, counts = _block_chunk(bp, sc, skipped, ids, mode, sr_bits, packed, key, first_coordinate + start,
                                        wf[start:stop], uf[start:stop])
            out[start:stop] = vals
            totals += counts
        kept = ~skipped
        tail = [layout.blocks, int(skipped.sum()), int((kept & (sc.order > 0)).sum()),
                int((kept & (sc.order < 0)).sum())]
    counts = dict(zip(_BLOCK_COUNT_KEYS, totals.tolist() + tail))
    return out.reshape(w.shape), counts


def _block_chunk(bp, sc, skipped, ids, mode, sr_bits, packed, key, first, w, u):
    """One pass of the element rounding at the blocks' new scales: (values float32, counts int64[11])."""
    wd = w.to(torch.float64)
    hi, lo = _two_sum(wd, u.to(torch.float64))
    if bp.nvfp4:
        value, saturated, random, truncated = _nvfp4_elements(sc.grid, ids, hi, lo, wd, u, mode, sr_bits, packed, key,
                                                              first)
    else:
        value, saturated, random, truncated = _mx_elements(bp, sc.exp[ids], hi, lo, wd, u, mode, sr_bits, packed, key,
                                                           first)
    kept = ~skipped[ids]
    vf = torch.where(kept, value.to(torch.float32), w)
    nonzero = (u != 0) & kept
    changed = vf != w
    erased = nonzero & ~changed
    rescaled = sc.order[ids] != 0
    outward = (wd.abs() == sc.top_old[ids]) & (((u > 0) & (w > 0)) | ((u < 0) & (w < 0)))
    collateral = ~(u != 0) & changed
    flags = [nonzero, erased, erased & ~rescaled & ~outward, erased & ~rescaled & outward, erased & rescaled,
             nonzero & changed, collateral, collateral & (w != 0) & (vf == 0), saturated & kept]
    flags.append(random & kept if random is not None else torch.zeros_like(kept))
    flags.append(truncated & kept if truncated is not None else torch.zeros_like(kept))
    return vf, torch.stack([f.sum() for f in flags])


def _mx_elements(bp, E, hi, lo, wd, u, mode, sr_bits, packed, key, first):
    """round_element for MX: the element format's rounding of v / 2^E (exact), times 2^E."""
    p = bp.elem
    X, inv = _pow2(E), _pow2(-E)
    b = _bracket(p, hi * inv, lo * inv)
    nearest = _nearest_value(p, b)
    random = truncated = None
    if mode != 0:
        use_sr = ~b.exact
        if mode == 2:
            use_sr &= (u != 0) & (nearest * X == wd)
        nearest, random, truncated = _stochastic(p, b, use_sr, nearest, sr_bits, packed, key, first)
    return nearest * X, b.saturated, random, truncated


def _nvfp4_elements(grid, ids, hi, lo, wd, u, mode, sr_bits, packed, key, first):
    """round_element for NVFP4 on the decoded grid of each element's block ids (grid_bracket, grid_nearest,
    grid_stochastic); grid: [blocks, 8]."""
    ah, al = _magnitude(hi, lo)
    negative = torch.signbit(hi)
    top = grid[:, 7][ids]
    zero_block = top == 0
    k = torch.zeros(ah.shape, dtype=torch.int64, device=ah.device)
    for j in range(1, 8):  # the grid is non-decreasing: k = #{j >= 1: |v| >= grid[j]}
        k += (~_dd_less(ah, al, grid[:, j][ids])).to(torch.int64)
    k = torch.where(zero_block, torch.zeros_like(k), k)
    flat = grid.reshape(-1)
    g_lo = flat[ids * 8 + k]
    g_hi = flat[ids * 8 + torch.clamp(k + 1, max=7)]
    saturated = _dd_greater(ah, al, top) & ~zero_block
    exact = zero_block | saturated | ((ah == g_lo) & (al == 0))
    twice_h, twice_l = 2 * ah, 2 * al
    total = g_lo + g_hi
    up = _dd_greater(twice_h, twice_l, total) | (~_dd_less(twice_h, twice_l, total) & ((k & 1) == 1))
    mag = torch.where(exact | ~up, g_lo, g_hi)
    nearest = torch.where(negative, -mag, mag)
    random = truncated = None
    if mode != 0:
        use_sr = ~exact
        if mode == 2:
            use_sr &= (u != 0) & (nearest == wd)
        idx = use_sr.nonzero().reshape(-1)
        random = torch.zeros_like(use_sr)
        truncated = torch.zeros_like(use_sr)
        if idx.numel():
            away, rnd, trunc = _grid_stochastic(ah[idx], al[idx], g_lo[idx], g_hi[idx], idx, sr_bits, packed, key,
                                                first, use_sr.numel())
            mag = torch.where(away, g_hi[idx], g_lo[idx])
            nearest = nearest.clone()
            nearest[idx] = torch.where(negative[idx], -mag, mag)
            random[idx] = rnd
            truncated[idx] = trunc
    return nearest, saturated, random, truncated


def _grid_stochastic(ah, al, g_lo, g_hi, idx, sr_bits, packed, key, first, n):
    """grid_stochastic for the coordinates first + idx: (away, random, truncated) bool tensors."""
    seed, step, tensor_id = key
    rh, rl = _two_sum(ah - g_lo, al)  # exact: Sterbenz or g_lo == 0
    gap = g_hi - g_lo
    # normalize_gap: gap = G * 2^s with G odd; rem scaled by 2^-s.
    bits = gap.view(torch.int64)
    m = (bits & _MANTISSA64) | (1 << 52)
    tz = _exponent((m & -m).to(torch.float64))
    G = (m >> tz).to(torch.float64)
    s = _exponent(gap) - 52 + tz
    scale = _pow2(-s)
    rh, rl = rh * scale, rl * scale
    coords = idx + first

    def first_draws(nbits):
        if idx.numel() * 4 >= n:
            return _first_draws(seed, step, tensor_id, first, n, nbits, packed, idx.device)[idx]
        return _draws_at(seed, step, tensor_id, coords, nbits, packed)

    if sr_bits:
        D = torch.zeros_like(idx)
        zh, zl = rh, rl
        have = 0
        while have < sr_bits:  # leading_bits: floor(rem / G * 2^r), 16 bits at a time
            take = min(16, sr_bits - have)
            f = math.ldexp(1.0, take)
            level, zh, zl = _divmod_exact(zh * f, zl * f, G, 1.0 / G)
            D = (D << take) | level.to(torch.int64)
            have += take
        R = first_draws(sr_bits)
        return R < D, D > 0, D == 0
    # draw_below_gap: 16-bit digits of U, the first word's random bits first (32: two digits; packed: its 16), then
    # the coordinate's extra words (two digits each).
    first_word = first_draws(16 if packed else 32)
    digits0 = first_word if packed else first_word >> 16
    away = torch.zeros(idx.shape, dtype=torch.bool, device=idx.device)
    pending = torch.arange(idx.numel(), device=idx.device)
    for rnd in range(96):
        if pending.numel() == 0:
            break
        if rnd == 0:
            d = digits0
        elif rnd == 1 and not packed:
            d = first_word[pending] & 0xFFFF
        else:
            t = rnd - (1 if packed else 2)  # digit t of the extra words
            word_index = t // 2
            words = _extra_words(seed, step, tensor_id, coords[pending], word_index // 4 + 1)
            word = words[word_index % 4]
            d = word >> 16 if t % 2 == 0 else word & 0xFFFF
        Gp = G[pending]
        zh, zl = rh * 65536.0, rl * 65536.0
        a = d.to(torch.float64) * Gp
        no = ~_dd_greater(zh, zl, a)
        yes = ~_dd_less(zh, zl, a + Gp)
        away[pending[yes]] = True
        more = ~no & ~yes
        rh, rl = _two_sum(zh - a, zl)
        pending, rh, rl = pending[more], rh[more], rl[more]
    return away, torch.ones_like(away), torch.zeros_like(away)


def _round_blocks(x, xf, fmt):
    """round_tensor for a block format: the write-back of x with u = 0 (the scales from x itself), every block."""
    bp = _BlockParams(fmt)
    xd = xf.to(torch.float64)
    x32 = xd.to(torch.float32)
    if not bool(torch.isfinite(xd).all()):
        _core.round(xf.cpu().numpy().reshape(tuple(x.shape)), fmt)  # raises the C++ message
    inexact = (x32.to(torch.float64) != xd).nonzero()
    if inexact.numel():
        i = int(inexact[0, 0])
        raise ValueError(f"round: x[{i}] = {float(xd[i]):f} is not an fp32 value ({bp.name} holds fp32 values; cast x "
                         "to float32 first)")
    x32 = x32.reshape(x.shape)
    out, _ = _block_writeback(x32, torch.zeros_like(x32), bp.name_without_skip, "nearest", 0, 0, 0, 0, "philox", "", 0)
    return out
