"""The oracle itself: fastdeconv.reference against brute-force loops written from the formula.

The brute-force versions resolve padding and output sizes themselves (not through
fastdeconv._params), so the parameter contract is checked here too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdeconv
from fastdeconv import reference
from helpers import assert_close, examples


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pads(padding):
    """int, (ph, pw) or ((t, b), (l, r)) -> ((t, b), (l, r))."""
    if isinstance(padding, int):
        return ((padding, padding), (padding, padding))
    a, b = padding
    if isinstance(a, int):
        return ((a, a), (b, b))
    return (tuple(a), tuple(b))


def brute_conv_transpose2d(x, w, bias, stride, padding, output_padding, dilation, groups):
    """y[n, oy, ox, g·Cog+o] = bias + Σ x[n,iy,ix,g·Cig+i]·w[g·Cig+i,ky,kx,o], oy = iy·sH − pad_top + ky·dH."""
    n_, h, wd, cin = x.shape
    _, kh, kw, cog = w.shape
    (sh, sw), (dh, dw), (oph, opw) = _pair(stride), _pair(dilation), _pair(output_padding)
    if padding == "same":
        pads = []
        for k, d, s in ((kh, dh, sh), (kw, dw, sw)):
            total = max(d * (k - 1) + 1 - s, 0)
            pads.append((total // 2, total - total // 2))
        (pt, pb), (pl, pr) = pads
        ho, wo = h * sh, wd * sw
    else:
        (pt, pb), (pl, pr) = _pads(padding)
        ho = (h - 1) * sh - pt - pb + dh * (kh - 1) + oph + 1
        wo = (wd - 1) * sw - pl - pr + dw * (kw - 1) + opw + 1
    cig = cin // groups
    cout = cog * groups
    y = np.zeros((n_, ho, wo, cout))
    for n in range(n_):
        for iy in range(h):
            for ix in range(wd):
                for ky in range(kh):
                    for kx in range(kw):
                        oy = iy * sh - pt + ky * dh
                        ox = ix * sw - pl + kx * dw
                        if not (0 <= oy < ho and 0 <= ox < wo):
                            continue
                        for c in range(cin):
                            g = c // cig
                            for o in range(cog):
                                y[n, oy, ox, g * cog + o] += float(x[n, iy, ix, c]) * float(w[c, ky, kx, o])
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64)
    return y


def brute_conv2d(x, w, bias, stride, padding, dilation, groups):
    """y[n, oy, ox, g·Cog+o] = bias + Σ x[n, oy·sH − pad_top + ky·dH, …, g·Cig+i]·w[g·Cog+o, ky, kx, i]."""
    n_, h, wd, cin = x.shape
    cout, kh, kw, cig = w.shape
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    if padding == "same":
        pads = []
        for size, k, d, s in ((h, kh, dh, sh), (wd, kw, dw, sw)):
            out = -(-size // s)
            total = max((out - 1) * s + d * (k - 1) + 1 - size, 0)
            pads.append((total // 2, total - total // 2))
        (pt, pb), (pl, pr) = pads
    elif padding == "valid":
        (pt, pb), (pl, pr) = (0, 0), (0, 0)
    else:
        (pt, pb), (pl, pr) = _pads(padding)
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    cog = cout // groups
    y = np.zeros((n_, ho, wo, cout))
    for n in range(n_):
        for oy in range(ho):
            for ox in range(wo):
                for co in range(cout):
                    g = co // cog
                    acc = 0.0
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = oy * sh - pt + ky * dh, ox * sw - pl + kx * dw
                            if 0 <= iy < h and 0 <= ix < wd:
                                for i in range(cig):
                                    acc += float(x[n, iy, ix, g * cig + i]) * float(w[co, ky, kx, i])
                    y[n, oy, ox, co] = acc
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64)
    return y


@st.composite
def _tiny(draw, op):
    g = draw(st.integers(1, 3))
    cig, cog = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h, wd = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["int", "pair", "pairs", "same"] + (["valid"] if op == "c" else [])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return dict(g=g, cig=cig, cog=cog, k=(kh, kw), s=s, d=d, hw=(h, wd), kind=kind, rng=rng,
                n=draw(st.integers(1, 2)), bias=draw(st.booleans()),
                pads=[(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2)],
                op=(draw(st.integers(0, 2)), draw(st.integers(0, 2))))


def _padding_arg(kind, pads):
    if kind in ("same", "valid"):
        return kind
    if kind == "int":
        return pads[0][0]
    if kind == "pair":
        return (pads[0][0], pads[1][0])
    return tuple(pads)


@settings(max_examples=examples(200), deadline=None)
@given(p=_tiny("t"))
def test_reference_conv_transpose2d_matches_brute_force(p):
    rng = p["rng"]
    cin, cout = p["g"] * p["cig"], p["g"] * p["cog"]
    x = rng.standard_normal((p["n"], *p["hw"], cin))
    w = rng.standard_normal((cin, *p["k"], p["cog"]))
    b = rng.standard_normal(cout) if p["bias"] else None
    padding = _padding_arg(p["kind"], p["pads"])
    op = (0, 0) if p["kind"] == "same" else tuple(o % max(s, d) for o, s, d in zip(p["op"], p["s"], p["d"]))
    try:
        fastdeconv.conv_transpose2d_output_shape(p["hw"], p["k"], p["s"], padding, op, p["d"])
    except ValueError:
        return  # output < 1: covered by test_params_errors
    args = dict(stride=p["s"], padding=padding, dilation=p["d"], groups=p["g"])
    got = reference.conv_transpose2d(x, w, b, output_padding=op, **args)
    want = brute_conv_transpose2d(x, w, b, p["s"], padding, op, p["d"], p["g"])
    assert_close(got, want, np.float64, 1, **args, output_padding=op)
    # backend="reference" through the public API is the same function
    np.testing.assert_array_equal(
        fastdeconv.conv_transpose2d(x, w, b, output_padding=op, backend="reference", **args), got)


@settings(max_examples=examples(200), deadline=None)
@given(p=_tiny("c"))
def test_reference_conv2d_matches_brute_force(p):
    rng = p["rng"]
    cin, cout = p["g"] * p["cig"], p["g"] * p["cog"]
    x = rng.standard_normal((p["n"], *p["hw"], cin))
    w = rng.standard_normal((cout, *p["k"], p["cig"]))
    b = rng.standard_normal(cout) if p["bias"] else None
    padding = _padding_arg(p["kind"], p["pads"])
    try:
        fastdeconv.conv2d_output_shape(p["hw"], p["k"], p["s"], padding, p["d"])
    except ValueError:
        return
    args = dict(stride=p["s"], padding=padding, dilation=p["d"], groups=p["g"])
    got = reference.conv2d(x, w, b, **args)
    want = brute_conv2d(x, w, b, p["s"], padding, p["d"], p["g"])
    assert_close(got, want, np.float64, 1, **args)
    np.testing.assert_array_equal(fastdeconv.conv2d(x, w, b, backend="reference", **args), got)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_reference_low_precision_is_float64_sum_rounded_once(dtype):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.25, 1.25, (2, 3, 4, 4)).astype(dtype)
    w = rng.uniform(0.5, 1.5, (4, 2, 3, 2)).astype(dtype)
    got = reference.conv_transpose2d(x, w, stride=2, groups=2)
    assert got.dtype == dtype
    want = brute_conv_transpose2d(x, w, None, 2, 0, 0, 1, 2)
    np.testing.assert_array_equal(got, want.astype(dtype))


def test_reference_unbatched_and_output_size():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4, 2))
    w = rng.standard_normal((2, 3, 3, 3))
    got = reference.conv_transpose2d(x, w, stride=2, padding=1, output_size=(6, 8))
    want = brute_conv_transpose2d(x[None], w, None, 2, 1, (1, 1), 1, 1)[0]
    assert got.shape == (6, 8, 3)
    assert_close(got, want, np.float64, 1)
