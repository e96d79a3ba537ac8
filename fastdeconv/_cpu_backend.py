"""The CPU backend: chooses an algorithm per shape and runs the C kernels.

Every algorithm is a pair (pack, run) over the compiled shim ``_cpu``:
``pack(weight, geometry)`` prepares the weights once, ``run(x, packed, bias,
geometry, y)`` fills y. :func:`choose_deconv_algorithm` is the one place that
decides which algorithm a transposed convolution uses.
"""

from __future__ import annotations

import os

import numpy as np

from . import _cpu
from ._params import ConvGeometry
from ._validate import Call, result_buffer

# name -> (pack, run). Each algorithm lives in its own file in src/.
DECONV_ALGORITHMS = {
    "col2im": (_cpu.pack_deconv_col2im, _cpu.deconv_col2im),   # src/deconv_col2im.template.c
    "phase": (_cpu.pack_deconv_phase, _cpu.deconv_phase),      # src/deconv_phase.template.c
    "depthwise": (_cpu.pack_deconv_depthwise, _cpu.deconv_depthwise),  # src/deconv_depthwise.template.c
}
CONV_ALGORITHMS = {
    "im2col": (_cpu.pack_conv_im2col, _cpu.conv_im2col),       # src/conv_im2col.template.c
}

ALGORITHM_ENV = "FASTDECONV_ALGORITHM"


def choose_deconv_algorithm(geometry: ConvGeometry) -> str:
    """The algorithm for a transposed convolution: forced by $FASTDECONV_ALGORITHM, else by shape."""
    forced = os.environ.get(ALGORITHM_ENV)
    if forced:
        if forced not in DECONV_ALGORITHMS:
            raise ValueError(f"{ALGORITHM_ENV}={forced!r} is not one of {sorted(DECONV_ALGORITHMS)}")
        return forced
    return "col2im"


class PackedDeconv:
    """Weights packed once for one algorithm; runs any input size with the same parameters."""

    def __init__(self, weight: np.ndarray, bias, geometry: ConvGeometry, algorithm: str | None = None,
                 table=DECONV_ALGORITHMS, choose=choose_deconv_algorithm):
        self.algorithm = algorithm or choose(geometry)
        if self.algorithm not in table:
            raise ValueError(f"algorithm must be one of {sorted(table)}, got {self.algorithm!r}")
        pack, self._run = table[self.algorithm]
        self.dtype = weight.dtype
        self.packed = pack(np.ascontiguousarray(weight), geometry)
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=self.dtype)

    def run(self, x: np.ndarray, geometry: ConvGeometry, y: np.ndarray) -> np.ndarray:
        """x: (N, H, W, C_in) in self.dtype, C-contiguous; y: the C-contiguous result buffer."""
        if geometry.batch == 0:
            return y
        self._run(x, self.packed, self.bias, geometry, y)
        return y


def _run(call: Call, table, choose) -> np.ndarray:
    dtype = call.compute_dtype
    plan = PackedDeconv(np.asarray(call.weight, dtype=dtype), call.bias, call.geometry, table=table, choose=choose)
    x = np.ascontiguousarray(call.x, dtype=dtype)
    return plan.run(x, call.geometry, result_buffer(call))


class CpuBackend:
    name = "cpu"

    @staticmethod
    def conv_transpose2d(call: Call) -> np.ndarray:
        return _run(call, DECONV_ALGORITHMS, choose_deconv_algorithm)

    @staticmethod
    def conv2d(call: Call) -> np.ndarray:
        return _run(call, CONV_ALGORITHMS, lambda geometry: "im2col")
