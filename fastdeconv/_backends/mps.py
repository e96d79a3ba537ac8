"""backend="mps" (MPSGraph) and backend="mps-cnn" (MPSCNN + fastdeconv's own Metal kernel) behind the
protocol; the engine is :mod:`fastdeconv.metal`."""

from __future__ import annotations

import numpy as np

from .. import metal
from .._params import ConvGeometry
from ..metal.engine import MetalLayer, is_simulated
from .protocol import BackendStatus, no_algorithms

_AUTO_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


class MetalBackend:
    """backend="mps" (path "mps", MPSGraph) or backend="mps-cnn" (path "mps-cnn", MPSCNN)."""

    algorithms = ()
    cache_layers = True

    def __init__(self, path: str):
        self.name = self.path = path

    def status(self):
        if is_simulated():
            return BackendStatus(True, "simulated by the numpy executors (fastdeconv.metal.engine.simulated)")
        return metal.status(self.path)

    def prefers(self, call) -> bool:
        """backend="auto" takes "mps" for float32/float16 calls of at least mps_min_flops() FLOPs when a
        Metal device is there (never "mps-cnn", whose float32 is fp16 inside)."""
        return (self.path == "mps" and call.dtype in _AUTO_DTYPES and call.geometry.flops >= metal.mps_min_flops()
                and metal.status("mps").available)

    def resolve_algorithm(self, algorithm, geometry: ConvGeometry) -> None:
        no_algorithms(self.name, algorithm)

    def layer(self, weight, bias, dtype, geometry: ConvGeometry = None, algorithm=None) -> MetalLayer:
        """A per-layer object that keeps weights and compiled kernels on the GPU across calls (any
        input geometry: ``geometry`` is not needed)."""
        no_algorithms(self.name, algorithm)
        return MetalLayer(self.path, weight, bias, dtype)


MPS = MetalBackend("mps")
MPS_CNN = MetalBackend("mps-cnn")
