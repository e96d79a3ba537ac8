"""The thin PyObjC layer: turns a descriptor (fastdeconv.metal.descriptors) into Metal calls. macOS only.

Nothing here decides anything: every number comes from the descriptor. Apple's frameworks are
imported on first use (:func:`frameworks`), never when fastdeconv is imported; tests substitute a
fake of PyObjC with :func:`use_frameworks` (tests/metal/test_metal_pyobjc.py: it records every call,
builds the data-source class with PyObjC's own pure-Python class builder from its macOS wheel, and
converts as pyobjc-core's C source does) to check that every descriptor field reaches a Metal call.

Every Objective-C call made here (PyObjC spells ``a:b:c:`` as ``a_b_c_``), and every method the
MPSCNN data source implements, is listed with its PyObjC signature and the macOS version that
introduced it in ``tests/metal/data/pyobjc_selectors.json``, extracted from PyObjC's own metadata by
``scripts/extract_pyobjc_selectors.py``; ``tests/metal/test_metal_selectors.py`` re-reads this file and fails
on a call that is not in the table, has the wrong number of arguments, or needs a newer macOS than
its backend's gate (:data:`fastdeconv.metal._MIN_MACOS`). In short:

* Metal (macOS 10.11+): device, command queue, shared MTLBuffers (``-contents``, an ``objc.varlist``:
  ``.as_buffer(n)``), the library/pipeline of ``conv_transpose.metal``, command buffers, compute and
  blit encoders (``synchronizeResource:`` for a managed buffer the CPU reads).
* MPSGraph (macOS 11.0, ``castTensor:toType:name:`` 12.0): placeholders, casts, the convolution ops,
  ``padTensor:…``, ``additionWithPrimaryTensor:…``, ``constantWithScalar:…``, and
  ``runWithMTLCommandQueue:feeds:targetOperations:resultsDictionary:`` with the result written into
  a shared MTLBuffer of ours.
* MPSCNN (macOS 10.13; ``encodeBatchToCommandBuffer:sourceImages:destinationImages:``,
  ``synchronizeOnCommandBuffer:`` and ``setAccumulatorPrecisionOption:`` 10.13.4): convolution
  descriptors, ``initWithDevice:weights:`` with a Python MPSCNNConvolutionDataSource, kernel
  properties, MPSImages written/read with ``writeBytes:``/``readBytes:dataLayout:imageIndex:``.

How PyObjC converts what crosses the bridge here (pyobjc-core 13.0's C source; file names under
``pyobjc-core/Modules/objc/``):

* A Python method's return value for a pointer type marked ``c_array_of_variable_length`` is turned
  into a tuple (``PySequence_Tuple``: TypeError "Sequence required" otherwise) and each item converted
  with the element type into an autoreleased NSMutableData (``libffi_support.m``, the method stub's
  ``PyObjC_kVariableLengthArray`` case → ``objc_support.m`` ``depythonify_c_return_array_count``);
  ``objc.NULL`` becomes NULL. ``void`` elements have no converter ("depythonifying unknown typespec
  0x76"), so MPS's metadata for ``-weights`` (a variable-length ``^v``) can never be served: see
  :func:`data_source_class` for the override. ``-biasTerms`` returns ``objc.NULL`` (see there).
* A plain ``^v`` (no array flag) converts from a Python int, the address (``objc_support.m``,
  ``depythonify_c_value``, case ``_C_PTR`` with ``type[1] == _C_VOID``); None becomes NULL.
* An output array argument (``type_modifier`` ``o``, variable length: ``readBytes:dataLayout:
  imageIndex:``) needs a buffer object (``libffi_support.m``: "Need explicit buffer for
  variable-length array output argument"); a read-only one is silently copied and the copy written
  (``objc_util.m``, ``PyObjC_PythonToCArray``), so it must be a writable C-contiguous array.
* An input array (``n``: ``writeBytes:…``, ``setBytes:length:atIndex:``) is read through the buffer
  protocol, C-contiguous (``PyObjC_PythonToCArray``); with ``c_array_length_in_arg`` its byte size
  must equal that argument.
* An ``o`` ``^@`` error argument is passed as None and comes back as the second item of a tuple
  (``newLibraryWithSource:options:error:``).

Not verified without a Mac: that PyObjC applies these rules at run time as read here, and the ``@``
arguments given as Python lists and dicts (``MPSShape`` lists, the feeds and results dictionaries),
which PyObjC bridges as NSArray/NSDictionary proxies (tests/metal/test_metal_device.py runs all of it).
"""

from __future__ import annotations

import contextlib
import functools
import struct
from importlib import resources

import numpy as np

from .descriptors import (
    CNN_WEIGHTS_OHWI,
    DTYPE_OF_DATA_TYPE,
    DTYPE_OF_IMAGE_FORMAT,
    GRAPH_PADDING_MODE_CONSTANT,
    MPS_DATA_TYPE,
    DirectKernelDescriptor,
    add_bias_after_readback,
)

STORAGE_MODE_SHARED = 0                 # MTLResourceStorageModeShared (MTLResourceOptions)
MTL_STORAGE_MODE_MANAGED = 1            # MTLStorageModeManaged (-[MTLResource storageMode]), macOS only
MPS_DATA_TYPE_FLOAT32 = MPS_DATA_TYPE[np.dtype(np.float32)]
MSL_SOURCE = "conv_transpose.metal"

_frameworks = None
_context = None


class AppleFrameworks:
    """Metal, MetalPerformanceShaders (``MPS``), objc and Foundation, imported when this is made;
    MetalPerformanceShadersGraph (``MPSGraph``) only on first use, by backend "mps": PyObjC's wrapper of it
    raises ImportError before macOS 11 (``objc/_dyld.py``), and backend "mps-cnn" runs from macOS 10.13.4."""

    def __init__(self):
        import Foundation
        import Metal
        import MetalPerformanceShaders
        import objc

        self.Metal, self.MPS, self.objc, self.Foundation = Metal, MetalPerformanceShaders, objc, Foundation

    @functools.cached_property
    def MPSGraph(self):  # noqa: N802 - named like the framework, as the other attributes
        import MetalPerformanceShadersGraph

        return MetalPerformanceShadersGraph


def frameworks():
    """The :class:`AppleFrameworks` of this process (or the fake a test installed with :func:`use_frameworks`)."""
    global _frameworks
    if _frameworks is None:
        _frameworks = AppleFrameworks()
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

    def new_buffer(self, nbytes: int):
        """An uninitialised shared MTLBuffer of ``nbytes`` (at least 1: Metal has no empty buffer)."""
        buf = self.device.newBufferWithLength_options_(max(int(nbytes), 1), STORAGE_MODE_SHARED)
        if buf is None:
            raise RuntimeError(f"newBufferWithLength:{nbytes} options:StorageModeShared failed")
        return buf

    def buffer(self, array: np.ndarray):
        """A shared MTLBuffer holding a copy of ``array``."""
        array = np.ascontiguousarray(array)
        buf = self.new_buffer(array.nbytes)
        # -contents is a variable-length ``^v`` (Metal's metadata): PyObjC returns an objc.varlist, whose
        # as_buffer(n) is a writable memoryview of n bytes (pyobjc-core varlist.m).
        view = np.frombuffer(buf.contents().as_buffer(max(array.nbytes, 1)), dtype=np.uint8)
        view[: array.nbytes] = array.reshape(-1).view(np.uint8)
        return buf

    def read(self, buf, shape, dtype) -> np.ndarray:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return np.frombuffer(buf.contents().as_buffer(nbytes), dtype=dtype).reshape(shape).copy()

    def synchronize_for_cpu(self, command_buffer, images=(), buffers=()):
        """Encode, into ``command_buffer`` (before its commit), what makes the GPU's writes to
        ``images`` (MPSImages) and ``buffers`` (MTLBuffers) visible to the CPU.

        MPSImage.h: an MPSImage's texture is MTLStorageModeManaged by default on macOS, and
        ``synchronizeOnCommandBuffer:`` is "necessary for all MTLStorageModeManaged resources" before
        the CPU reads them (discrete GPUs keep a separate copy); on unified memory it does nothing.
        A managed MTLBuffer needs a blit ``synchronizeResource:`` (MTLBlitCommandEncoder.h); a shared
        one (what :meth:`buffer` makes) is coherent once the command buffer completes, so it is
        skipped: its storage mode is asked, not assumed.
        """
        for image in images:
            image.synchronizeOnCommandBuffer_(command_buffer)
        managed = [buf for buf in buffers if int(buf.storageMode()) == MTL_STORAGE_MODE_MANAGED]
        if managed:
            blit = command_buffer.blitCommandEncoder()
            for buf in managed:
                blit.synchronizeResource_(buf)
            blit.endEncoding()

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


def tensor_data(buf, shape, data_type):
    """MPSGraphTensorData over the MTLBuffer ``buf`` (no copy)."""
    return context().fw.MPSGraph.MPSGraphTensorData.alloc().initWithMTLBuffer_shape_dataType_(
        buf, list(shape), data_type)


class Resident:
    """An array copied once into an MTLBuffer and wrapped as MPSGraphTensorData (e.g. a layer's weights)."""

    def __init__(self, array: np.ndarray):
        self.shape, self.data_type = tuple(array.shape), MPS_DATA_TYPE[array.dtype]
        self.buffer = context().buffer(array)
        self.tensor_data = tensor_data(self.buffer, self.shape, self.data_type)


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
        # The result is written into a shared MTLBuffer of ours (resultsDictionary), not read from an
        # MPSNDArray that MPSGraph allocates: a shared buffer is coherent for the CPU once the
        # (synchronous) run returns, whatever the GPU, so no synchronization is needed.
        dtype = DTYPE_OF_DATA_TYPE[descriptor.data_type]
        out_buffer = ctx.new_buffer(int(np.prod(descriptor.result_shape)) * dtype.itemsize)
        out = tensor_data(out_buffer, descriptor.result_shape, descriptor.data_type)
        self.graph.runWithMTLCommandQueue_feeds_targetOperations_resultsDictionary_(
            ctx.queue, feeds, None, {self.result: out})
        return ctx.read(out_buffer, descriptor.result_shape, dtype)


# ------------------------------------------------------------------------------------------------
# MPSCNN and the direct kernel
# ------------------------------------------------------------------------------------------------

def _check_buffer(name, array, shape, dtype):
    if array is None or tuple(np.shape(array)) != tuple(shape) or np.asarray(array).dtype != np.dtype(dtype):
        got = None if array is None else (np.shape(array), np.asarray(array).dtype)
        raise ValueError(f"the direct kernel's {name} buffer must be {tuple(shape)} {dtype}, got {got}")


_data_source_class = None

#: The PyObjC metadata this module registers, process-wide, for ``-[<MPSCNNConvolutionDataSource> weights]``
#: before it creates its data source class. MPS's own (MetalPerformanceShaders/_metadata.py, registered
#: when MetalPerformanceShaders is imported) is ``{"required": True, "retval": {"type": b"^v",
#: "c_array_of_variable_length": True}}``, a variable-length array of ``void``, which no Python value can
#: fill (see the module docstring); without the array flag, a plain ``^v`` return takes an int address.
WEIGHTS_METADATA = {"required": True, "retval": {"type": b"^v"}}


def register_weights_metadata(objc):
    """Register :data:`WEIGHTS_METADATA` for ``weights`` (idempotent; must precede the class statement).

    PyObjC rules followed (pyobjc-core ``Modules/objc/``):

    * ``registry.m`` ``PyObjC_FindInRegistry`` resolves the class of every registration with
      ``objc_lookUpClass`` and skips names the runtime does not know yet; a Python class is not in the
      runtime while its methods are being built, so a registration under its own name would be
      skipped. The registration is therefore made on ``NSObject``, the class MPS's metadata uses for
      protocol methods, and being the same (class, selector) key it *replaces* MPS's
      (``PyObjC_AddToRegistry``: "if so replace that registration"): it must come after
      ``import MetalPerformanceShaders`` (done by :func:`frameworks`).
    * The method's stub (libffi closure) is built from the signature in force when the class is
      created (``libffi_support.m``, the closure built per method), so it must come before the class.
    * Process-wide: any other Python ``weights`` implementation in this process returns a plain ``^v``
      too. Under MPS's metadata none could return data (only ``objc.NULL``, which still becomes NULL:
      the stub tests for ``PyObjC_NULL`` before the pointer kind), so no working code is changed.
    """
    objc.registerMetaDataForSelector(b"NSObject", b"weights", WEIGHTS_METADATA)


def data_source_class():
    """FastdeconvConvolutionDataSource: an NSObject implementing MPSCNNConvolutionDataSource in Python.

    Instances carry Python attributes set by :func:`make_data_source`: ``_descriptor`` (the
    MPSCNNConvolutionDescriptor), ``_weights`` (float32 OHWI, C-contiguous) and ``_label``. The array
    lives as long as the data source, and the :class:`CnnRunner` keeps the data source as long as its
    kernel: MPS reads the weights through the returned address during ``initWithDevice:weights:`` and
    may ask again (``load``/``weights`` after ``purge``).

    How PyObjC builds the class (pyobjc-core ``Lib/objc/_transform.py``, ``transformAttribute`` and
    ``validate_protocols``; tests/metal/test_metal_pyobjc.py runs that very file on this class):
    a method takes its signature and class-method status from a method of the same name NSObject
    already has, before the protocol is consulted, and the protocol's required methods must then be
    instance methods of the protocol's signature.
    """
    global _data_source_class
    if _data_source_class is None:
        fw = frameworks()
        objc = fw.objc
        register_weights_metadata(objc)
        protocol = objc.protocolNamed("MPSCNNConvolutionDataSource")

        class FastdeconvConvolutionDataSource(fw.Foundation.NSObject, protocols=[protocol]):
            def dataType(self):
                return MPS_DATA_TYPE_FLOAT32

            def descriptor(self):
                return self._descriptor

            def weights(self):
                # A plain ``^v`` under WEIGHTS_METADATA: the int address of the array this object owns
                # (objc_support.m, depythonify_c_value: ``_C_PTR`` to ``void`` from an unsigned long).
                return self._weights.ctypes.data

            def biasTerms(self):
                # Always NULL: CnnRunner.run adds the bias to the images read back. An array would need
                # MPS's variable-length ``^f`` metadata on this method, which PyObjC may not apply to a
                # class built with protocols= (the metadata of a selector made before its class exists
                # is looked up with no class); as a plain ``^f`` an array fails. objc.NULL becomes NULL
                # before the pointer kind is looked at (libffi_support.m, the method stub), so it is
                # right either way; None would not be (TypeError "Sequence required" under the array
                # metadata).
                return objc.NULL

            def load(self):
                return True

            # NSObject has a class method +load (v@:), whose signature and class-method status a plain
            # ``def load`` would inherit, failing the protocol check ("no implementation for instance
            # method 'load'"). The protocol's own encoding is asked for: BOOL is ``B`` on arm64, ``c``
            # on x86_64.
            load = objc.selector(load, selector=b"load", signature=protocol.descriptionForInstanceMethod_(b"load")[1],
                                 isClassMethod=False)

            def purge(self):
                pass   # the weights stay: MPS may load again, and they are small next to the kernel

            def label(self):
                return self._label

            def weightsLayout(self):
                return CNN_WEIGHTS_OHWI

            def copyWithZone_(self, zone):
                return self   # immutable; PyObjC retains the result of a copy… method for the caller

        _data_source_class = FastdeconvConvolutionDataSource
    return _data_source_class


def make_data_source(descriptor, weights: np.ndarray, label: str):
    ds = data_source_class().alloc().init()
    ds._descriptor = descriptor
    ds._weights = np.ascontiguousarray(weights, dtype=np.float32)
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
        self.data_source = make_data_source(conv_descriptor, weights, f"fastdeconv {stage.kernel_class}")
        self.bias_after_readback = bias        # biasTerms is NULL: see data_source_class
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
        ctx.synchronize_for_cpu(command_buffer, images=destinations)
        ctx.run(command_buffer)
        out_dtype = DTYPE_OF_IMAGE_FORMAT[stage.destination.channel_format]
        out = np.empty(self.descriptor.result_shape, dtype=out_dtype)
        for index, image in enumerate(destinations):
            image.readBytes_dataLayout_imageIndex_(out[index], stage.destination.data_layout, 0)
        return add_bias_after_readback(out, self.bias_after_readback)

    def _run_direct(self, ctx, stage: DirectKernelDescriptor, x: np.ndarray) -> np.ndarray:
        Metal = ctx.fw.Metal
        _check_buffer("x", x, stage.x_shape, stage.dtype)
        x_buffer = ctx.buffer(x)
        y_shape = stage.y_shape
        y_buffer = ctx.new_buffer(int(np.prod(y_shape)) * np.dtype(stage.dtype).itemsize)
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
        ctx.synchronize_for_cpu(command_buffer, buffers=[y_buffer])
        ctx.run(command_buffer)
        return ctx.read(y_buffer, y_shape, stage.dtype)
