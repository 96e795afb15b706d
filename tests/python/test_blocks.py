"""Block-scaled formats through the Python module (issue 29): the worked examples derived by hand (docs/formats.md),
NVFP4's E2M1 ties, the block layout of 2-D arrays, bad input, and the write-back against the C++ CLI
(`wbaudit round --json`, the scalar reference) bit for bit, under nearest and SR."""
import json
import os
import subprocess

import numpy as np
import pytest

import wbaudit


def f32(x):
    return np.asarray(x, dtype=np.float32)


def test_block_formats_listed():
    names = [b["name"] for b in wbaudit.block_formats()]
    assert names[:6] == ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "mxint8"]
    assert "mxfp4_e2m1:rceil" in names and names[-2:] == ["nvfp4", "nvfp4:2d"]
    e = {b["name"]: b for b in wbaudit.block_formats()}
    assert e["mxint8"]["max_elem"] == 127 / 64 and e["nvfp4:2d"]["tiles_2d"]


def test_scale_flush_example_b():
    # w = [3, 0.25 x 31] sits at X = 2^(floor(log2 3) - 2) = 0.5. u_0 = 1: v_0 = 4 gives X = 1, w_0 -> 4, and
    # 0.25 / 1 is the tie between 0 (even) and 0.5 -> 0: the 31 others flush.
    w = f32([3.0] + [0.25] * 31)
    u = f32([1.0] + [0.0] * 31)
    out, c = wbaudit.writeback(w, u, "mxfp4_e2m1")
    assert out.tolist() == [4.0] + [0.0] * 31
    assert (c["nonzero"], c["applied"], c["erased"], c["collateral"], c["flushed"]) == (1, 1, 0, 31, 31)
    assert (c["blocks"], c["rescaled_up"], c["rescaled_down"]) == (1, 1, 0)
    # u_0 = 0.9: v_0 = 3.9 keeps X = 0.5 and 7.8 saturates to 6 -> 3: erased by saturation, nothing moves.
    out, c = wbaudit.writeback(w, f32([0.9] + [0.0] * 31), "mxfp4_e2m1")
    assert out.tolist() == w.tolist()
    assert (c["erased"], c["erased_saturation"], c["collateral"], c["rescaled_up"]) == (1, 1, 0, 0)


def test_audit_of_a_block_write_back_by_hand():
    """wbaudit.audit with a block format: example (b)'s realized step (w_next written here by hand) is consistent
    with its causes; the same step without the flush of coordinate 5 is inconsistent there, expecting 0; SR is
    audited only with the seed, and a write-back of seed 3 is consistent with seed 3 and not with seed 4."""
    w = f32([3.0] + [0.25] * 31)
    u = f32([1.0] + [0.0] * 31)
    w_next = f32([4.0] + [0.0] * 31)
    a = wbaudit.audit(w, u, w_next, "mxfp4_e2m1")
    assert a["consistent"] and a["inconsistent"] == []
    assert (a["nonzero"], a["applied"], a["erased"], a["collateral"], a["flushed"], a["rescaled_up"]) == \
        (1, 1, 0, 31, 31, 1)
    planted = w_next.copy()
    planted[5] = 0.25
    a = wbaudit.audit(w, u, planted, "mxfp4_e2m1")
    assert not a["consistent"]
    assert [(b["index"], b["w_next"], b["expected_low"]) for b in a["inconsistent"]] == [(5, 0.25, 0.0)]
    rng = np.random.default_rng(2)
    W = wbaudit.round(f32(rng.standard_normal((4, 48))), "mxfp8_e4m3")
    U = f32(rng.standard_normal((4, 48)) * 0.05)
    with pytest.raises(ValueError, match="replaying the run's draws"):
        wbaudit.audit(W, U, W, "mxfp8_e4m3", "stochastic")
    after, _ = wbaudit.writeback(W, U, "mxfp8_e4m3", "stochastic", seed=3, step=7, tensor_id=2)
    ok = wbaudit.audit(W, U, after, "mxfp8_e4m3", "stochastic", seed=3, step=7, tensor_id=2)
    assert ok["consistent"] and ok["sr_applied"] > 0
    assert not wbaudit.audit(W, U, after, "mxfp8_e4m3", "stochastic", seed=4, step=7, tensor_id=2)["consistent"]


@pytest.mark.parametrize("u0", [0.01, 0.5, 1.0])
def test_saturation_example_a(u0):
    # w = [6, 1.5 x 31] at X = 1: v_0 < 8 keeps X, v_0 > 6 saturates back to 6.
    w = f32([6.0] + [1.5] * 31)
    out, c = wbaudit.writeback(w, f32([u0] + [0.0] * 31), "mxfp4_e2m1")
    assert out.tolist() == w.tolist()
    assert (c["erased"], c["erased_saturation"], c["erased_grid"], c["erased_scale"], c["collateral"]) == (1, 1, 0, 0, 0)


def test_rceil_collateral_example_c():
    # rceil: amax 6 + 2^-20 > 6 * 1 doubles X; 6.00000095 / 2 -> 3 (w_0 kept: erased by the scale), 1.5 / 2 = 0.75
    # -> 1 -> 2 (31 collateral moves).
    w = f32([6.0] + [1.5] * 31)
    out, c = wbaudit.writeback(w, f32([2.0**-20] + [0.0] * 31), "mxfp4_e2m1:rceil")
    assert out.tolist() == [6.0] + [2.0] * 31
    assert (c["erased_scale"], c["collateral"], c["flushed"], c["rescaled_up"]) == (1, 31, 0, 1)


def test_nvfp4_round_ties_and_2d_layout():
    # amax 6: S_enc = 448, s_b = 448, decoded = the E2M1 value; 1.25 and 0.75 -> 1, 5 -> 4 (ties to even codes).
    got = wbaudit.round(f32([6, 1.25, 0.75, 5] + [0] * 12), "nvfp4")
    assert got.tolist() == [6, 1, 1, 4] + [0] * 12
    # A [20 x 40] array: 2 x 3 = 6 tiles of 16x16 (short at the edges), 20 x 3 = 60 blocks along rows for nvfp4.
    w = wbaudit.round(f32(np.random.default_rng(3).standard_normal((20, 40))), "nvfp4")
    u = f32(np.zeros((20, 40)))
    assert wbaudit.writeback(w, u, "nvfp4:2d")[1]["blocks"] == 6
    assert wbaudit.writeback(w, u, "nvfp4")[1]["blocks"] == 60
    assert wbaudit.writeback(w, u, "mxfp8_e4m3")[1]["blocks"] == 40  # 32 + a short 8 per row


def test_bad_input_names_tensor_step_and_block():
    w = f32(np.ones((2, 64)))
    u = f32(np.zeros((2, 64)))
    u[1, 40] = np.nan
    keep = w.copy()
    with pytest.raises(ValueError, match=r"tensor layer1\.weight, step 7: .*block 3 \(row 1, columns 32\.\.63\)"):
        wbaudit.writeback(w, u, "mxfp8_e4m3", step=7, tensor="layer1.weight", out=w)
    assert w.tolist() == keep.tolist()  # nothing written
    with pytest.raises(ValueError, match=r'unknown scale rule "ceil" \(known: floor, rceil\)'):
        wbaudit.writeback(w, f32(np.zeros((2, 64))), "mxfp8_e4m3:ceil")
    with pytest.raises(ValueError, match="not an fp32 value"):
        wbaudit.round(np.array([0.1]), "mxfp8_e4m3")


def cli_writeback(fmt, w, u, policy, seed, step):
    """The C++ CLI's block write-back (the scalar reference) of a 1-row tensor w with proposals u."""
    exe = os.environ.get("WBAUDIT_EXE")
    if not exe:
        pytest.skip("WBAUDIT_EXE not set")
    hexes = lambda a: " ".join(float(x).hex() for x in a)  # noqa: E731
    out = subprocess.run([exe, "round", "--format", fmt, "--row", hexes(w), "--update", hexes(u), "--policy", policy,
                          "--seed", str(seed), "--step", str(step), "--json"], check=True, capture_output=True,
                         text=True).stdout
    j = json.loads(out)
    return f32([float(v["result"]) for v in j["values"]]), j["counts"]


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp6_e2m3:rceil", "mxint8", "nvfp4"])
@pytest.mark.parametrize("policy", ["nearest", "stochastic"])
def test_writeback_equals_cli(fmt, policy):
    rng = np.random.default_rng(11)
    w = wbaudit.round(f32(rng.standard_normal(80) * 0.3), fmt)  # on the format's grid, blocks of mixed scale
    u = f32(rng.standard_normal(80) * 0.02)
    u[rng.random(80) < 0.3] = 0
    got, c = wbaudit.writeback(w, u, fmt, policy=policy, seed=4, step=9)
    want, wc = cli_writeback(fmt, w, u, policy, 4, 9)
    assert got.tobytes() == want.tobytes()
    for k in ("nonzero", "erased", "erased_grid", "erased_saturation", "erased_scale", "applied", "collateral",
              "flushed", "saturated", "blocks", "rescaled_up", "rescaled_down"):
        assert c[k] == wc[k], k


def test_read_trace_gives_the_block_events_the_file_holds(tmp_path, wbaudit_exe):
    """wbaudit.read_trace returns a block-format target group's events by cause and a reference's projected block
    events, equal to the datasets read directly with h5py (docs/trace-format.md)."""
    import glob
    import subprocess

    import h5py

    src = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "blocks_tiny.toml")
    r = subprocess.run([wbaudit_exe, "run", src, "--out", str(tmp_path / "sweep"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fields = ["erased_grid", "erased_saturation", "erased_scale", "collateral", "flushed", "rescaled_up",
                  "rescaled_down"]
    seen_target = seen_projected = 0
    for path in sorted(glob.glob(str(tmp_path / "sweep" / "cells" / "*" / "attempts" / "*" / "trace.h5"))):
        t = wbaudit.read_trace(path)
        with h5py.File(path, "r") as f:
            for name, g in t["groups"].items():
                h = f["groups"][name]
                if t["mode"] == "target" and "block_events" in h:
                    seen_target += 1
                    assert g["block_format"] == t["format"]
                    assert g["block_events"]["blocks"] > 0
                    for k in fields:
                        assert np.array_equal(g["block_events"][k], h["block_events"][k][:]), (path, name, k)
                    assert "block_events" not in g or "block_format" in g
                if t["mode"] == "reference":
                    for fmt, p in g["projected"].items():
                        hp = h["projected"][fmt]
                        assert ("block_events" in p) == ("block_events" in hp), (fmt, name)
                        if "block_events" in hp:
                            seen_projected += 1
                            for k in fields:
                                assert np.array_equal(p["block_events"][k], hp["block_events"][k][:]), (fmt, k)
    assert seen_target >= 6 and seen_projected >= 6  # 3 block targets x 2+ groups; 3 block formats x 2+ groups


@pytest.mark.parametrize("fmt,policy", [("mxfp8_e4m3", "nearest"), ("mxfp4_e2m1:rceil", "stochastic"),
                                        ("nvfp4:2d", "nearest")])
def test_persistent_native_writes_back_blocks_along_rows_and_records_their_events(tmp_path, fmt, policy):
    """PersistentNative with a block format: each parameter is written back with the parameter's own shape (blocks
    along its last dimension; 40 columns are a block of 32 and a short block of 8 per row, never blocks across rows),
    the weights equal wbaudit.writeback's on the 2-D arrays step by step, and the target trace records the block
    events by cause with the block count the C++ write-back reports."""
    import torch

    from wbaudit.torch import PersistentNative

    torch.manual_seed(0)
    model = torch.nn.Linear(40, 24)
    opt = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.5), formats={"weight": fmt, "*": "fp32"},
                           model=model, policy=policy, seed=5, path=tmp_path / "t" / "trace.h5")
    w = model.weight.detach().numpy().copy()
    assert np.array_equal(w, wbaudit.round(w, fmt))  # rounded into the format at construction, blockwise
    expected = []
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        x = torch.randn(16, 40, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        w_before = model.weight.detach().clone()
        # the optimizer's fp32 proposal, by the same torch operations (plain SGD: p.add_(grad, alpha=-lr))
        p_after = w_before.clone().add_(model.weight.grad, alpha=-0.5)
        u = (p_after - w_before).numpy()
        opt.step(loss=loss.item())
        # the same write-back from the C++ kernel on the 2-D arrays
        w_ref, c = wbaudit.writeback(w_before.numpy(), u, fmt, policy, seed=5, step=step, tensor_id=0)
        assert np.array_equal(model.weight.detach().numpy(), w_ref), step
        expected.append(c)
    t = wbaudit.read_trace(opt.close())
    g = t["groups"]["weight"]
    assert g["block_format"] == fmt
    assert g["block_events"]["blocks"] == expected[0]["blocks"]
    per_row = 1 if fmt == "nvfp4:2d" else 2  # (32 + 8) columns per row; nvfp4:2d: 16 x 16 tiles
    assert expected[0]["blocks"] == (2 * 3 if fmt == "nvfp4:2d" else 24 * per_row)
    for k in ("erased_grid", "erased_saturation", "erased_scale", "collateral", "flushed", "rescaled_up",
              "rescaled_down"):
        assert list(g["block_events"][k]) == [c[k] for c in expected], k
    assert list(g["erased"]) == [c["erased"] for c in expected]
    assert "block_format" not in t["groups"]["bias"]


@pytest.mark.parametrize("fmt,policy", [("mxfp8_e4m3", "nearest"), ("mxfp4_e2m1:rceil", "stochastic"),
                                        ("nvfp4", "nearest")])
def test_wbaudit_audit_replays_a_persistent_native_block_trajectory(tmp_path, fmt, policy, wbaudit_exe):
    """A PersistentNative run held in a block format dumps its trajectory with each tensor's shape; `wbaudit audit`
    (format, policy and seed from the file) finds it consistent, with the trace's counts and causes step by step;
    a planted value is found at its coordinate."""
    import csv
    import subprocess

    import h5py
    import torch

    from wbaudit.torch import PersistentNative

    torch.manual_seed(0)
    model = torch.nn.Linear(40, 24)
    opt = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.5), formats={"*": fmt}, model=model,
                           policy=policy, seed=5, path=tmp_path / "trace.h5", trajectory=tmp_path / "traj.h5")
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        loss = model(torch.randn(16, 40, generator=g)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step(loss=loss.item())
    t = wbaudit.read_trace(opt.close())
    with h5py.File(tmp_path / "traj.h5", "r") as f:
        assert list(f["tensors/weight"].attrs["shape"]) == [24, 40]
        assert list(f["tensors/bias"].attrs["shape"]) == [24]
    res = subprocess.run([wbaudit_exe, "audit", str(tmp_path / "traj.h5"), "--out", str(tmp_path / "audit")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "block causes:" in res.stdout
    rows = list(csv.DictReader(open(tmp_path / "audit" / "counts.csv")))
    for name in ("weight", "bias"):
        mine = [r for r in rows if r["group"] == name]
        tg = t["groups"][name]
        assert [int(r["erased"]) for r in mine] == list(tg["erased"]), name
        assert [int(r["applied"]) for r in mine] == list(tg["applied"]), name
        for k in ("erased_grid", "erased_saturation", "erased_scale", "collateral", "flushed", "rescaled_up",
                  "rescaled_down"):
            assert [int(r[k]) for r in mine] == list(tg["block_events"][k]), (name, k)
        assert all(int(r["inconsistent"]) == 0 for r in mine)
    assert sum(int(r["applied"]) for r in rows) > 0
    with h5py.File(tmp_path / "traj.h5", "r+") as f:  # plant: one weight of step 2 moved off its write-back
        d = f["tensors/weight/w_next"]
        row = d[2]
        row[7] = row[7] + 1.0
        d[2] = row
    res = subprocess.run([wbaudit_exe, "audit", str(tmp_path / "traj.h5"), "--out", str(tmp_path / "audit2")],
                         capture_output=True, text=True)
    assert res.returncode != 0
    bad = list(csv.DictReader(open(tmp_path / "audit2" / "inconsistent.csv")))
    assert ("weight", "2", "7") in {(b["tensor"], b["step"], b["index"]) for b in bad}
