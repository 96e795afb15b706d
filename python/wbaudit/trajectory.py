"""Writing a realized trajectory in the layout `wbaudit audit` reads (docs/python.md, "The trajectory layout").

    with TrajectoryWriter("traj.h5", format="e4m3", policy="nearest") as t:
        for step in range(steps):
            ...
            t.record(step, {"layer.weight": (w_before, u, w_after)})

Each tensor gets datasets w, u and w_next of shape [T, n] (float32); /steps holds the recorded steps. The file is
written under a temporary name and renamed when closed, so a crashed run leaves no half-written trajectory.
"""
import os

import numpy as np

from . import TRAJECTORY_SCHEMA


def _float32_row(name, what, a):
    a = a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)
    if a.dtype != np.float32:
        raise TypeError(f"trajectory: tensor {name}: {what} has dtype {a.dtype}, expected float32")
    return a.reshape(-1)


class TrajectoryWriter:
    """Appends rows (w[t], u[t], w[t+1]) per tensor and recorded step to an HDF5 trajectory."""

    def __init__(self, path, format, policy, sr_bits=0, seed=None, scales=None, tensor_ids=None, sr_stream="philox",
                 shapes=None):
        """shapes: {tensor name: shape} written as the tensor's attribute `shape` (block formats need it: their
        blocks run along the last dimension); scales: intK per-tensor scales; tensor_ids: SR stream keys."""
        import h5py

        if sr_stream not in ("philox", "philox-packed"):
            raise ValueError(f'trajectory: unknown SR stream "{sr_stream}" (known: philox, philox-packed)')

        self.path = os.fspath(path)
        if os.path.exists(self.path):
            raise FileExistsError(f"trajectory: {self.path} already exists (never overwritten)")
        d = os.path.dirname(self.path)
        if d:  # like the trace's directory: created when missing (the ten-line diff of docs/python.md)
            os.makedirs(d, exist_ok=True)
        self._tmp = f"{self.path}.tmp.{os.getpid()}"
        self._file = h5py.File(self._tmp, "w")
        self._file.attrs["schema"] = TRAJECTORY_SCHEMA
        self._file.attrs["format"] = format
        self._file.attrs["policy"] = policy
        self._file.attrs["sr_bits"] = np.int64(sr_bits)
        if sr_stream != "philox":  # absent means philox: files of the default stream stay as they were
            self._file.attrs["sr_stream"] = sr_stream
        if seed is not None:
            self._file.attrs["seed"] = np.uint64(seed)
        self._steps = self._file.create_dataset("steps", shape=(0,), maxshape=(None,), dtype=np.int64)
        self._tensors = self._file.create_group("tensors")
        self._order = []
        self._scales = dict(scales or {})
        self._ids = dict(tensor_ids or {})
        self._shapes = dict(shapes or {})
        self._sets = {}

    def record(self, step, rows):
        """rows: {tensor name: (w, u, w_next)} for one recorded step (numpy arrays or CPU tensors, float32)."""
        if self._steps.shape[0] and step <= self._steps[-1]:
            raise ValueError(f"trajectory: step {step} after step {self._steps[-1]} (steps must increase)")
        k = self._steps.shape[0]
        if k > 0 and set(rows) != set(self._order):
            raise ValueError(f"trajectory: step {step} records tensors {sorted(rows)}, earlier steps {sorted(self._order)}")
        for name, (w, u, w_next) in rows.items():
            w, u, w_next = (_float32_row(name, what, a) for what, a in (("w", w), ("u", u), ("w_next", w_next)))
            if not (w.size == u.size == w_next.size):
                raise ValueError(f"trajectory: tensor {name}, step {step}: shape mismatch: w {w.size}, u {u.size}, "
                                 f"w_next {w_next.size} coordinates")
            if name not in self._sets:
                if k > 0:
                    raise ValueError(f"trajectory: tensor {name} first appears at step {step}")
                g = self._tensors.create_group(name)
                g.attrs["tensor_id"] = np.uint32(self._ids.get(name, len(self._order)))
                if name in self._scales:
                    g.attrs["scale"] = float(self._scales[name])
                if name in self._shapes:
                    shape = np.asarray(self._shapes[name], dtype=np.int64).reshape(-1)
                    if int(np.prod(shape)) != w.size:
                        raise ValueError(f"trajectory: tensor {name}: shape {tuple(shape)} does not hold its {w.size} "
                                         f"coordinates")
                    g.attrs["shape"] = shape
                self._sets[name] = [g.create_dataset(d, shape=(0, w.size), maxshape=(None, w.size), dtype=np.float32,
                                                     chunks=(1, min(w.size, 1 << 18)) if w.size else None)
                                    for d in ("w", "u", "w_next")]
                self._order.append(name)
            for dset, row in zip(self._sets[name], (w, u, w_next)):
                if row.size != dset.shape[1]:
                    raise ValueError(f"trajectory: tensor {name}, step {step}: {row.size} coordinates, "
                                     f"earlier {dset.shape[1]}")
                dset.resize(k + 1, axis=0)
                dset[k] = row
        self._steps.resize(k + 1, axis=0)
        self._steps[k] = step

    def close(self):
        if self._file is None:
            return
        self._file.attrs["tensor_order"] = "\n".join(self._order)
        self._file.close()
        self._file = None
        os.replace(self._tmp, self.path)

    def abort(self):
        if self._file is not None:
            self._file.close()
            self._file = None
            os.unlink(self._tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
