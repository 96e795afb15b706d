"""`wbaudit evaluate` of a directory of external runs (imported with `wbaudit import`, no sweep.json): the imported
target runs are scored against the imported reference's projection, the report is labelled exploratory and never
canonical, and its per-cell RMSE equals a plain recomputation from the two trace files with h5py."""
import csv
import math
import subprocess

import h5py
import numpy as np
import torch

from wbaudit.torch import PersistentNative, ReferenceRecorder

STEPS = 12


def model_and_data(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(32, 6, generator=g), torch.randn(32, 3, generator=g)) for _ in range(STEPS)]
    return model, data


def record_reference(path):
    model, data = model_and_data(1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rec = ReferenceRecorder(model, formats=["e4m3", "bf16"], steps=STEPS, path=path, seed=1)
    for x, y in data:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        with rec.step(loss=loss.item()):
            opt.step()
    return rec.close()


def run_target(path, fmt, seed):
    model, data = model_and_data(seed)
    pn = PersistentNative(torch.optim.Adam(model.parameters(), lr=3e-3), formats=fmt, model=model, path=path,
                          seed=seed, steps=STEPS)
    for x, y in data:
        loss = (model(x) - y).pow(2).mean()
        pn.zero_grad()
        loss.backward()
        pn.step(loss=loss.item())
    return pn.close()


def series(path, group, dataset):
    with h5py.File(path, "r") as f:
        return np.asarray(f["recorded_steps"]), np.asarray(f[f"groups/{group}/{dataset}"], dtype=float)


def test_evaluate_scores_external_runs_and_never_calls_them_canonical(tmp_path, wbaudit_exe):
    ref = record_reference(str(tmp_path / "ref.h5"))
    targets = {name: run_target(str(tmp_path / f"{name}.h5"), fmt, seed)
               for name, fmt, seed in [("e4m3-a", "e4m3", 1), ("e4m3-b", "e4m3", 2), ("bf16-a", "bf16", 1)]}
    runs = tmp_path / "runs"
    cmd = [wbaudit_exe, "import", str(runs), ref, *targets.values(), "--name", "ref"]
    for name in targets:
        cmd += ["--name", name]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    analysis = tmp_path / "a.toml"
    analysis.write_text('[analysis]\npredictors = ["source", "template", "common-time"]\n'
                        'baselines = ["template", "common-time"]\n'
                        '[template]\nmissing_class = "inconclusive"\n'
                        '[bootstrap]\nresamples = 50\nmethod = "percentile"\n')
    out = tmp_path / "eval"
    r = subprocess.run([wbaudit_exe, "evaluate", str(runs), "--analysis", str(analysis), "--out", str(out),
                        "--no-figures"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    report = (out / "report.md").read_text()
    assert "exploratory: external runs" in report and "never canonical" in report
    assert "not produced by wbaudit's runner" in report
    rows = list(csv.DictReader(open(out / "cells.csv")))
    cells = {(row["run"], row["cell"]) for row in rows if row["predictor"] == "source"}
    assert {run for run, _ in cells} == {"external/" + n for n in targets}
    with h5py.File(targets["e4m3-a"], "r") as f:
        groups = list(f["groups"].keys())
    assert len(cells) == 3 * len(groups)
    # rmse_cell of source == RMSE of the reference's projected fraction against the target's erased fraction
    checked = 0
    for row in rows:
        if row["predictor"] != "source":
            continue
        name = row["run"][len("external/"):]
        group = row["cell"][len(row["run"]) + 1:]
        fmt = "bf16" if name.startswith("bf16") else "e4m3"
        steps_t, measured = series(targets[name], group, "erased_fraction")
        steps_r, projected = series(ref, group, f"projected/{fmt}/fraction")
        assert list(steps_t) == list(steps_r)
        keep = np.isfinite(measured) & np.isfinite(projected)
        expected = math.sqrt(np.mean((projected[keep] - measured[keep]) ** 2))
        assert abs(float(row["rmse_cell"]) - expected) <= 1e-12 + 1e-9 * expected, (row["cell"], expected)
        checked += 1
    assert checked == 3 * len(groups)
    # a registered-style requirement cannot name external runs
    bad = tmp_path / "b.toml"
    bad.write_text('[analysis]\nrequired_cells = ["external/*"]\n')
    r = subprocess.run([wbaudit_exe, "evaluate", str(runs), "--analysis", str(bad), "--out", str(tmp_path / "e2")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "never canonical" in r.stderr
    assert not (tmp_path / "e2").exists()
