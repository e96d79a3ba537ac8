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
from ._params import resolve_conv_transpose2d
from ._validate import check_out, finish, prepare, result_buffer

__all__ = ["ConvTranspose2d"]

# A probe input size for validating a layer's parameters before any input is seen: large
# enough that every valid parameter set gives an output of at least one pixel.
_PROBE = 1 << 16


class ConvTranspose2d:
    """A transposed-convolution layer with its weights packed once.

    ``ConvTranspose2d(weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1)``
    takes the arguments of :func:`fastdeconv.conv_transpose2d` (weight (C_in, kH, kW, C_out // groups));
    ``plan(x, output_size=None, out=None)`` returns ``conv_transpose2d(x, weight, bias, ...)``.

    ``algorithm`` forces a CPU algorithm ("phase", "col2im", "depthwise"); by default the layer's
    shape chooses (see ``fastdeconv._cpu_backend.choose_deconv_algorithm``). ``backend`` is "cpu",
    "reference" (the numpy oracle, for checking), or "mps" / "mps-cnn" on macOS, which keep the
    weights and the compiled graph or kernels on the GPU across calls. Calls are thread-safe.
    """

    def __init__(self, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1, *,
                 algorithm=None, backend="cpu"):
        self._kwargs = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation,
                            groups=groups)
        probe = prepare(np.empty((0, _PROBE, _PROBE, np.shape(weight)[0] if np.ndim(weight) == 4 else 0),
                                 dtype=np.float32), weight, bias, None, transposed=True,
                        resolve=lambda xs, ws: resolve_conv_transpose2d(xs, ws, **self._kwargs))
        self.weight = np.array(probe.weight)          # a private copy: later changes to the caller's array
        self.bias = None if probe.bias is None else np.array(probe.bias)   # don't reach the packed layer
        self.geometry = probe.geometry
        self.backend = backend
        self._backend = _backends.get(backend)
        if algorithm is not None and algorithm not in DECONV_ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(DECONV_ALGORITHMS)}, got {algorithm!r}")
        self.algorithm = algorithm or choose_deconv_algorithm(self.geometry)
        self._layers = {}     # compute dtype -> PackedLayer (cpu) or MetalLayer (mps, mps-cnn)
        self._runners = {}    # (geometry, compute dtype, threads) -> _cpu.Runner
        self._geometries = {}  # (x shape, output_size) -> ConvGeometry
        # (x shape, x dtype, output_size, threads) -> (runner, result shape): calls whose x already has
        # the result dtype, which is also the compute dtype, skip straight to the kernels
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

    def _layer(self, dtype) -> PackedLayer:
        layer = self._layers.get(dtype)
        if layer is None:
            layer = PackedLayer(self.weight.astype(dtype), self.bias, self.geometry, self.algorithm,
                                DECONV_ALGORITHMS)
            with self._lock:
                self._layers[dtype] = layer
        return layer

    def _resolve(self, x_shape, output_size):
        key = (x_shape, output_size)
        geometry = self._geometries.get(key)
        if geometry is None:
            geometry = resolve_conv_transpose2d(x_shape, self.weight.shape, output_size=output_size, **self._kwargs)
            with self._lock:
                self._geometries[key] = geometry
        return geometry

    def __call__(self, x, *, output_size=None, out=None):
        if output_size is not None:
            output_size = tuple(output_size) if not isinstance(output_size, int) else output_size
        if type(x) is np.ndarray and x.flags.c_contiguous:
            ready = self._ready.get((x.shape, x.dtype, output_size, get_num_threads()))
            if ready is not None:   # a shape seen before: validated then, so only out= is left to check
                runner, shape = ready
                if out is None:
                    y = np.empty(shape, x.dtype)
                else:
                    check_out(out, shape, x.dtype, (("x", x), ("weight", self.weight), ("bias", self.bias)))
                    y = out
                runner.run(x, y)
                return y
        call = prepare(x, self.weight, self.bias, out, transposed=True,
                       resolve=lambda xs, ws: self._resolve(xs, output_size))
        if self.backend in ("mps", "mps-cnn"):
            layer = self._layers.get(call.dtype)
            if layer is None:
                layer = self._backend.layer(self.weight, self.bias, call.dtype)
                with self._lock:
                    self._layers[call.dtype] = layer
            return finish(call, layer.run(call.x, call.geometry))
        if self.backend != "cpu":
            return finish(call, self._backend.conv_transpose2d(call))
        dtype = call.compute_dtype
        threads = get_num_threads()
        key = (call.geometry, dtype, threads)
        runner = self._runners.get(key)
        if runner is None:
            runner = self._layer(dtype).runner(call.geometry)
            with self._lock:
                self._runners[key] = runner
        if type(x) is np.ndarray and x.dtype == dtype == call.dtype:
            shape = call.geometry.output_shape[1:] if call.unbatched else call.geometry.output_shape
            self._ready[(x.shape, x.dtype, output_size, threads)] = (runner, shape)
        x = call.x if call.x.dtype == dtype and call.x.flags.c_contiguous else np.ascontiguousarray(call.x, dtype)
        return finish(call, runner.run(x, result_buffer(call)))
