"""Kernel safety: a non-finite value reaches exactly the pixels the formula puts it in;
geometries at the 64-bit bound of src/runtime/conv_geometry.h give exact results; unaligned arrays never reach
the kernels; every SIMD kernel runs only where the CPU has all the features it was compiled for;
col2im's workspace does not grow with the image."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fastdeconv
from fastdeconv import _cpu
from fastdeconv._backends import cpu as _cpu_backend

from helpers import (CONV_ALGORITHMS, DECONV_ALGORITHMS, assert_close, conv_supported, deconv_supported, make_bias,
                     make_weight_c, make_weight_t, make_x, channel_signs, threaded)

# ----------------------------------------------------------------------------------------------
# 1. Non-finite values: a tap outside the image is not part of the sum, so it must not multiply
#    anything (0 * Inf = NaN). The reference's NaN/Inf positions are the specification.
# ----------------------------------------------------------------------------------------------


def test_issue_example_infinite_weight_poisons_no_pixel(deconv_path):
    algorithm, isa = deconv_path
    x = np.ones((1, 2, 2, 2), np.float32)
    w = np.ones((2, 3, 3, 8), np.float32)
    w[0, 0, 0, 0] = np.inf
    if not deconv_supported(algorithm, x.shape, w.shape):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    got = fastdeconv.conv_transpose2d(x, w, algorithm=algorithm)
    ref = fastdeconv.conv_transpose2d(x, w, backend="reference")
    assert np.isnan(ref).sum() == 0 and np.isinf(ref).sum() == 4
    assert np.isnan(got).sum() == 0, f"{algorithm}/{isa}"
    np.testing.assert_array_equal(got, ref)


# (hw, c_in, c_out, groups, kernel, stride, padding, output_padding, dilation)
NONFINITE_DECONV = {
    "k3s1p1": ((4, 5), 3, 4, 1, (3, 3), 1, 1, 0, 1),
    "k4s2p1": ((5, 4), 4, 6, 1, (4, 4), 2, 1, 0, 1),
    "mixed": ((3, 6), 2, 3, 1, (3, 2), (2, 3), ((2, 1), (0, 2)), (1, 0), (2, 1)),
    "groups": ((4, 4), 4, 4, 2, (5, 5), 3, 4, 0, 1),
    "depthwise_x2": ((5, 5), 3, 6, 3, (3, 3), 2, 1, 0, 1),
    "depthwise_x1": ((6, 7), 5, 5, 5, (4, 4), 2, 3, 0, 1),
    "depthwise_x1_wide": ((3, 4), 20, 20, 20, (3, 3), 1, 1, 0, 1),
    # several GEMM row tiles, border and interior pixels in one chunk
    "tiles": ((9, 23), 8, 40, 1, (3, 3), 1, 1, 0, 1),
    # every output pixel has taps outside the image
    "all_border": ((2, 3), 2, 2, 1, (7, 7), 1, 2, 0, 1),
    # a kernel equal to the stride, cropped: each output has one term, the ends of a row cut
    "exact_cover": ((5, 6), 6, 3, 1, (2, 2), 2, 1, 0, 1),
    "exact_cover_grouped": ((4, 5), 4, 4, 2, (3, 2), (3, 2), (1, 0), 0, 1),
}


def _nonfinite_positions(shape, where, rng, transposed=True):
    """Indices of the elements to make non-finite: corners (their taps are the ones most often
    outside the image) and one random element."""
    if where == "x":
        n, h, w, c = shape
        return [(0, 0, 0, rng.integers(c)), (n - 1, h - 1, w - 1, rng.integers(c)),
                tuple(int(rng.integers(s)) for s in shape)]
    o, kh, kw, i = shape
    return [(rng.integers(o), 0, 0, rng.integers(i)), (rng.integers(o), kh - 1, kw - 1, rng.integers(i)),
            tuple(int(rng.integers(s)) for s in shape)]


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("where", ["x", "weight"])
@pytest.mark.parametrize("name", list(NONFINITE_DECONV))
def test_nonfinite_deconv_matches_reference(deconv_path, name, where, value):
    algorithm, isa = deconv_path
    hw, cin, cout, groups, kernel, stride, padding, op, dilation = NONFINITE_DECONV[name]
    kwargs = dict(stride=stride, padding=padding, output_padding=op, dilation=dilation, groups=groups)
    rng = np.random.default_rng(len(name))
    for dtype in (np.float32, np.float64):
        signs = channel_signs(cout, rng)
        x = make_x((2, *hw, cin), dtype, rng)
        w = make_weight_t(cin, *kernel, cout, groups, dtype, rng, signs)
        b = make_bias(cout, dtype, rng, signs)
        if not deconv_supported(algorithm, x.shape, w.shape, **kwargs):
            pytest.skip(f"{algorithm} declares this geometry unsupported")
        target = x if where == "x" else w
        for index in _nonfinite_positions(target.shape, where, rng):
            target[index] = value
        ref = fastdeconv.conv_transpose2d(x, w, b, **kwargs, backend="reference")
        assert not np.isfinite(ref).all()
        for threads in (None, 2):
            if threads is None:
                got = fastdeconv.conv_transpose2d(x, w, b, **kwargs, algorithm=algorithm)
            else:
                with threaded(threads):
                    got = fastdeconv.conv_transpose2d(x, w, b, **kwargs, algorithm=algorithm)
            assert_close(got, ref, dtype, kernel[0] * kernel[1] * cin, case=name, algorithm=algorithm, isa=isa,
                         where=where, value=value, threads=threads, dtype=np.dtype(dtype).name)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("where", ["x", "weight"])
def test_nonfinite_conv2d_matches_reference(conv_path, where, value):
    """conv2d's formula reads x as zero outside the image (an explicitly zero-padded input, as the
    reference computes it), so there a padding tap does multiply: 0 * Inf = NaN on both sides.
    The depthwise geometries (groups = C_in) put the Inf on the kernel's edge taps, which the
    depthwise kernel's border pixels, register tiles and padding rows all meet (as do the grouped
    ones, 4 -> 4 and 4 -> 6 channels per group, for "grouped")."""
    algorithm, isa = conv_path
    rng = np.random.default_rng(1)
    checked = 0
    for hw, cin, cout, groups, kernel, stride, padding, dilation in [
            ((5, 6), 3, 4, 1, (3, 3), 1, 1, 1), ((7, 5), 4, 6, 2, (3, 2), (2, 1), ((2, 1), (0, 3)), (1, 2)),
            ((9, 23), 8, 40, 1, (3, 3), 1, 1, 1), ((8, 11), 20, 6, 1, (3, 3), 2, 1, 1),
            ((5, 6), 3, 3, 3, (3, 3), 1, 1, 1), ((9, 23), 40, 40, 40, (3, 3), 1, 1, 1),
            ((7, 21), 17, 34, 17, (5, 5), 2, 2, 1), ((7, 5), 4, 12, 4, (3, 2), (2, 1), ((2, 1), (0, 3)), (1, 2)),
            ((6, 30), 9, 9, 9, (3, 3), (1, 2), ((3, 0), (1, 4)), 1),
            ((9, 23), 32, 32, 8, (3, 3), 1, 1, 1), ((8, 19), 12, 18, 3, (5, 5), 2, 2, 1)]:
        if not _cpu_backend.supports(algorithm, _conv_geometry((2, *hw, cin), (cout, *kernel, cin // groups),
                                                               stride, padding, dilation, groups)):
            continue
        checked += 1
        signs = channel_signs(cout, rng)
        x = make_x((2, *hw, cin), np.float32, rng)
        w = make_weight_c(cout, *kernel, cin, groups, np.float32, rng, signs)
        target = x if where == "x" else w
        for index in _nonfinite_positions(target.shape, where, rng):
            target[index] = value
        kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        ref = fastdeconv.conv2d(x, w, **kwargs, backend="reference")
        assert not np.isfinite(ref).all()
        got = fastdeconv.conv2d(x, w, **kwargs, backend="cpu", algorithm=algorithm)
        assert_close(got, ref, np.float32, kernel[0] * kernel[1] * cin, algorithm=algorithm, isa=isa, where=where,
                     hw=hw, groups=groups)
    assert checked >= 3


def _conv_geometry(x_shape, w_shape, stride, padding, dilation, groups):
    from fastdeconv._params import resolve_conv2d

    return resolve_conv2d(x_shape, w_shape, stride, padding, dilation, groups)


# ----------------------------------------------------------------------------------------------
# 2. Geometries near the kernels' 64-bit bound (src/runtime/conv_geometry.h): huge strides, dilations and
#    pads on small images. The reference cannot allocate these canvases, so each is compared with
#    an equivalent small geometry (the same taps land on the same pixels).
# ----------------------------------------------------------------------------------------------

BIG = 2 ** 60


def _t_arrays(shape, kernel, cog, groups=1, seed=0):
    rng = np.random.default_rng(seed)
    cin = shape[-1]
    signs = channel_signs(cog * groups, rng)
    x = make_x(shape, np.float64, rng)
    w = make_weight_t(cin, *kernel, cog * groups, groups, np.float64, rng, signs)
    b = make_bias(cog * groups, np.float64, rng, signs)
    return x, w, b


@pytest.mark.parametrize("algorithm", [None, *DECONV_ALGORITHMS])
def test_issue_example_huge_stride_and_padding(algorithm):
    """stride = padding = 2^60: the 1x1 output is the one input pixel (1, 1) times the 1x1 kernel
    (col2im read past its buffer and returned 8.0 instead of 4.0)."""
    x = np.ones((1, 3, 3, 4), np.float32)
    w = np.ones((4, 1, 1, 8), np.float32)
    if not deconv_supported(algorithm, x.shape, w.shape, stride=BIG, padding=BIG):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    y = fastdeconv.conv_transpose2d(x, w, stride=BIG, padding=BIG, algorithm=algorithm)
    np.testing.assert_array_equal(y, np.full((1, 1, 1, 8), 4.0, np.float32))


# name: (x shape, kernel, cog, groups, huge kwargs, small kwargs, weight slice of the small equivalent)
HUGE_DECONV = {
    # tap 1 of each axis lands at iy*s, tap 0 a dilation (2^60) above/left of the output
    "dilation_pad_begin": ((2, 3, 4, 3), (2, 2), 5, 1,
                           dict(stride=(2, 3), dilation=BIG, padding=((BIG, 0), (BIG, 0))),
                           dict(stride=(2, 3)), np.s_[:, 1:, 1:, :]),
    # tap 0 lands at iy*s, tap 1 beyond the output's end; output_padding adds a bias-only row/column
    "dilation_pad_end": ((1, 3, 2, 4), (2, 2), 3, 1,
                         dict(stride=2, dilation=BIG, padding=((0, BIG), (0, BIG)), output_padding=1),
                         dict(stride=2, output_padding=1), np.s_[:, :1, :1, :]),
    "dilation_pad_begin_depthwise": ((1, 4, 3, 6), (2, 2), 2, 6,
                                     dict(stride=(3, 2), dilation=BIG, padding=((BIG, 0), (BIG, 0)), groups=6),
                                     dict(stride=(3, 2), groups=6), np.s_[:, 1:, 1:, :]),
    "dilation_pad_begin_depthwise_x1": ((1, 4, 3, 20), (2, 2), 1, 20,
                                        dict(stride=(2, 4096), dilation=BIG, padding=((BIG, 0), (BIG, 0)),
                                             groups=20),
                                        dict(stride=(2, 4096), groups=20), np.s_[:, 1:, 1:, :]),
    "dilation_pad_begin_groups": ((1, 3, 3, 4), (2, 2), 4, 2,
                                  dict(stride=2, dilation=(BIG, 3 * 2 ** 59), padding=((BIG, 0), (3 * 2 ** 59, 0)),
                                       groups=2),
                                  dict(stride=2, groups=2), np.s_[:, 1:, 1:, :]),
}


@pytest.mark.parametrize("algorithm", DECONV_ALGORITHMS)
@pytest.mark.parametrize("name", list(HUGE_DECONV))
def test_huge_geometry_deconv(isa_path, algorithm, name):
    shape, kernel, cog, groups, huge, small, taps = HUGE_DECONV[name]
    x, w, b = _t_arrays(shape, kernel, cog, groups)
    if not deconv_supported(algorithm, x.shape, w.shape, **huge):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    want = fastdeconv.conv_transpose2d(x, np.ascontiguousarray(w[taps]), b, **small, backend="reference")
    got = fastdeconv.conv_transpose2d(x, w, b, **huge, algorithm=algorithm)
    assert_close(got, want, np.float64, w.shape[0] * 4, case=name, algorithm=algorithm, isa=isa_path)


@pytest.mark.parametrize("algorithm", DECONV_ALGORITHMS)
def test_huge_stride_deconv(algorithm):
    """stride 2^60, pad 2^60, 3x3 kernel: only input pixel (1, 1) reaches the 3x3 output, whose pixel
    (oy, ox) is its tap (oy, ox). (C_out = 8: col2im formed 2^60 * C_out.)"""
    x, w, b = _t_arrays((2, 3, 3, 4), (3, 3), 8)
    if not deconv_supported(algorithm, x.shape, w.shape, stride=BIG, padding=BIG):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    got = fastdeconv.conv_transpose2d(x, w, b, stride=BIG, padding=BIG, algorithm=algorithm)
    want = np.einsum("ni,iyxo->nyxo", x[:, 1, 1], w) + b
    assert_close(got, want, np.float64, 4)


@pytest.mark.parametrize("algorithm", CONV_ALGORITHMS)
def test_huge_geometry_conv2d(isa_path, algorithm):
    rng = np.random.default_rng(3)
    groups, cout = (4, 8) if algorithm == "depthwise" else (1, 5)   # depthwise: groups == C_in, multiplier 2
    signs = channel_signs(cout, rng)
    x = make_x((2, 3, 4, 4), np.float64, rng)
    w = make_weight_c(cout, 2, 2, 4, groups, np.float64, rng, signs)
    b = make_bias(cout, np.float64, rng, signs)
    # stride = pad = 2^60, 1x1 taps: a 3x3 output whose pixel (1, 1) reads x[:, 0, 0], the rest padding
    if not conv_supported(algorithm, x.shape, w[:, :1, :1].shape, stride=BIG, padding=BIG, groups=groups):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    got = fastdeconv.conv2d(x, w[:, :1, :1], b, stride=BIG, padding=BIG, groups=groups, algorithm=algorithm)
    want = np.broadcast_to(b, (2, 3, 3, cout)).copy()
    want[:, 1, 1] += fastdeconv.conv2d(x[:, :1, :1], w[:, :1, :1], groups=groups, backend="reference")[:, 0, 0]
    assert_close(got, want, np.float64, 4, algorithm=algorithm, isa=isa_path)
    # dilation 2^60 with the same top/left pad: tap (1, 1) reads (oy, ox), tap 0 the padding
    got = fastdeconv.conv2d(x, w, b, dilation=BIG, padding=((BIG, 0), (BIG, 0)), groups=groups, algorithm=algorithm)
    want = fastdeconv.conv2d(x, np.ascontiguousarray(w[:, 1:, 1:]), b, groups=groups, backend="reference")
    assert_close(got, want, np.float64, 4, algorithm=algorithm, isa=isa_path)


# At the bound itself: per axis in + out + (in-1)*s + (k-1)*d + pads + s + d (transposed; (out-1)*s for
# a convolution) is 2^63 - 1 or just below, the largest that src/runtime/conv_geometry.h allows.
LIMIT = 2 ** 63 - 1


@pytest.mark.parametrize("algorithm", DECONV_ALGORITHMS)
def test_at_the_bound_deconv_dilation(isa_path, algorithm):
    # in = 2, k = 2, s = 1, d = pad_begin = D: out = 2, and the sum is 3*D + 6
    big = (LIMIT - 6) // 3
    groups = 3 if algorithm == "depthwise" else 1
    x, w, b = _t_arrays((1, 2, 2, 3), (2, 2), 4, groups)
    huge = dict(dilation=big, padding=((big, 0), (big, 0)), groups=groups)
    if not deconv_supported(algorithm, x.shape, w.shape, **huge):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    want = fastdeconv.conv_transpose2d(x, np.ascontiguousarray(w[:, 1:, 1:]), b, groups=groups, backend="reference")
    got = fastdeconv.conv_transpose2d(x, w, b, **huge, algorithm=algorithm)
    assert_close(got, want, np.float64, 12, algorithm=algorithm, isa=isa_path)


def test_at_the_bound_deconv_stride():
    # in = 3, k = 1, s = pad = D: out = 1, and the sum is 5*D + 5
    big = (LIMIT - 5) // 5
    x, w, b = _t_arrays((2, 3, 3, 4), (1, 1), 8)
    got = fastdeconv.conv_transpose2d(x, w, b, stride=big, padding=big, algorithm="col2im")
    assert_close(got, (x[:, 1:2, 1:2] @ w[:, 0, 0]) + b, np.float64, 4)


@pytest.mark.parametrize("algorithm", CONV_ALGORITHMS)
def test_at_the_bound_conv2d(isa_path, algorithm):
    rng = np.random.default_rng(4)
    groups, cout = (4, 8) if algorithm == "depthwise" else (1, 5)
    x = make_x((2, 3, 3, 4), np.float64, rng)
    w = make_weight_c(cout, 2, 2, 4, groups, np.float64, rng)
    # k = 2, s = 1, d = pad_top = D: out = in = 3, the sum 3*D + 3*in
    big = (LIMIT - 9) // 3
    if not conv_supported(algorithm, x.shape, w.shape, dilation=big, padding=((big, 0), (big, 0)), groups=groups):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    got = fastdeconv.conv2d(x, w, dilation=big, padding=((big, 0), (big, 0)), groups=groups, algorithm=algorithm)
    want = fastdeconv.conv2d(x, np.ascontiguousarray(w[:, 1:, 1:]), groups=groups, backend="reference")
    assert_close(got, want, np.float64, 4, algorithm=algorithm, isa=isa_path)
    # k = 1, s = pad = D: out = 3, the sum 5*D + 7; output pixel (1, 1) reads x[:, 0, 0]
    big = (LIMIT - 7) // 5
    if not conv_supported(algorithm, x.shape, (cout, 1, 1, 4 // groups), stride=big, padding=big, groups=groups):
        return   # "winograd" runs dilations with stride 1 only
    got = fastdeconv.conv2d(x, w[:, :1, :1], stride=big, padding=big, groups=groups, algorithm=algorithm)
    want = np.zeros((2, 3, 3, cout))
    want[:, 1, 1] = fastdeconv.conv2d(x[:, :1, :1], w[:, :1, :1], groups=groups, backend="reference")[:, 0, 0]
    assert_close(got, want, np.float64, 4, algorithm=algorithm, isa=isa_path)


# ----------------------------------------------------------------------------------------------
# 3. Unaligned arrays (a view at an odd byte offset) are C-contiguous but cannot be read as
#    float* / double*: they are copied, and an unaligned out= is filled from a new buffer.
# ----------------------------------------------------------------------------------------------


def _unaligned(array):
    buffer = np.empty(array.nbytes + 1, np.uint8)
    view = buffer[1:].view(array.dtype).reshape(array.shape)
    view[...] = array
    assert not view.flags.aligned and view.flags.c_contiguous
    return view


@pytest.fixture
def kernel_arguments_spy(monkeypatch):
    """Records the arrays handed to the compiled kernels (packing, the runner's bias, x and y), and
    fails before the call on an unaligned one (so that a sanitizer build survives the failure)."""
    seen = []
    real_packed, real_runner = _cpu.PackedWeights, _cpu.Runner

    def record(name, array):
        seen.append((name, array))
        _assert_all_aligned(seen[-1:])

    def packed_weights(algorithm, weight, geometry):
        record("weight", weight)
        return real_packed(algorithm, weight, geometry)

    class Runner:
        def __init__(self, packed, bias, geometry):
            if bias is not None:
                record("bias", bias)
            self._runner = real_runner(packed, bias, geometry)

        def run(self, x, y):
            record("x", x)
            record("y", y)
            return self._runner.run(x, y)

    monkeypatch.setattr(_cpu_backend._cpu, "PackedWeights", packed_weights)
    monkeypatch.setattr(_cpu_backend._cpu, "Runner", Runner)
    return seen


def _assert_all_aligned(seen):
    assert seen
    for name, array in seen:
        assert array.flags.aligned, f"an unaligned {name} reached the kernels"


@pytest.mark.parametrize("unaligned", ["x", "weight", "bias", "out"])
@pytest.mark.parametrize("algorithm", [None, *DECONV_ALGORITHMS])
def test_unaligned_arrays_never_reach_the_kernels(kernel_arguments_spy, algorithm, unaligned):
    rng = np.random.default_rng(5)
    groups = 4 if algorithm == "depthwise" else 1
    x = make_x((2, 5, 6, 4), np.float32, rng)
    w = make_weight_t(4, 3, 3, 8, groups, np.float32, rng)
    b = rng.uniform(size=8).astype(np.float32)
    kwargs = dict(stride=2, padding=1, groups=groups)
    want = fastdeconv.conv_transpose2d(x, w, b, **kwargs, algorithm=algorithm)
    kernel_arguments_spy.clear()
    fastdeconv.clear_weight_cache()   # the call below packs and binds afresh, through the spy
    args = {"x": x, "weight": w, "bias": b}
    out = None
    if unaligned == "out":
        out = _unaligned(np.zeros_like(want))
    else:
        args[unaligned] = _unaligned(args[unaligned])
    got = fastdeconv.conv_transpose2d(args["x"], args["weight"], args["bias"], **kwargs, algorithm=algorithm,
                                      out=out)
    _assert_all_aligned(kernel_arguments_spy)
    np.testing.assert_array_equal(got, want)
    if out is not None:
        assert got is out


@pytest.mark.parametrize("unaligned", ["x", "weight", "bias", "out"])
def test_unaligned_arrays_never_reach_the_kernels_conv2d(kernel_arguments_spy, unaligned):
    rng = np.random.default_rng(6)
    x = make_x((2, 5, 6, 4), np.float64, rng)
    w = make_weight_c(8, 3, 3, 4, 1, np.float64, rng)
    b = rng.uniform(size=8)
    want = fastdeconv.conv2d(x, w, b, padding=1)
    kernel_arguments_spy.clear()
    fastdeconv.clear_weight_cache()   # the call below packs and binds afresh, through the spy
    args = {"x": x, "weight": w, "bias": b}
    out = _unaligned(np.zeros_like(want)) if unaligned == "out" else None
    if out is None:
        args[unaligned] = _unaligned(args[unaligned])
    got = fastdeconv.conv2d(args["x"], args["weight"], args["bias"], padding=1, out=out)
    _assert_all_aligned(kernel_arguments_spy)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("unaligned", ["x", "weight", "bias"])
def test_unaligned_arrays_never_reach_the_kernels_plan_first_call(kernel_arguments_spy, unaligned):
    rng = np.random.default_rng(7)
    args = {"x": make_x((1, 4, 4, 4), np.float32, rng), "weight": make_weight_t(4, 3, 3, 8, 1, np.float32, rng),
            "bias": rng.uniform(size=8).astype(np.float32)}
    want = fastdeconv.conv_transpose2d(args["x"], args["weight"], args["bias"], stride=2)
    args[unaligned] = _unaligned(args[unaligned])
    layer = fastdeconv.ConvTranspose2d(args["weight"], args["bias"], stride=2)
    np.testing.assert_array_equal(layer(args["x"]), want)
    _assert_all_aligned(kernel_arguments_spy)


@pytest.mark.parametrize("unaligned", ["x", "out"])
def test_unaligned_arrays_never_reach_the_kernels_plan_fast_path(kernel_arguments_spy, unaligned):
    rng = np.random.default_rng(8)
    x = make_x((1, 4, 4, 4), np.float32, rng)
    layer = fastdeconv.ConvTranspose2d(make_weight_t(4, 3, 3, 8, 1, np.float32, rng), stride=2)
    want = layer(x)   # the shape is now known: the next call takes the fast path
    kernel_arguments_spy.clear()
    fastdeconv.clear_weight_cache()   # the call below packs and binds afresh, through the spy
    if unaligned == "x":
        got = layer(_unaligned(x))
    else:
        got = layer(x, out=_unaligned(np.zeros_like(want)))
    np.testing.assert_array_equal(got, want)
    _assert_all_aligned(kernel_arguments_spy)


# ----------------------------------------------------------------------------------------------
# 4. SIMD dispatch: a kernel compiled for a feature list runs only where the CPU has all of it.
# ----------------------------------------------------------------------------------------------

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.skipif(not SRC.is_dir(), reason="needs the source tree (src/)")
def test_simd_kernels_are_compiled_for_exactly_the_features_dispatch_checks():
    """Every target attribute in src/ comes from a feature list (FD_TARGET_FEATURES) whose run-time
    check (FD_CPU_SUPPORTS) is in the same file, so the two cannot drift apart (the AVX-512
    depthwise kernels were compiled for avx512f/vl/bw/dq and dispatched on avx512f alone)."""
    sources = [p for p in sorted(SRC.rglob("*.[ch]")) if p.relative_to(SRC).parts[0] != "third_party"]
    assert any(p.name == "gemm_internal.h" for p in sources), f"no kernel sources found under {SRC}"
    for path in sources:
        text = path.read_text()
        raw = re.findall(r"target\s*\(\s*\"[^)]*\)", text)
        assert not raw, f"{path.name}: a target attribute that no run-time check mirrors: {raw}"
        for features in set(re.findall(r"FD_TARGET_FEATURES\((\w+)\)", text)) - {"list"}:
            assert f"FD_CPU_SUPPORTS({features})" in text, (
                f"{path.name} compiles kernels for {features} but never checks FD_CPU_SUPPORTS({features})")


@pytest.mark.skipif(platform.machine().lower() not in ("aarch64", "arm64"), reason="AArch64 only")
def test_aarch64_builds_have_the_neon_path():
    """An AArch64 build (a Linux aarch64 or macOS arm64 wheel) has its NEON kernels and chooses them: Advanced SIMD
    is baseline there, so a build without them (src/kernels/gemm_neon.c left out, or compiled to its stubs) would
    ship the portable GEMM silently. show_config()'s simd_paths reads the same table."""
    supported = _cpu.build_info()["gemm_isa_supported"]
    assert supported["neon"], supported
    assert not supported["avx2"] and not supported["avx512"], supported
    # the best path is chosen, unless the environment forced another (FASTDECONV_ISA, parsed at import)
    assert _cpu.get_gemm_isa() == "neon" or _cpu.ISA_ENV in os.environ


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="Linux only")
def test_gemm_isa_support_matches_cpu_flags():
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if not flags:
        pytest.skip("cpuinfo flags not readable")
    supported = _cpu.build_info()["gemm_isa_supported"]
    if supported["avx512"]:
        assert {"avx", "avx2", "fma", "avx512f"} <= flags
    if supported["avx2"]:
        assert {"avx", "avx2", "fma"} <= flags


# ----------------------------------------------------------------------------------------------
# 5. col2im's workspace: bounded whatever the image width and the weight's size; a row longer than
#    the column buffer is computed in pieces, and a pixel's columns longer than it in blocks, with the
#    same result.
# ----------------------------------------------------------------------------------------------


def _col2im_matches_reference(isa, dtype, rng, x_shape, kernel, cout, *, groups, **kwargs):
    """col2im at 1 and 2 threads against the reference, on seeded data with sign-balanced channels."""
    cin = x_shape[-1]
    signs = channel_signs(cout, rng)
    x = make_x(x_shape, dtype, rng)
    w = make_weight_t(cin, *kernel, cout, groups, dtype, rng, signs)
    b = make_bias(cout, dtype, rng, signs)
    ref = fastdeconv.conv_transpose2d(x, w, b, **kwargs, groups=groups, backend="reference")
    for threads in (1, 2):
        with threaded(threads):
            got = fastdeconv.conv_transpose2d(x, w, b, **kwargs, groups=groups, algorithm="col2im")
        assert_close(got, ref, dtype, kernel[0] * kernel[1] * cin // groups, isa=isa, threads=threads)


def _peak_rss_growth(script, threads):
    """Run ``script`` (it prints the peak-RSS growth of its call and the bytes it must hold) with
    ``threads``; the two numbers."""
    done = subprocess.run([sys.executable, "-c", script, str(threads)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    grown, needed = map(int, done.stdout.split())
    return grown, needed


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride, dilation, groups", [(1, 1, 1), (3, 2, 2), (2, 1, 4), ((5, 7), 1, 1), ((5, 7), 1, 2)])
def test_col2im_row_pieces_match_reference(isa_path, dtype, stride, dilation, groups):
    """kH*kW*C_out/g = 5*7*64 elements per pixel: the 1 MiB buffer holds fewer than W = 300 pixels. A
    stride equal to the kernel makes each output a single term (the copied columns)."""
    rng = np.random.default_rng(9)
    cin, cout = 4, 64 * groups
    _col2im_matches_reference(isa_path, dtype, rng, (2, 3, 300, cin), (5, 7), cout,
                              stride=stride, padding=(2, 3), dilation=dilation, groups=groups)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cin, cog, kernel, stride, dilation, groups", [
    (1, 600, (5, 5), 1, 1, 1),      # 15000 columns: blocks end inside a tap's channels
    (2, 7000, (1, 1), 1, 1, 1),     # one tap wider than a block
    (4, 5441, (1, 1), 2, 1, 1),     # one column past a whole block
    (3, 300, (3, 7), 2, 3, 2),      # dilated, grouped: the per-tap scatter
    (2, 2000, (3, 3), 2, 1, 3),
])
def test_col2im_column_blocks_match_reference(isa_path, dtype, cin, cog, kernel, stride, dilation, groups):
    """kH*kW*C_out/g columns per pixel beyond what 48 pixels of the 1 MiB buffer hold: the GEMM and
    the scatter run over blocks of whole packed panels."""
    rng = np.random.default_rng(10)
    cin, cout = cin * groups, cog * groups
    _col2im_matches_reference(isa_path, dtype, rng, (2, 5, 6, cin), kernel, cout,
                              stride=stride, padding=(1, 2), dilation=dilation, groups=groups)


_LARGE_WEIGHT = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import fastdeconv
    fastdeconv.set_num_threads(int(sys.argv[1]))
    x = np.ones((1, 7, 7, 1), np.float32)
    w = np.ones((1, 64, 64, 1024), np.float32)
    fastdeconv.conv_transpose2d(x, w[:, :2, :2], algorithm="col2im")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    y = fastdeconv.conv_transpose2d(x, w, algorithm="col2im")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert y[0, 0, 0, 0] == 1 and y[0, 1, 1, 5] == 4 and y.shape == (1, 70, 70, 1024)
    print((after - before) * 1024, y.nbytes + w.nbytes)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
@pytest.mark.parametrize("threads", [1, 2])
def test_col2im_workspace_does_not_grow_with_the_weight(threads):
    """w (1, 64, 64, 1024), 16 MiB, on a 7x7 input: one pixel's columns are 4M elements, and the
    column buffer was 48 pixels of them per thread (768 MiB each)."""
    grown, result_and_packed = _peak_rss_growth(_LARGE_WEIGHT, threads)
    assert grown < result_and_packed + (48 << 20), (
        f"peak RSS grew by {grown >> 20} MiB for a {result_and_packed >> 20} MiB result and packed weight")


_WIDE_IMAGE = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import fastdeconv
    fastdeconv.set_num_threads(int(sys.argv[1]))
    x = np.ones((1, 4, 100000, 8), np.float32)
    w = np.ones((8, 16, 16, 4), np.float32)
    fastdeconv.conv_transpose2d(x[:, :, :64], w, algorithm="col2im")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    y = fastdeconv.conv_transpose2d(x, w, algorithm="col2im")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert y[0, 8, 50000, 0] == 8 * 16 * 4 and y[0, 0, 0, 0] == 8
    print((after - before) * 1024, y.nbytes)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
@pytest.mark.parametrize("threads", [1, 2])
def test_col2im_workspace_does_not_grow_with_the_image(threads):
    """x (1, 4, 100000, 8), w (8, 16, 16, 4): a 29 MiB result; the column buffer was one input row
    per thread (W*kH*kW*C_out elements, 400 MiB each)."""
    grown, result = _peak_rss_growth(_WIDE_IMAGE, threads)
    assert grown < result + (32 << 20), f"peak RSS grew by {grown >> 20} MiB for a {result >> 20} MiB result"


@pytest.mark.parametrize("out_channels,chunk", [(8, 48), (64, 576)])
def test_an_indirect_gemm_chunk_grows_with_the_weights_it_reads(out_channels, chunk):
    """Each chunk's GEMM reads all of the packed weights: over 2 MiB of them (64 outputs of K = 9·2048) a
    chunk takes at least 576 output pixels, where A's 512 KiB budget alone gives 48 (a 3x3 layer of 2048
    channels read its 36 MiB of weights once per 48 pixels; src/algorithms/algorithm.h, fd_gemm_chunk).
    Workspace: a chunk's 9 A-row pointers and one C-row pointer per pixel, in whole cache lines."""
    from fastdeconv import _params

    w = np.zeros((out_channels, 3, 3, 2048), np.float32)
    geometry = _params.resolve_conv2d((1, 32, 32, 2048), w.shape, 1, 1)
    runner = _cpu.Runner(_cpu.PackedWeights("im2col", w, geometry), None, geometry)
    assert runner.workspace_bytes == -(-chunk * 10 * 8 // 64) * 64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chunks_of_a_large_weight_give_the_reference_and_the_same_bits_at_any_thread_count(dtype):
    """2.25 MiB of float32 weights (256 -> 256, 3x3) over 1400 output pixels: chunks of 576, 576 and 248."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 35, 40, 256)).astype(dtype)
    w = rng.standard_normal((256, 3, 3, 256)).astype(dtype)
    results = []
    for threads in (1, 2, 3):
        with threaded(threads):
            results.append(fastdeconv.Conv2d(w, None, padding=1, algorithm="im2col")(x))
    assert_close(results[0], fastdeconv.reference.conv2d(x, w, padding=1), dtype, 9 * 256)
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


def test_a_runner_refuses_weights_packed_for_another_layer():
    """Packed weights run only with a geometry of their packing (kind, channels, groups, kernel, stride,
    dilation) and a bias of C_out values: a mismatch would make the kernels read past the
    blob (a grouped layer's merged packing with the unmerged geometry did, in a test helper)."""
    from fastdeconv import _params

    w = np.ones((8, 3, 3, 4), np.float32)
    geometry = _params.resolve_conv_transpose2d((1, 5, 5, 8), w.shape, groups=2)
    packed = _cpu.PackedWeights("phase", w, geometry)
    _cpu.Runner(packed, np.zeros(8, np.float32), geometry)   # its own geometry, any input size
    _cpu.Runner(packed, None, _params.resolve_conv_transpose2d((3, 9, 2, 8), w.shape, groups=2))
    merged = _params.resolve_conv_transpose2d((1, 5, 5, 8), (8, 3, 3, 8), groups=1)
    for other in (merged, _params.resolve_conv_transpose2d((1, 5, 5, 8), w.shape, groups=2, stride=2),
                  _params.resolve_conv_transpose2d((1, 5, 5, 8), w.shape, groups=2, dilation=2)):
        with pytest.raises(ValueError, match="pack the weights for this geometry"):
            _cpu.Runner(packed, None, other)
    with pytest.raises(ValueError, match=r"bias must have shape \(8,\), got \(4,\)"):
        _cpu.Runner(packed, np.zeros(4, np.float32), geometry)
