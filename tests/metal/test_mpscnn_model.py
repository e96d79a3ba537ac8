"""The MPSCNN numpy model: Apple's documented examples, and to_mpscnn_transpose + mpscnn_transpose_params
reproducing conv_transpose2d (and mpscnn_conv_params reproducing conv2d) on random configurations."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdeconv
from fastdeconv import weights
from fastdeconv.metal import mpscnn_model


def _delta_params(source_width, stride, kernel_offset, offset, destination_width):
    return weights.MPSCNNTransposeParams(
        kernel_offset_x=kernel_offset, kernel_offset_y=0, offset_x=offset, offset_y=0, destination_height=1,
        destination_width=destination_width, edge_mode="zero", stride_x=stride, stride_y=1, dilation_x=1,
        dilation_y=1, kernel_width=1, kernel_height=1, groups=1, source_height=1, source_width=source_width)


@pytest.mark.parametrize("kernel_offset, offset, expected", [
    (0, 0, [1, 0, 2, 0, 3, 0, 4]),     # "Offset = 0, kernelOffset = 0": X at expanded index 0
    (1, 0, [0, 2, 0, 3, 0, 4, 0]),     # "kernelOffset = 1": X at index 1
    (-1, 0, [0, 1, 0, 2, 0, 3, 0]),    # "kernelOffset = -1": X left of index 0
    (0, 2, [3, 0, 4, 0, 0, 0, 0]),     # "offset = 2, kernelOffset = 0": X at expanded index 4
])
def test_apple_header_examples(kernel_offset, offset, expected):
    """MPSCNNConvolution.h: source 1 2 3 4, stride 2, expanded 1 0 2 0 3 0 4; a 1×1 kernel of 1 reads it back."""
    x = np.array([1.0, 2, 3, 4]).reshape(1, 4, 1)
    y = mpscnn_model.convolution_transpose(x, np.ones((1, 1, 1, 1)), _delta_params(4, 2, kernel_offset, offset, 7))
    assert y[0, :, 0].tolist() == expected


def test_window_is_centred_and_unrotated():
    """A 3-tap kernel [a, b, c], kernelOffset 0: destination x reads expanded x-1, x, x+1 (kW>>1 = 1)."""
    x = np.array([1.0, 0, 0]).reshape(1, 3, 1)             # a delta at source 0 = expanded 0
    w = np.array([10.0, 20.0, 30.0]).reshape(1, 1, 3, 1)
    params = dataclasses.replace(_delta_params(3, 2, 0, 0, 5), kernel_width=3)
    y = mpscnn_model.convolution_transpose(x, w, params)[0, :, 0]
    assert y.tolist() == [20.0, 10.0, 0.0, 0.0, 0.0]       # x=0 uses the centre tap, x=1 the left one


def test_unrotated_weights_do_not_match():
    """Without the 180° rotation the model differs from conv_transpose2d: the rotation is needed."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 4, 4, 2)), rng.standard_normal((2, 3, 3, 3))
    expected = fastdeconv.conv_transpose2d(x, w, None, 2, 1, backend="reference")
    params = weights.mpscnn_transpose_params((4, 4), 3, 2, 1)
    rotated = weights.to_mpscnn_transpose(w).astype(np.float64)
    np.testing.assert_allclose(mpscnn_model.convolution_transpose(x, rotated, params), expected, atol=1e-6)
    unrotated = np.ascontiguousarray(w.transpose(3, 1, 2, 0))
    assert np.abs(mpscnn_model.convolution_transpose(x, unrotated, params) - expected).max() > 0.1


@st.composite
def transposed_configurations(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    per_group = st.integers(1, 5) if groups == 1 else st.sampled_from([4, 8])
    cig, cog = draw(per_group), draw(per_group)
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    input_hw = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    padding = tuple((draw(st.integers(0, d * (k - 1) + 1)), draw(st.integers(0, d * (k - 1) + 1)))
                    for k, d in zip(kernel, dilation))
    output_padding = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    return dict(batch=draw(st.integers(1, 2)), groups=groups, cig=cig, cog=cog, kernel=kernel, stride=stride,
                dilation=dilation, input_hw=input_hw, padding=padding, output_padding=output_padding,
                bias=draw(st.booleans()), seed=draw(st.integers(0, 2**31)))


@settings(max_examples=150, deadline=None)
@given(transposed_configurations())
def test_model_with_converted_weights_matches_conv_transpose2d(config):
    rng = np.random.default_rng(config["seed"])
    g, cig, cog = config["groups"], config["cig"], config["cog"]
    x = rng.standard_normal((config["batch"], *config["input_hw"], g * cig))
    w = rng.standard_normal((g * cig, *config["kernel"], cog)).astype(np.float32)
    bias = rng.standard_normal(g * cog) if config["bias"] else None
    arguments = dict(stride=config["stride"], padding=config["padding"], output_padding=config["output_padding"],
                     dilation=config["dilation"], groups=g)
    try:
        expected = fastdeconv.conv_transpose2d(x, w.astype(np.float64), bias, backend="reference", **arguments)
    except ValueError:   # an output smaller than 1 pixel: nothing to compare
        with pytest.raises(ValueError):
            weights.mpscnn_transpose_params(config["input_hw"], config["kernel"], **arguments,
                                            in_channels=g * cig, out_channels=g * cog)
        return
    params = weights.mpscnn_transpose_params(config["input_hw"], config["kernel"], **arguments,
                                             in_channels=g * cig, out_channels=g * cog)
    got = mpscnn_model.convolution_transpose(x, weights.to_mpscnn_transpose(w, g), params, bias)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-10)


@settings(max_examples=60, deadline=None)
@given(transposed_configurations())
def test_forward_model_matches_conv2d(config):
    rng = np.random.default_rng(config["seed"])
    g, cig, cog = config["groups"], config["cig"], config["cog"]
    h, w_ = (max(v, 4) for v in config["input_hw"])
    x = rng.standard_normal((config["batch"], h, w_, g * cig))
    w = rng.standard_normal((g * cog, *config["kernel"], cig))
    arguments = dict(stride=config["stride"], padding=config["padding"], dilation=config["dilation"], groups=g)
    try:
        expected = fastdeconv.conv2d(x, w, None, backend="reference", **arguments)
    except ValueError:
        return
    params = weights.mpscnn_conv_params((h, w_), config["kernel"], **arguments, in_channels=g * cig,
                                        out_channels=g * cog)
    np.testing.assert_allclose(mpscnn_model.convolution(x, w, params), expected, atol=1e-10)


def test_unbatched_and_shape_errors():
    params = weights.mpscnn_transpose_params((3, 3), 2, 2)
    y = mpscnn_model.convolution_transpose(np.ones((3, 3, 1)), np.ones((1, 2, 2, 1)), params)
    assert y.shape == (6, 6, 1)
    with pytest.raises(ValueError, match=r"has kernel \(3, 3\), but params say"):
        mpscnn_model.convolution_transpose(np.ones((3, 3, 1)), np.ones((1, 3, 3, 1)), params)
    with pytest.raises(ValueError, match="only edge_mode='zero'"):
        mpscnn_model.convolution_transpose(np.ones((3, 3, 1)), np.ones((1, 2, 2, 1)),
                                           dataclasses.replace(params, edge_mode="clamp"))
