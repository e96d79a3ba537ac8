"""The public functions: conv_transpose2d and conv2d over NHWC arrays."""

from __future__ import annotations

from . import _backends
from ._params import resolve_conv2d, resolve_conv_transpose2d
from ._validate import prepare

__all__ = ["conv_transpose2d", "conv2d"]


def _is_dask(x) -> bool:
    """x is a dask collection (tested by its type's module: numpy calls never import dask)."""
    return type(x).__module__.startswith("dask.")


def _dask():
    """fastdeconv.dask, imported on the first dask array (an ImportError naming the extra without dask)."""
    from . import dask

    return dask


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1, *,
                     output_size=None, backend="auto", algorithm=None, out=None):
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
    backend : "auto", "cpu", "reference", "mps" or "mps-cnn"
    algorithm : "phase", "col2im" or "depthwise", optional
        Forces a CPU algorithm (implies backend "cpu" under "auto"); a ValueError says why when it
        cannot run the layer. By default the layer's shape chooses.
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
    """
    if _is_dask(x):   # a dask array: a lazy dask array, computed block by block (fastdeconv.dask)
        return _dask().conv_transpose2d(x, weight, bias, stride, padding, output_padding, dilation, groups,
                                        output_size=output_size, backend=backend, algorithm=algorithm, out=out)
    call = prepare(x, weight, bias, out, transposed=True, resolve=lambda xs, ws: resolve_conv_transpose2d(
        xs, ws, stride, padding, output_padding, dilation, groups, output_size))
    return _backends.run(call, _backends.get(backend), algorithm)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, backend="auto", algorithm=None,
           out=None):
    """Grouped 2-D convolution (cross-correlation) of NHWC data.

    ``weight`` has shape (C_out, kH, kW, C_in // groups): MPSCNNConvolution's
    OHWI layout. With Cig = C_in/groups and Cog = C_out/groups::

        y[n, oy, ox, g·Cog + o] = bias[g·Cog + o]
            + Σ x[n, oy·sH − pad_top + ky·dH, ox·sW − pad_left + kx·dW, g·Cig + i] · w[g·Cog + o, ky, kx, i]

    with x taken as zero outside the image, and
    ``H_out = ⌊(H + pad_top + pad_bottom − dH·(kH − 1) − 1) / sH⌋ + 1``.
    padding "same" gives H_out = ⌈H / sH⌉ (TF's 'SAME'). ``algorithm`` is "im2col"
    (the CPU's only one today) or None. Other arguments as :func:`conv_transpose2d`.
    """
    if _is_dask(x):   # a dask array: a lazy dask array, computed block by block (fastdeconv.dask)
        return _dask().conv2d(x, weight, bias, stride, padding, dilation, groups, backend=backend,
                              algorithm=algorithm, out=out)
    call = prepare(x, weight, bias, out, transposed=False, resolve=lambda xs, ws: resolve_conv2d(
        xs, ws, stride, padding, dilation, groups))
    return _backends.run(call, _backends.get(backend), algorithm)
