"""backend="reference": the plain numpy oracle (:mod:`fastdeconv.reference`) behind the protocol."""

from __future__ import annotations

import numpy as np

from .. import reference
from .._params import ConvGeometry
from .protocol import BackendStatus, no_algorithms


class ReferenceLayer:
    def __init__(self, weight, bias, dtype):
        self.weight, self.bias, self.dtype = weight, bias, np.dtype(dtype)

    def bind(self, geometry: ConvGeometry):
        oracle = reference.conv_transpose2d_geometry if geometry.transposed else reference.conv2d_geometry
        return lambda x, buffer: oracle(x, self.weight, self.bias, geometry)


class ReferenceBackend:
    """fastdeconv.reference: plain numpy, written from the formula (the test oracle)."""

    name = "reference"
    algorithms = ()
    cache_layers = False

    @staticmethod
    def status() -> BackendStatus:
        return BackendStatus(True, "plain numpy oracle (fastdeconv.reference)")

    @staticmethod
    def prefers(call) -> bool:
        return False

    @staticmethod
    def resolve_algorithm(algorithm, geometry: ConvGeometry) -> None:
        no_algorithms("reference", algorithm)

    @staticmethod
    def layer(weight, bias, dtype, geometry, algorithm=None) -> ReferenceLayer:
        no_algorithms("reference", algorithm)
        return ReferenceLayer(weight, bias, dtype)


REFERENCE = ReferenceBackend()
