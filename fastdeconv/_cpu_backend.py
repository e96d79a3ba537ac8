"""The CPU backend: chooses an algorithm per layer and runs the C kernels.

Each algorithm has a packing function in the compiled shim ``_cpu`` (weights
prepared once per layer) and a C kernel in its own file in src/; a
``_cpu.Runner`` binds packed weights to one input shape and runs the kernel on
threads. :func:`choose_deconv_algorithm` is the one place that decides which
algorithm a transposed convolution uses.
"""

from __future__ import annotations

import os

import numpy as np

from . import _cpu
from ._params import ConvGeometry
from ._validate import Call, result_buffer

# name -> packing function; the kernels are src/deconv_<name>.template.c and src/conv_im2col.template.c.
DECONV_ALGORITHMS = {
    "col2im": _cpu.pack_deconv_col2im,     # GEMM into a column buffer, then scatter-add (the general baseline)
    "phase": _cpu.pack_deconv_phase,       # one dense GEMM per stride phase, output written once
    "depthwise": _cpu.pack_deconv_depthwise,  # direct kernel over channels, for one input channel per group
}
CONV_ALGORITHMS = {"im2col": _cpu.pack_conv_im2col}

ALGORITHM_ENV = "FASTDECONV_ALGORITHM"


# The phase kernel packs groups·sH·sW sub-kernels and both phase kernels keep (stride, kernel)
# tap tables: beyond these sizes col2im, which needs neither, runs the layer.
MAX_PHASE_STRIDE = {"phase": 32, "depthwise": 4096}


def supports(algorithm: str, geometry: ConvGeometry) -> bool:
    """Whether an algorithm can run this layer: depthwise needs one input channel per group, and
    the phase kernels bound the kernel size and the stride."""
    if algorithm not in MAX_PHASE_STRIDE:   # col2im, im2col: any layer
        return True
    if max(geometry.kernel_hw) > _cpu.MAX_PHASE_TAPS or max(geometry.stride) > MAX_PHASE_STRIDE[algorithm]:
        return False
    return algorithm != "depthwise" or geometry.in_per_group == 1


def choose_deconv_algorithm(geometry: ConvGeometry) -> str:
    """The algorithm for a transposed convolution layer.

    $FASTDECONV_ALGORITHM forces one (for tests and benchmarks). Otherwise:

    * one input channel per group (depthwise, with any channel multiplier): "depthwise". A GEMM
      would have K = taps and N = C_out/groups, far too small; the direct kernel is bound by memory.
    * few outputs per group (C_out/groups < 8) with a wider kernel: "col2im". The phase GEMM's
      N = C_out/groups would fill a fraction of a SIMD register; col2im's N = kH·kW·C_out/groups
      keeps the GEMM efficient, and the scatter-add is cheap when C_out is small (dcgan4).
    * everything else: "phase".
    * a choice that cannot run the layer (huge kernels or strides, see :func:`supports`): "col2im". Stride-phase decomposition multiplies no inserted zeros and writes
      every output once (no column buffer, no zero fill, no scatter-add).
    """
    forced = os.environ.get(ALGORITHM_ENV)
    if forced:
        if forced not in DECONV_ALGORITHMS:
            raise ValueError(f"{ALGORITHM_ENV}={forced!r} is not one of {sorted(DECONV_ALGORITHMS)}")
        if supports(forced, geometry):
            return forced
    kh, kw = geometry.kernel_hw
    if geometry.in_per_group == 1:
        choice = "depthwise"
    elif geometry.out_per_group < 8 and kh * kw * geometry.out_per_group >= 16:
        choice = "col2im"
    else:
        choice = "phase"
    return choice if supports(choice, geometry) else "col2im"


class PackedLayer:
    """One layer's weights packed for one algorithm and dtype; runs any input shape."""

    def __init__(self, weight: np.ndarray, bias, geometry: ConvGeometry, algorithm: str, table):
        if algorithm not in table:
            raise ValueError(f"algorithm must be one of {sorted(table)}, got {algorithm!r}")
        if not supports(algorithm, geometry):
            raise ValueError(f"algorithm {algorithm!r} cannot run this layer (C_in={geometry.in_channels}, "
                             f"groups={geometry.groups}, kernel={geometry.kernel_hw}, stride={geometry.stride}); "
                             "see fastdeconv._cpu_backend.supports")
        self.algorithm = algorithm
        self.dtype = weight.dtype
        self.packed = table[algorithm](np.ascontiguousarray(weight), geometry)
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=self.dtype)

    def runner(self, geometry: ConvGeometry) -> _cpu.Runner:
        return _cpu.Runner(self.algorithm, self.packed, self.bias, geometry, self.dtype)


def _run(call: Call, algorithm: str, table) -> np.ndarray:
    dtype = call.compute_dtype
    layer = PackedLayer(np.asarray(call.weight, dtype=dtype), call.bias, call.geometry, algorithm, table)
    y = result_buffer(call)
    return layer.runner(call.geometry).run(np.ascontiguousarray(call.x, dtype=dtype), y)


class CpuBackend:
    name = "cpu"

    @staticmethod
    def conv_transpose2d(call: Call) -> np.ndarray:
        return _run(call, choose_deconv_algorithm(call.geometry), DECONV_ALGORITHMS)

    @staticmethod
    def conv2d(call: Call) -> np.ndarray:
        return _run(call, "im2col", CONV_ALGORITHMS)
