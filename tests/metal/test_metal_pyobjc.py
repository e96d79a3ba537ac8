"""fastdeconv/metal/pyobjc_layer.py against an honest fake of PyObjC and Metal (any platform, no PyObjC).

What PyObjC itself decides comes from PyObjC's own files (tests/metal/pyobjc_runtime.py, over the macOS
wheels of tests/metal/pyobjc_wheels.py): the data-source class is built by pyobjc-core's
``objc/_transform.py`` (signatures and class-method status inherited from NSObject, protocol signatures,
``validate_protocols``); the metadata registered is what importing Foundation, Metal and
MetalPerformanceShaders registers (their ``_metadata.py``); what a Python method returns to Objective-C is
converted as pyobjc-core's method stub does (``pyobjc_runtime.return_to_objc``, with the C source lines).
Without the wheels these tests skip, or fail where they were expected ($CI).

The rest of the fake records every message (selector, arguments, receiver) in order and checks each
against tests/metal/data/pyobjc_selectors.json (PyObjC's metadata, see scripts/extract_pyobjc_selectors.py),
with PyObjC's argument rules (pyobjc-core 13.0, ``Modules/objc/``):

* a selector not in the table raises AttributeError, a wrong number of arguments or a keyword TypeError;
* integers (``q``/``Q``/``I``…) must be integral (PyObjC would truncate a float with PyNumber_Long),
  unsigned ones >= 0; structs are sequences of their fields;
* an output array (type modifier ``o``, variable length) must be a writable C-contiguous buffer
  ("Need explicit buffer for variable-length array output argument"; a read-only one would be copied
  and the result lost: ``objc_util.m`` ``PyObjC_PythonToCArray``); an input array (``n``) a
  C-contiguous buffer, whose byte size equals the ``c_array_length_in_arg`` argument when there is one;
* an ``o`` ``^@`` (NSError **) is passed as None and returned as the second item of a tuple.

The fake MPS asks the data source what MPS asks (``load``, ``dataType``, ``descriptor``, ``weights``,
``biasTerms``, then ``purge``), each answer converted as PyObjC would, and reads the weights through the
address (ctypes), as MPS would. Whether PyObjC applies registered metadata to the methods of a class built
with ``protocols=`` is open (pyobjc_runtime.method_return_type): :class:`World` takes either answer.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from fastdeconv import metal
from fastdeconv.metal import descriptors, pyobjc_layer
from helpers import Case
import pyobjc_wheels
from pyobjc_runtime import QUALIFIERS, NULL_type, load_pyobjc, method_return_type, return_to_objc

TABLE = json.loads((Path(__file__).parent / "data" / "pyobjc_selectors.json").read_text(encoding="utf-8"))
INTEGER_CODES = set("cCsSiIlLqQ")


def _plain(typestr: str) -> str:
    return typestr.lstrip(QUALIFIERS)


def _struct_fields(typestr: str) -> str:
    """``{MPSOffset=qqq}`` → ``qqq``."""
    return typestr[typestr.index("=") + 1:-1]


# --------------------------------------------------------------------------------------------------
# PyObjC's conversion rules
# --------------------------------------------------------------------------------------------------


def _buffer(value, writable: bool, what: str) -> memoryview:
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"{what}: Need explicit buffer for variable-length array output argument"
                        if writable else f"{what}: expecting a buffer, got {type(value).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what}: the buffer is not C-contiguous (PyBUF_CONTIG fails)")
    if writable and view.readonly:
        raise ValueError(f"{what}: a read-only buffer for an output array: PyObjC would write into a copy and the "
                         "result would be lost")
    return view


def convert_argument(value, typestr: str, meta: dict, args: tuple, what: str):
    """What PyObjC makes of ``value`` passed for an argument of ``typestr`` with metadata ``meta``."""
    code = _plain(meta.get("type", typestr))
    modifier = meta.get("type_modifier")
    if isinstance(value, NULL_type):                                      # objc.NULL
        return None
    if code.startswith("^") and (meta.get("c_array_of_variable_length") or "c_array_length_in_arg" in meta):
        if modifier == "o":
            return _buffer(value, True, what)
        view = _buffer(value, False, what)
        if "c_array_length_in_arg" in meta:
            count = args[meta["c_array_length_in_arg"] - 2]
            if view.nbytes != count:
                raise ValueError(f"{what}: Requesting buffer of {count}, have buffer of {view.nbytes}")
        return view
    if code == "^@" and modifier == "o":
        if value is not None:
            raise ValueError(f"{what}: an output argument: pass None")
        return None
    if code[0] in INTEGER_CODES:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{what}: depythonifying '{code}', got {type(value).__name__} {value!r} (PyObjC would "
                             "truncate a non-integer)")
        if code[0].isupper() and value < 0:
            raise ValueError(f"{what}: a negative value {value} for an unsigned '{code}'")
        return int(value)
    if code[0] in "fd":
        if isinstance(value, (bytes, str)) or not isinstance(value, (int, float, np.number)):
            raise ValueError(f"{what}: depythonifying '{code}', got {type(value).__name__}")
        return float(value)
    if code[0] == "Z":
        return bool(value)
    if code[0] == ":":
        if not isinstance(value, str):
            raise ValueError(f"{what}: a selector (str) expected, got {type(value).__name__}")
        return value
    if code[0] == "{":
        fields = _struct_fields(code)
        if not isinstance(value, (tuple, list)) or len(value) != len(fields):
            raise ValueError(f"{what}: the struct {code} needs a sequence of {len(fields)} fields, got {value!r}")
        return tuple(convert_argument(v, f, {}, args, what) for v, f in zip(value, fields))
    if code[0] == "^":
        if value is None or isinstance(value, int):
            return value
        raise ValueError(f"{what}: depythonifying 'pointer', got '{type(value).__name__}'")
    return value                                                           # '@': any object is bridged


def selector_spec(selector: str):
    """(argument typestrs, argument metadata by position, return typestr, return metadata) from the table."""
    entry = TABLE["selectors"][selector]
    meta = entry["pyobjc_metadata"] or {}
    args_meta = meta.get("arguments", {})
    return ([a["typestr"] for a in entry["args"]], [args_meta.get(str(i + 2), {}) for i in range(entry["arguments"])],
            entry["retval"]["typestr"], meta.get("retval", {}))


# --------------------------------------------------------------------------------------------------
# The fake world: objects, frameworks, objc
# --------------------------------------------------------------------------------------------------


class World:
    """The state of one fake Metal session; ``log`` is every message in order: (selector, args, receiver).

    ``objc`` and ``NSObject`` are PyObjC's (pyobjc_runtime.load_pyobjc) for ``arch`` ("arm64" or
    "x86_64": the protocol's BOOL encoding differs); ``metadata_applies`` says whether the metadata
    registered for a data-source method reaches it (open: see pyobjc_runtime.method_return_type)."""

    def __init__(self, buffer_storage_mode: int | None = None, metadata_applies: bool = True, arch: str = "arm64"):
        self.log: list[tuple[str, tuple, object]] = []
        self.buffer_storage_mode = buffer_storage_mode      # None: what the options ask for
        self.objc, self.NSObject = load_pyobjc(pyobjc_wheels.wheels_folder(), TABLE, arch)
        self.metadata_applies = metadata_applies
        self.data_source_reads: list[dict] = []

    def frameworks(self):
        return types.SimpleNamespace(Metal=Framework(self, "Metal"), MPS=Framework(self, "MetalPerformanceShaders"),
                                     MPSGraph=Framework(self, "MetalPerformanceShadersGraph"), objc=self.objc,
                                     Foundation=types.SimpleNamespace(NSObject=self.NSObject))

    def call_from_objc(self, receiver, selector: str):
        """Objective-C sending ``selector`` (no arguments) to a Python object: its result as PyObjC converts it."""
        cls = type(receiver)
        method = cls.objc_method(selector.encode())
        what = f"-[{cls.__name__} {selector}]"
        if method is None:
            raise AssertionError(f"{what}: unrecognized selector sent to instance (no instance method)")
        rettype, meta = method_return_type(method, self.objc, cls, self.metadata_applies)
        return return_to_objc(method.callable(receiver), rettype, meta, self.objc, what)

    def calls(self, selector):
        return [(args, receiver) for name, args, receiver in self.log if name == selector]

    def send(self, receiver, python_name, args, kwargs):
        selector = python_name.replace("_", ":")
        if selector not in TABLE["selectors"]:
            raise AttributeError(f"{receiver!r} has no selector {selector!r} (not in PyObjC's metadata table)")
        if kwargs:
            raise TypeError(f"{selector}: Objective-C selectors take no keyword arguments")
        types_, metas, rettype, retmeta = selector_spec(selector)
        if len(args) != len(types_):
            raise TypeError(f"{selector}: Need {len(types_)} arguments, got {len(args)}")
        converted = tuple(convert_argument(a, t, m, args, f"{selector} argument {i + 1}")
                          for i, (a, t, m) in enumerate(zip(args, types_, metas)))
        self.log.append((python_name, args, receiver))
        behaviour = BEHAVIOUR.get(selector)
        result = behaviour(self, receiver, args, converted) if behaviour else FakeObject(
            self, f"{receiver.cls}.{python_name}()")
        outs = [i for i, m in enumerate(metas) if m.get("type_modifier") == "o"]
        if outs and _plain(rettype) != "v":
            return result if isinstance(result, tuple) else (result, *(None for _ in outs))
        return result


class FakeObject:
    """A PyObjC proxy: attributes are selectors, sent through World.send."""

    def __init__(self, world, cls, **state):
        self._world, self.cls = world, cls
        self.__dict__.update(state)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._world.send(self, name, args, kwargs)

    def __repr__(self):
        return f"<fake {self.cls}>"


class Framework:
    """A framework module: its classes (alloc, class methods) and C functions, from the table."""

    def __init__(self, world, name):
        self._world, self._name = world, name

    def __getattr__(self, name):
        if name in TABLE["classes"]:
            return FakeObject(self._world, name, is_class=True)
        if name in TABLE["functions"]:
            def function(*args):
                if len(args) != TABLE["functions"][name]["arguments"]:
                    expected = TABLE["functions"][name]["arguments"]
                    raise TypeError(f"{name}() takes {expected} arguments, got {len(args)}")
                self._world.log.append((name, args, self))
                return FUNCTIONS[name](self._world, *args)
            return function
        raise AttributeError(f"{self._name} has no attribute {name!r} in the table")


class FakeProtocol:
    def __init__(self, name):
        self.name = name


class Buffer(FakeObject):
    def __init__(self, world, length, storage_mode):
        super().__init__(world, "MTLBuffer", storage_mode=storage_mode)
        self.memory = bytearray(length)


class VarList:
    """objc.varlist over a buffer's memory (what -contents returns): as_buffer(n) is a writable memoryview."""

    def __init__(self, buffer):
        self._buffer = buffer

    def as_buffer(self, count):
        if count > len(self._buffer.memory):
            raise AssertionError(f"as_buffer({count}) beyond the MTLBuffer's {len(self._buffer.memory)} bytes")
        return memoryview(self._buffer.memory)[:count]


def _not_committed(command_buffer, selector):
    if getattr(command_buffer, "committed", False):
        raise AssertionError(f"{selector} on a command buffer already committed")


def _image_nbytes(image):
    spec = image.spec
    itemsize = np.dtype(descriptors.DTYPE_OF_IMAGE_FORMAT[spec["format"]]).itemsize
    return spec["width"] * spec["height"] * spec["channels"] * itemsize


def _init_kernel(world, kernel, args, converted):
    """MPS's -initWithDevice:weights:: asks the data source, reads the weights through the pointer."""
    source = args[1]
    read = {name: world.call_from_objc(source, name) for name in ("load", "dataType", "descriptor")}
    d = read["descriptor"].params
    groups = d["input_feature_channels"] if d["class"] == "MPSCNNDepthWiseConvolutionDescriptor" else d.get("groups", 1)
    count = (d["output_feature_channels"] * d["kernel_height"] * d["kernel_width"]
             * (d["input_feature_channels"] // groups))
    address = world.call_from_objc(source, "weights")
    if address is None:
        raise AssertionError("the data source's weights is NULL")
    read["weights"] = np.frombuffer(ctypes.string_at(address, count * 4), dtype=np.float32).copy()
    bias = world.call_from_objc(source, "biasTerms")
    if bias is not None and len(bias) != d["output_feature_channels"]:
        raise AssertionError(f"biasTerms has {len(bias)} values, MPS reads {d['output_feature_channels']}")
    read["bias"] = bias
    read["purge"] = world.call_from_objc(source, "purge")
    # MPS may purge and load again (e.g. under memory pressure): the weights must still be there.
    if not world.call_from_objc(source, "load"):                          # BOOL: True, or 1 where it is a char
        raise AssertionError("the data source's load returned NO after a purge")
    again = np.frombuffer(ctypes.string_at(world.call_from_objc(source, "weights"), count * 4), dtype=np.float32)
    if not np.array_equal(again, read["weights"]):
        raise AssertionError("the data source serves other weights after purge and load")
    world.data_source_reads.append(read)
    kernel.data_source = source
    return kernel


def _descriptor_factory(world, cls, args, converted):
    return FakeObject(world, cls.cls, params=dict(zip(
        ("kernel_width", "kernel_height", "input_feature_channels", "output_feature_channels"), converted),
        **{"class": cls.cls}))


def _set_groups(world, descriptor, args, converted):
    descriptor.params["groups"] = converted[0]


def _image_descriptor(world, cls, args, converted):
    return FakeObject(world, "MPSImageDescriptor",
                      spec=dict(zip(("format", "width", "height", "channels"), converted)))


def _new_image(world, image, args, converted):
    image.spec = args[1].spec
    image.memory = bytearray(_image_nbytes(image))
    return image


def _write_bytes(world, image, args, converted):
    view = converted[0]
    if view.nbytes != len(image.memory):
        raise AssertionError(f"writeBytes: {view.nbytes} bytes for an image of {len(image.memory)}")
    image.memory[:] = view.cast("B")


def _read_bytes(world, image, args, converted):
    view = converted[0]
    if view.nbytes != len(image.memory):
        raise AssertionError(f"readBytes: a buffer of {view.nbytes} bytes for an image of {len(image.memory)}")
    view.cast("B")[:] = image.memory
    return args[0]


def _encode_batch(world, kernel, args, converted):
    _not_committed(args[0], "encodeBatchToCommandBuffer:sourceImages:destinationImages:")
    if len(args[1]) != len(args[2]):
        raise AssertionError("source and destination batches differ in length")


def _synchronize_image(world, image, args, converted):
    _not_committed(args[0], "synchronizeOnCommandBuffer:")


def _commit(world, command_buffer, args, converted):
    _not_committed(command_buffer, "commit")
    command_buffer.committed = True


def _wait(world, command_buffer, args, converted):
    if not getattr(command_buffer, "committed", False):
        raise AssertionError("waitUntilCompleted before commit")


def _encoder(kind):
    def make(world, command_buffer, args, converted):
        _not_committed(command_buffer, kind)
        return FakeObject(world, kind, command_buffer=command_buffer)
    return make


def _new_buffer(world, device, args, converted):
    length, options = converted
    mode = world.buffer_storage_mode if world.buffer_storage_mode is not None else (options >> 4) & 0xF
    return Buffer(world, length, mode)


BEHAVIOUR = {
    "newCommandQueue": lambda w, r, a, c: FakeObject(w, "MTLCommandQueue"),
    "commandBuffer": lambda w, r, a, c: FakeObject(w, "MTLCommandBuffer", committed=False),
    "newBufferWithLength:options:": _new_buffer,
    "contents": lambda w, r, a, c: VarList(r),
    "storageMode": lambda w, r, a, c: r.storage_mode,
    "newLibraryWithSource:options:error:": lambda w, r, a, c: (FakeObject(w, "MTLLibrary"), None),
    "newFunctionWithName:": lambda w, r, a, c: FakeObject(w, "MTLFunction"),
    "newComputePipelineStateWithFunction:error:": lambda w, r, a, c: (FakeObject(w, "MTLComputePipelineState"), None),
    "maxTotalThreadsPerThreadgroup": lambda w, r, a, c: 1024,
    "computeCommandEncoder": _encoder("MTLComputeCommandEncoder"),
    "blitCommandEncoder": _encoder("MTLBlitCommandEncoder"),
    "commit": _commit,
    "waitUntilCompleted": _wait,
    "error": lambda w, r, a, c: None,
    "respondsToSelector:": lambda w, r, a, c: True,
    "name": lambda w, r, a, c: "Fake Metal device",
    "alloc": lambda w, r, a, c: FakeObject(w, r.cls),
    "init": lambda w, r, a, c: r,
    "initWithMTLBuffer:shape:dataType:": lambda w, r, a, c: (setattr(r, "buffer", a[0]), r)[1],
    "cnnConvolutionDescriptorWithKernelWidth:kernelHeight:inputFeatureChannels:outputFeatureChannels:":
        _descriptor_factory,
    "setGroups:": _set_groups,
    "initWithDevice:weights:": _init_kernel,
    "imageDescriptorWithChannelFormat:width:height:featureChannels:": _image_descriptor,
    "initWithDevice:imageDescriptor:": _new_image,
    "writeBytes:dataLayout:imageIndex:": _write_bytes,
    "readBytes:dataLayout:imageIndex:": _read_bytes,
    "encodeBatchToCommandBuffer:sourceImages:destinationImages:": _encode_batch,
    "synchronizeOnCommandBuffer:": _synchronize_image,
}

FUNCTIONS = {
    "MTLCreateSystemDefaultDevice": lambda world: FakeObject(world, "MTLDevice"),
    "MTLSizeMake": lambda world, *size: tuple(convert_argument(v, "Q", {}, (), "MTLSizeMake") for v in size),
    "MPSSupportsMTLDevice": lambda world, device: True,
}


def run_layer(descriptor, inputs, world=None):
    """Run ``descriptor`` through pyobjc_layer on a fresh fake world; (world, result)."""
    world = world or World()
    with pyobjc_layer.use_frameworks(world.frameworks()):
        w, b, x = inputs
        if isinstance(descriptor, descriptors.GraphDescriptor):
            result = pyobjc_layer.GraphRunner(descriptor).run(x, pyobjc_layer.resident(w), pyobjc_layer.resident(b))
        else:
            result = pyobjc_layer.CnnRunner(descriptor, w, b).run(x)
    return world, result


def cnn_case(case, force_direct=False):
    x, w, b = case.arrays()
    g = case.geometry(x, w)
    descriptor = descriptors.cnn_descriptor(g, case.result_dtype, b is not None, force_direct=force_direct)
    return descriptor, (descriptors.cnn_weights(descriptor, w, g.groups),
                        descriptors.cnn_bias(descriptor, b, g.out_channels), np.ascontiguousarray(x, case.result_dtype))


def graph_case(case):
    x, w, b = case.arrays()
    g = case.geometry(x, w)
    dtype = case.result_dtype
    descriptor = descriptors.graph_descriptor(g, dtype, b is not None)
    return descriptor, (descriptors.graph_weights(w, dtype), descriptors.graph_bias(b, g.out_channels, dtype),
                        np.ascontiguousarray(x, dtype))


TRANSPOSE = Case(dtype="float32", op="t", c_in=4, c_out=8, stride=2, padding=1, output_padding=1, n=2)


# --------------------------------------------------------------------------------------------------
# 1. The data source as PyObjC serves it
# --------------------------------------------------------------------------------------------------


def old_data_source_class(fw):
    """The data-source class statement as it was before issue 29 (kept to show that PyObjC rejects it):
    a plain ``def load`` and a ``biasTerms`` that returns the bias array."""
    objc = fw.objc

    class FastdeconvConvolutionDataSource(fw.Foundation.NSObject,
                                          protocols=[objc.protocolNamed("MPSCNNConvolutionDataSource")]):
        def dataType(self):
            return pyobjc_layer.MPS_DATA_TYPE_FLOAT32

        def descriptor(self):
            return self._descriptor

        def weights(self):
            return self._weights.ctypes.data

        def biasTerms(self):
            return objc.NULL if self._bias is None else self._bias

        def load(self):
            return True

        def purge(self):
            pass

        def label(self):
            return self._label

        def weightsLayout(self):
            return descriptors.CNN_WEIGHTS_OHWI

        def copyWithZone_(self, zone):
            return self

    return FastdeconvConvolutionDataSource


@pytest.mark.parametrize("arch", ["arm64", "x86_64"])
def test_pyobjc_rejects_the_old_load(arch):
    """PyObjC's _transform.py gives ``def load`` NSObject's +load (a class method, v@:), so the protocol's
    instance method -load is missing: the class statement raises on a Mac (issue 29)."""
    world = World(arch=arch)
    with pytest.raises(TypeError, match="does not fully implemented protocol 'MPSCNNConvolutionDataSource': no "
                                        "implementation for instance method 'load'"):
        old_data_source_class(world.frameworks())


@pytest.mark.parametrize("arch", ["arm64", "x86_64"])
def test_pyobjc_builds_the_data_source(arch):
    """Every method MPS calls is an instance method with the protocol's encoding (BOOL is B on arm64, c on
    x86_64), and no protocol method became a class method."""
    world = World(arch=arch)
    with pyobjc_layer.use_frameworks(world.frameworks()):
        cls = pyobjc_layer.data_source_class()
    protocol = world.objc.protocolNamed("MPSCNNConvolutionDataSource")
    for name in ("dataType", "descriptor", "weights", "biasTerms", "load", "purge", "label", "weightsLayout"):
        method = cls.objc_method(name.encode())
        assert method is not None and not method.isClassMethod, name
        assert method.signature == protocol.descriptionForInstanceMethod_(name.encode())[1], name
    assert cls.objc_method(b"load").signature == {"arm64": b"B@:", "x86_64": b"c@:"}[arch]
    assert not cls.__objc_class_methods__
    assert cls.objc_method(b"copyWithZone:").signature == b"@@:^{_NSZone=}"     # NSObject's, as an instance method


@pytest.mark.parametrize("metadata_applies", [True, False], ids=["metadata", "no-metadata"])
@pytest.mark.parametrize("case", [TRANSPOSE, Case(op="c", c_in=3, c_out=3, groups=3, dtype="float16"),
                                  Case(op="c", c_in=8, c_out=8, groups=2, kernel=(2, 3), dtype="float32")],
                         ids=["transpose", "depthwise", "grouped"])
def test_mps_reads_the_weights_through_the_returned_address(case, metadata_applies):
    descriptor, inputs = cnn_case(case)
    assert isinstance(descriptor.stage, descriptors.CnnKernelDescriptor)
    world, result = run_layer(descriptor, inputs, World(metadata_applies=metadata_applies))
    (read,) = world.data_source_reads
    assert np.array_equal(read["weights"], inputs[0].ravel()), "MPS would read other weights than the descriptor's"
    assert read["bias"] is None, "biasTerms must be NULL: the bias is added after the read-back"
    assert read["load"] is True and read["dataType"] == descriptors.MPS_DATA_TYPE[np.dtype(np.float32)]
    # the fake MPS leaves its destination images zero: what comes back is the bias alone
    expected = np.zeros(descriptor.result_shape, np.float32) + (0 if inputs[1] is None else inputs[1])
    assert np.array_equal(result, expected.astype(result.dtype))


@pytest.mark.parametrize("metadata_applies", [True, False], ids=["metadata", "no-metadata"])
def test_a_bias_array_would_fail_where_the_metadata_does_not_apply(metadata_applies):
    """What the old biasTerms returned, an array, converts only under MPS's variable-length ``^f``
    metadata; as a plain ``^f`` it is refused. objc.NULL (what biasTerms returns now) passes either way."""
    world = World(metadata_applies=metadata_applies)
    with pyobjc_layer.use_frameworks(world.frameworks()):
        cls = pyobjc_layer.data_source_class()
    rettype, meta = method_return_type(cls.objc_method(b"biasTerms"), world.objc, cls, metadata_applies)
    bias, what = np.arange(4, dtype=np.float32), "-[FastdeconvConvolutionDataSource biasTerms]"
    if metadata_applies:
        assert np.array_equal(return_to_objc(bias, rettype, meta, world.objc, what), bias)
    else:
        with pytest.raises(ValueError, match="depythonifying 'pointer', got 'ndarray'"):
            return_to_objc(bias, rettype, meta, world.objc, what)
    assert return_to_objc(world.objc.NULL, rettype, meta, world.objc, what) is None


def test_the_weights_metadata_is_registered_on_nsobject_before_the_class():
    """MPS's own metadata (in the table) makes ``weights`` a variable-length ``^v``, which nothing can fill;
    the override registered before the class makes it a plain ``^v``, an int address."""
    assert TABLE["selectors"]["weights"]["pyobjc_metadata"]["retval"] == {"c_array_of_variable_length": True,
                                                                          "type": "^v"}
    world = World()
    with pyobjc_layer.use_frameworks(world.frameworks()):
        cls = pyobjc_layer.data_source_class()
    assert world.objc.registrations == [(b"NSObject", b"weights", pyobjc_layer.WEIGHTS_METADATA)]
    assert method_return_type(cls.objc_method(b"weights"), world.objc, cls, True) == ("^v", {"type": b"^v"})
    assert method_return_type(cls.objc_method(b"biasTerms"), world.objc, cls, True) == (
        "^f", {"c_array_of_variable_length": True, "type": b"^f"})


def test_the_data_source_keeps_its_weights_alive():
    """The address stays valid as long as the runner (and its kernel) lives: the data source owns the array."""
    descriptor, inputs = cnn_case(TRANSPOSE)
    world = World()
    with pyobjc_layer.use_frameworks(world.frameworks()):
        runner = pyobjc_layer.CnnRunner(descriptor, inputs[0].copy(), inputs[1])
        address = world.call_from_objc(runner.data_source, "weights")
        assert address == runner.data_source._weights.ctypes.data
        assert runner.kernel.data_source is runner.data_source
        again = np.frombuffer(ctypes.string_at(address, inputs[0].nbytes), dtype=np.float32)
        assert np.array_equal(again, inputs[0].ravel())


def test_mps_cnn_never_imports_mpsgraph(monkeypatch):
    """PyObjC's MetalPerformanceShadersGraph raises ImportError before macOS 11 (objc/_dyld.py), where
    backend "mps-cnn" (macOS 10.13.4+) must still run: the frameworks import it only when "mps" asks."""
    for name in ("Foundation", "Metal", "MetalPerformanceShaders", "objc"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "MetalPerformanceShadersGraph", None)       # importing it raises ImportError
    apple = pyobjc_layer.AppleFrameworks()
    assert apple.MPS is sys.modules["MetalPerformanceShaders"]
    with pytest.raises(ImportError):
        apple.MPSGraph
    world = World()
    fw = world.frameworks()
    del fw.MPSGraph
    descriptor, inputs = cnn_case(TRANSPOSE)
    with pyobjc_layer.use_frameworks(fw):
        pyobjc_layer.CnnRunner(descriptor, *inputs[:2]).run(inputs[2])
    assert world.data_source_reads


def _real_pyobjc():
    """PyObjC itself where it can run (macOS with fastdeconv[metal]): required under $CI on macOS."""
    if sys.platform != "darwin":
        pytest.skip("PyObjC's C extension runs on macOS only")
    try:
        import MetalPerformanceShaders  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"$CI on macOS needs fastdeconv[metal] (PyObjC): {exc}", pytrace=False)
        pytest.skip(f"PyObjC is not installed: {exc}")


def test_real_pyobjc_builds_the_data_source():
    """On macOS the real PyObjC builds the class (no GPU needed): protocol validation is PyObjC's own, and
    what it records for weights/biasTerms is printed (does registered metadata reach them? issue 29)."""
    _real_pyobjc()
    cls = pyobjc_layer.data_source_class()
    load = cls.pyobjc_instanceMethods.load
    assert not load.isClassMethod, load
    for name in ("load", "weights", "biasTerms"):
        method = getattr(cls.pyobjc_instanceMethods, name)
        print(f"{name}: {method.signature!r} {method.__metadata__()}")


# --------------------------------------------------------------------------------------------------
# The fake applies PyObjC's rules (so the tests above can fail)
# --------------------------------------------------------------------------------------------------


def test_fake_refuses_what_pyobjc_refuses():
    objc = World().objc
    weights = np.arange(6, dtype=np.float32)
    variable_void = {"c_array_of_variable_length": True}
    with pytest.raises(ValueError, match="unknown typespec 0x76"):
        return_to_objc(weights, "^v", variable_void, objc, "weights")
    with pytest.raises(ValueError, match="unknown typespec 0x76"):
        return_to_objc(list(weights.tobytes()), "^v", variable_void, objc, "weights")
    with pytest.raises(TypeError, match="Sequence required"):
        return_to_objc(weights.ctypes.data, "^v", variable_void, objc, "weights")
    assert return_to_objc(objc.NULL, "^v", variable_void, objc, "weights") is None
    assert return_to_objc(weights.ctypes.data, "^v", {}, objc, "weights") == weights.ctypes.data
    with pytest.raises(ValueError, match="unsigned long"):
        return_to_objc(weights, "^v", {}, objc, "weights")
    variable_float = {"c_array_of_variable_length": True}
    with pytest.raises(TypeError, match="Sequence required"):
        return_to_objc(None, "^f", variable_float, objc, "biasTerms")
    assert np.array_equal(return_to_objc(weights, "^f", variable_float, objc, "biasTerms"), weights)
    with pytest.raises(ValueError, match="did not return None, expecting void return value"):
        return_to_objc(True, "v", {}, objc, "purge")
    out = {"c_array_of_variable_length": True, "type_modifier": "o"}
    with pytest.raises(ValueError, match="read-only"):
        convert_argument(_readonly(), "^v", out, (), "readBytes")
    with pytest.raises(ValueError, match="C-contiguous"):
        convert_argument(np.zeros((4, 4), np.float32)[:, 1], "^v", out, (), "readBytes")
    with pytest.raises(TypeError, match="Need explicit buffer"):
        convert_argument(None, "^v", out, (), "readBytes")
    with pytest.raises(ValueError, match="truncate"):
        convert_argument(2.5, "Q", {}, (), "setEdgeMode")
    with pytest.raises(ValueError, match="negative"):
        convert_argument(-1, "Q", {}, (), "setEdgeMode")
    with pytest.raises(ValueError, match="Requesting buffer of 8"):
        convert_argument(b"1234", "^v", {"type_modifier": "n", "c_array_length_in_arg": 3}, (b"1234", 8, 4), "setBytes")
    world = World()
    with pytest.raises(AttributeError, match="comit"):
        FakeObject(world, "MTLCommandBuffer").comit()
    with pytest.raises(TypeError, match="Need 1 arguments, got 0"):
        FakeObject(world, "MPSCNNKernel").setOffset_()


def _readonly():
    array = np.zeros(4, np.float32)
    array.setflags(write=False)
    return array


def test_without_a_signature_pyobjc_takes_the_registered_return_type():
    """No protocol, nothing inherited: the default signature (``@`` if the function returns a value, else
    ``v``) with the registered metadata's return type put in — MPS's ``^v`` for ``weights``."""
    world = World()

    class Plain(world.NSObject):
        def weights(self):
            return 1234

        def fastdeconvUnregistered(self):
            return 1234

        def fastdeconvReturnsNothing(self):
            pass

    assert Plain.objc_method(b"weights").signature == b"^v@:"
    assert Plain.objc_method(b"fastdeconvUnregistered").signature == b"@@:"
    assert Plain.objc_method(b"fastdeconvReturnsNothing").signature == b"v@:"


# --------------------------------------------------------------------------------------------------
# 2. Availability gates
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def on_macos(monkeypatch):
    """status() as on a Mac of the version given (PyObjC is absent here: past the version check the reason
    is the failed import)."""
    def at(version):
        monkeypatch.setattr(sys, "platform", "darwin")
        monkeypatch.setattr(platform, "mac_ver", lambda: (version, ("", "", ""), "arm64"))
        metal.status.cache_clear()
    yield at
    metal.status.cache_clear()


@pytest.mark.parametrize("path, version, missing", [
    ("mps", "11.7.10", "12.0"), ("mps", "11.0", "12.0"),
    ("mps-cnn", "10.13", "10.13.4"), ("mps-cnn", "10.13.3", "10.13.4"), ("mps-cnn", "10.12.6", "10.13.4"),
])
def test_status_names_the_missing_macos_version(on_macos, path, version, missing):
    on_macos(version)
    state = metal.status(path)
    assert not state.available
    assert f"needs macOS {missing} or later" in state.reason and f"this is macOS {version}" in state.reason
    assert metal._GATE_SELECTOR[path] in state.reason


@pytest.mark.parametrize("path, version", [("mps", "12.0"), ("mps", "14.5"), ("mps-cnn", "10.13.4"),
                                           ("mps-cnn", "10.14")])
def test_status_passes_the_version_gate(on_macos, path, version):
    on_macos(version)
    reason = metal.status(path).reason
    assert "needs macOS" not in reason       # past the gate (here: PyObjC is missing; on a Mac: the device)


def test_macos_version_parses_three_parts(monkeypatch):
    for release, parsed in (("10.13.4", (10, 13, 4)), ("12.0", (12, 0, 0)), ("14", (14, 0, 0)), ("", None),
                            ("x.y", None)):
        monkeypatch.setattr(platform, "mac_ver", lambda r=release: (r, ("", "", ""), ""))
        assert metal._macos_version() == parsed


# --------------------------------------------------------------------------------------------------
# 3. Managed storage synchronized before commit
# --------------------------------------------------------------------------------------------------


def _order(world):
    return [name for name, _, _ in world.log]


def test_destination_images_are_synchronized_before_commit():
    descriptor, inputs = cnn_case(TRANSPOSE)
    world, _ = run_layer(descriptor, inputs)
    names = _order(world)
    (encode,) = world.calls("encodeBatchToCommandBuffer_sourceImages_destinationImages_")
    (command_buffer, sources, destinations), _ = encode
    synced = world.calls("synchronizeOnCommandBuffer_")
    assert [receiver for _, receiver in synced] == list(destinations)
    assert all(args[0] is command_buffer for args, _ in synced)
    first_sync, commit = names.index("synchronizeOnCommandBuffer_"), names.index("commit")
    assert names.index("encodeBatchToCommandBuffer_sourceImages_destinationImages_") < first_sync < commit
    assert max(i for i, n in enumerate(names) if n == "synchronizeOnCommandBuffer_") < commit
    assert commit < names.index("waitUntilCompleted") < names.index("readBytes_dataLayout_imageIndex_")
    assert [receiver for _, receiver in world.calls("readBytes_dataLayout_imageIndex_")] == list(destinations)


@pytest.mark.parametrize("storage_mode, blit", [(TABLE["enums"]["MTLStorageModeManaged"], True),
                                                (TABLE["enums"]["MTLResourceStorageModeShared"], False)])
def test_a_managed_result_buffer_is_blitted_before_commit(storage_mode, blit):
    descriptor, inputs = cnn_case(Case(dtype="float32", op="t", c_in=6, c_out=4, groups=2, stride=2),
                                  force_direct=True)
    world, _ = run_layer(descriptor, inputs, World(buffer_storage_mode=storage_mode))
    names = _order(world)
    synced = world.calls("synchronizeResource_")
    if not blit:
        assert not synced and "blitCommandEncoder" not in names
        return
    buffers = [args[0] for args, _ in world.calls("setBuffer_offset_atIndex_")]
    assert [args[0] for args, _ in synced] == [buffers[3]]                     # y, the buffer the CPU reads
    blit_at = names.index("blitCommandEncoder")
    end = max(i for i, n in enumerate(names) if n == "endEncoding")
    assert names.index("dispatchThreadgroups_threadsPerThreadgroup_") < blit_at < names.index("synchronizeResource_") \
        < end < names.index("commit")


def test_the_graph_result_is_read_from_a_shared_buffer_of_ours():
    descriptor, inputs = graph_case(Case(op="t", dtype="float16", stride=2))
    world, result = run_layer(descriptor, inputs)
    ((queue, feeds, targets, results), _), = world.calls(
        "runWithMTLCommandQueue_feeds_targetOperations_resultsDictionary_")
    (tensor_data,) = results.values()
    assert tensor_data.buffer.storage_mode == TABLE["enums"]["MTLResourceStorageModeShared"]
    assert [args[1:] for args, receiver in world.calls("initWithMTLBuffer_shape_dataType_")
            if receiver is tensor_data] == [(list(descriptor.result_shape), descriptor.data_type)]
    assert result.shape == descriptor.result_shape and result.dtype == np.float16
    assert not world.calls("readBytes_strideBytes_") and not world.calls("mpsndarray")


# --------------------------------------------------------------------------------------------------
# 4. The wheels: skipped only where nobody expects them
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env, outcome", [({}, "skip"), ({"CI": "1"}, "fail"),
                                          ({pyobjc_wheels.WHEELS_ENV: "<empty folder>"}, "fail")])
def test_missing_wheels_skip_only_outside_ci(monkeypatch, tmp_path, env, outcome):
    for name in ("CI", pyobjc_wheels.WHEELS_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(tmp_path) if value == "<empty folder>" else value)
    monkeypatch.setattr(pyobjc_wheels, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(pyobjc_wheels, "download", lambda folder, versions: "no network (simulated)")
    pyobjc_wheels._locate.cache_clear()
    try:
        with pytest.raises(pytest.skip.Exception if outcome == "skip" else pytest.fail.Exception,
                           match="lacks the wheels|no network"):
            pyobjc_wheels.wheels_folder()
    finally:
        pyobjc_wheels._locate.cache_clear()


def test_a_second_class_of_the_same_name_is_refused():
    """The Objective-C runtime has one class per name (class-builder.m): the data source is built once per
    process, and a second class statement of that name raises."""
    world = World()
    with pyobjc_layer.use_frameworks(world.frameworks()):
        assert pyobjc_layer.data_source_class() is pyobjc_layer.data_source_class()
    with pytest.raises(world.objc.error, match="FastdeconvConvolutionDataSource is overriding existing"):
        old_data_source_class(world.frameworks())
