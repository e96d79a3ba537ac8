"""The registry behind ``backend=``: :data:`REGISTRY`, the choice for ``backend="auto"``,
:func:`backends`, and :func:`run`, the one path from a validated call through any backend.

A new backend is one module (the protocol is :mod:`fastdeconv._backends.protocol`) plus one line in
:data:`REGISTRY`. A backend that cannot run here raises RuntimeError with the reason; none falls back
silently.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._call import Call, finish
from .cpu import CPU
from .mps import MPS, MPS_CNN
from .protocol import Backend, Layer
from .reference import REFERENCE

#: backend= name -> backend object, in the order backends() lists them and "auto" asks them; the
#: first is auto's default.
REGISTRY: dict[str, Backend] = {backend.name: backend for backend in (CPU, REFERENCE, MPS, MPS_CNN)}
#: The backends whose layers the function API does not keep between calls (``cache_layers`` False).
UNCACHED: frozenset = frozenset(name for name, backend in REGISTRY.items() if not backend.cache_layers)


class AutoBackend:
    """backend="auto", per call: with ``algorithm=``, the first registered backend that lists it (else the
    first registered, "cpu", which names the valid ones); without, the first that ``prefers`` the call,
    else the first registered."""

    name = "auto"

    @staticmethod
    def choose(call: Call, algorithm: str | None = None) -> Backend:
        """The backend this call runs on."""
        default = next(iter(REGISTRY.values()))
        if algorithm is not None:
            listed = (b for b in REGISTRY.values() if isinstance(algorithm, str) and algorithm in b.algorithms)
            return next(listed, default)
        return next((backend for backend in REGISTRY.values() if backend.prefers(call)), default)


class BackendInfo(NamedTuple):
    """One row of :func:`backends`."""

    name: str
    available: bool
    reason: str


def backends() -> list[BackendInfo]:
    """Every backend= value except "auto", whether it can run here, and why (not).

    Returns
    -------
    list of BackendInfo
        Named tuples ``(name, available, reason)``.

    Examples
    --------
    >>> import fastdeconv
    >>> [row.name for row in fastdeconv.backends()]
    ['cpu', 'reference', 'mps', 'mps-cnn']
    >>> fastdeconv.backends()[0].available
    True
    """
    return [BackendInfo(name, state.available, state.reason)
            for name, state in ((name, backend.status()) for name, backend in REGISTRY.items())]


def get(name) -> Backend | type[AutoBackend]:
    """The backend object for a backend= argument ("auto" gives :class:`AutoBackend`)."""
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, got {name!r}")
    if name == "auto":
        return AutoBackend
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"backend must be one of 'auto', {', '.join(repr(b) for b in REGISTRY)}; "
                         f"got {name!r}") from None


def require(backend: Backend) -> None:
    """RuntimeError with the reason when ``backend`` cannot run here."""
    state = backend.status()
    if not state.available:
        raise RuntimeError(f"backend={backend.name!r} is not available: {state.reason}")


def choose(call: Call, backend, algorithm: str | None = None) -> Backend:
    """The backend that runs ``call`` (auto decided), checked to be available here."""
    if backend is AutoBackend:
        backend = AutoBackend.choose(call, algorithm)
    require(backend)
    return backend


def run(call: Call, backend, algorithm: str | None = None) -> np.ndarray:
    """One call of the public functions: the weights prepared for this call only, then run."""
    backend = choose(call, backend, algorithm)
    layer = backend.layer(call.weight, call.bias, call.dtype, call.geometry, algorithm)
    return run_layer(call, layer, layer.bind(call.geometry))


def run_layer(call: Call, layer: Layer, bound) -> np.ndarray:
    """``bound`` (``layer.bind(call.geometry)``) on the call's x, finished (cast, unbatched, out=)."""
    return finish(call, bound(np.ascontiguousarray(call.x, layer.dtype), out_buffer(call, layer)))


def out_buffer(call: Call, layer: Layer) -> np.ndarray | None:
    """out= itself, as the (N, H_out, W_out, C_out) buffer, when the layer computes in its dtype and
    out= is aligned (the kernels write float* / double*); else None: a new buffer, copied into out=."""
    if call.out is not None and call.out.dtype == layer.dtype and call.out.flags.aligned:
        return call.out.reshape(call.geometry.output_shape)
    return None
