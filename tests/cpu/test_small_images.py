"""Batches of small images (a mask head's 7x7 to 28x28 regions, N 50-200): im2col gives a task whole images,
up to about 1536 output pixels (src/algorithms/conv_im2col.template.c, im2col_tasks), and orders each task's
GEMM rows by the taps they lack across all its images, so that a row tile of border pixels of one class skips
those taps. Checked: the tasks are whole images that cover the batch once; the results match the reference,
serially and threaded, with border classes of every kind (corners, edges, kernels wider than the image,
dilation, stride, groups), and with a NaN input and an Inf weight, where the padding's 0 * Inf must be NaN."""

from __future__ import annotations

import numpy as np
import pytest

from fastdeconv._backends import cpu as _cpu_backend

from helpers import Case, check_case, threaded

# Cig >= 16 and (groups > 1 or C_in >= 64): the indirect rows (fewer channels take the dense copy or row taps)
SMALL_IMAGES = [
    Case("c", n=12, hw=(7, 7), c_in=64, c_out=40, kernel=(3, 3), padding=1),                 # a mask head
    Case("c", n=7, hw=(5, 4), c_in=40, c_out=24, kernel=(3, 3), padding=1, groups=2),
    Case("c", n=5, hw=(6, 6), c_in=64, c_out=33, kernel=(5, 5), padding=2, bias=False),       # two border rings
    Case("c", n=6, hw=(3, 2), c_in=64, c_out=20, kernel=(5, 3), padding=(3, 2)),               # no inside pixel
    Case("c", n=4, hw=(9, 8), c_in=64, c_out=24, kernel=(3, 3), stride=2, padding=2, dilation=(2, 1)),
    Case("c", n=3, hw=(1, 1), c_in=64, c_out=16, kernel=(3, 3), padding=1),                   # 1x1 images
]


def _ids(cases):
    return [f"n{c.n}-{c.hw}-k{c.kernel}-p{c.padding}-g{c.groups}" for c in cases]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [None, 2, 4])
@pytest.mark.parametrize("case", SMALL_IMAGES, ids=_ids(SMALL_IMAGES))
def test_small_images_match_reference(case, threads, dtype):
    assert check_case(Case(**{**case.__dict__, "threads": threads, "dtype": dtype}), "im2col")


def _task_rows(case, threads):
    x, w, b = case.arrays()
    geometry = case.geometry(x, w)
    with threaded(threads):
        tasks = _cpu_backend.PackedLayer(w, b, x.dtype, geometry, "im2col").runner(geometry).tasks
    return sorted((int(r0), int(r1)) for _, r0, r1, _, _ in tasks), geometry.output_hw[0]


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("case", SMALL_IMAGES, ids=_ids(SMALL_IMAGES))
def test_tasks_cover_the_batch_once(case, threads):
    """Rows counted across the batch, each in one task; serially one task holds every image."""
    rows, out_h = _task_rows(case, threads)
    assert rows[0][0] == 0 and rows[-1][1] == case.n * out_h
    assert all(a[1] == b[0] for a, b in zip(rows, rows[1:])), rows
    if threads == 1:
        assert rows == [(0, case.n * out_h)]


@pytest.mark.parametrize("threads", [2, 4])
def test_a_large_batch_of_small_images_takes_whole_images_per_task(threads):
    """A mask head's batch (50 images of 7x7): tasks of several whole images each, at least two per thread
    (with few images per thread the tasks cut images into row bands instead, as before)."""
    case = Case("c", n=50, hw=(7, 7), c_in=64, c_out=16, kernel=(3, 3), padding=1)
    rows, out_h = _task_rows(case, threads)
    assert all(r0 % out_h == 0 and r1 % out_h == 0 for r0, r1 in rows), rows
    assert 2 * threads <= len(rows) < case.n, rows


@pytest.mark.parametrize("threads", [None, 4])
@pytest.mark.parametrize("value", [np.inf, np.nan], ids=["inf", "nan"])
@pytest.mark.parametrize("case", SMALL_IMAGES[:3], ids=_ids(SMALL_IMAGES[:3]))
def test_nonfinite_values_land_as_in_the_reference(case, value, threads):
    """An edge tap's weight, which border pixels meet in the padding (0 * Inf = NaN there: the padding taps are
    then multiplied, not skipped), and an input pixel of one image only (its NaN reaches that image's outputs
    alone, whichever task and tile their rows fell in)."""
    x, w, b = case.arrays()
    w[1, 0, 0, 0] = value
    x[case.n - 1, 0, case.hw[1] - 1, 3] = np.nan
    with threaded(threads):
        got = case.call(x, w, b, backend="cpu", algorithm="im2col")
    ref = case.reference(x, w, b)
    assert np.isnan(ref).any() and np.isfinite(ref).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got[np.isfinite(ref)], ref[np.isfinite(ref)], rtol=1e-9, atol=1e-9)
