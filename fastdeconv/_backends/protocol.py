"""The backend protocol: what every ``backend=`` provides.

A backend is an object with

* ``name``: its ``backend=`` string;
* ``status() -> BackendStatus``: whether it can run here, and a reason (why not, or what runs);
* ``prefers(call) -> bool``: whether ``backend="auto"`` should send this call to it rather than to
  the default backend (the first in the registry, "cpu", which answers False itself);
* ``algorithms``: the ``algorithm=`` names it accepts (empty: no choice of algorithms);
  ``backend="auto"`` sends a call with ``algorithm=`` to the first backend that lists it;
* ``resolve_algorithm(algorithm, geometry) -> str | None``: the algorithm a layer of this geometry
  runs, ``algorithm=`` validated (ValueError naming why it cannot run the layer); None for a
  backend without a choice (:func:`no_algorithms`);
* ``cache_layers``: whether the function API may keep its layers between calls, keyed by the
  weights' contents (False for the reference, which shares no machinery with what it checks);
* ``layer(weight, bias, dtype, geometry, algorithm=None) -> Layer``: a layer's weights prepared once
  for result dtype ``dtype`` (converted, packed or uploaded), for every input shape of the layer
  whose ``geometry`` (any one of them) is given. ``weight`` and ``bias`` are the caller's own copies,
  unchanged while the layer lives (the layer objects and the Dask kernels copy the user's arrays
  first), so a backend may keep references to them instead of copies.

A *layer* has ``dtype``, the dtype it computes in (x is handed to it C-contiguous in that dtype, and
its results come back in it), and ``bind(geometry)``, which returns ``run(x, buffer) -> y`` for
inputs of that geometry. ``buffer`` is a C-contiguous array of the geometry's output shape in
``layer.dtype`` that the layer may write the result into (or None); ``y`` is the
(N, H_out, W_out, C_out) result, in ``buffer`` or not.

Everything else is done once for every backend: validating the arguments
(:func:`fastdeconv._call.prepare`), converting x, and honouring ``out=``
(:func:`fastdeconv._backends.registry.run`, the layer objects and the Dask blocks).

A new backend is one module that defines such an object plus one line in
:data:`fastdeconv._backends.registry.REGISTRY`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Protocol

import numpy as np

from .._params import ConvGeometry


class BackendStatus(NamedTuple):
    """Whether a backend can run here, and why (not)."""

    available: bool
    reason: str


class Layer(Protocol):
    """A layer's weights prepared by a backend (see the module docstring)."""

    dtype: np.dtype

    def bind(self, geometry: ConvGeometry) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]: ...


class Backend(Protocol):
    """A ``backend=`` value (see the module docstring)."""

    name: str
    algorithms: tuple
    cache_layers: bool

    def status(self) -> BackendStatus: ...

    def prefers(self, call) -> bool: ...

    def resolve_algorithm(self, algorithm: str | None, geometry: ConvGeometry) -> str | None: ...

    def layer(self, weight, bias, dtype, geometry: ConvGeometry, algorithm: str | None = None) -> Layer: ...


def no_algorithms(backend: str, algorithm) -> None:
    """``resolve_algorithm()``'s check in a backend without a choice of algorithms."""
    if algorithm is not None:
        raise ValueError(f"algorithm={algorithm!r} selects a CPU algorithm; backend={backend!r} has none to choose")
