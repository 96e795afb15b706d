"""A GPT-2-shaped model built from torch.nn (token and position embeddings, pre-LayerNorm blocks with fused qkv
attention and a 4x GELU MLP, final LayerNorm, head tied to the token embedding), initialized as GPT-2 (normal 0.02,
residual projections 0.02 / sqrt(2 layers), zero biases, LayerNorm gains 1). The bench scripts use it at GPT-2 small's
shape (12 layers, width 768, 12 heads, vocabulary 50257, context 128: 124M parameters) and smaller.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, d=768, layers=12, heads=12, ctx=128):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") or "mlp_proj" in name else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        return self.ln_f(self.h(x)) @ self.wte.weight.t()


def byte_text():
    """Training bytes: the concatenated licence texts Debian ships (a few hundred KB of English)."""
    import glob
    data = b""
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            with open(path, "rb") as f:
                data += f.read()
        except OSError:
            pass
    return torch.tensor(list(data), dtype=torch.long)


def batches(data, steps, batch, ctx, seed, vocab=256):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(0, len(data) - ctx - 1, (batch,), generator=g)
        x = torch.stack([data[j:j + ctx] for j in i]) % vocab
        y = torch.stack([data[j + 1:j + ctx + 1] for j in i]) % vocab
        yield x, y
