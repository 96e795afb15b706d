"""PyTorch recorders (docs/python.md).

ReferenceRecorder: attached to an fp32 training loop around ``optimizer.step()``, it takes each parameter's proposal
``u = p_after - p_before`` and records, at the recording schedule, the projected events of every declared format,
the ratio histogram and the margin histogram of the analytic grid (``wbaudit grid``), and streams each recorded step
to ``trace.h5.partial`` as it is recorded (readable mid-run; ``close()`` writes ``trace.h5``; groups named by
``named_parameters()``). Its memory: one fp32 copy of the parameters (w before the step) and one scratch tensor the
size of the largest parameter (u), whatever the number of recorded steps.

PersistentNative: wraps any optimizer so that each parameter lives in a low-precision format with no fp32 master:
the optimizer's step is taken in fp32, its proposal ``u = p_after - p_before`` is written back with wbaudit's
write-back ``w <- q_F(w + u)``, the exact events are counted and a target ``trace.h5`` is streamed like the
reference's; optionally the realized trajectory is dumped in the layout ``wbaudit audit`` reads. It is a
``torch.optim.Optimizer`` (LR schedulers drive it) whose state_dict() checkpoints the write-back too.

Devices and dtypes: ReferenceRecorder takes float32 parameters on any device (copied to the host one parameter at a time
at recorded steps only); PersistentNative takes float32, bfloat16 and float16 parameters (the storage dtype is the
default format) on the CPU (the C++ write-back) or any device (wbaudit.torch_ops, imported only there).
"""
import contextlib
import datetime
import fnmatch
import hashlib
import json
import os
import platform
import socket
import sys
import warnings

import numpy as np
import torch

from . import _core, distributed as _distributed, int_scale_for_absmax, project, round as _round, writeback
from .trajectory import TrajectoryWriter

_NAN = float("nan")
_HIST = {"d_min": -16.0, "bin_width": 0.125, "bins": 512}


def provenance(extra=None):
    """Where a trace came from: script and its SHA-256, torch/numpy/python versions, host, time, wbaudit module."""
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    digest = ""
    if script and os.path.isfile(script):
        with open(script, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    out = {
        "source": "wbaudit.torch",
        "script": script,
        "script_sha256": digest,
        "argv": list(sys.argv),
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wbaudit_module": os.path.abspath(_core.__file__),
        "torch_threads": torch.get_num_threads(),
    }
    if extra:
        out.update(extra)
    return out


def _named(model_or_params):
    """(name, parameter) pairs from a module, a dict, (name, param) pairs or plain parameters; a tensor that appears
    twice (tied weights) is kept once, under its first name."""
    if isinstance(model_or_params, torch.nn.Module):
        pairs = list(model_or_params.named_parameters())  # torch lists a tied parameter once
    elif isinstance(model_or_params, dict):
        pairs = list(model_or_params.items())
    else:
        items = list(model_or_params)
        if items and isinstance(items[0], tuple):
            pairs = items
        else:
            pairs = [(f"param{i}", p) for i, p in enumerate(items)]
    seen, out = set(), []
    for name, p in pairs:
        if id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def _aliases(model):
    """{id(parameter): [every name it has in the model]}: a tied parameter has several."""
    names = {}
    if model is None:
        return names
    try:
        modules = model.named_modules(remove_duplicate=False)
    except TypeError:  # older torch
        modules = model.named_modules()
    for prefix, module in modules:
        for local, p in module._parameters.items():
            if p is not None:
                full = f"{prefix}.{local}" if prefix else local
                if full not in names.setdefault(id(p), []):
                    names[id(p)].append(full)
    return names


def _storage_ptr(t):
    try:
        return t.untyped_storage().data_ptr()
    except AttributeError:  # torch < 2.0
        return t.storage().data_ptr()


def _check_shared_storage(pairs):
    """Refuses two different tensors over the same storage (their write-backs would overwrite each other)."""
    seen = {}
    for name, p in pairs:
        if p.numel() == 0:
            continue
        key = (p.device, _storage_ptr(p))
        if key in seen:
            raise ValueError(f"wbaudit.torch: parameters {seen[key]} and {name} share storage (views of one tensor); "
                             f"pass the tensor itself, once")
        seen[key] = name


def _contiguous_clone(p):
    return p.detach().clone(memory_format=torch.contiguous_format)


class Schedule:
    """The recording schedule: None / "every" (every step), an iterable of steps, a callable step -> bool, or
    {"kind": "log" | "every_k" | "every", "points": P, "k": K} with `steps` (the simulator's schedule)."""

    def __init__(self, schedule, steps):
        self._fn = None
        self._set = None
        if schedule is None or schedule == "every":
            self._fn = lambda s: True
        elif callable(schedule):
            self._fn = schedule
        elif isinstance(schedule, dict):
            if steps is None:
                raise ValueError("wbaudit.torch: a log / every_k schedule needs steps=")
            self._set = set(_core.recorded_steps(schedule.get("kind", "log"), int(steps), int(schedule.get("k", 10)),
                                                 int(schedule.get("points", 100))))
        else:
            self._set = set(int(s) for s in schedule)

    def __call__(self, step):
        return self._fn(step) if self._fn is not None else step in self._set

    def describe(self):
        return "custom" if self._fn is not None else sorted(self._set)[:8]


def _fraction(erased, nonzero):
    return erased / nonzero if nonzero else _NAN


def _np(t):
    return t.detach().numpy()


class ReferenceRecorder:
    """Records a reference trace from an fp32 training loop, streaming it to disk step by step.

        rec = ReferenceRecorder(model, formats=["e4m3", "e5m2"], schedule={"kind": "log", "points": 50},
                                steps=steps, path="reference/trace.h5")
        for step in range(steps):
            loss = ...; loss.backward()
            with rec.step(loss=loss.item(), lr=lr):
                optimizer.step()
        rec.close()

    intK formats get the per-tensor scale from the absmax of the parameters at construction (the initialization); a
    parameter that starts all zeros has none and is not projected to intK (its group has no projected/intK; its
    joint/init_absmax is 0, from which `wbaudit grid` reports the projection undefined, and config_json's
    "int_undefined" names it with the reason). Parameters: float32 on any device (at recorded steps each parameter's
    w and u are copied to the host one at a time); frozen ones (requires_grad False at construction) are not recorded
    (config_json "frozen"); a tied parameter is one group, under its first name.
    While the loop runs, ``path + ".partial"`` holds every step recorded so far (``wbaudit.read_trace(partial,
    allow_incomplete=True)``); a loop that dies leaves it, marked incomplete.
    margin_formats: the formats of the margin histogram, the record ``wbaudit grid`` forecasts other learning-rate
    scales from: None (the default) every format wbaudit can record there (``_core.margin_layout()["formats"]``), so
    the grid forecasts any of them; "declared" the scalar formats of ``formats``; or a list of names. Recording costs
    about one pass per margin format, so a reference that only forecasts its declared formats records faster
    (docs/forecasting.md, "Recording fewer formats"); ``wbaudit grid`` refuses a format the histogram lacks.
    """

    def __init__(self, model_or_params, formats=("e4m3",), schedule=None, path="trace.h5", steps=None, seed=0,
                 config=None, distributed=None, margin_formats=None):
        pairs = _named(model_or_params)
        for name, p in pairs:
            if p.requires_grad and p.dtype != torch.float32:
                raise TypeError(f"wbaudit.torch: parameter {name} is {p.dtype} on {p.device}; the reference recorder "
                                f"needs float32 parameters (an fp32 run, on any device)")
        self._tids = {name: tid for tid, (name, _) in enumerate(pairs)}  # the position among all parameters
        self.frozen = [name for name, p in pairs if not p.requires_grad]
        self.params = [(name, p) for name, p in pairs if p.requires_grad]
        self.formats = list(formats)
        self.path = os.fspath(path)
        self.schedule = Schedule(schedule, steps)
        self.seed = int(seed)
        self.config = dict(config or {})
        self.margin_formats = self._margin_formats(margin_formats)
        # distributed: None, "replicated" or wbaudit.distributed.Sharded(...) (docs/python.md, "Distributed runs")
        self._dist = _distributed.attach(distributed, self.params, {"mode": "reference", "formats": self.formats,
                                                                    "seed": self.seed, "path": self.path})
        self.steps_run = 0
        self._projected = {}
        self._blocks = {}  # name -> {block format: its header (block_events, block_sample)}
        self._init_absmax = {}
        self._int_undefined = {}
        for name, p in self.params:
            specs = []
            absmax = self._dist.absmax(name, p)
            self._init_absmax[name] = absmax
            for f in self.formats:
                if _block_format(f) is not None:
                    # blocks along the parameter's last dimension, sampled as the engine samples them
                    self._blocks.setdefault(name, {})[f] = _core.block_projection_header(f, list(p.shape))
                elif f.startswith("int"):
                    if absmax > 0 and np.isfinite(absmax):
                        specs.append((f, int_scale_for_absmax(int(f[3:]), absmax)))
                    else:
                        self._int_undefined.setdefault(name, {})[f] = (
                            f"no per-tensor scale (max |w| at initialization is {absmax:g})")
                else:
                    specs.append(f)
            self._projected[name] = specs
        self._before = None
        self._w = None  # the parameters before a recorded step (one fp32 copy, allocated once)
        self._u = None  # scratch: the proposal of one parameter at a time
        self._writer = None
        self._closed = False
        self._open(steps)

    def _margin_formats(self, margin_formats):
        """The margin layout's format list (None: the default layout), checked by the core's margin_layout."""
        if margin_formats is None:
            return None
        if isinstance(margin_formats, str):
            if margin_formats != "declared":
                raise ValueError(f"wbaudit.torch: margin_formats={margin_formats!r}: expected None, \"declared\" or a "
                                 f"list of format names")
            recordable = set(_core.margin_layout()["formats"])
            names = [f for f in self.formats if f in recordable]
            if not names:
                raise ValueError(f"wbaudit.torch: margin_formats=\"declared\": none of formats {self.formats} is one "
                                 f"the margin histogram records ({', '.join(sorted(recordable))})")
        else:
            names = [str(f) for f in margin_formats]
        return _core.margin_layout(names)["formats"]  # ValueError for an unknown name or a repeat

    def _open(self, steps):
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        run = {"mode": "reference", "project_formats": self.formats, "seed": self.seed,
               "schedule": str(self.schedule.describe()), "parameters": {n: list(p.shape) for n, p in self.params}}
        if self.frozen:  # absent when there are none: such traces are as before
            run["frozen"] = self.frozen
        if self.margin_formats is not None:  # absent by default: such traces are as before
            run["margin_formats"] = self.margin_formats
        if self._int_undefined:
            run["int_undefined"] = self._int_undefined
        config = provenance(run)
        config.update(self.config)
        groups = {}
        for name, p in self.params:
            groups[name] = {"tensor_id": self._tids[name], "size": p.numel(),
                            "projected": {**{(f if isinstance(f, str) else f[0]): {} for f in self._projected[name]},
                                          **self._blocks.get(name, {})},
                            "joint": {"init_absmax": self._init_absmax[name]}}
        header = {"schema": _core.TRACE_SCHEMA, "mode": "reference", "format": "fp32", "policy": "nearest",
                  "seed": self.seed, "steps": int(steps or 0), "config_json": json.dumps(config, sort_keys=True),
                  "histogram": dict(_HIST), "margin": _core.margin_layout(self.margin_formats), "groups": groups}
        self._writer = self._dist.writer(self.path, header)

    @property
    def partial(self):
        """The file the recorded steps are streamed to until close()."""
        return self.path + ".partial"

    def before_step(self):
        if self.schedule(self.steps_run):
            # w before the step, copied into buffers allocated at the first recorded step and kept: a fresh 0.5 GB
            # clone per recorded step (124M parameters) paid the first touch of every page again.
            if self._w is None:
                self._w = [torch.empty(p.shape, dtype=torch.float32, device=p.device) for _, p in self.params]
            for (_, p), w in zip(self.params, self._w):
                w.copy_(p.detach())
            self._before = self._w

    def _proposal(self, p, w):
        """(w, u) on the host: u = p_after - w_before in fp32, in the recorder's scratch (grown to the largest parameter
        once); a parameter on another device is subtracted there and copied to the host with its w."""
        n = p.numel()
        if self._u is None or self._u.numel() < n:
            self._u = torch.empty(max(n, max(q.numel() for _, q in self.params)), dtype=torch.float32)
        u = self._u[:n].view(p.shape)
        if p.device.type == "cpu":
            torch.sub(p.detach(), w, out=u)
            return w, u
        u.copy_(p.detach() - w)
        return w.cpu(), u

    def after_step(self, loss=None, lr=None):
        step = self.steps_run
        if self._before is not None:
            groups = {}
            for (name, p), w in zip(self.params, self._before):
                w, u = self._proposal(p, w)  # the proposal the optimizer applied, in fp32
                wf, uf = _np(w).reshape(-1), _np(u).reshape(-1)
                self._dist.observe(name, wf, uf)
                r = project(wf, uf, self._projected[name], True, _HIST["d_min"], _HIST["bin_width"], _HIST["bins"],
                            name, step, joint=True, init_absmax=self._init_absmax[name],
                            margin_formats=self.margin_formats)
                joint = {"margin": r["margin"]}
                if p.numel() <= _core.JOINT_EXACT_MAX:  # a small tensor keeps w and u: the grid counts it exactly
                    joint["w"], joint["u"] = wf.copy(), uf.copy()  # the buffers are reused
                projected = {f: {"erased": [e], "fraction": [_fraction(e, r["nonzero"])]}
                             for f, e in r["erased"].items()}
                for f in self._blocks.get(name, ()):
                    # the engine's recording of a block format (sim/trace/block_reference.hpp): events by cause and
                    # the block sample the grid forecasts other learning-rate scales from
                    projected[f] = _core.block_projection_step(wf.reshape(p.shape), uf.reshape(p.shape), f, self.seed,
                                                               step, self._tids[name], name)
                groups[name] = {
                    "nonzero": [r["nonzero"]], "zero_weight": [r["zero_weight"]],
                    "ratio_histogram": r["ratio_histogram"], "joint": joint, "projected": projected,
                }
            self._writer.append({"recorded_steps": [step], "loss": [_NAN if loss is None else float(loss)],
                                 "learning_rate": [_NAN if lr is None else float(lr)], "groups": groups})
            self._before = None
        self.steps_run += 1

    @contextlib.contextmanager
    def step(self, loss=None, lr=None):
        """Context manager around optimizer.step()."""
        self.before_step()
        yield
        self.after_step(loss, lr)

    def trace(self):
        """The reference trace as a dict (the layout of wbaudit.read_trace): what is on disk so far."""
        if self._closed:
            return _core.read_trace(self.path)
        return _core.read_trace(self.partial, True)

    def close(self):
        """Writes the trace (atomically, from the streamed steps) and returns its path."""
        if not self._closed:
            self._writer.finish(self.steps_run)
            self._closed = True
            self._w = self._u = None
        return self.path


_STORAGE_FORMAT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _format_fits(fmt, dtype, scale):
    """Whether every value of fmt (with an intK's scale) is representable in the storage dtype, or why not."""
    if dtype == torch.float32:
        return None  # every format's values are fp32 numbers (the write-back's own storage)
    storage = _STORAGE_FORMAT[dtype]
    if fmt == storage:
        return None
    params = {f["name"]: f for f in _core.formats()}
    if fmt not in params:
        return f"format {fmt} is not a plain format whose values all fit {dtype} (block formats need float32 storage)"
    f, s = params[fmt], params[storage]
    if f["kind"] == "integer":
        levels = np.arange(-f["max_level"], f["max_level"] + 1, dtype=np.float64) * scale
        back = torch.from_numpy(levels).to(dtype).double().numpy()
        if not np.array_equal(back, levels):
            return f"{fmt} with scale {scale!r} has values that {dtype} does not hold"
        return None
    if f["man_bits"] > s["man_bits"] or f["max_finite"] > s["max_finite"] or f["min_subnormal"] < s["min_subnormal"]:
        return (f"{fmt} has values that {dtype} does not hold ({f['man_bits']} mantissa bits, range "
                f"{f['min_subnormal']:g}..{f['max_finite']:g}; {storage}: {s['man_bits']}, "
                f"{s['min_subnormal']:g}..{s['max_finite']:g})")
    return None


_BLOCK_EVENTS = ("erased_grid", "erased_saturation", "erased_scale", "collateral", "flushed", "rescaled_up",
                 "rescaled_down")


def _block_format(fmt):
    """The block format's description (wbaudit.block_formats()) or None for a per-tensor format."""
    for f in _core.block_formats():
        if f["name"] == fmt:
            return f
    base = fmt.split(":")[0]
    if any(f["name"] == base for f in _core.block_formats()):  # options the list does not spell out
        return next(f for f in _core.block_formats() if f["name"] == base)
    return None


def _block_count(info, shape):
    """Blocks of a tensor of `shape` held in a block format: along the last dimension (a 0-d or 1-d tensor is one
    row), 16 x 16 tiles for NVFP4's 2-D layout (docs/formats.md)."""
    cols = int(shape[-1]) if len(shape) else 1
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    b = int(info["block_size"])
    if info["tiles_2d"]:
        return -(-rows // b) * -(-cols // b)
    return rows * -(-cols // b)


class _Slot:
    """One written-back parameter: its name, tensor id (SR key), format and intK scale; a block format's write-back
    shape (the parameter's own: blocks run along its last dimension) and block count; for a bf16 / fp16 parameter, the
    two float32 buffers its steps reuse (the copy the inner optimizer steps on, and its gradient's copy, then w)."""
    __slots__ = ("name", "p", "tid", "fmt", "scale", "shape", "blocks", "f32", "g32")

    def __init__(self, name, p, tid, fmt, scale):
        self.name, self.p, self.tid, self.fmt, self.scale = name, p, tid, fmt, scale
        info = _block_format(fmt)
        self.shape = (tuple(p.shape) or (1,)) if info is not None else (-1,)
        self.blocks = _block_count(info, tuple(p.shape)) if info is not None else 0
        self.f32 = self.g32 = None

    def fp32(self, which, t):
        """t promoted to float32 (exact) in this slot's buffer `which` ("f32" or "g32"), allocated at the first step:
        fresh float32 tensors every step cost a page fault per 4 KB (~0.1 s per copy of a 124M model)."""
        buf = getattr(self, which)
        if buf is None or buf.shape != t.shape or buf.device != t.device:
            buf = torch.empty(t.shape, dtype=torch.float32, device=t.device)
            setattr(self, which, buf)
        buf.copy_(t)
        return buf

    def scratch(self, which, shape):
        """This slot's float32 buffer `which`, shaped like the parameter, without a copy (the fused AdamW's output)."""
        buf = getattr(self, which)
        if buf is None or tuple(buf.shape) != tuple(shape) or buf.device.type != "cpu":
            buf = torch.empty(shape, dtype=torch.float32)
            setattr(self, which, buf)
        return buf

    def group_row(self, c):
        """A recorded step's trace row of this parameter from the write-back's counts."""
        row = {**{k: [c[k]] for k in ("nonzero", "erased", "saturated", "applied")},
               "erased_fraction": [_fraction(c["erased"], c["nonzero"])]}
        if self.blocks:
            row["block_events"] = {k: [c[k]] for k in _BLOCK_EVENTS}
        return row


def _torch_ops(name):
    try:
        from . import torch_ops
    except ImportError as e:
        raise RuntimeError(f"wbaudit.torch: parameter {name} is not a CPU tensor; its write-back needs "
                           f"wbaudit.torch_ops, which is not available ({e})") from e
    return torch_ops


_FUSED_ADAMW_AGREES = None  # whether _core.adamw_step_stored equals this torch's AdamW (probed once per process)


def _fused_adamw_agrees():
    """Whether the fused AdamW kernel (sim/optim/torch_adamw.hpp) gives this torch build's torch.optim.AdamW bits on
    a probe of 16,387 coordinates, two steps, bf16 and fp16 storage (ATen's rounding sequence is not a documented
    contract: a build that contracts differently, or a torch whose AdamW uses other operations, is caught here and
    PersistentNative keeps calling the inner optimizer)."""
    global _FUSED_ADAMW_AGREES
    if _FUSED_ADAMW_AGREES is None:
        _FUSED_ADAMW_AGREES = _probe_fused_adamw()
        if not _FUSED_ADAMW_AGREES:
            warnings.warn(f"wbaudit.torch: the fused AdamW step differs from torch {torch.__version__}'s "
                          f"torch.optim.AdamW on a probe; PersistentNative steps through the inner optimizer")
    return _FUSED_ADAMW_AGREES


def _probe_fused_adamw():
    gen = torch.Generator().manual_seed(20261207)
    n, lr, betas, eps, wd = 16387, 1e-2, (0.9, 0.95), 1e-8, 0.1
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        w = (torch.randn(n, generator=gen) * 0.05).to(dtype)
        p = w.float().requires_grad_()
        opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd)
        m, v, out = (np.zeros(n, np.float32) for _ in range(3))
        for t in (1, 2):
            g = (torch.randn(n, generator=gen) * 1e-2).to(dtype)
            with torch.no_grad():
                p.copy_(w.float())
            p.grad = g.float()
            opt.step()
            _core.adamw_step_stored(w.view(torch.int16).numpy(), g.view(torch.int16).numpy(), m, v, out, name, lr,
                                    betas[0], betas[1], eps, wd, float(t))
            st = opt.state[p]
            if not (np.array_equal(out, p.detach().numpy()) and np.array_equal(m, st["exp_avg"].numpy())
                    and np.array_equal(v, st["exp_avg_sq"].numpy())):
                return False
            w = p.detach().to(dtype)
    return True


class PersistentNative(torch.optim.Optimizer):
    """Turns any PyTorch optimizer into a persistent-native low-precision run.

        opt = PersistentNative(torch.optim.AdamW(model.parameters(), lr=lr), formats={"*": "e4m3"},
                               model=model, policy="nearest", path="e4m3/trace.h5")
        for step in range(steps):
            loss = ...; loss.backward()
            opt.step(loss=loss.item(), lr=lr)
            opt.zero_grad()
        opt.close()

    formats: one format name for every parameter, or {name or fnmatch pattern: format} (first match wins;
    unmatched parameters keep their storage format), or None / "auto": every parameter in its storage format
    (float32 -> fp32, bfloat16 -> bf16, float16 -> fp16). The parameters are rounded into their formats (nearest) at
    construction; intK formats take the per-tensor scale from the absmax of that initialization (a parameter
    initialized to all zeros has none: refused, naming it). Each step: the wrapped optimizer steps in fp32 (a bf16 or
    fp16 parameter is replaced by an fp32 copy for the step, so the inner optimizer's state is fp32),
    u = p_after - p_before (fp32), and p <- q_F^policy(p_before + u) with wbaudit's write-back (SR keyed by
    (seed, step, tensor id, coordinate), tensor id = position in the optimizer's parameter order), stored back into the
    parameter's own storage (exact: the format's values fit it). With fp32 this is plain PyTorch except where
    p_after - p_before is inexact in fp32 (a weight crossed zero or changed magnitude by 2x), where the proposal's
    rounding stays in the run. trajectory: a path to dump the realized trajectory (w, u, w_next at the recorded steps)
    for `wbaudit audit`.
    fused: None (default) steps a torch.optim.AdamW over CPU bf16 / fp16 parameters in one C++ pass with the same bits
    (docs/python.md, "The fused AdamW step"), True requires that (ValueError naming what stops it), False never uses
    it.
    sr_stream: SR's random stream, "philox" (the default) or "philox-packed" (stochastic / deadzone-sr with sr_bits
    in 1..16: one 32-bit Philox word feeds floor(32 / sr_bits) coordinates; sr_bits 0: two coordinates, 16 bits each,
    further bits from each coordinate's own words; different draws). A non-default stream is
    recorded beside sr_bits in the trace's config_json and the trajectory's root attributes.

    It is a torch.optim.Optimizer sharing the inner optimizer's param_groups, defaults and state (LR schedulers act on
    the inner optimizer). Frozen parameters (requires_grad False at construction) are left alone: not rounded, not
    written back, no group (config_json "frozen"). A tensor listed twice is one group (its proposal is the total change
    the inner optimizer made); under several model names (tied weights) it is named by the first (config_json "tied").
    state_dict() holds the inner optimizer's state and the write-back's (formats, scales, policy, seed, SR settings,
    step counter, the trace's header and rows); load_state_dict() on a new PersistentNative built with the same
    arguments continues the run bitwise and continues the streamed trace.h5.partial (docs/python.md).
    """

    def __init__(self, optimizer, formats=None, model=None, policy="nearest", sr_bits=0, seed=0, path="trace.h5",
                 schedule=None, steps=None, trajectory=None, config=None, sr_stream="philox", distributed=None,
                 fused=None):
        # torch's own setup (step hooks, profiling names) on a placeholder; param_groups, defaults and state are then
        # the inner optimizer's (properties below).
        super().__init__([torch.zeros(1)], {})
        for k in ("_boot_param_groups", "_boot_state", "_boot_defaults"):
            self.__dict__.pop(k, None)
        self.optimizer = optimizer
        if fused not in (None, True, False):
            raise ValueError(f"wbaudit.torch: fused is None (when it applies), True or False, got {fused!r}")
        self.fused = fused
        self.fused_steps = 0  # steps taken through the fused AdamW path
        aliases = _aliases(model)
        pairs, tids, seen = [], {}, set()
        position = 0
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                if id(p) in seen:  # listed twice: one group, written back once
                    continue
                seen.add(id(p))
                names = aliases.get(id(p))
                name = names[0] if names else f"group{g}.param{i}"
                pairs.append((name, p))
                tids[name] = position
                position += 1
        _check_shared_storage(pairs)
        self.tied = {aliases[id(p)][0]: aliases[id(p)][1:] for _, p in pairs if len(aliases.get(id(p), [])) > 1}
        self._frozen = [(name, p) for name, p in pairs if not p.requires_grad]
        self.frozen = [name for name, _ in self._frozen]
        self.params = [(name, p) for name, p in pairs if p.requires_grad]
        self.policy = policy
        self.sr_bits = int(sr_bits)
        self.sr_stream = str(sr_stream)
        self.seed = int(seed)
        self.path = os.fspath(path) if path is not None else None
        self.schedule = Schedule(schedule, steps)
        self.config = dict(config or {})
        self._dist = _distributed.attach(distributed, self.params, {
            "mode": "target", "formats": formats, "policy": policy, "sr_bits": self.sr_bits, "seed": self.seed,
            "sr_stream": self.sr_stream, "path": self.path, "trajectory": trajectory is not None})
        self.formats, self.scales = {}, {}
        # Refuse a bad policy / sr_bits / sr_stream now (ValueError naming it), before any parameter is rounded.
        writeback(np.zeros(0, np.float32), np.zeros(0, np.float32), "fp32", self.policy, self.seed, 0, 0,
                  self.sr_bits, None, None, 0, "", self.sr_stream)
        self._slots = []
        for name, p in self.params:
            if p.dtype not in _STORAGE_FORMAT:
                raise TypeError(f"wbaudit.torch: parameter {name} is {p.dtype} on {p.device}; PersistentNative writes "
                                f"back float32, bfloat16 and float16 parameters")
            fmt = formats if isinstance(formats, str) else (self._match(formats, name) if formats else "auto")
            if fmt == "auto":
                fmt = _STORAGE_FORMAT[p.dtype]
            scale = None
            if fmt.startswith("int"):
                absmax = self._dist.absmax(name, p)
                if not (absmax > 0 and np.isfinite(absmax)):
                    raise ValueError(f"wbaudit.torch: parameter {name}: {fmt} needs a per-tensor scale from the "
                                     f"initialization's max |w|, which is {absmax:g} (initialized to zeros); give it "
                                     f"another format, e.g. formats={{\"{name}\": \"fp32\", \"*\": \"{fmt}\"}}")
                scale = int_scale_for_absmax(int(fmt[3:]), absmax)
            why = _format_fits(fmt, p.dtype, scale)
            if why is not None:
                raise TypeError(f"wbaudit.torch: parameter {name} is stored as {p.dtype}: {why}")
            self.formats[name] = fmt
            if scale is not None:
                self.scales[name] = scale
            self._slots.append(_Slot(name, p, tids[name], fmt, scale))
        self._round_into_formats()
        self.steps_run = 0
        self._writer = None
        self._rows = 0  # recorded steps appended to the trace
        self._closed = False
        self._header = self._make_header(steps) if self.path is not None else None
        self._trajectory = None
        if trajectory is not None:
            self._trajectory = TrajectoryWriter(trajectory, format=self._single_format(), policy=policy,
                                                sr_bits=self.sr_bits, seed=self.seed, scales=self.scales,
                                                tensor_ids={s.name: s.tid for s in self._slots},
                                                sr_stream=self.sr_stream,
                                                shapes={s.name: tuple(s.p.shape) or (1,) for s in self._slots})

    # The inner optimizer's param_groups, defaults and state (before it exists: torch's setup's placeholders).
    def _inner_attr(name):  # noqa: N805
        boot = "_boot_" + name

        def get(self):
            inner = self.__dict__.get("optimizer")
            return getattr(inner, name) if inner is not None else self.__dict__.get(boot)

        def set_(self, value):
            inner = self.__dict__.get("optimizer")
            if inner is not None:
                setattr(inner, name, value)
            else:
                self.__dict__[boot] = value
        return property(get, set_)

    param_groups = _inner_attr("param_groups")
    defaults = _inner_attr("defaults")
    state = _inner_attr("state")
    del _inner_attr

    def add_param_group(self, param_group):
        if "optimizer" not in self.__dict__:
            return super().add_param_group(param_group)  # torch's setup
        raise NotImplementedError("wbaudit.torch: PersistentNative fixes its parameters (and its trace's groups) at "
                                  "construction; add the group to the inner optimizer before wrapping it")

    def _round_into_formats(self):
        with torch.no_grad():
            for s in self._slots:
                p = s.p
                if p.device.type == "cpu":
                    x = p.detach().float().contiguous().numpy()
                    p.copy_(torch.from_numpy(_round(x, s.fmt, scale=s.scale)).view(p.shape))
                else:
                    p.copy_(_torch_ops(s.name).round_tensor(p.detach().float(), s.fmt, scale=s.scale))

    def _make_header(self, steps):
        fmts = set(self.formats.values())
        run = {"mode": "target", "formats": self.formats, "policy": self.policy, "sr_bits": self.sr_bits,
               "seed": self.seed, "schedule": str(self.schedule.describe()),
               "optimizer": type(self.optimizer).__name__,
               "parameters": {n: list(p.shape) for n, p in self.params}}
        if self.sr_stream != "philox":  # beside sr_bits; absent for the default stream, as before
            run["sr_stream"] = self.sr_stream
        if self.frozen:  # these three are absent when empty: such traces are as before
            run["frozen"] = self.frozen
        if self.tied:
            run["tied"] = self.tied
        storage = {s.name: _STORAGE_FORMAT[s.p.dtype] for s in self._slots if s.p.dtype != torch.float32}
        if storage:
            run["storage"] = storage
        config = provenance(run)
        config.update(self.config)
        return {"schema": _core.TRACE_SCHEMA_TARGET, "mode": "target",
                "format": fmts.pop() if len(fmts) == 1 else "mixed", "policy": self.policy, "seed": self.seed,
                "steps": int(steps or 0), "config_json": json.dumps(config, sort_keys=True),
                "histogram": dict(_HIST),
                "groups": {s.name: {"tensor_id": s.tid, "size": s.p.numel(),
                                    **({"block_format": s.fmt, "blocks": s.blocks} if s.blocks else {})}
                           for s in self._slots}}

    def _open(self):
        """Starts the streamed trace at the first step (so that load_state_dict can continue an earlier one)."""
        if self._writer is None and self.path is not None and not self._closed:
            d = os.path.dirname(self.path)
            if d:
                os.makedirs(d, exist_ok=True)
            self._writer = self._dist.writer(self.path, self._header)
        return self._writer

    @property
    def partial(self):
        """The file the recorded steps are streamed to until close() (None without a path)."""
        return None if self.path is None else self.path + ".partial"

    @staticmethod
    def _match(formats, name):
        if name in formats:
            return formats[name]
        for pattern, fmt in formats.items():
            if fnmatch.fnmatchcase(name, pattern):
                return fmt
        return "auto"

    def _single_format(self):
        fmts = set(self.formats.values())
        if len(fmts) != 1:
            raise ValueError(f"wbaudit.torch: a trajectory dump needs one format for every parameter, got {sorted(fmts)}")
        return fmts.pop()

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def _check_frozen(self):
        for name, p in self._frozen:
            if p.requires_grad:
                raise ValueError(f"wbaudit.torch: parameter {name} was frozen (requires_grad False) when "
                                 f"PersistentNative was built, so it has no format and no trace group; unfreeze it "
                                 f"before wrapping the optimizer")

    def step(self, closure=None, loss=None, lr=None):
        self._check_frozen()
        step = self.steps_run
        record = self.schedule(step)
        if self.fused is not False:
            why = self._fused_refusal(closure, record)
            if why is None:
                return self._fused_step(step, record, loss, lr)
            if self.fused:
                raise ValueError(f"wbaudit.torch: fused=True, but the fused AdamW step does not apply: {why}")
        low = {}  # bf16 / fp16 parameters: their storage and grad while the inner optimizer steps on an fp32 copy
        with torch.no_grad():
            for s in self._slots:
                p = s.p
                if p.dtype != torch.float32:
                    low[s.name] = (p.data, p.grad)
                    p.data = s.fp32("f32", p.data)
                    if p.grad is not None:
                        g = low[s.name][1]
                        p.grad = g.float() if g.is_sparse else s.fp32("g32", g)
            # In place on the CPU unless a trajectory row (w, u, w_next) is wanted: a bf16 / fp16 parameter's w is its
            # own storage (untouched by the inner step), so it needs no copy here (_writeback_in_place).
            in_place = self._trajectory is None or not record
            before = [None if in_place and s.name in low and s.p.device.type == "cpu" else _contiguous_clone(s.p)
                      for s in self._slots]
        try:
            result = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        except BaseException:
            with torch.no_grad():
                for s in self._slots:
                    if s.name in low:
                        s.p.data, s.p.grad = low[s.name]
            raise
        if loss is None and result is not None:
            loss = float(result)
        rows, groups = {}, {}
        with torch.no_grad():
            for s, w in zip(self._slots, before):
                p, name = s.p, s.name
                if in_place and p.device.type == "cpu" and (name in low or p.is_contiguous()):
                    c = self._writeback_in_place(s, w, low.get(name), record)
                    if record:
                        groups[name] = s.group_row(c)
                    continue
                u = (p.detach() - w).contiguous()  # the optimizer's fp32 proposal
                if name in low:
                    p.data, p.grad = low[name]
                if p.device.type != "cpu":
                    if self._dist.offset(name):
                        raise NotImplementedError(f"wbaudit.torch: parameter {name}: a sharded parameter off the CPU "
                                                  f"(its SR keys start at coordinate {self._dist.offset(name)})")
                    w_next, c = _torch_ops(name).writeback(w, u, s.fmt, self.policy, self.seed, step, s.tid,
                                                           self.sr_bits, s.scale, self.sr_stream, name)
                    p.copy_(w_next.view(p.shape))
                elif p.dtype == torch.float32 and p.is_contiguous():
                    # p <- q(w + u), written straight into the parameter's storage
                    p.copy_(w)
                    flat = p.detach().view(s.shape).numpy()
                    _, c = writeback(flat, _np(u).reshape(s.shape), s.fmt, self.policy, self.seed, step, s.tid,
                                     self.sr_bits, s.scale, flat, self._dist.offset(name), name, self.sr_stream)
                    w_next = None
                else:  # another storage dtype or layout: the write-back in fp32, stored into it (exact)
                    w_next, c = writeback(_np(w).reshape(s.shape), _np(u).reshape(s.shape), s.fmt, self.policy, self.seed,
                                          step, s.tid, self.sr_bits, s.scale, None, self._dist.offset(name), name,
                                          self.sr_stream)
                    w_next = torch.from_numpy(w_next)
                    p.copy_(w_next.view(p.shape))
                if record:
                    self._dist.observe(name, w, u)
                    groups[name] = s.group_row(c)
                    if self._trajectory is not None:
                        after = w_next if w_next is not None else p.detach()
                        rows[name] = (w.cpu(), u.cpu(), after.float().reshape(p.shape).cpu().clone())
        if record:
            if self._open() is not None:
                self._writer.append({"recorded_steps": [step], "loss": [_NAN if loss is None else float(loss)],
                                     "learning_rate": [_NAN if lr is None else float(lr)], "groups": groups})
                self._rows += 1
            if self._trajectory is not None:
                self._trajectory.record(step, rows)
        self.steps_run += 1
        return result

    def _fused_refusal(self, closure, record):
        """None where the fused AdamW step applies (docs/python.md, "The fused AdamW step"), else why not."""
        opt = self.optimizer
        if type(opt) is not torch.optim.AdamW:
            return f"the inner optimizer is {type(opt).__name__}, not torch.optim.AdamW"
        if closure is not None:
            return "step() was given a closure"
        if record and (self._trajectory is not None or self._dist.observes):
            return "a trajectory dump or a distributed check reads w and u at this step"
        for group in opt.param_groups:
            for key in ("amsgrad", "maximize", "capturable", "differentiable", "fused"):
                if group.get(key):
                    return f"a parameter group has {key}=True"
            if group.get("foreach"):
                return "a parameter group has foreach=True"
            if not all(isinstance(group[k], (int, float)) for k in ("lr", "eps", "weight_decay")):
                return "a parameter group's lr, eps or weight_decay is not a Python number"
        slots = {id(s.p): s for s in self._slots}
        listed = set()
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    if id(p) in slots:
                        return f"parameter {slots[id(p)].name} has no gradient"
                    continue
                if id(p) not in slots or id(p) in listed:
                    return "a parameter with a gradient is listed twice or is not written back"
                listed.add(id(p))
        for s in self._slots:
            p, g = s.p, s.p.grad
            if p.dtype not in (torch.bfloat16, torch.float16) or p.device.type != "cpu" or not p.is_contiguous():
                return f"parameter {s.name} is not a contiguous CPU bfloat16 / float16 tensor"
            if g.is_sparse or g.device.type != "cpu" or not g.is_contiguous() or g.dtype not in (p.dtype,
                                                                                                 torch.float32):
                return f"the gradient of {s.name} is not a dense contiguous CPU tensor of its dtype or float32"
            state = opt.state.get(p)
            if state and (set(state) != {"step", "exp_avg", "exp_avg_sq"}
                          or any(state[k].dtype != torch.float32 or not state[k].is_contiguous()
                                 or state[k].device.type != "cpu" or state[k].shape != p.shape
                                 for k in ("exp_avg", "exp_avg_sq"))):
                return f"the AdamW state of {s.name} is not float32 moments of its shape"
        if not _fused_adamw_agrees():
            return f"the fused kernel differs from torch {torch.__version__}'s AdamW (probe)"
        return None

    def _fused_step(self, step, record, loss, lr):
        """torch.optim.AdamW's step and the write-back in two passes per parameter, for bf16 / fp16 storage on the
        CPU: _core.adamw_step_stored (the inner AdamW's arithmetic on the stored values, its state updated in place,
        bit-equal to torch's) into the slot's fp32 buffer, then _core.writeback_stored. The same parameters, state
        and trace as the general path without its fp32 copies of parameters and gradients."""
        opt = self.optimizer
        groups = {}
        with torch.no_grad():
            options = {id(p): group for group in opt.param_groups for p in group["params"]}
            for s in self._slots:
                p, group = s.p, options[id(s.p)]
                state = opt.state[p]
                if len(state) == 0:  # as torch.optim.AdamW initializes it (on the fp32 copy it would step)
                    state["step"] = torch.tensor(0.)
                    state["exp_avg"] = torch.zeros(p.shape, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros(p.shape, dtype=torch.float32)
                state["step"] += 1
                stepped = s.scratch("f32", p.shape)
                storage = p.data.view(torch.int16).reshape(-1).numpy()
                g = p.grad
                grad = (g.view(torch.int16) if g.dtype != torch.float32 else g).reshape(-1).numpy()
                dtype = _STORAGE_FORMAT[p.dtype]
                beta1, beta2 = group["betas"]
                _core.adamw_step_stored(storage, grad, _np(state["exp_avg"]).reshape(-1),
                                        _np(state["exp_avg_sq"]).reshape(-1), _np(stepped).reshape(-1), dtype,
                                        group["lr"], beta1, beta2, group["eps"], group["weight_decay"],
                                        state["step"].item())
                c = _core.writeback_stored(storage, _np(stepped).reshape(-1), dtype, s.fmt, self.policy, self.seed,
                                           step, s.tid, self.sr_bits, s.scale, self._dist.offset(s.name), s.name,
                                           self.sr_stream)
                if record:
                    groups[s.name] = s.group_row(c)
        if hasattr(opt, "_step_count"):  # an LR scheduler built on the inner optimizer counts its steps
            opt._step_count += 1
        if record and self._open() is not None:
            self._writer.append({"recorded_steps": [step], "loss": [_NAN if loss is None else float(loss)],
                                 "learning_rate": [_NAN if lr is None else float(lr)], "groups": groups})
            self._rows += 1
        self.steps_run += 1
        self.fused_steps += 1
        return None

    def _writeback_in_place(self, s, w, low, record):
        """The CPU write-back of one parameter without new fp32 arrays (the same values and counts as step's general
        path): u = p_after - w is computed into the fp32 tensor the inner optimizer stepped on, q(w + u) into w, then
        stored into the parameter. w: the fp32 copy of p before the step (None for a bf16 / fp16 parameter, whose
        storage still holds it); low: (storage, grad) of a bf16 / fp16 parameter, else None."""
        p, name = s.p, s.name
        if low is None:
            u = p.detach()  # contiguous fp32: its storage becomes u, then p <- w_next
        else:
            u = p.data  # the fp32 copy the inner optimizer stepped on
            p.data, p.grad = low
            storage = p.data
            if storage.is_contiguous() and not (record and self._dist.observes):
                # One fused pass (_core.writeback_stored): w read from the storage's own bits, u = fl32(stepped - w),
                # q(w + u) stored back: the same values and counts as below without the fp32 copies of w and u.
                return _core.writeback_stored(storage.view(torch.int16).reshape(-1).numpy(),
                                              _np(u.contiguous()).reshape(-1), _STORAGE_FORMAT[storage.dtype], s.fmt,
                                              self.policy, self.seed, self.steps_run, s.tid, self.sr_bits, s.scale,
                                              self._dist.offset(name), name, self.sr_stream)
            w = s.fp32("g32", low[0])  # exact; the gradient's copy is no longer needed
        torch.sub(u, w, out=u)  # the optimizer's fp32 proposal (low: the storage promoted to fp32, exact)
        wf = _np(w).reshape(s.shape)
        uf = _np(u.contiguous()).reshape(s.shape)
        if record:
            self._dist.observe(name, w, u)
        try:
            _, c = writeback(wf, uf, s.fmt, self.policy, self.seed, self.steps_run, s.tid, self.sr_bits, s.scale,
                             wf, self._dist.offset(name), name, self.sr_stream)
        finally:  # on an error w is left as it was: p holds w again, as in the general path
            p.detach().copy_(w.view(p.shape))
        return c

    def state_dict(self):
        """The inner optimizer's state_dict plus "wbaudit": the write-back's configuration and scales, the step counter
        (SR's step key) and the streamed trace's header and rows (what the checkpoint has written)."""
        sd = self.optimizer.state_dict()
        sd["wbaudit"] = {
            "version": 1, "steps_run": self.steps_run, "formats": dict(self.formats), "scales": dict(self.scales),
            "policy": self.policy, "sr_bits": self.sr_bits, "sr_stream": self.sr_stream, "seed": self.seed,
            "tensor_ids": {s.name: s.tid for s in self._slots}, "frozen": list(self.frozen),
            "trace": None if self.path is None else {"path": self.path, "header": self._header, "rows": self._rows},
        }
        return sd

    def load_state_dict(self, state_dict):
        """Restores a checkpoint of state_dict() into this object, built with the same arguments (its parameters the
        checkpoint's: load the model's state_dict too). The inner optimizer's state, the intK scales and the step
        counter are restored; the trace continues: the partial file keeps the checkpoint's rows (those recorded after
        it are dropped and recorded again) and the next steps are appended to it."""
        wb = state_dict.get("wbaudit")
        if wb is None:
            raise ValueError("wbaudit.torch: load_state_dict: not a PersistentNative state_dict (no \"wbaudit\" "
                             "entry); load a plain optimizer state_dict into the inner optimizer")
        if self.steps_run != 0 or self._writer is not None or self._closed:
            raise ValueError("wbaudit.torch: load_state_dict: this PersistentNative has already stepped; load the "
                             "checkpoint into a new one")
        for key in ("formats", "policy", "sr_bits", "sr_stream", "seed", "frozen"):
            mine = getattr(self, key)
            if wb[key] != mine:
                raise ValueError(f"wbaudit.torch: load_state_dict: the checkpoint's {key} {wb[key]!r} differs from "
                                 f"this run's {mine!r}")
        if wb["tensor_ids"] != {s.name: s.tid for s in self._slots}:
            raise ValueError("wbaudit.torch: load_state_dict: the checkpoint's parameters (names, order) differ from "
                             "this run's")
        self.scales = dict(wb["scales"])
        for s in self._slots:
            s.scale = self.scales.get(s.name)
            if s.scale is not None:  # the checkpoint's values must be on its scale's grid
                x = s.p.detach().float().cpu().contiguous().numpy()
                if not np.array_equal(_round(x, s.fmt, scale=s.scale), x):
                    raise ValueError(f"wbaudit.torch: load_state_dict: parameter {s.name} is not on the {s.fmt} grid "
                                     f"of the checkpoint's scale {s.scale!r}: load the model's state_dict after "
                                     f"building PersistentNative (its construction rounds with the scale of the "
                                     f"weights it finds)")
        # torch's Optimizer.load_state_dict casts floating state to its parameter's dtype: a bf16 / fp16 parameter
        # stands in as float32 meanwhile (a zero-storage view), so the inner optimizer's fp32 state stays fp32 (cast
        # to bf16 it lost bits, and torch's AdamW then failed on the fp32 gradient copies).
        low = [(s.p, s.p.data) for s in self._slots if s.p.dtype != torch.float32]
        try:
            for p, data in low:
                p.data = torch.empty((), dtype=torch.float32, device=data.device).expand(data.shape)
            self.optimizer.load_state_dict({k: v for k, v in state_dict.items() if k != "wbaudit"})
        finally:
            for p, data in low:
                p.data = data
        self.steps_run = int(wb["steps_run"])
        trace = wb["trace"]
        if self.path is not None and trace is not None:
            if os.path.abspath(trace["path"]) != os.path.abspath(self.path):
                raise ValueError(f"wbaudit.torch: load_state_dict: the checkpoint streamed its trace to "
                                 f"{trace['path']}, this run to {self.path}")
            self._resume_trace(trace["header"], int(trace["rows"]))

    def _resume_trace(self, header, keep):
        """Continues the partial trace: a new writer over the same file, with the checkpoint's header and its first
        `keep` rows. The old partial file is first renamed to path + ".partial.resume", removed once the rows are
        copied: a resume that dies on the way is resumed again from it."""
        partial, backup = self.partial, self.partial + ".resume"
        src = partial
        if os.path.exists(backup):
            src = backup  # an earlier resume stopped while copying: the backup holds the checkpoint's rows
        kept = None
        if keep:
            if not os.path.exists(src):
                raise ValueError(f"wbaudit.torch: load_state_dict: {partial}: no partial trace to continue (the "
                                 f"checkpoint had recorded {keep} steps)")
            old = _core.read_trace(src, True)
            if old["config_json"] != header["config_json"]:
                raise ValueError(f"wbaudit.torch: load_state_dict: {src} is not the checkpoint's trace (its "
                                 f"config_json differs)")
            if len(old["recorded_steps"]) < keep:
                raise ValueError(f"wbaudit.torch: load_state_dict: {src} holds {len(old['recorded_steps'])} recorded "
                                 f"steps, fewer than the checkpoint's {keep}")
            kept = {"recorded_steps": old["recorded_steps"][:keep], "loss": old["loss"][:keep],
                    "learning_rate": old["learning_rate"][:keep],
                    "groups": {n: {k: g[k][:keep] for k in ("nonzero", "erased", "saturated", "applied",
                                                             "erased_fraction")}
                               for n, g in old["groups"].items()}}
            if src == partial:
                os.replace(partial, backup)
        self._header = header
        self._open()
        if kept is not None:
            self._writer.append(kept)
        self._rows = keep
        if os.path.exists(backup):
            os.remove(backup)

    def trace(self):
        """The target trace as a dict (the layout of wbaudit.read_trace): what is on disk so far."""
        if self.path is None:
            raise ValueError("wbaudit.torch: PersistentNative without path= records no trace")
        if self._closed:
            return _core.read_trace(self.path)
        self._open()
        return _core.read_trace(self.partial, True)

    def close(self):
        """Writes the target trace (and closes the trajectory dump); returns the trace path."""
        if self._trajectory is not None:
            self._trajectory.close()
            self._trajectory = None
        if self.path is None:
            return None
        if not self._closed:
            self._open()
            self._writer.finish(self.steps_run)
            self._writer = None
            self._closed = True
        return self.path


__all__ = ["ReferenceRecorder", "PersistentNative", "Schedule", "provenance"]
