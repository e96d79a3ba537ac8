"""The CPU backend against the numpy reference, through every algorithm x GEMM ISA.

Property tests (hypothesis) over the whole parameter space plus named cases for the
corners that tiled kernels usually get wrong.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdeconv
from fastdeconv import _cpu
from fastdeconv._backends import cpu as _cpu_backend
from helpers import (CONV_ALGORITHMS, CONV_PATHS, DECONV_ALGORITHMS, DECONV_PATHS, LAYOUTS, TAP_BLOCK_BUDGET, Case,
                     algorithm_supports, check_case, examples, gemm_panel_budget)
from strategies import conv_cases, deconv_cases

SETTINGS = settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=False,
)

@SETTINGS
@given(case=deconv_cases())
def test_conv_transpose2d_matches_reference(deconv_path, case):
    check_case(case, algorithm=deconv_path[0])


@SETTINGS
@given(case=conv_cases())
def test_conv2d_matches_reference(conv_path, case):
    check_case(case, algorithm=conv_path[0])


@st.composite
def medium_cases(draw, op):
    """Fewer, larger problems: channel counts and pixel counts that cross GEMM tile edges."""
    g = draw(st.sampled_from([1, 1, 2, 3, draw(st.integers(4, 48))]))
    cig = 1 if g > 3 else draw(st.integers(1, 40))
    cog = draw(st.integers(1, 40 if g <= 3 else 3))
    k = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    kd = [di * (ki - 1) + 1 for di, ki in zip(d, k)]
    if op == "c":
        pad = tuple(draw(st.integers(0, min(2, e - 1))) for e in kd)
        hw = tuple(draw(st.integers(max(1, e - 2 * p), 24)) for e, p in zip(kd, pad))
    else:
        hw = tuple(draw(st.integers(1, 24)) for _ in kd)
        full = [(i - 1) * si + e for i, si, e in zip(hw, s, kd)]
        pad = tuple(draw(st.integers(0, min(2, (f - 1) // 2))) for f in full)
    op_pad = tuple(draw(st.integers(0, max(si, di) - 1)) for si, di in zip(s, d)) if op == "t" else 0
    return Case(op=op, n=draw(st.integers(1, 2)), hw=hw, c_in=g * cig, c_out=g * cog, groups=g, kernel=k,
                stride=s, dilation=d, padding=pad, output_padding=op_pad, bias=draw(st.booleans()),
                x_layout=draw(st.sampled_from(["contig", "contig", "sliced"])),
                dtype=draw(st.sampled_from(["float32", "float64", "float16"])),
                seed=draw(st.integers(0, 2**32 - 1)), threads=draw(st.sampled_from([None, 2, 3])))


MEDIUM = settings(SETTINGS, max_examples=examples(25))


@MEDIUM
@given(case=medium_cases("t"))
def test_conv_transpose2d_medium_matches_reference(deconv_path, case):
    check_case(case, algorithm=deconv_path[0])


@MEDIUM
@given(case=medium_cases("c"))
def test_conv2d_medium_matches_reference(conv_path, case):
    check_case(case, algorithm=conv_path[0])


# ---------------------------------------------------------------------------------------------
# Named corners
# ---------------------------------------------------------------------------------------------

NAMED_DECONV = {
    "stride_gt_kernel": Case(hw=(4, 5), kernel=(2, 1), stride=(3, 4), c_in=3, c_out=5),
    "stride_gt_kernel_bias_only_rows": Case(hw=(3, 3), kernel=(1, 1), stride=3, padding="same"),
    "same_odd_total": Case(hw=(4, 3), kernel=(4, 3), stride=(1, 2), padding="same", c_in=2, c_out=3),
    "same_dilated_lt_stride": Case(hw=(3, 4), kernel=(2, 2), dilation=(1, 2), stride=(4, 2), padding="same"),
    "output_padding": Case(hw=(4, 4), kernel=(3, 3), stride=2, padding=1, output_padding=1),
    "output_padding_per_axis": Case(hw=(3, 5), kernel=(2, 3), stride=(3, 2), output_padding=(2, 1)),
    "output_padding_below_dilation": Case(hw=(3, 3), kernel=(2, 2), stride=1, dilation=3, output_padding=2),
    "output_size": Case(hw=(5, 4), kernel=(3, 3), stride=3, padding=1, output_size=(15, 12)),
    "dilation_with_stride": Case(hw=(5, 4), kernel=(3, 2), stride=(2, 3), dilation=(3, 2), padding=(2, 1)),
    "asymmetric_padding": Case(hw=(5, 5), kernel=(3, 4), stride=2, padding=((0, 3), (2, 1))),
    "heavy_crop": Case(hw=(3, 3), kernel=(4, 4), stride=2, padding=((3, 4), (4, 3))),
    "valid": Case(hw=(3, 2), kernel=(2, 3), stride=(2, 1), padding="valid"),
    "depthwise": Case(hw=(6, 5), c_in=7, c_out=7, groups=7, kernel=(3, 3), stride=2, padding=1),
    "channel_multiplier": Case(hw=(4, 6), c_in=4, c_out=12, groups=4, kernel=(3, 2), stride=2),
    "grouped": Case(hw=(4, 4), c_in=6, c_out=9, groups=3, kernel=(2, 3), stride=(1, 2), dilation=2),
    "unbatched": Case(hw=(4, 5), unbatched=True, kernel=(3, 2), stride=2, padding=(1, 0)),
    "non_contiguous_x": Case(n=2, hw=(5, 4), x_layout="sliced", stride=2),
    "transposed_x_weight": Case(n=2, hw=(5, 4), x_layout="transposed", w_layout="transposed", stride=(1, 2)),
    "negative_strides": Case(n=3, hw=(3, 4), x_layout="reversed", w_layout="reversed", groups=1, stride=2),
    "N0": Case(n=0, hw=(4, 4), stride=2),
    "1x1_kernel": Case(hw=(5, 6), c_in=5, c_out=3, kernel=(1, 1)),
    "1x1_kernel_stride2": Case(hw=(5, 6), c_in=5, c_out=3, kernel=(1, 1), stride=2, output_padding=1),
    "1x1_input": Case(hw=(1, 1), kernel=(3, 2), stride=2),
    "large_channels": Case(n=1, hw=(5, 6), c_in=300, c_out=70, kernel=(3, 3), stride=2, padding=1),
    "large_channels_grouped": Case(n=1, hw=(4, 4), c_in=256, c_out=96, groups=2, kernel=(2, 2), stride=2),
    "wide_image": Case(n=2, hw=(3, 130), c_in=5, c_out=6, kernel=(3, 3), stride=(1, 2), padding=1),
    "wide_image_many_columns": Case(n=1, hw=(8, 130), c_in=16, c_out=70, kernel=(3, 3), padding=1),
    "gemm_chunk_crossing": Case(n=1, hw=(3, 130), c_in=200, c_out=24, kernel=(3, 3), padding=1),
    "gemm_chunk_crossing_stride2": Case(n=1, hw=(3, 70), c_in=200, c_out=16, kernel=(3, 3), stride=2),
    "many_threads_tasks": Case(n=7, hw=(6, 5), c_in=8, c_out=8, kernel=(3, 3), stride=2, padding=1),
    "tall_batch": Case(n=5, hw=(9, 2), c_in=3, c_out=2, kernel=(4, 1), stride=(2, 1)),
    "no_bias": Case(hw=(4, 4), bias=False, stride=2, padding=1, output_padding=1),
    # a kernel equal to the stride: every output has one term (col2im copies its columns, bias included)
    "exact_cover_head": Case(hw=(9, 11), c_in=32, c_out=3, kernel=(2, 2), stride=2),
    "exact_cover_head_no_bias": Case(hw=(7, 5), c_in=16, c_out=1, kernel=(2, 2), stride=2, bias=False),
    "exact_cover_cropped_grouped": Case(hw=(5, 7), c_in=8, c_out=6, groups=2, kernel=(2, 3), stride=(2, 3),
                                        padding=(1, 2)),
    "exact_cover_long_runs": Case(hw=(3, 4), c_in=6, c_out=5, kernel=(4, 4), stride=4),
    # a phase GEMM of 9 taps x 260 channels: B panels over the panel budget (forced to 256 KiB for the named
    # cases) run in blocks of taps, the later ones adding to C (src/kernels/gemm_internal.h); 40 columns: a
    # blocked 32-wide panel beside a narrow one
    "tap_blocks": Case(hw=(4, 5), c_in=260, c_out=40, kernel=(6, 6), stride=2, padding=2),
    # "planar"'s blocks of 8 outputs (AVX-512, NEON) then 4 and 1 (21 = 8 + 8 + 4 + 1), over runs of 70
    # pixels per column phase: blocks of 3 and 2 vectors of float32, 3 of float64, and the border pixels
    "planar_output_blocks": Case(n=2, hw=(3, 70), c_in=9, c_out=21, kernel=(3, 3), stride=(1, 2), padding=1,
                                 output_padding=(0, 1)),
    # "planar"'s tasks of some of the groups (planar_groups: 13 groups of 2304 weights and a ring of 3456
    # elements each, 11 to PLANAR_GROUP_ELEMENTS, so blocks of 7 and 6), each transposing only its channels
    # "planar"'s tasks of at most 256 strides of output columns (PLANAR_MAX_STRIDES): a 1-D row of 600
    # inputs, 1201 outputs at stride 2, in three tasks, with the taps of each task's edge in its neighbours'
    "planar_column_tasks": Case(hw=(1, 600), c_in=40, c_out=8, kernel=(1, 5), stride=(1, 2), padding=(0, 2)),
    "planar_group_blocks": Case(n=2, hw=(5, 15), c_in=13 * 32, c_out=13 * 8, groups=13, kernel=(3, 3), stride=2,
                                padding=1, output_padding=1),
}
DTYPE_PARAMS = ["float16", "float32", "float64"]




def _named_deconv_params():
    """(path, name) pairs, leaving out geometries an algorithm declares unsupported (decided at collection)."""
    params = []
    for name, case in NAMED_DECONV.items():
        geometry = case.geometry(*case.arrays()[:2])
        for algorithm, isa in DECONV_PATHS:
            if algorithm_supports(algorithm, geometry):
                params.append(pytest.param((algorithm, isa), name, id=f"{algorithm}-{isa}-{name}"))
    return params


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("deconv_path,name", _named_deconv_params(), indirect=["deconv_path"])
def test_conv_transpose2d_named(deconv_path, name, dtype):
    case = NAMED_DECONV[name]
    case = Case(**{**case.__dict__, "dtype": dtype, "seed": zlib.crc32(name.encode()), "threads": 3})
    with gemm_panel_budget(TAP_BLOCK_BUDGET):
        assert check_case(case, algorithm=deconv_path[0])


def test_gemm_panel_budget_cuts_panels_and_restores():
    """The budget is rounded to KiB, 0 never cuts, None restores the CPU's; a cut panel sums in another
    order (so the budget is seen by the kernels), and both orders match the reference."""
    automatic = _cpu.get_gemm_panel_budget()
    assert automatic >= 64 * 1024 and automatic % 1024 == 0
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 6, 5, 260)).astype(np.float32)
    w = rng.standard_normal((260, 6, 6, 40)).astype(np.float32)
    results = {}
    for budget in (0, TAP_BLOCK_BUDGET):
        with gemm_panel_budget(budget):
            assert _cpu.get_gemm_panel_budget() == budget
            results[budget] = fastdeconv.conv_transpose2d(x, w, stride=2, padding=2, algorithm="phase")
        assert _cpu.get_gemm_panel_budget() == automatic
    assert not np.array_equal(results[0], results[TAP_BLOCK_BUDGET])
    ref = fastdeconv.reference.conv_transpose2d(x.astype(np.float64), w.astype(np.float64), stride=2, padding=2)
    for got in results.values():
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    with gemm_panel_budget(300_000):
        assert _cpu.get_gemm_panel_budget() == 299_008
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        _cpu.set_gemm_panel_budget(-1)
    with pytest.raises(TypeError, match="nbytes must be an int or None"):
        _cpu.set_gemm_panel_budget(1.5)


NAMED_CONV = {
    "stride_gt_kernel": Case(op="c", hw=(9, 10), kernel=(2, 1), stride=(3, 4), c_in=3, c_out=5),
    "same_stride": Case(op="c", hw=(7, 6), kernel=(4, 3), stride=(2, 3), padding="same"),
    "dilation_with_stride": Case(op="c", hw=(9, 8), kernel=(3, 2), stride=(2, 3), dilation=(3, 2), padding=(2, 1)),
    "asymmetric_padding": Case(op="c", hw=(5, 5), kernel=(3, 4), stride=2, padding=((0, 3), (2, 1))),
    "depthwise": Case(op="c", hw=(6, 5), c_in=7, c_out=7, groups=7, kernel=(3, 3), stride=2, padding=1),
    "channel_multiplier": Case(op="c", hw=(4, 6), c_in=4, c_out=12, groups=4, kernel=(3, 2)),
    "unbatched": Case(op="c", hw=(4, 5), unbatched=True, kernel=(3, 2), stride=2, padding=(1, 0)),
    "non_contiguous": Case(op="c", n=2, hw=(5, 4), x_layout="sliced", w_layout="transposed", padding=1),
    "N0": Case(op="c", n=0, hw=(4, 4)),
    # a 1x1 kernel of stride 1 without padding: im2col's rows are the input's pixels (pointwise), several
    # images, two groups of 32 -> 16 channels (unmerged, read through pointers), a bias
    "pointwise_grouped_batch": Case(op="c", n=3, hw=(5, 7), kernel=(1, 1), c_in=64, c_out=32, groups=2),
    "pointwise_one_output": Case(op="c", n=2, hw=(9, 6), kernel=(1, 1), c_in=40, c_out=1),
    "1x1_kernel": Case(op="c", hw=(5, 6), c_in=5, c_out=3, kernel=(1, 1), stride=2),
    "large_channels": Case(op="c", hw=(6, 7), c_in=300, c_out=70, kernel=(3, 3), padding=1),
    "wide_image": Case(op="c", n=2, hw=(3, 130), c_in=5, c_out=6, kernel=(3, 3), stride=(1, 2), padding=1),
    "gemm_chunk_crossing": Case(op="c", n=1, hw=(4, 130), c_in=200, c_out=24, kernel=(3, 3), padding=1),
    "many_pixels_chunks": Case(op="c", n=1, hw=(9, 130), c_in=4, c_out=3, kernel=(2, 2), padding="same"),
    # groups == C_in: the "depthwise" algorithm's register tiles (3 or 5 wide, stride 1 or 2), its
    # generic tile, channel tails and its column strips
    "depthwise_mobilenet": Case(op="c", n=2, hw=(13, 37), c_in=64, c_out=64, groups=64, kernel=(3, 3), padding=1),
    "depthwise_5x5_stride2": Case(op="c", hw=(11, 29), c_in=24, c_out=24, groups=24, kernel=(5, 5), stride=2,
                                  padding=2),
    "depthwise_dilated_asymmetric": Case(op="c", hw=(10, 26), c_in=19, c_out=19, groups=19, kernel=(3, 3),
                                         dilation=(2, 3), padding=((0, 3), (4, 1))),
    "depthwise_multiplier_tail": Case(op="c", n=2, hw=(7, 21), c_in=5, c_out=15, groups=5, kernel=(3, 3), stride=2,
                                      padding=1),
    "depthwise_one_input_channel": Case(op="c", hw=(9, 19), c_in=1, c_out=20, groups=1, kernel=(5, 5), padding=2),
    "depthwise_wide_strips": Case(op="c", hw=(4, 90), c_in=96, c_out=96, groups=96, kernel=(3, 3), padding=1),
    # 2-12 input channels per group: the "grouped" algorithm (the depthwise kernel with a loop over them)
    "grouped_resnext": Case(op="c", n=2, hw=(9, 37), c_in=64, c_out=64, groups=8, kernel=(3, 3), padding=1),
    "grouped_stride2_more_outputs": Case(op="c", hw=(11, 29), c_in=12, c_out=24, groups=3, kernel=(3, 3),
                                         stride=2, padding=1),
    "grouped_more_inputs_dilated": Case(op="c", hw=(10, 26), c_in=24, c_out=9, groups=3, kernel=(3, 2),
                                        dilation=(2, 3), padding=((0, 3), (4, 1))),
    # kernel sides 2 or 3 times the strides: the "winograd" algorithm's space-to-depth bands (several per
    # image in winograd_bands), its groups, asymmetric pads and kernels, and its im2col kernel for outputs
    # of fewer than 64 pixels (winograd_small_output)
    "winograd_k3s1": Case(op="c", n=2, hw=(15, 17), c_in=40, c_out=36, kernel=(3, 3), padding=1),
    "winograd_k4s2_groups": Case(op="c", hw=(18, 21), c_in=24, c_out=40, groups=2, kernel=(4, 4), stride=2,
                                 padding=1),
    "winograd_k6s3_asymmetric": Case(op="c", hw=(25, 20), c_in=6, c_out=18, kernel=(6, 4), stride=(3, 2),
                                     padding=((2, 1), (0, 3))),
    "winograd_bands": Case(op="c", hw=(40, 130), c_in=64, c_out=20, kernel=(3, 3), padding=(0, 1)),
    "winograd_small_output": Case(op="c", n=2, hw=(3, 4), c_in=32, c_out=16, kernel=(3, 3), padding=1),
    # im2col's row taps (fewer than 64 input channels, no groups, no dilation along W): kernel rows read in
    # place, edge pixels copied (partial taps of 3 channels; whole taps of 20), rows above and below the
    # image as zeros, dilation along H, a kernel wider than the image (every pixel an edge pixel)
    "row_taps_rgb_stem": Case(op="c", n=2, hw=(17, 19), c_in=3, c_out=20, kernel=(3, 3), stride=2, padding=1),
    "row_taps_20_channels": Case(op="c", hw=(9, 14), c_in=20, c_out=9, kernel=(4, 3), stride=(1, 2),
                                 dilation=(2, 1), padding=((3, 1), (2, 1))),
    "row_taps_kernel_wider_than_image": Case(op="c", hw=(5, 3), c_in=4, c_out=6, kernel=(2, 5), padding=(0, 2)),
    # GEMM chunks (96 pixels in float32, 48 in float64, for K = 960) that begin inside an output row of 73,
    # among its inside pixels or its right edge
    "row_taps_chunks_split_rows": Case(op="c", hw=(6, 72), c_in=60, c_out=8, kernel=(4, 4), padding=(1, 2)),
}


def _named_conv_params():
    """(path, name) pairs, leaving out geometries an algorithm declares unsupported (decided at collection)."""
    params = []
    for name, case in NAMED_CONV.items():
        geometry = case.geometry(*case.arrays()[:2])
        for algorithm, isa in CONV_PATHS:
            if algorithm_supports(algorithm, geometry):
                params.append(pytest.param((algorithm, isa), name, id=f"{algorithm}-{isa}-{name}"))
    return params


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("conv_path,name", _named_conv_params(), indirect=["conv_path"])
def test_conv2d_named(conv_path, name, dtype):
    case = NAMED_CONV[name]
    case = Case(**{**case.__dict__, "dtype": dtype, "seed": zlib.crc32(name.encode()), "threads": 3})
    assert check_case(case, algorithm=conv_path[0])


@pytest.mark.parametrize("transposed,algorithm", [(True, a) for a in DECONV_ALGORITHMS] +
                         [(False, a) for a in CONV_ALGORITHMS])
def test_every_algorithm_is_exercised(transposed, algorithm):
    """The 'unsupported geometry' skip must not silently skip an algorithm everywhere."""
    named = NAMED_DECONV if transposed else NAMED_CONV
    supported = [name for name, case in named.items()
                 if algorithm_supports(algorithm, case.geometry(*case.arrays()[:2]))]
    assert len(supported) >= (1 if transposed else 3), f"{algorithm} supports too few named cases: {supported}"


def test_forcing_unknown_algorithm_is_an_error():
    x, w, b = Case().arrays()
    with pytest.raises(ValueError, match="no-such-algorithm"):
        fastdeconv.conv_transpose2d(x, w, b, backend="cpu", algorithm="no-such-algorithm")


@pytest.mark.parametrize("transposed,algorithm", [(True, a) for a in DECONV_ALGORITHMS] +
                         [(False, a) for a in CONV_ALGORITHMS])
def test_forcing_an_algorithm_selects_it(transposed, algorithm):
    """algorithm= really picks the algorithm under test (else every path would test the default)."""
    for case in (NAMED_DECONV if transposed else NAMED_CONV).values():   # the first that it can run
        geometry = case.geometry(*case.arrays()[:2])
        if algorithm_supports(algorithm, geometry):
            assert _cpu_backend.resolve_algorithm(algorithm, geometry) == algorithm
            break
    else:
        pytest.fail(f"no named case that {algorithm} can run")
