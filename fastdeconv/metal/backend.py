"""The backend objects behind backend="mps" / "mps-cnn", and the per-layer Metal state.

A backend receives a :class:`fastdeconv._validate.Call`, builds the descriptor (:mod:`.descriptors`)
for its geometry and dtype, and runs it on an *engine*: :mod:`.pyobjc_layer` on a Mac, or — inside
:func:`simulated`, for tests — :mod:`.executors`. Both engines offer ``resident(array)``,
``GraphRunner(descriptor).run(source, weights, bias)`` and
``CnnRunner(descriptor, weights, bias).run(x)``.

:class:`MetalLayer` is the cached per-layer object (for ``ConvTranspose2d(..., backend="mps")``):
weights converted and uploaded once, one compiled graph / MPSCNN kernel per input geometry.
The functional API builds a throw-away layer per call, but compiled MPSGraphs are cached across
calls keyed by the descriptor (shapes, parameters, dtype), see :func:`graph_runner`.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict

import numpy as np

from .. import metal
from .._params import ConvGeometry
from .._protocol import BackendStatus, no_algorithms
from .._validate import Call
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
GRAPH_CACHE_SIZE = 64
_graph_cache: OrderedDict = OrderedDict()
_graph_cache_lock = threading.Lock()


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
    key = (eng.__name__, descriptor)
    with _graph_cache_lock:   # calls from several threads share the cache
        runner = _graph_cache.get(key)
        if runner is not None:
            _graph_cache.move_to_end(key)
            return runner
    runner = eng.GraphRunner(descriptor)   # compiled outside the lock; a race compiles twice, harmlessly
    with _graph_cache_lock:
        _graph_cache[key] = runner
        if len(_graph_cache) > GRAPH_CACHE_SIZE:
            _graph_cache.popitem(last=False)
    return runner


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
        self._cnn_runners = {}             # descriptor -> CnnRunner (weights baked into the MPSCNN kernel)

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
        runner = self._cnn_runners.get(descriptor)
        if runner is None:
            runner = eng.CnnRunner(descriptor, cnn_weights(descriptor, self.weight, geometry.groups),
                                   cnn_bias(descriptor, self.bias, geometry.out_channels))
            self._cnn_runners[descriptor] = runner
        return runner.run(x)


_AUTO_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


class MetalBackend:
    """backend="mps" (path "mps", MPSGraph) or backend="mps-cnn" (path "mps-cnn", MPSCNN); the
    protocol is :mod:`fastdeconv._protocol`."""

    def __init__(self, path: str):
        self.name = self.path = path

    def status(self):
        if _simulated:
            return BackendStatus(True, "simulated by the numpy executors (fastdeconv.metal.backend.simulated)")
        return status(self.path)

    def prefers(self, call: Call) -> bool:
        """backend="auto" takes "mps" for float32/float16 calls of at least mps_min_flops() FLOPs when a
        Metal device is there (never "mps-cnn", whose float32 is fp16 inside)."""
        return (self.path == "mps" and call.dtype in _AUTO_DTYPES and call.geometry.flops >= metal.mps_min_flops()
                and metal.status("mps").available)

    def layer(self, weight, bias, dtype, geometry: ConvGeometry = None, algorithm=None) -> MetalLayer:
        """A per-layer object that keeps weights and compiled kernels on the GPU across calls (any
        input geometry: ``geometry`` is not needed)."""
        no_algorithms(self.name, algorithm)
        return MetalLayer(self.path, weight, bias, dtype)


MPS = MetalBackend("mps")
MPS_CNN = MetalBackend("mps-cnn")
