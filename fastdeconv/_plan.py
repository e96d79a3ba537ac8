"""ConvTranspose2d: a transposed-convolution layer whose weights are packed once.

This is the create/setup/run idea of XNNPACK operators and ONNX Runtime
sessions: construction validates the parameters, chooses the algorithm and
packs the weights; each input shape's geometry and run plan are cached; a call
only runs the kernels. Results are exactly those of :func:`conv_transpose2d`.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from . import _backends
from ._api import _dask, _is_dask
from ._cpu import get_num_threads
from ._params import _explicit_padding, _int_pair, kernel_extent, resolve_conv_transpose2d
from ._validate import check_out, finish, prepare

__all__ = ["ConvTranspose2d"]

# Input shapes remembered per layer (geometry, fast path); past this the caches restart, so that a
# stream of ever-new shapes cannot grow them without bound.
_CACHE_SHAPES = 64


def _probe_hw(kernel_hw, stride, padding, dilation):
    """The smallest input size with an output of at least one pixel, per axis:
    (H − 1)·s + kd − pad_begin − pad_end >= 1 (output_padding only adds), so
    H = 1 + max(0, ⌈(pad_begin + pad_end + 1 − kd) / s⌉). "same" and "valid" need H = 1."""
    if isinstance(padding, str) or len(kernel_hw) != 2:
        return 1, 1
    stride, dilation = _int_pair(stride, "stride", 1), _int_pair(dilation, "dilation", 1)
    return tuple(1 + max(0, -(-(p0 + p1 + 1 - kernel_extent(k, d)) // s))
                 for k, s, d, (p0, p1) in zip(kernel_hw, stride, dilation, _explicit_padding(padding)))


class ConvTranspose2d:
    """A transposed-convolution layer with its weights prepared once.

    ``layer = ConvTranspose2d(weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
    groups=1)`` takes the arguments of :func:`fastdeconv.conv_transpose2d` (weight (C_in, kH, kW,
    C_out // groups)); ``layer(x, output_size=None, out=None)`` returns
    ``conv_transpose2d(x, weight, bias, ..., output_size=output_size, out=out)``.

    ``algorithm`` forces a CPU algorithm ("phase", "col2im", "depthwise"; ValueError if it cannot
    run the layer); by default the layer's shape chooses (``fastdeconv._cpu_backend.choose_algorithm``).
    ``backend`` is "cpu", "reference" (the numpy oracle, for checking), "auto" (decided per call, as
    the function does), or "mps" / "mps-cnn" on macOS, which keep the weights and the compiled graph
    or kernels on the GPU across calls. Calls are thread-safe.
    """

    def __init__(self, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1, *,
                 algorithm=None, backend="cpu"):
        self._kwargs = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation,
                            groups=groups)
        c_in = np.shape(weight)[0] if np.ndim(weight) == 4 else 0
        # an empty input whose geometry stands for the layer's (only its shape is resolved: the probe
        # size may be too large for an array)
        probe = prepare(np.empty((0, 1, 1, c_in), dtype=np.float32), weight, bias, None, transposed=True,
                        resolve=lambda xs, ws: resolve_conv_transpose2d(
                            (0, *_probe_hw(ws[1:3], stride, padding, dilation), xs[-1]), ws, **self._kwargs))
        # Private copies: later changes to the caller's arrays don't reach the layer. The bias keeps
        # its own precision and is cast per result dtype, as conv_transpose2d does.
        self.weight = np.array(probe.weight)
        self.bias = None if bias is None else np.array(bias)
        self.geometry = probe.geometry
        self.backend = backend
        self._backend = _backends.get(backend)
        self.algorithm = algorithm
        self._layers = {}      # (backend name, result dtype) -> the backend's layer
        self._geometries = {}  # (x shape, output_size) -> ConvGeometry
        # (x shape, x dtype, output_size, threads) -> (bound run, result shape) for calls whose x needs
        # no conversion (it has the result dtype, which is also the layer's): straight to the kernels
        self._ready = {}
        self._lock = threading.Lock()
        if self._backend is not _backends.AutoBackend:
            _backends.require(self._backend)   # RuntimeError with the reason when it cannot run here
            # validates algorithm= and prepares the weights for the default result dtype now
            layer = self._layer(self._backend, np.result_type(self.weight.dtype, np.float32))
            self.algorithm = getattr(layer, "algorithm", algorithm)

    def __reduce__(self):
        # Pickles to its weights, bias and parameters, never to packed data: unpickling (in a worker
        # process, say) builds the layer again there, which validates and packs the weights anew.
        return functools.partial(type(self), **self._kwargs, algorithm=self.algorithm, backend=self.backend), \
            (self.weight, self.bias)

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

    def _layer(self, backend, result_dtype):
        """The backend's layer for one result dtype (the bias rounded to it first, as
        conv_transpose2d does)."""
        key = (backend.name, np.dtype(result_dtype))
        layer = self._layers.get(key)
        if layer is None:
            bias = None if self.bias is None else self.bias.astype(result_dtype)
            layer = self._remember(self._layers, key, backend.layer(self.weight, bias, result_dtype, self.geometry,
                                                                    self.algorithm))
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
        flags = x.flags if type(x) is np.ndarray else None
        # the kernels read and write float* / double*: unaligned x or out= take the general path, which copies
        if flags is not None and flags.c_contiguous and flags.aligned and (out is None or out.flags.aligned):
            ready = self._ready.get((x.shape, x.dtype, output_size, get_num_threads()))
            if ready is not None:   # a shape seen before: validated then, so only out= is left to check
                run, shape = ready
                if out is None:
                    out = np.empty(shape, x.dtype)
                else:
                    check_out(out, shape, x.dtype, (("x", x), ("weight", self.weight), ("bias", self.bias)))
                y = run(x, out)
                if y is not out:   # a backend that returns its own array
                    out[...] = y
                return out
        if _is_dask(x):   # a dask array: a lazy dask array, computed block by block (fastdeconv.dask)
            return _dask().apply_layer(self, x, output_size=output_size, out=out)
        call = prepare(x, self.weight, self.bias, out, transposed=True,
                       resolve=lambda xs, ws: self._resolve(xs, output_size))
        backend = self._backend
        if backend is _backends.AutoBackend:
            backend = backend.choose(call, self.algorithm)
            _backends.require(backend)
        layer = self._layer(backend, call.dtype)
        run = layer.bind(call.geometry)
        # unbatched calls take the general path: the protocol's buffers are 4-D
        if type(x) is np.ndarray and x.dtype == call.dtype == layer.dtype and not call.unbatched:
            self._remember(self._ready, (x.shape, x.dtype, output_size, get_num_threads()),
                           (run, call.result_shape))
        return finish(call, run(np.ascontiguousarray(call.x, layer.dtype), _backends.out_buffer(call, layer)))
