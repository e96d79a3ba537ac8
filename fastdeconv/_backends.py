"""The backends behind conv_transpose2d/conv2d, and the choice for backend="auto"."""

from __future__ import annotations

from . import reference
from ._cpu_backend import CpuBackend
from ._validate import Call


class ReferenceBackend:
    """fastdeconv.reference: plain numpy, written from the formula (the test oracle)."""

    name = "reference"

    @staticmethod
    def conv_transpose2d(call: Call):
        return reference.conv_transpose2d_geometry(call.x, call.weight, call.bias, call.geometry)

    @staticmethod
    def conv2d(call: Call):
        return reference.conv2d_geometry(call.x, call.weight, call.bias, call.geometry)


class MpsUnavailable:
    name = "mps"

    @staticmethod
    def _fail(call):
        raise RuntimeError("backend='mps' is not available: the Metal backend is not part of this build")

    conv_transpose2d = conv2d = _fail


_BACKENDS = {"cpu": CpuBackend, "reference": ReferenceBackend, "mps": MpsUnavailable}


def get(name):
    """The backend object for a backend= argument."""
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, got {name!r}")
    if name == "auto":
        return CpuBackend
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(f"backend must be one of 'auto', {', '.join(repr(b) for b in _BACKENDS)}; got {name!r}") from None
