"""ReferenceRecorder with block-scaled formats: the projected block events and the block sample the grid forecasts
other learning-rate scales from (docs/forecasting.md, "Block formats at any learning-rate scale"). The sample's blocks
and values are checked against the documented stratified rule recomputed here, NVFP4's tensor row against a plain
NumPy NVFP4 quantizer written from docs/formats.md, the datasets against the engine's for the same w and u, and
`wbaudit grid` on the recorder's trace against the recorded exact projection (s = 1) and a brute-force block write-back
of the whole tensor (other scales)."""
import csv
import glob
import os
import subprocess

import numpy as np
import pytest

import wbaudit

torch = pytest.importorskip("torch")
h5py = pytest.importorskip("h5py")

from wbaudit.torch import ReferenceRecorder  # noqa: E402

SAMPLE_ELEMENTS = 32768  # docs/forecasting.md: B = 32768 / (elements per block)
FIELDS = ["erased_grid", "erased_saturation", "erased_scale", "collateral", "flushed", "rescaled_up", "rescaled_down"]


def f32(x):
    return np.asarray(x, dtype=np.float32)


def blocks_of(shape, block_size, tiles_2d=False):
    """Every block of a [rows x cols] tensor in block-index order (docs/formats.md: blocks along rows, the short one
    at a row's end; nvfp4:2d: 16 x 16 tiles, row of tiles by row of tiles): (row slice, column slice)."""
    rows, cols = shape
    per_row = -(-cols // block_size)
    height = block_size if tiles_2d else 1
    out = []
    for r0 in range(0, rows, height):
        for j in range(per_row):
            out.append((slice(r0, min(rows, r0 + height)), slice(j * block_size, min(cols, (j + 1) * block_size))))
    return out


def stratified_indices(n, budget):
    """docs/trace-format.md "Block samples": every block when n <= B, else one block of each stratum
    [floor(k n / B), floor((k + 1) n / B)), k = 0 .. B - 1, at offset k mod its width."""
    if n <= budget:
        return list(range(n))
    out = []
    for k in range(budget):
        lo, hi = k * n // budget, (k + 1) * n // budget
        out.append(lo + k % (hi - lo))
    return out


# ---- NVFP4 written plainly from docs/formats.md ("NVFP4"), independent of the library ----
def _e4m3_values():
    vals, codes = [], []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue  # NaN
            vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
            codes.append(e * 8 + m)
    return np.array(vals), np.array(codes)


E4M3, E4M3_CODES = _e4m3_values()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])


def rne_e4m3_saturating(x):
    x = float(x)
    if x >= E4M3[-1]:
        return E4M3[-1]
    i = int(np.searchsorted(E4M3, x))
    if E4M3[i] == x:
        return E4M3[i]
    lo, hi = i - 1, i
    dl, dh = x - E4M3[lo], E4M3[hi] - x
    if dl != dh:
        return E4M3[lo] if dl < dh else E4M3[hi]
    return E4M3[lo] if E4M3_CODES[lo] % 2 == 0 else E4M3[hi]


def nvfp4_quantize(w):
    """q(w) of a 2-D fp32 tensor in NVFP4 (1-D blocks of 16 along rows), nearest, every step in fp32 as documented."""
    w = f32(w)
    amax_t = np.float32(np.max(np.abs(w)))
    s_enc = np.float32(1) if amax_t == 0 else np.float32(np.float32(2688) / amax_t)
    t = np.float32(s_enc * np.float32(np.float32(1) / np.float32(6)))
    q = np.zeros_like(w)
    for rs, cs in blocks_of(w.shape, 16):
        v = w[rs, cs]
        s_b = np.float32(rne_e4m3_saturating(np.float32(np.float32(np.max(np.abs(v))) * t)))
        if s_b == 0:
            continue
        grid = np.array([np.float32(np.float32(np.float32(k) * s_b) / s_enc) for k in E2M1], dtype=np.float64)
        a = np.abs(v.astype(np.float64))
        out = np.empty_like(a)
        for idx, x in np.ndenumerate(a):
            if x >= grid[-1]:
                out[idx] = grid[-1]
                continue
            k = int(np.searchsorted(grid, x, side="right")) - 1  # grid[k] <= x < grid[k + 1]
            dl, dh = x - grid[k], grid[k + 1] - x
            out[idx] = grid[k] if (dl < dh or (dl == dh and k % 2 == 0)) else grid[k + 1]
        q[rs, cs] = f32(np.sign(v) * out)
    return q


def fl32_sum_at(q, u, s):
    """|fl32(q + fl32(s u))| elementwise (the grid's NVFP4 tensor maximum at scale s)."""
    return np.abs(f32(q) + f32(np.float64(s) * u.astype(np.float64)))


class Recorded:
    """A small fp32 training loop under AdamW recorded by ReferenceRecorder, keeping every parameter's (w, u) of each
    recorded step as the test saw them (u = p_after - p_before in fp32, the recorder's definition)."""

    def __init__(self, path, model, formats, steps=3, seed=0):
        self.model = model
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        rec = ReferenceRecorder(model, formats=formats, path=path, steps=steps, seed=seed)
        self.wu = {name: [] for name, _ in model.named_parameters()}
        g = torch.Generator().manual_seed(1)
        n_in = next(model.parameters()).shape[-1]
        for _ in range(steps):
            x = torch.randn(32, n_in, generator=g)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            before = {name: p.detach().clone() for name, p in model.named_parameters()}
            with rec.step(loss=loss.item(), lr=3e-3):
                opt.step()
            for name, p in model.named_parameters():
                self.wu[name].append((before[name].numpy().copy(), torch.sub(p.detach(), before[name]).numpy().copy()))
        self.path = rec.close()
        self.trace = wbaudit.read_trace(self.path)


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """A [2100 x 40] weight: 4200 MX blocks (32 + 8 per row, 1024 sampled), 6300 NVFP4 blocks (2048 sampled), 396
    nvfp4:2d tiles (128 sampled); its bias [2100] (66 MX blocks) is sampled whole."""
    torch.manual_seed(3)
    model = torch.nn.Linear(40, 2100)
    path = tmp_path_factory.mktemp("sampled") / "trace.h5"
    return Recorded(str(path), model, ["e4m3", "mxfp8_e4m3", "mxfp4_e2m1:rceil", "nvfp4", "nvfp4:2d"])


@pytest.mark.parametrize("fmt,block_size,tiles_2d", [("mxfp8_e4m3", 32, False), ("mxfp4_e2m1:rceil", 32, False),
                                                     ("nvfp4", 16, False), ("nvfp4:2d", 16, True)])
def test_sample_holds_the_blocks_of_the_stratified_rule(sampled, fmt, block_size, tiles_2d):
    """The sample's block indices are the documented stratified choice and its w, u rows are those blocks' values,
    block by block, row by row within a block, exactly (recomputed here from the test's own w and u)."""
    for name, p in sampled.model.named_parameters():
        shape = tuple(p.shape) if p.dim() == 2 else (1, p.shape[0])
        blocks = blocks_of(shape, block_size, tiles_2d)
        budget = SAMPLE_ELEMENTS // (block_size * block_size if tiles_2d else block_size)
        want = stratified_indices(len(blocks), budget)
        s = sampled.trace["groups"][name]["projected"][fmt]["block_sample"]
        assert (s["rows"], s["cols"]) == shape
        assert list(s["blocks"]) == want, (name, fmt)
        assert s["elements"] == sum((blocks[b][0].stop - blocks[b][0].start) * (blocks[b][1].stop - blocks[b][1].start)
                                    for b in want)
        for t, (w, u) in enumerate(sampled.wu[name]):
            w2, u2 = w.reshape(shape), u.reshape(shape)
            ws = np.concatenate([w2[blocks[b]].reshape(-1) for b in want])
            us = np.concatenate([u2[blocks[b]].reshape(-1) for b in want])
            assert s["w"][t].tobytes() == ws.tobytes(), (name, fmt, t)
            assert s["u"][t].tobytes() == us.tobytes(), (name, fmt, t)
    budget = SAMPLE_ELEMENTS // (block_size * block_size if tiles_2d else block_size)
    assert len(sampled.trace["groups"]["weight"]["projected"][fmt]["block_sample"]["blocks"]) == budget  # sampled


def test_nvfp4_tensor_row_against_a_plain_quantizer(sampled):
    """NVFP4's tensor row: max |w| and max |q(w)| equal a NumPy quantizer written from docs/formats.md, and the kept
    lines (q(w_i), u_i) give the whole tensor's max |fl32(q(w) + fl32(s u))| at scales across [1/8, 8]."""
    for name in ("weight", "bias"):
        row_all = sampled.trace["groups"][name]["projected"]["nvfp4"]["block_sample"]["tensor"]
        assert row_all.shape == (len(sampled.wu[name]), 130)
        for t, (w, u) in enumerate(sampled.wu[name]):
            w2 = w.reshape(-1, w.shape[-1])
            q = nvfp4_quantize(w2)
            row = row_all[t]
            assert row[0] == np.max(np.abs(w)), (name, t)
            assert row[1] == np.max(np.abs(q)), (name, t)
            a, b = row[2::2], row[3::2]
            for s in (0.125, 0.3, 0.5, 1, 1.7, 2, 4, 8):
                want = np.max(fl32_sum_at(q.reshape(-1), u.reshape(-1), s))
                assert np.max(fl32_sum_at(a, b, s)) == want, (name, t, s)


def test_block_projection_equals_the_brute_force_write_back(sampled):
    """The recorded projection (erased, block events) is the block write-back of q(w) + u over the whole tensor,
    counted by wbaudit.writeback on the test's own w and u."""
    for name, p in sampled.model.named_parameters():
        for fmt in ("mxfp8_e4m3", "mxfp4_e2m1:rceil", "nvfp4"):
            pr = sampled.trace["groups"][name]["projected"][fmt]
            for t, (w, u) in enumerate(sampled.wu[name]):
                q = wbaudit.round(w.reshape(p.shape), fmt)
                _, c = wbaudit.writeback(q, u.reshape(p.shape), fmt)
                assert pr["erased"][t] == c["erased"], (name, fmt, t)
                assert pr["fraction"][t] == c["erased"] / c["nonzero"]


def test_traces_without_block_formats_carry_no_block_datasets(tmp_path, wbaudit_exe):
    """No block format declared: no block dataset in the trace, and `wbaudit grid` refuses a block format naming the
    group, the format and how to record its sample from PyTorch."""
    torch.manual_seed(0)
    rec = Recorded(str(tmp_path / "trace.h5"), torch.nn.Linear(8, 4), ["e4m3", "int4"], steps=2)
    with h5py.File(rec.path, "r") as f:
        names = []
        f.visit(names.append)
    assert not [n for n in names if "block" in n]
    r = subprocess.run([wbaudit_exe, "grid", rec.path, "--formats", "mxfp8_e4m3", "--lr-scales", "1", "-o",
                        str(tmp_path / "grid"), "--no-figure"], capture_output=True, text=True)
    assert r.returncode != 0
    assert 'no block sample for mxfp8_e4m3 (group "' in r.stderr, r.stderr
    assert "ReferenceRecorder" in r.stderr, r.stderr


def _h5_tree(group):
    """Every dataset (values, dtype, chunks, filters) and attribute under an h5py group."""
    out = {"attrs": {k: np.asarray(v).tolist() for k, v in group.attrs.items()}}
    for k, item in group.items():
        if isinstance(item, h5py.Dataset):
            out[k] = (item[()].tobytes(), str(item.dtype), item.shape, item.chunks, item.compression,
                      item.compression_opts, item.shuffle,
                      {a: np.asarray(v).tolist() for a, v in item.attrs.items()})
        else:
            out[k] = _h5_tree(item)
    return out


def test_same_w_u_give_the_engines_block_datasets(tmp_path, wbaudit_exe):
    """The engine's reference of examples/blocks_tiny.toml keeps its small groups' w and u; recording the same w and u
    through the Python recorder's path (_core.block_projection_step, _core.TraceWriter) gives block_sample and
    block_events datasets identical to the engine's: values, dtypes, chunking, compression, attributes."""
    src = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "blocks_tiny.toml")
    r = subprocess.run([wbaudit_exe, "run", src, "--out", str(tmp_path / "sweep"), "-q"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    refs = [p for p in sorted(glob.glob(str(tmp_path / "sweep" / "cells" / "*" / "attempts" / "*" / "trace.h5")))
            if wbaudit.read_trace(p)["mode"] == "reference"]
    assert refs
    engine = refs[0]
    t = wbaudit.read_trace(engine)
    block_formats = {f for g in t["groups"].values() for f, p in g["projected"].items() if "block_sample" in p}
    assert {"mxfp4_e2m1", "mxfp4_e2m1:rceil", "nvfp4"} <= block_formats
    header = {k: t[k] for k in ("schema", "mode", "format", "policy", "seed", "steps", "config_json", "histogram",
                                "margin")}
    header["groups"] = {}
    for name, g in t["groups"].items():
        assert "w" in g["joint"], name  # every group of the tiny model keeps its w and u
        proj = {}
        for f, p in g["projected"].items():
            s = p.get("block_sample")
            proj[f] = {} if s is None else wbaudit._core.block_projection_header(f, [s["rows"], s["cols"]])
        header["groups"][name] = {"tensor_id": g["tensor_id"], "size": g["size"], "projected": proj,
                                  "joint": {"init_absmax": g["joint"]["init_absmax"]}}
    out = tmp_path / "python" / "trace.h5"
    os.makedirs(out.parent)
    writer = wbaudit._core.TraceWriter(str(out), header)
    for i, step in enumerate(t["recorded_steps"]):
        groups = {}
        for name, g in t["groups"].items():
            proj = {}
            for f, p in g["projected"].items():
                if "block_sample" in p:
                    shape = (p["block_sample"]["rows"], p["block_sample"]["cols"])
                    proj[f] = wbaudit._core.block_projection_step(
                        f32(g["joint"]["w"][i]).reshape(shape), f32(g["joint"]["u"][i]).reshape(shape), f,
                        t["seed"], int(step), g["tensor_id"], name)
                else:
                    proj[f] = {"erased": p["erased"][i:i + 1], "fraction": p["fraction"][i:i + 1]}
            groups[name] = {"nonzero": g["nonzero"][i:i + 1], "zero_weight": g["zero_weight"][i:i + 1],
                            "ratio_histogram": g["ratio_histogram"][i:i + 1],
                            "joint": {"margin": g["joint"]["margin"][i:i + 1], "w": g["joint"]["w"][i:i + 1],
                                      "u": g["joint"]["u"][i:i + 1]},
                            "projected": proj}
        writer.append({"recorded_steps": [int(step)], "loss": t["loss"][i:i + 1],
                       "learning_rate": t["learning_rate"][i:i + 1], "groups": groups})
    writer.finish(t["steps"])
    compared = 0
    with h5py.File(engine, "r") as a, h5py.File(out, "r") as b:
        for name in t["groups"]:
            for f in block_formats:
                pa, pb = a["groups"][name]["projected"][f], b["groups"][name]["projected"][f]
                for part in ("block_sample", "block_events"):
                    assert _h5_tree(pa[part]) == _h5_tree(pb[part]), (name, f, part)
                for k in ("erased", "fraction"):
                    assert pa[k][()].tobytes() == pb[k][()].tobytes(), (name, f, k)
                compared += 1
    assert compared >= 3 * len(t["groups"])


def _grid(exe, trace, formats, scales, out):
    r = subprocess.run([exe, "grid", trace, "--formats", ",".join(formats), "--lr-scales",
                        ",".join(str(s) for s in scales), "-o", out, "--no-figure"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout
    grid = {}
    with open(os.path.join(out, "grid.csv")) as f:
        for row in csv.DictReader(f):
            key = (row["group"], row["format"], float(row["lr_scale"]), int(row["step"]))
            grid[key] = float(row["erased_fraction"])
    return grid


def test_grid_forecasts_block_formats_of_a_python_reference(tmp_path, wbaudit_exe):
    """End to end: a two-layer torch model under AdamW recorded with MX and NVFP4 formats; `wbaudit grid` forecasts
    them. At s = 1 the grid equals the recorded exact projection (the difference estimator's anchor, also for the
    sampled layer1.weight); for tensors sampled whole it equals a brute-force block write-back of q(w) + fl32(s u) of
    the whole tensor at s = 0.5 and 2."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(40, 1100), torch.nn.Tanh(), torch.nn.Linear(1100, 4))
    formats = ["mxfp8_e4m3", "mxfp4_e2m1", "nvfp4"]
    rec = Recorded(str(tmp_path / "ref" / "trace.h5"), model, ["e4m3"] + formats, steps=3)
    scales = [0.5, 1, 2]
    grid = _grid(wbaudit_exe, rec.path, formats, scales, str(tmp_path / "grid"))
    steps = [int(s) for s in rec.trace["recorded_steps"]]
    whole = 0
    for name, p in model.named_parameters():
        g = rec.trace["groups"][name]
        for fmt in formats:
            pr = g["projected"][fmt]
            s = pr["block_sample"]
            sampled_whole = len(s["blocks"]) == pr["block_events"]["blocks"]
            for t, step in enumerate(steps):
                assert grid[(name, fmt, 1.0, step)] == pytest.approx(pr["fraction"][t], abs=1e-12), (name, fmt, step)
                if not sampled_whole:
                    continue
                w, u = rec.wu[name][t]
                q = wbaudit.round(w.reshape(p.shape), fmt)
                for scale in (0.5, 2):
                    us = f32(np.float64(scale) * u.astype(np.float64)).reshape(p.shape)
                    _, c = wbaudit.writeback(q, us, fmt)
                    want = c["erased"] / c["nonzero"]
                    assert grid[(name, fmt, float(scale), step)] == pytest.approx(want, abs=1e-12), (name, fmt, scale)
                whole += 1
    assert whole >= 3 * 3 * len(formats)  # layer2.weight and both biases, every step and format
    sampled = rec.trace["groups"]["0.weight"]["projected"]
    assert len(sampled["mxfp8_e4m3"]["block_sample"]["blocks"]) < sampled["mxfp8_e4m3"]["block_events"]["blocks"]
    assert len(sampled["nvfp4"]["block_sample"]["blocks"]) < sampled["nvfp4"]["block_events"]["blocks"]
