"""ConvTranspose2d: a transposed-convolution layer whose weights are packed once.

This is the create/setup/run idea of XNNPACK operators and ONNX Runtime
sessions: construction validates the parameters, chooses the algorithm and
packs the weights; each input shape's geometry and run plan are cached; a call
only runs the kernels. Results are exactly those of :func:`conv_transpose2d`.
"""

from __future__ import annotations

import threading

import numpy as np

from . import _backends
from ._cpu import get_num_threads
from ._cpu_backend import DECONV_ALGORITHMS, PackedLayer, choose_deconv_algorithm
from ._params import _explicit_padding, _int_pair, resolve_conv_transpose2d
from ._validate import check_out, finish, prepare, result_buffer

__all__ = ["ConvTranspose2d"]

# Input shapes remembered per layer (geometry, runner, fast path); past this the caches restart,
# so that a stream of ever-new shapes cannot grow them without bound.
_CACHE_SHAPES = 64


def _probe_hw(padding):
    """An input size at which every valid parameter set gives an output of at least one pixel:
    (H − 1)·s + kd − pad_top − pad_bottom >= 1 holds for H = pad_top + pad_bottom + 2."""
    if isinstance(padding, str):
        return 2, 2
    (top, bottom), (left, right) = _explicit_padding(padding)
    return top + bottom + 2, left + right + 2


class ConvTranspose2d:
    """A transposed-convolution layer with its weights packed once.

    ``layer = ConvTranspose2d(weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
    groups=1)`` takes the arguments of :func:`fastdeconv.conv_transpose2d` (weight (C_in, kH, kW,
    C_out // groups)); ``layer(x, output_size=None, out=None)`` returns
    ``conv_transpose2d(x, weight, bias, ..., output_size=output_size, out=out)``.

    ``algorithm`` forces a CPU algorithm ("phase", "col2im", "depthwise"); by default the layer's
    shape chooses (see ``fastdeconv._cpu_backend.choose_deconv_algorithm``). ``backend`` is "cpu",
    "reference" (the numpy oracle, for checking), or "mps" / "mps-cnn" on macOS, which keep the
    weights and the compiled graph or kernels on the GPU across calls. Calls are thread-safe.
    """

    def __init__(self, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1, *,
                 algorithm=None, backend="cpu"):
        self._kwargs = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation,
                            groups=groups)
        c_in = np.shape(weight)[0] if np.ndim(weight) == 4 else 0
        probe = prepare(np.empty((0, *_probe_hw(padding), c_in), dtype=np.float32), weight, bias, None,
                        transposed=True, resolve=lambda xs, ws: resolve_conv_transpose2d(xs, ws, **self._kwargs))
        # Private copies: later changes to the caller's arrays don't reach the layer. The bias keeps
        # its own precision and is cast per result dtype, as conv_transpose2d does.
        self.weight = np.array(probe.weight)
        self.bias = None if bias is None else np.array(bias)
        self.geometry = probe.geometry
        self.backend = backend
        self._backend = _backends.get(backend)
        if algorithm is not None and algorithm not in DECONV_ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(DECONV_ALGORITHMS)}, got {algorithm!r}")
        self.algorithm = algorithm or choose_deconv_algorithm(self.geometry)
        self._layers = {}      # result dtype -> PackedLayer (cpu) or MetalLayer (mps, mps-cnn)
        self._runners = {}     # (geometry, result dtype, threads) -> _cpu.Runner
        self._geometries = {}  # (x shape, output_size) -> ConvGeometry
        # (x shape, x dtype, output_size, threads) -> (runner, result shape) for calls whose x already
        # has the result dtype, which is also the compute dtype: they skip straight to the kernels
        self._ready = {}
        self._lock = threading.Lock()
        if backend == "cpu":
            self._layer(np.result_type(self.weight.dtype, np.float32))
        elif backend in ("mps", "mps-cnn"):
            from .metal.backend import engine

            engine(backend)   # raises RuntimeError with the reason when Metal cannot run here

    def __repr__(self):
        c_in, kh, kw, cog = self.weight.shape
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return (f"ConvTranspose2d(C_in={c_in}, C_out={cog * self.geometry.groups}, kernel=({kh}, {kw}), {args}, "
                f"algorithm={self.algorithm!r}, backend={self.backend!r})")

    def _remember(self, cache: dict, key, value):
        with self._lock:
            if len(cache) >= _CACHE_SHAPES:
                cache.clear()
            cache[key] = value
        return value

    def _layer(self, result_dtype):
        """The packed layer for one result dtype (float16 results are computed in float32 with the
        bias rounded to float16 first, exactly as conv_transpose2d does)."""
        result_dtype = np.dtype(result_dtype)
        layer = self._layers.get(result_dtype)
        if layer is None:
            bias = None if self.bias is None else self.bias.astype(result_dtype)
            if self.backend == "cpu":
                compute = np.dtype(np.float32) if result_dtype == np.float16 else result_dtype
                layer = PackedLayer(self.weight.astype(compute), bias, self.geometry, self.algorithm,
                                    DECONV_ALGORITHMS)
            else:
                layer = self._backend.layer(self.weight, bias, result_dtype)
            layer = self._remember(self._layers, result_dtype, layer)
        return layer

    def _resolve(self, x_shape, output_size):
        geometry = self._geometries.get((x_shape, output_size))
        if geometry is None:
            geometry = resolve_conv_transpose2d(x_shape, self.weight.shape, output_size=output_size, **self._kwargs)
            self._remember(self._geometries, (x_shape, output_size), geometry)
        return geometry

    def __call__(self, x, *, output_size=None, out=None):
        if output_size is not None:
            output_size = _int_pair(output_size, "output_size", 1)
        if type(x) is np.ndarray and x.flags.c_contiguous:
            ready = self._ready.get((x.shape, x.dtype, output_size, get_num_threads()))
            if ready is not None:   # a shape seen before: validated then, so only out= is left to check
                runner, shape = ready
                if out is None:
                    y = np.empty(shape, x.dtype)
                else:
                    check_out(out, shape, x.dtype, (("x", x), ("weight", self.weight), ("bias", self.bias)))
                    y = out
                return runner.run(x, y)
        call = prepare(x, self.weight, self.bias, out, transposed=True,
                       resolve=lambda xs, ws: self._resolve(xs, output_size))
        if self.backend in ("mps", "mps-cnn"):
            return finish(call, self._layer(call.dtype).run(call.x, call.geometry))
        if self.backend != "cpu":
            return finish(call, self._backend.conv_transpose2d(call))
        threads = get_num_threads()
        key = (call.geometry, call.dtype, threads)
        runner = self._runners.get(key)
        if runner is None:
            runner = self._remember(self._runners, key, self._layer(call.dtype).runner(call.geometry))
        if type(x) is np.ndarray and x.dtype == call.dtype == call.compute_dtype:
            self._remember(self._ready, (x.shape, x.dtype, output_size, threads), (runner, call.result_shape))
        y = runner.run(np.ascontiguousarray(call.x, call.compute_dtype), result_buffer(call))
        return finish(call, y)
