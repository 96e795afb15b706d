"""wbaudit.torch on small PyTorch runs: ReferenceRecorder's projected counts equal a brute-force recount from
saved parameters; PersistentNative with fp32 + nearest is PyTorch followed by the proposal's fp32 round trip, bitwise;
its target trace's counts equal a recount from the dumped trajectory, which `wbaudit audit` finds consistent."""
import csv
import json
import re
import subprocess

import h5py
import numpy as np
import pytest
import torch

import wbaudit
from reference import Table
from wbaudit.torch import PersistentNative, ReferenceRecorder

torch.set_num_threads(1)


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def batches(steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(32, 8, generator=g), torch.randn(32, 2, generator=g)) for _ in range(steps)]


def nearest_np(table_values, x):
    """Vectorized nearest (ties to the even code) over a sorted float64 table of magnitudes; saturating."""
    vals = np.array([float(v) for v in table_values])
    a = np.minimum(np.abs(x), vals[-1])
    hi = np.clip(np.searchsorted(vals, a, side="left"), 0, len(vals) - 1)
    lo = np.where(vals[hi] == a, hi, np.maximum(hi - 1, 0))
    dl, dh = a - vals[lo], vals[hi] - a
    pick = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.copysign(vals[pick], x)


def test_reference_recorder_counts_equal_brute_force(tmp_path):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps = 12
    rec = ReferenceRecorder(model, formats=["e4m3", "bf16"], path=tmp_path / "ref" / "trace.h5")
    saved = []
    for x, y in batches(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        with rec.step(loss=loss.item(), lr=1e-3):
            opt.step()
        saved.append({n: (before[n], p.detach().clone()) for n, p in model.named_parameters()})
    trace = wbaudit.read_trace(rec.close())
    assert trace["mode"] == "reference" and list(trace["recorded_steps"]) == list(range(steps))
    assert set(trace["groups"]) == {n for n, _ in model.named_parameters()}
    tables = {f: Table(f).values for f in ("e4m3", "bf16")}
    for k, rows in enumerate(saved):
        for name, (w, w_after) in rows.items():
            w64 = w.double().numpy().ravel()
            u = (w_after - w).numpy().ravel()  # fp32 proposal
            g = trace["groups"][name]
            assert g["nonzero"][k] == np.count_nonzero(u)
            for f, vals in tables.items():
                # q(w) has <= 8 significant bits and u 24, so q(w) + u is exact in float64 unless |u| is below
                # 2^-45 |q(w)|, where it is erased either way.
                qw = nearest_np(vals, w64)
                erased = np.sum((u != 0) & (nearest_np(vals, qw + u.astype(np.float64)) == qw))
                assert g["projected"][f]["erased"][k] == erased, (name, k, f)
            assert g["ratio_histogram"][k].sum() + g["zero_weight"][k] == g["nonzero"][k]
            # The margin histogram (docs/trace-format.md, joint/margin): every u != 0 once per format, and the count
            # erased at s = 1 read off it by the documented layout equals the brute-force count: the saturating
            # proposals, every counter of the rows kappa < 0, and the point m == 1 of row kappa = 0 when q(w)'s level
            # is even (a tie rounds back to it).
            layout = trace["margin"]
            lo, flo, fhi, hi = (layout[k] for k in ("coarse_lo", "fine_lo", "fine_hi", "coarse_hi"))
            rows = hi - lo + 3
            widths = [32 + 2 if flo <= lo - 1 + r <= fhi else 3 for r in range(rows)]
            block = 1 + sum(widths)
            margin = g["joint"]["margin"][k]
            # every format's counter block, then every format's moments (schema 4: sum p, sum p^2 per fine sub-bin)
            assert layout["moment_bits"] == 7
            assert margin.shape == (len(layout["formats"]) * (block + 2 * 32 * (fhi - flo + 1)),) == (layout["bins"],)
            for f, vals in tables.items():
                b = margin[layout["formats"].index(f) * block:(layout["formats"].index(f) + 1) * block]
                assert b.sum() == g["nonzero"][k], (name, k, f)
                at, erased_at_1 = 1, b[0]
                for r in range(rows):
                    kappa = lo - 1 + r
                    if kappa < 0:
                        erased_at_1 += b[at:at + widths[r]].sum()
                    elif kappa == 0:
                        erased_at_1 += b[at + widths[r] - 2]  # point m == 1, level even
                    at += widths[r]
                assert erased_at_1 == g["projected"][f]["erased"][k], (name, k, f)
    for name, p in make_model().named_parameters():  # the initialization: same seed
        assert trace["groups"][name]["joint"]["init_absmax"] == float(p.detach().abs().max())


def test_reference_recorder_trace_serves_the_analytic_grid(tmp_path, wbaudit_exe):
    """`wbaudit grid` on a recorder's trace: at s = 1 its e4m3, bf16 and int4 fractions equal the exact projections
    the recorder made (the grid is exact there on real traces, docs/forecasting.md)."""
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    formats = ["e4m3", "bf16", "int4"]
    rec = ReferenceRecorder(model, formats=formats, path=tmp_path / "ref" / "trace.h5")
    train(model, opt, 10, recorded_step(rec, opt))
    path = rec.close()
    trace = wbaudit.read_trace(path)
    out = tmp_path / "grid"
    subprocess.run([wbaudit_exe, "grid", str(path), "--formats", ",".join(formats), "--lr-scales", "1", "-o",
                    str(out), "--no-figure"], check=True, capture_output=True)
    rows = list(csv.DictReader(open(out / "grid.csv")))
    # Small tensors keep each recorded step's w and u ([T, size]), so the grid counts them exactly at any scale.
    for name, p in model.named_parameters():
        joint = trace["groups"][name]["joint"]
        assert ("w" in joint) == (p.numel() <= wbaudit._core.JOINT_EXACT_MAX), name
        if "w" in joint:
            assert joint["w"].shape == joint["u"].shape == (len(trace["recorded_steps"]), p.numel())
            # The last step (recorded) proposed u = fl(p_after - w) on the weights it started from.
            assert trace["recorded_steps"][-1] == 9
            assert np.array_equal(joint["u"][-1], p.detach().numpy().reshape(-1) - joint["w"][-1]), name
    assert len(rows) == len(trace["groups"]) * len(formats) * len(trace["recorded_steps"])
    steps = list(trace["recorded_steps"])
    for r in rows:
        exact = trace["groups"][r["group"]]["projected"][r["format"]]["fraction"][steps.index(int(r["step"]))]
        assert float(r["erased_fraction"]) == pytest.approx(exact, abs=1e-12), r


def test_reference_recorder_margin_formats(tmp_path, wbaudit_exe):
    """margin_formats="declared": the margin histogram of the declared scalar formats only. Its blocks are those
    formats' blocks of the default recording (every format), entry for entry; `wbaudit grid` gives the same values
    from it at every scale, by default grids only the formats it holds, and refuses a format it lacks by name; lists
    that name no recorded format, an unknown one or a repeat are ValueErrors."""
    def run(sub, **kw):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 160), torch.nn.Tanh(), torch.nn.Linear(160, 64), torch.nn.Tanh(),
                                    torch.nn.Linear(64, 2))  # two weights above JOINT_EXACT_MAX: gridded by margin
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        rec = ReferenceRecorder(model, formats=["int4", "e4m3", "mxfp8_e4m3"], path=tmp_path / sub / "trace.h5", **kw)
        train(model, opt, 6, recorded_step(rec, opt))
        return rec.close()

    def same(a, b):  # nested dicts of arrays, equal entry for entry
        if isinstance(a, dict) or isinstance(b, dict):
            return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
                same(a[k], b[k]) for k in a)
        return np.array_equal(np.asarray(a), np.asarray(b))

    full_path, some_path = run("full"), run("some", margin_formats="declared")
    full, some = wbaudit.read_trace(full_path), wbaudit.read_trace(some_path)
    assert full["margin"]["formats"] == wbaudit._core.margin_layout()["formats"] and len(full["margin"]["formats"]) == 14
    assert some["margin"]["formats"] == ["e4m3", "int4"]  # the default layout's order
    assert json.loads(some["config_json"])["margin_formats"] == ["e4m3", "int4"]
    assert "margin_formats" not in json.loads(full["config_json"])  # the default: config_json as before
    layout = full["margin"]
    lo, flo, fhi, hi = (layout[k] for k in ("coarse_lo", "fine_lo", "fine_hi", "coarse_hi"))
    block = 1 + sum(32 + 2 if flo <= lo - 1 + r <= fhi else 3 for r in range(hi - lo + 3))
    moments = 2 * 32 * (fhi - flo + 1)
    assert some["margin"]["bins"] == 2 * (block + moments) and layout["bins"] == 14 * (block + moments)
    gridded = 0
    for name, g in some["groups"].items():
        f_g = full["groups"][name]
        for key in ("nonzero", "zero_weight", "ratio_histogram"):
            assert np.array_equal(g[key], f_g[key]), (name, key)
        for f in ("e4m3", "int4", "mxfp8_e4m3"):
            assert same(g["projected"].get(f), f_g["projected"].get(f)), (name, f)
        gridded += "w" not in g["joint"]
        for k in range(len(some["recorded_steps"])):
            m, m_full = g["joint"]["margin"][k], f_g["joint"]["margin"][k]
            for i, f in enumerate(some["margin"]["formats"]):
                j = layout["formats"].index(f)
                assert np.array_equal(m[i * block:(i + 1) * block], m_full[j * block:(j + 1) * block]), (name, k, f)
                at, at_full = 2 * block + i * moments, 14 * block + j * moments
                assert np.array_equal(m[at:at + moments], m_full[at_full:at_full + moments]), (name, k, f)
    assert gridded == 2  # the 160 x 8 and 64 x 160 weights go through the margin histogram, not kept w and u

    def grid(path, out, *formats):
        cmd = [wbaudit_exe, "grid", str(path), "--lr-scales", "0.3,1,2", "-o", str(tmp_path / out), "--no-figure"]
        r = subprocess.run(cmd + (["--formats", ",".join(formats)] if formats else []), capture_output=True, text=True)
        return r, (list(csv.DictReader(open(tmp_path / out / "grid.csv"))) if r.returncode == 0 else None)

    _, rows_full = grid(full_path, "grid_full", "e4m3", "int4")
    _, rows_some = grid(some_path, "grid_some", "e4m3", "int4")
    assert rows_some == rows_full and len(rows_full) == len(full["groups"]) * 2 * 3 * 6
    _, rows_default = grid(some_path, "grid_default")
    assert {r["format"] for r in rows_default} == {"e4m3", "int4"}
    assert sorted(rows_default, key=str) == sorted(rows_full, key=str)
    r, _ = grid(some_path, "grid_fp16", "fp16")
    assert r.returncode != 0 and '"fp16" is not in this trace\'s margin histogram (e4m3, int4)' in r.stderr, r.stderr
    assert not (tmp_path / "grid_fp16").exists()

    model = make_model()
    for kw, part in ((dict(margin_formats=["e4m3", "e4m3"]), 'format "e4m3" listed twice (entry 1)'),
                     (dict(margin_formats=["fp32"]), 'format "fp32" (entry 0) is not one it records'),
                     (dict(margin_formats="all"), 'expected None, "declared" or a list'),
                     (dict(formats=["mxfp8_e4m3"], margin_formats="declared"), "none of formats ['mxfp8_e4m3']")):
        with pytest.raises(ValueError, match=re.escape(part)):
            ReferenceRecorder(model, **{"formats": ["e4m3"], "path": tmp_path / "bad" / "trace.h5", **kw})


def train(model, opt, steps, step_fn):
    for x, y in batches(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        step_fn(loss)


def recorded_step(rec, opt):
    """train()'s step_fn for a ReferenceRecorder: the optimizer step inside rec.step (lr 1e-3)."""
    def step(loss):
        with rec.step(loss=loss.item(), lr=1e-3):
            opt.step()
    return step


def test_persistent_native_fp32_nearest_is_pytorch_with_the_proposal_round_trip(tmp_path):
    """fp32 + nearest writes q(w + u) with u = fl(p_after - w): plain PyTorch followed by the same round trip in torch's
    own fp32 arithmetic is the independent reference (bitwise over 40 steps). The round trip is the identity wherever
    p_after - w is exact in fp32 (Sterbenz: the weight neither crossed zero nor changed magnitude by 2x); the test
    also checks, on one step from a shared state, that the coordinates where native differs from plain PyTorch are
    exactly those where float64 says the round trip is inexact."""
    def round_trip_step(opt, params):
        before = [p.detach().clone() for p in params]
        opt.step()
        with torch.no_grad():
            for p, w in zip(params, before):
                p.copy_(w + (p - w))

    plain = make_model()
    opt = torch.optim.AdamW(plain.parameters(), lr=3e-3)
    train(plain, opt, 40, lambda loss: round_trip_step(opt, list(plain.parameters())))
    native = make_model()
    pn = PersistentNative(torch.optim.AdamW(native.parameters(), lr=3e-3), formats="fp32", model=native,
                          path=tmp_path / "t.h5")
    train(native, pn, 40, lambda loss: pn.step(loss=loss.item()))
    for (n, a), (_, b) in zip(plain.named_parameters(), native.named_parameters()):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), n
    trace = wbaudit.read_trace(pn.close())
    for name, _ in native.named_parameters():
        assert list(trace["groups"][name]["erased"]) == [0] * 40, name

    # One step with a large learning rate from a shared state, so that some weights cross zero.
    x, y = batches(1, seed=5)[0]
    models = [make_model(seed=3), make_model(seed=3)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in models]
    pn = PersistentNative(opts[1], formats="fp32", model=models[1], path=None)
    before = [p.detach().clone() for p in models[0].parameters()]
    for m, o in zip(models, opts):
        o.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
    opts[0].step()
    pn.step()
    inexact_total = 0
    for w, a, b in zip(before, models[0].parameters(), models[1].parameters()):
        w64, a64 = w.double().numpy().ravel(), a.detach().double().numpy().ravel()
        u32 = (a.detach() - w).numpy().ravel()
        inexact = u32.astype(np.float64) != a64 - w64  # fp32 subtraction rounded (float64 holds it exactly here)
        differs = a.detach().view(torch.int32).numpy().ravel() != b.detach().view(torch.int32).numpy().ravel()
        assert not np.any(differs & ~inexact)
        # where the subtraction rounded, native holds fl(w + u), computed here in float64 then rounded once
        np.testing.assert_array_equal(b.detach().numpy().ravel()[inexact],
                                      (w64 + u32.astype(np.float64)).astype(np.float32)[inexact])
        inexact_total += int(inexact.sum())
    assert inexact_total > 0  # the step exercised the case


@pytest.mark.parametrize("policy", ["nearest", "stochastic"])
def test_persistent_native_e4m3_counts_equal_recount_and_audit(tmp_path, policy, wbaudit_exe):
    model = make_model()
    pn = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.05), formats={"0.*": "e4m3", "*": "e4m3"},
                          model=model, policy=policy, seed=7, path=tmp_path / "target" / "trace.h5",
                          schedule={"kind": "every_k", "k": 3}, steps=20, trajectory=tmp_path / "traj.h5")
    vals = Table("e4m3").values
    for _, p in model.named_parameters():  # rounded into e4m3 at construction
        assert np.array_equal(nearest_np(vals, p.detach().double().numpy()), p.detach().double().numpy())
    train(model, pn, 20, lambda loss: pn.step(loss=loss.item()))
    trace = wbaudit.read_trace(pn.close())
    assert trace["mode"] == "target" and trace["format"] == "e4m3" and trace["policy"] == policy
    assert list(trace["recorded_steps"]) == [0, 3, 6, 9, 12, 15, 18, 19]
    with h5py.File(tmp_path / "traj.h5", "r") as f:
        assert list(f["steps"][:]) == list(trace["recorded_steps"])
        total_erased = 0
        for name, g in trace["groups"].items():
            w, u, n = (f["tensors"][name][d][:].astype(np.float64) for d in ("w", "u", "w_next"))
            assert np.array_equal(g["nonzero"], np.count_nonzero(u, axis=1))
            assert np.array_equal(g["erased"], np.sum((u != 0) & (n == w), axis=1))
            assert np.array_equal(g["applied"], np.sum(n != w, axis=1))
            if policy == "nearest":  # w + u is exact in float64 here (|u| >= 2^-45 |w| or erased either way)
                assert np.array_equal(n, nearest_np(vals, w + u))
            total_erased += g["erased"].sum()
        assert total_erased > 0
    res = subprocess.run([wbaudit_exe, "audit", str(tmp_path / "traj.h5"), "--out", str(tmp_path / "audit")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    audited = wbaudit.read_trace(str(tmp_path / "audit" / "trace.h5"))
    for name, g in trace["groups"].items():
        assert np.array_equal(audited["groups"][name]["erased"], g["erased"])


def test_persistent_native_sr_is_deterministic_across_threads(tmp_path):
    results = []
    for threads in (1, 2):
        code = f"""
import os, sys, torch, numpy as np
sys.path[:0] = {list(__import__('sys').path)!r}
from test_torch import make_model, train
from wbaudit.torch import PersistentNative
m = make_model()
pn = PersistentNative(torch.optim.SGD(m.parameters(), lr=0.05), formats="e4m3", model=m, policy="stochastic",
                      seed=3, path=None)
train(m, pn, 10, lambda loss: pn.step())
print(np.concatenate([p.detach().numpy().ravel() for p in m.parameters()]).view(np.uint32).sum())
"""
        import os
        import sys
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             cwd=os.path.dirname(__file__))
        assert out.returncode == 0, out.stderr
        results.append(out.stdout.strip())
    assert results[0] == results[1]


def test_recorder_rejects_non_float32():
    model = make_model().double()
    with pytest.raises(TypeError, match="float64"):
        ReferenceRecorder(model, formats=["e4m3"])


def _held_bytes(obj, seen=None):
    """Bytes of the tensors and arrays an object holds (through its attributes, lists, tuples and dicts), and one per
    list/dict entry: what a recorder keeps between steps."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage().nbytes() if hasattr(obj, "untyped_storage") else obj.storage().nbytes()
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return len(obj) + sum(_held_bytes(x, seen) for x in obj)
    if isinstance(obj, dict):
        return len(obj) + sum(_held_bytes(x, seen) for x in obj.values())
    if hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, torch.optim.Optimizer, type)):
        return _held_bytes(vars(obj), seen)
    return 0


@pytest.mark.parametrize("which", ["reference", "target"])
def test_recorders_stream_each_step_and_hold_the_same_bytes(tmp_path, which, wbaudit_exe):
    """Each recorded step is on disk (trace.h5.partial, marked incomplete) as soon as it is recorded; reading it as a
    finished trace is refused naming the file and its last step; what the recorder holds after 3 recorded steps is what
    it holds after 12 (the rows are not kept); close() leaves the finished trace and removes the partial file."""
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    path = tmp_path / which / "trace.h5"
    if which == "reference":
        rec = ReferenceRecorder(model, formats=["e4m3", "int4"], path=path)
    else:
        rec = PersistentNative(opt, "e4m3", model=model, path=str(path))
    held = {}
    for k, (x, y) in enumerate(batches(12)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if which == "reference":
            with rec.step(loss=loss.item(), lr=1e-3):
                opt.step()
        else:
            rec.step(loss=loss.item(), lr=1e-3)
        partial = wbaudit.read_trace(rec.partial, allow_incomplete=True)
        assert list(partial["recorded_steps"]) == list(range(k + 1))
        assert not partial["complete"]
        with pytest.raises(Exception, match=f"{rec.partial}.*step {k}"):
            wbaudit.read_trace(rec.partial)
        held[k] = _held_bytes(rec)
    assert held[2] == held[11], held
    # the unfinished trace on the command line: refused, naming the file and its last recorded step
    for cmd in (["grid", rec.partial, "--formats", "e4m3", "--lr-scales", "1", "-o", str(tmp_path / "grid"),
                 "--no-figure"], ["import", str(tmp_path / "sweep"), rec.partial]):
        r = subprocess.run([wbaudit_exe, *cmd], capture_output=True, text=True)
        assert r.returncode != 0 and rec.partial in r.stderr and "step 11" in r.stderr and "unfinished" in r.stderr, \
            (cmd, r.stderr)
    trace = wbaudit.read_trace(rec.close())
    assert trace["complete"] and list(trace["recorded_steps"]) == list(range(12))
    assert not (tmp_path / which / "trace.h5.partial").exists()


def test_the_ten_line_diff_creates_the_trajectory_directory(tmp_path):
    """docs/python.md's diff writes runs/e4m3/trace.h5 and runs/e4m3/trajectory.h5 into a directory that does not
    exist yet: both are created (issue 31, item 8: the trajectory's raised FileNotFoundError)."""
    model = make_model()
    out = tmp_path / "runs" / "e4m3"
    pn = PersistentNative(torch.optim.AdamW(model.parameters(), lr=1e-3), formats="e4m3", model=model,
                          schedule={"kind": "log", "points": 5}, steps=6, path=out / "trace.h5",
                          trajectory=tmp_path / "elsewhere" / "deeper" / "trajectory.h5")
    train(model, pn, 6, lambda loss: pn.step(loss=loss.item()))
    pn.close()
    assert (out / "trace.h5").is_file()
    with h5py.File(tmp_path / "elsewhere" / "deeper" / "trajectory.h5", "r") as f:
        assert len(f["steps"]) > 0
