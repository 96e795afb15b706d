#!/usr/bin/env python3
"""Disk held by a streamed reference trace's partial file per recorded step (issue 32, docs/trace-format.md
"Streaming"): a ReferenceRecorder (e4m3, bf16) records every step of a 20-layer 64-wide MLP (40 tensors) trained
with AdamW, once with the partial file's histogram rows stored raw (the default) and once deflated
(WBAUDIT_PARTIAL_DEFLATE=1), each in a child process (the writer reads the variable when it starts a file). The
partial file's growth from recorded step 4 to 12 is divided by the steps and tensors; the finished trace's size is
printed beside it.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/partial_size_bench.py
"""
import os
import subprocess
import sys
import tempfile


def child(directory):
    import torch
    from wbaudit.torch import ReferenceRecorder

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(20)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    path = os.path.join(directory, "trace.h5")
    rec = ReferenceRecorder(model, formats=["e4m3", "bf16"], path=path)
    sizes = []
    for _ in range(12):
        loss = model(torch.randn(8, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        with rec.step(loss=loss.item(), lr=1e-3):
            opt.step()
        sizes.append(os.path.getsize(rec.partial))
    rec.close()
    tensors = len(list(model.parameters()))
    per_step = (sizes[11] - sizes[3]) / 8
    print(f"{os.environ.get('WBAUDIT_PARTIAL_DEFLATE') or 'unset (raw)':>12}: {tensors} tensors, partial file "
          f"{per_step / 1e6:.3f} MB per recorded step ({per_step / tensors / 1e3:.1f} KB per tensor); finished "
          f"trace {os.path.getsize(path) / 1e6:.3f} MB for 12 recorded steps")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
        sys.exit(0)
    for setting in (None, "1"):
        env = dict(os.environ)
        env.pop("WBAUDIT_PARTIAL_DEFLATE", None)
        if setting is not None:
            env["WBAUDIT_PARTIAL_DEFLATE"] = setting
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, __file__, d], env=env, check=True)
