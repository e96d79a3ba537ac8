"""The backend protocol: what every ``backend=`` provides.

A backend is an object with

* ``name``: its ``backend=`` string;
* ``status() -> BackendStatus``: whether it can run here, and a reason (why not, or what runs);
* ``prefers(call) -> bool``: whether ``backend="auto"`` should send this call to it rather than to
  the CPU (the CPU itself and the reference answer False: the CPU is auto's default);
* ``layer(weight, bias, dtype, geometry, algorithm=None) -> Layer``: a layer's weights prepared once
  for result dtype ``dtype`` (converted, packed or uploaded), for every input shape of the layer
  whose ``geometry`` (any one of them) is given. ``algorithm`` names one of the backend's
  algorithms; a backend without a choice of algorithms raises ValueError when it is not None.

A *layer* has ``dtype``, the dtype it computes in (x is handed to it C-contiguous in that dtype, and
its results come back in it), and ``bind(geometry)``, which returns ``run(x, buffer) -> y`` for
inputs of that geometry. ``buffer`` is a C-contiguous array of the geometry's output shape in
``layer.dtype`` that the layer may write the result into (or None); ``y`` is the
(N, H_out, W_out, C_out) result, in ``buffer`` or not.

Everything else is done once for every backend: parsing and validating the arguments
(:func:`fastdeconv._validate.prepare`), converting x, and honouring ``out=``: the callers
(:func:`fastdeconv._backends.run`, the ``ConvTranspose2d`` layer) pass out= as the buffer when it has
the layer's dtype, and :func:`fastdeconv._validate.finish` casts the result to the result dtype,
drops the batch axis of unbatched calls and copies into out= whatever was not written there.

A new backend is one module that defines such an object plus one line in
:data:`fastdeconv._backends._REGISTRY`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Protocol

import numpy as np

from ._params import ConvGeometry


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

    def status(self) -> BackendStatus: ...

    def prefers(self, call) -> bool: ...

    def layer(self, weight, bias, dtype, geometry: ConvGeometry, algorithm: str | None = None) -> Layer: ...


def no_algorithms(backend: str, algorithm) -> None:
    """``layer()``'s check in a backend without a choice of algorithms."""
    if algorithm is not None:
        raise ValueError(f"algorithm={algorithm!r} selects a CPU algorithm; backend={backend!r} has none to choose")
