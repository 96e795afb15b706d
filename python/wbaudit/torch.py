"""PyTorch recorders (docs/python.md).

ReferenceRecorder: attached to an fp32 training loop around ``optimizer.step()``, it takes each parameter's proposal
``u = p_after - p_before`` and records, at the recording schedule, the projected events of every declared format and
the ratio histogram and the joint (|w|, |u|) histogram of the analytic grid (``wbaudit grid``), then writes a reference ``trace.h5`` (groups named by
``named_parameters()``).

PersistentNative: wraps any optimizer so that each parameter lives in a low-precision format with no fp32 master:
the optimizer's step is taken in fp32, its proposal ``u = p_after - p_before`` is written back with wbaudit's
write-back ``w <- q_F(w + u)``, the exact events are counted and a target ``trace.h5`` is written; optionally the
realized trajectory is dumped in the layout ``wbaudit audit`` reads.

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

from . import TRACE_SCHEMA, _core, int_scale_for_absmax, project, round as _round, writeback
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
    """Records a reference trace from an fp32 training loop.

        rec = ReferenceRecorder(model, formats=["e4m3", "e5m2"], schedule={"kind": "log", "points": 50},
                                steps=steps, path="reference/trace.h5")
        for step in range(steps):
            loss = ...; loss.backward()
            with rec.step(loss=loss.item(), lr=lr):
                optimizer.step()
        rec.close()

    intK formats get the per-tensor scale from the absmax of the parameters at construction (the initialization).
    """

    def __init__(self, model_or_params, formats=("e4m3",), schedule=None, path="trace.h5", steps=None, seed=0,
                 config=None):
        self.params = _named(model_or_params)
        self.formats = list(formats)
        self.path = os.fspath(path)
        self.schedule = Schedule(schedule, steps)
        self.seed = int(seed)
        self.config = dict(config or {})
        self.steps_run = 0
        self._projected = {}
        self._init_absmax = {}
        for name, p in self.params:
            specs = []
            absmax = float(p.detach().abs().max()) if p.numel() else 0.0
            self._init_absmax[name] = absmax
            for f in self.formats:
                if f.startswith("int"):
                    k = int(f[3:])
                    specs.append((f, int_scale_for_absmax(k, absmax)))
                else:
                    specs.append(f)
            self._projected[name] = specs
        self._rows = {name: {"nonzero": [], "zero_weight": [], "hist": [], "erased": {f: [] for f in self.formats},
                             "joint_keys": [], "joint_counts": [], "w": [], "u": []}
                      for name, _ in self.params}
        self.recorded_steps, self.loss, self.learning_rate = [], [], []
        self._before = None

    def before_step(self):
        if self.schedule(self.steps_run):
            self._before = [p.detach().clone() for _, p in self.params]

    def after_step(self, loss=None, lr=None):
        step = self.steps_run
        if self._before is not None:
            for (name, p), w in zip(self.params, self._before):
                u = p.detach() - w  # the proposal the optimizer applied, in fp32
                r = project(_np(w).reshape(-1), _np(u).reshape(-1), self._projected[name], True, _HIST["d_min"],
                            _HIST["bin_width"], _HIST["bins"], name, step, joint=True)
                row = self._rows[name]
                row["joint_keys"].append(r["joint_keys"])
                row["joint_counts"].append(r["joint_counts"])
                if p.numel() <= _core.JOINT_EXACT_MAX:  # a small tensor keeps w and u: the grid counts it exactly
                    row["w"].append(_np(w).reshape(-1).copy())
                    row["u"].append(_np(u).reshape(-1).copy())
                row["nonzero"].append(r["nonzero"])
                row["zero_weight"].append(r["zero_weight"])
                row["hist"].append(r["ratio_histogram"])
                for f in self.formats:
                    row["erased"][f].append(r["erased"][f])
            self.recorded_steps.append(step)
            self.loss.append(_NAN if loss is None else float(loss))
            self.learning_rate.append(_NAN if lr is None else float(lr))
            self._before = None
        self.steps_run += 1

    @contextlib.contextmanager
    def step(self, loss=None, lr=None):
        """Context manager around optimizer.step()."""
        self.before_step()
        yield
        self.after_step(loss, lr)

    def trace(self):
        """The reference trace as a dict (the layout of wbaudit.read_trace)."""
        groups = {}
        for tid, (name, p) in enumerate(self.params):
            row = self._rows[name]
            hist = np.array(row["hist"], dtype=np.int64).reshape(len(self.recorded_steps), _HIST["bins"])
            groups[name] = {
                "tensor_id": tid,
                "size": p.numel(),
                "nonzero": np.array(row["nonzero"], dtype=np.int64),
                "zero_weight": np.array(row["zero_weight"], dtype=np.int64),
                "ratio_histogram": hist,
                "projected": {f: {"erased": np.array(row["erased"][f], dtype=np.int64),
                                  "fraction": np.array([_fraction(e, n) for e, n in zip(row["erased"][f],
                                                                                        row["nonzero"])])}
                              for f in self.formats},
                "joint": {"offsets": np.concatenate([[0], np.cumsum([len(k) for k in row["joint_keys"]],
                                                                    dtype=np.int64)]).astype(np.int64),
                          "keys": np.concatenate(row["joint_keys"] or [np.zeros(0, np.uint64)]).astype(np.uint64),
                          "counts": np.concatenate(row["joint_counts"] or [np.zeros(0, np.int64)]).astype(np.int64),
                          "init_absmax": self._init_absmax[name]},
            }
            if row["w"]:
                groups[name]["joint"]["w"] = np.stack(row["w"]).astype(np.float32)
                groups[name]["joint"]["u"] = np.stack(row["u"]).astype(np.float32)
        config = provenance({"mode": "reference", "project_formats": self.formats, "seed": self.seed,
                             "schedule": str(self.schedule.describe()),
                             "parameters": {n: list(p.shape) for n, p in self.params}})
        config.update(self.config)
        return {"schema": TRACE_SCHEMA, "mode": "reference", "format": "fp32", "policy": "nearest",
                "seed": self.seed, "steps": self.steps_run, "config_json": json.dumps(config, sort_keys=True),
                "recorded_steps": np.array(self.recorded_steps, dtype=np.int64),
                "loss": np.array(self.loss, dtype=np.float64),
                "learning_rate": np.array(self.learning_rate, dtype=np.float64),
                "histogram": dict(_HIST), "joint": dict(_core.JOINT_LAYOUT), "groups": groups}

    def close(self):
        """Writes the trace (atomically) and returns its path."""
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        _core.write_trace(self.path, self.trace())
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
                 schedule=None, steps=None, trajectory=None, config=None, sr_stream="philox"):
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
        self.formats, self.scales = {}, {}
        # Refuse a bad policy / sr_bits / sr_stream now (ValueError naming it), before any parameter is rounded.
        writeback(np.zeros(0, np.float32), np.zeros(0, np.float32), "fp32", self.policy, self.seed, 0, 0,
                  self.sr_bits, None, None, 0, "", self.sr_stream)
        for name, p in self.params:
            fmt = formats if isinstance(formats, str) else self._match(formats, name)
            self.formats[name] = fmt
            scale = None
            if fmt.startswith("int"):
                scale = int_scale_for_absmax(int(fmt[3:]), float(p.detach().abs().max()))
                self.scales[name] = scale
            with torch.no_grad():
                p.copy_(torch.from_numpy(_round(_np(p), fmt, scale=scale)))
        self.steps_run = 0
        self._counts = {name: {k: [] for k in ("nonzero", "erased", "saturated", "applied")} for name, _ in self.params}
        self.recorded_steps, self.loss, self.learning_rate = [], [], []
        self._trajectory = None
        if trajectory is not None:
            self._trajectory = TrajectoryWriter(trajectory, format=self._single_format(), policy=policy,
                                                sr_bits=self.sr_bits, seed=self.seed, scales=self.scales,
                                                tensor_ids={n: i for i, (n, _) in enumerate(self.params)},
                                                sr_stream=self.sr_stream)

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
        rows = {}
        with torch.no_grad():
            for tid, ((name, p), w) in enumerate(zip(self.params, before)):
                u = p.detach() - w  # the optimizer's fp32 proposal
                # p <- q(w + u), written straight into the parameter's storage
                p.copy_(w)
                flat = p.detach().view(-1).numpy()
                _, c = writeback(flat, _np(u).reshape(-1), self.formats[name], self.policy, self.seed, step, tid,
                                 self.sr_bits, self.scales.get(name), flat, 0, name, self.sr_stream)
                if record:
                    for k in self._counts[name]:
                        self._counts[name][k].append(c[k])
                    if self._trajectory is not None:
                        rows[name] = (w, u, p.detach().clone())
        if record:
            self.recorded_steps.append(step)
            self.loss.append(_NAN if loss is None else float(loss))
            self.learning_rate.append(_NAN if lr is None else float(lr))
            if self._trajectory is not None:
                self._trajectory.record(step, rows)
        self.steps_run += 1
        return result

    def trace(self):
        groups = {}
        for tid, (name, p) in enumerate(self.params):
            c = self._counts[name]
            groups[name] = {"tensor_id": tid, "size": p.numel(),
                            **{k: np.array(v, dtype=np.int64) for k, v in c.items()},
                            "erased_fraction": np.array([_fraction(e, n) for e, n in zip(c["erased"], c["nonzero"])])}
        fmts = set(self.formats.values())
        run = {"mode": "target", "formats": self.formats, "policy": self.policy, "sr_bits": self.sr_bits,
               "seed": self.seed, "schedule": str(self.schedule.describe()), "optimizer": type(self.optimizer).__name__,
               "parameters": {n: list(p.shape) for n, p in self.params}}
        if self.sr_stream != "philox":  # beside sr_bits; absent for the default stream, as before
            run["sr_stream"] = self.sr_stream
        config = provenance(run)
        config.update(self.config)
        return {"schema": TRACE_SCHEMA, "mode": "target", "format": fmts.pop() if len(fmts) == 1 else "mixed",
                "policy": self.policy, "seed": self.seed, "steps": self.steps_run,
                "config_json": json.dumps(config, sort_keys=True),
                "recorded_steps": np.array(self.recorded_steps, dtype=np.int64),
                "loss": np.array(self.loss, dtype=np.float64),
                "learning_rate": np.array(self.learning_rate, dtype=np.float64),
                "histogram": dict(_HIST), "groups": groups}

    def close(self):
        """Writes the target trace (and closes the trajectory dump); returns the trace path."""
        if self._trajectory is not None:
            self._trajectory.close()
            self._trajectory = None
        if self.path is None:
            return None
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        _core.write_trace(self.path, self.trace())
        return self.path


__all__ = ["ReferenceRecorder", "PersistentNative", "Schedule", "provenance"]
