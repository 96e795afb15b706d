"""`wbaudit audit` on trajectories written with h5py / numpy: bad input gives a message naming tensor, step and
value, a non-zero exit and no output directory; a planted inconsistency exits 2; .npy directories work alike."""
import json
import os
import subprocess

import h5py
import numpy as np
import pytest

import wbaudit


def good_rows(n=64, T=4, seed=0, fmt="e4m3"):
    rng = np.random.default_rng(seed)
    w = [wbaudit.round(rng.standard_normal(n).astype(np.float32), fmt)]
    us = []
    for t in range(T):
        u = (rng.standard_normal(n) * 0.05).astype(np.float32)
        us.append(u)
        w.append(wbaudit.writeback(w[-1], u, fmt)[0])
    return np.stack(w), np.stack(us)


def write_h5(path, w, u, steps=None, w_next=None, schema="wbaudit.trajectory/1", attrs=None, name="fc.weight"):
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = schema
        for k, v in (attrs or {"format": "e4m3", "policy": "nearest"}).items():
            f.attrs[k] = v
        f["steps"] = np.arange(u.shape[0], dtype=np.int64) if steps is None else np.asarray(steps, dtype=np.int64)
        g = f.create_group(f"tensors/{name}")
        g["w"] = w
        g["u"] = u
        if w_next is not None:
            g["w_next"] = w_next


def run(exe, *args):
    return subprocess.run([exe, "audit", *map(str, args)], capture_output=True, text=True)


def test_consistent_trajectory_and_outputs(tmp_path, wbaudit_exe):
    w, u = good_rows()
    write_h5(tmp_path / "t.h5", w, u)
    r = run(wbaudit_exe, tmp_path / "t.h5", "--out", tmp_path / "out", "--group", "all=fc.weight")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "consistent" in r.stdout
    counts = (tmp_path / "out" / "counts.csv").read_text().splitlines()
    assert counts[0].startswith("group,step,nonzero,erased,saturated,applied,inconsistent")
    assert len(counts) == 1 + 2 * 4
    erased = [int(line.split(",")[3]) for line in counts[1:5]]
    assert erased == [int(np.sum((u[k] != 0) & (w[k + 1] == w[k]))) for k in range(4)]
    trace = wbaudit.read_trace(str(tmp_path / "out" / "trace.h5"))
    assert list(trace["groups"]["fc.weight"]["erased"]) == erased
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["consistent"] is True


def test_planted_inconsistency_exits_2_and_is_listed(tmp_path, wbaudit_exe):
    w, u = good_rows()
    w_next = w[1:].copy()
    w_next[2, 5] = wbaudit.round(np.array([w_next[2, 5] * 4 + 1], dtype=np.float32), "e4m3")[0]
    write_h5(tmp_path / "t.h5", w[:-1], u, w_next=w_next)
    r = run(wbaudit_exe, tmp_path / "t.h5", "--out", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    rows = (tmp_path / "out" / "inconsistent.csv").read_text().splitlines()
    # Found twice: the write-back of step 2 is not nearest, and (w_next stored, steps consecutive) its w[t+1] is not
    # the w recorded at step 3: the trajectory does not chain there.
    assert len(rows) == 3 and rows[1].startswith("fc.weight,2,5,") and rows[2].startswith("fc.weight,2,5,")
    assert "does not chain" in rows[2] and "does not chain" not in rows[1]


def test_npy_directory(tmp_path, wbaudit_exe):
    w, u = good_rows()
    d = tmp_path / "traj"
    d.mkdir()
    np.save(d / "steps.npy", np.arange(4, dtype=np.int64))
    np.save(d / "fc.weight.w.npy", w)
    np.save(d / "fc.weight.u.npy", u)
    r = run(wbaudit_exe, d, "--format", "e4m3", "--policy", "nearest")
    assert r.returncode == 0, r.stdout + r.stderr
    np.save(d / "fc.weight.u.npy", u.astype(np.float64))
    r = run(wbaudit_exe, d, "--format", "e4m3", "--policy", "nearest")
    assert r.returncode == 1 and "tensor fc.weight: u has dtype float64" in r.stderr


BAD = {
    "shape mismatch": (lambda w, u: dict(w=w[:, :60], u=u), "tensor fc.weight: shape mismatch: w has 60 coordinates, u 64"),
    "float64 weights": (lambda w, u: dict(w=w.astype(np.float64), u=u), "tensor fc.weight: w has dtype float64"),
    "missing step": (lambda w, u: dict(w=w, u=u, steps=[0, 1, 3, 4]), "step 2 is missing"),
    "NaN proposal": (lambda w, u: dict(w=w, u=np.where(np.arange(64) == 9, np.nan, u).astype(np.float32)),
                     "tensor fc.weight, step 0, coordinate 9: non-finite value"),
    "trace schema": (lambda w, u: dict(w=w, u=u, schema="wbaudit.trace/1"), "this is a trace, not a trajectory"),
    "unknown format": (lambda w, u: dict(w=w, u=u, attrs={"format": "e4m4", "policy": "nearest"}),
                       "unknown format \"e4m4\""),
    "w_next rows": (lambda w, u: dict(w=w[:-1], u=u, w_next=w[1:-1]), "w has 4 rows and w_next 3"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_named_and_writes_nothing(tmp_path, wbaudit_exe, case):
    make, message = BAD[case]
    w, u = good_rows()
    write_h5(tmp_path / "t.h5", **make(w, u))
    r = run(wbaudit_exe, tmp_path / "t.h5", "--out", tmp_path / "out")
    assert r.returncode == 1, r.stdout
    assert message in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "out")
    assert [p for p in os.listdir(tmp_path) if p.startswith("out")] == []


def test_existing_out_is_refused(tmp_path, wbaudit_exe):
    w, u = good_rows()
    write_h5(tmp_path / "t.h5", w, u)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    r = run(wbaudit_exe, tmp_path / "t.h5", "--out", tmp_path / "out")
    assert r.returncode == 1 and "already exists" in r.stderr
    assert (tmp_path / "out" / "keep").read_text() == "x"
