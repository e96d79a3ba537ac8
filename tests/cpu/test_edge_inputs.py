"""Inputs at the edges of what the CPU backend's kernels handle: each matches the reference."""

from __future__ import annotations

import numpy as np
import pytest

import fastdeconv
from fastdeconv import _cpu
from fastdeconv._backends import cpu as _cpu_backend


def _check(x, w, **kwargs):
    got = fastdeconv.conv_transpose2d(x, w, **kwargs)
    want = fastdeconv.reference.conv_transpose2d(x, w, **kwargs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_read_only_inputs():
    rng = np.random.default_rng(0)
    x, w, b = rng.random((1, 4, 4, 6)), rng.random((6, 3, 3, 4)), rng.random(4)
    for array in (x, w, b):
        array.flags.writeable = False
    _check(x, w, bias=b, stride=2, padding=1)
    y = np.ones((1, 4, 4, 4))
    y.flags.writeable = False
    np.testing.assert_allclose(fastdeconv.conv2d(y, w),
                               fastdeconv.reference.conv2d(y, w), rtol=1e-12)


@pytest.mark.parametrize("groups,c_in", [(1, 3), (2, 2)])
def test_kernel_larger_than_the_phase_tables(groups, c_in):
    """A kernel side above MAX_PHASE_TAPS runs on col2im instead of failing."""
    k = _cpu.MAX_PHASE_TAPS + 3
    rng = np.random.default_rng(1)
    x = rng.random((1, 2, 2, c_in))
    w = rng.random((c_in, k, 2, 2 // groups if groups == 1 else 1))
    geometry = fastdeconv._params.resolve_conv_transpose2d(x.shape, w.shape, groups=groups)
    assert not _cpu_backend.supports("phase", geometry)
    assert _cpu_backend.choose_algorithm(geometry) == "col2im"
    _check(x, w, groups=groups)


@pytest.mark.parametrize("stride", [33, 5000, 10 ** 9])
def test_huge_stride_on_a_tiny_input(stride):
    rng = np.random.default_rng(2)
    _check(rng.random((1, 1, 1, 4)), rng.random((4, 3, 3, 2)), stride=stride, groups=2)
    _check(rng.random((1, 1, 1, 4)), rng.random((4, 3, 3, 1)), stride=stride, groups=4)


def test_byte_swapped_floats_are_accepted():
    rng = np.random.default_rng(3)
    x, w = rng.random((1, 3, 3, 2)).astype(">f4"), rng.random((2, 2, 2, 2)).astype(">f8")
    got = fastdeconv.conv_transpose2d(x, w)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, fastdeconv.reference.conv_transpose2d(x.astype("<f4"), w.astype("<f8")))


def test_unordered_padding_is_rejected():
    with pytest.raises(TypeError, match="padding"):
        fastdeconv.conv_transpose2d(np.ones((1, 3, 3, 2)), np.ones((2, 2, 2, 2)), padding={1: 2, 3: 4})


def test_plan_bias_is_cast_per_result_dtype_like_the_function():
    rng = np.random.default_rng(4)
    w, b = rng.random((2, 3, 3, 2)).astype(np.float32), np.array([1000.3, -7.123456789])
    layer = fastdeconv.ConvTranspose2d(w, b)
    for dtype in (np.float16, np.float32, np.float64):
        x = rng.random((1, 4, 4, 2)).astype(dtype)
        np.testing.assert_array_equal(layer(x), fastdeconv.conv_transpose2d(x, w, b))
    half = fastdeconv.ConvTranspose2d(w.astype(np.float16), b)
    x = rng.random((1, 4, 4, 2)).astype(np.float16)
    np.testing.assert_array_equal(half(x), fastdeconv.conv_transpose2d(x, w.astype(np.float16), b))


def test_plan_accepts_padding_larger_than_its_probe():
    layer = fastdeconv.ConvTranspose2d(np.ones((1, 3, 3, 1), np.float32), padding=70000)
    x = np.ones((1, 70000, 2, 1), np.float32)
    with pytest.raises(ValueError, match=r"input \(70000, 2\)"):
        layer(x)
