"""The public functions: conv_transpose2d and conv2d over NHWC arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backends import registry
from ._call import check_no_overlap, is_dask, prepare_conv2d, prepare_conv_transpose2d
from ._layers import Conv2d, ConvTranspose2d, _Layer
from ._typing import ArrayLike, IntPair, NDArray, Padding
from ._weight_cache import CACHE

__all__ = ["conv_transpose2d", "conv2d"]


def _cached_layer(kind: type[_Layer], weight: ArrayLike, bias: ArrayLike | None, params: dict[str, Any],
                  algorithm: str | None, backend: str, out: NDArray | None) -> _Layer | None:
    """The layer that runs this call with weights packed once per content (fastdeconv._weight_cache),
    or None for the uncached path (a backend whose ``cache_layers`` is False, as the reference's: the
    oracle shares no machinery with what it checks)."""
    if type(backend) is str and backend in registry.UNCACHED:
        return None
    layer = CACHE.layer(kind, weight, bias, params, algorithm, backend)
    if layer is not None and type(out) is np.ndarray:
        # the layer checks out= against its own copies of the weights; the caller's must not overlap it either
        check_no_overlap(out, (("weight", weight), ("bias", bias)))
    return layer


def _run_cached(layer: _Layer, x: ArrayLike, **kwargs: Any) -> NDArray:
    try:
        result: NDArray = layer(x, **kwargs)   # type: ignore[operator]  # a ConvTranspose2d or Conv2d
        return result
    finally:   # a new layer's first call packed its weights: the cache's size is known now
        if CACHE.untrimmed:
            CACHE.trim()


def conv_transpose2d(x: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: IntPair = 1,
                     padding: Padding = 0, *, output_padding: IntPair = 0, dilation: IntPair = 1, groups: int = 1,
                     output_size: IntPair | None = None, backend: str = "auto", algorithm: str | None = None,
                     out: NDArray | None = None) -> NDArray:
    """Grouped 2-D transposed convolution ("deconvolution") of NHWC data.

    Parameters
    ----------
    x : array_like, shape (N, H, W, C_in) or unbatched (H, W, C_in)
        Any strides; never modified.
    weight : array_like, shape (C_in, kH, kW, C_out // groups)
        The OHWI weight of the forward convolution this operation is the
        adjoint of (MPS's convolution layout). torch's ConvTranspose2d.weight
        (C_in, C_out/g, kH, kW) becomes this with ``.transpose(0, 2, 3, 1)``;
        TF's conv2d_transpose filter (kH, kW, C_out, C_in) with
        ``.transpose(3, 0, 1, 2)`` (groups=1).
    bias : array_like, shape (C_out,), optional
    stride, dilation : int or (h, w), each >= 1
    padding : int, (ph, pw), ((top, bottom), (left, right)), "valid" or "same"
        Rows/columns cropped from the full result. "same" gives H_out = H·sH
        (TF's conv2d_transpose 'SAME'); the extra row/column of an odd total
        is cropped at the bottom/right.
    output_padding : int or (h, w)
        Rows/columns added at the bottom/right; each < max(stride, dilation).
    groups : int
        C_in and C_out are split into ``groups`` independent slices;
        groups = C_in is depthwise, with C_out/groups outputs per input channel.
    output_size : (H_out, W_out), optional
        Chooses output_padding; a ValueError names the reachable range.
    backend : str
        "auto" (the default) or one of :func:`fastdeconv.backends`' names ("cpu", "reference", "mps",
        "mps-cnn").
    algorithm : str, optional
        Forces a CPU algorithm, one of the names :func:`fastdeconv.show_config` lists (it implies
        backend "cpu" under "auto"); a ValueError says why when it cannot run the layer. By default
        the layer's shape chooses.
    out : ndarray, optional
        C-contiguous, of exactly the result's shape and dtype; filled and returned.

    Returns
    -------
    ndarray, shape (N, H_out, W_out, C_out) (or unbatched), dtype
    ``np.result_type(x, weight)`` (float16, float32 or float64; float16 is
    accumulated in float32).

    Notes
    -----
    With Cig = C_in/groups and Cog = C_out/groups::

        y[n, oy, ox, g·Cog + o] = bias[g·Cog + o]
            + Σ x[n, iy, ix, g·Cig + i] · w[g·Cig + i, ky, kx, o]

    over all (iy, ix, ky, kx, i) with oy = iy·sH − pad_top + ky·dH and
    ox = ix·sW − pad_left + kx·dW, and

        H_out = (H − 1)·sH − pad_top − pad_bottom + dH·(kH − 1) + output_padding_h + 1

    (W likewise). Output pixels that no tap reaches hold the bias.
    ``conv_transpose2d(·, W)`` is exactly the adjoint of ``conv2d(·, W)`` with
    the same stride, padding, dilation and groups.

    The weights are packed once per distinct content (numpy arrays) and kept for later calls, up to
    :func:`fastdeconv.set_weight_cache_size` bytes; an array modified in place is packed again.

    See Also
    --------
    ConvTranspose2d : the same operation with its weights packed once.
    conv_transpose2d_output_shape : (H_out, W_out) without computing anything.
    conv2d : the convolution this operation is the adjoint of.

    Examples
    --------
    >>> import numpy as np, fastdeconv
    >>> x = np.arange(4, dtype=np.float32).reshape(1, 2, 2, 1)      # (N, H, W, C_in)
    >>> w = np.ones((1, 2, 2, 1), np.float32)                       # (C_in, kH, kW, C_out)
    >>> y = fastdeconv.conv_transpose2d(x, w, stride=2)             # each pixel becomes a 2x2 block
    >>> y[0, :, :, 0]
    array([[0., 0., 1., 1.],
           [0., 0., 1., 1.],
           [2., 2., 3., 3.],
           [2., 2., 3., 3.]], dtype=float32)

    Grouped, with a bias, and the output size chosen (output_padding follows from it):

    >>> x = np.ones((2, 5, 5, 4), np.float32)
    >>> w = np.ones((4, 3, 3, 2), np.float32)                       # groups=4: 2 outputs per channel
    >>> fastdeconv.conv_transpose2d(x, w, np.zeros(8, np.float32), stride=2, padding=1, groups=4,
    ...                             output_size=(10, 10)).shape
    (2, 10, 10, 8)
    """
    if type(x) is not np.ndarray and is_dask(x):   # a lazy dask array, computed block by block
        from . import dask

        lazy: NDArray = dask.conv_transpose2d(x, weight, bias, stride, padding, output_padding=output_padding,
                                              dilation=dilation, groups=groups, output_size=output_size,
                                              backend=backend, algorithm=algorithm, out=out)   # a dask array
        return lazy
    params = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation, groups=groups)
    layer = _cached_layer(ConvTranspose2d, weight, bias, params, algorithm, backend, out)
    if layer is not None:
        return _run_cached(layer, x, output_size=output_size, out=out)
    call = prepare_conv_transpose2d(x, weight, bias, out, stride, padding, output_padding, dilation, groups,
                                    output_size)
    return registry.run(call, registry.get(backend), algorithm)


def conv2d(x: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: IntPair = 1, padding: Padding = 0,
           *, dilation: IntPair = 1, groups: int = 1, backend: str = "auto", algorithm: str | None = None,
           out: NDArray | None = None) -> NDArray:
    """Grouped 2-D convolution (cross-correlation) of NHWC data.

    Parameters
    ----------
    x : array_like, shape (N, H, W, C_in) or unbatched (H, W, C_in)
        Any strides; never modified.
    weight : array_like, shape (C_out, kH, kW, C_in // groups)
        MPSCNNConvolution's OHWI layout; torch's Conv2d.weight (C_out, C_in/g, kH, kW) becomes this
        with ``.transpose(0, 2, 3, 1)``, TF's HWIO filter with ``.transpose(3, 0, 1, 2)``.
    bias : array_like, shape (C_out,), optional
    stride, padding, dilation, groups, backend, algorithm, out
        As for :func:`conv_transpose2d`; ``padding="same"`` gives H_out = ⌈H / sH⌉ (TF's 'SAME').

    Returns
    -------
    ndarray, shape (N, H_out, W_out, C_out) (or unbatched), dtype ``np.result_type(x, weight)``

    Notes
    -----
    With Cig = C_in/groups and Cog = C_out/groups::

        y[n, oy, ox, g·Cog + o] = bias[g·Cog + o]
            + Σ x[n, oy·sH − pad_top + ky·dH, ox·sW − pad_left + kx·dW, g·Cig + i] · w[g·Cog + o, ky, kx, i]

    with x taken as zero outside the image, and
    ``H_out = ⌊(H + pad_top + pad_bottom − dH·(kH − 1) − 1) / sH⌋ + 1``.
    padding "same" gives H_out = ⌈H / sH⌉ (TF's 'SAME'). ``algorithm`` is None (chosen per
    layer) or one of the convolution names :func:`fastdeconv.show_config` lists. Other arguments,
    and the packed-weight cache, as :func:`conv_transpose2d`.

    See Also
    --------
    Conv2d : the same operation with its weights packed once.
    conv2d_output_shape : (H_out, W_out) without computing anything.

    Examples
    --------
    >>> import numpy as np, fastdeconv
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    >>> w = np.ones((1, 2, 2, 1), np.float32)                       # (C_out, kH, kW, C_in)
    >>> fastdeconv.conv2d(x, w, stride=2)[0, :, :, 0]               # sums of 2x2 blocks
    array([[10., 18.],
           [42., 50.]], dtype=float32)

    The transposed convolution with the same weight is its adjoint: <conv2d(x), y> = <x, conv_transpose2d(y)>.

    >>> y = np.random.default_rng(0).standard_normal((1, 2, 2, 1)).astype(np.float32)
    >>> lhs = np.vdot(fastdeconv.conv2d(x, w, stride=2), y)
    >>> rhs = np.vdot(x, fastdeconv.conv_transpose2d(y, w, stride=2))
    >>> bool(np.isclose(lhs, rhs))
    True
    """
    if type(x) is not np.ndarray and is_dask(x):   # a lazy dask array, computed block by block
        from . import dask

        lazy: NDArray = dask.conv2d(x, weight, bias, stride, padding, dilation=dilation, groups=groups,
                                    backend=backend, algorithm=algorithm, out=out)   # a dask array
        return lazy
    layer = _cached_layer(Conv2d, weight, bias, dict(stride=stride, padding=padding, dilation=dilation, groups=groups),
                          algorithm, backend, out)
    if layer is not None:
        return _run_cached(layer, x, out=out)
    call = prepare_conv2d(x, weight, bias, out, stride, padding, dilation, groups)
    return registry.run(call, registry.get(backend), algorithm)
