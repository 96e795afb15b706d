"""The named SR stream option (sr_stream="philox" | "philox-packed") of round, writeback and audit, against an
independent NumPy Philox4x32-10 (checked on Random123's known-answer vectors) and the layout of sim/precision/rng.hpp:
coordinate c's r-bit draw under philox-packed is bits (c mod m) * r .. + r - 1 of the per-coordinate stream's first
word of coordinate floor(c / m), m = floor(32 / r); under philox it is the top r bits of c's own first word."""
import json
import math

import h5py
import numpy as np
import pytest
import torch

import wbaudit
from wbaudit.torch import PersistentNative

MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(ctr, key):
    """Philox4x32-10 on arrays: ctr = 4 uint32 arrays (broadcastable), key = 2 uint32 scalars; returns 4 arrays."""
    c = [np.asarray(x, dtype=np.uint64) & MASK32 for x in ctr]
    k0, k1 = np.uint64(key[0]) & MASK32, np.uint64(key[1]) & MASK32
    for rnd in range(10):
        if rnd:
            k0 = (k0 + np.uint64(0x9E3779B9)) & MASK32
            k1 = (k1 + np.uint64(0xBB67AE85)) & MASK32
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & MASK32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & MASK32]
    return c


def test_reference_philox_matches_random123_known_answers():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in kat:
        assert [int(x) for x in philox4x32_10(ctr, key)] == list(want)


def first_words(seed, step, tensor_id, coords):
    """The per-coordinate (philox) stream's first 32-bit word of each coordinate (rng.hpp)."""
    c = np.asarray(coords, dtype=np.uint64)
    block = philox4x32_10((c >> np.uint64(2), (c >> np.uint64(34)) & np.uint64(0x3FFF),
                           np.full(c.shape, step, np.uint64), np.full(c.shape, tensor_id, np.uint64)),
                          (seed & 0xFFFFFFFF, seed >> 32))
    lane = (c & np.uint64(3)).astype(np.int64)
    return np.choose(lane, block).astype(np.uint64)


def r_bit_draws(stream, r, seed, step, tensor_id, coords):
    """The r-bit SR draw (an integer in [0, 2^r)) of each coordinate under the named stream."""
    c = np.asarray(coords, dtype=np.uint64)
    if stream == "philox":
        return first_words(seed, step, tensor_id, c) >> np.uint64(32 - r)
    m = np.uint64(32 // r)
    word = first_words(seed, step, tensor_id, c // m)
    return (word >> ((c % m) * np.uint64(r))) & np.uint64((1 << r) - 1)


def bf16_cases(rng, n):
    """w = +-1 (bf16; gap above |w| = 2^-7) and u = +-m 2^-23 with m in [1, 2^16): w + u is exact in fp32 and its
    discarded fraction of the gap is m / 2^16, so r-bit SR rounds away from zero iff draw < floor(m / 2^(16 - r))."""
    m = rng.integers(1, 1 << 16, size=n)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    w = (sign * 1.0).astype(np.float32)
    u = (sign * m * 2.0 ** -23).astype(np.float32)
    return w, u, m


def expected_bf16(w, m, draws, r):
    away = draws.astype(np.int64) < (m >> (16 - r))
    return np.where(away, w * (1 + 2.0 ** -7), w).astype(np.float32)


@pytest.mark.parametrize("stream", ["philox", "philox-packed"])
@pytest.mark.parametrize("r", [1, 3, 5, 8, 11, 16])
def test_writeback_r_bit_sr_equals_the_numpy_reference_bitwise(stream, r):
    rng = np.random.default_rng(100 + r)
    n = 3000
    w, u, m = bf16_cases(rng, n)
    seed, step, tensor_id, first = (0x1234_5678_9ABC_DEF1, 77, 5, (1 << 34) + 13)  # key and counter high words used
    got, counts = wbaudit.writeback(w, u, "bf16", "stochastic", seed=seed, step=step, tensor_id=tensor_id, sr_bits=r,
                                    first_coordinate=first, sr_stream=stream)
    coords = np.arange(n, dtype=np.uint64) + np.uint64(first)
    want = expected_bf16(w, m, r_bit_draws(stream, r, seed, step, tensor_id, coords), r)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert counts["sr_truncated"] == int(np.sum((m >> (16 - r)) == 0))
    # deadzone-sr takes the same draws where nearest would erase the proposal (every case here: |u| < gap / 2)
    dz, _ = wbaudit.writeback(w, u, "bf16", "deadzone-sr", seed=seed, step=step, tensor_id=tensor_id, sr_bits=r,
                              first_coordinate=first, sr_stream=stream)
    small = m < (1 << 15)
    np.testing.assert_array_equal(dz[small].view(np.uint32), want[small].view(np.uint32))


def test_writeback_exact_sr_from_packed_16_bit_draws_equals_the_numpy_reference_bitwise():
    # exact SR (sr_bits 0) under philox-packed: coordinate c's first 16 random bits are bits (c mod 2) * 16 .. of the
    # philox stream's first word of coordinate floor(c / 2); here frac = m / 2^16 has 16 bits, so those decide:
    # away iff draw < m (further bits are drawn only at draw == floor(frac * 2^16) with frac * 2^16 not an integer)
    rng = np.random.default_rng(404)
    n = 3000
    w, u, m = bf16_cases(rng, n)
    seed, step, tensor_id, first = (0x0DDB_A11C_AFE0_0001, 12, 9, (1 << 35) + 7)
    got, _ = wbaudit.writeback(w, u, "bf16", "stochastic", seed=seed, step=step, tensor_id=tensor_id, sr_bits=0,
                               first_coordinate=first, sr_stream="philox-packed")
    coords = np.arange(n, dtype=np.uint64) + np.uint64(first)
    want = expected_bf16(w, m, r_bit_draws("philox-packed", 16, seed, step, tensor_id, coords), 16)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    default, _ = wbaudit.writeback(w, u, "bf16", "stochastic", seed=seed, step=step, tensor_id=tensor_id, sr_bits=0,
                                   first_coordinate=first)
    assert np.any(default != got)  # another stream: other draws


@pytest.mark.parametrize("stream", ["philox", "philox-packed"])
def test_round_r_bit_sr_equals_the_numpy_reference_bitwise(stream):
    rng = np.random.default_rng(7)
    n, r, seed = 2000, 8, 31
    w, u, m = bf16_cases(rng, n)
    x = w.astype(np.float64) + u.astype(np.float64)
    got = wbaudit.round(x, "bf16", "stochastic", seed=seed, sr_bits=r, step=2, tensor_id=9, sr_stream=stream)
    want = expected_bf16(w, m, r_bit_draws(stream, r, seed, 2, 9, np.arange(n, dtype=np.uint64)), r)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_default_stream_is_unchanged_by_naming_it():
    rng = np.random.default_rng(3)
    w = wbaudit.round(rng.standard_normal(5000).astype(np.float32), "e4m3")
    u = (rng.standard_normal(5000) * 0.05).astype(np.float32)
    for policy, r in (("stochastic", 0), ("stochastic", 8), ("deadzone-sr", 3), ("nearest", 0)):
        a, ca = wbaudit.writeback(w, u, "e4m3", policy, seed=4, step=1, tensor_id=2, sr_bits=r)
        b, cb = wbaudit.writeback(w, u, "e4m3", policy, seed=4, step=1, tensor_id=2, sr_bits=r, sr_stream="philox")
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
        assert ca == cb
        if policy != "deadzone-sr":
            x = w.astype(np.float64) + u
            np.testing.assert_array_equal(wbaudit.round(x, "e4m3", policy, seed=4, sr_bits=r),
                                          wbaudit.round(x, "e4m3", policy, seed=4, sr_bits=r, sr_stream="philox"))


def test_packed_stream_differs_from_philox_where_sr_draws():
    n = 4096
    w = np.ones(n, np.float32)
    u = np.full(n, float.fromhex("0x1.8p-9"), np.float32)
    a, ca = wbaudit.writeback(w, u, "bf16", "stochastic", seed=1, sr_bits=8)
    b, cb = wbaudit.writeback(w, u, "bf16", "stochastic", seed=1, sr_bits=8, sr_stream="philox-packed")
    assert ca["sr_applied"] == cb["sr_applied"] == n
    assert np.count_nonzero(a != b) > n // 4  # independent draws at p = 0.375 differ with probability 0.47
    # nearest-only coordinates (no draw) are the same under either stream
    v = np.full(n, float.fromhex("0x1p-7"), np.float32)  # exactly one gap: no rounding, no draw
    np.testing.assert_array_equal(
        wbaudit.writeback(w, v, "bf16", "stochastic", seed=1, sr_bits=8)[0],
        wbaudit.writeback(w, v, "bf16", "stochastic", seed=1, sr_bits=8, sr_stream="philox-packed")[0])


def test_packed_round_up_frequency_is_the_probability():
    n, p = 1 << 16, 0.375
    w = np.ones(n, np.float32)
    u = np.full(n, float.fromhex("0x1.8p-9"), np.float32)  # 0.375 of bf16's gap 2^-7 above 1
    got, counts = wbaudit.writeback(w, u, "bf16", "stochastic", seed=2026, step=3, tensor_id=1, sr_bits=8,
                                    sr_stream="philox-packed")
    assert set(np.unique(got).tolist()) <= {1.0, 1.0 + 2.0 ** -7}
    freq = np.count_nonzero(got > 1) / n
    assert abs(freq - p) <= 6 * math.sqrt(p * (1 - p) / n), freq
    assert counts["applied"] == np.count_nonzero(got > 1) and counts["sr_truncated"] == 0


def test_audit_replays_the_named_stream():
    rng = np.random.default_rng(5)
    w, u, _ = bf16_cases(rng, 4000)
    nxt, _ = wbaudit.writeback(w, u, "bf16", "stochastic", seed=8, step=6, tensor_id=3, sr_bits=8,
                               sr_stream="philox-packed")
    ok = wbaudit.audit(w, u, nxt, "bf16", "stochastic", sr_bits=8, seed=8, step=6, tensor_id=3,
                       sr_stream="philox-packed")
    assert ok["consistent"], ok["inconsistent"][:3]
    wrong = wbaudit.audit(w, u, nxt, "bf16", "stochastic", sr_bits=8, seed=8, step=6, tensor_id=3)
    assert not wrong["consistent"]
    # without a seed both streams allow either neighbour
    assert wbaudit.audit(w, u, nxt, "bf16", "stochastic", sr_bits=8)["consistent"]


@pytest.mark.parametrize("call", ["writeback", "round", "audit"])
@pytest.mark.parametrize("policy,r,stream,needle", [
    ("stochastic", 8, "nope", "nope"),
    ("stochastic", 8, "", '""'),
    ("stochastic", 17, "philox-packed", "philox-packed"),
    ("nearest", 0, "philox-packed", "philox-packed"),
])
def test_bad_streams_raise_value_error_naming_the_value(call, policy, r, stream, needle):
    w = np.ones(8, np.float32)
    u = np.full(8, 1e-3, np.float32)
    with pytest.raises(ValueError) as e:
        if call == "writeback":
            wbaudit.writeback(w, u, "bf16", policy, sr_bits=r, sr_stream=stream)
        elif call == "round":
            wbaudit.round(w, "bf16", policy, sr_bits=r, sr_stream=stream)
        else:
            wbaudit.audit(w, u, w, "bf16", policy, sr_bits=r, sr_stream=stream)
    assert needle in str(e.value)
    if stream == "philox-packed":
        assert f"sr_bits = {r}" in str(e.value) and policy in str(e.value)


def _persistent_run(tmp_path, name, **kw):
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8)
    opt = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.01), formats="bf16", model=model,
                           policy="stochastic", sr_bits=8, seed=3, path=tmp_path / f"{name}.h5",
                           trajectory=tmp_path / f"{name}.traj.h5", **kw)
    x, y = torch.randn(32, 16), torch.randn(32, 8)
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step(loss=loss.item(), lr=0.01)
    opt.close()
    return model, tmp_path / f"{name}.h5", tmp_path / f"{name}.traj.h5"


def test_persistent_native_records_a_non_default_stream_only(tmp_path):
    _, trace_default, traj_default = _persistent_run(tmp_path, "default")
    model_p, trace_packed, traj_packed = _persistent_run(tmp_path, "packed", sr_stream="philox-packed")
    _, trace_named, traj_named = _persistent_run(tmp_path, "named", sr_stream="philox")

    for traj in (traj_default, traj_named):  # the default stream writes what it always wrote: no sr_stream key
        with h5py.File(traj, "r") as f:
            assert "sr_stream" not in f.attrs and int(f.attrs["sr_bits"]) == 8
    for trace in (trace_default, trace_named):
        assert "sr_stream" not in json.loads(wbaudit.read_trace(str(trace))["config_json"])
    with h5py.File(traj_packed, "r") as f:  # a root attribute beside sr_bits; readers take absent as philox
        assert f.attrs["sr_stream"] == "philox-packed" and int(f.attrs["sr_bits"]) == 8
        assert f.attrs.get("sr_stream", "philox") == "philox-packed"
        rows = {name: (f[f"tensors/{name}/w"][:], f[f"tensors/{name}/u"][:], f[f"tensors/{name}/w_next"][:],
                       int(f[f"tensors/{name}"].attrs["tensor_id"])) for name in f["tensors"]}
        steps = f["steps"][:]
    config = json.loads(wbaudit.read_trace(str(trace_packed))["config_json"])
    assert config["sr_stream"] == "philox-packed" and config["sr_bits"] == 8

    # the packed run's write-backs replay exactly under the packed stream, and not under philox
    with h5py.File(traj_default, "r") as f:
        assert not np.array_equal(f["tensors/weight/w_next"][:], rows["weight"][2])
    for name, (W, U, N, tid) in rows.items():
        for k, step in enumerate(steps):
            a = wbaudit.audit(W[k], U[k], N[k], "bf16", "stochastic", sr_bits=8, seed=3, step=int(step),
                              tensor_id=tid, sr_stream="philox-packed")
            assert a["consistent"], (name, step, a["inconsistent"][:2])
    W, U, N, tid = rows["weight"]
    assert not wbaudit.audit(W[0], U[0], N[0], "bf16", "stochastic", sr_bits=8, seed=3, step=int(steps[0]),
                             tensor_id=tid)["consistent"]


def test_persistent_native_refuses_a_bad_stream_before_touching_parameters(tmp_path):
    model = torch.nn.Linear(4, 2)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="philox-packed"):
        PersistentNative(torch.optim.SGD(model.parameters(), lr=0.1), formats="bf16", model=model,
                         policy="stochastic", sr_bits=17, sr_stream="philox-packed", path=None)
    with pytest.raises(ValueError, match="nope"):
        PersistentNative(torch.optim.SGD(model.parameters(), lr=0.1), formats="bf16", model=model,
                         policy="stochastic", sr_bits=8, sr_stream="nope", path=None)
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach(), b)
