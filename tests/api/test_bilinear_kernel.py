"""fastdeconv.bilinear_kernel: the FCN/caffe filter, the output size at the documented stride and padding,
agreement with torch's bilinear interpolate (align_corners=False) in the interior and the stated border."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import fastdeconv


def _upsample(x, factor):
    c = x.shape[-1]
    return fastdeconv.conv_transpose2d(x, fastdeconv.bilinear_kernel(factor, c, x.dtype), stride=factor,
                                       padding=factor // 2, groups=c)


def _fcn_upsample_filt(size):
    """FCN's surgery.upsample_filt, verbatim."""
    factor = (size + 1) // 2
    center = factor - 1 if size % 2 == 1 else factor - 0.5
    og = np.ogrid[:size, :size]
    return (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)


@pytest.mark.parametrize("factor", range(1, 9))
def test_the_fcn_filter_in_the_depthwise_layout(factor):
    w = fastdeconv.bilinear_kernel(factor, 3, dtype=np.float64)
    size = 2 * factor - factor % 2
    assert w.shape == (3, size, size, 1) and w.dtype == np.float64 and w.flags.c_contiguous
    for c in range(3):
        np.testing.assert_allclose(w[c, :, :, 0], _fcn_upsample_filt(size), rtol=0, atol=1e-15)
    assert fastdeconv.bilinear_kernel(factor, 2).dtype == np.float32


@pytest.mark.parametrize("factor", range(1, 9))
def test_output_is_factor_times_the_input_and_constant_interior(factor):
    x = np.ones((1, 5, 7, 2), np.float32)
    y = _upsample(x, factor)
    assert y.shape == (1, 5 * factor, 7 * factor, 2)
    b = factor // 2
    interior = y[:, b:y.shape[1] - b, b:y.shape[2] - b]
    np.testing.assert_allclose(interior, 1, rtol=1e-6)
    if b:   # the border is darker: the missing neighbour counts as zero
        assert y[0, 0, 0, 0] < 1 and y[0, -1, -1, 0] < 1


@pytest.mark.parametrize("factor", range(1, 7))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_torch_interpolate(factor, dtype):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(factor).standard_normal((2, 6, 5, 3)).astype(dtype)
    y = _upsample(x, factor)
    expected = torch.nn.functional.interpolate(torch.from_numpy(x).permute(0, 3, 1, 2), scale_factor=factor,
                                               mode="bilinear", align_corners=False).permute(0, 2, 3, 1).numpy()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    b = factor // 2
    h, w = y.shape[1:3]
    differs = np.abs(y - expected) > tol
    # exactly equal in the interior; different in every border row and column (the random data is non-zero)
    assert not differs[:, b:h - b, b:w - b].any()
    if b:
        for edge in (differs[:, :b], differs[:, h - b:], differs[:, :, :b], differs[:, :, w - b:]):
            assert edge.any(axis=-1).all(axis=0).any()
    # divided by the same convolution of ones: interpolate's result everywhere
    ones = _upsample(np.ones_like(x), factor)
    np.testing.assert_allclose(y / ones, expected, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("args, error", [
    ((0, 3), ValueError), ((2, 0), ValueError), ((2.0, 3), TypeError), ((2, True), TypeError),
    ((2, 3, np.int32), TypeError),
])
def test_bad_arguments(args, error):
    with pytest.raises(error):
        fastdeconv.bilinear_kernel(*args)


def test_docstring_examples_run():
    from fastdeconv import _bilinear

    failures, tried = doctest.testmod(_bilinear, raise_on_error=False)
    assert tried > 0 and failures == 0
