"""The decoder (sim/model/decoder.*) against an independent PyTorch implementation.

wbaudit_decoder_torch_dump (path in $WBAUDIT_DECODER_DUMP) writes a decoder's weights, a token batch, the loss and
every gradient to HDF5 (/weights/<name>, /gradients/<name>, /tokens, attributes "config" and "loss"). This file builds
the same GPT-NeoX-style architecture with plain torch.nn modules and autograd, loads the weights, and compares the
loss and each tensor's gradient: ||g - g_torch|| / ||g_torch|| <= 1e-5 in float32 and <= 1e-12 in float64.
"""

import json
import math
import os
import subprocess

import h5py
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, dtype):
        super().__init__()
        self.heads = cfg["heads"]
        self.head_dim = cfg["width"] // cfg["heads"]
        self.qkv = nn.Linear(cfg["width"], 3 * cfg["width"], bias=False)
        self.out = nn.Linear(cfg["width"], cfg["width"], bias=False)
        self.rot = 2 * int(math.floor(self.head_dim * cfg["rotary_fraction"] / 2))
        seq = cfg["seq_len"]
        if self.rot > 0:
            # Tables in double, rounded once to the model's dtype (as GPT-NeoX caches them).
            inv_freq = cfg["rotary_base"] ** (-torch.arange(0, self.rot, 2, dtype=torch.float64) / self.rot)
            freqs = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos", emb.cos().to(dtype), persistent=False)
            self.register_buffer("sin", emb.sin().to(dtype), persistent=False)

    def rope(self, x):
        if self.rot == 0:
            return x
        xr, xp = x[..., : self.rot], x[..., self.rot :]
        xr = xr * self.cos + rotate_half(xr) * self.sin
        return torch.cat((xr, xp), dim=-1)

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(x).split(w, dim=-1)
        q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        q, k = self.rope(q), self.rope(k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
        y = (probs @ v).transpose(1, 2).reshape(b, s, w)
        return self.out(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate = nn.Linear(cfg["width"], cfg["mlp_hidden"], bias=False)
        self.up = nn.Linear(cfg["width"], cfg["mlp_hidden"], bias=False)
        self.down = nn.Linear(cfg["mlp_hidden"], cfg["width"], bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg, dtype):
        super().__init__()
        self.attn_norm = RMSNorm(cfg["width"], cfg["norm_eps"])
        self.attn = Attention(cfg, dtype)
        self.mlp_norm = RMSNorm(cfg["width"], cfg["norm_eps"])
        self.mlp = MLP(cfg)
        self.parallel = cfg["parallel_residual"]

    def forward(self, x):
        if self.parallel:
            return x + self.attn(self.attn_norm(x)) + self.mlp(self.mlp_norm(x))
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self, cfg, dtype):
        super().__init__()
        self.embed = nn.Embedding(cfg["vocab"], cfg["width"])
        self.blocks = nn.ModuleList(Block(cfg, dtype) for _ in range(cfg["layers"]))
        self.final_norm = RMSNorm(cfg["width"], cfg["norm_eps"])
        self.lm_head = nn.Linear(cfg["width"], cfg["vocab"], bias=False)

    def forward(self, tokens):
        x = self.embed(tokens[:, :-1])
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.final_norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def dump(tmp_path, parallel, rotary_fraction, double):
    exe = os.environ.get("WBAUDIT_DECODER_DUMP")
    if not exe:
        pytest.skip("WBAUDIT_DECODER_DUMP is not set (run through ctest)")
    out = tmp_path / "decoder.h5"
    cmd = [exe, str(out), "--rotary-fraction", str(rotary_fraction)]
    cmd += ["--parallel"] if parallel else []
    cmd += ["--double"] if double else []
    subprocess.run(cmd, check=True)
    return out


@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("rotary_fraction", [0.5, 1.0])
@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_decoder_matches_torch(tmp_path, parallel, rotary_fraction, double):
    torch.set_num_threads(1)
    path = dump(tmp_path, parallel, rotary_fraction, double)
    dtype = torch.float64 if double else torch.float32
    tol = 1e-12 if double else 1e-5
    with h5py.File(path, "r") as f:
        cfg = json.loads(f.attrs["config"])
        loss_cpp = float(f.attrs["loss"])
        tokens = torch.from_numpy(np.asarray(f["tokens"], dtype=np.int64))
        weights = {name: np.asarray(f["weights"][name]) for name in f["weights"]}
        grads = {name: np.asarray(f["gradients"][name]) for name in f["gradients"]}
    if not double:
        # fp32: the weights are those of a wbaudit checkpoint (the engine's, after 3 Adam steps), read here with h5py
        # from the checkpoint's own layout (/weights/<name>, PyTorch shapes); the dump computed with the same values.
        with h5py.File(str(path) + ".checkpoint.h5", "r") as ck:
            assert ck.attrs["model_kind"] in (b"decoder", "decoder") and int(ck.attrs["step"]) == 3
            from_checkpoint = {name: np.asarray(ck["weights"][name]) for name in ck["weights"]}
        assert sorted(from_checkpoint) == sorted(weights)
        for name, w in from_checkpoint.items():
            assert np.array_equal(w, weights[name]), name
        assert any(not np.all(w == 1) for n, w in from_checkpoint.items() if w.ndim == 1), "norm gains still 1"
        weights = from_checkpoint
    assert cfg["parallel_residual"] == parallel and cfg["rotary_fraction"] == rotary_fraction
    assert cfg["scalar"] == ("float64" if double else "float32")
    assert tokens.shape == (cfg["batch"], cfg["seq_len"] + 1)

    model = Decoder(cfg, dtype).to(dtype)
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(weights), "tensor names differ from the PyTorch module's"
    with torch.no_grad():
        for name, p in params.items():
            assert tuple(p.shape) == weights[name].shape, name
            p.copy_(torch.from_numpy(weights[name]))
            assert weights[name].dtype == (np.float64 if double else np.float32), name

    loss = model(tokens)
    loss.backward()
    assert abs(loss.item() - loss_cpp) <= tol * max(1.0, abs(loss.item())), (loss.item(), loss_cpp)
    worst = 0.0
    for name, p in params.items():
        g_torch = p.grad.detach().to(torch.float64).numpy()
        g = grads[name].astype(np.float64)
        rel = np.linalg.norm(g - g_torch) / np.linalg.norm(g_torch)
        worst = max(worst, rel)
        assert rel <= tol, f"{name}: relative gradient error {rel:.3e} > {tol:g}"
    print(f"parallel={parallel} rotary_fraction={rotary_fraction} {dtype}: worst relative gradient error {worst:.3e}")
