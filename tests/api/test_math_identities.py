"""Identities of the operation that do not depend on the reference implementation.

1. conv_transpose2d(·, W) is the adjoint of conv2d(·, W) (same stride/padding/dilation/groups).
2. conv_transpose2d == conv2d of the zero-upsampled input with the flipped, channel-swapped kernel.
3. input (1,5,5,4), groups=4, 2 outputs per group, 3x3 kernel -> output (1,7,7,8).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdeconv
from helpers import assert_close, deconv_supported, examples

SETTINGS = settings(max_examples=examples(100), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def _config(draw):
    g = draw(st.integers(1, 3))
    cig, cog = draw(st.sampled_from([1, 1, 2, 3, 4])), draw(st.sampled_from([1, 1, 2, 3, 4]))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    kd = [di * (ki - 1) + 1 for di, ki in zip(d, k)]
    pads = tuple((draw(st.integers(0, e - 1)), draw(st.integers(0, e - 1))) for e in kd)
    return dict(g=g, cig=cig, cog=cog, k=k, s=s, d=d, pads=pads,
                n=draw(st.integers(1, 2)), seed=draw(st.integers(0, 2**32 - 1)))


@SETTINGS
@given(c=_config(), extra=st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_adjoint(deconv_path, c, extra):
    """<conv2d(x, W), y> == <x, conv_transpose2d(y, W, output_size=x's (H, W))> in float64."""
    rng = np.random.default_rng(c["seed"])
    g, cin, cout = c["g"], c["g"] * c["cig"], c["g"] * c["cog"]
    kd = [di * (ki - 1) + 1 for di, ki in zip(c["d"], c["k"])]
    # x large enough that the padded input holds the dilated kernel, plus a little
    hw = tuple(max(1, e - p0 - p1) + x for e, (p0, p1), x in zip(kd, c["pads"], extra))
    x = rng.standard_normal((c["n"], *hw, cin))
    w = rng.standard_normal((cout, *c["k"], c["cig"]))
    args = dict(stride=c["s"], padding=c["pads"], dilation=c["d"], groups=g)
    y_shape = fastdeconv.conv2d(x, w, **args, backend="cpu").shape
    if not deconv_supported(deconv_path[0], y_shape, w.shape, c["s"], c["pads"], 0, c["d"], g, hw):
        return
    y = rng.standard_normal(y_shape)
    forward = fastdeconv.conv2d(x, w, **args, backend="cpu")
    backward = fastdeconv.conv_transpose2d(y, w, **args, output_size=hw, backend="cpu", algorithm=deconv_path[0])
    assert backward.shape == x.shape
    lhs, rhs = float(np.vdot(forward, y)), float(np.vdot(x, backward))
    scale = float(np.sum(np.abs(forward) * np.abs(y))) + 1e-300
    assert abs(lhs - rhs) <= 1e-12 * scale, (lhs, rhs, c, hw, deconv_path)


def _zero_upsample(x, s):
    n, h, w, c = x.shape
    z = np.zeros((n, (h - 1) * s[0] + 1, (w - 1) * s[1] + 1, c), dtype=x.dtype)
    z[:, ::s[0], ::s[1]] = x
    return z


def _flip_swap(w, groups):
    """(C_in, kH, kW, Cog) transposed-conv weight -> (C_out, kH, kW, Cig) conv weight, flipped in kH, kW."""
    cin, kh, kw, cog = w.shape
    cig = cin // groups
    return (w.reshape(groups, cig, kh, kw, cog)[:, :, ::-1, ::-1, :]
            .transpose(0, 4, 2, 3, 1).reshape(groups * cog, kh, kw, cig))


@SETTINGS
@given(c=_config(), hw=st.tuples(st.integers(1, 5), st.integers(1, 5)),
       op=st.tuples(st.integers(0, 2), st.integers(0, 2)), bias=st.booleans())
def test_transpose_is_conv_of_zero_upsampled_input(deconv_path, c, hw, op, bias):
    rng = np.random.default_rng(c["seed"])
    g, cin, cout = c["g"], c["g"] * c["cig"], c["g"] * c["cog"]
    op = tuple(o % max(s, d) for o, s, d in zip(op, c["s"], c["d"]))
    out_hw = [(i - 1) * s + di * (ki - 1) + 1 - p0 - p1 + o
              for i, s, di, ki, (p0, p1), o in zip(hw, c["s"], c["d"], c["k"], c["pads"], op)]
    if min(out_hw) < 1:
        return  # an error case, see test_params_errors
    x = rng.standard_normal((c["n"], *hw, cin))
    w = rng.standard_normal((cin, *c["k"], c["cog"]))
    b = rng.standard_normal(cout) if bias else None
    if not deconv_supported(deconv_path[0], x.shape, w.shape, c["s"], c["pads"], op, c["d"], g):
        return
    got = fastdeconv.conv_transpose2d(x, w, b, stride=c["s"], padding=c["pads"], output_padding=op,
                                      dilation=c["d"], groups=g, backend="cpu", algorithm=deconv_path[0])
    # pads are <= d·(k−1), so the equivalent conv padding d·(k−1)−p is >= 0; output_padding pads the bottom/right
    conv_pads = tuple((di * (ki - 1) - p0, di * (ki - 1) - p1 + o)
                      for di, ki, (p0, p1), o in zip(c["d"], c["k"], c["pads"], op))
    want = fastdeconv.conv2d(_zero_upsample(x, c["s"]), _flip_swap(w, g), b, stride=1, padding=conv_pads,
                             dilation=c["d"], groups=g, backend="reference")
    assert_close(got, want, np.float64, 1, **c, op=op, path=deconv_path)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_grouped_depthwise_output_shape(backend, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 5, 5, 4)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 2)).astype(dtype)
    y = fastdeconv.conv_transpose2d(x, w, groups=4, backend=backend)
    assert y.shape == (1, 7, 7, 8)
    assert y.dtype == dtype
    assert fastdeconv.conv_transpose2d_output_shape((5, 5), (3, 3)) == (7, 7)
