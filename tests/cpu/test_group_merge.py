"""Layers of few channels per group run their groups merged (fastdeconv._backends.cpu.group_merge): S
neighbouring groups as one group of block-diagonal weights. The merged call multiplies the other groups'
inputs by exact zeros, so it is exact for finite inputs; an input holding Inf or NaN (0 * Inf is NaN)
runs the groups unmerged. Every algorithm's property tests (test_cpu_vs_reference.py) run grouped
layers through the merge too; these are its named cases."""

from __future__ import annotations

import numpy as np
import pytest

import fastdeconv
from fastdeconv import _cpu, _params
from fastdeconv._backends import cpu as _cpu_backend
from fastdeconv.reference import conv2d as reference_conv2d
from fastdeconv.reference import conv_transpose2d as reference_conv_transpose2d


def _geometry(transposed, c_in, c_out, groups, kernel=3, stride=1):
    x_shape = (1, 6, 5, c_in)
    if transposed:
        return _params.resolve_conv_transpose2d(x_shape, (c_in, kernel, kernel, c_out // groups), stride=stride,
                                                groups=groups)
    return _params.resolve_conv2d(x_shape, (c_out, kernel, kernel, c_in // groups), stride=stride, groups=groups)


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("c_in, c_out, groups, merge", [
    (16, 16, 4, 4),       # 4 channels per group: 4 groups make 16
    (64, 64, 8, 2),       # 8 per group: 2 make 16
    (128, 128, 32, 4),    # ResNeXt-like 4-channel groups
    (32, 64, 8, 2),       # 4 in, 8 out per group: the outputs set it
    (64, 32, 8, 4),       # 8 in, 4 out per group
    (6, 6, 3, 3),         # too few channels for 16: all groups, one dense layer
    (12, 160, 2, 1),      # 80 outputs per group: the GEMMs are wide already
    (96, 96, 6, 1),       # 16 per group
    (8, 8, 8, 1),         # one input channel per group: the depthwise kernel
    (24, 24, 1, 1),       # one group
])
def test_group_merge_rule(transposed, c_in, c_out, groups, merge):
    assert _cpu_backend.group_merge(_geometry(transposed, c_in, c_out, groups)) == merge


@pytest.mark.parametrize("transposed", [True, False])
def test_merged_weights_are_block_diagonal(transposed):
    geometry = _geometry(transposed, 12, 12, 6)
    rows = 12
    w = np.arange(1, rows * 9 * 2 + 1, dtype=np.float64).reshape(rows, 3, 3, 2)
    merged = _cpu_backend.merge_group_weights(w, geometry, 3)
    assert merged.shape == (rows, 3, 3, 6)
    for r in range(rows):
        j = (r // 2) % 3   # the row's group within its merged group
        np.testing.assert_array_equal(merged[r, :, :, 2 * j:2 * j + 2], w[r])
        others = np.delete(merged[r], np.s_[2 * j:2 * j + 2], axis=-1)
        assert not others.any()


def _layer_and_reference(transposed, dtype, rng):
    if transposed:
        w = rng.standard_normal((32, 4, 4, 4)).astype(dtype)
        kwargs = dict(stride=2, padding=1, groups=8)
        # phase: with these few channels per group the automatic choice would be "planar", which never merges
        return fastdeconv.ConvTranspose2d(w, None, **kwargs, algorithm="phase"), w, kwargs, reference_conv_transpose2d
    w = rng.standard_normal((32, 3, 3, 4)).astype(dtype)
    kwargs = dict(padding=1, groups=8)
    # im2col: with these few channels per group the automatic choice would be "grouped", which never merges
    return fastdeconv.Conv2d(w, None, **kwargs, algorithm="im2col"), w, kwargs, reference_conv2d


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_input_stays_in_its_group(transposed, dtype, bad):
    """An Inf or NaN in one group's input reaches that group's outputs only, as in the reference; the
    call runs the groups unmerged, and finite inputs afterwards run merged again, unchanged."""
    rng = np.random.default_rng(7)
    layer, w, kwargs, reference = _layer_and_reference(transposed, dtype, rng)
    x = rng.standard_normal((2, 7, 6, 32)).astype(dtype)
    finite_result = layer(x)
    x_bad = x.copy()
    x_bad[1, 3, 2, 13] = bad   # group 3 of 8
    kept = x_bad.copy()
    got = layer(x_bad)
    np.testing.assert_array_equal(x_bad, kept)   # the input is never modified
    want = reference(x_bad.astype(np.float64), w.astype(np.float64), None, **kwargs)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isfinite(got[..., :12]).all() and np.isfinite(got[..., 16:]).all()   # the other groups
    finite = np.isfinite(want)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol * np.abs(want[finite]).max())
    (backend_layer,) = layer._layers.values()
    assert backend_layer._unmerged is not None
    np.testing.assert_array_equal(layer(x), finite_result)


def test_the_function_api_merges_and_falls_back_too():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 9, 9, 16)).astype(np.float32)
    w = rng.standard_normal((16, 3, 3, 4)).astype(np.float32)
    want = reference_conv2d(x.astype(np.float64), w.astype(np.float64), None, padding=1, groups=4)
    merged = dict(padding=1, groups=4, algorithm="im2col")   # automatically "grouped", which never merges
    np.testing.assert_allclose(fastdeconv.conv2d(x, w, **merged), want, rtol=1e-4, atol=1e-4)
    x[0, 4, 4, 1] = np.nan
    got = fastdeconv.conv2d(x, w, **merged)
    assert np.isnan(got[0, 3:6, 3:6, :4]).all() and not np.isnan(got[..., 4:]).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite(dtype):
    info = np.finfo(dtype)
    x = np.array([0.0, -0.0, info.max, -info.max, info.smallest_subnormal, 1.0], dtype)
    assert _cpu.all_finite(x) and _cpu.all_finite(x[:0])
    for bad in (np.inf, -np.inf, np.nan, -np.nan):
        for at in (0, 5):
            y = x.copy()
            y[at] = bad
            assert not _cpu.all_finite(y), (bad, at)
    with pytest.raises(ValueError, match="C-contiguous float32 or float64"):
        _cpu.all_finite(np.zeros((4, 4), dtype)[:, ::2])
    with pytest.raises(ValueError, match="C-contiguous float32 or float64"):
        _cpu.all_finite(np.zeros(4, np.int32))


def test_planar_keeps_its_groups():
    """"planar" runs its groups as they are (merged, it would multiply the zeros between them) and matches
    the reference; the automatic choice takes it for groups of few channels (_planar_groups_pay), and merges
    groups of more inputs onto another algorithm."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((32, 4, 4, 4)).astype(np.float32)
    x = rng.standard_normal((2, 7, 6, 32)).astype(np.float32)
    layer = fastdeconv.ConvTranspose2d(w, None, stride=2, padding=1, groups=8, algorithm="planar")
    got = layer(x)
    (backend_layer,) = layer._layers.values()
    assert layer.algorithm == "planar" and backend_layer._merge == 1
    automatic = fastdeconv.ConvTranspose2d(w, None, stride=2, padding=1, groups=8)
    automatic(x)
    (backend_layer,) = automatic._layers.values()
    assert automatic.algorithm == "planar" and backend_layer._merge == 1
    wide = fastdeconv.ConvTranspose2d(np.zeros((192, 4, 4, 4), np.float32), None, stride=2, padding=1, groups=4)
    wide(np.zeros((1, 5, 5, 192), np.float32))
    (backend_layer,) = wide._layers.values()
    assert wide.algorithm != "planar" and backend_layer._merge > 1
    want = reference_conv_transpose2d(x.astype(np.float64), w.astype(np.float64), None, stride=2, padding=1, groups=8)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
