"""Hypothesis strategies over the whole parameter space of conv_transpose2d and conv2d (valid calls), shared
by the CPU and the Dask tests."""

from __future__ import annotations

from hypothesis import strategies as st

from helpers import LAYOUTS, Case

DTYPES = ["float16", "float32", "float64"]


@st.composite
def _channels(draw):
    """(groups, C_in, C_out): plain, grouped, depthwise (Cig=1) and channel multipliers (Cig=1, Cog>1)."""
    kind = draw(st.sampled_from(["plain", "grouped", "depthwise", "multiplier"]))
    if kind == "plain":
        g, cig, cog = 1, draw(st.integers(1, 6)), draw(st.integers(1, 6))
    elif kind == "grouped":
        g, cig, cog = draw(st.integers(2, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    elif kind == "depthwise":
        g, cig, cog = draw(st.integers(1, 6)), 1, 1
    else:
        g, cig, cog = draw(st.integers(1, 5)), 1, draw(st.integers(2, 4))
    return g, g * cig, g * cog


@st.composite
def _common(draw, op):
    g, cin, cout = draw(_channels())
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dtype = draw(st.sampled_from(DTYPES))
    mixed = draw(st.sampled_from([None, None, None, "float16", "float32", "float64"]))
    unbatched = draw(st.booleans())
    return dict(
        op=op,
        n=1 if unbatched else draw(st.integers(0, 3)),
        c_in=cin, c_out=cout, groups=g, kernel=(kh, kw),
        stride=stride if draw(st.booleans()) else stride[0],
        dilation=dilation if draw(st.booleans()) else dilation[0],
        bias=draw(st.booleans()),
        unbatched=unbatched,
        x_layout=draw(st.sampled_from(LAYOUTS)),
        w_layout=draw(st.sampled_from(LAYOUTS)),
        dtype=dtype, w_dtype=mixed,
        b_dtype=draw(st.sampled_from([None, None, "float64", "float32"])),
        seed=draw(st.integers(0, 2**32 - 1)),
        threads=draw(st.sampled_from([None, 1, 2, 3, 4])),
    )


def _pair(p):
    return p[0] if p[0] == p[1] else p


@st.composite
def deconv_cases(draw):
    c = draw(_common("t"))
    hw = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    s = c["stride"] if isinstance(c["stride"], tuple) else (c["stride"],) * 2
    d = c["dilation"] if isinstance(c["dilation"], tuple) else (c["dilation"],) * 2
    kd = [di * (k - 1) + 1 for di, k in zip(d, c["kernel"])]
    full = [(i - 1) * si + e for i, si, e in zip(hw, s, kd)]
    limit = [max(si, di) for si, di in zip(s, d)]
    mode = draw(st.sampled_from(["int", "pair", "pairs", "same", "valid"]))
    if mode in ("same", "valid"):
        padding = mode if draw(st.booleans()) else mode.upper()
        pads = [(0, 0), (0, 0)]
    else:
        if mode == "pairs":
            pads = []
            for f in full:                              # keep the output >= 1 row
                top = draw(st.integers(0, min(4, f - 1)))
                pads.append((top, draw(st.integers(0, min(4, f - 1 - top)))))
        else:
            pads = [(p, p) for p in (draw(st.integers(0, min(3, (f - 1) // 2))) for f in full)]
            if mode == "int":
                pads = [(min(pads[0][0], pads[1][0]),) * 2] * 2
        padding = {"int": pads[0][0], "pair": (pads[0][0], pads[1][0]), "pairs": tuple(pads)}[mode]
    op, size = 0, None
    if mode == "same":
        if draw(st.booleans()):
            size = (hw[0] * s[0], hw[1] * s[1])
    else:
        base = [f - p0 - p1 for f, (p0, p1) in zip(full, pads)]
        ops = (draw(st.integers(0, limit[0] - 1)), draw(st.integers(0, limit[1] - 1)))
        how = draw(st.sampled_from(["none", "op", "size", "both"]))
        if how in ("op", "both"):
            op = _pair(ops)
        if how in ("size", "both"):
            size = (base[0] + ops[0], base[1] + ops[1])
    return Case(hw=hw, padding=padding, output_padding=op, output_size=size, **c)


@st.composite
def conv_cases(draw):
    c = draw(_common("c"))
    s = c["stride"] if isinstance(c["stride"], tuple) else (c["stride"],) * 2
    d = c["dilation"] if isinstance(c["dilation"], tuple) else (c["dilation"],) * 2
    kd = [di * (k - 1) + 1 for di, k in zip(d, c["kernel"])]
    mode = draw(st.sampled_from(["int", "pair", "pairs", "same", "valid"]))
    if mode in ("same", "valid"):
        padding, pads = mode, [(0, 0), (0, 0)]
    else:
        pads = [(draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2)]
        if mode == "int":
            pads = [(pads[0][0],) * 2] * 2
        elif mode == "pair":
            pads = [(pads[0][0],) * 2, (pads[1][0],) * 2]
        padding = {"int": pads[0][0], "pair": (pads[0][0], pads[1][0]), "pairs": tuple(pads)}[mode]
    hw = []
    for e, (p0, p1) in zip(kd, pads):                  # the padded input must hold the dilated kernel
        low = 1 if mode == "same" else max(1, e - p0 - p1)
        hw.append(draw(st.integers(low, max(7, low + 2))))
    return Case(hw=tuple(hw), padding=padding, **c)
