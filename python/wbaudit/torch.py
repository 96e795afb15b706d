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
reference's; optionally the realized trajectory is dumped in the layout ``wbaudit audit`` reads.

Both need CPU float32 parameters (the write-back happens in place in the parameter's storage).
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
    """(name, parameter) pairs from a module, a dict, (name, param) pairs or plain parameters."""
    if isinstance(model_or_params, torch.nn.Module):
        pairs = list(model_or_params.named_parameters())
    elif isinstance(model_or_params, dict):
        pairs = list(model_or_params.items())
    else:
        items = list(model_or_params)
        if items and isinstance(items[0], tuple):
            pairs = items
        else:
            pairs = [(f"param{i}", p) for i, p in enumerate(items)]
    for name, p in pairs:
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise TypeError(f"wbaudit.torch: parameter {name} is {p.dtype} on {p.device}; the recorders need CPU "
                            f"float32 parameters")
    return pairs


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
    parameter that starts all zeros has none and is not projected to intK (its group has no projected/intK).
    While the loop runs, ``path + ".partial"`` holds every step recorded so far (``wbaudit.read_trace(partial,
    allow_incomplete=True)``); a loop that dies leaves it, marked incomplete.
    """

    def __init__(self, model_or_params, formats=("e4m3",), schedule=None, path="trace.h5", steps=None, seed=0,
                 config=None, distributed=None):
        self.params = _named(model_or_params)
        self.formats = list(formats)
        self.path = os.fspath(path)
        self.schedule = Schedule(schedule, steps)
        self.seed = int(seed)
        self.config = dict(config or {})
        # distributed: None, "replicated" or wbaudit.distributed.Sharded(...) (docs/python.md, "Distributed runs")
        self._dist = _distributed.attach(distributed, self.params, {"mode": "reference", "formats": self.formats,
                                                                    "seed": self.seed, "path": self.path})
        self.steps_run = 0
        self._projected = {}
        self._init_absmax = {}
        for name, p in self.params:
            specs = []
            absmax = self._dist.absmax(name, p)
            self._init_absmax[name] = absmax
            for f in self.formats:
                if f.startswith("int"):
                    if absmax > 0:
                        specs.append((f, int_scale_for_absmax(int(f[3:]), absmax)))
                else:
                    specs.append(f)
            self._projected[name] = specs
        self._before = None
        self._u = None  # scratch: the proposal of one parameter at a time
        self._writer = None
        self._closed = False
        self._open(steps)

    def _open(self, steps):
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        config = provenance({"mode": "reference", "project_formats": self.formats, "seed": self.seed,
                             "schedule": str(self.schedule.describe()),
                             "parameters": {n: list(p.shape) for n, p in self.params}})
        config.update(self.config)
        groups = {}
        for tid, (name, p) in enumerate(self.params):
            groups[name] = {"tensor_id": tid, "size": p.numel(),
                            "projected": {(f if isinstance(f, str) else f[0]): {} for f in self._projected[name]},
                            "joint": {"init_absmax": self._init_absmax[name]}}
        header = {"schema": _core.TRACE_SCHEMA, "mode": "reference", "format": "fp32", "policy": "nearest",
                  "seed": self.seed, "steps": int(steps or 0), "config_json": json.dumps(config, sort_keys=True),
                  "histogram": dict(_HIST), "margin": _core.margin_layout(), "groups": groups}
        self._writer = self._dist.writer(self.path, header)

    @property
    def partial(self):
        """The file the recorded steps are streamed to until close()."""
        return self.path + ".partial"

    def before_step(self):
        if self.schedule(self.steps_run):
            self._before = [p.detach().clone() for _, p in self.params]

    def _proposal(self, p, w):
        """u = p_after - w_before in fp32, in the recorder's scratch (grown to the largest parameter once)."""
        n = p.numel()
        if self._u is None or self._u.numel() < n:
            self._u = torch.empty(max(n, max(q.numel() for _, q in self.params)), dtype=torch.float32)
        u = self._u[:n].view_as(p)
        torch.sub(p.detach(), w, out=u)
        return u

    def after_step(self, loss=None, lr=None):
        step = self.steps_run
        if self._before is not None:
            groups = {}
            for (name, p), w in zip(self.params, self._before):
                u = self._proposal(p, w)  # the proposal the optimizer applied, in fp32
                wf, uf = _np(w).reshape(-1), _np(u).reshape(-1)
                self._dist.observe(name, wf, uf)
                r = project(wf, uf, self._projected[name], True, _HIST["d_min"], _HIST["bin_width"], _HIST["bins"],
                            name, step, joint=True, init_absmax=self._init_absmax[name])
                joint = {"margin": r["margin"]}
                if p.numel() <= _core.JOINT_EXACT_MAX:  # a small tensor keeps w and u: the grid counts it exactly
                    joint["w"], joint["u"] = wf, uf.copy()  # u: the scratch is the next parameter's
                groups[name] = {
                    "nonzero": [r["nonzero"]], "zero_weight": [r["zero_weight"]],
                    "ratio_histogram": r["ratio_histogram"], "joint": joint,
                    "projected": {f: {"erased": [e], "fraction": [_fraction(e, r["nonzero"])]}
                                  for f, e in r["erased"].items()},
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
            self._u = None
        return self.path


class PersistentNative:
    """Turns any PyTorch optimizer into a persistent-native low-precision run.

        opt = PersistentNative(torch.optim.AdamW(model.parameters(), lr=lr), formats={"*": "e4m3"},
                               model=model, policy="nearest", path="e4m3/trace.h5")
        for step in range(steps):
            loss = ...; loss.backward()
            opt.step(loss=loss.item(), lr=lr)
            opt.zero_grad()
        opt.close()

    formats: one format name for every parameter, or {name or fnmatch pattern: format} (first match wins;
    unmatched parameters stay fp32). The parameters are rounded into their formats (nearest) at construction;
    intK formats take the per-tensor scale from the absmax of that initialization. Each step: the wrapped optimizer
    steps in fp32, u = p_after - p_before (fp32), and p <- q_F^policy(p_before + u) with wbaudit's write-back (SR keyed
    by (seed, step, tensor id, coordinate), tensor id = position in the parameter order). With fp32 this is plain
    PyTorch except where p_after - p_before is inexact in fp32 (a weight crossed zero or changed magnitude by 2x),
    where the proposal's rounding stays in the run. trajectory: a path to dump
    the realized trajectory (w, u, w_next at the recorded steps) for `wbaudit audit`.
    sr_stream: SR's random stream, "philox" (the default) or "philox-packed" (stochastic / deadzone-sr with sr_bits
    in 1..16: one 32-bit Philox word feeds floor(32 / sr_bits) coordinates; sr_bits 0: two coordinates, 16 bits each,
    further bits from each coordinate's own words; different draws). A non-default stream is
    recorded beside sr_bits in the trace's config_json and the trajectory's root attributes.
    """

    def __init__(self, optimizer, formats, model=None, policy="nearest", sr_bits=0, seed=0, path="trace.h5",
                 schedule=None, steps=None, trajectory=None, config=None, sr_stream="philox", distributed=None):
        self.optimizer = optimizer
        names = {}
        if model is not None:
            names = {id(p): n for n, p in model.named_parameters()}
        params = []
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                params.append((names.get(id(p), f"group{g}.param{i}"), p))
        self.params = _named(params)
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
        for name, p in self.params:
            fmt = formats if isinstance(formats, str) else self._match(formats, name)
            self.formats[name] = fmt
            scale = None
            if fmt.startswith("int"):
                scale = int_scale_for_absmax(int(fmt[3:]), self._dist.absmax(name, p))
                self.scales[name] = scale
            with torch.no_grad():
                p.copy_(torch.from_numpy(_round(_np(p), fmt, scale=scale)))
        self.steps_run = 0
        self._writer = None
        self._closed = False
        if self.path is not None:
            self._open(steps)
        self._trajectory = None
        if trajectory is not None:
            self._trajectory = TrajectoryWriter(trajectory, format=self._single_format(), policy=policy,
                                                sr_bits=self.sr_bits, seed=self.seed, scales=self.scales,
                                                tensor_ids={n: i for i, (n, _) in enumerate(self.params)},
                                                sr_stream=self.sr_stream)

    def _open(self, steps):
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        fmts = set(self.formats.values())
        run = {"mode": "target", "formats": self.formats, "policy": self.policy, "sr_bits": self.sr_bits,
               "seed": self.seed, "schedule": str(self.schedule.describe()),
               "optimizer": type(self.optimizer).__name__,
               "parameters": {n: list(p.shape) for n, p in self.params}}
        if self.sr_stream != "philox":  # beside sr_bits; absent for the default stream, as before
            run["sr_stream"] = self.sr_stream
        config = provenance(run)
        config.update(self.config)
        header = {"schema": _core.TRACE_SCHEMA_TARGET, "mode": "target",
                  "format": fmts.pop() if len(fmts) == 1 else "mixed", "policy": self.policy, "seed": self.seed,
                  "steps": int(steps or 0), "config_json": json.dumps(config, sort_keys=True),
                  "histogram": dict(_HIST),
                  "groups": {name: {"tensor_id": tid, "size": p.numel()}
                             for tid, (name, p) in enumerate(self.params)}}
        self._writer = self._dist.writer(self.path, header)

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
        return "fp32"

    def _single_format(self):
        fmts = set(self.formats.values())
        if len(fmts) != 1:
            raise ValueError(f"wbaudit.torch: a trajectory dump needs one format for every parameter, got {sorted(fmts)}")
        return fmts.pop()

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self, closure=None, loss=None, lr=None):
        step = self.steps_run
        record = self.schedule(step)
        before = [p.detach().clone() for _, p in self.params]
        result = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        if loss is None and result is not None:
            loss = float(result)
        rows, groups = {}, {}
        with torch.no_grad():
            for tid, ((name, p), w) in enumerate(zip(self.params, before)):
                u = p.detach() - w  # the optimizer's fp32 proposal
                # p <- q(w + u), written straight into the parameter's storage
                p.copy_(w)
                flat = p.detach().view(-1).numpy()
                _, c = writeback(flat, _np(u).reshape(-1), self.formats[name], self.policy, self.seed, step, tid,
                                 self.sr_bits, self.scales.get(name), flat, self._dist.offset(name), name,
                                 self.sr_stream)
                if record:
                    self._dist.observe(name, w, u)
                    groups[name] = {**{k: [c[k]] for k in ("nonzero", "erased", "saturated", "applied")},
                                    "erased_fraction": [_fraction(c["erased"], c["nonzero"])]}
                    if self._trajectory is not None:
                        rows[name] = (w, u, p.detach().clone())
        if record:
            if self._writer is not None:
                self._writer.append({"recorded_steps": [step], "loss": [_NAN if loss is None else float(loss)],
                                     "learning_rate": [_NAN if lr is None else float(lr)], "groups": groups})
            if self._trajectory is not None:
                self._trajectory.record(step, rows)
        self.steps_run += 1
        return result

    def trace(self):
        """The target trace as a dict (the layout of wbaudit.read_trace): what is on disk so far."""
        if self.path is None:
            raise ValueError("wbaudit.torch: PersistentNative without path= records no trace")
        return _core.read_trace(self.path) if self._closed else _core.read_trace(self.partial, True)

    def close(self):
        """Writes the target trace (and closes the trajectory dump); returns the trace path."""
        if self._trajectory is not None:
            self._trajectory.close()
            self._trajectory = None
        if self.path is None:
            return None
        if not self._closed:
            self._writer.finish(self.steps_run)
            self._closed = True
        return self.path


__all__ = ["ReferenceRecorder", "PersistentNative", "Schedule", "provenance"]
