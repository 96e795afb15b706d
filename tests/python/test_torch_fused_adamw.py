"""The fused AdamW step of PersistentNative on bf16 / fp16 storage (sim/optim/torch_adamw.hpp through
wbaudit._core.adamw_step_stored): its arithmetic against torch.optim.AdamW itself on 10^6 coordinates, and a whole
PersistentNative run through it against the same run through the inner optimizer (fused=False): the same parameter
bits, AdamW state and trace counts."""
import numpy as np
import pytest
import torch

import wbaudit
from wbaudit import _core
from wbaudit.torch import PersistentNative

torch.set_num_threads(1)


@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "bf16"), (torch.float16, "fp16")])
@pytest.mark.parametrize("grad32", [False, True])
def test_kernel_equals_torch_adamw_on_a_million_coordinates(dtype, name, grad32):
    """torch.optim.AdamW on an fp32 copy of the stored values (what PersistentNative's inner optimizer steps) against
    the kernel on the stored bits, three steps, 1,000,003 coordinates (a tail after the 8-wide vectors), weights,
    gradients and moments across binades (fp16: its subnormals too); the stepped values and both moments bit-equal."""
    gen = torch.Generator().manual_seed(5)
    n = 1_000_003
    scale = torch.pow(2.0, torch.randint(-20, 2, (n,), generator=gen).float())
    w = (torch.randn(n, generator=gen) * scale * 0.05).to(dtype)
    p = w.float().requires_grad_()
    lr, betas, eps, wd = 2e-3, (0.9, 0.95), 1e-8, 0.1
    opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd)
    m, v, out = (np.zeros(n, np.float32) for _ in range(3))
    for t in (1, 2, 3):
        g = (torch.randn(n, generator=gen) * torch.pow(2.0, torch.randint(-24, 0, (n,), generator=gen).float()))
        g = g.to(dtype)
        with torch.no_grad():
            p.copy_(w.float())
        p.grad = g.float()
        opt.step()
        grad = g.float().numpy() if grad32 else g.view(torch.int16).numpy()
        _core.adamw_step_stored(w.view(torch.int16).numpy(), grad, m, v, out, name, lr, betas[0], betas[1], eps, wd,
                                float(t))
        st = opt.state[p]
        np.testing.assert_array_equal(out.view(np.int32), p.detach().numpy().view(np.int32), err_msg=f"step {t}")
        np.testing.assert_array_equal(m.view(np.int32), st["exp_avg"].numpy().view(np.int32))
        np.testing.assert_array_equal(v.view(np.int32), st["exp_avg_sq"].numpy().view(np.int32))
        assert np.count_nonzero(out != w.float().numpy()) > n // 2  # the steps move the weights
        w = p.detach().to(dtype)


def model_pair(dtype):
    def make():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.Tanh(), torch.nn.Linear(40, 5)).to(dtype)
    return make(), make()


def grads_for(model, k, dtype):
    """Deterministic gradients of the model's dtype for step k (torch's CPU matmuls lack float16)."""
    g = torch.Generator().manual_seed(100 + k)
    for p in model.parameters():
        p.grad = (torch.randn(p.shape, generator=g) * 10.0 ** -(2 + k % 3)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt,policy", [(None, "nearest"), (None, "stochastic"), ("e4m3", "deadzone-sr")])
def test_fused_run_equals_the_inner_optimizer_run(tmp_path, dtype, fmt, policy):
    """Two parameter groups (different lr and weight decay), a scheduler on PersistentNative, 7 steps recorded every
    step: fused=None (the fused path) and fused=False (torch.optim.AdamW on fp32 copies, then the write-back) give the
    same parameter bits, the same AdamW state and the same trace counts."""
    runs = []
    for fused, model in zip((None, False), model_pair(dtype)):
        inner = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 3e-2, "weight_decay": 0.05},
                                   {"params": model[2].parameters(), "lr": 1e-2, "weight_decay": 0.0}],
                                  betas=(0.9, 0.99))
        pn = PersistentNative(inner, fmt, model=model, policy=policy, seed=9, path=tmp_path / f"{fused}.h5",
                              fused=fused)
        sched = torch.optim.lr_scheduler.StepLR(pn, step_size=3, gamma=0.5)
        for k in range(7):
            grads_for(model, k, dtype)
            pn.step(loss=float(k))
            sched.step()
        runs.append((model, pn, wbaudit.read_trace(pn.close())))
    (fm, fpn, ft), (gm, gpn, gt) = runs
    assert fpn.fused_steps == 7 and gpn.fused_steps == 0
    for (n, a), b in zip(fm.named_parameters(), gm.parameters()):
        assert a.dtype == dtype
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), n
        sa, sb = fpn.state[a], gpn.state[b]
        assert sa["step"].item() == sb["step"].item() == 7
        for key in ("exp_avg", "exp_avg_sq"):
            assert sa[key].dtype == torch.float32
            assert torch.equal(sa[key].view(torch.int32), sb[key].view(torch.int32)), (n, key)
    erased = 0
    for name in ft["groups"]:
        for key in ("nonzero", "erased", "saturated", "applied"):
            np.testing.assert_array_equal(ft["groups"][name][key], gt["groups"][name][key], err_msg=f"{name} {key}")
        erased += int(np.sum(ft["groups"][name]["erased"]))
    assert erased > 0


def test_fused_true_names_what_stops_it():
    model = torch.nn.Linear(4, 2).bfloat16()
    pn = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.1), None, model=model, path=None, fused=True)
    grads_for(model, 0, torch.bfloat16)
    with pytest.raises(ValueError, match="the inner optimizer is SGD, not torch.optim.AdamW"):
        pn.step()
    model = torch.nn.Linear(4, 2)
    pn = PersistentNative(torch.optim.AdamW(model.parameters()), "bf16", model=model, path=None, fused=True)
    grads_for(model, 0, torch.float32)
    with pytest.raises(ValueError, match="parameter weight is not a contiguous CPU bfloat16 / float16 tensor"):
        pn.step()
    model = torch.nn.Linear(4, 2).bfloat16()
    pn = PersistentNative(torch.optim.AdamW(model.parameters(), amsgrad=True), None, model=model, path=None,
                          fused=True)
    grads_for(model, 0, torch.bfloat16)
    with pytest.raises(ValueError, match="a parameter group has amsgrad=True"):
        pn.step()
    with pytest.raises(ValueError, match="fused is None"):
        PersistentNative(torch.optim.AdamW(model.parameters()), None, model=model, path=None, fused="yes")


def test_kernel_refuses_bad_arrays():
    s = np.zeros(8, np.int16)
    f = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="storage_dtype e4m3 is not bf16 or fp16"):
        _core.adamw_step_stored(s, s, f, f.copy(), f.copy(), "e4m3", 1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0)
    with pytest.raises(ValueError, match="storage holds 8 values, exp_avg 7"):
        _core.adamw_step_stored(s, s, f[:7].copy(), f.copy(), f.copy(), "bf16", 1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0)
    with pytest.raises(TypeError, match="storage has dtype float32"):
        _core.adamw_step_stored(f, s, f.copy(), f.copy(), f.copy(), "bf16", 1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fused", [None, False])
def test_checkpoint_of_a_16_bit_run_resumes_bitwise(tmp_path, dtype, fused):
    """A bf16 / fp16-storage run checkpointed after 3 of 6 steps (torch.save of both state_dicts), resumed with a new
    model and a new PersistentNative: the AdamW state comes back as float32 (torch's load_state_dict casts state to the
    parameter's dtype; this used to make it bf16 and the next step fail) and the weights after step 6 are the
    uninterrupted run's bit for bit."""
    def run(model, pn, ks):
        for k in ks:
            grads_for(model, k, dtype)
            pn.step()

    def build(model):
        return PersistentNative(torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1), None, model=model,
                                policy="stochastic", seed=2, path=None, fused=fused)

    ref, half = model_pair(dtype)
    run(ref, build(ref), range(6))
    pn = build(half)
    run(half, pn, range(3))
    torch.save({"model": half.state_dict(), "opt": pn.state_dict()}, tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt")
    model, _ = model_pair(dtype)
    resumed = build(model)
    model.load_state_dict(state["model"])
    resumed.load_state_dict(state["opt"])
    assert {v["exp_avg"].dtype for v in resumed.state.values()} == {torch.float32}
    assert all(p.dtype == dtype for p in model.parameters())
    run(model, resumed, range(3, 6))
    assert resumed.fused_steps == (3 if fused is None else 0)
    for (n, a), b in zip(ref.named_parameters(), model.parameters()):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), n
