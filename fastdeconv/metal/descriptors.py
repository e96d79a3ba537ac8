"""Pure-Python descriptors: exactly what the Metal backend sends to Metal, as frozen dataclasses.

A descriptor is built from a :class:`fastdeconv._params.ConvGeometry` and a dtype, holds no arrays
and imports nothing from Apple, so it is built and checked on any platform. It is hashable: the
backend caches compiled graphs and pipeline states keyed by the descriptor itself. Three consumers
read the same descriptor:

* :mod:`fastdeconv.metal.pyobjc_layer` turns it into Metal calls (macOS only);
* :mod:`fastdeconv.metal.executors` runs it in numpy under the documented semantics (any platform);
* the tests compare the executors' result with backend="cpu".

Two paths:

``backend="mps"`` → :class:`GraphDescriptor` (MPSGraph, macOS 12.0+). dataLayout NHWC, weightsLayout OIHW.
Both of fastdeconv's weight layouts are the *forward* convolution's OHWI weight
(conv2d: (C_out, kH, kW, C_in/g); conv_transpose2d: (C_in, kH, kW, C_out/g), whose forward
convolution maps C_out → C_in), so both become OIHW with ``w.transpose(0, 3, 1, 2)``. Apple's
``MPSGraphConvolutionTransposeOps.h`` says convolutionTranspose2D "is exactly the same as convolution
gradient with respect to input image" and reads the weights as that forward convolution's weights,
which is fastdeconv's convention — no rotation. PyTorch feeds MPSGraph OIHW weights with NHWC data
the same way (``aten/src/ATen/native/mps/operations/Convolution.mm``, ``fill_conv_desc``).

``backend="mps-cnn"`` → :class:`CnnDescriptor` (MPSCNN, macOS 10.13.4+): MPSCNNConvolutionTranspose with
``fastdeconv.weights.to_mpscnn_transpose`` weights and ``mpscnn_transpose_params`` offsets
(conv2d: MPSCNNConvolution with the weights as given), or — for what MPSCNN cannot express —
fastdeconv's own direct kernel from ``conv_transpose.metal`` (:class:`DirectKernelDescriptor`).

Apple enum values used below (all [C], from Apple's headers / docs):
MPSDataType Float32 = 0x10000020, Float16 = 0x10000010 (MPSCoreTypes.h);
MPSGraphTensorNamedDataLayout NHWC = 1, OIHW = 2; MPSGraphPaddingStyle Explicit = 0;
MPSGraphPaddingMode Constant = 0 (MPSGraphTensorShapeOps / MPSGraphConvolutionOps headers);
MPSImageFeatureChannelFormat Float16 = 3, Float32 = 4; MPSDataLayout HeightxWidthxFeatureChannels = 0;
MPSImageEdgeMode Zero = 0, Clamp = 1; MPSNNConvolutionAccumulatorPrecisionOption Float = 1;
MPSCNNConvolutionWeightsLayout OHWI = 0 (PyObjC's test_mpsneuralnetwork_mpscnnconvolution.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._params import ConvGeometry, forward_output_size, kernel_extent

# ------------------------------------------------------------------------------------------------
# Apple constants
# ------------------------------------------------------------------------------------------------

MPS_DATA_TYPE = {np.dtype(np.float32): 0x10000020, np.dtype(np.float16): 0x10000010}
DTYPE_OF_DATA_TYPE = {code: dtype for dtype, code in MPS_DATA_TYPE.items()}       # MPSDataType → numpy
GRAPH_LAYOUT_NHWC = 1
GRAPH_LAYOUT_OIHW = 2
GRAPH_PADDING_STYLE_EXPLICIT = 0
GRAPH_PADDING_MODE_CONSTANT = 0
IMAGE_FORMAT = {np.dtype(np.float32): 4, np.dtype(np.float16): 3}    # MPSImageFeatureChannelFormat
DTYPE_OF_IMAGE_FORMAT = {code: dtype for dtype, code in IMAGE_FORMAT.items()}     # ... → numpy
IMAGE_LAYOUT_HWC = 0                                                 # MPSDataLayoutHeightxWidthxFeatureChannels
EDGE_MODES = {"zero": 0, "clamp": 1}                                 # MPSImageEdgeMode
ACCUMULATOR_FLOAT = 1                                                # ...AccumulatorPrecisionOptionFloat
CNN_WEIGHTS_OHWI = 0

# Texture limits for MPSImage (a 2D texture array with 4 channels per slice): 16384 pixels per side
# and 2048 array slices on every Mac GPU family and Apple3+ (Apple's "Metal feature set tables").
TEXTURE_MAX_SIDE = 16384
TEXTURE_MAX_SLICES = 2048

# The direct kernels index with 32-bit int.
INT32_LIMIT = 2**31 - 1

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))

# fastdeconv.metal.conv_transpose.metal's `struct ConvParams`, in declaration order (all int32).
PARAM_FIELDS = (
    "batch", "in_h", "in_w", "in_channels", "out_h", "out_w", "out_channels",
    "kernel_h", "kernel_w", "stride_h", "stride_w", "dilation_h", "dilation_w",
    "pad_top", "pad_left", "groups",
)
THREADS_PER_THREADGROUP = 256


def check_dtype(dtype) -> np.dtype:
    """float32 or float16, else a TypeError that names the dtype (Metal has no float64)."""
    dtype = np.dtype(dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"the Metal backends compute in float32 or float16, but the result dtype is {dtype} (Metal has no "
            f"float64); cast x and weight to float32, or use backend='cpu'")
    return dtype


# ------------------------------------------------------------------------------------------------
# MPSGraph
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphConvolutionDescriptor:
    """MPSGraphConvolution2DOpDescriptor, field for field (``descriptorWithStrideInX:strideInY:
    dilationRateInX:dilationRateInY:groups:paddingLeft:paddingRight:paddingTop:paddingBottom:
    paddingStyle:dataLayout:weightsLayout:``, in that order)."""

    stride_in_x: int
    stride_in_y: int
    dilation_rate_in_x: int
    dilation_rate_in_y: int
    groups: int
    padding_left: int
    padding_right: int
    padding_top: int
    padding_bottom: int
    padding_style: int = GRAPH_PADDING_STYLE_EXPLICIT
    data_layout: int = GRAPH_LAYOUT_NHWC
    weights_layout: int = GRAPH_LAYOUT_OIHW


@dataclass(frozen=True)
class GraphDescriptor:
    """One MPSGraph: placeholders → [cast] → convolution → [pad] → [+ bias] → [cast] → result.

    * ``op``: "convolution2D" (``convolution2DWithSourceTensor:weightsTensor:descriptor:name:``) or
      "convolutionTranspose2D" (``convolutionTranspose2DWithSourceTensor:weightsTensor:outputShape:
      descriptor:name:``). ``None`` when no kernel tap reaches the output (a degenerate transposed
      convolution whose padding crops every tap): the result is then zeros (+ bias).
    * ``convolution``: the op's ``descriptor:`` argument.
    * ``source_shape`` (N, H, W, C_in) NHWC; ``weights_shape`` OIHW of the forward convolution;
      ``bias_shape`` (1, 1, 1, C_out) or None. All three are placeholders of ``data_type``.
    * ``compute_data_type``: the convolution runs in float32; float16 inputs are cast up in the graph
      and the result cast down once (fastdeconv's float16 contract).
    * ``output_shape``: the ``outputShape`` argument of the transpose (NHWC). MPSGraph defines the
      transpose as the data gradient of the forward convolution of an ``output_shape`` input with
      ``convolution``, whose output must then be exactly the source: per axis
      ``⌊(out + pad_begin + pad_end − kd)/s⌋ + 1 = in``. fastdeconv's output_padding/output_size
      satisfy that directly when output_padding < stride. When output_padding ≥ stride (allowed
      while < dilation) the rows beyond ``(in − 1)·s + kd − pad_begin`` receive no tap; the
      convolution then produces the reachable rows only (``pad_end`` adjusted so the relation holds)
      and ``tail_padding`` = (rows, columns) of zeros is appended with ``padTensor:withPaddingMode:
      leftPadding:rightPadding:constantValue:name:``.
    * ``result_shape``: (N, H_out, W_out, C_out), the tensor read back.
    """

    op: str | None
    data_type: int
    compute_data_type: int
    source_shape: tuple[int, int, int, int]
    weights_shape: tuple[int, int, int, int]
    bias_shape: tuple[int, int, int, int] | None
    convolution: GraphConvolutionDescriptor
    output_shape: tuple[int, int, int, int] | None
    tail_padding: tuple[int, int]
    result_shape: tuple[int, int, int, int]


def graph_weights(weight: np.ndarray, dtype) -> np.ndarray:
    """fastdeconv's weight (OHWI of the forward convolution) → OIHW, C-contiguous, in ``dtype``."""
    return np.ascontiguousarray(np.asarray(weight).transpose(0, 3, 1, 2), dtype=dtype)


def graph_bias(bias, out_channels: int, dtype) -> np.ndarray | None:
    """(C_out,) → (1, 1, 1, C_out), broadcast over NHWC by additionWithPrimaryTensor:secondaryTensor:name:."""
    if bias is None:
        return None
    return np.ascontiguousarray(np.asarray(bias).reshape(1, 1, 1, out_channels), dtype=dtype)


def _transpose_axis(size_in, size_out, kernel, stride, dilation, pad_begin, pad_end):
    """(conv_out, pad_end, tail) for one axis of the transposed convolution (see GraphDescriptor)."""
    kd = kernel_extent(kernel, dilation)
    if forward_output_size(size_out, kernel, stride, dilation, pad_begin, pad_end) == size_in:
        return size_out, pad_end, 0
    reach = (size_in - 1) * stride + kd - pad_begin          # output rows some tap can reach
    conv_out = min(size_out, reach)
    return conv_out, reach - conv_out, size_out - conv_out


def graph_descriptor(geometry: ConvGeometry, dtype, has_bias: bool) -> GraphDescriptor:
    """The MPSGraph descriptor for a resolved conv_transpose2d (``geometry.transposed``) or conv2d call."""
    dtype = check_dtype(dtype)
    g = geometry
    (pt, pb), (pl, pr) = g.pad
    kh, kw = g.kernel_hw
    weights_shape = (g.weight_shape[0], g.weight_shape[3], kh, kw)
    output_shape, tail, op = None, (0, 0), "convolution2D"
    if g.transposed:
        op = "convolutionTranspose2D"
        rows, pb, tail_h = _transpose_axis(g.input_hw[0], g.output_hw[0], kh, g.stride[0], g.dilation[0], pt, pb)
        cols, pr, tail_w = _transpose_axis(g.input_hw[1], g.output_hw[1], kw, g.stride[1], g.dilation[1], pl, pr)
        tail = (tail_h, tail_w)
        if rows < 1 or cols < 1:                                   # every tap is cropped away
            op, rows, cols, pb, pr, tail = None, 0, 0, g.pad[0][1], g.pad[1][1], (0, 0)
        output_shape = (g.batch, rows, cols, g.out_channels)
    convolution = GraphConvolutionDescriptor(
        stride_in_x=g.stride[1], stride_in_y=g.stride[0],
        dilation_rate_in_x=g.dilation[1], dilation_rate_in_y=g.dilation[0],
        groups=g.groups, padding_left=pl, padding_right=pr, padding_top=pt, padding_bottom=pb)
    return GraphDescriptor(
        op=op, data_type=MPS_DATA_TYPE[dtype], compute_data_type=MPS_DATA_TYPE[np.dtype(np.float32)],
        source_shape=g.input_shape, weights_shape=weights_shape,
        bias_shape=(1, 1, 1, g.out_channels) if has_bias else None,
        convolution=convolution, output_shape=output_shape, tail_padding=tail, result_shape=g.output_shape)


# ------------------------------------------------------------------------------------------------
# MPSCNN and the direct kernel
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageSpec:
    """An MPSImage per batch item: ``MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:
    featureChannels:`` (numberOfImages 1), written/read with ``writeBytes:dataLayout:imageIndex:`` /
    ``readBytes:dataLayout:imageIndex:`` in HWC order (``data_layout``)."""

    channel_format: int
    width: int
    height: int
    feature_channels: int
    data_layout: int = IMAGE_LAYOUT_HWC


@dataclass(frozen=True)
class CnnConvolutionDescriptor:
    """MPSCNNConvolutionDescriptor (or its subclass MPSCNNDepthWiseConvolutionDescriptor, with
    groups 1, for a depthwise convolution): ``cnnConvolutionDescriptorWithKernelWidth:kernelHeight:
    inputFeatureChannels:outputFeatureChannels:`` then the strideInPixelsX/Y, dilationRateX/Y and
    groups properties. For the transpose, input = the transpose's source channels (C_in), output =
    its destination's (C_out)."""

    descriptor_class: str
    kernel_width: int
    kernel_height: int
    input_feature_channels: int
    output_feature_channels: int
    stride_in_pixels_x: int
    stride_in_pixels_y: int
    dilation_rate_x: int
    dilation_rate_y: int
    groups: int


@dataclass(frozen=True)
class CnnKernelDescriptor:
    """An MPSCNNConvolution / MPSCNNConvolutionTranspose over a batch of MPSImages.

    ``kernel_class`` is the class name; it is created with ``initWithDevice:weights:`` from an
    MPSCNNConvolutionDataSource whose ``descriptor`` is ``convolution``, float32 weights in OHWI
    (``weights_shape``; for the transpose ``to_mpscnn_transpose``'s 180°-rotated ones) and no bias
    (``biasTerms`` is NULL): with ``has_bias`` the bias is added to the images read back
    (:func:`add_bias_after_readback`). Kernel properties: ``offset`` = (offset_x, offset_y, 0) (MPSOffset),
    ``edgeMode`` = ``edge_mode``, and for the transpose ``kernelOffsetX/Y``. Encoded with
    ``encodeBatchToCommandBuffer:sourceImages:destinationImages:`` with destinations of exactly
    ``destination`` size (clipRect = whole image).
    """

    kernel_class: str
    convolution: CnnConvolutionDescriptor
    weights_shape: tuple[int, int, int, int]
    has_bias: bool
    offset_x: int
    offset_y: int
    kernel_offset_x: int
    kernel_offset_y: int
    edge_mode: int
    accumulator_precision: int
    source: ImageSpec
    destination: ImageSpec
    batch: int


@dataclass(frozen=True)
class DirectKernelDescriptor:
    """fastdeconv's own kernel from conv_transpose.metal, on MTLBuffers.

    ``function`` is the kernel's name; buffers 0..3 are x, weight, bias (zeros when absent), y,
    all NHWC / fastdeconv layout in ``dtype``; buffer 4 is ``params`` (int32 values in
    :data:`PARAM_FIELDS` order, via ``setBytes:length:atIndex:``). One thread per output element:
    ``dispatchThreadgroups:threadsPerThreadgroup:`` with ⌈threads / threads_per_threadgroup⌉ groups.
    ``reason`` says why MPSCNN is not used.
    """

    function: str
    dtype: str
    params: tuple[int, ...]
    threads: int
    threads_per_threadgroup: int
    x_shape: tuple[int, int, int, int]
    weight_shape: tuple[int, int, int, int]
    bias_shape: tuple[int]
    y_shape: tuple[int, int, int, int]
    reason: str

    def param_dict(self) -> dict[str, int]:
        return dict(zip(PARAM_FIELDS, self.params))


@dataclass(frozen=True)
class CnnDescriptor:
    """backend="mps-cnn": one stage, MPSCNN or the direct kernel, in one command buffer."""

    stage: CnnKernelDescriptor | DirectKernelDescriptor
    result_shape: tuple[int, int, int, int]


def _texture_obstacle(geometry: ConvGeometry) -> str | None:
    """Why the MPSImages of this geometry exceed Metal's texture limits, or None."""
    g = geometry
    sides = (*g.input_hw, *g.output_hw)
    if max(sides) > TEXTURE_MAX_SIDE:
        return f"image side {max(sides)} exceeds the MPSImage texture limit {TEXTURE_MAX_SIDE}"
    slices = max(-(-g.in_channels // 4), -(-g.out_channels // 4))
    if slices > TEXTURE_MAX_SLICES:
        return (f"{max(g.in_channels, g.out_channels)} channels need {slices} texture slices, more than the "
                f"MPSImage limit {TEXTURE_MAX_SLICES}")
    return None


def direct_descriptor(geometry: ConvGeometry, dtype, reason: str) -> DirectKernelDescriptor:
    """The direct-kernel descriptor (any groups, dilation, padding, output size)."""
    dtype = check_dtype(dtype)
    g = geometry
    sizes = {"x": math.prod(g.input_shape), "weight": math.prod(g.weight_shape), "y": math.prod(g.output_shape)}
    for name, size in sizes.items():
        if size > INT32_LIMIT:
            raise ValueError(
                f"{name} has {size} elements; the direct Metal kernel indexes with 32-bit int (at most {INT32_LIMIT}) "
                f"— split the batch, or use backend='mps' or 'cpu'")
    (pt, _), (pl, _) = g.pad
    values = dict(batch=g.batch, in_h=g.input_hw[0], in_w=g.input_hw[1], in_channels=g.in_channels,
                  out_h=g.output_hw[0], out_w=g.output_hw[1], out_channels=g.out_channels,
                  kernel_h=g.kernel_hw[0], kernel_w=g.kernel_hw[1], stride_h=g.stride[0], stride_w=g.stride[1],
                  dilation_h=g.dilation[0], dilation_w=g.dilation[1], pad_top=pt, pad_left=pl, groups=g.groups)
    kind = "conv_transpose2d" if g.transposed else "conv2d"
    scalar = "float" if dtype == np.float32 else "half"
    return DirectKernelDescriptor(
        function=f"{kind}_direct_{scalar}", dtype=dtype.name, params=tuple(values[f] for f in PARAM_FIELDS),
        threads=sizes["y"], threads_per_threadgroup=THREADS_PER_THREADGROUP, x_shape=g.input_shape,
        weight_shape=g.weight_shape, bias_shape=(g.out_channels,), y_shape=g.output_shape, reason=reason)


def _image(dtype, hw, channels) -> ImageSpec:
    return ImageSpec(channel_format=IMAGE_FORMAT[dtype], width=hw[1], height=hw[0], feature_channels=channels)


def cnn_descriptor(geometry: ConvGeometry, dtype, has_bias: bool, force_direct: bool = False) -> CnnDescriptor:
    """The MPSCNN descriptor: MPSCNN when Apple's documented limits allow it, else the direct kernel.

    The MPSCNN settings come from :func:`fastdeconv.weights.mpscnn_transpose_params` (transposed:
    kernelOffset, offset, edgeMode, destination size) and :func:`fastdeconv.weights.mpscnn_conv_params`
    (convolution: ``offset = (kd >> 1) − pad_begin``, depthwise descriptor when C_in = C_out = groups).
    A ValueError from them (e.g. channels per group not a multiple of 4) or an image beyond the
    texture limits selects the direct kernel, with the message as ``reason``.
    """
    from .. import weights as weights_module  # noqa: PLC0415 (imports only numpy and _params)

    dtype = check_dtype(dtype)
    g = geometry
    reason = "forced" if force_direct else _texture_obstacle(g)
    params = None
    if reason is None:
        make = weights_module.mpscnn_transpose_params if g.transposed else weights_module.mpscnn_conv_params
        extra = dict(output_padding=g.output_padding) if g.transposed else {}
        try:
            params = make(g.input_hw, g.kernel_hw, stride=g.stride, padding=g.pad, dilation=g.dilation,
                          groups=g.groups, in_channels=g.in_channels, out_channels=g.out_channels, **extra)
        except ValueError as exc:
            reason = str(exc)
    if reason is not None:
        return CnnDescriptor(stage=direct_descriptor(g, dtype, reason), result_shape=g.output_shape)

    if (params.destination_height, params.destination_width) != tuple(g.output_hw):
        destination = (params.destination_height, params.destination_width)
        raise AssertionError(f"MPSCNN parameters give destination {destination} but the output is {g.output_hw}")
    depthwise = bool(getattr(params, "depthwise", False))
    convolution = CnnConvolutionDescriptor(
        descriptor_class="MPSCNNDepthWiseConvolutionDescriptor" if depthwise else "MPSCNNConvolutionDescriptor",
        kernel_width=params.kernel_width, kernel_height=params.kernel_height,
        input_feature_channels=g.in_channels, output_feature_channels=g.out_channels,
        stride_in_pixels_x=params.stride_x, stride_in_pixels_y=params.stride_y,
        dilation_rate_x=params.dilation_x, dilation_rate_y=params.dilation_y,
        groups=1 if depthwise else params.groups)
    kh, kw = g.kernel_hw
    stage = CnnKernelDescriptor(
        kernel_class="MPSCNNConvolutionTranspose" if g.transposed else "MPSCNNConvolution",
        convolution=convolution,
        weights_shape=(g.out_channels, kh, kw, g.in_per_group) if g.transposed else g.weight_shape,
        has_bias=has_bias, offset_x=params.offset_x, offset_y=params.offset_y,
        kernel_offset_x=getattr(params, "kernel_offset_x", 0), kernel_offset_y=getattr(params, "kernel_offset_y", 0),
        edge_mode=EDGE_MODES[params.edge_mode], accumulator_precision=ACCUMULATOR_FLOAT,
        source=_image(dtype, g.input_hw, g.in_channels), destination=_image(dtype, g.output_hw, g.out_channels),
        batch=g.batch)
    return CnnDescriptor(stage=stage, result_shape=g.output_shape)


def cnn_weights(descriptor: CnnDescriptor, weight: np.ndarray, groups: int) -> np.ndarray:
    """The weight array the descriptor's stage consumes.

    MPSCNN: float32 OHWI (``Currently we support only Float32 weights``, MPSCNNConvolutionTranspose
    init doc); for the transpose ``fastdeconv.weights.to_mpscnn_transpose`` (180° rotation +
    channel swap, since MPS "uses the weights specified by the developer as-is"). Direct kernel:
    fastdeconv's own layout in the descriptor's dtype.
    """
    stage = descriptor.stage
    if isinstance(stage, DirectKernelDescriptor):
        return np.ascontiguousarray(weight, dtype=stage.dtype)
    if stage.kernel_class == "MPSCNNConvolutionTranspose":
        from .. import weights as weights_module  # noqa: PLC0415

        converted = weights_module.to_mpscnn_transpose(weight, groups)
    else:
        converted = weight
    converted = np.ascontiguousarray(converted, dtype=np.float32)
    if converted.shape != stage.weights_shape:
        raise AssertionError(f"MPSCNN weights have shape {converted.shape}, the descriptor expects "
                             f"{stage.weights_shape}")
    return converted


def add_bias_after_readback(images: np.ndarray, bias) -> np.ndarray:
    """An MPSCNN stage's result with its bias: added in float32 to the images read back (N, H, W, C_out),
    then rounded once to their dtype. Not inside MPS: whether PyObjC applies MPS's metadata for
    ``biasTerms`` (a variable-length ``^f``) to a Python data source is unsettled, and NULL is right
    either way (fastdeconv.metal.pyobjc_layer.data_source_class)."""
    if bias is None:
        return images
    return (images.astype(np.float32) + np.asarray(bias, dtype=np.float32)).astype(images.dtype)


def cnn_bias(descriptor: CnnDescriptor, bias, out_channels: int) -> np.ndarray | None:
    """MPSCNN: float32 (C_out,) or None (added by :func:`add_bias_after_readback`). Direct kernel: zeros when
    absent."""
    stage = descriptor.stage
    if isinstance(stage, DirectKernelDescriptor):
        if bias is None:
            return np.zeros(out_channels, dtype=stage.dtype)
        return np.ascontiguousarray(bias, dtype=stage.dtype)
    return None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)

