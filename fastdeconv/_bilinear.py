"""bilinear_kernel: the transposed-convolution weight of the bilinear-upsampling idiom (FCN, caffe)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._params import is_int

__all__ = ["bilinear_kernel"]

_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def bilinear_kernel(factor: int, channels: int, dtype: npt.DTypeLike = np.float32) -> np.ndarray:
    """The depthwise transposed-convolution weight that upsamples bilinearly by ``factor``.

    The filter of FCN's ``surgery.upsample_filt`` and caffe's ``BilinearFiller``, in
    :func:`conv_transpose2d`'s layout for ``groups=channels``: every channel is upsampled on its
    own with the same kernel.

    Parameters
    ----------
    factor : int
        The integer upsampling factor, >= 1 (1 gives a 1x1 kernel of 1: the identity).
    channels : int
        The number of channels, >= 1; use ``groups=channels``.
    dtype : dtype, optional
        float16, float32 (the default) or float64.

    Returns
    -------
    ndarray, shape (channels, k, k, 1)
        With ``k = 2·factor − factor % 2`` (4 for a factor of 2, 5 for 3, 8 for 4) and, for every
        channel c,

        ``w[c, i, j, 0] = (1 − |i − m| / factor) · (1 − |j − m| / factor)``

        where ``m = (k − 1) / 2`` is the kernel's centre (``factor − 1/2`` for an even factor,
        ``factor − 1`` for an odd one).

    Notes
    -----
    Use it with ``stride=factor``, ``padding=ceil((factor − 1) / 2)`` (``(factor − 1 + 1) // 2``,
    i.e. ``factor // 2``) and ``groups=channels``; the result is then exactly
    ``factor`` times the input's height and width::

        y = conv_transpose2d(x, bilinear_kernel(f, C), stride=f, padding=f // 2, groups=C)

    In the interior this is exactly ``torch.nn.functional.interpolate(mode="bilinear",
    align_corners=False, scale_factor=f)`` (half-pixel centres: output pixel ``o`` samples the input
    at ``s = (o + 1/2) / f − 1/2``). The two differ only at the border: the outermost
    ``factor // 2`` rows and columns on each side, whose ``s`` falls outside the input
    (``s < 0``, or ``s > H − 1``). There ``interpolate`` clamps ``s`` to the edge and repeats the
    edge pixel, while the transposed convolution counts the missing neighbour as zero, so the edge
    pixel is weighted by ``1 − |s − edge|`` < 1 (the border is darker). Dividing by the same
    convolution of an image of ones (1 in the interior, that weight at the border) gives
    ``interpolate``'s result everywhere. A factor of 1 is the identity for both.

    Examples
    --------
    >>> import numpy as np, fastdeconv
    >>> w = fastdeconv.bilinear_kernel(2, channels=1)
    >>> w.shape
    (1, 4, 4, 1)
    >>> w[0, :, :, 0]          # the outer product of (1/4, 3/4, 3/4, 1/4) with itself
    array([[0.0625, 0.1875, 0.1875, 0.0625],
           [0.1875, 0.5625, 0.5625, 0.1875],
           [0.1875, 0.5625, 0.5625, 0.1875],
           [0.0625, 0.1875, 0.1875, 0.0625]], dtype=float32)
    >>> x = np.array([[0, 4], [8, 12]], dtype=np.float32).reshape(1, 2, 2, 1)
    >>> y = fastdeconv.conv_transpose2d(x, w, stride=2, padding=1, groups=1)
    >>> y[0, :, :, 0]          # the inner 2x2 is bilinear; the border rows and columns are darker
    array([[0.  , 0.75, 2.25, 2.25],
           [1.5 , 3.  , 5.  , 4.5 ],
           [4.5 , 7.  , 9.  , 7.5 ],
           [4.5 , 6.75, 8.25, 6.75]], dtype=float32)
    >>> weight = fastdeconv.conv_transpose2d(np.ones_like(x), w, stride=2, padding=1)
    >>> (y / weight)[0, :, :, 0]   # interpolate(scale_factor=2, mode="bilinear", align_corners=False)
    array([[ 0.,  1.,  3.,  4.],
           [ 2.,  3.,  5.,  6.],
           [ 6.,  7.,  9., 10.],
           [ 8.,  9., 11., 12.]], dtype=float32)
    """
    if not is_int(factor) or not is_int(channels):
        raise TypeError(f"factor and channels must be integers, got factor={factor!r}, channels={channels!r}")
    if factor < 1 or channels < 1:
        raise ValueError(f"factor and channels must be >= 1, got factor={factor!r}, channels={channels!r}")
    dtype = np.dtype(dtype)
    if dtype not in _DTYPES:
        raise TypeError(f"dtype must be float16, float32 or float64, got {dtype}")
    factor, channels = int(factor), int(channels)
    size = 2 * factor - factor % 2
    centre = (size - 1) / 2
    taps = 1 - np.abs(np.arange(size, dtype=np.float64) - centre) / factor
    kernel = np.outer(taps, taps).astype(dtype)
    return np.ascontiguousarray(np.broadcast_to(kernel[np.newaxis, :, :, np.newaxis], (channels, size, size, 1)))
