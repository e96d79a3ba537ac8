"""Against torch.nn.functional (when torch is installed).

Layout conversions are done here, in the test: NHWC <-> NCHW, and torch's
ConvTranspose2d weight (C_in, C_out/g, kH, kW) -> ours with .transpose(0, 2, 3, 1),
torch's Conv2d weight (C_out, C_in/g, kH, kW) -> ours with .transpose(0, 2, 3, 1).
torch only pads symmetrically, so asymmetric padding is not compared here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdeconv
from helpers import assert_close, deconv_supported, examples

torch = pytest.importorskip("torch")
F = torch.nn.functional

SETTINGS = settings(max_examples=examples(100), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _nhwc(t):
    return t.permute(0, 2, 3, 1).numpy()


@st.composite
def _config(draw, transposed):
    g = draw(st.integers(1, 3))
    cig, cog = draw(st.sampled_from([1, 1, 2, 3, 4])), draw(st.integers(1, 4))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    d = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    p = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    op = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    if transposed:
        op = tuple(o % max(si, di) for o, si, di in zip(op, s, d))   # torch: op < stride or < dilation
    hw = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    return dict(g=g, cig=cig, cog=cog, k=k, s=s, d=d, p=p, op=op, hw=hw, n=draw(st.integers(1, 3)),
                bias=draw(st.booleans()), dtype=draw(st.sampled_from(["float32", "float64"])),
                seed=draw(st.integers(0, 2**32 - 1)))


@SETTINGS
@given(c=_config(True))
def test_conv_transpose2d_matches_torch(deconv_path, c):
    kd = [di * (ki - 1) + 1 for di, ki in zip(c["d"], c["k"])]
    out = [(i - 1) * s - 2 * p + e + o for i, s, p, e, o in zip(c["hw"], c["s"], c["p"], kd, c["op"])]
    if min(out) < 1:
        return
    rng = np.random.default_rng(c["seed"])
    g, cin, cout = c["g"], c["g"] * c["cig"], c["g"] * c["cog"]
    if not deconv_supported(deconv_path[0], (c["n"], *c["hw"], cin), (cin, *c["k"], c["cog"]), c["s"], c["p"],
                            c["op"], c["d"], g):
        return
    dtype = getattr(torch, c["dtype"])
    xt = torch.tensor(rng.standard_normal((c["n"], cin, *c["hw"])), dtype=dtype)
    wt = torch.tensor(rng.standard_normal((cin, c["cog"], *c["k"])), dtype=dtype)
    bt = torch.tensor(rng.standard_normal(cout), dtype=dtype) if c["bias"] else None
    want = F.conv_transpose2d(xt, wt, bt, stride=c["s"], padding=c["p"], output_padding=c["op"],
                              groups=g, dilation=c["d"])
    got = fastdeconv.conv_transpose2d(
        _nhwc(xt), wt.numpy().transpose(0, 2, 3, 1), None if bt is None else bt.numpy(),
        stride=c["s"], padding=c["p"], output_padding=c["op"], dilation=c["d"], groups=g, algorithm=deconv_path[0])
    # mixed-sign data: compare relative to the largest output (cancellation possible)
    scale = float(want.abs().max()) if want.numel() else 1.0
    tol = 1e-4 if c["dtype"] == "float32" else 1e-11
    np.testing.assert_allclose(got, _nhwc(want), rtol=0, atol=tol * max(scale, 1.0), err_msg=str(c) + str(deconv_path))


@SETTINGS
@given(c=_config(False))
def test_conv2d_matches_torch(isa_path, c):
    kd = [di * (ki - 1) + 1 for di, ki in zip(c["d"], c["k"])]
    if any(i + 2 * p < e for i, p, e in zip(c["hw"], c["p"], kd)):
        return
    rng = np.random.default_rng(c["seed"])
    g, cin, cout = c["g"], c["g"] * c["cig"], c["g"] * c["cog"]
    dtype = getattr(torch, c["dtype"])
    xt = torch.tensor(rng.standard_normal((c["n"], cin, *c["hw"])), dtype=dtype)
    wt = torch.tensor(rng.standard_normal((cout, c["cig"], *c["k"])), dtype=dtype)
    bt = torch.tensor(rng.standard_normal(cout), dtype=dtype) if c["bias"] else None
    want = F.conv2d(xt, wt, bt, stride=c["s"], padding=c["p"], dilation=c["d"], groups=g)
    got = fastdeconv.conv2d(_nhwc(xt), wt.numpy().transpose(0, 2, 3, 1), None if bt is None else bt.numpy(),
                            stride=c["s"], padding=c["p"], dilation=c["d"], groups=g)
    scale = float(want.abs().max()) if want.numel() else 1.0
    tol = 1e-4 if c["dtype"] == "float32" else 1e-11
    np.testing.assert_allclose(got, _nhwc(want), rtol=0, atol=tol * max(scale, 1.0), err_msg=str(c) + isa_path)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("k,d", [((3, 3), (1, 1)), ((4, 2), (1, 1)), ((3, 2), (2, 3)), ((2, 2), (1, 1))])
def test_conv2d_same_matches_torch_same(k, d):
    """torch's padding='same' (stride 1) puts the extra row/column at the bottom/right, like ours."""
    rng = np.random.default_rng(1)
    xt = torch.tensor(rng.standard_normal((2, 4, 5, 6)))
    wt = torch.tensor(rng.standard_normal((6, 2, *k)))
    want = F.conv2d(xt, wt, padding="same", dilation=d, groups=2)
    got = fastdeconv.conv2d(_nhwc(xt), wt.numpy().transpose(0, 2, 3, 1), padding="same", dilation=d, groups=2)
    assert got.shape == _nhwc(want).shape
    np.testing.assert_allclose(got, _nhwc(want), rtol=0, atol=1e-11 * float(want.abs().max()))


@pytest.mark.parametrize("output_size_extra", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_output_size_matches_torch_module(output_size_extra):
    """nn.ConvTranspose2d(..., output_size=) picks the same output_padding."""
    rng = np.random.default_rng(2)
    m = torch.nn.ConvTranspose2d(4, 6, (3, 3), stride=2, padding=1, groups=2, dilation=1).double()
    xt = torch.tensor(rng.standard_normal((1, 4, 4, 5)))
    size = (7 + output_size_extra[0], 9 + output_size_extra[1])
    with torch.no_grad():
        want = m(xt, output_size=size)
    w = m.weight.detach().numpy().transpose(0, 2, 3, 1)
    got = fastdeconv.conv_transpose2d(_nhwc(xt), w, m.bias.detach().numpy(), stride=2, padding=1, groups=2,
                                      output_size=size)
    assert got.shape[1:3] == tuple(want.shape[2:])
    np.testing.assert_allclose(got, _nhwc(want), rtol=0, atol=1e-11 * float(want.abs().max()))


def test_float16_matches_torch_float32_within_half_precision():
    rng = np.random.default_rng(3)
    x = rng.uniform(0.25, 1.25, (2, 5, 4, 6)).astype(np.float16)
    w = rng.uniform(0.5, 1.5, (6, 3, 3, 4)).astype(np.float16)
    got = fastdeconv.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2)
    xt = torch.tensor(x.astype(np.float32)).permute(0, 3, 1, 2)
    wt = torch.tensor(w.astype(np.float32)).permute(0, 3, 1, 2)
    want = F.conv_transpose2d(xt, wt, stride=2, padding=1, output_padding=1, groups=2)
    assert got.dtype == np.float16
    assert_close(got, _nhwc(want).copy(), np.float16, 27)
