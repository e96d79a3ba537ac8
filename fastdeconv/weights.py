"""Weight layouts, BatchNorm folding and the settings of Apple's MPSCNN convolution kernels.

Our layouts (see :func:`fastdeconv.conv_transpose2d` and :func:`fastdeconv.conv2d`):

* transposed convolution: ``(C_in, kH, kW, C_out // groups)``
* convolution:            ``(C_out, kH, kW, C_in // groups)``  (MPSCNNConvolution's OHWI)

Framework layouts:

============================  ===============================  ==========================
framework                     transposed (``transposed=True``)  convolution
============================  ===============================  ==========================
torch / ONNX / MXNet / Caffe  ``(C_in, C_out/g, kH, kW)``       ``(C_out, C_in/g, kH, kW)``
TensorFlow                    ``(kH, kW, C_out, C_in)``, g = 1  ``(kH, kW, C_in/g, C_out)``
============================  ===============================  ==========================

so ``from_torch`` is ``.transpose(0, 2, 3, 1)`` and ``from_tf`` is ``.transpose(3, 0, 1, 2)`` for both
kinds of layer.

MPSCNNConvolutionTranspose differs from every framework: it "uses the weights specified by the developer
as-is and does not perform any rotation" over a zero-inserted image (Apple, MPSCNNConvolution.h,
``MPSCNNConvolutionTranspose``; https://developer.apple.com/documentation/metalperformanceshaders/
mpscnnconvolutiontranspose). :func:`to_mpscnn_transpose` rotates and re-lays the weights and
:func:`mpscnn_transpose_params` gives the offsets and destination size that make it compute exactly
``conv_transpose2d``; :mod:`fastdeconv.mpscnn_model` is a numpy model of the documented kernel that checks
both. The Metal backend relies on these three names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _params

__all__ = [
    "from_torch", "to_torch", "from_onnx", "to_onnx", "from_mxnet", "to_mxnet", "from_tf", "to_tf",
    "to_mpscnn_transpose", "MPSCNNTransposeParams", "mpscnn_transpose_params",
    "MPSCNNConvolutionParams", "mpscnn_conv_params", "MPSCNNUnsupportedError",
    "fold_batchnorm", "save_mps", "load_mps",
]

# Apple's rule for grouped MPSCNN convolutions, quoted in the messages below.
_APPLE_GROUPS_RULE = (
    "Apple's MPSCNNConvolutionDescriptor.groups documentation: \"Both inputFeatureChannels and "
    "outputFeatureChannels must be divisible by n and number of channels in each group must be multiple of 4.\""
)


class MPSCNNUnsupportedError(ValueError):
    """A layer that MPSCNNConvolution / MPSCNNConvolutionTranspose cannot compute as documented."""


def _four_d(weight, name="weight") -> np.ndarray:
    array = np.asarray(weight)
    if array.ndim != 4:
        raise ValueError(f"{name} must be 4-D, got ndim={array.ndim} shape={array.shape}")
    return array


def _permuted(weight, axes) -> np.ndarray:
    return np.ascontiguousarray(_four_d(weight).transpose(axes))


# --------------------------------------------------------------------------------------------------------
# Framework layouts
# --------------------------------------------------------------------------------------------------------

def from_torch(weight, transposed: bool) -> np.ndarray:
    """torch weight -> ours, as a C-contiguous copy: ``.transpose(0, 2, 3, 1)``.

    ``ConvTranspose2d.weight`` (C_in, C_out/g, kH, kW) -> (C_in, kH, kW, C_out/g);
    ``Conv2d.weight`` (C_out, C_in/g, kH, kW) -> (C_out, kH, kW, C_in/g). ``transposed`` names the kind of
    layer; the permutation is the same for both.
    """
    del transposed  # same axes for both kinds; the argument keeps call sites explicit
    return _permuted(weight, (0, 2, 3, 1))


def to_torch(weight, transposed: bool) -> np.ndarray:
    """Ours -> torch: ``.transpose(0, 3, 1, 2)``; the inverse of :func:`from_torch`."""
    del transposed
    return _permuted(weight, (0, 3, 1, 2))


#: ONNX ConvTranspose.W is (C, M/group, kH, kW) and Conv.W is (M, C/group, kH, kW): torch's layouts.
from_onnx, to_onnx = from_torch, to_torch
#: MXNet Deconvolution.weight is (C_in, num_filter/num_group, kH, kW), Convolution.weight is OIHW: torch's.
from_mxnet, to_mxnet = from_torch, to_torch


def from_tf(weight, transposed: bool) -> np.ndarray:
    """TensorFlow filter -> ours: ``.transpose(3, 0, 1, 2)``.

    ``tf.nn.conv2d_transpose`` filters (kH, kW, C_out, C_in) -> (C_in, kH, kW, C_out) (no groups in TF);
    ``tf.nn.conv2d`` filters HWIO (kH, kW, C_in/g, C_out) -> (C_out, kH, kW, C_in/g).
    """
    del transposed
    return _permuted(weight, (3, 0, 1, 2))


def to_tf(weight, transposed: bool) -> np.ndarray:
    """Ours -> TensorFlow: ``.transpose(1, 2, 3, 0)``; the inverse of :func:`from_tf`."""
    del transposed
    return _permuted(weight, (1, 2, 3, 0))


# --------------------------------------------------------------------------------------------------------
# MPSCNNConvolutionTranspose
# --------------------------------------------------------------------------------------------------------

def to_mpscnn_transpose(weight, groups: int = 1) -> np.ndarray:
    """The float32 array an MPSCNNConvolutionDataSource returns for MPSCNNConvolutionTranspose.

    ``weight`` is our transposed-convolution weight (C_in, kH, kW, C_out/groups). The result has MPS's
    layout (C_out, kH, kW, C_in/groups) -- the data source's ``-weights`` doc: "The layout of filter weight
    is as a 4D tensor (array) weight[ outputChannels ][ kernelHeight ][ kernelWidth ][ inputChannels /
    groups ]" -- and is rotated by 180°, because MPS "uses the weights specified by the developer as-is
    and does not perform any rotation" (MPSCNNConvolution.h). With Cig = C_in/groups, Cog = C_out/groups::

        result[g·Cog + o, ky, kx, i] = weight[g·Cig + i, kH − 1 − ky, kW − 1 − kx, o]

    float32 because the initializer says "Currently we support only Float32 weights".
    """
    weight = _four_d(weight)
    _params.check_groups(groups)
    in_channels, kernel_h, kernel_w, out_per_group = weight.shape
    if in_channels % groups:
        raise ValueError(f"weight's C_in={in_channels} (shape {weight.shape}) is not divisible by groups={groups}")
    in_per_group = in_channels // groups
    per_group = weight.reshape(groups, in_per_group, kernel_h, kernel_w, out_per_group)
    rotated = per_group[:, :, ::-1, ::-1, :]
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
class MPSCNNTransposeParams:
    """Settings that make MPSCNNConvolutionTranspose compute :func:`fastdeconv.conv_transpose2d`.

    Set ``kernelOffsetX/Y`` on the kernel, ``offset`` = (offset_x, offset_y, 0) (MPSCNNKernel),
    ``edgeMode`` = MPSImageEdgeModeZero, allocate the destination MPSImage with
    destination_width × destination_height, and give the data source's MPSCNNConvolutionDescriptor
    kernelWidth/Height, strideInPixelsX/Y, dilationRateX/Y and groups. The weights come from
    :func:`to_mpscnn_transpose`. Fields are in MPS's x (width) / y (height) naming.
    """

    kernel_offset_x: int
    kernel_offset_y: int
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
    """
    geometry = _resolve_with_channels(
        True, input_hw, kernel_hw, groups, in_channels, out_channels,
        lambda x_shape, w_shape: _params.resolve_conv_transpose2d(
            x_shape, w_shape, stride, padding, output_padding, dilation, groups, output_size))
    _check_mpscnn_groups(geometry.in_channels, geometry.out_channels, geometry.groups, "MPSCNNConvolutionTranspose")
    kernel_offsets = []
    for k, d, (pad_begin, _) in zip(geometry.kernel_hw, geometry.dilation, geometry.pad):
        extent = d * (k - 1) + 1
        kernel_offsets.append((extent >> 1) - (extent - 1) + pad_begin)
    return MPSCNNTransposeParams(
        kernel_offset_x=kernel_offsets[1], kernel_offset_y=kernel_offsets[0], offset_x=0, offset_y=0,
        destination_height=geometry.output_hw[0], destination_width=geometry.output_hw[1], edge_mode="zero",
        stride_x=geometry.stride[1], stride_y=geometry.stride[0],
        dilation_x=geometry.dilation[1], dilation_y=geometry.dilation[0],
        kernel_width=geometry.kernel_hw[1], kernel_height=geometry.kernel_hw[0], groups=geometry.groups,
        source_height=geometry.input_hw[0], source_width=geometry.input_hw[1],
    )


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
        if not _params._is_int(value) or value < 1 or value % groups:
            raise ValueError(f"{name} must be a positive int divisible by groups={groups}, got {name}={value!r}")
    input_hw = _params._int_pair(input_hw, "input_hw", 1)
    kernel_hw = _params._int_pair(kernel_hw, "kernel_hw", 1)
    x_shape = (1, *input_hw, in_channels)
    if transposed:
        w_shape = (in_channels, *kernel_hw, out_channels // groups)
    else:
        w_shape = (out_channels, *kernel_hw, in_channels // groups)
    return resolve(x_shape, w_shape)


# --------------------------------------------------------------------------------------------------------
# MPSCNNConvolution (forward), for the converter's Conv layers
# --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MPSCNNConvolutionParams:
    """Settings that make MPSCNNConvolution compute :func:`fastdeconv.conv2d` (weights: ours, OHWI, as-is).

    ``offset`` = (offset_x, offset_y, 0), ``edgeMode`` zero, destination_width × destination_height.
    ``depthwise``: build the data source's descriptor as an MPSCNNDepthWiseConvolutionDescriptor with
    groups = 1 (C_in = C_out = our groups; its weights "Weights [ outputFeatureChannels ] [kH] [kW]" are our
    (C_out, kH, kW, 1) array).
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
    depthwise: bool
    source_height: int
    source_width: int


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
    """
    geometry = _resolve_with_channels(
        False, input_hw, kernel_hw, groups, in_channels, out_channels,
        lambda x_shape, w_shape: _params.resolve_conv2d(x_shape, w_shape, stride, padding, dilation, groups))
    depthwise = geometry.groups > 1 and geometry.in_channels == geometry.out_channels == geometry.groups
    if not depthwise:
        _check_mpscnn_groups(geometry.in_channels, geometry.out_channels, geometry.groups, "MPSCNNConvolution")
    offsets = [((d * (k - 1) + 1) >> 1) - pad_begin
               for k, d, (pad_begin, _) in zip(geometry.kernel_hw, geometry.dilation, geometry.pad)]
    return MPSCNNConvolutionParams(
        offset_x=offsets[1], offset_y=offsets[0],
        destination_height=geometry.output_hw[0], destination_width=geometry.output_hw[1], edge_mode="zero",
        stride_x=geometry.stride[1], stride_y=geometry.stride[0],
        dilation_x=geometry.dilation[1], dilation_y=geometry.dilation[0],
        kernel_width=geometry.kernel_hw[1], kernel_height=geometry.kernel_hw[0], groups=geometry.groups,
        depthwise=depthwise, source_height=geometry.input_hw[0], source_width=geometry.input_hw[1],
    )


# --------------------------------------------------------------------------------------------------------
# BatchNorm folding
# --------------------------------------------------------------------------------------------------------

def fold_batchnorm(weight, bias, gamma, beta, mean, var, eps, *, transposed: bool, groups: int = 1):
    """(weight, bias) of a (transposed) convolution followed by inference-mode BatchNorm, in our layouts.

    Per output channel c: ``scale[c] = gamma[c] / sqrt(var[c] + eps)``, ``bias'[c] = beta[c] +
    (bias[c] − mean[c])·scale[c]`` (bias = 0 when None), and every weight feeding output channel c is
    multiplied by scale[c] -- Apple's formula too (``I = gamma / sqrt(variance + epsilon), J = beta - ( I *
    mean )``, ``W = w * I``, ``B = b * I + J``, MPSCNNConvolutionDescriptor
    setBatchNormalizationParametersForInference).

    * convolution, weight (C_out, kH, kW, C_in/g): ``weight'[c] = weight[c]·scale[c]``;
    * transposed, weight (C_in, kH, kW, Cog) with Cig = C_in/groups: output channel g·Cog + o scales
      ``weight[g·Cig:(g+1)·Cig, :, :, o]``.

    ``eps`` is explicit (MXNet's default 1e-3, torch's and ONNX's 1e-5). Computed in float64; the weight
    keeps its floating dtype (float32 for other inputs) and the bias has the same dtype.
    """
    weight = _four_d(weight)
    _params.check_groups(groups)
    if transposed:
        in_channels, kernel_h, kernel_w, out_per_group = weight.shape
        if in_channels % groups:
            raise ValueError(f"weight's C_in={in_channels} (shape {weight.shape}) is not divisible by groups={groups}")
        out_channels = out_per_group * groups
    else:
        out_channels = weight.shape[0]
    dtype = weight.dtype if weight.dtype.kind == "f" else np.dtype(np.float32)
    vectors = {}
    for name, value in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var), ("bias", bias)):
        if value is None and name == "bias":
            value = np.zeros(out_channels)
        array = np.asarray(value, dtype=np.float64)
        if array.shape != (out_channels,):
            raise ValueError(f"{name} must have shape (C_out,) = ({out_channels},) for weight {weight.shape} "
                             f"(transposed={transposed}, groups={groups}), got shape {array.shape}")
        vectors[name] = array
    if not np.isscalar(eps) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got eps={eps!r}")
    if np.any(vectors["var"] + eps <= 0):
        raise ValueError(f"var + eps must be > 0 in every channel, got min(var)={vectors['var'].min()!r}, eps={eps!r}")
    scale = vectors["gamma"] / np.sqrt(vectors["var"] + eps)
    folded_bias = vectors["beta"] + (vectors["bias"] - vectors["mean"]) * scale
    w = weight.astype(np.float64)
    if transposed:
        w = w.reshape(groups, in_channels // groups, kernel_h, kernel_w, out_per_group)
        w = w * scale.reshape(groups, 1, 1, 1, out_per_group)
    else:
        w = w * scale[:, None, None, None]
    return w.reshape(weight.shape).astype(dtype), folded_bias.astype(dtype)


# --------------------------------------------------------------------------------------------------------
# .dat files
# --------------------------------------------------------------------------------------------------------

def _dat_paths(directory, name):
    directory = Path(directory)
    return directory / f"{name}_weight.dat", directory / f"{name}_bias.dat"


def save_mps(directory, name, weight, bias=None):
    """Write ``name_weight.dat`` (and ``name_bias.dat`` unless bias is None) into ``directory``.

    Raw little-endian float32, C order, no header -- what ``weight.astype('<f4').tofile(path)`` writes and
    what an MPSCNNConvolutionDataSource hands to MPS. ``weight`` must already be in the layout the app
    expects (e.g. :func:`to_mpscnn_transpose`). Returns the paths written.
    """
    weight_path, bias_path = _dat_paths(directory, name)
    np.ascontiguousarray(weight, dtype="<f4").tofile(weight_path)
    written = [weight_path]
    if bias is not None:
        bias = np.asarray(bias)
        if bias.ndim != 1:
            raise ValueError(f"bias must be 1-D, got shape {bias.shape}")
        np.ascontiguousarray(bias, dtype="<f4").tofile(bias_path)
        written.append(bias_path)
    elif os.path.exists(bias_path):
        os.remove(bias_path)   # a stale bias from an earlier save would be loaded as this layer's
    return written


def load_mps(directory, name, weight_shape):
    """Read what :func:`save_mps` wrote: (weight with ``weight_shape``, bias or None), float32.

    Raises ValueError naming the file if its size is not ``4·prod(weight_shape)`` bytes (or, for the bias,
    a multiple of 4).
    """
    weight_path, bias_path = _dat_paths(directory, name)
    weight_shape = tuple(int(v) for v in weight_shape)
    expected = 4 * int(np.prod(weight_shape))
    size = os.path.getsize(weight_path)
    if size != expected:
        raise ValueError(f"{weight_path} has {size} bytes, but weight_shape={weight_shape} needs {expected} "
                         "(raw float32)")
    weight = np.fromfile(weight_path, dtype="<f4").reshape(weight_shape)
    bias = None
    if bias_path.exists():
        size = os.path.getsize(bias_path)
        if size % 4:
            raise ValueError(f"{bias_path} has {size} bytes, not a whole number of float32 values")
        bias = np.fromfile(bias_path, dtype="<f4")
    return weight, bias
