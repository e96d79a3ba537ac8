"""fastdeconv.Conv2d: the convolution layer object, with ConvTranspose2d's contract."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdeconv
from fastdeconv import reference as ref

from helpers import examples

PARAMS = [
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


@pytest.mark.parametrize("params", PARAMS, ids=str)
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
    assert layer.algorithm == "im2col"
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
