"""The registry behind ``backend=``, the choice for ``backend="auto"``, :func:`backends`, and
:func:`run`, the one path from a validated call through any backend (the protocol they follow is
in :mod:`fastdeconv._protocol`). A new backend is one module plus one line in :data:`_REGISTRY`.

The backends
------------
* "cpu": the C kernels (:mod:`fastdeconv._cpu_backend`);
* "reference": the plain numpy oracle (:mod:`fastdeconv.reference`);
* "mps": Metal Performance Shaders Graph on macOS (:mod:`fastdeconv.metal`);
* "mps-cnn": MPSCNN kernels + fastdeconv's own Metal kernel on macOS (:mod:`fastdeconv.metal`);
* "auto": the first registered backend that ``prefers`` the call ("mps" when it is available, the
  dtype is float32/float16 and the call's FLOPs reach :func:`fastdeconv.metal.mps_min_flops`), else
  "cpu"; a forced ``algorithm=`` is a CPU algorithm, so it means "cpu".

A backend that cannot run here raises RuntimeError with the reason; none falls back silently.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import reference
from ._cpu_backend import CPU as CpuBackend
from ._params import ConvGeometry
from ._protocol import Backend, BackendStatus, Layer, no_algorithms
from ._validate import Call, finish
from .metal.backend import MPS, MPS_CNN

class _ReferenceLayer:
    def __init__(self, weight, bias, dtype):
        self.weight, self.bias, self.dtype = weight, bias, np.dtype(dtype)

    def bind(self, geometry: ConvGeometry):
        oracle = reference.conv_transpose2d_geometry if geometry.transposed else reference.conv2d_geometry
        return lambda x, buffer: oracle(x, self.weight, self.bias, geometry)


class ReferenceBackend:
    """fastdeconv.reference: plain numpy, written from the formula (the test oracle)."""

    name = "reference"

    @staticmethod
    def status() -> BackendStatus:
        return BackendStatus(True, "plain numpy oracle (fastdeconv.reference)")

    @staticmethod
    def prefers(call: Call) -> bool:
        return False

    @staticmethod
    def layer(weight, bias, dtype, geometry, algorithm=None):
        no_algorithms("reference", algorithm)
        return _ReferenceLayer(weight, bias, dtype)


# The registry: backend= name -> backend object, in the order backends() lists them and auto asks them.
_REGISTRY: dict[str, Backend] = {backend.name: backend for backend in (CpuBackend, ReferenceBackend, MPS, MPS_CNN)}


class AutoBackend:
    """backend="auto": decides per call (see the module docstring)."""

    name = "auto"

    @staticmethod
    def choose(call: Call, algorithm: str | None = None) -> Backend:
        """The backend this call runs on."""
        if algorithm is not None:
            return CpuBackend
        for backend in _REGISTRY.values():
            if backend.prefers(call):
                return backend
        return CpuBackend


class BackendInfo(NamedTuple):
    """One row of :func:`backends`."""

    name: str
    available: bool
    reason: str


def backends() -> list[BackendInfo]:
    """Every backend= value except "auto", whether it can run here, and why (not)."""
    return [BackendInfo(name, state.available, state.reason)
            for name, state in ((name, backend.status()) for name, backend in _REGISTRY.items())]


def get(name) -> Backend | type[AutoBackend]:
    """The backend object for a backend= argument ("auto" gives :class:`AutoBackend`)."""
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, got {name!r}")
    if name == "auto":
        return AutoBackend
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"backend must be one of 'auto', {', '.join(repr(b) for b in _REGISTRY)}; "
                         f"got {name!r}") from None


def require(backend: Backend) -> None:
    """RuntimeError with the reason when ``backend`` cannot run here."""
    state = backend.status()
    if not state.available:
        raise RuntimeError(f"backend={backend.name!r} is not available: {state.reason}")


def run(call: Call, backend, algorithm: str | None = None) -> np.ndarray:
    """One call of the public functions: the weights prepared for this call only, then run."""
    if backend is AutoBackend:
        backend = AutoBackend.choose(call, algorithm)
    require(backend)
    layer = backend.layer(call.weight, call.bias, call.dtype, call.geometry, algorithm)
    return finish(call, layer.bind(call.geometry)(np.ascontiguousarray(call.x, layer.dtype), out_buffer(call, layer)))


def out_buffer(call: Call, layer: Layer) -> np.ndarray | None:
    """out= itself, as the (N, H_out, W_out, C_out) buffer, when the layer computes in its dtype and
    out= is aligned (the kernels write float* / double*); else None: a new buffer, copied into out=."""
    if call.out is not None and call.out.dtype == layer.dtype and call.out.flags.aligned:
        return call.out.reshape(call.geometry.output_shape)
    return None
