"""The per-layer Metal state and the engine that runs it.

:class:`MetalLayer` builds the descriptor (:mod:`.descriptors`) for each input geometry and dtype and
runs it on an *engine*: :mod:`.pyobjc_layer` on a Mac, or, inside :func:`simulated` (for tests),
:mod:`.executors`. Both engines offer ``resident(array)``, ``GraphRunner(descriptor).run(source,
weights, bias)`` and ``CnnRunner(descriptor, weights, bias).run(x)``. A layer uploads its weights
once and keeps one compiled graph or MPSCNN kernel per input geometry; compiled MPSGraphs are also
shared across layers by descriptor (:func:`graph_runner`), so the function API's per-call layers
reuse them.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .._cache import BoundedCache
from .._params import ConvGeometry
from . import status
from .descriptors import (
    CnnDescriptor,
    GraphDescriptor,
    check_dtype,
    cnn_bias,
    cnn_descriptor,
    cnn_weights,
    graph_bias,
    graph_descriptor,
    graph_weights,
)

_simulated = 0
#: Compiled MPSGraphs kept (shared by every layer), and compiled MPSCNN kernels per layer.
GRAPH_CACHE_SIZE = 64
_graph_cache = BoundedCache(GRAPH_CACHE_SIZE)


@contextlib.contextmanager
def simulated():
    """Inside the block, backend="mps"/"mps-cnn" run every descriptor through the numpy executors
    instead of Metal (and regardless of :func:`fastdeconv.metal.status`). For tests; nothing touches
    Metal."""
    global _simulated
    _simulated += 1
    try:
        yield
    finally:
        _simulated -= 1


def is_simulated() -> bool:
    """Whether a :func:`simulated` block is open."""
    return _simulated > 0


def engine(path: str):
    """The engine for ``path``: the numpy executors when simulated, else the PyObjC layer — or a
    RuntimeError saying why Metal is unavailable (never a silent fallback)."""
    if _simulated:
        from . import executors

        return executors
    state = status(path)
    if not state.available:
        raise RuntimeError(f"backend={path!r} is not available: {state.reason}")
    from . import pyobjc_layer

    return pyobjc_layer


def graph_runner(eng, descriptor: GraphDescriptor):
    """A compiled MPSGraph for ``descriptor``, shared by every call with the same descriptor (LRU of 64)."""
    # compiled outside the cache's lock; a race compiles twice, harmlessly
    return _graph_cache.get_or_make((eng.__name__, descriptor), lambda: eng.GraphRunner(descriptor))


class MetalLayer:
    """One layer's weights and bias on the GPU, for any input size.

    ``weight`` is fastdeconv's layout (transposed: (C_in, kH, kW, C_out/g); convolution:
    (C_out, kH, kW, C_in/g)); ``dtype`` float32 or float16 is the layer's compute/storage dtype.
    ``run(x, geometry)`` returns the (N, H_out, W_out, C_out) result in ``dtype``.
    """

    def __init__(self, path: str, weight, bias, dtype):
        if path not in ("mps", "mps-cnn"):
            raise ValueError(f"path must be 'mps' or 'mps-cnn', got {path!r}")
        self.path = path
        self.dtype = check_dtype(dtype)
        self.weight = np.asarray(weight)
        self.bias = None if bias is None else np.asarray(bias)
        self._engine = engine(path)
        self._graph_inputs = None          # (resident weights, resident bias), uploaded on first use
        # descriptor -> CnnRunner (weights baked into the MPSCNN kernel)
        self._cnn_runners = BoundedCache(GRAPH_CACHE_SIZE)

    def descriptor(self, geometry: ConvGeometry) -> GraphDescriptor | CnnDescriptor:
        if self.path == "mps":
            return graph_descriptor(geometry, self.dtype, self.bias is not None)
        return cnn_descriptor(geometry, self.dtype, self.bias is not None)

    def bind(self, geometry: ConvGeometry):
        """run(x, buffer) for inputs of this geometry (the protocol's; the result is a new array)."""
        return lambda x, buffer: self.run(x, geometry)

    def run(self, x, geometry: ConvGeometry) -> np.ndarray:
        if min(geometry.output_shape) == 0 or min(geometry.input_shape) == 0:   # empty batch: nothing to send
            y = np.zeros(geometry.output_shape, dtype=self.dtype)
            return y if self.bias is None else y + self.bias.astype(self.dtype)
        descriptor = self.descriptor(geometry)
        x = np.ascontiguousarray(x, dtype=self.dtype)
        eng = self._engine
        if isinstance(descriptor, GraphDescriptor):
            if self._graph_inputs is None:
                self._graph_inputs = (eng.resident(graph_weights(self.weight, self.dtype)),
                                      eng.resident(graph_bias(self.bias, geometry.out_channels, self.dtype)))
            return graph_runner(eng, descriptor).run(x, *self._graph_inputs)
        runner = self._cnn_runners.get_or_make(descriptor, lambda: eng.CnnRunner(
            descriptor, cnn_weights(descriptor, self.weight, geometry.groups),
            cnn_bias(descriptor, self.bias, geometry.out_channels)))
        return runner.run(x)


