"""1-D layers (height 1): the CPU backend runs them with the spatial axes exchanged
(fastdeconv._backends.cpu.rows_for_columns), so that their columns are cut between threads.

Checked against the reference: every algorithm of each kind that can run them, serial and threaded,
strides, dilations, padding, output_padding, groups and batches; one layer given a 1-D input and then
a 2-D one (and the other way round), which packs both orientations; the private weight copy (a later
change to the caller's array reaches neither orientation); NaN and Inf where the formula puts them;
that a threaded 1-D call really has several tasks; and "planar"'s tasks: at most 256 strides of columns,
blocks of groups.
"""

from __future__ import annotations

import numpy as np
import pytest

import fastdeconv
from fastdeconv._backends import cpu as _cpu_backend
from fastdeconv._params import resolve_conv2d, resolve_conv_transpose2d

from helpers import CONV_ALGORITHMS, DECONV_ALGORITHMS, Case, check_case, threaded

ONE_D = [
    Case("t", n=1, hw=(1, 37), c_in=8, c_out=6, kernel=(1, 4), stride=(1, 2), padding=(0, 1)),
    Case("t", n=2, hw=(1, 23), c_in=6, c_out=4, kernel=(1, 10), stride=(1, 5), padding=(0, 3),
         output_padding=(0, 1)),
    Case("t", n=1, hw=(1, 19), c_in=8, c_out=8, kernel=(1, 3), stride=(3, 1), padding=(0, 2), dilation=(2, 3),
         groups=2),
    Case("t", n=3, hw=(1, 16), c_in=4, c_out=4, kernel=(1, 3), stride=1, padding=(0, 1), groups=4),
    Case("t", n=1, hw=(1, 1), c_in=5, c_out=3, kernel=(1, 4), stride=(1, 2)),
    Case("c", n=1, hw=(1, 41), c_in=6, c_out=8, kernel=(1, 7), stride=1, padding=(0, 9), dilation=(1, 3)),
    Case("c", n=2, hw=(1, 50), c_in=4, c_out=6, kernel=(1, 8), stride=(2, 4), padding=(0, 2)),
    Case("c", n=1, hw=(1, 30), c_in=6, c_out=6, kernel=(1, 5), stride=(1, 2), padding=(0, 2), groups=6),
    Case("c", n=1, hw=(1, 12), c_in=6, c_out=4, kernel=(1, 1), stride=(2, 3)),
    # 32 channels: "im2col" reads each inner pixel's whole kernel (kW adjacent pixels) in place as one tap
    Case("c", n=2, hw=(1, 29), c_in=32, c_out=16, kernel=(1, 7), stride=(1, 2), padding=(0, 3)),
]


def _ids(cases):
    return [f"{c.op}{c.hw}k{c.kernel}s{c.stride}g{c.groups}n{c.n}" for c in cases]


@pytest.mark.parametrize("threads", [None, 3])
@pytest.mark.parametrize("case", ONE_D, ids=_ids(ONE_D))
def test_one_d_matches_reference_for_every_algorithm(case, threads):
    case = Case(**{**case.__dict__, "threads": threads, "dtype": "float32"})
    algorithms = DECONV_ALGORITHMS if case.op == "t" else CONV_ALGORITHMS
    checked = [a for a in [None, *algorithms] if check_case(case, a)]
    assert None in checked and len(checked) >= 2


def _geometry(case, x, w):
    resolve = resolve_conv_transpose2d if case.op == "t" else resolve_conv2d
    return resolve(x.shape, w.shape, **case.kwargs())


@pytest.mark.parametrize("case", ONE_D[:2] + ONE_D[5:7], ids=_ids(ONE_D[:2] + ONE_D[5:7]))
def test_a_threaded_one_d_call_is_cut_into_several_tasks(case):
    x, w, b = case.arrays()
    geometry = _geometry(case, x, w)
    with threaded(4):
        runner = _cpu_backend.PackedLayer(w, b, x.dtype, geometry).runner(geometry)
    assert runner.tasks.shape[0] > 1


@pytest.mark.parametrize("first_height", [1, 5])
@pytest.mark.parametrize("op", ["t", "c"])
def test_one_layer_runs_1d_and_2d_inputs_and_keeps_its_own_weights(op, first_height):
    """Both orientations of one layer object, in either order, and a weight changed by the caller
    after the layer was built reaches neither."""
    case = Case(op, n=2, hw=(first_height, 17), c_in=6, c_out=5, kernel=(1, 4), stride=(1, 2), padding=(0, 1))
    other = Case(**{**case.__dict__, "hw": (6 - first_height, 17)})
    x, w, b = case.arrays()
    x_other = other.arrays()[0]
    ref, ref_other = case.reference(x, w, b), other.reference(x_other, w, b)
    layer_class = fastdeconv.ConvTranspose2d if op == "t" else fastdeconv.Conv2d
    kwargs = {k: v for k, v in case.kwargs().items() if k != "output_size"}
    layer = layer_class(w, b, **kwargs)
    w[...] = np.nan   # the caller reuses its buffer
    np.testing.assert_allclose(layer(x), ref, rtol=1e-10)
    np.testing.assert_allclose(layer(x_other), ref_other, rtol=1e-10)
    np.testing.assert_allclose(layer(x), ref, rtol=1e-10)


def test_packed_layer_counts_both_orientations():
    case = Case("t", n=1, hw=(1, 9), c_in=4, c_out=4, kernel=(1, 4), stride=(1, 2), padding=(0, 1))
    x, w, b = case.arrays()
    geometry = _geometry(case, x, w)
    # phase: "planar" (the automatic choice for so few channels) threads a 1-D row as it is, one packing
    layer = _cpu_backend.PackedLayer(w, b, x.dtype, geometry, algorithm="phase")
    one = layer.nbytes
    assert one == layer.packed.nbytes
    x2 = np.ones((1, 3, 9, 4))
    layer.runner(_geometry(case, x2, w))
    assert layer.nbytes > one


def test_a_1x1_layer_packs_once_for_both_orientations():
    case = Case("c", n=1, hw=(1, 9), c_in=4, c_out=4, kernel=(1, 1))
    x, w, b = case.arrays()
    layer = _cpu_backend.PackedLayer(w, b, x.dtype, _geometry(case, x, w))
    layer.runner(_geometry(case, np.ones((1, 3, 9, 4)), w))
    assert len(layer._packs) == 1 and layer._weight is None


@pytest.mark.parametrize("op", ["t", "c"])
def test_nan_and_inf_land_where_the_reference_puts_them(op):
    case = Case(op, n=1, hw=(1, 20), c_in=4, c_out=3, kernel=(1, 5), stride=(1, 2), padding=(0, 2))
    x, w, b = case.arrays()
    x[0, 0, 3, 1] = np.nan
    x[0, 0, 11, 0] = np.inf
    w[1, 0, 2, 0] = -np.inf
    ref = case.reference(x, w, b)
    with threaded(3):
        got = case.call(x, w, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-10)


@pytest.mark.parametrize("op", ["t", "c"])
def test_a_layer_made_for_a_block_padded_along_h_runs_1d_blocks(op):
    """A Dask block kernel runs one layer for blocks whose pads differ (fastdeconv/dask.py): a layer
    made for a block padded at the bottom, then given a 1-D block, packs the exchanged orientation
    from the weights it kept."""
    padded = Case(op, n=1, hw=(3, 9), c_in=4, c_out=3, kernel=(1, 3), stride=1, padding=((0, 1), (0, 0)))
    one_d = Case(**{**padded.__dict__, "hw": (1, 9), "padding": 0})
    _, w, b = padded.arrays()
    layer = _cpu_backend.PackedLayer(w, b, w.dtype, _geometry(padded, padded.arrays()[0], w))
    x = one_d.arrays()[0]
    got = layer.bind(_geometry(one_d, x, w))(x, None)
    np.testing.assert_allclose(got, one_d.reference(x, w, b), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("algorithm", [None, "im2col"])
def test_an_image_one_pixel_wide_padded_along_w_reads_the_padding_column(algorithm):
    """Rows of one pixel read a kernel column in place only without padding along W: here the one
    output column's taps all fall in the left padding (and the result is the bias)."""
    case = Case("c", n=2, hw=(9, 1), c_in=20, c_out=4, kernel=(3, 1), stride=(1, 3), padding=1)
    assert check_case(case, algorithm)


def test_planar_tasks_span_at_most_256_strides_and_blocks_of_groups():
    """"planar" cuts a long row into tasks of at most 256 strides of output columns even on one thread, and
    a layer of many groups with large weights into blocks of groups (the task's part); the named cases
    planar_column_tasks and planar_group_blocks (test_cpu_vs_reference.py) check their results."""
    geometry = resolve_conv_transpose2d((1, 1, 600, 40), (40, 1, 5, 8), stride=(1, 2), padding=(0, 2))
    w = np.ones((40, 1, 5, 8), np.float32)
    with threaded(1):
        tasks = _cpu_backend.PackedLayer(w, None, np.float32, geometry, "planar").runner(geometry).tasks
    widths = tasks[:, 4] - tasks[:, 3]
    assert len(tasks) == 3 and widths.max() <= 256 * 2 and widths.sum() == geometry.output_hw[1]
    geometry = resolve_conv_transpose2d((2, 5, 15, 416), (416, 3, 3, 8), stride=2, padding=1, output_padding=1,
                                        groups=13)
    w = np.ones((416, 3, 3, 8), np.float32)
    with threaded(1):
        tasks = _cpu_backend.PackedLayer(w, None, np.float32, geometry, "planar").runner(geometry).tasks
    assert sorted(set(tasks[:, 0])) == [0, 1]
