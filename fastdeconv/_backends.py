"""The backends behind conv_transpose2d/conv2d, the choice for backend="auto", and :func:`backends`.

* "cpu": the C kernels (:mod:`fastdeconv._cpu_backend`);
* "reference": the plain numpy oracle (:mod:`fastdeconv.reference`);
* "mps": Metal Performance Shaders Graph on macOS (:mod:`fastdeconv.metal`);
* "mps-cnn": MPSCNN kernels + fastdeconv's own Metal kernel on macOS (:mod:`fastdeconv.metal`);
* "auto": "mps" when it is available, the dtype is float32/float16 and the call's FLOPs reach
  :func:`fastdeconv.metal.mps_min_flops` (an unmeasured default, see the README); "cpu" otherwise.

The Metal backends raise RuntimeError with the reason when they cannot run here (Linux, no
PyObjC, no Metal device); they never fall back to the CPU silently.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import metal, reference
from ._cpu_backend import CpuBackend
from ._validate import Call
from .metal.backend import MPS, MPS_CNN


class ReferenceBackend:
    """fastdeconv.reference: plain numpy, written from the formula (the test oracle)."""

    name = "reference"

    @staticmethod
    def conv_transpose2d(call: Call):
        return reference.conv_transpose2d_geometry(call.x, call.weight, call.bias, call.geometry)

    @staticmethod
    def conv2d(call: Call):
        return reference.conv2d_geometry(call.x, call.weight, call.bias, call.geometry)


_METAL_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


class AutoBackend:
    """backend="auto": decides per call (see the module docstring)."""

    name = "auto"

    @staticmethod
    def choose(call: Call):
        """The backend object this call runs on."""
        if (call.dtype in _METAL_DTYPES and call.geometry.flops >= metal.mps_min_flops()
                and metal.status("mps").available):
            return MPS
        return CpuBackend

    @staticmethod
    def conv_transpose2d(call: Call):
        return AutoBackend.choose(call).conv_transpose2d(call)

    @staticmethod
    def conv2d(call: Call):
        return AutoBackend.choose(call).conv2d(call)


_BACKENDS = {"cpu": CpuBackend, "reference": ReferenceBackend, "mps": MPS, "mps-cnn": MPS_CNN}


class BackendInfo(NamedTuple):
    """One row of :func:`backends`."""

    name: str
    available: bool
    reason: str


def backends() -> list[BackendInfo]:
    """Every backend= value except "auto", whether it can run here, and why (not)."""
    rows = [BackendInfo("cpu", True, "C kernels (fastdeconv._cpu)"),
            BackendInfo("reference", True, "plain numpy oracle (fastdeconv.reference)")]
    for name, backend in (("mps", MPS), ("mps-cnn", MPS_CNN)):
        state = backend.status()
        rows.append(BackendInfo(name, state.available, state.reason))
    return rows


def get(name):
    """The backend object for a backend= argument."""
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, got {name!r}")
    if name == "auto":
        return AutoBackend
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(f"backend must be one of 'auto', {', '.join(repr(b) for b in _BACKENDS)}; got {name!r}") from None
