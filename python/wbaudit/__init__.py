"""wbaudit: audit and forecast erased weight updates in low-precision training.

The functions come from wbaudit's C++ core (exact rounding and write-back, projected events, the exact audit,
the trace format); see docs/python.md. PyTorch recorders are in wbaudit.torch, the trajectory writer for
`wbaudit audit` in wbaudit.trajectory.
"""
import atexit as _atexit

from . import _core
from ._core import (  # noqa: F401
    NonFiniteError,
    audit,
    block_formats,
    formats,
    int_scale_for_absmax,
    project,
    read_trace,
    recorded_steps,
    round,
    write_trace,
    writeback,
)

_core._ensure_kokkos()
_atexit.register(_core._finalize)

TRACE_SCHEMA = _core.TRACE_SCHEMA  # reference traces; target traces: _core.TRACE_SCHEMA_TARGET
TRAJECTORY_SCHEMA = "wbaudit.trajectory/1"


def format_names():
    """The names of the built-in formats."""
    return [f["name"] for f in formats()]


def threads():
    """Host threads the kernels use (Kokkos OpenMP; set OMP_NUM_THREADS before the import to change it)."""
    return _core._concurrency()


__all__ = [
    "NonFiniteError", "audit", "block_formats", "formats", "format_names", "int_scale_for_absmax", "project",
    "read_trace", "recorded_steps", "round", "threads", "write_trace", "writeback", "TRACE_SCHEMA", "TRAJECTORY_SCHEMA",
]
