"""Plain-numpy reference implementations: the test oracle.

Written straight from the formulas, one kernel tap at a time, so that they can
be read and checked by eye. They share nothing with the C kernels except the
argument parsing (:mod:`fastdeconv._params`). Sums are accumulated in float64
and the result is cast to the result dtype.

Transposed convolution, with Cig = C_in/groups, Cog = C_out/groups::

    y[n, oy, ox, g·Cog + o] = bias[g·Cog + o]
        + Σ x[n, iy, ix, g·Cig + i] · w[g·Cig + i, ky, kx, o]
    over all (iy, ix, ky, kx, i) with oy = iy·sH − pad_top + ky·dH,
                                       ox = ix·sW − pad_left + kx·dW.

Convolution (its adjoint), weight (C_out, kH, kW, Cig)::

    y[n, oy, ox, g·Cog + o] = bias[g·Cog + o]
        + Σ x[n, oy·sH − pad_top + ky·dH, ox·sW − pad_left + kx·dW, g·Cig + i] · w[g·Cog + o, ky, kx, i]
    with x taken as zero outside the image.
"""

from __future__ import annotations

import numpy as np

from ._call import finish, prepare_conv2d, prepare_conv_transpose2d
from ._params import ConvGeometry

__all__ = ["conv_transpose2d", "conv2d", "conv_transpose2d_geometry", "conv2d_geometry"]


def conv_transpose2d_geometry(x: np.ndarray, w: np.ndarray, bias, geometry: ConvGeometry) -> np.ndarray:
    """The transposed convolution for 4-D float arrays and a resolved geometry, in float64."""
    n, (h, wd), cin, cout = geometry.batch, geometry.input_hw, geometry.in_channels, geometry.out_channels
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_hw, geometry.stride, geometry.dilation
    (pt, _), (pl, _) = geometry.pad
    ho, wo = geometry.output_hw
    g, cig, cog = geometry.groups, geometry.in_per_group, geometry.out_per_group
    x = x.astype(np.float64).reshape(n, h, wd, g, cig)
    w = w.astype(np.float64).reshape(g, cig, kh, kw, cog)
    # A canvas that holds every oy + pad_top the formula can produce, then a crop.
    canvas = np.zeros((n, max(pt + ho, (h - 1) * sh + (kh - 1) * dh + 1),
                       max(pl + wo, (wd - 1) * sw + (kw - 1) * dw + 1), g, cog))
    for ky in range(kh):
        for kx in range(kw):
            # contribution[n, iy, ix, g, o] = Σ_i x[n, iy, ix, g, i] · w[g, i, ky, kx, o]
            contribution = np.einsum("nyxgi,gio->nyxgo", x, w[:, :, ky, kx, :])
            canvas[:, ky * dh: ky * dh + (h - 1) * sh + 1: sh,
                   kx * dw: kx * dw + (wd - 1) * sw + 1: sw] += contribution
    y = canvas[:, pt: pt + ho, pl: pl + wo].reshape(n, ho, wo, cout)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y


def conv2d_geometry(x: np.ndarray, w: np.ndarray, bias, geometry: ConvGeometry) -> np.ndarray:
    """The convolution for 4-D float arrays and a resolved geometry, in float64."""
    n, (h, wd), cout = geometry.batch, geometry.input_hw, geometry.out_channels
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_hw, geometry.stride, geometry.dilation
    (pt, pb), (pl, pr) = geometry.pad
    ho, wo = geometry.output_hw
    g, cig, cog = geometry.groups, geometry.in_per_group, geometry.out_per_group
    padded = np.zeros((n, h + pt + pb, wd + pl + pr, g, cig))
    padded[:, pt: pt + h, pl: pl + wd] = x.astype(np.float64).reshape(n, h, wd, g, cig)
    w = w.astype(np.float64).reshape(g, cog, kh, kw, cig)
    y = np.zeros((n, ho, wo, g, cog))
    for ky in range(kh):
        for kx in range(kw):
            taps = padded[:, ky * dh: ky * dh + (ho - 1) * sh + 1: sh, kx * dw: kx * dw + (wo - 1) * sw + 1: sw]
            y += np.einsum("nyxgi,goi->nyxgo", taps, w[:, :, ky, kx, :])
    y = y.reshape(n, ho, wo, cout)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, *, output_padding=0, dilation=1, groups=1,
                     output_size=None, out=None):
    """Reference transposed convolution; same contract as :func:`fastdeconv.conv_transpose2d`.

    A plain-numpy implementation written from the formula (computed in float64), the oracle the tests
    check every fast path against; ``backend="reference"`` runs it too.

    Examples
    --------
    >>> import numpy as np, fastdeconv
    >>> rng = np.random.default_rng(0)
    >>> x, w = rng.standard_normal((1, 6, 6, 4)), rng.standard_normal((4, 4, 4, 3))
    >>> expected = fastdeconv.reference.conv_transpose2d(x, w, stride=2, padding=1)
    >>> bool(np.allclose(fastdeconv.conv_transpose2d(x, w, stride=2, padding=1), expected))
    True
    """
    call = prepare_conv_transpose2d(x, weight, bias, out, stride, padding, output_padding, dilation, groups,
                                    output_size)
    y = conv_transpose2d_geometry(call.x, call.weight, call.bias, call.geometry)
    return finish(call, y)


def conv2d(x, weight, bias=None, stride=1, padding=0, *, dilation=1, groups=1, out=None):
    """Reference convolution; same contract as :func:`fastdeconv.conv2d`.

    Examples
    --------
    >>> import numpy as np, fastdeconv
    >>> rng = np.random.default_rng(0)
    >>> x, w = rng.standard_normal((1, 8, 8, 4)), rng.standard_normal((6, 3, 3, 2))
    >>> expected = fastdeconv.reference.conv2d(x, w, padding=1, groups=2)
    >>> bool(np.allclose(fastdeconv.conv2d(x, w, padding=1, groups=2), expected))
    True
    """
    call = prepare_conv2d(x, weight, bias, out, stride, padding, dilation, groups)
    y = conv2d_geometry(call.x, call.weight, call.bias, call.geometry)
    return finish(call, y)
