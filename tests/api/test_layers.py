"""The layer objects with packed weights: ConvTranspose2d equal to the function API on every path, and
Conv2d with the same contract."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdeconv
from fastdeconv import reference as ref
from fastdeconv.bench.suites import CASES as SUITE_CASES
from helpers import examples
from helpers import DECONV_PATHS, algorithm_supports, assert_close, gemm_isa, make_bias, make_weight_t, make_x, \
    channel_signs, threaded

CASES = [
    # x shape, C_out, kernel, stride, padding, output_padding, dilation, groups
    ((2, 5, 6, 8), 12, (3, 4), 2, ((1, 0), (2, 1)), 1, 1, 2),
    ((1, 4, 4, 4), 8, 3, 1, 0, 0, 1, 4),        # depthwise with a channel multiplier of 2
    ((3, 3, 7, 6), 3, 4, 3, 1, (2, 1), (2, 1), 1),  # few outputs per group, dilation with stride
    ((1, 6, 5, 64), 96, 2, 2, 0, 0, 1, 1),       # k == s, wider than a GEMM panel
]


@pytest.mark.parametrize("algorithm,isa", DECONV_PATHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"x{c[0]}-cout{c[1]}-g{c[7]}")
def test_conv_transpose2d_layer_equals_function_on_every_path(case, algorithm, isa):
    x_shape, c_out, kernel, stride, padding, op, dilation, groups = case
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    rng = np.random.default_rng(7)
    signs = channel_signs(c_out, rng)
    x = make_x(x_shape, np.float32, rng)
    w = make_weight_t(x_shape[-1], kh, kw, c_out, groups, np.float32, rng, signs)
    b = make_bias(c_out, np.float32, rng, signs)
    kwargs = dict(stride=stride, padding=padding, output_padding=op, dilation=dilation, groups=groups)
    geometry = fastdeconv._params.resolve_conv_transpose2d(x.shape, w.shape, **kwargs)
    if not algorithm_supports(algorithm, geometry):
        with pytest.raises(ValueError, match="algorithm"):
            fastdeconv.ConvTranspose2d(w, b, **kwargs, algorithm=algorithm)
        return
    ref = fastdeconv.reference.conv_transpose2d(x, w, b, **kwargs)
    with gemm_isa(isa), threaded(2):
        layer = fastdeconv.ConvTranspose2d(w, b, **kwargs, algorithm=algorithm)
        assert layer.algorithm == algorithm
        for _ in range(2):   # the second call takes the cached fast path
            assert_close(layer(x), ref, np.float32, x_shape[-1] // groups * kh * kw, algorithm=algorithm, isa=isa)
        out = np.full(ref.shape, np.nan, np.float32)
        assert layer(x, out=out) is out
        assert_close(out, ref, np.float32, x_shape[-1] // groups * kh * kw)
        assert_close(layer(x[0]), ref[0], np.float32, x_shape[-1] // groups * kh * kw)


def test_conv_transpose2d_layer_output_size_per_call_and_dtypes():
    rng = np.random.default_rng(1)
    w = make_weight_t(4, 3, 3, 6, 2, np.float32, rng)
    layer = fastdeconv.ConvTranspose2d(w, None, stride=2, padding=1, groups=2)
    x = make_x((1, 5, 5, 4), np.float32, rng)
    for size in [(9, 9), (10, 10), (9, 10)]:
        got = layer(x, output_size=size)
        assert got.shape == (1, *size, 6)
        np.testing.assert_allclose(got, fastdeconv.conv_transpose2d(x, w, None, 2, 1, groups=2, output_size=size),
                                   rtol=1e-6)
    with pytest.raises(ValueError, match="output_size"):
        layer(x, output_size=(11, 9))
    assert layer(x.astype(np.float64)).dtype == np.float64
    assert layer(x.astype(np.float16)).dtype == np.float32       # result_type(float16, float32)
    half = fastdeconv.ConvTranspose2d(w.astype(np.float16), None, stride=2, padding=1, groups=2)
    y16 = half(x.astype(np.float16))
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16, fastdeconv.conv_transpose2d(x, w, None, 2, 1, groups=2), rtol=2e-2, atol=2e-2)


def test_conv_transpose2d_layer_validates_at_construction_and_call():
    w = np.ones((4, 3, 3, 2), np.float32)
    with pytest.raises(ValueError, match="output_padding"):
        fastdeconv.ConvTranspose2d(w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="groups"):
        fastdeconv.ConvTranspose2d(w, groups=3)
    with pytest.raises(ValueError, match="bias"):
        fastdeconv.ConvTranspose2d(w, np.ones(5))
    with pytest.raises(TypeError, match="dtype"):
        fastdeconv.ConvTranspose2d(w.astype(int))
    with pytest.raises(RuntimeError, match="mps"):
        fastdeconv.ConvTranspose2d(w, backend="mps")
    layer = fastdeconv.ConvTranspose2d(w)
    x = np.ones((1, 5, 5, 4), np.float32)
    layer(x)   # caches the fast path for this shape; out= is still checked there
    with pytest.raises(ValueError, match="out"):
        layer(x, out=np.empty((1, 7, 7, 2), np.float64))
    with pytest.raises(ValueError, match="out"):
        layer(x, out=np.empty((1, 7, 7, 3), np.float32))
    with pytest.raises(ValueError, match="C_in"):
        layer(np.ones((1, 5, 5, 3), np.float32))


def test_conv_transpose2d_layer_keeps_its_own_weights():
    w = np.ones((2, 2, 2, 2), np.float32)
    layer = fastdeconv.ConvTranspose2d(w)
    x = np.ones((1, 3, 3, 2), np.float32)
    before = layer(x)
    w[...] = 5   # the caller's array changes; the layer was built from a copy
    np.testing.assert_array_equal(layer(x), before)


def test_conv_transpose2d_layer_concurrent_calls_are_identical():
    rng = np.random.default_rng(3)
    w = make_weight_t(32, 4, 4, 48, 1, np.float32, rng)
    layer = fastdeconv.ConvTranspose2d(w, None, stride=2, padding=1)
    xs = [make_x((2, 9, 7, 32), np.float32, rng) for _ in range(4)]
    expected = [layer(x) for x in xs]
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        return [layer(x) for x in xs[i % 4:] + xs[:i % 4]], i % 4

    with ThreadPoolExecutor(8) as pool:
        for results, shift in pool.map(work, range(8)):
            for got, want in zip(results, expected[shift:] + expected[:shift]):
                np.testing.assert_array_equal(got, want)


# Conv2d

CONV_PARAMS = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 1), padding=((0, 2), (1, 0)), dilation=(1, 2)),
    dict(padding="same", stride=2),
    dict(padding="valid", dilation=2),
    dict(groups=2, padding=1),
    dict(groups=6, padding=1),          # depthwise
]


def _arrays(groups, dtype=np.float64, seed=0, c_in=6, c_out=6, k=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 9, 8, c_in)).astype(dtype)
    w = rng.standard_normal((c_out, k, k, c_in // groups)).astype(dtype)
    b = rng.standard_normal(c_out).astype(dtype)
    return x, w, b


@pytest.mark.parametrize("params", CONV_PARAMS, ids=str)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_conv2d_layer_equals_the_function_and_the_reference(params, dtype):
    x, w, b = _arrays(params.get("groups", 1), dtype)
    layer = fastdeconv.Conv2d(w, b, **params)
    got = layer(x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, fastdeconv.conv2d(x, w, b, **params))
    tolerance = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    want = ref.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), **params)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance, atol=tolerance * 10)
    np.testing.assert_array_equal(layer(x[0]), got[0])                    # unbatched
    out = np.empty_like(got)
    assert layer(x, out=out) is out and np.array_equal(out, got)          # out=
    np.testing.assert_array_equal(layer(x), got)                          # a shape seen before


def test_conv2d_layer_validates_at_construction():
    w = np.ones((4, 3, 3, 2), np.float32)
    with pytest.raises(ValueError, match="groups"):
        fastdeconv.Conv2d(w, groups=3)
    with pytest.raises(ValueError, match="stride"):
        fastdeconv.Conv2d(w, stride=0)
    with pytest.raises(ValueError, match="algorithm.*'phase'"):
        fastdeconv.Conv2d(w, algorithm="phase")
    with pytest.raises(ValueError, match=r"bias must have shape \(C_out,\) = \(4,\)"):
        fastdeconv.Conv2d(w, np.ones(3))
    layer = fastdeconv.Conv2d(w, groups=2, padding="valid", dilation=4)   # needs a 9x9 input at least
    assert layer.algorithm == "grouped"   # 2 -> 2 channels per group
    assert layer(np.ones((1, 9, 9, 4), np.float32)).shape == (1, 1, 1, 4)
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        layer(np.ones((1, 8, 9, 4), np.float32))
    with pytest.raises(ValueError, match="C_in"):
        layer(np.ones((1, 9, 9, 3), np.float32))


def test_conv2d_layer_keeps_its_own_weights_and_reports_its_size():
    x, w, b = _arrays(1)
    layer = fastdeconv.Conv2d(w, b, padding=1)
    want = layer(x)
    w[...] = 0
    b[...] = 0
    np.testing.assert_array_equal(layer(x), want)
    assert layer.nbytes() >= 2 * w.nbytes + b.nbytes     # its copy and the packed weights
    assert repr(layer).startswith("Conv2d(C_in=6, C_out=6, kernel=(3, 3), stride=1, padding=1")


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_conv2d_layer_property_against_the_reference(data):
    groups = data.draw(st.sampled_from([1, 2, 3]))
    cig, cog = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    kh, kw = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    stride = data.draw(st.tuples(st.integers(1, 3), st.integers(1, 3)))
    dilation = data.draw(st.tuples(st.integers(1, 2), st.integers(1, 2)))
    padding = data.draw(st.one_of(st.sampled_from(["same", "valid"]),
                                  st.tuples(st.tuples(st.integers(0, 3), st.integers(0, 3)),
                                            st.tuples(st.integers(0, 3), st.integers(0, 3)))))
    h, w_ = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((2, h, w_, cig * groups))
    weight = rng.standard_normal((cog * groups, kh, kw, cig))
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    try:
        want = ref.conv2d(x, weight, None, **params)
    except ValueError:
        with pytest.raises(ValueError):
            fastdeconv.Conv2d(weight, None, **params)(x)
        return
    np.testing.assert_allclose(fastdeconv.Conv2d(weight, None, **params)(x), want, rtol=1e-10, atol=1e-10)


# A layer state crafted by hand (never written by __reduce__): its caches map a small input to the
# geometry of a large one, which would let the kernels read past x. Run in a child: the old behaviour
# was a SIGSEGV.
_CRAFTED_STATE = """
import pickle
import numpy as np
import fastdeconv
from fastdeconv import _params

w = np.ones((4, 3, 3, 4), np.float32)
real = fastdeconv.ConvTranspose2d(w)
x = np.ones((1, 2, 2, 4), np.float32)
big = _params.resolve_conv_transpose2d((1, 512, 512, 4), w.shape)
state = {key: value for key, value in vars(real).items() if key in ("weight", "bias", "geometry", "backend",
                                                                   "algorithm", "_kwargs")}
state["_geometries"] = {(x.shape, None): big}
state["_ready"] = {}
state["_layers"] = {}


class Crafted:
    def __reduce__(self):
        return object.__new__, (fastdeconv.ConvTranspose2d,), state


layer = pickle.loads(pickle.dumps(Crafted()))
y = layer(x)
assert y.shape == (1, 4, 4, 4), y.shape
np.testing.assert_allclose(y, fastdeconv.reference.conv_transpose2d(x, w), rtol=1e-6)
try:
    pickle.loads(pickle.dumps(type("Bad", (), {"__reduce__": lambda self: (object.__new__,
                                               (fastdeconv.Conv2d,), {"bias": None})})()))
except TypeError as error:
    assert "weight" in str(error), error
else:
    raise AssertionError("a state without a weight was accepted")
print("ok")
"""


def test_a_crafted_layer_state_is_rebuilt_not_trusted():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CRAFTED_STATE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"


# The packed size per algorithm after a call on the case's input, as docs/performance.rst ("Memory") and
# docs/guide/algorithms.rst state it: the transformed weights of winograd at most 6.4x the weights (20x with
# merged groups), 6.0x for the convolution's (im2col's packing included), every other algorithm about the
# weights' size; a winograd layer whose calls its direct kernel runs holds only that kernel's packing.
_PACKED_RATIO_BOUND = {("conv_transpose2d", "winograd"): 6.4, ("conv2d", "winograd"): 6.0}


@pytest.mark.parametrize("case", [c for c in SUITE_CASES.values() if 4 * np.prod(c.weight_shape) >= 16 << 10],
                         ids=lambda c: c.name)
def test_packed_weights_stay_within_the_documented_ratio(case):
    x, w, b = case.arrays()
    function, layer_class, _ = case.functions()
    layer = layer_class(w, b, **case.kwargs)
    layer(x)
    packed = layer.nbytes() - w.nbytes - (0 if b is None else b.nbytes)
    bound = 20.0 if layer.algorithm == "winograd" and case.groups > 1 else \
        _PACKED_RATIO_BOUND.get((function.__name__, layer.algorithm), 1.3)
    assert w.nbytes <= packed <= bound * w.nbytes, (layer.algorithm, packed / w.nbytes)
    if layer.algorithm == "winograd":   # the documented way back to the weights' size
        lean = layer_class(w, b, **case.kwargs, algorithm="phase" if layer_class is fastdeconv.ConvTranspose2d
                           else "im2col")
        assert lean.nbytes() - w.nbytes - (0 if b is None else b.nbytes) <= 1.1 * w.nbytes
