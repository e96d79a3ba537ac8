"""Convolutions of few pixels and many weights (a U-Net's innermost layers: 512 channels, 4x4
kernel, a 2x2 or 1x1 image): im2col cuts the output channels between threads when the images have
fewer pixels than a group has output channels, and leaves out the taps in the padding when every
weight is finite (0 * w = 0 there). Checked against the reference serially and threaded, float32 and
float64, with groups and a batch; with an Inf or NaN weight, where the padding taps must multiply
(0 * Inf = NaN)."""

from __future__ import annotations

import numpy as np
import pytest

from fastdeconv._backends import cpu as _cpu_backend

from helpers import Case, check_case, threaded

FEW_PIXELS = [
    Case("c", n=1, hw=(2, 2), c_in=16, c_out=200, kernel=(4, 4), stride=2, padding=1),
    Case("c", n=1, hw=(1, 1), c_in=8, c_out=96, kernel=(3, 3), stride=1, padding=1, bias=True),
    Case("c", n=3, hw=(2, 3), c_in=12, c_out=160, kernel=(3, 4), stride=(1, 2), padding=(2, 1), groups=2),
    Case("c", n=1, hw=(4, 4), c_in=6, c_out=70, kernel=(4, 4), stride=2, padding=3, dilation=2, bias=True),
]


def _ids(cases):
    return [f"{c.hw}c{c.c_in}-{c.c_out}k{c.kernel}g{c.groups}n{c.n}" for c in cases]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [None, 4])
@pytest.mark.parametrize("case", FEW_PIXELS, ids=_ids(FEW_PIXELS))
def test_few_pixels_match_reference(case, threads, dtype):
    assert check_case(Case(**{**case.__dict__, "threads": threads, "dtype": dtype}), "im2col")


@pytest.mark.parametrize("case", FEW_PIXELS, ids=_ids(FEW_PIXELS))
def test_threads_take_column_ranges(case):
    x, w, b = case.arrays()
    geometry = case.geometry(x, w)
    with threaded(4):
        tasks = _cpu_backend.PackedLayer(w, b, x.dtype, geometry, "im2col").runner(geometry).tasks
    cols = case.c_out // (case.groups // _cpu_backend.group_merge(geometry))   # the merged groups' columns
    assert len(tasks) > case.n
    assert set(tasks[:, 3] % 32) == {0} and tasks[:, 4].max() == cols
    out_h = geometry.output_hw[0]   # im2col's rows are counted across the batch: row r is image r // out_h's
    for image in range(case.n):   # each image's column ranges cover its output channels once
        ranges = sorted((c0, c1) for _, r0, r1, c0, c1 in tasks if (r0, r1) == (image * out_h, (image + 1) * out_h))
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


@pytest.mark.parametrize("threads", [None, 4])
@pytest.mark.parametrize("value", [np.inf, np.nan], ids=["inf", "nan"])
@pytest.mark.parametrize("case", FEW_PIXELS, ids=_ids(FEW_PIXELS))
def test_a_nonfinite_weight_multiplies_the_padding(case, value, threads):
    """A weight of an edge tap, which every output pixel meets in the padding here: the sum has
    0 * Inf = NaN in it, as in the reference, so the padding taps are not left out."""
    x, w, b = case.arrays()
    w[1, 0, 0, 0] = value
    with threaded(threads):
        got = case.call(x, w, b, backend="cpu", algorithm="im2col")
    ref = case.reference(x, w, b)
    assert np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got[np.isfinite(ref)], ref[np.isfinite(ref)], rtol=1e-4, atol=1e-5)
