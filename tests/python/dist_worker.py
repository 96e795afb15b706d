"""One rank of the distributed tests (test_distributed.py), or the one-process run they are compared with.

    dist_worker.py SCENARIO RANK WORLD STORE OUT

Writes OUT/result<RANK>.json ({"error": message or null}) and, for the target runs, OUT/weights<RANK>.npz (the final
local weights). The runs are deterministic: every rank computes the next weights of the WHOLE tensors from the whole
current weights with the same code as the one-process run (a sharded rank first gathers the slices), then keeps its
slice, so the shards' values are those of the one-process run bit for bit and only the recording is distributed.
"""
import datetime
import gc
import json
import os
import sys

import numpy as np
import torch

# name -> full shape: an odd size (uneven halves), a small group (joint w/u kept) and one above JOINT_EXACT_MAX
SHAPES = {"small": (5, 8), "odd": (7,), "big": (30, 50)}
STEPS = 5


def initial():
    g = torch.Generator().manual_seed(7)
    out = {n: torch.randn(*s, generator=g) for n, s in SHAPES.items()}
    out["odd"][5] = 4.0  # the absmax of "odd" lies in rank 1's half: the intK scale must be the global one
    return out


def next_weights(full, step):
    """The deterministic 'optimizer': new = w + u with u spanning 1e-1 .. 1e-7 of |w| (some erased, some not)."""
    out = {}
    for name, w in full.items():
        flat = w.reshape(-1)
        scale = torch.logspace(-1, -7, flat.numel())
        u = scale * torch.sin(flat * 3.0 + float(step)) * (flat.abs() + 0.5)
        out[name] = (flat + u).reshape(w.shape)
    return out


def halves(world, gap=False, overlap=False):
    """rank -> {name: (offset, numel)}: each rank holds its half of each flattened parameter."""
    out = {r: {} for r in range(world)}
    for name, shape in SHAPES.items():
        n = int(np.prod(shape))
        cuts = [n * r // world for r in range(world + 1)]
        for r in range(world):
            lo, hi = cuts[r], cuts[r + 1]
            if name == "odd" and r == world - 1 and (gap or overlap):
                lo += 1 if gap else -1
            out[r][name] = (lo, hi - lo)
    return out


class SliceStep(torch.optim.Optimizer):
    """Sets each (local slice) parameter to its slice of next_weights(whole weights, step). The whole weights are
    gathered from the ranks' slices (gather), or, with gather=None (an fp32 run, which nothing rounds), tracked
    whole by every rank itself: no collective beyond the recorder's."""

    def __init__(self, named, offsets, gather):
        super().__init__([p for _, p in named], {})
        self.named, self.offsets, self.gather, self.k = named, offsets, gather, 0
        self.full = initial()

    @torch.no_grad()
    def step(self, closure=None):
        full = self.full if self.gather is None else self.gather({n: p.detach().clone() for n, p in self.named})
        new = next_weights(full, self.k)
        self.full = new
        for name, p in self.named:
            off = self.offsets[name]
            p.copy_(new[name].reshape(-1)[off:off + p.numel()].reshape(p.shape))
        self.k += 1


def run_reference(named, offsets, gather, distributed, path, steps=STEPS, perturb=None, schedule=None):
    from wbaudit.torch import ReferenceRecorder
    rec = ReferenceRecorder(dict(named), formats=["e4m3", "bf16", "int4"], path=path, seed=3,
                            distributed=distributed, schedule=schedule)
    opt = SliceStep(named, offsets, gather)
    for step in range(steps):
        if perturb is not None and step == perturb[0]:
            with torch.no_grad():
                dict(named)[perturb[1]].view(-1)[0] += 1e-3
        with rec.step(loss=float(step), lr=0.5):
            opt.step()
    return rec.close()


def run_target(named, offsets, gather, distributed, path, steps=STEPS):
    from wbaudit.torch import PersistentNative
    module = torch.nn.Module()
    for name, p in named:
        module.register_parameter(name, p)
    opt = PersistentNative(SliceStep(named, offsets, gather), formats={"small": "e4m3", "odd": "int4", "big": "e5m2"},
                           model=module, policy="stochastic", sr_bits=0, seed=11, path=path, distributed=distributed)
    for step in range(steps):
        opt.step(loss=float(step), lr=0.5)
    return opt.close()


def single(kind, path):
    """The one-process run of the whole tensors (the reference the distributed runs are compared with)."""
    named = [(n, torch.nn.Parameter(t)) for n, t in initial().items()]
    offsets = {n: 0 for n, _ in named}
    fn = run_reference if kind == "reference" else run_target
    fn(named, offsets, (lambda local: local) if kind == "target" else None, None, path)
    return {n: p.detach().numpy().copy() for n, p in named}


def main():
    scenario, rank, world, store, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    import torch.distributed as dist
    import wbaudit.distributed as wd
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    full = initial()
    error, weights = None, None
    try:
        kind = "target" if scenario.startswith("target") else "reference"
        if scenario.startswith("replicated") or scenario == "target_replicated":
            named = [(n, torch.nn.Parameter(t)) for n, t in full.items()]
            offsets = {n: 0 for n in full}
            path = os.path.join(out, "trace.h5" if rank == 0 else f"rank{rank}/trace.h5")
            perturb = (3, "odd") if scenario == "replicated_perturb" and rank == 1 else None
            if kind == "target":
                run_target(named, offsets, lambda local: local, "replicated", path)
            else:
                run_reference(named, offsets, lambda local: local, "replicated", path, perturb=perturb)
        else:
            mine = halves(world, gap=scenario == "sharded_gap", overlap=scenario == "sharded_overlap")[rank]
            named = [(n, torch.nn.Parameter(full[n].reshape(-1)[off:off + k].clone())) for n, (off, k) in mine.items()]
            offsets = {n: off for n, (off, _) in mine.items()}
            shards = wd.Sharded({n: (off, SHAPES[n]) for n, (off, _) in mine.items()})

            def gather(local):
                parts = [None] * world
                dist.all_gather_object(parts, {n: (offsets[n], t) for n, t in local.items()})
                whole = {}
                for n, shape in SHAPES.items():
                    flat = torch.empty(int(np.prod(shape)))
                    for part in parts:
                        off, t = part[n]
                        flat[off:off + t.numel()] = t.reshape(-1)
                    whole[n] = flat.reshape(shape)
                return whole
            path = os.path.join(out, "trace.h5" if rank == 0 else f"rank{rank}/trace.h5")
            if scenario == "sharded_short":  # rank 1 stops early (recorded steps 0..2 only): close() must refuse
                run_reference(named, offsets, None, shards, path, steps=STEPS if rank == 0 else 3,
                              schedule=[0, 1, 2])
            elif kind == "target":
                run_target(named, offsets, gather, shards, path)
            else:
                run_reference(named, offsets, None, shards, path)
            weights = {n: p.detach().numpy().copy() for n, p in named}
    except Exception as e:  # noqa: BLE001 - reported to the test
        error = f"{type(e).__name__}: {e}"
    if weights is not None:
        np.savez(os.path.join(out, f"weights{rank}.npz"), **weights)
    with open(os.path.join(out, f"result{rank}.json"), "w") as f:
        json.dump({"error": error}, f)
    # Leave without the interpreter's teardown: after a rank raised mid-run, gloo's threads may still be waiting on
    # the other rank, and destroying them at exit aborts ("terminate called without an active exception"). Every
    # result is on disk by now, and the recorders' files were closed when their frames were released.
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
