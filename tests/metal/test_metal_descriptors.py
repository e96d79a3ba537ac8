"""The Metal backend's descriptors, checked on any platform.

Every descriptor is executed by fastdeconv.metal.executors (MPSGraph's convolution / data-gradient
definition, fastdeconv.mpscnn_model, and the Python transcription of conv_transpose.metal) and
compared with backend="cpu" over hypothesis-generated configurations; the PyObjC layer is run
against a recording fake to check that every descriptor field reaches a Metal call with the right value.
Nothing here needs a Mac.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import fastdeconv
from fastdeconv import metal
from fastdeconv._backends import mps as mps_backend
from fastdeconv._backends import registry as _backends
from fastdeconv._params import kernel_extent
from fastdeconv._call import prepare
from fastdeconv.metal import engine as metal_engine
from fastdeconv.metal import descriptors, executors, pyobjc_layer
from helpers import Case, assert_close
from test_metal_pyobjc import World

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------------


@st.composite
def cases(draw, op):
    """A small valid Case for conv_transpose2d (op "t") or conv2d ("c"), float32 or float16."""
    groups = draw(st.sampled_from([1, 1, 2, 3, 4]))
    per_in = draw(st.sampled_from([1, 2, 3, 4, 8]))
    per_out = draw(st.sampled_from([1, 2, 4, 5]))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    hw = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    kind = draw(st.sampled_from(["int", "pair", "pairs", "same", "valid"]))
    extent = [kernel_extent(k, d) for k, d in zip(kernel, dilation)]
    if kind == "int":
        padding = draw(st.integers(0, max(extent) - 1))
    elif kind == "pair":
        padding = tuple(draw(st.integers(0, e - 1)) for e in extent)
    elif kind == "pairs":
        padding = tuple((draw(st.integers(0, e)), draw(st.integers(0, e))) for e in extent)
    else:
        padding = kind
    output_padding, output_size = 0, None
    if op == "t" and kind != "same":
        limit = [max(s, d) for s, d in zip(stride, dilation)]
        output_padding = tuple(draw(st.integers(0, lim - 1)) for lim in limit)
        if draw(st.booleans()):
            try:
                base = fastdeconv.conv_transpose2d_output_shape(hw, kernel, stride, padding, 0, dilation)
            except ValueError:
                assume(False)
            output_size, output_padding = tuple(b + o for b, o in zip(base, output_padding)), 0
    case = Case(op=op, n=draw(st.integers(1, 2)), hw=hw, c_in=groups * per_in, c_out=groups * per_out,
                groups=groups, kernel=kernel, stride=stride, padding=padding, output_padding=output_padding,
                dilation=dilation, output_size=output_size, bias=draw(st.booleans()),
                dtype=draw(st.sampled_from(["float32", "float16"])), seed=draw(st.integers(0, 2**16)))
    try:
        x, w, _ = case.arrays()
        geometry = case.geometry(x, w)
    except ValueError:
        assume(False)
    assume(geometry.output_hw[0] * geometry.output_hw[1] <= 400)
    return case


def _event(message):
    if currently_in_test_context():
        event(message)


def run_descriptor(path, case, force_direct=False):
    """Build the descriptor for ``case`` and run it through the numpy executors, as the PyObjC layer would."""
    x, w, b = case.arrays()
    geometry = case.geometry(x, w)
    dtype = case.result_dtype
    xs = np.ascontiguousarray(x, dtype=dtype)
    if path == "mps":
        descriptor = descriptors.graph_descriptor(geometry, dtype, b is not None)
        y = executors.run_graph(descriptor, xs, descriptors.graph_weights(w, dtype),
                                descriptors.graph_bias(b, geometry.out_channels, dtype))
        _event(f"MPSGraph {descriptor.op}, tail padding: {descriptor.tail_padding != (0, 0)}")
    else:
        descriptor = descriptors.cnn_descriptor(geometry, dtype, b is not None, force_direct=force_direct)
        y = executors.run_cnn(descriptor, xs, descriptors.cnn_weights(descriptor, w, geometry.groups),
                              descriptors.cnn_bias(descriptor, b, geometry.out_channels))
        stage = descriptor.stage
        _event(f"stage: {getattr(stage, 'kernel_class', None) or stage.function}"
               + (f" ({stage.convolution.descriptor_class})" if hasattr(stage, "convolution") else ""))
    assert y.shape == geometry.output_shape and y.dtype == dtype
    return descriptor, y


def check_against_cpu(case, y, **extra):
    x, w, b = case.arrays()
    assert_close(y, case.call(x, w, b, backend="cpu"), case.result_dtype, case.k, **case.describe(), **extra)


# --------------------------------------------------------------------------------------------------
# Every descriptor through its executor, against backend="cpu"
# --------------------------------------------------------------------------------------------------


@HYPOTHESIS
@given(case=cases("t"))
def test_graph_descriptor_conv_transpose2d(case):
    descriptor, y = run_descriptor("mps", case)
    assert descriptor.convolution.data_layout == descriptors.GRAPH_LAYOUT_NHWC
    assert descriptor.convolution.weights_layout == descriptors.GRAPH_LAYOUT_OIHW
    check_against_cpu(case, y, graph_op=descriptor.op, tail=descriptor.tail_padding)


@HYPOTHESIS
@given(case=cases("c"))
def test_graph_descriptor_conv2d(case):
    descriptor, y = run_descriptor("mps", case)
    assert descriptor.op == "convolution2D" and descriptor.output_shape is None
    check_against_cpu(case, y)


@HYPOTHESIS
@given(case=cases("t"), force_direct=st.booleans())
def test_cnn_descriptor_conv_transpose2d(case, force_direct):
    descriptor, y = run_descriptor("mps-cnn", case, force_direct)
    check_against_cpu(case, y, stage=type(descriptor.stage).__name__)


@HYPOTHESIS
@given(case=cases("c"), force_direct=st.booleans())
def test_cnn_descriptor_conv2d(case, force_direct):
    descriptor, y = run_descriptor("mps-cnn", case, force_direct)
    check_against_cpu(case, y, stage=type(descriptor.stage).__name__)


@pytest.mark.parametrize("path", ["mps", "mps-cnn"])
@pytest.mark.parametrize("op", ["t", "c"])
def test_public_api_simulated(path, op):
    """conv_transpose2d/conv2d(backend=path) end to end on the numpy engine: unbatched, out=, mixed dtypes."""
    variants = [Case(op=op, dtype="float32", stride=2, padding=1, output_padding=(1, 0) if op == "t" else 0),
                Case(op=op, dtype="float16", unbatched=True, groups=2, c_in=4, c_out=6, dilation=2),
                Case(op=op, dtype="float16", w_dtype="float32", x_layout="contig", n=3, hw=(4, 3))]
    with metal_engine.simulated():
        for case in variants:
            x, w, b = case.arrays()
            ref = case.call(x, w, b, backend="cpu")
            got = case.call(x, w, b, backend=path)
            assert_close(got, ref, case.result_dtype, case.k, **case.describe())
            out = np.empty_like(ref)
            assert case.call(x, w, b, backend=path, out=out) is out
            assert_close(out, ref, case.result_dtype, case.k, **case.describe())


# --------------------------------------------------------------------------------------------------
# Specific descriptor fields
# --------------------------------------------------------------------------------------------------


def geometry_of(case):
    x, w, _ = case.arrays()
    return case.geometry(x, w)


def test_graph_descriptor_fields_transpose():
    case = Case(op="t", hw=(5, 4), c_in=6, c_out=4, groups=2, kernel=(3, 2), stride=(2, 3), dilation=(1, 2),
                padding=((1, 0), (2, 1)), output_padding=(1, 2), dtype="float16")
    g = geometry_of(case)
    descriptor = descriptors.graph_descriptor(g, F16, has_bias=True)
    d = descriptor.convolution
    assert (d.stride_in_x, d.stride_in_y, d.dilation_rate_in_x, d.dilation_rate_in_y) == (3, 2, 2, 1)
    assert (d.padding_left, d.padding_right, d.padding_top, d.padding_bottom) == (2, 1, 1, 0)
    assert d.groups == 2 and d.padding_style == descriptors.GRAPH_PADDING_STYLE_EXPLICIT
    assert descriptor.op == "convolutionTranspose2D" and descriptor.tail_padding == (0, 0)
    assert descriptor.output_shape == descriptor.result_shape == g.output_shape
    assert descriptor.weights_shape == (6, 2, 3, 2)                            # OIHW: (C_in, C_out/g, kH, kW)
    assert descriptor.bias_shape == (1, 1, 1, 4)
    assert (descriptor.data_type, descriptor.compute_data_type) == (0x10000010, 0x10000020)


def test_graph_descriptor_output_padding_beyond_stride_uses_tail_padding():
    """output_padding >= stride (allowed below dilation): the reachable rows are convolved, the rest padded."""
    case = Case(dtype="float32", op="t", hw=(3, 3), kernel=(2, 2), stride=1, dilation=3, padding=0,
                output_padding=(2, 1))
    descriptor, y = run_descriptor("mps", case)
    assert descriptor.tail_padding == (2, 1)
    assert descriptor.output_shape[1:3] == (6, 6) and descriptor.result_shape[1:3] == (8, 7)
    check_against_cpu(case, y)


def test_graph_descriptor_no_tap_reaches_the_output():
    case = Case(dtype="float32", op="t", hw=(1, 3), kernel=(2, 1), stride=1, dilation=(3, 1), padding=((4, 0), (0, 0)),
                output_padding=(2, 0))
    descriptor, y = run_descriptor("mps", case)
    assert descriptor.op is None
    check_against_cpu(case, y)                                                # bias only


def test_cnn_descriptor_fields():
    transpose_case = Case(dtype="float32", op="t", c_in=8, c_out=4, groups=1, stride=2, padding=1, output_padding=1)
    transpose = descriptors.cnn_descriptor(geometry_of(transpose_case), F32, True)
    stage = transpose.stage
    assert isinstance(stage, descriptors.CnnKernelDescriptor)
    assert stage.kernel_class == "MPSCNNConvolutionTranspose"
    assert stage.weights_shape == (4, 3, 3, 8) and (stage.offset_x, stage.offset_y) == (0, 0)
    assert (stage.kernel_offset_x, stage.kernel_offset_y) == ((3 >> 1) - 2 + 1,) * 2
    assert (stage.destination.height, stage.destination.width) == (10, 10)
    assert stage.source.channel_format == 4 and stage.edge_mode == 0

    depthwise_case = Case(dtype="float32", op="c", c_in=3, c_out=3, groups=3)
    depthwise = descriptors.cnn_descriptor(geometry_of(depthwise_case), F16, False).stage
    assert depthwise.convolution.descriptor_class == "MPSCNNDepthWiseConvolutionDescriptor"
    assert depthwise.convolution.groups == 1 and depthwise.source.channel_format == 3

    grouped_case = Case(dtype="float32", op="t", c_in=6, c_out=4, groups=2)
    grouped = descriptors.cnn_descriptor(geometry_of(grouped_case), F32, True).stage
    assert isinstance(grouped, descriptors.DirectKernelDescriptor)
    assert "multiple" in grouped.reason and grouped.function == "conv_transpose2d_direct_float"


def test_direct_descriptor_refuses_int32_overflow():
    g = geometry_of(Case(dtype="float32", op="t", n=1, hw=(2, 2)))
    huge = dataclasses.replace(g, batch=2**29)
    with pytest.raises(ValueError, match="32-bit"):
        descriptors.direct_descriptor(huge, F32, "test")


def test_msl_source_matches_the_descriptors():
    """conv_transpose.metal's ConvParams has PARAM_FIELDS' order, and every descriptor function exists."""
    source = resources.files("fastdeconv.metal").joinpath("conv_transpose.metal").read_text()
    body = re.search(r"struct ConvParams \{(.*?)\};", source, re.S).group(1)
    assert tuple(re.findall(r"int (\w+);", body)) == descriptors.PARAM_FIELDS
    assert len(re.findall(r";", body)) == len(descriptors.PARAM_FIELDS)           # int32 only
    entries = set(re.findall(r"^FASTDECONV_ENTRY\((\w+),", source, re.M))
    expected = {f"{k}_direct_{t}" for k in ("conv_transpose2d", "conv2d") for t in ("float", "half")}
    assert entries == expected


def test_msl_transcription_c_division():
    c = executors.MslTranscription
    assert [c.c_div(a, 3) for a in (-7, -3, -1, 0, 5)] == [-2, -1, 0, 0, 1]
    assert [int(c.c_rem(a, 3)) for a in (-7, -3, -1, 0, 5)] == [-1, 0, -1, 0, 2]
    assert list(c.c_div(np.array([-7, 7]), 2)) == [-3, 3]


def test_float64_is_refused():
    case = Case(op="t", dtype="float64")
    x, w, b = case.arrays()
    with metal_engine.simulated(), pytest.raises(TypeError, match="float64"):
        case.call(x, w, b, backend="mps")


# --------------------------------------------------------------------------------------------------
# Availability, backends(), auto
# --------------------------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-macOS error")
@pytest.mark.parametrize("path", ["mps", "mps-cnn"])
def test_metal_backend_fails_cleanly_off_macos(path):
    case = Case(op="t", dtype="float32")
    x, w, b = case.arrays()
    with pytest.raises(RuntimeError, match=rf"backend='{path}' is not available: Metal needs macOS"):
        case.call(x, w, b, backend=path)
    c = Case(op="c", dtype="float32")
    with pytest.raises(RuntimeError, match="macOS"):
        c.call(*c.arrays(), backend=path)


def test_backends_lists_every_backend_with_a_reason():
    rows = {row.name: row for row in _backends.backends()}
    assert list(rows) == list(_backends.REGISTRY) and {"cpu", "reference", "mps", "mps-cnn"} <= set(rows)
    assert rows["cpu"].available and rows["reference"].available
    for name in ("mps", "mps-cnn"):
        assert isinstance(rows[name].available, bool) and rows[name].reason
        if sys.platform != "darwin":
            assert not rows[name].available and "macOS" in rows[name].reason


def test_import_does_not_import_pyobjc():
    code = ("import sys, fastdeconv, numpy as np; fastdeconv.backends(); "
            "fastdeconv.conv_transpose2d(np.ones((1, 2, 2, 1), np.float32), np.ones((1, 1, 1, 1), np.float32)); "
            "print(sorted(m for m in ('objc', 'Metal', 'MetalPerformanceShaders', 'Foundation') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    if sys.platform != "darwin":
        assert out.strip() == "[]"


def _call(case):
    x, w, b = case.arrays()
    g = case.geometry(x, w)
    return prepare(x, w, b, None, transposed=case.op == "t", resolve=lambda xs, ws: g)


def test_auto_threshold(monkeypatch):
    big = _call(Case(op="t", n=2, hw=(16, 16), c_in=16, c_out=16, dtype="float32"))
    small = _call(Case(op="t", dtype="float32"))
    f64 = _call(Case(op="t", n=2, hw=(16, 16), c_in=16, c_out=16, dtype="float64"))
    monkeypatch.setattr(metal, "status", lambda path="mps": metal.MetalStatus(True, "fake device"))
    try:
        metal.set_mps_min_flops(big.geometry.flops)
        assert _backends.AutoBackend.choose(big) is mps_backend.MPS
        assert _backends.AutoBackend.choose(small) is _backends.CPU
        assert _backends.AutoBackend.choose(f64) is _backends.CPU            # Metal has no float64
        metal.set_mps_min_flops(big.geometry.flops + 1)
        assert _backends.AutoBackend.choose(big) is _backends.CPU
        metal.set_mps_min_flops(0)
        assert _backends.AutoBackend.choose(small) is mps_backend.MPS
    finally:
        metal.set_mps_min_flops(None)
    with pytest.raises(ValueError, match="-1"):
        metal.set_mps_min_flops(-1)


def test_auto_does_not_read_the_environment_per_call(monkeypatch):
    """$FASTDECONV_MPS_MIN_FLOPS is parsed at import: changing it later, even to garbage, changes nothing."""
    before = metal.mps_min_flops()
    monkeypatch.setenv(metal.MPS_MIN_FLOPS_ENV, "abc")
    assert metal.mps_min_flops() == before
    case = Case(op="t", dtype="float32")
    x, w, b = case.arrays()
    assert_close(case.call(x, w, b, backend="auto"), case.call(x, w, b, backend="cpu"), case.result_dtype, case.k)


# Imports fastdeconv in a fresh interpreter, records every warning, calls backend="auto" twice per op,
# then exercises set_mps_min_flops; prints the threshold at each step and the $FASTDECONV_MPS_MIN_FLOPS
# warnings as JSON.
MIN_FLOPS_PROBE = """
import json, os, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import fastdeconv
    from fastdeconv import metal
    x, w = np.ones((1, 4, 4, 2), np.float32), np.ones((2, 3, 3, 2), np.float32)
    for _ in range(2):
        assert fastdeconv.conv_transpose2d(x, w, backend="auto").shape == (1, 6, 6, 2)
        assert fastdeconv.conv2d(x, w, backend="auto").shape == (1, 2, 2, 2)
    os.environ[metal.MPS_MIN_FLOPS_ENV] = "123"                  # too late: read at import only
    imported = metal.mps_min_flops()
    metal.set_mps_min_flops(7)
    overridden = metal.mps_min_flops()
    metal.set_mps_min_flops(None)
    restored = metal.mps_min_flops()
print(json.dumps(dict(
    imported=imported, overridden=overridden, restored=restored, default=metal.DEFAULT_MPS_MIN_FLOPS,
    warnings=[[w.category.__name__, str(w.message)] for w in caught if metal.MPS_MIN_FLOPS_ENV in str(w.message)])))
"""


def _min_flops_probe(value):
    """MIN_FLOPS_PROBE's result with $FASTDECONV_MPS_MIN_FLOPS set to ``value`` (unset for None)."""
    env = {k: v for k, v in os.environ.items() if k != metal.MPS_MIN_FLOPS_ENV}
    if value is not None:
        env[metal.MPS_MIN_FLOPS_ENV] = value
    result = subprocess.run([sys.executable, "-c", MIN_FLOPS_PROBE], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "inf"])
def test_bad_min_flops_env_warns_once_at_import(value):
    probe = _min_flops_probe(value)
    assert len(probe["warnings"]) == 1, probe["warnings"]
    (category, message), = probe["warnings"]
    assert category == "RuntimeWarning" and f"{metal.MPS_MIN_FLOPS_ENV}={value!r}" in message
    assert probe["imported"] == probe["restored"] == probe["default"] and probe["overridden"] == 7


@pytest.mark.parametrize("value, threshold", [("2.5e3", 2500), ("0", 0), ("", None), (None, None)])
def test_min_flops_env_is_honoured_and_restored_by_the_setter(value, threshold):
    probe = _min_flops_probe(value)
    assert probe["warnings"] == []
    expected = probe["default"] if threshold is None else threshold
    assert probe["imported"] == probe["restored"] == expected and probe["overridden"] == 7


@pytest.mark.skipif(sys.platform == "darwin", reason="on a Mac auto may legitimately pick MPS")
def test_auto_is_cpu_off_macos():
    call = _call(Case(op="t", n=4, hw=(64, 64), c_in=64, c_out=64, dtype="float32"))
    assert _backends.AutoBackend.choose(call) is _backends.CPU


# --------------------------------------------------------------------------------------------------
# Per-layer state
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["mps", "mps-cnn"])
def test_layer_keeps_weights_and_compiled_kernels(path, monkeypatch):
    uploads = []
    real = executors.resident
    monkeypatch.setattr(executors, "resident", lambda a: uploads.append(a) or real(a))
    built = []
    real_cnn = executors.CnnRunner
    monkeypatch.setattr(executors, "CnnRunner", lambda *a: built.append(a) or real_cnn(*a))
    case = Case(dtype="float32", op="t", c_in=4, c_out=8, stride=2)
    x, w, b = case.arrays()
    with metal_engine.simulated():
        layer = mps_backend.MPS.layer(w, b, F32) if path == "mps" else mps_backend.MPS_CNN.layer(w, b, F32)
        geometries = [case.geometry(x, w), dataclasses.replace(case, hw=(3, 7)).geometry(x[:, :3, :7], w)]
        for geometry, xi in ((geometries[0], x), (geometries[1], x[:, :3, :7]), (geometries[0], x)):
            ref = fastdeconv.conv_transpose2d(xi, w, b, stride=2, backend="cpu")
            assert_close(layer.run(xi, geometry), ref, F32, case.k)
    if path == "mps":
        assert len(uploads) == 2                     # weights + bias once; the source is fed per call
        descriptor = layer.descriptor(geometries[0])
        runner = metal_engine.graph_runner(executors, descriptor)
        assert metal_engine.graph_runner(executors, descriptor) is runner
    else:
        assert len(built) == 2                       # one MPSCNN kernel per input geometry


# --------------------------------------------------------------------------------------------------
# The PyObjC layer against a recording fake: every descriptor field reaches a Metal call
# --------------------------------------------------------------------------------------------------


class Tracked:
    """A read-only view of a descriptor that records which (nested) fields are read."""

    def __init__(self, obj, seen, prefix=""):
        self.__dict__.update(_obj=obj, _seen=seen, _prefix=prefix)

    @property
    def __class__(self):
        return type(self._obj)

    def __getattr__(self, name):
        value = getattr(self._obj, name)
        path = self._prefix + name
        if dataclasses.is_dataclass(value):
            self._seen.add(path)
            return Tracked(value, self._seen, path + ".")
        self._seen.add(path)
        return value


def leaves(cls, prefix=""):
    out = set()
    for f in dataclasses.fields(cls):
        nested = (descriptors.GraphConvolutionDescriptor, descriptors.ImageSpec, descriptors.CnnConvolutionDescriptor)
        types_ = [t for t in nested if t.__name__ in str(f.type)]
        if types_:
            out |= leaves(types_[0], prefix + f.name + ".")
        elif f.name != "stage":
            out.add(prefix + f.name)
    return out


def run_layer(descriptor, inputs):
    """Run the PyObjC layer on test_metal_pyobjc's fake (PyObjC's conversion rules, the selectors'
    signatures from PyObjC's metadata); (log of (selector, args), descriptor fields read)."""
    world, seen = World(), set()
    with pyobjc_layer.use_frameworks(world.frameworks()):
        w, b, x = inputs
        if isinstance(descriptor, descriptors.GraphDescriptor):
            runner = pyobjc_layer.GraphRunner(Tracked(descriptor, seen))
            runner.run(x, pyobjc_layer.resident(w), pyobjc_layer.resident(b))
        else:
            pyobjc_layer.CnnRunner(Tracked(descriptor, seen), w, b).run(x)
    return [(name, args) for name, args, _ in world.log], seen


def calls(log, selector):
    return [args for name, args in log if name == selector]


def graph_case(case):
    g = geometry_of(case)
    x, w, b = case.arrays()
    dtype = case.result_dtype
    descriptor = descriptors.graph_descriptor(g, dtype, b is not None)
    return descriptor, (descriptors.graph_weights(w, dtype), descriptors.graph_bias(b, g.out_channels, dtype),
                        np.ascontiguousarray(x, dtype))


def cnn_case(case, force_direct=False):
    g = geometry_of(case)
    x, w, b = case.arrays()
    descriptor = descriptors.cnn_descriptor(g, case.result_dtype, b is not None, force_direct=force_direct)
    return descriptor, (descriptors.cnn_weights(descriptor, w, g.groups),
                        descriptors.cnn_bias(descriptor, b, g.out_channels),
                        np.ascontiguousarray(x, case.result_dtype))


def test_pyobjc_layer_graph_consumes_every_field():
    seen = set()
    transpose, inputs = graph_case(Case(op="t", hw=(3, 4), kernel=(2, 3), stride=(1, 2), dilation=(3, 1),
                                        padding=((0, 1), (1, 0)), output_padding=(2, 1), dtype="float16"))
    assert transpose.tail_padding != (0, 0)
    log, s = run_layer(transpose, inputs)
    seen |= s
    d = transpose.convolution
    factory = "descriptorWithStrideInX_strideInY_dilationRateInX_dilationRateInY_groups_paddingLeft_" \
              "paddingRight_paddingTop_paddingBottom_paddingStyle_dataLayout_weightsLayout_"
    assert calls(log, factory) == [tuple(getattr(d, f.name) for f in dataclasses.fields(d))]
    (conv,) = calls(log, "convolutionTranspose2DWithSourceTensor_weightsTensor_outputShape_descriptor_name_")
    assert conv[2] == list(transpose.output_shape)
    (pad,) = calls(log, "padTensor_withPaddingMode_leftPadding_rightPadding_constantValue_name_")
    assert pad[1:5] == (0, [0, 0, 0, 0], [0, *transpose.tail_padding, 0], 0.0)
    placeholders = calls(log, "placeholderWithShape_dataType_name_")
    assert placeholders == [(list(transpose.source_shape), transpose.data_type, "source"),
                            (list(transpose.weights_shape), transpose.data_type, "weights"),
                            (list(transpose.bias_shape), transpose.data_type, "bias")]
    casts = calls(log, "castTensor_toType_name_")
    assert [c[1] for c in casts] == [transpose.compute_data_type] * 3 + [transpose.data_type]
    tensor_data = [c[1:] for c in calls(log, "initWithMTLBuffer_shape_dataType_")]
    assert (list(transpose.source_shape), transpose.data_type) in tensor_data
    assert tensor_data[-1] == (list(transpose.result_shape), transpose.data_type)      # the result's, ours

    forward, inputs = graph_case(Case(op="c", bias=False, dtype="float32"))
    log, s = run_layer(forward, inputs)
    seen |= s
    assert len(calls(log, "convolution2DWithSourceTensor_weightsTensor_descriptor_name_")) == 1
    assert not calls(log, "castTensor_toType_name_")

    empty, inputs = graph_case(Case(dtype="float32", op="t", hw=(1, 3), kernel=(2, 1), stride=1, dilation=(3, 1),
                                    padding=((4, 0), (0, 0)), output_padding=(2, 0)))
    assert empty.op is None
    log, s = run_layer(empty, inputs)
    seen |= s
    assert calls(log, "constantWithScalar_shape_dataType_") == [(0.0, list(empty.result_shape),
                                                                 empty.compute_data_type)]
    missing = leaves(descriptors.GraphDescriptor) - seen
    assert not missing, f"GraphDescriptor fields never read by pyobjc_layer: {sorted(missing)}"


def test_pyobjc_layer_cnn_consumes_every_field():
    seen = set()
    transpose, inputs = cnn_case(Case(dtype="float32", op="t", c_in=4, c_out=8, stride=2, padding=1, output_padding=1,
                                      n=2))
    stage = transpose.stage
    assert isinstance(stage, descriptors.CnnKernelDescriptor)
    log, s = run_layer(transpose, inputs)
    seen |= {p.removeprefix("stage.") for p in s}
    d = stage.convolution
    factory = "cnnConvolutionDescriptorWithKernelWidth_kernelHeight_inputFeatureChannels_outputFeatureChannels_"
    assert calls(log, factory) == [(d.kernel_width, d.kernel_height, d.input_feature_channels,
                                    d.output_feature_channels)]
    for selector, value in (("setStrideInPixelsX_", d.stride_in_pixels_x), ("setDilationRateY_", d.dilation_rate_y),
                            ("setGroups_", d.groups), ("setKernelOffsetX_", stage.kernel_offset_x),
                            ("setKernelOffsetY_", stage.kernel_offset_y), ("setEdgeMode_", stage.edge_mode),
                            ("setAccumulatorPrecisionOption_", stage.accumulator_precision)):
        assert calls(log, selector) == [(value,)], selector
    assert calls(log, "setOffset_") == [((stage.offset_x, stage.offset_y, 0),)]
    images = calls(log, "imageDescriptorWithChannelFormat_width_height_featureChannels_")
    assert images == [(stage.source.channel_format, stage.source.width, stage.source.height,
                       stage.source.feature_channels),
                      (stage.destination.channel_format, stage.destination.width, stage.destination.height,
                       stage.destination.feature_channels)]
    writes = calls(log, "writeBytes_dataLayout_imageIndex_")
    assert len(writes) == stage.batch and all(w[1:] == (stage.source.data_layout, 0) for w in writes)
    assert np.array_equal(writes[1][0], inputs[2][1])
    assert len(calls(log, "readBytes_dataLayout_imageIndex_")) == stage.batch
    (encode,) = calls(log, "encodeBatchToCommandBuffer_sourceImages_destinationImages_")
    assert len(encode[1]) == len(encode[2]) == stage.batch

    forward, inputs = cnn_case(Case(op="c", c_in=3, c_out=3, groups=3, bias=False, dtype="float16"))
    log, s = run_layer(forward, inputs)
    seen |= {p.removeprefix("stage.") for p in s}
    assert calls(log, factory) and not calls(log, "setKernelOffsetX_")

    direct, inputs = cnn_case(Case(dtype="float32", op="t", c_in=6, c_out=4, groups=2, stride=2), force_direct=True)
    stage = direct.stage
    log, s = run_layer(direct, inputs)
    direct_seen = {p.removeprefix("stage.") for p in s}
    assert calls(log, "newFunctionWithName_") == [(stage.function,)]
    (set_bytes,) = calls(log, "setBytes_length_atIndex_")
    assert set_bytes == (struct.pack(f"<{len(stage.params)}i", *stage.params), 4 * len(stage.params), 4)
    assert [a[1:] for a in calls(log, "setBuffer_offset_atIndex_")] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert calls(log, "MTLSizeMake") == [(-(-stage.threads // stage.threads_per_threadgroup), 1, 1),
                                         (stage.threads_per_threadgroup, 1, 1)]

    missing = leaves(descriptors.CnnKernelDescriptor) - seen
    assert not missing, f"CnnKernelDescriptor fields never read by pyobjc_layer: {sorted(missing)}"
    missing = leaves(descriptors.DirectKernelDescriptor) - direct_seen
    assert not missing, f"DirectKernelDescriptor fields never read by pyobjc_layer: {sorted(missing)}"
    assert "result_shape" in seen


def test_pyobjc_layer_compiles():
    import py_compile

    for name in ("pyobjc_layer.py", "backend.py", "descriptors.py", "executors.py", "__init__.py"):
        py_compile.compile(str(resources.files("fastdeconv.metal").joinpath(name)), doraise=True)


# --------------------------------------------------------------------------------------------------
# conv_transpose.metal itself, compiled as C++ with a small shim and run on the CPU
# --------------------------------------------------------------------------------------------------

MSL_SHIM = """
#include <cmath>
#define kernel extern "C"
#define device
#define constant const
typedef unsigned int uint;
typedef _Float16 half;
namespace metal { using std::fma; }
"""
MSL_DRIVER = """
#include "conv_transpose.metal"
#define DRIVE(NAME, T)                                                                             \\
    extern "C" void run_##NAME(const T *x, const T *w, const T *b, T *y, const ConvParams *p, uint n) \\
    {                                                                                              \\
        for (uint g = 0; g < n; ++g) NAME(x, w, b, y, *p, g);                                      \\
    }
DRIVE(conv_transpose2d_direct_float, float)
DRIVE(conv_transpose2d_direct_half, half)
DRIVE(conv2d_direct_float, float)
DRIVE(conv2d_direct_half, half)
"""


@pytest.fixture(scope="module")
def msl_on_cpu(tmp_path_factory):
    """conv_transpose.metal compiled by the host C++ compiler: `metal_stdlib` is a shim that maps the
    address-space qualifiers away (constant → const), `half` to _Float16 and metal::fma to std::fma."""
    import ctypes
    import shutil

    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler to compile conv_transpose.metal on the host")
    work = tmp_path_factory.mktemp("msl")
    probe = work / "probe.cpp"
    probe.write_text("_Float16 h(float f) { return (_Float16)f; }\n")
    if subprocess.run([compiler, "-std=c++17", "-c", str(probe), "-o", str(work / "probe.o")],
                      capture_output=True).returncode:
        pytest.skip(f"{compiler} has no _Float16, needed for MSL's half")
    (work / "metal_stdlib").write_text(MSL_SHIM)
    (work / "conv_transpose.metal").write_text(
        resources.files("fastdeconv.metal").joinpath("conv_transpose.metal").read_text())
    (work / "driver.cpp").write_text(MSL_DRIVER)
    library = work / "msl_on_cpu.so"
    result = subprocess.run([compiler, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wall", "-Wno-attributes",
                             "-Werror", "-I", str(work), str(work / "driver.cpp"), "-o", str(library)],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"conv_transpose.metal does not compile as C++:\n{result.stderr}"
    return ctypes.CDLL(str(library))


def run_msl_on_cpu(lib, stage, x, w, b):
    import ctypes

    y = np.full(stage.y_shape, np.nan, dtype=stage.dtype)
    params = struct.pack(f"<{len(stage.params)}i", *stage.params)          # what setBytes:length:atIndex: sends
    arrays = [np.ascontiguousarray(a) for a in (x, w, b)]
    pointer = lambda a: a.ctypes.data_as(ctypes.c_void_p)                  # noqa: E731
    groups = -(-stage.threads // stage.threads_per_threadgroup)
    getattr(lib, f"run_{stage.function}")(*map(pointer, arrays), pointer(y), ctypes.c_char_p(params),
                                          ctypes.c_uint(groups * stage.threads_per_threadgroup))
    return y


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=st.one_of(cases("t"), cases("c")))
def test_msl_source_on_cpu(msl_on_cpu, case):
    x, w, b = case.arrays()
    g = case.geometry(x, w)
    dtype = case.result_dtype
    descriptor = descriptors.cnn_descriptor(g, dtype, b is not None, force_direct=True)
    wd, bd = descriptors.cnn_weights(descriptor, w, g.groups), descriptors.cnn_bias(descriptor, b, g.out_channels)
    y = run_msl_on_cpu(msl_on_cpu, descriptor.stage, np.ascontiguousarray(x, dtype), wd, bd)
    check_against_cpu(case, y, function=descriptor.stage.function)
    transcribed = executors.run_cnn(descriptor, np.ascontiguousarray(x, dtype), wd, bd)
    assert np.allclose(y.astype(np.float64), transcribed.astype(np.float64), rtol=1e-6 if dtype == F32 else 1e-3), \
        "the Python transcription and the compiled MSL disagree"
