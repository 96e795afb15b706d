"""Distributed runs of the wbaudit.torch recorders (docs/python.md, "Distributed runs").

A recorder's ``distributed=`` argument:

- ``None`` (default): one process, as before.
- ``"replicated"`` or ``Replicated(group=None)``: data parallel (DDP), every rank holds the same weights. Rank 0
  writes the one trace; the other ranks write nothing. At every recorded step each rank takes a SHA-256 of every
  parameter's weights w and proposal u (their bytes), the digests are all-gathered, and a rank whose w or u differs
  from rank 0's raises ``DistributedMismatch`` on every rank, naming the parameter, the rank and the step, before the
  step is written.
- ``Sharded(shards, group=None)``: each rank holds a contiguous slice of each flattened parameter (as FSDP does);
  ``shards`` maps each parameter name to ``(offset, full_shape)`` (``full_shape`` an int numel or a shape), the
  recorder's parameters being the local slices (any shape; their flat order is the slice's). At construction the
  slices of every rank are checked to tile each parameter exactly (a gap, an overlap, different names, order or full
  shapes raise ``ValueError`` naming the parameter, on every rank, before anything is written), and the per-tensor
  absmax (intK scales, the margin histogram's formats) is all-reduced (MAX). Every rank records its slice; at each
  recorded step the counts, ratio histograms and margin histograms are summed onto rank 0 (all of them add over
  coordinates), the fractions recomputed from the sums, and a small group's joint ``w``/``u`` (full size <=
  ``JOINT_EXACT_MAX``) gathered in coordinate order; rank 0 writes ONE trace equal to a one-process recording of
  the whole tensors. ``PersistentNative`` keys SR by the global coordinate (``writeback(first_coordinate=offset)``).

Both streams the trace to ``trace.h5.partial`` (rank 0); ``close()`` renames it only after every rank reached
``close()`` with the same number of steps and none failed, so a run in which a rank fails leaves only the partial.
"""
import hashlib
import json
import math

import numpy as np
import torch

from . import _core


class DistributedMismatch(RuntimeError):
    """Ranks of a replicated run disagree, or ranks of a distributed recording diverged (names parameter, rank, step)."""


class Replicated:
    """Data parallel: every rank of ``group`` (default: the default process group) holds the same weights."""

    def __init__(self, group=None):
        self.group = group


class Sharded:
    """Each rank holds slices of the flattened parameters: ``shards = {name: (offset, full_shape)}``."""

    def __init__(self, shards, group=None):
        self.shards = dict(shards)
        self.group = group


def _dist():
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("wbaudit.distributed: torch.distributed is not initialized (init_process_group first)")
    return dist


def _numel(shape):
    if isinstance(shape, (int, np.integer)):
        return int(shape)
    return int(math.prod(int(s) for s in shape))


def _bytes(t):
    """The bytes of a tensor or array (contiguous, flat, on the host)."""
    if isinstance(t, torch.Tensor):
        t = t.detach().contiguous().reshape(-1)
        if t.device.type != "cpu":
            t = t.cpu()
        return t.view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)
    return np.ascontiguousarray(t).reshape(-1).view(np.uint8)


def _is_block(fmt):
    names = {b["name"] for b in _core.block_formats()}
    return isinstance(fmt, str) and fmt.split(":")[0] in names


class _Local:
    """No distribution: the hooks do nothing."""

    def absmax(self, name, p):
        return float(p.detach().abs().max()) if p.numel() else 0.0

    def offset(self, name):
        return 0

    observes = False  # whether observe() needs w and u (a write-back may then skip forming them)

    def observe(self, name, w, u):
        pass

    def writer(self, path, header):
        return _core.TraceWriter(path, header)


class _Group(_Local):
    def __init__(self, group, params, signature):
        self.d = _dist()
        self.group = group
        self.rank = self.d.get_rank(group)
        self.world = self.d.get_world_size(group)
        self.root = self.d.get_global_rank(group, 0) if group is not None else 0
        self.names = [n for n, _ in params]
        # what every rank's recorder must agree on (the path and a trajectory dump are each rank's own)
        same = {k: v for k, v in signature.items() if k not in ("path", "trajectory")}
        self.signature = json.loads(json.dumps(same, sort_keys=True, default=str))

    def _gather(self, obj):
        out = [None] * self.world
        self.d.all_gather_object(out, obj, group=self.group)
        return out

    def _check_signatures(self, gathered):
        """Every rank's recorder must be the same recorder (names in order, formats, seed, policy...)."""
        for r, (names, sig) in enumerate(gathered):
            if names != gathered[0][0]:
                a, b = gathered[0][0], names
                first = next((x for x, y in zip(a, b) if x != y), (a + b)[min(len(a), len(b))])
                raise ValueError(f"wbaudit.distributed: rank {r} records parameters {b}, rank 0 {a} (first "
                                 f"difference: parameter {first}); every rank lists the same names in the same order")
            if sig != gathered[0][1]:
                keys = sorted(k for k in set(sig) | set(gathered[0][1]) if sig.get(k) != gathered[0][1].get(k))
                raise ValueError(f"wbaudit.distributed: rank {r}'s recorder differs from rank 0's in {keys}")

    def _header(self, header, mode, sizes=None, shapes=None):
        header = dict(header)
        config = json.loads(header.get("config_json") or "{}")
        config["distributed"] = {"mode": mode, "world_size": self.world}
        if shapes is not None and isinstance(config.get("parameters"), dict):
            config["parameters"] = {n: list(shapes[n]) for n in config["parameters"]}
        header["config_json"] = json.dumps(config, sort_keys=True)
        if sizes is not None:
            header["groups"] = {n: {**g, "size": sizes[n]} for n, g in header["groups"].items()}
        return header


class _Writer:
    """Rank 0 holds the real TraceWriter (inner); the other ranks None. append() is collective."""

    def __init__(self, owner, inner):
        self.owner = owner
        self.inner = inner
        self.failed = False

    def append(self, rows):
        try:
            merged = self.owner.merge(rows)
        except BaseException:
            self.failed = True
            raise
        if self.inner is not None:
            self.inner.append(merged)

    def finish(self, steps=None):
        """Collective: renames the partial (rank 0) only when every rank ran the same steps and none failed."""
        s = -1 if steps is None else int(steps)
        t = torch.tensor([s, -s, 1 if self.failed else 0], dtype=torch.int64)
        self.owner.d.all_reduce(t, op=self.owner.d.ReduceOp.MAX, group=self.owner.group)
        if int(t[2]):
            raise DistributedMismatch("wbaudit.distributed: a rank failed during the recording; the trace is left as "
                                      "its .partial (incomplete)")
        if int(t[0]) != -int(t[1]):
            raise DistributedMismatch(f"wbaudit.distributed: the ranks ran between {-int(t[1])} and {int(t[0])} steps; "
                                      f"the trace is left as its .partial (incomplete)")
        if self.inner is not None:
            self.inner.finish(steps)

    def close(self):
        if self.inner is not None:
            self.inner.close()


class _Replicated(_Group):
    def __init__(self, group, params, signature):
        super().__init__(group, params, signature)
        self._check_signatures(self._gather((self.names, self.signature)))
        self.digests = {}

    observes = True

    def observe(self, name, w, u):
        self.digests[name] = (hashlib.sha256(_bytes(w)).digest(), hashlib.sha256(_bytes(u)).digest())

    def writer(self, path, header):
        header = self._header(header, "replicated")
        return _Writer(self, _core.TraceWriter(path, header) if self.rank == 0 else None)

    def merge(self, rows):
        step = int(rows["recorded_steps"][0])
        missing = [n for n in self.names if n not in self.digests]
        if missing:
            raise RuntimeError(f"wbaudit.distributed: no digest of parameter {missing[0]} at step {step}")
        buf = b"".join(self.digests[n][0] + self.digests[n][1] for n in self.names)
        mine = torch.from_numpy(np.concatenate([np.array([step], np.int64), np.frombuffer(buf, np.int64)]))
        self.digests = {}
        out = [torch.empty_like(mine) for _ in range(self.world)]
        self.d.all_gather(out, mine, group=self.group)
        ref = out[0].numpy()
        for r in range(1, self.world):
            other = out[r].numpy()
            if other[0] != ref[0]:
                raise DistributedMismatch(f"wbaudit.distributed: rank {r} recorded step {other[0]} while rank 0 "
                                          f"recorded step {ref[0]} (distributed='replicated')")
            for i, name in enumerate(self.names):
                for j, what in enumerate(("weights", "proposal")):
                    a = slice(1 + 8 * i + 4 * j, 1 + 8 * i + 4 * j + 4)
                    if not np.array_equal(other[a], ref[a]):
                        raise DistributedMismatch(
                            f"wbaudit.distributed: parameter {name}: the {what} on rank {r} differ from rank 0's at "
                            f"step {step} (distributed='replicated' needs every rank to hold the same weights)")
        return rows


def _split(obj, ints, sig, path):
    """A template of obj with its integer counts moved, flattened, to ints (their layout appended to sig)."""
    if isinstance(obj, dict):
        return {k: _split(v, ints, sig, f"{path}/{k}") for k, v in obj.items()}
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "iu":
        ints.append(obj.astype(np.int64).reshape(-1))
        sig.append((path, "array", obj.shape, str(obj.dtype)))
        return ("array", obj.shape, obj.dtype)
    if isinstance(obj, (list, tuple)) and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                                              for x in obj):
        ints.append(np.asarray(obj, np.int64).reshape(-1))
        sig.append((path, "list", len(obj)))
        return ("list", len(obj))
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        ints.append(np.array([obj], np.int64))
        sig.append((path, "int"))
        return ("int",)
    sig.append((path, "other"))
    return ("other", path)


def _fill(template, it):
    if isinstance(template, dict):
        return {k: _fill(v, it) for k, v in template.items()}
    kind = template[0]
    if kind == "array":
        return next(it).reshape(template[1]).astype(template[2])
    if kind == "list":
        return [int(x) for x in next(it)]
    if kind == "int":
        return int(next(it)[0])
    return template


def _fraction(erased, nonzero):
    return [e / n if n else float("nan") for e, n in zip(erased, nonzero)]


class _Sharded(_Group):
    def __init__(self, spec, params, signature):
        super().__init__(spec.group, params, signature)
        if signature.get("trajectory"):
            raise ValueError("wbaudit.distributed: a trajectory dump is not merged across shards; pass trajectory=None "
                             "with Sharded")
        fmts = signature.get("formats")
        fmts = list(fmts.values()) if isinstance(fmts, dict) else [fmts] if isinstance(fmts, str) else list(fmts or [])
        blocks = [f for f in fmts if _is_block(f)]
        if blocks:
            raise ValueError(f"wbaudit.distributed: block format {blocks[0]} rescales whole blocks, which a shard "
                             f"boundary may cut; Sharded supports element formats only")
        shards = spec.shards
        unknown = [n for n in shards if n not in self.names]
        if unknown:
            raise ValueError(f"wbaudit.distributed: shards names parameter {unknown[0]}, which the recorder does not have")
        mine = []
        for name, p in params:
            if name not in shards:
                raise ValueError(f"wbaudit.distributed: parameter {name} has no entry in shards (offset, full_shape)")
            offset, shape = shards[name]
            shape = [int(shape)] if isinstance(shape, (int, np.integer)) else [int(s) for s in shape]
            mine.append((name, int(offset), int(p.numel()), _numel(shape), shape))
        gathered = self._gather((self.names, self.signature, mine))
        self._check_signatures([(g[0], g[1]) for g in gathered])
        self.offsets, self.sizes, self.shapes, self.layout = {}, {}, {}, {}
        for i, name in enumerate(self.names):
            pieces = [(g[2][i][1], g[2][i][2], r) for r, g in enumerate(gathered)]
            full = {(g[2][i][3], tuple(g[2][i][4])) for g in gathered}
            if len(full) != 1:
                raise ValueError(f"wbaudit.distributed: parameter {name}: the ranks give different full shapes "
                                 f"{sorted(full)}")
            (numel, shape), = full
            self._check_tiling(name, numel, pieces)
            self.offsets[name] = mine[i][1]
            self.sizes[name] = numel
            self.shapes[name] = list(shape)
            self.layout[name] = sorted((off, r) for off, n, r in pieces)
        local = torch.tensor([float(p.detach().abs().max()) if p.numel() else 0.0 for _, p in params],
                             dtype=torch.float64)
        self.d.all_reduce(local, op=self.d.ReduceOp.MAX, group=self.group)
        self._absmax = {n: float(v) for n, v in zip(self.names, local.tolist())}

    @staticmethod
    def _check_tiling(name, numel, pieces):
        """The slices (offset, numel, rank) must cover [0, numel) once: no gap, no overlap."""
        pos, last = 0, None
        for off, n, r in sorted(pieces):
            if off < 0 or off + n > numel:
                raise ValueError(f"wbaudit.distributed: parameter {name}: rank {r}'s shard [{off}, {off + n}) lies "
                                 f"outside the tensor's {numel} coordinates")
            if n == 0:
                continue
            if off > pos:
                raise ValueError(f"wbaudit.distributed: parameter {name}: coordinates [{pos}, {off}) belong to no "
                                 f"rank's shard (a gap)")
            if off < pos:
                raise ValueError(f"wbaudit.distributed: parameter {name}: coordinates [{off}, {min(pos, off + n)}) "
                                 f"belong to ranks {last} and {r} (an overlap)")
            pos, last = off + n, r
        if pos != numel:
            raise ValueError(f"wbaudit.distributed: parameter {name}: coordinates [{pos}, {numel}) belong to no "
                             f"rank's shard (a gap)")

    def absmax(self, name, p):
        return self._absmax[name]

    def offset(self, name):
        return self.offsets[name]

    def writer(self, path, header):
        header = self._header(header, "sharded", sizes=self.sizes, shapes=self.shapes)
        return _Writer(self, _core.TraceWriter(path, header) if self.rank == 0 else None)

    def merge(self, rows):
        step = int(rows["recorded_steps"][0])
        groups = rows["groups"]
        ints, sig, templates, exact = [], [], {}, {}
        for name in self.names:
            if name not in groups:
                sig.append((name, "absent"))
                continue
            g = dict(groups[name])
            joint = g.get("joint")
            if isinstance(joint, dict) and "w" in joint:
                joint = dict(joint)
                w, u = joint.pop("w"), joint.pop("u")
                g["joint"] = joint
                if self.sizes[name] <= _core.JOINT_EXACT_MAX:
                    exact[name] = (np.asarray(w, np.float32).reshape(-1), np.asarray(u, np.float32).reshape(-1))
            templates[name] = _split(g, ints, sig, name)
        gathered = self._gather((step, sig, exact))
        for r, (s, other, _) in enumerate(gathered):
            if s != step:
                raise DistributedMismatch(f"wbaudit.distributed: rank {r} recorded step {s} while rank {self.rank} "
                                          f"recorded step {step} (Sharded)")
            if other != gathered[0][1]:
                first = next((a for a, b in zip(gathered[0][1], other) if a != b), None)
                raise DistributedMismatch(f"wbaudit.distributed: at step {step} rank {r}'s rows differ in layout from "
                                          f"rank 0's (first: {first})")
        flat = torch.from_numpy(np.concatenate(ints) if ints else np.zeros(0, np.int64))
        self.d.reduce(flat, dst=self.root, op=self.d.ReduceOp.SUM, group=self.group)
        if self.rank != 0:
            return None
        it = iter(np.split(flat.numpy(), np.cumsum([len(a) for a in ints])[:-1]) if ints else [])
        out = {}
        for name in self.names:
            if name not in templates:
                continue
            g = _fill(templates[name], it)
            self._fractions(name, g)
            if self.sizes[name] <= _core.JOINT_EXACT_MAX and name in exact:
                order = [r for _, r in self.layout[name]]
                g["joint"]["w"] = np.concatenate([gathered[r][2][name][0] for r in order])
                g["joint"]["u"] = np.concatenate([gathered[r][2][name][1] for r in order])
            out[name] = g
        return {**rows, "groups": out}

    @staticmethod
    def _fractions(name, g):
        """Fractions do not add: recomputed from the summed counts; any other non-count leaf cannot be merged."""
        def walk(d, path):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, f"{path}/{k}")
                elif isinstance(v, tuple) and v and v[0] == "other":
                    raise ValueError(f"wbaudit.distributed: cannot merge {v[1]} across shards (not a count)")
        if "erased_fraction" in g:
            g["erased_fraction"] = _fraction(g["erased"], g["nonzero"])
        for f, pf in (g.get("projected") or {}).items():
            if "fraction" in pf:
                pf["fraction"] = _fraction(pf["erased"], g["nonzero"])
        walk(g, name)


def attach(distributed, params, signature):
    """The hooks of a recorder for its ``distributed=`` argument (None, "replicated", Replicated(...), Sharded(...))."""
    if distributed is None:
        return _Local()
    if isinstance(distributed, str):
        if distributed == "replicated":
            distributed = Replicated()
        else:
            raise ValueError(f"wbaudit.distributed: distributed={distributed!r}; expected None, 'replicated', "
                             f"Replicated(group) or Sharded(shards, group)")
    if signature.get("path", True) is None:
        raise ValueError("wbaudit.distributed: a distributed recorder needs path= (rank 0 writes the trace)")
    if isinstance(distributed, Replicated):
        return _Replicated(distributed.group, params, signature)
    if isinstance(distributed, Sharded):
        return _Sharded(distributed, params, signature)
    raise TypeError(f"wbaudit.distributed: distributed={distributed!r}; expected None, 'replicated', Replicated(group) "
                    f"or Sharded(shards, group)")


__all__ = ["DistributedMismatch", "Replicated", "Sharded", "attach"]
