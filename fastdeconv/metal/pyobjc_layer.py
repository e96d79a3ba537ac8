"""The thin PyObjC layer: turns a descriptor (fastdeconv.metal.descriptors) into Metal calls. macOS only.

Nothing here decides anything: every number comes from the descriptor. Apple's frameworks are
imported on first use (:func:`frameworks`), never when fastdeconv is imported; tests substitute a
recording fake with :func:`use_frameworks` to check that every descriptor field reaches a Metal call.

Selectors used (Apple headers; PyObjC spells ``a:b:c:`` as ``a_b_c_``):

Metal — ``MTLCreateSystemDefaultDevice``, ``-newCommandQueue``, ``-newBufferWithLength:options:``
(MTLResourceStorageModeShared = 0) + ``-contents`` (PyObjC: ``.as_buffer(n)``),
``-newLibraryWithSource:options:error:``, ``-newFunctionWithName:``,
``-newComputePipelineStateWithFunction:error:``, ``-commandBuffer``, ``-computeCommandEncoder``,
``-setComputePipelineState:``, ``-setBuffer:offset:atIndex:``, ``-setBytes:length:atIndex:``,
``-dispatchThreadgroups:threadsPerThreadgroup:``, ``-endEncoding``, ``-commit``,
``-waitUntilCompleted``, ``-error``.

MPSGraph (MPSGraph.h, MPSGraphConvolutionOps.h, MPSGraphConvolutionTransposeOps.h,
MPSGraphArithmeticOps.h, MPSGraphTensorShapeOps.h; macOS 11+) — ``placeholderWithShape:dataType:name:``,
``castTensor:toType:name:``, ``+[MPSGraphConvolution2DOpDescriptor descriptorWithStrideInX:strideInY:
dilationRateInX:dilationRateInY:groups:paddingLeft:paddingRight:paddingTop:paddingBottom:paddingStyle:
dataLayout:weightsLayout:]``, ``convolution2DWithSourceTensor:weightsTensor:descriptor:name:``,
``convolutionTranspose2DWithSourceTensor:weightsTensor:outputShape:descriptor:name:``,
``padTensor:withPaddingMode:leftPadding:rightPadding:constantValue:name:``,
``additionWithPrimaryTensor:secondaryTensor:name:``, ``constantWithScalar:shape:dataType:``,
``runWithMTLCommandQueue:feeds:targetTensors:targetOperations:`` (→ {tensor: MPSGraphTensorData}),
``-[MPSGraphTensorData initWithMTLBuffer:shape:dataType:]``, ``-mpsndarray``,
``-[MPSNDArray readBytes:strideBytes:]``.

MPSCNN (MPSCNNConvolution.h, MPSImage.h; macOS 10.13+) — ``+[MPSCNNConvolutionDescriptor
(or MPSCNNDepthWiseConvolutionDescriptor) cnnConvolutionDescriptorWithKernelWidth:kernelHeight:inputFeatureChannels:outputFeatureChannels:]``,
``setStrideInPixelsX:``/``Y``, ``setDilationRateX:``/``Y``, ``setGroups:``;
``-[MPSCNNConvolution(Transpose) initWithDevice:weights:]`` with an MPSCNNConvolutionDataSource
(``dataType``, ``descriptor``, ``weights``, ``biasTerms``, ``load``, ``purge``, ``label``,
``weightsLayout``, ``copyWithZone:``); ``setOffset:`` (MPSOffset), ``setEdgeMode:``,
``setKernelOffsetX:``/``Y``, ``setAccumulatorPrecisionOption:`` (macOS 10.14+);
``+[MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:featureChannels:]``,
``-[MPSImage initWithDevice:imageDescriptor:]``, ``writeBytes:dataLayout:imageIndex:``,
``readBytes:dataLayout:imageIndex:``; ``encodeBatchToCommandBuffer:sourceImages:destinationImages:``.

Unverified here ([U], see README): PyObjC's conversion of a numpy array returned from the Python
``weights``/``biasTerms`` methods to ``void *``/``float *`` (the arrays are kept alive by the
data source, so the pointer stays valid), and of the list/dict arguments above.
"""

from __future__ import annotations

import contextlib
import struct
import types
from importlib import resources

import numpy as np

from .descriptors import (
    CNN_WEIGHTS_OHWI,
    DTYPE_OF_DATA_TYPE,
    DTYPE_OF_IMAGE_FORMAT,
    GRAPH_PADDING_MODE_CONSTANT,
    MPS_DATA_TYPE,
    DirectKernelDescriptor,
)

STORAGE_MODE_SHARED = 0                 # MTLResourceStorageModeShared
MPS_DATA_TYPE_FLOAT32 = MPS_DATA_TYPE[np.dtype(np.float32)]
MSL_SOURCE = "conv_transpose.metal"

_frameworks = None
_context = None


def frameworks():
    """Metal, MetalPerformanceShaders (MPS), MetalPerformanceShadersGraph (MPSGraph), objc, Foundation."""
    global _frameworks
    if _frameworks is None:
        import Foundation
        import Metal
        import MetalPerformanceShaders
        import MetalPerformanceShadersGraph
        import objc

        _frameworks = types.SimpleNamespace(Metal=Metal, MPS=MetalPerformanceShaders,
                                            MPSGraph=MetalPerformanceShadersGraph, objc=objc, Foundation=Foundation)
    return _frameworks


@contextlib.contextmanager
def use_frameworks(fake):
    """Replace Apple's frameworks by ``fake`` (and drop the cached context) inside the block."""
    global _frameworks, _context, _data_source_class
    saved = _frameworks, _context, _data_source_class
    _frameworks, _context, _data_source_class = fake, None, None
    try:
        yield
    finally:
        _frameworks, _context, _data_source_class = saved


class MetalContext:
    """The default device, one command queue, and the compiled conv_transpose.metal pipelines."""

    def __init__(self):
        self.fw = frameworks()
        self.device = self.fw.Metal.MTLCreateSystemDefaultDevice()
        if self.device is None:
            raise RuntimeError("MTLCreateSystemDefaultDevice() returned nil: this Mac has no Metal device")
        self.queue = self.device.newCommandQueue()
        self._library = None
        self._pipelines = {}

    def pipeline(self, function: str):
        """The compute pipeline state for one kernel of conv_transpose.metal (compiled once)."""
        if function not in self._pipelines:
            if self._library is None:
                source = resources.files(__package__).joinpath(MSL_SOURCE).read_text(encoding="utf-8")
                library, error = self.device.newLibraryWithSource_options_error_(source, None, None)
                if library is None:
                    raise RuntimeError(f"compiling {MSL_SOURCE} failed: {error}")
                self._library = library
            fn = self._library.newFunctionWithName_(function)
            if fn is None:
                raise RuntimeError(f"{MSL_SOURCE} has no kernel named {function!r}")
            state, error = self.device.newComputePipelineStateWithFunction_error_(fn, None)
            if state is None:
                raise RuntimeError(f"creating the pipeline for {function!r} failed: {error}")
            self._pipelines[function] = state
        return self._pipelines[function]

    def buffer(self, array: np.ndarray):
        """A shared MTLBuffer holding a copy of ``array``."""
        array = np.ascontiguousarray(array)
        buf = self.device.newBufferWithLength_options_(max(array.nbytes, 1), STORAGE_MODE_SHARED)
        if buf is None:
            raise RuntimeError(f"newBufferWithLength:{array.nbytes} failed")
        view = np.frombuffer(buf.contents().as_buffer(max(array.nbytes, 1)), dtype=np.uint8)
        view[: array.nbytes] = array.reshape(-1).view(np.uint8)
        return buf

    def read(self, buf, shape, dtype) -> np.ndarray:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return np.frombuffer(buf.contents().as_buffer(nbytes), dtype=dtype).reshape(shape).copy()

    def run(self, command_buffer):
        command_buffer.commit()
        command_buffer.waitUntilCompleted()
        error = command_buffer.error()
        if error is not None:
            raise RuntimeError(f"the Metal command buffer failed: {error}")


def context() -> MetalContext:
    global _context
    if _context is None:
        _context = MetalContext()
    return _context


# ------------------------------------------------------------------------------------------------
# MPSGraph
# ------------------------------------------------------------------------------------------------


class Resident:
    """An array copied once into an MTLBuffer and wrapped as MPSGraphTensorData (e.g. a layer's weights)."""

    def __init__(self, array: np.ndarray):
        ctx = context()
        self.shape, self.data_type = tuple(array.shape), MPS_DATA_TYPE[array.dtype]
        self.buffer = ctx.buffer(array)
        self.tensor_data = ctx.fw.MPSGraph.MPSGraphTensorData.alloc().initWithMTLBuffer_shape_dataType_(
            self.buffer, list(self.shape), self.data_type)


def resident(array):
    return None if array is None else Resident(np.ascontiguousarray(array))


class GraphRunner:
    """The MPSGraph of a GraphDescriptor, built once; ``run`` feeds it (MPSGraph compiles per feed shapes)."""

    def __init__(self, descriptor):
        ctx = context()
        G = ctx.fw.MPSGraph
        self.descriptor = descriptor
        self.graph = graph = G.MPSGraph.alloc().init()
        self.placeholders = {}

        def placeholder(name, shape):
            tensor = graph.placeholderWithShape_dataType_name_(list(shape), descriptor.data_type, name)
            self.placeholders[name] = tensor
            if descriptor.compute_data_type != descriptor.data_type:
                tensor = graph.castTensor_toType_name_(tensor, descriptor.compute_data_type, f"{name}_compute")
            return tensor

        if descriptor.op is None:
            y = graph.constantWithScalar_shape_dataType_(0.0, list(descriptor.result_shape),
                                                         descriptor.compute_data_type)
        else:
            source = placeholder("source", descriptor.source_shape)
            weights = placeholder("weights", descriptor.weights_shape)
            d = descriptor.convolution
            op_descriptor = G.MPSGraphConvolution2DOpDescriptor.descriptorWithStrideInX_strideInY_dilationRateInX_dilationRateInY_groups_paddingLeft_paddingRight_paddingTop_paddingBottom_paddingStyle_dataLayout_weightsLayout_(  # noqa: E501
                d.stride_in_x, d.stride_in_y, d.dilation_rate_in_x, d.dilation_rate_in_y, d.groups,
                d.padding_left, d.padding_right, d.padding_top, d.padding_bottom,
                d.padding_style, d.data_layout, d.weights_layout)
            if descriptor.op == "convolution2D":
                y = graph.convolution2DWithSourceTensor_weightsTensor_descriptor_name_(
                    source, weights, op_descriptor, "convolution")
            elif descriptor.op == "convolutionTranspose2D":
                y = graph.convolutionTranspose2DWithSourceTensor_weightsTensor_outputShape_descriptor_name_(
                    source, weights, list(descriptor.output_shape), op_descriptor, "convolution")
            else:
                raise ValueError(f"unknown MPSGraph op {descriptor.op!r}")
            rows, cols = descriptor.tail_padding
            if rows or cols:
                y = graph.padTensor_withPaddingMode_leftPadding_rightPadding_constantValue_name_(
                    y, GRAPH_PADDING_MODE_CONSTANT, [0, 0, 0, 0], [0, rows, cols, 0], 0.0, "tail")
        if descriptor.bias_shape is not None:
            bias = placeholder("bias", descriptor.bias_shape)
            y = graph.additionWithPrimaryTensor_secondaryTensor_name_(y, bias, "add_bias")
        if descriptor.compute_data_type != descriptor.data_type:
            y = graph.castTensor_toType_name_(y, descriptor.data_type, "result")
        self.result = y

    def run(self, source: np.ndarray, weights: Resident, bias: Resident | None) -> np.ndarray:
        ctx, descriptor = context(), self.descriptor
        fed = {"source": None, "weights": weights, "bias": bias}
        if "source" in self.placeholders:
            fed["source"] = resident(source)                  # kept alive until the run returns
        feeds = {tensor: fed[name].tensor_data for name, tensor in self.placeholders.items()}
        results = self.graph.runWithMTLCommandQueue_feeds_targetTensors_targetOperations_(
            ctx.queue, feeds, [self.result], None)
        out = np.empty(descriptor.result_shape, dtype=DTYPE_OF_DATA_TYPE[descriptor.data_type])
        results[self.result].mpsndarray().readBytes_strideBytes_(out, None)
        return out


# ------------------------------------------------------------------------------------------------
# MPSCNN and the direct kernel
# ------------------------------------------------------------------------------------------------

def _check_buffer(name, array, shape, dtype):
    if array is None or tuple(np.shape(array)) != tuple(shape) or np.asarray(array).dtype != np.dtype(dtype):
        got = None if array is None else (np.shape(array), np.asarray(array).dtype)
        raise ValueError(f"the direct kernel's {name} buffer must be {tuple(shape)} {dtype}, got {got}")


_data_source_class = None


def data_source_class():
    """FastdeconvConvolutionDataSource: an NSObject implementing MPSCNNConvolutionDataSource in Python."""
    global _data_source_class
    if _data_source_class is None:
        fw = frameworks()
        objc = fw.objc

        class FastdeconvConvolutionDataSource(fw.Foundation.NSObject,
                                              protocols=[objc.protocolNamed("MPSCNNConvolutionDataSource")]):
            # Python attributes set by make_data_source: _descriptor, _weights (float32 OHWI, kept alive
            # for the pointer), _bias (float32 or None), _label.
            def dataType(self):
                return MPS_DATA_TYPE_FLOAT32

            def descriptor(self):
                return self._descriptor

            def weights(self):
                return self._weights

            def biasTerms(self):
                return self._bias

            def load(self):
                return True

            def purge(self):
                pass

            def label(self):
                return self._label

            def weightsLayout(self):
                return CNN_WEIGHTS_OHWI

            def copyWithZone_(self, zone):
                return self

        _data_source_class = FastdeconvConvolutionDataSource
    return _data_source_class


def make_data_source(descriptor, weights: np.ndarray, bias, label: str):
    ds = data_source_class().alloc().init()
    ds._descriptor = descriptor
    ds._weights = np.ascontiguousarray(weights, dtype=np.float32)
    ds._bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    ds._label = label
    return ds


class CnnRunner:
    """A CnnDescriptor's stage with its weights bound (MPSCNN kernel or direct-kernel buffers); ``run(x)``."""

    def __init__(self, descriptor, weights: np.ndarray, bias):
        ctx = context()
        self.descriptor = descriptor
        stage = descriptor.stage
        if isinstance(stage, DirectKernelDescriptor):
            _check_buffer("weight", weights, stage.weight_shape, stage.dtype)
            _check_buffer("bias", bias, stage.bias_shape, stage.dtype)
            self.pipeline = ctx.pipeline(stage.function)
            self.weights = ctx.buffer(weights)
            self.bias = ctx.buffer(bias)
            self.kernel = None
            return
        MPS = ctx.fw.MPS
        d = stage.convolution
        conv_descriptor = getattr(MPS, d.descriptor_class).cnnConvolutionDescriptorWithKernelWidth_kernelHeight_inputFeatureChannels_outputFeatureChannels_(  # noqa: E501
            d.kernel_width, d.kernel_height, d.input_feature_channels, d.output_feature_channels)
        conv_descriptor.setStrideInPixelsX_(d.stride_in_pixels_x)
        conv_descriptor.setStrideInPixelsY_(d.stride_in_pixels_y)
        conv_descriptor.setDilationRateX_(d.dilation_rate_x)
        conv_descriptor.setDilationRateY_(d.dilation_rate_y)
        conv_descriptor.setGroups_(d.groups)
        if tuple(np.shape(weights)) != stage.weights_shape or (bias is not None) != stage.has_bias:
            raise ValueError(f"weights {np.shape(weights)} / bias {bias is not None} do not match the "
                             f"descriptor's {stage.weights_shape} / {stage.has_bias}")
        self.data_source = make_data_source(conv_descriptor, weights, bias, f"fastdeconv {stage.kernel_class}")
        kernel = getattr(MPS, stage.kernel_class).alloc().initWithDevice_weights_(ctx.device, self.data_source)
        if kernel is None:
            raise RuntimeError(f"{stage.kernel_class} initWithDevice:weights: returned nil for {d}")
        kernel.setOffset_((stage.offset_x, stage.offset_y, 0))                # MPSOffset {x, y, z}
        kernel.setEdgeMode_(stage.edge_mode)
        if stage.kernel_class == "MPSCNNConvolutionTranspose":
            kernel.setKernelOffsetX_(stage.kernel_offset_x)
            kernel.setKernelOffsetY_(stage.kernel_offset_y)
        if kernel.respondsToSelector_("setAccumulatorPrecisionOption:"):
            kernel.setAccumulatorPrecisionOption_(stage.accumulator_precision)
        self.kernel = kernel

    def _images(self, spec, count):
        ctx = context()
        MPS = ctx.fw.MPS
        desc = MPS.MPSImageDescriptor.imageDescriptorWithChannelFormat_width_height_featureChannels_(
            spec.channel_format, spec.width, spec.height, spec.feature_channels)
        return [MPS.MPSImage.alloc().initWithDevice_imageDescriptor_(ctx.device, desc) for _ in range(count)]

    def run(self, x: np.ndarray) -> np.ndarray:
        ctx, stage = context(), self.descriptor.stage
        if isinstance(stage, DirectKernelDescriptor):
            return self._run_direct(ctx, stage, x)
        dtype = DTYPE_OF_IMAGE_FORMAT[stage.source.channel_format]
        sources = self._images(stage.source, stage.batch)
        for index, image in enumerate(sources):
            image.writeBytes_dataLayout_imageIndex_(np.ascontiguousarray(x[index], dtype=dtype),
                                                    stage.source.data_layout, 0)
        destinations = self._images(stage.destination, stage.batch)
        command_buffer = ctx.queue.commandBuffer()
        self.kernel.encodeBatchToCommandBuffer_sourceImages_destinationImages_(command_buffer, sources, destinations)
        ctx.run(command_buffer)
        out_dtype = DTYPE_OF_IMAGE_FORMAT[stage.destination.channel_format]
        out = np.empty(self.descriptor.result_shape, dtype=out_dtype)
        for index, image in enumerate(destinations):
            image.readBytes_dataLayout_imageIndex_(out[index], stage.destination.data_layout, 0)
        return out

    def _run_direct(self, ctx, stage: DirectKernelDescriptor, x: np.ndarray) -> np.ndarray:
        Metal = ctx.fw.Metal
        _check_buffer("x", x, stage.x_shape, stage.dtype)
        x_buffer = ctx.buffer(x)
        y_shape = stage.y_shape
        y_buffer = ctx.device.newBufferWithLength_options_(
            max(int(np.prod(y_shape)) * np.dtype(stage.dtype).itemsize, 1), STORAGE_MODE_SHARED)
        params = struct.pack(f"<{len(stage.params)}i", *stage.params)
        command_buffer = ctx.queue.commandBuffer()
        command_buffer.setLabel_(f"fastdeconv {stage.function} ({stage.reason})")   # shows in GPU captures
        encoder = command_buffer.computeCommandEncoder()
        encoder.setComputePipelineState_(self.pipeline)
        for index, buf in enumerate((x_buffer, self.weights, self.bias, y_buffer)):
            encoder.setBuffer_offset_atIndex_(buf, 0, index)
        encoder.setBytes_length_atIndex_(params, len(params), 4)
        width = min(stage.threads_per_threadgroup, int(self.pipeline.maxTotalThreadsPerThreadgroup()))
        groups = -(-stage.threads // width)
        encoder.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSizeMake(groups, 1, 1),
                                                            Metal.MTLSizeMake(width, 1, 1))
        encoder.endEncoding()
        ctx.run(command_buffer)
        return ctx.read(y_buffer, y_shape, stage.dtype)
