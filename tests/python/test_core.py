"""wbaudit's Python functions against plain-Python references (exact fractions over the format's values) on random
and adversarial inputs, and the Python write-back against the C++ CLI's scalar write-back bitwise under SR."""
import math
import re
import subprocess
from fractions import Fraction

import numpy as np
import pytest

import wbaudit
from reference import Table, adversarial, f32

FLOATING = ["bf16", "e5m2", "e4m3", "e3m2", "e2m3", "e2m1"]


@pytest.mark.parametrize("fmt", FLOATING)
def test_round_nearest_equals_fraction_reference(fmt):
    t = Table(fmt)
    rng = np.random.default_rng(1)
    scale = float(t.max)
    x = np.concatenate([adversarial(t, rng), f32(rng.standard_normal(2000) * scale / 4),
                        f32(rng.standard_normal(500) * float(t.values[1]) * 8)])
    got = wbaudit.round(x, fmt)
    assert got.dtype == np.float32 and got.shape == x.shape
    for xi, gi in zip(x, got):
        assert Fraction(float(gi)) == t.nearest(Fraction(float(xi))), (fmt, float(xi))


def weights_and_gaps(t, fmt, rng):
    """600 adversarial and 600 normal weights stored in t's format, and the gap between each weight's neighbours
    (exact, from the Fraction table; 1 where the weight is a value itself with no gap above)."""
    w = wbaudit.round(np.concatenate([adversarial(t, rng)[:600], f32(rng.standard_normal(600))]), fmt)
    gaps = np.array([float(t.neighbours(Fraction(float(v)))[1] - t.neighbours(Fraction(float(v)))[0]) or 1.0
                     for v in np.abs(w)])
    return w, gaps


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1", "bf16"])
@pytest.mark.parametrize("policy", ["nearest", "stochastic", "deadzone-sr"])
def test_writeback_equals_fraction_reference(fmt, policy):
    t = Table(fmt)
    rng = np.random.default_rng(2)
    w, gaps = weights_and_gaps(t, fmt, rng)
    # proposals around the gap: exact half gaps (ties), just below / above them, tiny, large, zero
    kind = rng.integers(0, 6, size=w.size)
    u = np.where(kind == 0, gaps / 2, np.where(kind == 1, gaps / 2 * (1 - 2.0 ** -20),
                 np.where(kind == 2, gaps / 2 * (1 + 2.0 ** -20), np.where(kind == 3, gaps * 2.0 ** -30,
                 np.where(kind == 4, rng.standard_normal(w.size) * float(t.max) / 8, 0.0)))))
    u = f32(u * np.where(rng.random(w.size) < 0.5, -1, 1))
    w_next, counts = wbaudit.writeback(w, u, fmt, policy, seed=9, step=4, tensor_id=2)
    erased = nonzero = applied = saturated = 0
    for wi, ui, ni in zip(w, u, w_next):
        x = Fraction(float(wi)) + Fraction(float(ui))
        nearest = t.nearest(x)
        sr = policy == "stochastic" or (policy == "deadzone-sr" and ui != 0 and nearest == Fraction(float(wi)))
        allowed = t.sr_candidates(x) if sr else {nearest}
        assert Fraction(float(ni)) in allowed, (fmt, policy, float(wi), float(ui), float(ni))
        nonzero += ui != 0
        erased += ui != 0 and ni == wi
        applied += ni != wi
        saturated += abs(x) > t.max
    assert counts["nonzero"] == nonzero and counts["erased"] == erased
    assert counts["applied"] == applied and counts["saturated"] == saturated


def test_stochastic_probabilities_follow_the_distance():
    # 1 + 3/8 gap between 1 and 1.125 in e4m3: P(up) = 3/8 exactly; 20000 independent coordinates.
    n = 20000
    w = np.ones(n, dtype=np.float32)
    u = np.full(n, 0.125 * 3 / 8, dtype=np.float32)
    w_next, counts = wbaudit.writeback(w, u, "e4m3", "stochastic", seed=1)
    up = int(np.sum(w_next == np.float32(1.125)))
    assert set(np.unique(w_next)) <= {np.float32(1), np.float32(1.125)}
    # binomial sd = sqrt(n p (1-p)) ~ 68: 5 sd
    assert abs(up - n * 3 / 8) < 5 * (n * 3 / 8 * 5 / 8) ** 0.5
    assert counts["erased"] == n - up and counts["sr_applied"] == n


def binomial_tolerance(n, p, delta=1e-9):
    """t with P(|k - n p| >= t) <= delta for k ~ Binomial(n, p), from Bernstein's inequality
    2 exp(-t^2 / (2 (n p (1 - p) + t / 3))) = delta: about 6.5 sd for moderate p, and still a bound for p near 0 or 1,
    where a normal 5 sd is not. (The draws are keyed by the seeds, so a run is deterministic; the bound makes the
    test independent of which seeds are used.)"""
    L = math.log(2 / delta)
    return L / 3 + math.sqrt((L / 3) ** 2 + 2 * L * n * p * (1 - p))


def sr_points(t, rng):
    """float64 points (round reads them exactly): random positions between random neighbours (not dyadic in the
    gap), just above a grid value (P(away) ~ 2^-10) and just below the next one, between 0 and the smallest
    subnormal, points on the grid, beyond the largest finite value; both signs."""
    xs = []
    for i in rng.choice(len(t.values) - 1, size=4, replace=False):
        lo, hi = t.values[i], t.values[i + 1]
        xs.append(float(lo + (hi - lo) * Fraction(float(rng.random()))))
    lo, hi = t.values[len(t.values) // 2], t.values[len(t.values) // 2 + 1]
    xs += [float(lo + (hi - lo) / 1024), float(hi - (hi - lo) / 1024), float(t.values[1] * Fraction(3, 10))]
    xs += [float(t.values[5]), float(t.values[len(t.values) // 3]), float(t.max), float(t.max) * 1.5]
    return xs + [-x for x in xs]


def sr_draws(xs, fmt, seeds=200, copies=100, **kw):
    """[len(xs), seeds * copies] float64: stochastic round of every x under seeds 0..seeds-1, `copies` coordinates
    of each x per call (independent draws keyed by (seed, step 0, tensor 0, coordinate)); few calls, so the test
    stays fast when other processes hold the cores (each call is a parallel kernel launch)."""
    x = np.repeat(np.array(xs, dtype=np.float64), copies)
    got = np.stack([wbaudit.round(x, fmt, "stochastic", seed=seed, **kw) for seed in range(seeds)])
    return got.reshape(seeds, len(xs), copies).transpose(1, 0, 2).reshape(len(xs), -1).astype(np.float64)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1", "bf16"])
def test_round_stochastic_equals_fraction_reference(fmt):
    # For every draw the result is one of the two neighbours of x over the format's values (x itself when x is
    # representable; the largest finite value beyond it), and over the draws P(away from zero) = (|x| - lo) / (hi - lo).
    t = Table(fmt)
    xs = sr_points(t, np.random.default_rng(11))
    got = sr_draws(xs, fmt)
    for x, row in zip(xs, got):
        xf = Fraction(x)
        lo, hi = t.neighbours(xf)
        s = -1 if x < 0 else 1
        assert np.all((row == float(s * lo)) | (row == float(s * hi))), (fmt, x, set(row) - {s * lo, s * hi})
        if lo == hi:
            assert np.all(row == (x if abs(xf) <= t.max else float(s * t.max))), (fmt, x)
            continue
        p = (abs(xf) - lo) / (hi - lo)
        away = int(np.sum(row == float(s * hi)))
        tolerance = binomial_tolerance(row.size, float(p))
        assert abs(away - row.size * float(p)) <= tolerance, (fmt, x, float(p), away / row.size)
    assert np.array_equal(sr_draws(xs, fmt, seeds=3), got[:, :3 * 100])  # the draws are a function of the key


@pytest.mark.parametrize("fmt", ["e4m3", "bf16"])
@pytest.mark.parametrize("r_bits", [1, 3, 8])
def test_round_r_bit_stochastic_equals_fraction_reference(fmt, r_bits):
    # r-bit SR (docs/formats.md): D = floor(f * 2^r) of the discarded fraction f = (|x| - lo) / (hi - lo),
    # P(away) = D / 2^r; the result is always one of the two neighbours, the toward-zero one in the dead zone D = 0.
    t = Table(fmt)
    xs = sr_points(t, np.random.default_rng(12))
    lo, hi = t.values[100], t.values[101]
    xs += [float(lo + (hi - lo) * Fraction(3, 10)), float(lo + (hi - lo) / 2 ** (r_bits + 1))]  # D/2^r != f; D = 0
    for x, row in zip(xs, sr_draws(xs, fmt, sr_bits=r_bits)):
        xf = Fraction(x)
        lo, hi = t.neighbours(xf)
        s = -1 if x < 0 else 1
        assert np.all((row == float(s * lo)) | (row == float(s * hi))), (fmt, r_bits, x)
        if lo == hi:
            continue
        p = Fraction(math.floor((abs(xf) - lo) / (hi - lo) * 2 ** r_bits), 2 ** r_bits)
        away = int(np.sum(row == float(s * hi)))
        if p == 0:
            assert away == 0, (fmt, r_bits, x)
        else:
            tolerance = binomial_tolerance(row.size, float(p))
            assert abs(away - row.size * float(p)) <= tolerance, (fmt, r_bits, x, float(p), away / row.size)


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1", "bf16"])
@pytest.mark.parametrize("r_bits", [1, 3, 8, 32])
def test_writeback_r_bit_stochastic_gives_a_neighbour(fmt, r_bits):
    t = Table(fmt)
    rng = np.random.default_rng(13)
    w, gaps = weights_and_gaps(t, fmt, rng)
    # proposals of a random fraction of the gap, inside the r-bit dead zone, tiny, large, zero; both signs
    kind = rng.integers(0, 5, size=w.size)
    u = np.where(kind == 0, gaps * rng.random(w.size), np.where(kind == 1, gaps * 2.0 ** -(r_bits + 1),
                 np.where(kind == 2, gaps * 2.0 ** -30, np.where(kind == 3, rng.standard_normal(w.size) *
                                                                  float(t.max) / 8, 0.0))))
    u = f32(u * np.where(rng.random(w.size) < 0.5, -1, 1))
    for seed in (1, 2):
        w_next, _ = wbaudit.writeback(w, u, fmt, "stochastic", seed=seed, step=3, tensor_id=1, sr_bits=r_bits)
        for wi, ui, ni in zip(w, u, w_next):
            x = Fraction(float(wi)) + Fraction(float(ui))
            assert Fraction(float(ni)) in t.sr_candidates(x), (fmt, r_bits, float(wi), float(ui), float(ni))
            lo, hi = t.neighbours(x)
            if lo != hi and (abs(x) - lo) / (hi - lo) * 2 ** r_bits < 1:  # the dead zone: toward zero
                assert abs(Fraction(float(ni))) == lo, (fmt, r_bits, float(wi), float(ui), float(ni))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "bf16"])
def test_project_equals_recount(fmt):
    t = Table(fmt)
    rng = np.random.default_rng(3)
    w = f32(rng.standard_normal(3000))  # fp32 reference weights, not on the grid
    w[:50] = 0
    u = f32(rng.standard_normal(3000) * 2.0 ** rng.uniform(-14, -2, 3000))
    u[50:100] = 0
    r = wbaudit.project(w, u, [fmt])
    erased = sum(1 for wi, ui in zip(w, u)
                 if ui != 0 and t.nearest(t.nearest(Fraction(float(wi))) + Fraction(float(ui))) ==
                 t.nearest(Fraction(float(wi))))
    assert r["erased"][fmt] == erased
    assert r["nonzero"] == int(np.sum(u != 0))
    assert r["zero_weight"] == int(np.sum((u != 0) & (w == 0)))
    # the histogram: d = floor(log2|w|) - log2|u| in 1/8 binades from -16, 512 bins, clamped
    hist = np.zeros(512, dtype=np.int64)
    for wi, ui in zip(w, u):
        if ui != 0 and wi != 0:
            d = (np.frexp(np.float64(wi))[1] - 1) - np.log2(abs(np.float64(ui)))
            hist[min(max(int(np.floor((d + 16) / 0.125)), 0), 511)] += 1
    assert np.array_equal(r["ratio_histogram"], hist)


@pytest.mark.parametrize("fmt", FLOATING)
def test_project_read_from_the_margin_histogram_equals_recount(fmt):
    # with joint=True the erased counts at s = 1 are read from the margin histogram (sim/trace/margin_readout.hpp):
    # against exact fractions on ties at both neighbours' midpoints (and one ulp off), max finite with u outward and
    # inward, zeros and subnormals; and equal to the explicit pass (joint=False)
    t = Table(fmt)
    rng = np.random.default_rng(5)
    grid = adversarial(t, rng, n=300)
    w = np.concatenate([np.repeat(grid, 6), f32(rng.standard_normal(3000))])
    gaps = [float(t.values[i + 1] - t.values[i]) for i in rng.choice(len(t.values) - 1, 100)]
    halves = f32([g / 2 for g in gaps] + [g for g in gaps])
    u = np.concatenate([np.tile(np.concatenate([halves, -halves, np.nextafter(halves, np.float32(0))]),
                                len(w) // (3 * len(halves)) + 1)[:len(grid) * 6],
                        f32(rng.standard_normal(3000) * 2.0 ** rng.uniform(-14, -2, 3000))])
    u[::37] = 0
    q = {float(wi): t.nearest(Fraction(float(wi))) for wi in np.unique(w)}
    erased = sum(1 for wi, ui in zip(w, u) if ui != 0 and t.nearest(q[float(wi)] + Fraction(float(ui))) == q[float(wi)])
    r = wbaudit.project(w, u, [fmt], joint=True, init_absmax=1.0)
    assert 0 < erased < int(np.sum(u != 0))
    assert r["erased"][fmt] == erased
    assert wbaudit.project(w, u, [fmt])["erased"][fmt] == erased


def test_int_format_projection_uses_the_scale():
    w = f32([0.3, -0.7, 0.0, 1.0])
    u = f32([0.01, 0.2, 0.1, -0.5])
    scale = wbaudit.int_scale_for_absmax(4, 1.0)
    r = wbaudit.project(w, u, [("int4", scale)], histogram=False)
    levels = [Fraction(float(np.float32(scale))) * n for n in range(-7, 8)]

    def q(x):
        x = Fraction(x)
        best = min(levels, key=lambda v: (abs(v - x), (v / Fraction(float(np.float32(scale)))) % 2))
        return best

    expected = sum(1 for wi, ui in zip(w, u) if ui != 0 and q(q(float(wi)) + Fraction(float(ui))) == q(float(wi)))
    assert r["erased"]["int4"] == expected
    # the same scale as the margin histogram's intK (init_absmax 1.0): read from the histogram, the same count
    joint = wbaudit.project(w, u, [("int4", scale)], histogram=False, joint=True, init_absmax=1.0)
    assert joint["erased"]["int4"] == expected


def test_python_and_cpp_writebacks_agree_bitwise_under_sr(wbaudit_exe, tmp_path):
    # `wbaudit round --update U --policy stochastic --seed S --step T --tensor K` writes back w = q(value) with
    # proposal U through the C++ scalar path with key (S, T, K) and coordinate = line index; the Python call runs
    # the kernel. Several keys, so that a key whose parts were swapped or dropped on either side shows.
    import json
    rng = np.random.default_rng(4)
    w = wbaudit.round(f32(rng.standard_normal(300)), "e4m3")
    u = np.float32(0.0137)
    results = {}
    for step, tensor in ((0, 0), (5, 3), (3, 5), (123456789, 7)):
        for r_bits in (0, 3):
            res = subprocess.run([wbaudit_exe, "round", "--format", "e4m3", "--policy", "stochastic", "--seed", "77",
                                  "--step", str(step), "--tensor", str(tensor), "--sr-bits", str(r_bits), "--update",
                                  repr(float(u)), "--json"],
                                 input="\n".join(repr(float(v)) for v in w), capture_output=True, text=True, check=True)
            cpp = f32([float(row["update"]["result"]) for row in json.loads(res.stdout)["values"]])
            py, _ = wbaudit.writeback(w, np.full(w.size, u, dtype=np.float32), "e4m3", "stochastic", seed=77,
                                      step=step, tensor_id=tensor, sr_bits=r_bits)
            assert np.array_equal(py.view(np.uint32), cpp.view(np.uint32)), (step, tensor, r_bits)
            results[(step, tensor, r_bits)] = py
    # The keys draw differently: (5, 3) and (3, 5) are not the same stream.
    assert not np.array_equal(results[(5, 3, 0)], results[(3, 5, 0)])
    assert not np.array_equal(results[(0, 0, 0)], results[(123456789, 7, 0)])


def test_audit_finds_planted_and_replays_sr():
    rng = np.random.default_rng(5)
    w = wbaudit.round(f32(rng.standard_normal(1000)), "e4m3")
    u = f32(rng.standard_normal(1000) * 0.05)
    w_next, _ = wbaudit.writeback(w, u, "e4m3", "stochastic", seed=5, step=3, tensor_id=1)
    ok = wbaudit.audit(w, u, w_next, "e4m3", "stochastic", seed=5, step=3, tensor_id=1)
    assert ok["consistent"] and ok["inconsistent"] == []
    bad = w_next.copy()
    bad[10] = np.nextafter(bad[10], np.float32(np.inf))  # off the grid
    r = wbaudit.audit(w, u, bad, "e4m3", "stochastic")
    assert [c["index"] for c in r["inconsistent"]] == [10]
    assert "not representable" in r["inconsistent"][0]["reason"]
    # with a different seed, replayed SR outcomes differ somewhere
    assert not wbaudit.audit(w, u, w_next, "e4m3", "stochastic", seed=6, step=3, tensor_id=1)["consistent"]


def test_in_place_writeback_does_not_copy():
    w = wbaudit.round(f32(np.linspace(-2, 2, 1000)), "e4m3")
    u = f32(np.full(1000, 0.3))
    expected, _ = wbaudit.writeback(w, u, "e4m3")
    out, _ = wbaudit.writeback(w, u, "e4m3", out=w)
    assert out is w and np.array_equal(w, expected)


def test_bad_input_raises_with_the_message():
    w = f32([1.0, 2.0])
    with pytest.raises(TypeError, match="float16"):
        wbaudit.writeback(w.astype(np.float16), f32([0, 0]), "bf16")
    with pytest.raises(TypeError, match="float64"):
        wbaudit.writeback(w, np.zeros(2), "bf16")
    with pytest.raises(ValueError, match="shape mismatch"):
        wbaudit.writeback(w, f32([0.0]), "e4m3")
    with pytest.raises(ValueError, match="unknown format \"e4m4\""):
        wbaudit.round(w, "e4m4")
    with pytest.raises(ValueError, match="tensor fc.weight, step 7.*nan"):
        wbaudit.writeback(w, f32([np.nan, 0]), "e4m3", step=7, tensor="fc.weight")
    with pytest.raises(ValueError, match="non-finite"):
        wbaudit.round(f32([np.inf]), "e4m3")
    with pytest.raises(ValueError, match="policy"):
        wbaudit.writeback(w, f32([0, 0]), "e4m3", "sometimes")


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_proposal_is_refused_naming_value_and_coordinate(bad):
    w = wbaudit.round(f32([1.0, 2.0, 0.5, -3.0]), "e4m3")
    u = f32([0.3, 0.0, bad, 0.3])
    where = rf"coordinate 2: w = 0\.5, u = {re.escape(repr(float(bad)))}(,|$)"  # inf, -inf, nan
    for policy in ("nearest", "stochastic"):
        with pytest.raises(ValueError, match=where):
            wbaudit.writeback(w, u, "e4m3", policy, seed=1)
        with pytest.raises(ValueError, match=r"^tensor fc\.weight, step 7: .*" + where):
            wbaudit.writeback(w, u, "e4m3", policy, seed=1, step=7, tensor="fc.weight")
        with pytest.raises(ValueError, match=where):
            wbaudit.audit(w, u, w.copy(), "e4m3", policy)
        with pytest.raises(ValueError, match=r"^tensor fc\.weight, step 7: .*" + where):
            wbaudit.audit(w, u, w.copy(), "e4m3", policy, step=7, tensor="fc.weight")
    inplace = w.copy()
    with pytest.raises(ValueError, match=where):
        wbaudit.writeback(inplace, u, "e4m3", out=inplace)
    # Nothing partially written: the finite coordinates (0.3 on 1.0 is applied by e4m3 nearest) are left as they were.
    assert np.array_equal(inplace, w)
    out = np.full_like(w, 7.0)
    with pytest.raises(ValueError, match=where):
        wbaudit.writeback(w, u, "e4m3", out=out)
    assert np.all(out == 7.0)


def test_trace_round_trip(tmp_path):
    trace = {"mode": "target", "format": "e4m3", "policy": "nearest", "seed": 3, "steps": 5, "config_json": "{}",
             "recorded_steps": np.array([0, 4]), "loss": np.array([1.0, 0.5]), "learning_rate": np.array([0.1, 0.1]),
             "groups": {"fc.weight": {"tensor_id": 0, "size": 10, "nonzero": np.array([10, 9]),
                                      "erased": np.array([2, 3]), "saturated": np.array([0, 0]),
                                      "applied": np.array([8, 6]), "erased_fraction": np.array([0.2, 1 / 3])}}}
    path = tmp_path / "trace.h5"
    wbaudit.write_trace(str(path), trace)
    back = wbaudit.read_trace(str(path))
    assert back["schema"] == "wbaudit.trace/2" and back["mode"] == "target"
    assert list(back["groups"]["fc.weight"]["erased"]) == [2, 3]
    with pytest.raises(RuntimeError, match="other.h5: unsupported trace schema \"someone.else/1\""):
        import h5py
        with h5py.File(tmp_path / "other.h5", "w") as f:
            f.attrs["schema"] = "someone.else/1"
        wbaudit.read_trace(str(tmp_path / "other.h5"))
