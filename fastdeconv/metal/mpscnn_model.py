"""A numpy model of Apple's MPSCNNConvolution and MPSCNNConvolutionTranspose, written from their docs.

This module does not call :func:`fastdeconv.conv_transpose2d`; it implements what Apple documents, so
that tests (and the Metal backend) can check that :func:`fastdeconv.weights.to_mpscnn_transpose` and
:func:`fastdeconv.weights.mpscnn_transpose_params` make MPS compute our transposed convolution.

Sources (Apple, ``MPSCNNConvolution.h`` in MPSNeuralNetwork.framework; the same text is on
https://developer.apple.com/documentation/metalperformanceshaders/mpscnnconvolutiontranspose and
https://developer.apple.com/documentation/metalperformanceshaders/mpscnnconvolutiondescriptor):

* MPSCNNConvolutionTranspose: "When the stride in any dimension is greater than 1, the convolution
  transpose puts (stride - 1) zeroes in-between the source image pixels to create an expanded image. Then a
  convolution is done over the expanded image to generate the output of the convolution transpose.
  Intermediate image size = (srcSize - 1) * Stride + 1"; "MPS uses the weights specified by the developer
  as-is and does not perform any rotation"; "So totalOffset = Offset * stride + kernelOffset" and "The
  offset defined by user refers to the coordinate frame of the expanded image".
* MPSCNNConvolutionDescriptor.kernelWidth: "The position of the left edge of the filter window is given by
  offset.x - (kernelWidth>>1)"; dilationRateX: "kW_Dilated = (kW-1)*dilationRateX + 1 ... The kernel is
  centered based on kW_Dilated".
* Weights: "weight[ outputChannels ][ kernelHeight ][ kernelWidth ][ inputChannels / groups ]";
  MPSCNNConvolutionDescriptor.groups: "ith group in input is only connected to ith group in output".
* MPSCNNKernel: "Where the offset + clipRect would cause a {x,y} pixel address not in the image to be read,
  the edgeMode is used to determine what value to read there"; only MPSImageEdgeModeZero is modelled.
* The convolution is a cross-correlation (MPSCNNBinaryConvolution's doc writes
  ``out[i, x, y, c] = sum_{dx,dy,f} in[i, x+dx, y+dy, f] x B[c, dx, dy, f]``).

With kd = d·(k − 1) + 1, Cig = C_in/groups, Cog = C_out/groups, per axis::

    convolution:            y[oy] = Σ src[offset + oy·s − (kd >> 1) + ky·d] · w[·, ky, ·, ·]
    convolution transpose:  E = src with (s − 1) zeros between pixels, size (H − 1)·s + 1;
                            y[oy] = Σ E[offset·s + kernelOffset + oy − (kd >> 1) + ky·d] · w[·, ky, ·, ·]

summing over ky, kx and the group's input channels (``w[g·Cog + o, ky, kx, i]`` against channel g·Cig + i),
reading 0 outside the image, for every destination pixel 0 <= oy < destination_height; then + bias.
These are Apple's documented semantics, not measurements on hardware.
"""

from __future__ import annotations

import numpy as np

from .._params import kernel_extent

__all__ = ["convolution_transpose", "convolution"]


def _as_batched(x):
    x = np.asarray(x)
    if x.ndim not in (3, 4):
        raise ValueError(f"x must have shape (N, H, W, C) or (H, W, C), got shape {x.shape}")
    return (x[np.newaxis], True) if x.ndim == 3 else (x, False)


def _check_weight(w, x_channels, params, kind):
    w = np.asarray(w)
    if w.ndim != 4:
        raise ValueError(f"{kind} weight must be (C_out, kH, kW, C_in/groups), got shape {w.shape}")
    out_channels, kernel_h, kernel_w, in_per_group = w.shape
    if (kernel_h, kernel_w) != (params.kernel_height, params.kernel_width):
        raise ValueError(f"{kind} weight {w.shape} has kernel {(kernel_h, kernel_w)}, but params say "
                         f"(kernel_height, kernel_width)={(params.kernel_height, params.kernel_width)}")
    if in_per_group * params.groups != x_channels or out_channels % params.groups:
        raise ValueError(f"{kind} weight {w.shape} with groups={params.groups} does not fit x with "
                         f"C_in={x_channels} channels")
    return w


def _correlate_centered(source, w, origin_yx, step_yx, dilation_yx, groups, destination_hw, bias):
    """y[n, oy, ox, g·Cog + o] = bias + Σ source[n, origin_y + oy·step_y − (kdH >> 1) + ky·dH,
    origin_x + ox·step_x − (kdW >> 1) + kx·dW, g·Cig + i] · w[g·Cog + o, ky, kx, i], source zero outside."""
    n, height, width, in_channels = source.shape
    out_channels, kernel_h, kernel_w, in_per_group = w.shape
    out_per_group = out_channels // groups
    dest_h, dest_w = destination_hw
    firsts, pads = [], []
    for size, origin, step, d, k, dest in zip((height, width), origin_yx, step_yx, dilation_yx,
                                              (kernel_h, kernel_w), destination_hw):
        extent = kernel_extent(k, d)
        first = origin - (extent >> 1)                  # top/left edge of the window at oy = 0
        last = first + (dest - 1) * step + extent - 1   # bottom/right-most pixel any tap reads
        before, after = max(0, -first), max(0, last - (size - 1))
        firsts.append(first + before)
        pads.append((before, after))
    padded = np.pad(source.astype(np.float64), ((0, 0), pads[0], pads[1], (0, 0)))  # edgeMode zero
    padded = padded.reshape(*padded.shape[:3], groups, in_per_group)
    weights = w.astype(np.float64).reshape(groups, out_per_group, kernel_h, kernel_w, in_per_group)
    y = np.zeros((n, dest_h, dest_w, groups, out_per_group))
    (top, left), (step_y, step_x), (dil_y, dil_x) = firsts, step_yx, dilation_yx
    for ky in range(kernel_h):
        for kx in range(kernel_w):
            row, col = top + ky * dil_y, left + kx * dil_x
            taps = padded[:, row: row + (dest_h - 1) * step_y + 1: step_y,
                          col: col + (dest_w - 1) * step_x + 1: step_x]
            y += np.einsum("nyxgi,goi->nyxgo", taps, weights[:, :, ky, kx, :])
    y = y.reshape(n, dest_h, dest_w, out_channels)
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float64)
        if bias.shape != (out_channels,):
            raise ValueError(f"bias must have shape (C_out,) = ({out_channels},), got {bias.shape}")
        y = y + bias
    return y


def _check_edge_mode(params):
    if params.edge_mode != "zero":
        raise ValueError(f"only edge_mode='zero' (MPSImageEdgeModeZero) is modelled, got {params.edge_mode!r}")


def convolution_transpose(x, w_mpscnn, params, bias=None) -> np.ndarray:
    """What MPSCNNConvolutionTranspose computes, per Apple's documentation (see the module docstring).

    Parameters
    ----------
    x : (N, H, W, C_in) or (H, W, C_in) array: the source MPSImage(s) in HWC order.
    w_mpscnn : (C_out, kH, kW, C_in/groups): what the MPSCNNConvolutionDataSource returns, used as is
        (no rotation), e.g. :func:`fastdeconv.weights.to_mpscnn_transpose`.
    params : :class:`fastdeconv.weights.MPSCNNTransposeParams` (kernel_offset_x/y, offset_x/y,
        destination size, stride, dilation, groups, edge_mode).
    bias : (C_out,), optional.

    Returns float64 (N, destination_height, destination_width, C_out) (unbatched if x was).
    """
    _check_edge_mode(params)
    x, unbatched = _as_batched(x)
    w = _check_weight(w_mpscnn, x.shape[-1], params, "MPSCNNConvolutionTranspose")
    n, height, width, channels = x.shape
    stride_y, stride_x = params.stride_y, params.stride_x
    expanded = np.zeros((n, (height - 1) * stride_y + 1, (width - 1) * stride_x + 1, channels))
    expanded[:, ::stride_y, ::stride_x] = x                     # (stride - 1) zeros between pixels
    origin = (params.offset_y * stride_y + params.kernel_offset_y,  # totalOffset = Offset*stride + kernelOffset
              params.offset_x * stride_x + params.kernel_offset_x)
    y = _correlate_centered(expanded, w, origin, (1, 1), (params.dilation_y, params.dilation_x), params.groups,
                            (params.destination_height, params.destination_width), bias)
    return y[0] if unbatched else y


def convolution(x, w_ohwi, params, bias=None) -> np.ndarray:
    """What MPSCNNConvolution computes, per Apple's documentation: a centred, strided cross-correlation.

    ``params`` is a :class:`fastdeconv.weights.MPSCNNConvolutionParams` (offset_x/y, destination size,
    stride, dilation, groups); ``w_ohwi`` is (C_out, kH, kW, C_in/groups), used as is. A depthwise
    layer (params.depthwise) has the same arithmetic as groups = C_in with one channel per group.
    Returns float64 (N, destination_height, destination_width, C_out).
    """
    _check_edge_mode(params)
    x, unbatched = _as_batched(x)
    w = _check_weight(w_ohwi, x.shape[-1], params, "MPSCNNConvolution")
    y = _correlate_centered(x, w, (params.offset_y, params.offset_x), (params.stride_y, params.stride_x),
                            (params.dilation_y, params.dilation_x), params.groups,
                            (params.destination_height, params.destination_width), bias)
    return y[0] if unbatched else y
