"""PersistentNative as a torch.optim.Optimizer (LR schedulers, checkpoint / resume), its parameters (frozen, tied,
non-contiguous, sparse gradients, bf16 / fp16 storage, intK at a zero initialization) and ReferenceRecorder's. Each
behaviour is checked against an independent reference: a plain torch loop, reference.py's format tables, or the C++
kernels through wbaudit.writeback on an fp32 copy."""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import wbaudit
from reference import Table
from test_torch import batches, make_model, nearest_np
from wbaudit.torch import PersistentNative, ReferenceRecorder

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))


def bits(t):
    return t.detach().float().contiguous().view(torch.int32).clone()


def test_lr_scheduler_drives_the_inner_optimizer(tmp_path):
    """CosineAnnealingLR on PersistentNative changes the inner optimizer's lr, as on a plain optimizer: the same lrs,
    and (fp32, nearest) the same weights as plain SGD + the scheduler + the proposal's round trip."""
    steps = 8
    plain = make_model()
    popt = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    psched = torch.optim.lr_scheduler.CosineAnnealingLR(popt, T_max=steps)
    model = make_model()
    inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    pn = PersistentNative(inner, "fp32", model=model, path=None)
    assert isinstance(pn, torch.optim.Optimizer)
    assert pn.param_groups is inner.param_groups and pn.defaults is inner.defaults and pn.state is inner.state
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(pn, T_max=steps)
    lrs, plrs = [], []
    for x, y in batches(steps):
        for m, o in ((plain, popt), (model, pn)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
        before = [p.detach().clone() for p in plain.parameters()]
        popt.step()
        with torch.no_grad():
            for p, w in zip(plain.parameters(), before):
                p.copy_(w + (p - w))
        pn.step()
        psched.step()
        sched.step()
        lrs.append(inner.param_groups[0]["lr"])
        plrs.append(popt.param_groups[0]["lr"])
    assert lrs == plrs
    assert lrs[0] == pytest.approx(0.1 * (1 + np.cos(np.pi / steps)) / 2)
    for a, b in zip(plain.parameters(), model.parameters()):
        assert torch.equal(bits(a), bits(b))
    assert len(pn.state) == 4  # the inner optimizer's momentum buffers, through the shared state


def test_persistent_native_holds_the_same_bytes_as_it_streams(tmp_path):
    """test_torch's held-bytes check skips Optimizer instances, which PersistentNative now is: its own attributes
    (not the inner optimizer's state) hold as much after 3 recorded steps as after 12."""
    from test_torch import _held_bytes
    model = make_model()
    pn = PersistentNative(torch.optim.Adam(model.parameters(), lr=1e-3), "e4m3", model=model, path=tmp_path / "t.h5")
    held = {}
    for k, (x, y) in enumerate(batches(12)):
        pn.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        pn.step(loss=1.0)
        held[k] = _held_bytes({a: v for a, v in vars(pn).items() if a != "optimizer"})
    assert held[2] == held[11] > 0, held
    assert len(pn.trace()["recorded_steps"]) == 12
    pn.close()


RESUME_ARGS = dict(schedule={"kind": "every_k", "k": 3}, steps=20, seed=11)


def _run(model, pn, batch_list, start=0):
    for x, y in batch_list[start:]:
        loss = torch.nn.functional.mse_loss(model(x), y)
        pn.zero_grad()
        loss.backward()
        pn.step(loss=loss.item(), lr=pn.param_groups[0]["lr"])


def _first_half(fmt, policy, path, ckpt, stop, run_past):
    """In a separate process: steps 0..stop-1, checkpoint, a few more steps, then the process ends (no close())."""
    code = f"""
import sys, torch
sys.path[:0] = {list(sys.path)!r}
torch.set_num_threads(1)
from test_torch import make_model, batches
from test_torch_optim import _run, RESUME_ARGS
from wbaudit.torch import PersistentNative
m = make_model()
pn = PersistentNative(torch.optim.Adam(m.parameters(), lr=1e-2), {fmt!r}, model=m, policy={policy!r},
                      path={str(path)!r}, **RESUME_ARGS)
b = batches(20)
_run(m, pn, b[:{stop}])
torch.save({{"model": m.state_dict(), "opt": pn.state_dict()}}, {str(ckpt)!r})
_run(m, pn, b[:{stop + run_past}], start={stop})
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("fmt,policy", [("e4m3", "stochastic"), ("bf16", "nearest"), ("int8", "stochastic")])
def test_checkpoint_resume_is_bitwise_the_uninterrupted_run(tmp_path, fmt, policy):
    """A run checkpointed at step 7 (model + optimizer state_dicts through torch.save), which went on to step 8 and
    died, resumed in this process with a new model and a new PersistentNative: the same final weights, bit for bit, and
    the same trace (the rows recorded after the checkpoint are dropped and recorded again) as the run that did not
    stop."""
    b = batches(20)
    ref = make_model()
    ref_pn = PersistentNative(torch.optim.Adam(ref.parameters(), lr=1e-2), fmt, model=ref, policy=policy,
                              path=tmp_path / "ref" / "trace.h5", **RESUME_ARGS)
    _run(ref, ref_pn, b)
    ref_trace = wbaudit.read_trace(ref_pn.close())

    path, ckpt = tmp_path / "run" / "trace.h5", tmp_path / "ckpt.pt"
    _first_half(fmt, policy, path, ckpt, stop=7, run_past=3)
    died = wbaudit.read_trace(str(path) + ".partial", allow_incomplete=True)
    assert list(died["recorded_steps"]) == [0, 3, 6, 9]  # step 9 was recorded after the checkpoint
    state = torch.load(ckpt)
    if fmt == "int8":
        # Loading the weights before building PersistentNative: its construction rounds them with the scale of their
        # absmax, not the checkpoint's; load_state_dict refuses, naming a parameter.
        early = make_model()
        early.load_state_dict(state["model"])
        wrong = PersistentNative(torch.optim.Adam(early.parameters(), lr=1e-2), fmt, model=early, policy=policy,
                                 path=path, **RESUME_ARGS)
        with pytest.raises(ValueError, match=r"parameter \S+ is not on the int8 grid of the checkpoint's scale"):
            wrong.load_state_dict(state["opt"])
        # A resume that died while copying the rows left the renamed partial file (and no partial file): it is
        # resumed from.
        os.replace(str(path) + ".partial", str(path) + ".partial.resume")
    model = make_model(seed=5)  # other weights: the checkpoint's are loaded
    pn = PersistentNative(torch.optim.Adam(model.parameters(), lr=1e-2), fmt, model=model, policy=policy, path=path,
                          **RESUME_ARGS)
    model.load_state_dict(state["model"])
    pn.load_state_dict(state["opt"])
    assert pn.steps_run == 7
    _run(model, pn, b, start=7)
    trace = wbaudit.read_trace(pn.close())
    assert not os.path.exists(str(path) + ".partial") and not os.path.exists(str(path) + ".partial.resume")
    for (n, a), (_, c) in zip(ref.named_parameters(), model.named_parameters()):
        assert torch.equal(bits(a), bits(c)), n
    assert list(trace["recorded_steps"]) == list(ref_trace["recorded_steps"]) == [0, 3, 6, 9, 12, 15, 18, 19]
    for key in ("loss", "learning_rate"):
        np.testing.assert_array_equal(trace[key], ref_trace[key])
    for name, g in ref_trace["groups"].items():
        for k in ("nonzero", "erased", "saturated", "applied", "erased_fraction"):
            np.testing.assert_array_equal(trace["groups"][name][k], g[k], err_msg=f"{name} {k}")
    assert sum(g["erased"].sum() for g in trace["groups"].values()) > 0
    drop = ("time", "argv", "script", "script_sha256", "host")  # provenance of the two processes
    a, c = json.loads(trace["config_json"]), json.loads(ref_trace["config_json"])
    assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in c.items() if k not in drop}
    assert trace["steps"] == 20


def test_load_state_dict_refuses_another_configuration(tmp_path):
    model = make_model()
    pn = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.1), "e4m3", model=model, path=None, seed=1)
    sd = pn.state_dict()
    other = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.1), "e4m3", model=model, path=None, seed=2)
    with pytest.raises(ValueError, match="seed"):
        other.load_state_dict(sd)
    with pytest.raises(ValueError, match="wbaudit"):
        other.load_state_dict(torch.optim.SGD(model.parameters(), lr=0.1).state_dict())


def test_frozen_parameters_are_left_alone(tmp_path):
    """A frozen bias (requires_grad False) passed to the optimizer: not rounded, not written back, no group; the
    weight is plain SGD then nearest e4m3 (reference.py's table). Unfreezing it later is refused, naming it."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    lin.bias.requires_grad_(False)
    bias0 = lin.bias.detach().clone()
    pn = PersistentNative(torch.optim.SGD(lin.parameters(), lr=0.1), "e4m3", model=lin, path=tmp_path / "t.h5")
    vals = Table("e4m3").values
    x, y = batches(1)[0]
    w = lin.weight.detach().clone()
    torch.nn.functional.mse_loss(lin(x)[:, :2], y).backward()
    expect = nearest_np(vals, w.double().numpy() + (w - 0.1 * lin.weight.grad - w).double().numpy())
    pn.step()
    assert torch.equal(lin.bias, bias0)
    np.testing.assert_array_equal(lin.weight.detach().double().numpy(), expect)
    trace = pn.trace()
    assert set(trace["groups"]) == {"weight"}
    assert json.loads(trace["config_json"])["frozen"] == ["bias"]
    lin.bias.requires_grad_(True)
    with pytest.raises(ValueError, match="bias.*frozen"):
        pn.step()
    pn.close()
    rec = ReferenceRecorder([("w", torch.nn.Parameter(torch.ones(3))),
                             ("f", torch.nn.Parameter(torch.ones(3), requires_grad=False))], path=tmp_path / "r.h5")
    with rec.step():
        pass
    assert set(wbaudit.read_trace(rec.close())["groups"]) == {"w"}


def test_tied_and_repeated_parameters_are_one_group(tmp_path):
    """A weight tied under two model names is one group under its first name (config_json "tied" lists the other); a
    tensor listed twice in the optimizer is one group whose proposal is the total change (plain SGD([p, p]) steps it
    twice); two parameters over one storage are refused, naming both."""
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(4, 4, bias=False)
            self.dec = torch.nn.Linear(4, 4, bias=False)
            self.dec.weight = self.enc.weight

        def forward(self, x):
            return self.dec(torch.tanh(self.enc(x)))

    torch.manual_seed(0)
    model = Tied()
    pn = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.1), "e4m3", model=model, path=tmp_path / "t.h5")
    model(torch.randn(3, 4)).sum().backward()
    pn.step()
    trace = wbaudit.read_trace(pn.close())
    assert set(trace["groups"]) == {"enc.weight"}
    assert json.loads(trace["config_json"])["tied"] == {"enc.weight": ["dec.weight"]}

    torch.manual_seed(1)
    p = torch.nn.Parameter(torch.randn(5, 3))
    q = torch.nn.Parameter(p.detach().clone())
    with pytest.warns(UserWarning):
        inner = torch.optim.SGD([p, p], lr=0.1)
        plain = torch.optim.SGD([q, q], lr=0.1)
    pn = PersistentNative(inner, "e4m3", path=tmp_path / "u.h5")
    w = p.detach().clone()
    q.data.copy_(w)
    g = torch.randn(5, 3)
    p.grad, q.grad = g.clone(), g.clone()
    plain.step()
    pn.step()
    u = (q.detach() - w).double().numpy()
    np.testing.assert_array_equal(p.detach().double().numpy(), nearest_np(Table("e4m3").values, w.double().numpy() + u))
    assert list(wbaudit.read_trace(pn.close())["groups"]) == ["group0.param0"]

    base = torch.randn(4, 4)
    a, b = torch.nn.Parameter(base[:2]), torch.nn.Parameter(base[2:])
    with pytest.raises(ValueError, match="group0.param0 and group0.param1 share storage"):
        PersistentNative(torch.optim.SGD([a, b], lr=0.1), "e4m3", path=None)


def test_non_contiguous_parameter(tmp_path):
    """A parameter created as a transposed (non-contiguous) tensor: written back like its contiguous copy (plain SGD
    then nearest e4m3), in its own layout."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(6, 5).t())
    assert not p.is_contiguous()
    pn = PersistentNative(torch.optim.SGD([p], lr=0.3), "e4m3", path=None)
    vals = Table("e4m3").values
    np.testing.assert_array_equal(p.detach().double().numpy(), nearest_np(vals, p.detach().double().numpy()))
    for k in range(3):
        w = p.detach().clone()
        g = torch.randn(5, 6, generator=torch.Generator().manual_seed(k))
        p.grad = g
        pn.step()
        u = ((w - 0.3 * g) - w).double().numpy()
        np.testing.assert_array_equal(p.detach().double().numpy(), nearest_np(vals, w.double().numpy() + u))
    assert not p.is_contiguous() and p.shape == (5, 6)


def test_sparse_gradients(tmp_path):
    """Embedding(sparse=True) + SparseAdam: the proposal is still p_after - p_before (dense; zero in the rows the
    batch did not touch), written back like plain SparseAdam's step followed by nearest e4m3."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    pn = PersistentNative(torch.optim.SparseAdam(emb.parameters(), lr=0.05), "e4m3", model=emb, path=tmp_path / "t.h5")
    twin = torch.nn.Embedding(10, 4, sparse=True)
    twin.weight.data.copy_(emb.weight.detach())
    plain = torch.optim.SparseAdam(twin.parameters(), lr=0.05)
    vals = Table("e4m3").values
    for k, idx in enumerate(([1, 2, 2], [3, 1], [7])):
        w = emb.weight.detach().clone()
        twin.weight.data.copy_(w)
        for m in (emb, twin):
            (m(torch.tensor(idx)) * torch.arange(1.0, 5.0)).sum().backward()
        assert emb.weight.grad.is_sparse
        plain.step()
        pn.step()
        u = (twin.weight.detach() - w).double().numpy()
        np.testing.assert_array_equal(emb.weight.detach().double().numpy(),
                                      nearest_np(vals, w.double().numpy() + u), err_msg=str(k))
        for m, o in ((emb, pn), (twin, plain)):
            o.zero_grad()
    g = wbaudit.read_trace(pn.close())["groups"]["weight"]
    assert list(g["nonzero"]) == [8, 8, 4]  # 4 coordinates per touched row


def test_int_format_with_a_zero_initialized_parameter(tmp_path, wbaudit_exe):
    """issue 31 item 4: a bias initialized to zeros has no intK scale. PersistentNative refuses it naming the
    parameter; ReferenceRecorder leaves its intK projection out, says why in config_json, and `wbaudit grid` reports
    that group's int4 undefined with the reason."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 2)
    torch.nn.init.zeros_(lin.bias)
    with pytest.raises(ValueError, match="parameter bias: int4.*0"):
        PersistentNative(torch.optim.SGD(lin.parameters(), lr=0.1), "int4", model=lin, path=None)
    pn = PersistentNative(torch.optim.SGD(lin.parameters(), lr=0.1), {"bias": "fp32", "*": "int4"}, model=lin,
                          path=None)
    assert pn.formats == {"weight": "int4", "bias": "fp32"}

    rec = ReferenceRecorder(lin, formats=["int4", "e4m3"], path=tmp_path / "ref" / "trace.h5")
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for x, y in batches(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(lin(x), y).backward()
        with rec.step():
            opt.step()
    path = rec.close()
    trace = wbaudit.read_trace(path)
    assert set(trace["groups"]["bias"]["projected"]) == {"e4m3"}
    assert set(trace["groups"]["weight"]["projected"]) == {"int4", "e4m3"}
    assert "max |w| at initialization is 0" in json.loads(trace["config_json"])["int_undefined"]["bias"]["int4"]
    out = tmp_path / "grid"
    r = subprocess.run([wbaudit_exe, "grid", str(path), "--formats", "int4,e4m3", "--lr-scales", "1", "-o", str(out),
                        "--no-figure"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "int4: undefined: no per-tensor scale (max |w| at initialization is 0)" in r.stdout, r.stdout
    rows = list(csv.DictReader(open(out / "grid.csv")))
    assert {r["erased_fraction"] for r in rows if r["group"] == "bias" and r["format"] == "int4"} <= {""}
    assert all(r["erased_fraction"] != "" for r in rows if r["group"] == "weight")


@pytest.mark.parametrize("fused", [None, False])
@pytest.mark.parametrize("dtype,fmt", [(torch.bfloat16, None), (torch.float16, None), (torch.bfloat16, "e4m3")])
@pytest.mark.parametrize("policy", ["nearest", "stochastic"])
def test_bf16_storage_is_written_back_from_the_fp32_proposal(tmp_path, policy, dtype, fmt, fused):
    """bf16 / fp16 parameters with formats=None (the storage dtype is the format) or a format whose values the
    storage holds: each step, the inner AdamW steps on fp32 copies (its state is fp32), the fp32 proposal
    u = p_after - p_before is written back (the fused pass over the storage's bits, _core.writeback_stored) and
    stored into the parameter. Reference: an fp32 AdamW on its own copies fed the same grads, then wbaudit.writeback
    (the C++ kernel) on fp32 arrays with the same SR keys; and nearest against reference.py's table."""
    model = make_model().to(dtype)
    names = [n for n, _ in model.named_parameters()]
    pn = PersistentNative(torch.optim.AdamW(model.parameters(), lr=3e-2), fmt, model=model, policy=policy, seed=4,
                          path=tmp_path / "t.h5", fused=fused)
    refp = [torch.nn.Parameter(p.detach().float()) for p in model.parameters()]  # after rounding into fmt
    ref_opt = torch.optim.AdamW(refp, lr=3e-2)
    fmt_name = fmt or {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    vals = Table(fmt_name).values
    erased = 0
    for k, (x, y) in enumerate(batches(5)):
        pn.zero_grad()
        if dtype == torch.float16:  # torch's CPU matmuls have no float16: the grads of an fp32 copy, cast
            copy = make_model()
            copy.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
            torch.nn.functional.mse_loss(copy(x), y).backward()
            for p, q in zip(model.parameters(), copy.parameters()):
                p.grad = q.grad.half()
        else:
            torch.nn.functional.mse_loss(model(x.to(dtype)).float(), y).backward()
        for r, p in zip(refp, model.parameters()):
            r.grad = p.grad.float()
        before = [r.detach().clone() for r in refp]
        ref_opt.step()
        pn.step()
        for tid, (r, w, p, n) in enumerate(zip(refp, before, model.parameters(), names)):
            assert p.dtype == dtype and p.grad.dtype == dtype
            u = (r.detach() - w).numpy().ravel()
            expect, c = wbaudit.writeback(w.numpy().ravel(), u, fmt_name, policy, 4, k, tid)
            if policy == "nearest":
                np.testing.assert_array_equal(expect, nearest_np(vals, w.double().numpy().ravel() + u))
            np.testing.assert_array_equal(p.detach().float().numpy().ravel(), expect, err_msg=f"{n} step {k}")
            with torch.no_grad():
                r.copy_(torch.from_numpy(expect).view(r.shape))
            erased += c["erased"]
    assert erased > 0
    assert pn.fused_steps == (5 if fused is None else 0)  # fused=None: the fused AdamW step (CPU bf16 / fp16)
    assert all(s["exp_avg"].dtype == torch.float32 for s in pn.state.values())
    trace = wbaudit.read_trace(pn.close())
    assert trace["format"] == fmt_name
    assert json.loads(trace["config_json"])["storage"] == {n: fmt_name if fmt is None else "bf16" for n in names}


def test_storage_dtype_and_format_checks():
    """A format is allowed on bf16 / fp16 storage when every value it has fits the dtype; otherwise, and for float64
    or integer parameters, the refusal names the parameter and why."""
    torch.manual_seed(0)
    half = torch.nn.Linear(4, 2).half()
    pn = PersistentNative(torch.optim.SGD(half.parameters(), lr=0.1), "e4m3", model=half, path=None)
    vals = Table("e4m3").values
    for p in half.parameters():  # rounded into e4m3, stored exactly in fp16
        assert p.dtype == torch.float16
        np.testing.assert_array_equal(p.detach().double().numpy(), nearest_np(vals, p.detach().double().numpy()))
    assert pn.formats == {"weight": "e4m3", "bias": "e4m3"}
    with pytest.raises(TypeError, match="parameter weight is stored as torch.float16: bf16"):
        PersistentNative(torch.optim.SGD(half.parameters(), lr=0.1), "bf16", model=half, path=None)
    bf = torch.nn.Linear(4, 2).bfloat16()
    with pytest.raises(TypeError, match="parameter weight is stored as torch.bfloat16: fp16"):
        PersistentNative(torch.optim.SGD(bf.parameters(), lr=0.1), "fp16", model=bf, path=None)
    with pytest.raises(TypeError, match="parameter weight is stored as torch.bfloat16: fp32"):
        PersistentNative(torch.optim.SGD(bf.parameters(), lr=0.1), {"weight": "fp32"}, model=bf, path=None)
    with pytest.raises(TypeError, match="parameter weight is stored as torch.bfloat16: int8 with scale"):
        PersistentNative(torch.optim.SGD(bf.parameters(), lr=0.1), {"*": "int8"}, model=bf, path=None)  # 127 * scale
    dbl = torch.nn.Linear(4, 2).double()
    with pytest.raises(TypeError, match="parameter weight is torch.float64"):
        PersistentNative(torch.optim.SGD(dbl.parameters(), lr=0.1), "e4m3", model=dbl, path=None)


def _has_cuda_torch_ops():
    try:
        from wbaudit import torch_ops  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _has_cuda_torch_ops(), reason="needs wbaudit.torch_ops and CUDA")
@pytest.mark.parametrize("fmt", ["e4m3", "mxfp4_e2m1:rceil", "nvfp4:skip_unchanged_blocks"])
def test_device_path_equals_the_cpu_path(tmp_path, fmt):
    """On CUDA (through wbaudit.torch_ops) a stochastic run's weights and trace equal the CPU run's bit for bit; in a
    block format (blocks along each parameter's last dimension) its block events too."""
    traces, weights = [], []
    for device in ("cpu", "cuda"):
        model = make_model().to(device)
        pn = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.05), fmt, model=model, policy="stochastic",
                              seed=3, path=tmp_path / device / "t.h5")
        for x, y in batches(6):
            pn.zero_grad()
            torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            pn.step()
        traces.append(wbaudit.read_trace(pn.close()))
        weights.append([bits(p).cpu() for p in model.parameters()])
    for a, b in zip(*weights):
        assert torch.equal(a, b)
    for name, g in traces[0]["groups"].items():
        for k in ("nonzero", "erased", "saturated", "applied"):
            np.testing.assert_array_equal(g[k], traces[1]["groups"][name][k])
        for k, series in g.get("block_events", {}).items():
            np.testing.assert_array_equal(series, traces[1]["groups"][name]["block_events"][k])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_reference_recorder_on_cuda_records_the_cpu_trace(tmp_path):
    """A ReferenceRecorder over CUDA parameters records what the CPU recorder records for the same run."""
    traces = []
    for device in ("cpu", "cuda"):
        model = make_model().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        rec = ReferenceRecorder(model, formats=["e4m3", "int4"], path=tmp_path / device / "r.h5")
        for x, y in batches(6):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            with rec.step():
                opt.step()
        traces.append(wbaudit.read_trace(rec.close()))
    for name, g in traces[0]["groups"].items():
        d = traces[1]["groups"][name]
        for k in ("nonzero", "zero_weight", "ratio_histogram"):
            np.testing.assert_array_equal(g[k], d[k], err_msg=f"{name} {k}")
        np.testing.assert_array_equal(g["joint"]["margin"], d["joint"]["margin"])
        for f, pg in g["projected"].items():
            np.testing.assert_array_equal(pg["erased"], d["projected"][f]["erased"])
