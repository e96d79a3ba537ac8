"""The weights and settings that make Apple's MPSCNN convolution kernels compute ours.

MPSCNNConvolutionTranspose differs from every framework: it "uses the weights specified by the developer
as-is and does not perform any rotation" over a zero-inserted image (Apple, MPSCNNConvolution.h,
``MPSCNNConvolutionTranspose``; https://developer.apple.com/documentation/metalperformanceshaders/
mpscnnconvolutiontranspose). :func:`to_mpscnn_transpose` rotates and re-lays the weights and
:func:`mpscnn_transpose_params` gives the offsets and destination size that make it compute exactly
``conv_transpose2d``; :func:`mpscnn_conv_params` does the same for MPSCNNConvolution and ``conv2d``
(the converter's Conv layers). :mod:`fastdeconv.metal.mpscnn_model` is a numpy model of the documented kernels
that checks all of them; the Metal backend relies on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _params
from .layouts import transposed_by_group

__all__ = [
    "to_mpscnn_transpose", "MPSCNNKernelParams", "MPSCNNTransposeParams", "mpscnn_transpose_params",
    "MPSCNNConvolutionParams", "mpscnn_conv_params", "MPSCNNUnsupportedError",
]

# Apple's rule for grouped MPSCNN convolutions, quoted in the messages below.
_APPLE_GROUPS_RULE = (
    "Apple's MPSCNNConvolutionDescriptor.groups documentation: \"Both inputFeatureChannels and "
    "outputFeatureChannels must be divisible by n and number of channels in each group must be multiple of 4.\""
)


class MPSCNNUnsupportedError(ValueError):
    """A layer that MPSCNNConvolution / MPSCNNConvolutionTranspose cannot compute as documented.

    Examples
    --------
    >>> from fastdeconv import weights
    >>> weights.mpscnn_transpose_params((8, 8), (3, 3), groups=2, in_channels=6, out_channels=6)
    Traceback (most recent call last):
    ...
    fastdeconv.weights.mpscnn.MPSCNNUnsupportedError: MPSCNNConvolutionTranspose cannot express groups=2 with C_in=6, C_out=6: ...
    """


def to_mpscnn_transpose(weight, groups: int = 1) -> np.ndarray:
    """The float32 array an MPSCNNConvolutionDataSource returns for MPSCNNConvolutionTranspose.

    ``weight`` is our transposed-convolution weight (C_in, kH, kW, C_out/groups). The result has MPS's
    layout (C_out, kH, kW, C_in/groups) -- the data source's ``-weights`` doc: "The layout of filter weight
    is as a 4D tensor (array) weight[ outputChannels ][ kernelHeight ][ kernelWidth ][ inputChannels /
    groups ]" -- and is rotated by 180°, because MPS "uses the weights specified by the developer as-is
    and does not perform any rotation" (MPSCNNConvolution.h). With Cig = C_in/groups, Cog = C_out/groups::

        result[g·Cog + o, ky, kx, i] = weight[g·Cig + i, kH − 1 − ky, kW − 1 − kx, o]

    float32 because the initializer says "Currently we support only Float32 weights".

    Examples
    --------
    >>> import numpy as np
    >>> from fastdeconv import weights
    >>> w = np.arange(2 * 2 * 2 * 3, dtype=np.float32).reshape(2, 2, 2, 3)   # (C_in, kH, kW, C_out)
    >>> w_mps = weights.to_mpscnn_transpose(w)
    >>> w_mps.shape                                                  # (C_out, kH, kW, C_in)
    (3, 2, 2, 2)
    >>> bool(np.array_equal(w_mps, w[:, ::-1, ::-1, :].transpose(3, 1, 2, 0)))   # rotated 180 degrees
    True
    """
    by_group = transposed_by_group(weight, groups)
    groups, in_per_group, kernel_h, kernel_w, out_per_group = by_group.shape
    rotated = by_group[:, :, ::-1, ::-1, :]
    ohwi = rotated.transpose(0, 4, 2, 3, 1).reshape(groups * out_per_group, kernel_h, kernel_w, in_per_group)
    return np.ascontiguousarray(ohwi, dtype=np.float32)


def _check_mpscnn_groups(in_channels, out_channels, groups, layer):
    """Apple: with groups > 1, channels per group must be multiples of 4 (on both sides)."""
    if groups == 1:
        return
    in_per_group, out_per_group = in_channels // groups, out_channels // groups
    if in_per_group % 4 or out_per_group % 4:
        raise MPSCNNUnsupportedError(
            f"{layer} cannot express groups={groups} with C_in={in_channels}, C_out={out_channels}: "
            f"C_in/groups={in_per_group} and C_out/groups={out_per_group} must both be multiples of 4 "
            f"({_APPLE_GROUPS_RULE})"
        )


@dataclass(frozen=True)
class MPSCNNKernelParams:
    """What MPSCNNConvolution and MPSCNNConvolutionTranspose are both given, in MPS's x (width) / y
    (height) naming.

    Set ``offset`` = (offset_x, offset_y, 0) on the kernel (MPSCNNKernel), ``edgeMode`` =
    MPSImageEdgeModeZero, allocate the destination MPSImage with destination_width × destination_height,
    and give the data source's descriptor kernelWidth/Height, strideInPixelsX/Y, dilationRateX/Y and
    groups. source_height × source_width is the source MPSImage's size.
    """

    offset_x: int
    offset_y: int
    destination_height: int
    destination_width: int
    edge_mode: str
    stride_x: int
    stride_y: int
    dilation_x: int
    dilation_y: int
    kernel_width: int
    kernel_height: int
    groups: int
    source_height: int
    source_width: int


@dataclass(frozen=True)
class MPSCNNTransposeParams(MPSCNNKernelParams):
    """Settings that make MPSCNNConvolutionTranspose compute :func:`fastdeconv.conv_transpose2d`.

    The shared settings (:class:`MPSCNNKernelParams`) plus ``kernelOffsetX/Y``; the weights come from
    :func:`to_mpscnn_transpose`.
    """

    kernel_offset_x: int
    kernel_offset_y: int


@dataclass(frozen=True)
class MPSCNNConvolutionParams(MPSCNNKernelParams):
    """Settings that make MPSCNNConvolution compute :func:`fastdeconv.conv2d` (weights: ours, OHWI, as-is).

    ``depthwise``: build the data source's descriptor as an MPSCNNDepthWiseConvolutionDescriptor with
    groups = 1 (C_in = C_out = our groups; its weights "Weights [ outputFeatureChannels ] [kH] [kW]" are our
    (C_out, kH, kW, 1) array).
    """

    depthwise: bool


def _resolve_with_channels(transposed, input_hw, kernel_hw, groups, in_channels, out_channels, resolve):
    """Resolve a geometry through fastdeconv._params from sizes and (optional) channel counts."""
    _params.check_groups(groups)
    if groups > 1 and (in_channels is None or out_channels is None):
        raise ValueError(
            f"in_channels and out_channels are required when groups > 1 (to check MPS's channels-per-group "
            f"rule), got groups={groups!r}, in_channels={in_channels!r}, out_channels={out_channels!r}")
    in_channels = groups if in_channels is None else in_channels
    out_channels = groups if out_channels is None else out_channels
    for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
        if not _params.is_int(value) or value < 1 or value % groups:
            raise ValueError(f"{name} must be a positive int divisible by groups={groups}, got {name}={value!r}")
    input_hw = _params._int_pair(input_hw, "input_hw", 1)
    kernel_hw = _params._int_pair(kernel_hw, "kernel_hw", 1)
    x_shape = (1, *input_hw, in_channels)
    if transposed:
        w_shape = (in_channels, *kernel_hw, out_channels // groups)
    else:
        w_shape = (out_channels, *kernel_hw, in_channels // groups)
    return resolve(x_shape, w_shape)


def _extents_and_pads(geometry):
    """(kd, pad_begin) for the y and x axes of a resolved geometry, kd the dilated kernel extent."""
    return [(_params.kernel_extent(k, d), pad_begin)
            for k, d, (pad_begin, _) in zip(geometry.kernel_hw, geometry.dilation, geometry.pad)]


def _shared_fields(geometry, offset_yx) -> dict:
    """The :class:`MPSCNNKernelParams` fields of a resolved geometry, given the kernel's offset."""
    return dict(
        offset_x=offset_yx[1], offset_y=offset_yx[0],
        destination_height=geometry.output_hw[0], destination_width=geometry.output_hw[1], edge_mode="zero",
        stride_x=geometry.stride[1], stride_y=geometry.stride[0],
        dilation_x=geometry.dilation[1], dilation_y=geometry.dilation[0],
        kernel_width=geometry.kernel_hw[1], kernel_height=geometry.kernel_hw[0], groups=geometry.groups,
        source_height=geometry.input_hw[0], source_width=geometry.input_hw[1],
    )


def mpscnn_transpose_params(input_hw, kernel_hw, stride=1, padding=0, output_padding=0, dilation=1, groups=1, *,
                            in_channels=None, out_channels=None, output_size=None) -> MPSCNNTransposeParams:
    """The MPSCNNConvolutionTranspose settings that compute ``conv_transpose2d`` with these arguments.

    Arguments are those of :func:`fastdeconv.conv_transpose2d` (parsed by :mod:`fastdeconv._params`,
    so "same"/"valid", asymmetric ((top, bottom), (left, right)) padding and ``output_size`` work);
    ``in_channels`` / ``out_channels`` are required when groups > 1, for Apple's channel rule.

    What Apple documents (MPSCNNConvolution.h, class MPSCNNConvolutionTranspose; also
    https://developer.apple.com/documentation/metalperformanceshaders/mpscnnconvolutiontranspose):

    * "the convolution transpose puts (stride - 1) zeroes in-between the source image pixels to create an
      expanded image. Then a convolution is done over the expanded image", "Intermediate image size =
      (srcSize - 1) * Stride + 1";
    * "MPS uses the weights specified by the developer as-is and does not perform any rotation";
    * "So totalOffset = Offset * stride + kernelOffset", where Offset is MPSCNNKernel.offset and
      kernelOffsetX/Y is "the offset applied to the kernel when it is finally applied on the intermediate
      image"; "The offset defined by user refers to the coordinate frame of the expanded image";
    * the convolution's window is centred (MPSCNNConvolutionDescriptor.kernelWidth: "The position of the
      left edge of the filter window is given by offset.x - (kernelWidth>>1)"; dilationRateX:
      "kW_Dilated = (kW-1)*dilationRateX + 1 ... The kernel is centered based on kW_Dilated").

    So destination pixel y reads expanded rows ``totalOffset + y − (kd >> 1) + ky·d`` (kd = d·(k − 1) + 1)
    with the rotated weight, and conv_transpose2d reads them at ``y + pad_begin − (kd − 1) + ky·d``;
    equal when, per axis::

        kernelOffset = (kd >> 1) − (kd − 1) + pad_begin,   offset = 0,   edgeMode = zero,
        destination  = (in − 1)·s − pad_begin − pad_end + kd + output_padding

    (pad_end and output_padding only size the destination: the extra rows read zeros, as in the adjoint).

    Raises :class:`MPSCNNUnsupportedError` (a ValueError) when groups > 1 and C_in/groups or
    C_out/groups is not a multiple of 4 (MPSCNNConvolutionDescriptor.groups: "Both inputFeatureChannels and
    outputFeatureChannels must be divisible by n and number of channels in each group must be multiple
    of 4."), and ValueError for anything conv_transpose2d itself rejects.

    Examples
    --------
    >>> from fastdeconv import weights
    >>> p = weights.mpscnn_transpose_params((16, 16), (4, 4), stride=2, padding=1)
    >>> p.kernel_offset_x, p.kernel_offset_y, p.destination_width, p.destination_height
    (0, 0, 32, 32)
    >>> weights.mpscnn_transpose_params((16, 16), (3, 3), stride=2, padding=1, output_padding=1).kernel_offset_x
    0
    """
    geometry = _resolve_with_channels(
        True, input_hw, kernel_hw, groups, in_channels, out_channels,
        lambda x_shape, w_shape: _params.resolve_conv_transpose2d(
            x_shape, w_shape, stride, padding, output_padding, dilation, groups, output_size))
    _check_mpscnn_groups(geometry.in_channels, geometry.out_channels, geometry.groups, "MPSCNNConvolutionTranspose")
    kernel_offsets = [(kd >> 1) - (kd - 1) + pad_begin for kd, pad_begin in _extents_and_pads(geometry)]
    return MPSCNNTransposeParams(kernel_offset_x=kernel_offsets[1], kernel_offset_y=kernel_offsets[0],
                                 **_shared_fields(geometry, (0, 0)))


def mpscnn_conv_params(input_hw, kernel_hw, stride=1, padding=0, dilation=1, groups=1, *,
                       in_channels=None, out_channels=None) -> MPSCNNConvolutionParams:
    """The MPSCNNConvolution settings that compute ``conv2d`` with these arguments.

    Destination pixel x reads source columns ``offset.x + x·s − (kd >> 1) + kx·d`` (the descriptor's
    kernelWidth doc: "The position of the left edge of the filter window is given by
    offset.x - (kernelWidth>>1)", centred on the dilated extent kd); conv2d reads
    ``x·s − pad_left + kx·d``, so ``offset = (kd >> 1) − pad_begin`` per axis, edge mode zero, and the
    destination is conv2d's output size. groups > 1 needs multiples of 4 per group, except depthwise
    (C_in = C_out = groups), which uses MPSCNNDepthWiseConvolutionDescriptor ("Currently only channel
    multipler of 1 is supported").

    Examples
    --------
    >>> from fastdeconv import weights
    >>> p = weights.mpscnn_conv_params((32, 32), (3, 3), stride=2, padding=1)
    >>> p.offset_x, p.offset_y, p.destination_width, p.depthwise
    (0, 0, 16, False)
    """
    geometry = _resolve_with_channels(
        False, input_hw, kernel_hw, groups, in_channels, out_channels,
        lambda x_shape, w_shape: _params.resolve_conv2d(x_shape, w_shape, stride, padding, dilation, groups))
    depthwise = geometry.groups > 1 and geometry.in_channels == geometry.out_channels == geometry.groups
    if not depthwise:
        _check_mpscnn_groups(geometry.in_channels, geometry.out_channels, geometry.groups, "MPSCNNConvolution")
    offsets = [(kd >> 1) - pad_begin for kd, pad_begin in _extents_and_pads(geometry)]
    return MPSCNNConvolutionParams(depthwise=depthwise, **_shared_fields(geometry, offsets))
