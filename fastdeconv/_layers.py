"""ConvTranspose2d and Conv2d: layers whose weights are packed once.

This is the create/setup/run idea of XNNPACK operators and ONNX Runtime
sessions: construction validates the parameters, chooses the algorithm and
packs the weights; each input shape's geometry and run plan are cached; a call
only runs the kernels. Results are exactly those of :func:`conv_transpose2d`
and :func:`conv2d`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from ._backends import registry
from ._cache import BoundedCache
from ._call import check_out, is_dask, prepare
from ._cpu import empty_result, get_num_threads
from ._params import (FORWARD_WEIGHT_LAYOUT, TRANSPOSED_WEIGHT_LAYOUT, _explicit_padding, _int_pair, _padding_mode,
                      ConvGeometry, is_int, kernel_extent, resolve_conv2d, resolve_conv_transpose2d)
from ._typing import ArrayLike, IntPair, NDArray, Padding

__all__ = ["ConvTranspose2d", "Conv2d"]

#: Input shapes (and result dtypes) a layer remembers: geometries, fast-path runs, backend layers.
CACHE_SHAPES = 64


def _probe_hw(kernel_hw: tuple[int, ...], stride: IntPair, padding: Padding, dilation: IntPair) -> tuple[int, ...]:
    """The smallest input size of a transposed convolution with an output of at least one pixel,
    per axis: (H − 1)·s + kd − pad_begin − pad_end >= 1 (output_padding only adds), so
    H = 1 + max(0, ⌈(pad_begin + pad_end + 1 − kd) / s⌉). "same" and "valid" need H = 1."""
    if isinstance(padding, str) or len(kernel_hw) != 2:
        return 1, 1
    stride, dilation = _int_pair(stride, "stride", 1), _int_pair(dilation, "dilation", 1)
    return tuple(1 + max(0, -(-(p0 + p1 + 1 - kernel_extent(k, d)) // s))
                 for k, s, d, (p0, p1) in zip(kernel_hw, stride, dilation, _explicit_padding(padding)))


def _forward_probe_hw(kernel_hw: tuple[int, ...], stride: IntPair, padding: Padding,
                      dilation: IntPair) -> tuple[int, ...]:
    """The smallest input size of a convolution with an output of at least one pixel, per axis:
    H + pad_begin + pad_end >= kd, so H = max(1, kd − pad_begin − pad_end); "valid" pads nothing,
    "same" needs H = 1."""
    if len(kernel_hw) != 2 or (isinstance(padding, str) and _padding_mode(padding) == "same"):
        return 1, 1
    dilation = _int_pair(dilation, "dilation", 1)
    pads = ((0, 0), (0, 0)) if isinstance(padding, str) else _explicit_padding(padding)
    return tuple(max(1, kernel_extent(k, d) - p0 - p1) for k, d, (p0, p1) in zip(kernel_hw, dilation, pads))


class _Layer:
    """What ConvTranspose2d and Conv2d share: a subclass names its operation (``_transposed``,
    ``_resolve_geometry(x_shape, w_shape, **kwargs)``, ``_probe(kernel_hw, stride, padding,
    dilation)``, the smallest input it accepts, and ``_weight_in_axis``, the weight's axis of input
    channels per group)."""

    _transposed: bool
    _weight_in_axis: int
    _layout: str
    _probe: Callable[[tuple[int, ...], IntPair, Padding, IntPair], tuple[int, ...]]
    _resolve_geometry: Callable[..., ConvGeometry]

    def __new__(cls, *args: Any, **kwargs: Any) -> _Layer:
        # torch.nn's constructors take (in_channels, out_channels, kernel_size, ...) and make weights;
        # said here, before the signature's binding would report "multiple values for argument 'stride'"
        weight = args[0] if args else kwargs.get("weight")
        if is_int(weight):
            given = ", ".join(map(repr, args[:3]))
            raise TypeError(f"{cls.__name__}({given}, ...): fastdeconv's layers take trained weights, not "
                            f"channel counts as torch.nn.{cls.__name__}(in_channels, out_channels, kernel_size) "
                            f"does; pass weight of shape {cls._layout} (from a torch module m: "
                            f"m.weight.detach().numpy().transpose(0, 2, 3, 1)), then m.bias.detach().numpy(), "
                            f"stride=..., padding=...")
        return super().__new__(cls)

    def __init__(self, weight: ArrayLike, bias: ArrayLike | None, kwargs: dict[str, Any], algorithm: str | None,
                 backend: str) -> None:
        self._kwargs = kwargs
        c_in = np.shape(weight)[self._weight_in_axis] if np.ndim(weight) == 4 else 0
        # a convolution's input has groups × the weight's channels (a bad groups is named by resolve)
        groups = int(kwargs["groups"]) if not self._transposed and is_int(kwargs["groups"]) else 1
        probe_hw = self._probe(np.shape(weight)[1:3], kwargs["stride"], kwargs["padding"], kwargs["dilation"])
        # an empty input whose geometry stands for the layer's (only its shape is resolved: the probe
        # size may be too large for an array)
        probe = prepare(np.empty((0, 1, 1, c_in * max(groups, 1)), dtype=np.float32), weight, bias, None,
                        transposed=self._transposed,
                        resolve=lambda xs, ws: self._resolve_geometry((0, *probe_hw, xs[-1]), ws, **kwargs))
        # Private copies: later changes to the caller's arrays don't reach the layer. The bias keeps
        # its own precision and is cast per result dtype, as conv_transpose2d does.
        self.weight = np.array(probe.weight)
        self.bias = None if bias is None else np.array(bias)
        self.geometry = probe.geometry
        self.backend = backend
        self._backend = registry.get(backend)
        self.algorithm = algorithm
        self._layers = BoundedCache(CACHE_SHAPES)      # (backend name, result dtype) -> the backend's layer
        self._geometries = BoundedCache(CACHE_SHAPES)  # (x shape, output_size) -> ConvGeometry
        # (x shape, x dtype, output_size, threads) -> (bound run, result shape) for calls whose x needs
        # no conversion (it has the result dtype, which is also the layer's): straight to the kernels
        self._ready = BoundedCache(CACHE_SHAPES)
        if self._backend is not registry.AutoBackend:
            registry.require(self._backend)  # type: ignore[arg-type]  # not AutoBackend, tested above   # RuntimeError with the reason when it cannot run here
            # validates algorithm= and prepares the weights for the default result dtype now
            layer = self._layer(self._backend, np.result_type(self.weight.dtype, np.float32))
            self.algorithm = getattr(layer, "algorithm", algorithm)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles to its weights, bias and parameters, never to packed data: unpickling (in a worker
        # process, say) builds the layer again there, which validates and packs the weights anew.
        return functools.partial(type(self), **self._kwargs, algorithm=self.algorithm, backend=self.backend), \
            (self.weight, self.bias)

    def __setstate__(self, state: Any) -> None:
        # Reached only by a pickle that __reduce__ did not write (one crafted by hand): a layer is
        # rebuilt from its weights and parameters through __init__, which validates them; the state's
        # caches (geometries, bound runs, packed weights) are never trusted.
        try:
            weight, bias, kwargs = state["weight"], state.get("bias"), dict(state["_kwargs"])
            algorithm, backend = state.get("algorithm"), state.get("backend", "cpu")
        except (TypeError, KeyError, ValueError):
            raise TypeError(f"not the state of a {type(self).__name__}: it needs its weight and _kwargs") from None
        type(self).__init__(self, weight, bias, **kwargs, algorithm=algorithm, backend=backend)

    def __repr__(self) -> str:
        kh, kw = self.weight.shape[1:3]
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return (f"{type(self).__name__}(C_in={self.geometry.in_channels}, C_out={self.geometry.out_channels}, "
                f"kernel=({kh}, {kw}), {args}, algorithm={self.algorithm!r}, backend={self.backend!r})")

    def nbytes(self) -> int:
        """Bytes this layer holds: its copy of the weights and bias, and every packed copy."""
        packed = sum(getattr(layer, "nbytes", 0) for layer in self._layers.values())
        return self.weight.nbytes + (0 if self.bias is None else self.bias.nbytes) + packed

    def _layer(self, backend: Any, result_dtype: Any) -> Any:
        """The backend's layer for one result dtype (the bias rounded to it first, as
        conv_transpose2d does)."""
        def make() -> Any:
            bias = None if self.bias is None else self.bias.astype(result_dtype)
            return backend.layer(self.weight, bias, result_dtype, self.geometry, self.algorithm)

        return self._layers.get_or_make((backend.name, np.dtype(result_dtype)), make)

    def _resolve(self, x_shape: tuple[int, ...], output_size: tuple[int, int] | None) -> ConvGeometry:
        def make() -> ConvGeometry:
            extra = {} if output_size is None else {"output_size": output_size}
            return self._resolve_geometry(x_shape, self.weight.shape, **extra, **self._kwargs)

        geometry: ConvGeometry = self._geometries.get_or_make((x_shape, output_size), make)
        return geometry

    def _run(self, x: Any, output_size: tuple[int, int] | None, out: NDArray | None) -> NDArray:
        flags = x.flags if type(x) is np.ndarray else None
        # the kernels read and write float* / double*: unaligned x or out= take the general path, which copies
        if (flags is not None and flags.c_contiguous and flags.aligned
                and (out is None or (type(out) is np.ndarray and out.flags.aligned))):
            ready = self._ready.peek((x.shape, x.dtype, output_size, get_num_threads()))
            if ready is not None:   # a shape seen before: validated then, so only out= is left to check
                run, shape = ready
                if out is None:
                    out = empty_result(shape, x.dtype)
                else:
                    check_out(out, shape, x.dtype, (("x", x), ("weight", self.weight), ("bias", self.bias)))
                y = run(x, out)
                if y is not out:   # a backend that returns its own array
                    out[...] = y
                return out
        if is_dask(x):   # a lazy dask array, computed block by block
            from . import dask

            lazy: NDArray = dask.apply_layer(self, x, output_size=output_size, out=out)   # a dask array
            return lazy
        call = prepare(x, self.weight, self.bias, out, transposed=self._transposed, check_layout=False,
                       resolve=lambda xs, ws: self._resolve(xs, output_size))
        backend = registry.choose(call, self._backend, self.algorithm)
        layer = self._layer(backend, call.dtype)
        run = layer.bind(call.geometry)
        # unbatched calls take the general path: the protocol's buffers are 4-D
        if type(x) is np.ndarray and x.dtype == call.dtype == layer.dtype and not call.unbatched:
            self._ready.put((x.shape, x.dtype, output_size, get_num_threads()), (run, call.result_shape))
        return registry.run_layer(call, layer, run)


class ConvTranspose2d(_Layer):
    """A transposed-convolution layer with its weights prepared once.

    ``layer = ConvTranspose2d(weight, bias=None, stride=1, padding=0, *, output_padding=0, dilation=1,
    groups=1)`` takes the arguments of :func:`fastdeconv.conv_transpose2d` (weight (C_in, kH, kW,
    C_out // groups)); ``layer(x, output_size=None, out=None)`` returns
    ``conv_transpose2d(x, weight, bias, ..., output_size=output_size, out=out)``.

    ``algorithm`` forces a CPU algorithm (the names :func:`fastdeconv.show_config` lists; ValueError if
    it cannot run the layer); by default the layer's shape chooses
    (``fastdeconv._backends.cpu.choose_algorithm``).
    ``backend`` is "cpu", "reference" (the numpy oracle, for checking), "auto" (decided per call, as
    the function does), or "mps" / "mps-cnn" on macOS, which keep the weights and the compiled graph
    or kernels on the GPU across calls. Calls are thread-safe. The layer keeps private copies of
    ``weight`` and ``bias``: later changes to the caller's arrays do not reach it.

    Parameters
    ----------
    weight : array_like, shape (C_in, kH, kW, C_out // groups)
    bias : array_like, shape (C_out,), optional
    stride, padding, output_padding, dilation, groups
        As for :func:`fastdeconv.conv_transpose2d`.
    algorithm : str, optional
        A CPU algorithm's name; by default the layer's shape chooses.
    backend : str
        "cpu" (the default), "reference", "auto", "mps" or "mps-cnn".

    Attributes
    ----------
    weight, bias : ndarray
        The layer's own copies.
    algorithm : str or None
        The algorithm the CPU backend runs (chosen at construction).

    Examples
    --------
    >>> import numpy as np, fastdeconv
    >>> w = np.ones((8, 4, 4, 4), np.float32)
    >>> layer = fastdeconv.ConvTranspose2d(w, np.zeros(4, np.float32), stride=2, padding=1)
    >>> x = np.ones((1, 16, 16, 8), np.float32)
    >>> y = layer(x)
    >>> y.shape
    (1, 32, 32, 4)
    >>> layer(x, output_size=(33, 33)).shape                         # output_padding 1
    (1, 33, 33, 4)
    >>> out = np.empty_like(y)
    >>> layer(x, out=out) is out
    True
    >>> bool(np.array_equal(y, fastdeconv.conv_transpose2d(x, w, np.zeros(4, np.float32), stride=2, padding=1)))
    True
    """

    _transposed = True
    _weight_in_axis = 0
    _layout = TRANSPOSED_WEIGHT_LAYOUT
    _probe = staticmethod(_probe_hw)
    _resolve_geometry = staticmethod(resolve_conv_transpose2d)

    def __init__(self, weight: ArrayLike, bias: ArrayLike | None = None, stride: IntPair = 1, padding: Padding = 0, *,
                 output_padding: IntPair = 0, dilation: IntPair = 1, groups: int = 1, algorithm: str | None = None,
                 backend: str = "cpu") -> None:
        super().__init__(weight, bias, dict(stride=stride, padding=padding, output_padding=output_padding,
                                            dilation=dilation, groups=groups), algorithm, backend)

    def __call__(self, x: ArrayLike, *, output_size: IntPair | None = None, out: NDArray | None = None) -> NDArray:
        if output_size is not None:
            output_size = _int_pair(output_size, "output_size", 1)
        return self._run(x, output_size, out)


class Conv2d(_Layer):
    """A convolution layer with its weights prepared once.

    ``layer = Conv2d(weight, bias=None, stride=1, padding=0, *, dilation=1, groups=1)`` takes the
    arguments of :func:`fastdeconv.conv2d` (weight (C_out, kH, kW, C_in // groups), MPSCNN's OHWI);
    ``layer(x, out=None)`` returns ``conv2d(x, weight, bias, ..., out=out)``, with the weights packed
    once (the function packs them on the first call of each weight array's contents, see
    :func:`fastdeconv.set_weight_cache_size`). ``algorithm`` (the convolution names
    :func:`fastdeconv.show_config` lists) and ``backend`` as :class:`ConvTranspose2d`. Calls are
    thread-safe; the layer keeps private copies of its arrays.

    Parameters
    ----------
    weight : array_like, shape (C_out, kH, kW, C_in // groups)
    bias : array_like, shape (C_out,), optional
    stride, padding, dilation, groups, algorithm, backend
        As for :func:`fastdeconv.conv2d` and :class:`ConvTranspose2d`.

    Examples
    --------
    >>> import numpy as np, fastdeconv
    >>> w = np.ones((16, 3, 3, 8), np.float32)                      # (C_out, kH, kW, C_in)
    >>> layer = fastdeconv.Conv2d(w, stride=2, padding=1)
    >>> layer(np.ones((1, 32, 32, 8), np.float32)).shape
    (1, 16, 16, 16)

    A depthwise layer (one input channel per group):

    >>> depthwise = fastdeconv.Conv2d(np.ones((8, 3, 3, 1), np.float32), padding=1, groups=8)
    >>> depthwise.algorithm
    'depthwise'
    """

    _transposed = False
    _weight_in_axis = 3
    _layout = FORWARD_WEIGHT_LAYOUT
    _probe = staticmethod(_forward_probe_hw)
    _resolve_geometry = staticmethod(resolve_conv2d)

    def __init__(self, weight: ArrayLike, bias: ArrayLike | None = None, stride: IntPair = 1, padding: Padding = 0, *,
                 dilation: IntPair = 1, groups: int = 1, algorithm: str | None = None, backend: str = "cpu") -> None:
        super().__init__(weight, bias, dict(stride=stride, padding=padding, dilation=dilation, groups=groups),
                         algorithm, backend)

    def __call__(self, x: ArrayLike, *, out: NDArray | None = None) -> NDArray:
        return self._run(x, None, out)
