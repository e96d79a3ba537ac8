"""conv2d's "depthwise" algorithm (src/algorithms/conv_depthwise.template.c, kernel in src/kernels/depthwise_rows*.c):
groups == C_in with any channel multiplier, on every ISA path, against the numpy reference; and its
"grouped" algorithm (conv_grouped.template.c), the same kernel with several input channels per group.

The kernel has several paths through one output row: per-pixel code where a tap leaves the image
left or right, register tiles of output pixels elsewhere (dense 3- and 5-wide kernels at stride 1
or 2 share input loads; any other kernel takes a generic tile), the last tile of a row moved left
over pixels already computed, channel vectors with a masked tail, a lane permutation for channel
multipliers, and vertical strips of columns. The cases below are sized to reach each of them.
"grouped" adds a loop over each group's input channels, a lane permutation whenever a lane's input
channel is not its own, and vectors narrowed to fewer lanes where their inputs would not fit one (more
inputs than outputs per group).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdeconv
from fastdeconv._backends import cpu as _cpu_backend
from fastdeconv._params import resolve_conv2d
from helpers import Case, assert_close, check_case, examples, make_x


def _depthwise(c, mult=1, **kw):
    return Case(op="c", c_in=c, c_out=c * mult, groups=c, **kw)


def _grouped(groups, in_per_group, out_per_group, **kw):
    return Case(op="c", c_in=groups * in_per_group, c_out=groups * out_per_group, groups=groups, **kw)


# Tiles are 8 pixels (16 for AVX-512's float, whose dense 3- and 5-wide kernels take 8 pixels of two
# vectors where two full vectors of channels are left: the "pairs" cases); vectors hold 4, 8 or 16
# channels; strips are sized to 16 KiB of input rows.
NAMED = {
    "width_1": _depthwise(16, hw=(5, 1), padding=1),
    "width_7_no_tile": _depthwise(16, hw=(5, 7), padding=(1, 0)),
    "width_8_one_tile": _depthwise(16, hw=(5, 8), padding=(1, 0)),
    "width_9_moved_tile": _depthwise(16, hw=(5, 9), padding=(1, 0)),
    "width_17_padded": _depthwise(16, hw=(4, 17), padding=1),
    "interior_too_narrow": _depthwise(8, hw=(6, 10), kernel=(3, 5), padding=2),
    "channels_1": _depthwise(1, hw=(6, 20), padding=1),
    "channels_3_tail": _depthwise(3, hw=(6, 20), padding=1),
    "channels_17_tail": _depthwise(17, hw=(6, 20), stride=2, padding=1),
    "channels_33_tail": _depthwise(33, n=2, hw=(6, 20), kernel=(5, 5), padding=2),
    "stride_2_3x3": _depthwise(32, hw=(9, 40), stride=2, padding=1),
    "stride_2_5x5_odd": _depthwise(12, hw=(10, 41), kernel=(5, 5), stride=2, padding=(2, 1)),
    "stride_3_generic": _depthwise(16, hw=(10, 50), kernel=(3, 3), stride=3, padding=1),
    "7x7_generic": _depthwise(24, hw=(12, 40), kernel=(7, 7), padding=3),
    "dilation_2": _depthwise(16, hw=(9, 40), dilation=2, padding=2),
    "rectangular_kernel": _depthwise(16, hw=(9, 40), kernel=(1, 5), padding=(0, 2)),
    "tall_kernel": _depthwise(16, hw=(9, 40), kernel=(5, 1), stride=(2, 1)),
    "no_padding": _depthwise(16, hw=(9, 40), padding=0),
    "heavy_padding": _depthwise(8, hw=(3, 12), kernel=(3, 3), padding=((4, 5), (6, 7))),
    "asymmetric_padding_stride2": _depthwise(20, hw=(9, 31), stride=2, padding=((0, 1), (1, 0))),
    "multiplier_2": _depthwise(16, 2, hw=(8, 30), padding=1),
    "multiplier_2_stride2": _depthwise(7, 2, hw=(8, 30), stride=2, padding=1),
    "multiplier_3_tail": _depthwise(11, 3, hw=(8, 30), kernel=(5, 5), padding=2),
    "multiplier_6_generic": _depthwise(3, 6, hw=(8, 30), kernel=(2, 4), dilation=(1, 2), padding=1),
    "multiplier_17": _depthwise(2, 17, hw=(5, 19), padding=1),
    "one_input_channel": _depthwise(1, 32, hw=(8, 30), padding=1),
    "batch_3_threads": _depthwise(24, n=3, hw=(7, 19), padding=1),
    "strips_many": _depthwise(64, hw=(3, 140), padding=1),
    "strips_small_channels": _depthwise(2, hw=(2, 800), padding=1),
    "strips_multiplier": _depthwise(40, 2, hw=(3, 120), kernel=(5, 5), stride=2, padding=2),
    "pairs_then_one_vector": _depthwise(48, hw=(6, 21), padding=1),
    "pairs_then_a_masked_tail": _depthwise(40, hw=(7, 13), kernel=(5, 5), stride=2, padding=2),
    "pairs_row_of_6_half_tiles": _depthwise(32, hw=(5, 6), padding=1),
    "pairs_row_of_3_pixel_by_pixel": _depthwise(64, hw=(5, 3), padding=1),
    "pairs_5x5_stride2_two_images": _depthwise(64, n=2, hw=(9, 45), kernel=(5, 5), stride=2, padding=2),
    "no_bias": _depthwise(16, hw=(6, 20), padding=1, bias=False),
    "unbatched": _depthwise(16, hw=(6, 20), padding=1, unbatched=True),
    "non_contiguous": _depthwise(16, n=2, hw=(6, 20), padding=1, x_layout="sliced", w_layout="reversed"),
}

# "grouped": groups x C_in/groups -> C_out/groups.
NAMED_GROUPED = {
    "resnext_8_per_group": _grouped(8, 8, 8, hw=(9, 30), padding=1),
    "two_groups_per_vector_stride2": _grouped(4, 4, 4, hw=(9, 31), stride=2, padding=1),
    "two_inputs_per_group": _grouped(16, 2, 2, hw=(6, 20), padding=1),
    "outputs_more_than_inputs": _grouped(3, 4, 8, hw=(7, 21), padding=1),
    "inputs_more_than_outputs": _grouped(4, 8, 2, hw=(7, 21), padding=1),      # vectors narrowed
    "group_straddles_a_vector": _grouped(5, 3, 6, hw=(7, 21), padding=1),      # 6 does not divide 16, 8 or 4
    "groups_wider_than_a_vector": _grouped(2, 3, 20, hw=(6, 19), kernel=(5, 5), padding=2),
    "one_by_one": _grouped(8, 4, 4, n=2, hw=(5, 13)),
    "generic_kernel_dilated": _grouped(4, 3, 3, hw=(10, 33), kernel=(3, 4), dilation=(2, 2), padding=2),
    "5x5_stride2_tail": _grouped(3, 5, 5, hw=(11, 37), kernel=(5, 5), stride=2, padding=2),
    "narrow_rows": _grouped(4, 2, 2, hw=(5, 3), padding=1),
    "heavy_padding": _grouped(2, 4, 4, hw=(3, 12), padding=((4, 5), (6, 7))),
    "no_bias_unbatched": _grouped(4, 4, 4, hw=(6, 20), padding=1, bias=False, unbatched=True),
    "non_contiguous": _grouped(4, 4, 4, n=2, hw=(6, 20), padding=1, x_layout="sliced", w_layout="reversed"),
}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("algorithm,name", [("depthwise", n) for n in NAMED] + [("grouped", n) for n in NAMED_GROUPED])
def test_named(isa_path, algorithm, name, dtype):
    case = (NAMED if algorithm == "depthwise" else NAMED_GROUPED)[name]
    for threads in (None, 3):
        case = Case(**{**case.__dict__, "dtype": dtype, "seed": zlib.crc32(name.encode()), "threads": threads})
        assert check_case(case, algorithm=algorithm)


@st.composite
def depthwise_cases(draw):
    c = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 64, 70]))
    mult = draw(st.sampled_from([1, 1, 1, 2, 3, 4]))
    k = (draw(st.integers(1, 7)), draw(st.sampled_from([1, 2, 3, 3, 3, 4, 5, 5, 7])))
    s = (draw(st.integers(1, 3)), draw(st.sampled_from([1, 1, 2, 2, 3])))
    d = (draw(st.sampled_from([1, 1, 2])), draw(st.sampled_from([1, 1, 1, 2, 3])))
    pads = tuple((draw(st.integers(0, 4)), draw(st.integers(0, 4))) for _ in range(2))
    extent = [di * (ki - 1) + 1 for di, ki in zip(d, k)]
    # the smallest input that gives one output pixel, up to 12 (rows) and 90 (columns) more
    low = [max(1, e - sum(p)) for e, p in zip(extent, pads)]
    hw = (draw(st.integers(low[0], max(low[0], 12))), draw(st.integers(low[1], max(low[1], 90))))
    return _depthwise(c, mult, n=draw(st.integers(1, 3)), hw=hw, kernel=k, stride=s, dilation=d, padding=pads,
                      bias=draw(st.booleans()), dtype=draw(st.sampled_from(["float32", "float64", "float16"])),
                      seed=draw(st.integers(0, 2**32 - 1)), threads=draw(st.sampled_from([None, 2, 3])))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=depthwise_cases())
def test_matches_reference(isa_path, case):
    assert check_case(case, algorithm="depthwise")


@st.composite
def grouped_cases(draw):
    """A depthwise case's geometry with 2-20 input and 1-20 output channels per group."""
    base = draw(depthwise_cases())
    groups = draw(st.sampled_from([2, 3, 4, 5, 8]))
    cig, cog = draw(st.integers(2, 20)), draw(st.integers(1, 20))
    return Case(**{**base.__dict__, "c_in": groups * cig, "c_out": groups * cog, "groups": groups})


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=grouped_cases())
def test_grouped_matches_reference(isa_path, case):
    assert check_case(case, algorithm="grouped")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("algorithm,groups,mult", [("depthwise", 21, 1), ("depthwise", 21, 2), ("grouped", 7, 1),
                                                   ("grouped", 3, 2)])
def test_infinite_weight_on_a_padding_tap_gives_nan_exactly_where_it_reads_padding(isa_path, dtype, algorithm,
                                                                                    groups, mult):
    """x is zero outside the image and 0 * Inf = NaN: an Inf at weight tap (0, 0) of output channel
    o poisons exactly the outputs of channel o whose tap (0, 0) reads the padding (row 0 and column
    0 at stride 1, padding 1); the other channels and pixels stay finite (x is positive)."""
    rng = np.random.default_rng(7)
    c, o = 21, 19                      # o in the last (masked) channel vector on every ISA
    x = make_x((2, 9, 30, c), dtype, rng)
    w = rng.uniform(0.5, 1.5, (c * mult, 3, 3, c // groups)).astype(dtype)
    w[o, 0, 0, -1] = np.inf
    got = fastdeconv.conv2d(x, w, padding=1, groups=groups, algorithm=algorithm)
    want_nan = np.zeros(got.shape, bool)
    want_nan[:, 0, :, o] = want_nan[:, :, 0, o] = True
    np.testing.assert_array_equal(np.isnan(got), want_nan)
    assert np.isposinf(got[:, 1:, 1:, o]).all() and np.isfinite(np.delete(got, o, axis=3)).all()
    assert_close(got, fastdeconv.conv2d(x, w, padding=1, groups=groups, backend="reference"), dtype, 9)


def test_nan_input_reaches_exactly_its_receptive_field(isa_path):
    rng = np.random.default_rng(8)
    x = make_x((1, 9, 40, 16), np.float32, rng)
    x[0, 4, 20, 5] = np.nan
    w = rng.uniform(0.5, 1.5, (32, 3, 3, 1)).astype(np.float32)
    got = fastdeconv.conv2d(x, w, stride=(1, 2), padding=1, groups=16, algorithm="depthwise")
    want_nan = np.zeros(got.shape, bool)
    want_nan[0, 3:6, 10, 10:12] = True   # rows 4 +- 1; column 20 = 2*ox - 1 + kx only for ox = 10
    np.testing.assert_array_equal(np.isnan(got), want_nan)


def _geometry(x_shape, w_shape, groups, **kw):
    return resolve_conv2d(x_shape, w_shape, kw.get("stride", 1), kw.get("padding", 0), kw.get("dilation", 1), groups)


@pytest.mark.parametrize("x_shape,w_shape,groups,expected", [
    ((1, 112, 112, 64), (64, 3, 3, 1), 64, "depthwise"),
    ((1, 56, 56, 32), (64, 5, 5, 1), 32, "depthwise"),        # channel multiplier 2
    ((1, 224, 224, 1), (64, 3, 3, 1), 1, "depthwise"),        # one input channel: also one per group
    ((1, 56, 56, 32), (32, 3, 3, 2), 16, "grouped"),
    ((1, 28, 28, 256), (256, 3, 3, 8), 32, "grouped"),    # ResNeXt's 32 groups of 8
    ((1, 28, 28, 96), (96, 3, 3, 12), 8, "grouped"),
    ((1, 14, 14, 512), (512, 3, 3, 16), 32, "im2col"),    # 16 per group: the GEMM is the faster
    ((1, 28, 28, 64), (256, 3, 3, 8), 8, "im2col"),       # 32 outputs per group
    ((1, 28, 28, 64), (32, 3, 3, 8), 8, "im2col"),        # fewer outputs than inputs: part-filled vectors
    ((1, 56, 56, 32), (64, 3, 3, 32), 1, "winograd"),
    ((1, 56, 56, 16), (64, 3, 3, 16), 1, "im2col"),   # too few input channels for Winograd's transforms
])
def test_choice(x_shape, w_shape, groups, expected):
    assert _cpu_backend.choose_algorithm(_geometry(x_shape, w_shape, groups, padding=1)) == expected


def test_layer_uses_it_and_forcing_it_elsewhere_says_why():
    w = np.ones((16, 3, 3, 1), np.float32)
    layer = fastdeconv.Conv2d(w, groups=8, padding=1)
    assert layer.algorithm == "depthwise"
    x = np.ones((1, 6, 7, 8), np.float32)
    assert_close(layer(x), fastdeconv.conv2d(x, w, groups=8, padding=1, backend="reference"), np.float32, 9)
    with pytest.raises(ValueError, match=r"algorithm='depthwise' cannot run this layer.*groups == C_in"):
        fastdeconv.conv2d(np.ones((1, 6, 7, 8), np.float32), np.ones((4, 3, 3, 2), np.float32), groups=4,
                          algorithm="depthwise")


def test_packed_weights_are_the_weight_reordered_and_nothing_more():
    """The blob is the (kH, kW, C_out) weight after its offset table."""
    from fastdeconv import _cpu

    geometry = _geometry((1, 9, 9, 64), (128, 5, 3, 1), 64)
    packed = _cpu.PackedWeights("depthwise", np.ones((128, 5, 3, 1), np.float32), geometry)
    assert packed.nbytes <= 64 + 5 * 3 * 128 * 4 + 64   # offset table, weight, alignment slack


def test_grouped_without_input_channels_gives_the_bias(isa_path):
    """C_in = 0 (groups of no input channels) is a valid layer: every output is its bias."""
    bias = np.arange(9, dtype=np.float32)
    got = fastdeconv.conv2d(np.zeros((2, 5, 6, 0), np.float32), np.ones((9, 3, 1, 0), np.float32), bias,
                            padding=1, groups=3, algorithm="grouped")
    np.testing.assert_array_equal(got, np.broadcast_to(bias, (2, 5, 8, 9)))
