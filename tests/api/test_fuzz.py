"""Fuzzing the public entry points with valid and invalid arguments.

conv_transpose2d, conv2d and ConvTranspose2d are called with random small arrays (non-finite values
included, any dtype, zero-size axes, wrong ndim, odd strides) and random parameters (huge and
negative ints up to 2**64, numpy and bool scalars, floats, None, strings, nested tuples). Every
example must either

* raise ValueError or TypeError with a non-empty message that names the offending argument, or
* equal backend="reference" within the dtype's tolerance, with NaN and Inf in exactly the same
  places,

and leave its inputs unmodified. Any other exception (OverflowError, MemoryError, numpy internals)
fails. A call that is valid by construction (no argument mutated) must succeed.

Examples per test: 150 by default, FASTDECONV_FUZZ_EXAMPLES=N sets it (a long hunt:
``FASTDECONV_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz.py``), else FASTDECONV_TEST_EXAMPLES scales it.
With $CI set the examples are derandomized (Hypothesis' "ci" profile), so CI runs are reproducible.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import fastdeconv
from fastdeconv._backends import cpu as _cpu_backend
from helpers import LAYOUTS, examples, strided_view, tolerance

# ----------------------------------------------------------------------------------------------
# Settings: derandomized under $CI (the "ci" profile, built into Hypothesis >= 6.131; registered
# here with the same settings for older versions), a modest count, overridable for long runs.
# ----------------------------------------------------------------------------------------------

try:
    _CI_PROFILE = settings.get_profile("ci")
except InvalidArgument:
    settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
    _CI_PROFILE = settings.get_profile("ci")

_COUNT = os.environ.get("FASTDECONV_FUZZ_EXAMPLES")
FUZZ = settings(
    _CI_PROFILE if os.environ.get("CI") else settings.default,
    max_examples=int(_COUNT) if _COUNT else examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
    # no "explain" phase: tracing every line while re-running a failure costs minutes here
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)

# Bounds that keep every array small: outputs (and the reference's canvas) larger than this are not
# computed. A call that the library would accept with a larger output (or more groups, which only
# zero channels allow) is skipped, not run.
OUTPUT_LIMIT = 1 << 16
REFERENCE_LIMIT = 1 << 18

# The documented limits (README, "Semantics"): every parameter value <= 2**62, and per axis
# in + out + (strided - 1)·s + (k - 1)·d + pads + output_padding + s + d < 2**63.
MAX_PARAMETER, MAX_SPAN = 2 ** 62, 2 ** 63

HUGE = [2 ** 15, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, 10 ** 20]
GEOMETRY_ARGS = ("stride", "padding", "output_padding", "dilation", "output_size")

# ----------------------------------------------------------------------------------------------
# Argument values
# ----------------------------------------------------------------------------------------------

INT_VALUES = [1, 2, 0, 3, -1, -2, 5, *HUGE, -2 ** 31, -2 ** 63, -2 ** 64, -10 ** 20,
              np.int8(2), np.int8(-1), np.uint8(3), np.int16(1), np.int32(2), np.int64(2 ** 63 - 1),
              np.int64(-2 ** 63), np.uint32(2 ** 32 - 1), np.uint64(1), np.uint64(2 ** 64 - 1)]
ODD_VALUES = [True, False, np.bool_(True), 2.0, 1.5, float("nan"), float("inf"), np.float32(2.0), np.float64(1.0),
              None, "2", "", "same", "VALID", "full", b"same", 1j,
              (), (1,), (1, 2, 3), [1, 2], ((1, 2), (3, 4)), ((1,), (2,)), ((1, 2, 3), (4, 5)), ((0, 0), 1),
              (1, (2, 3)), [[1, 1], [2, 2]], (2 ** 64, 1), (1, -1), (np.uint64(2 ** 64 - 1), 1), (1.0, 1),
              (True, 1), (None, 1), ("1", 1), (1, 2 ** 63), ((2 ** 64, 0), (0, 0)), ((0, -1), (0, 0)),
              np.array(2), np.array([1, 2]), np.array([[1, 1], [1, 1]]), {1: 2}, {1, 2}]

param_values = st.one_of(
    st.sampled_from(INT_VALUES),
    st.sampled_from(ODD_VALUES),
    st.tuples(st.sampled_from(INT_VALUES), st.sampled_from(INT_VALUES)),
    st.integers(-2 ** 66, 2 ** 66),
)

ARRAY_MUTATIONS = {
    "x": ["dtype=int32", "dtype=int8", "dtype=uint64", "dtype=bool", "dtype=complex64", "dtype=complex128",
          "dtype=object", "dtype=str", "dtype=longdouble", "dtype=datetime64", "dtype=float16", "dtype=>f8",
          "ndim=0", "ndim=1", "ndim=2", "ndim=5", "zero=N", "zero=H", "zero=W", "channels+1", "list", "None",
          "str", "masked", "channels-first"],
    "weight": ["dtype=int64", "dtype=uint8", "dtype=bool", "dtype=complex128", "dtype=object", "dtype=str",
               "dtype=longdouble", "dtype=float32", "dtype=>f4", "ndim=3", "ndim=5", "zero=kH", "zero=kW",
               "channels+1", "list", "None", "masked", "torch-layout"],
    "bias": ["length+1", "length-1", "ndim=0", "ndim=2", "dtype=bool", "dtype=complex128", "dtype=object",
             "dtype=str", "dtype=int64", "dtype=uint8", "dtype=float16", "dtype=float64", "list", "scalar",
             "masked"],
}
# Layout mistakes (x channels-first, a weight in torch's layout): a different but possibly valid call;
# either it computes what the reference computes for the arrays as given, or it raises, and an error
# about channels or the bias that the mistake explains names the mistake and its fix.
LAYOUT_MUTATIONS = {"channels-first": "x looks channels-first", "torch-layout": "looks like torch's"}
# Array mutations that keep the call valid (the call must succeed).
VALID_ARRAY_MUTATIONS = {
    "x": {"dtype=float16", "dtype=>f8", "zero=N", "list"},
    "weight": {"dtype=float32", "dtype=>f4", "list"},
    "bias": {"dtype=int64", "dtype=uint8", "dtype=float16", "dtype=float64", "list"},
}


def _int_like(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def param_verdict(name: str, value) -> str:
    """'invalid' where the documented contract says the call must raise; 'maybe' otherwise (it may
    be accepted, e.g. a huge stride on a 1-pixel input, or a numpy int)."""
    minimum = {"stride": 1, "dilation": 1, "groups": 1, "output_size": 1, "padding": 0, "output_padding": 0}[name]
    if isinstance(value, (bool, np.bool_, np.ndarray)):
        return "maybe"
    if isinstance(value, (dict, set)):   # unordered: padding rejects them (documented), the pairs take them
        return "invalid" if name == "padding" else "maybe"
    if value is None:
        return "maybe" if name == "output_size" else "invalid"
    if _int_like(value):
        return "invalid" if value < minimum or value > MAX_PARAMETER else "maybe"
    if isinstance(value, str):
        return "maybe" if name == "padding" and value.lower() in ("same", "valid") else "invalid"
    if name == "groups" or not isinstance(value, (tuple, list)):
        return "invalid"
    if len(value) != 2:
        return "invalid"
    if name == "padding" and not all(_int_like(v) for v in value):
        if all(isinstance(v, (tuple, list)) and len(v) == 2 and all(_int_like(u) for u in v) for v in value):
            flat = [u for v in value for u in v]
            return "invalid" if min(flat) < 0 or max(flat) > MAX_PARAMETER else "maybe"
        if any(isinstance(v, (bool, np.bool_)) for v in value):
            return "maybe"
        return "invalid"
    if any(isinstance(v, (bool, np.bool_)) for v in value):
        return "maybe"
    if not all(_int_like(v) for v in value):
        return "invalid"
    return "invalid" if min(value) < minimum or max(value) > MAX_PARAMETER else "maybe"


def _beyond_limits(axes, transposed) -> bool:
    """Whether a base call's axes (h, k, s, d, (p0, p1), op, out) exceed the documented limits."""
    for h, k, s, d, (p0, p1), *rest in axes:
        op, out = (rest[0], rest[1]) if transposed else (0, rest[0])
        strided = h if transposed else out
        if max(s, d, p0, p1) > MAX_PARAMETER or h + out + (strided - 1) * s + (k - 1) * d + p0 + p1 + op + s + d >= MAX_SPAN:
            return True
    return False


def array_suspects(name: str, mutation: str) -> set:
    """Argument names an error caused by this array mutation may name."""
    if name == "bias":
        return {"bias"}
    if mutation.startswith(("dtype=", "ndim=")) or mutation in ("None", "str", "masked"):
        return {name}
    if mutation in LAYOUT_MUTATIONS:   # the reinterpreted shape may break any geometry rule
        return {"x", "weight", "groups", "bias", *GEOMETRY_ARGS}
    return {"x", "weight", "groups"} | ({"bias"} if name == "weight" else set())


def param_suspects(name: str, verdict: str) -> set:
    if verdict == "invalid":
        return {name}
    if name == "groups":   # C_in/C_out consistency
        return {"groups", "x", "weight", "bias"}
    return set(GEOMETRY_ARGS) | {name}


# ----------------------------------------------------------------------------------------------
# One example: a valid base call (by construction) plus zero or more mutated arguments
# ----------------------------------------------------------------------------------------------


@dataclass
class Example:
    op: str                       # "t" conv_transpose2d, "c" conv2d, "layer" ConvTranspose2d
    n: int
    hw: tuple
    groups: int
    cig: int
    cog: int
    kernel: tuple
    params: dict                  # stride, padding, dilation (+ output_padding, output_size)
    bias: bool
    unbatched: bool
    dtypes: tuple                 # x, weight, bias
    layouts: tuple                # x, weight
    values: tuple                 # x, weight, bias: "finite", "nan", "+inf", "-inf", "mixed", "zeros+inf"
    seed: int
    algorithm: str | None
    mutations: tuple = field(default_factory=tuple)
    beyond_limits: bool = False   # the base call exceeds the documented 64-bit limits: a ValueError   # ((argument, value or array mutation), ...)


def _transposed_axis(draw, huge):
    """(h, k, s, d, (p0, p1), op, out) of a valid transposed-convolution axis with out <= 26."""
    k = draw(st.integers(1, 4))
    s = draw(st.sampled_from(HUGE)) if huge and draw(st.booleans()) else draw(st.integers(1, 3))
    d = draw(st.sampled_from(HUGE)) if huge and draw(st.booleans()) else draw(st.integers(1, 3))
    h = draw(st.integers(1, 2 if s > 3 else 5))
    full = (h - 1) * s + d * (k - 1)              # output size without padding, minus 1
    r = draw(st.integers(0, min(full, 24)))       # out without output_padding = r + 1
    total = full - r
    p0 = draw(st.sampled_from([0, total // 2, total, -1]))
    p0 = draw(st.integers(0, total)) if p0 == -1 else p0
    op = draw(st.integers(0, min(max(s, d) - 1, 2)))
    return h, k, s, d, (p0, total - p0), op, r + 1


def _forward_axis(draw, huge):
    """(h, k, s, d, (p0, p1), out) of a valid convolution axis with out <= 25."""
    k = draw(st.integers(1, 4))
    s = draw(st.sampled_from(HUGE)) if huge and draw(st.booleans()) else draw(st.integers(1, 3))
    d = draw(st.sampled_from(HUGE)) if huge and draw(st.booleans()) else draw(st.integers(1, 3))
    h = draw(st.integers(1, 5))
    kd = d * (k - 1) + 1
    q = max(0, h - kd) + draw(st.integers(0, 24))  # h + pads − kd >= 0
    total = q + kd - h
    p0 = draw(st.sampled_from([0, total // 2, total, -1]))
    p0 = draw(st.integers(0, total)) if p0 == -1 else p0
    return h, k, s, d, (p0, total - p0), q // s + 1


def _pair_form(draw, pair):
    if pair[0] == pair[1] and draw(st.booleans()):
        return pair[0]
    return tuple(pair) if draw(st.booleans()) else list(pair)


def _padding_form(draw, pads):
    (t, b), (l, r) = pads
    forms = [(tuple(pads[0]), tuple(pads[1]))]
    if t == b and l == r:
        forms.append((t, l))
        if t == l:
            forms.append(t)
    return draw(st.sampled_from(forms))


@st.composite
def example_strategy(draw, op):
    transposed = op != "c"
    groups = draw(st.integers(1, 3))
    cig = draw(st.sampled_from([1, 2, 3, 0]))
    cog = draw(st.sampled_from([1, 2, 3, 0]))
    huge = draw(st.integers(0, 4)) == 0
    axes = [(_transposed_axis if transposed else _forward_axis)(draw, huge) for _ in range(2)]
    hw = tuple(a[0] for a in axes)
    kernel = tuple(a[1] for a in axes)
    stride = (axes[0][2], axes[1][2])
    dilation = (axes[0][3], axes[1][3])
    pads = (axes[0][4], axes[1][4])
    small = max(stride + dilation) <= 3
    mode = draw(st.sampled_from(["explicit", "explicit", "same", "valid"])) if small else "explicit"
    if mode == "valid" and (any(p for pair in pads for p in pair) or
                            (not transposed and any(h < d * (k - 1) + 1 for h, k, d in zip(hw, kernel, dilation)))):
        mode = "explicit"
    params = dict(stride=_pair_form(draw, stride), dilation=_pair_form(draw, dilation),
                  padding=_padding_form(draw, pads) if mode == "explicit" else draw(st.sampled_from(
                      [mode, mode.upper()])))
    if transposed:
        ops = (axes[0][5], axes[1][5]) if mode != "same" else (0, 0)
        params["output_padding"] = _pair_form(draw, ops)
        if draw(st.booleans()):
            if mode == "same":
                params["output_size"] = (hw[0] * stride[0], hw[1] * stride[1])
            else:
                # any reachable size; an explicit output_padding must then agree (or be 0)
                extra = tuple(draw(st.integers(0, min(max(s, d) - 1, 2))) for s, d in zip(stride, dilation))
                base = tuple(a[6] for a in axes)
                params["output_size"] = tuple(b + e for b, e in zip(base, extra))
                params["output_padding"] = _pair_form(draw, extra if draw(st.booleans()) else (0, 0))
    n = draw(st.sampled_from([1, 2, 0]))
    unbatched = n == 1 and draw(st.booleans())
    value_kinds = st.sampled_from(["finite", "finite", "finite", "nan", "+inf", "-inf", "mixed", "zeros+inf"])
    float_dtypes = st.sampled_from(["float32", "float64", "float16"])
    algorithms = [None, *sorted(_cpu_backend.DECONV_ALGORITHMS if transposed else _cpu_backend.CONV_ALGORITHMS)]
    example = Example(
        op=op, n=n, hw=hw, groups=groups, cig=cig, cog=cog, kernel=kernel, params=params,
        bias=draw(st.booleans()), unbatched=unbatched,
        dtypes=(draw(float_dtypes), draw(float_dtypes), draw(st.sampled_from([None, "float64", "float16"]))),
        layouts=(draw(st.sampled_from([*LAYOUTS, "unaligned"])), draw(st.sampled_from([*LAYOUTS, "unaligned"]))),
        values=(draw(value_kinds), draw(value_kinds), draw(value_kinds)),
        seed=draw(st.integers(0, 2 ** 16)),
        algorithm=draw(st.sampled_from(algorithms)) if draw(st.integers(0, 3)) == 0 else None,
        beyond_limits=_beyond_limits(axes, transposed),
    )
    mutations = {}   # at most one per argument
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
        if draw(st.booleans()):
            names = ["stride", "padding", "dilation", "groups"] + (["output_padding", "output_size"] if transposed
                                                                     else [])
            name = draw(st.sampled_from(names))
            mutations.setdefault(name, draw(param_values))
        else:
            name = draw(st.sampled_from(["x", "weight", "bias"]))
            mutations.setdefault(name, draw(st.sampled_from(ARRAY_MUTATIONS[name])))
    example.mutations = tuple(mutations.items())
    return example


# ----------------------------------------------------------------------------------------------
# Building the arrays and arguments of an example
# ----------------------------------------------------------------------------------------------


def _values(shape, kind, rng):
    """float64 values: small finite numbers (exact in float16), with zeros and non-finite values
    sprinkled in according to ``kind``."""
    v = np.round(rng.uniform(-4, 4, size=shape) * 8) / 8
    size = v.size
    if size == 0 or kind == "finite":
        return v
    flat = v.reshape(-1)
    picks = rng.random(size)
    if kind == "zeros+inf":
        flat[picks < 0.3] = 0.0
        flat[picks > 0.9] = np.inf
    elif kind == "mixed":
        flat[picks < 0.1] = np.nan
        flat[(picks >= 0.1) & (picks < 0.2)] = np.inf
        flat[(picks >= 0.2) & (picks < 0.3)] = -np.inf
        flat[(picks >= 0.3) & (picks < 0.4)] = 0.0
    else:
        special = {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf}[kind]
        flat[picks < 0.15] = special
        if not (picks < 0.15).any():
            flat[int(rng.integers(size))] = special
    return v


def _layout(array, layout):
    if layout == "unaligned":   # one byte past an aligned buffer: a misaligned data pointer
        if array.dtype.itemsize == 1 or array.dtype.hasobject:
            return array
        buf = np.empty(array.nbytes + 1, np.uint8)[1:].view(array.dtype).reshape(array.shape)
        buf[...] = array
        return buf
    if array.dtype.hasobject or array.ndim == 0:
        return array
    return strided_view(array, layout)


def _cast(v, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.nan_to_num(v, nan=0.0, posinf=1, neginf=-1).astype(np.int64).clip(
            np.iinfo(dtype).min, np.iinfo(dtype).max).astype(dtype)
    if dtype.kind == "b":
        return v != 0
    if dtype.kind == "U":
        return v.astype(str)
    if dtype.kind == "M":
        return np.nan_to_num(v, nan=0, posinf=0, neginf=0).astype(np.int64).astype(dtype)
    if dtype.kind == "O":
        return v.astype(object)
    return v.astype(dtype)


def _mutate_array(array, mutation, name, rng, kind):
    """The mutated argument (an array, a list, None or a string)."""
    if mutation == "None":
        return None
    if mutation == "str":
        return "abc"
    if mutation == "list":
        return array.tolist()
    if mutation == "scalar":
        return 1.5
    if mutation == "masked":   # the hidden values are huge: computing them would show
        mask = rng.random(array.shape) < 0.3
        return np.ma.masked_array(np.where(mask, 1e30, array).astype(array.dtype), mask=mask)
    if mutation == "channels-first":   # (N, H, W, C) -> (N, C, H, W); unbatched (H, W, C) -> (C, H, W)
        return np.moveaxis(array, -1, -3)
    if mutation == "torch-layout":     # ours (A, kH, kW, B) -> torch's (A, B, kH, kW), both operations
        return array.transpose(0, 3, 1, 2)
    if mutation.startswith("dtype="):
        dtype = np.dtype("datetime64[s]" if mutation == "dtype=datetime64" else
                         "U8" if mutation == "dtype=str" else mutation[6:])
        return _cast(array.astype(np.float64), dtype)
    shape = list(array.shape)
    if mutation.startswith("ndim="):
        ndim = int(mutation[5:])
        shape = (shape + [2] * 5)[:ndim] if ndim <= len(shape) else [1] * (ndim - len(shape)) + shape
    elif mutation.startswith("zero="):
        axis = {"N": 0, "H": -3, "W": -2, "kH": 1, "kW": 2}[mutation[5:]]
        if name == "x" and mutation == "zero=N" and array.ndim == 3:
            axis = None   # unbatched: no N axis; keep it valid
        if axis is not None:
            shape[axis] = 0
    elif mutation == "channels+1":
        shape[-1 if name == "x" else (0 if array.ndim == 4 and name == "weight" and kind == "t" else -1)] += 1
    elif mutation == "length+1":
        shape[0] += 1
    elif mutation == "length-1":
        if shape[0] == 0:
            shape[0] = 2
        else:
            shape[0] -= 1
    return _values(tuple(shape), "finite", rng).astype(array.dtype)


def build(ex: Example):
    """(x, weight, bias, kwargs) of an example, and the verdicts of its mutations."""
    rng = np.random.default_rng(ex.seed)
    transposed = ex.op != "c"
    cin, cout = ex.groups * ex.cig, ex.groups * ex.cog
    x_shape = (*ex.hw, cin) if ex.unbatched else (ex.n, *ex.hw, cin)
    w_shape = (cin, *ex.kernel, ex.cog) if transposed else (cout, *ex.kernel, ex.cig)
    x = _values(x_shape, ex.values[0], rng).astype(ex.dtypes[0])
    w = _values(w_shape, ex.values[1], rng).astype(ex.dtypes[1])
    result = np.result_type(x.dtype, w.dtype)
    b = _values((cout,), ex.values[2], rng).astype(ex.dtypes[2] or result) if ex.bias else None
    x, w = _layout(x, ex.layouts[0]), _layout(w, ex.layouts[1])
    args = {"x": x, "weight": w, "bias": b}
    kwargs = dict(ex.params, groups=ex.groups)
    verdicts = []
    for name, value in ex.mutations:
        if name in args:
            base = args[name]
            if base is None:   # a bias mutation on a call without bias
                base = _values((cout,), ex.values[2], rng).astype(result)
            args[name] = _mutate_array(base, value, name, rng, "t" if transposed else "c")
            verdict = ("valid" if value in VALID_ARRAY_MUTATIONS[name] else
                       "maybe" if value in LAYOUT_MUTATIONS else "invalid")
            if value == "list" and np.asarray(args[name]).shape != base.shape:
                verdict = "invalid"   # nested lists lose leading zero-size axes: [] is 1-D
            verdicts.append((name, verdict, array_suspects(name, value)))
        else:
            kwargs[name] = value
            verdict = param_verdict(name, value)
            verdicts.append((name, verdict, param_suspects(name, verdict)))
    if dict(ex.mutations).get("x") == dict(ex.mutations).get("weight") == "channels+1":
        # both one channel more: consistent again unless groups no longer divides them
        verdicts = [(n, "maybe" if n in ("x", "weight") else v, s) for n, v, s in verdicts]
    if ex.beyond_limits:   # must raise, naming a geometry argument, unless a mutation replaced the culprit
        mutated = any(name in GEOMETRY_ARGS for name, _ in ex.mutations)
        verdicts.append(("limits", "maybe" if mutated else "invalid", set(GEOMETRY_ARGS)))
    if ex.cig == 0 or ex.cog == 0:   # zero channels: documented nowhere; accepted or a clear error
        verdicts.append(("channels", "maybe", {"x", "weight", "groups", "bias"}))
    return args["x"], args["weight"], args["bias"], kwargs, verdicts


# ----------------------------------------------------------------------------------------------
# Oracles: backend="reference", or (when its canvas would be huge) the same sums by gathering
# ----------------------------------------------------------------------------------------------


def _gather_transposed(x, w, b, g):
    """conv_transpose2d in float64 by gathering, for any parameter size (Python ints): the
    reference's sums without its (pad + output)-sized canvas."""
    n, (h, wd), (kh, kw) = g.batch, g.input_hw, g.kernel_hw
    (sh, sw), (dh, dw), ((pt, _), (pl, _)), (ho, wo) = g.stride, g.dilation, g.pad, g.output_hw
    groups, cig, cog = g.groups, g.in_per_group, g.out_per_group
    xr = x.astype(np.float64).reshape(n, h, wd, groups, cig)
    wr = w.astype(np.float64).reshape(groups, cig, kh, kw, cog)
    y = np.zeros((n, ho, wo, groups, cog))

    def taps(out, size, pad, k, stride, dilation):
        pairs = [(o, (o + pad - k * dilation) // stride) for o in range(out)
                 if (o + pad - k * dilation) % stride == 0 and 0 <= (o + pad - k * dilation) // stride < size]
        return [np.array(v, dtype=np.intp) for v in zip(*pairs)] if pairs else None

    for ky in range(kh):
        rows = taps(ho, h, pt, ky, sh, dh)
        for kx in range(kw):
            cols = taps(wo, wd, pl, kx, sw, dw)
            if rows is None or cols is None:
                continue
            xs = xr[:, rows[1][:, None], cols[1][None, :]]
            y[:, rows[0][:, None], cols[0][None, :]] += np.einsum("nyxgi,gio->nyxgo", xs, wr[:, :, ky, kx, :])
    y = y.reshape(n, ho, wo, groups * cog)
    return y if b is None else y + b.astype(np.float64)


def _gather_forward(x, w, b, g):
    """conv2d in float64 by gathering (zero taps outside the image multiplied in, as the reference's
    zero-padded input does)."""
    n, (h, wd), (kh, kw) = g.batch, g.input_hw, g.kernel_hw
    (sh, sw), (dh, dw), ((pt, _), (pl, _)), (ho, wo) = g.stride, g.dilation, g.pad, g.output_hw
    groups, cig, cog = g.groups, g.in_per_group, g.out_per_group
    xr = x.astype(np.float64).reshape(n, h, wd, groups, cig)
    wr = w.astype(np.float64).reshape(groups, cog, kh, kw, cig)
    y = np.zeros((n, ho, wo, groups, cog))
    for ky in range(kh):
        iy = [o * sh - pt + ky * dh for o in range(ho)]
        for kx in range(kw):
            ix = [o * sw - pl + kx * dw for o in range(wo)]
            xs = np.zeros((n, ho, wo, groups, cig))
            oy = [o for o, i in enumerate(iy) if 0 <= i < h]
            ox = [o for o, i in enumerate(ix) if 0 <= i < wd]
            if oy and ox:
                xs[:, np.array(oy)[:, None], np.array(ox)[None, :]] = xr[
                    :, np.array([iy[o] for o in oy])[:, None], np.array([ix[o] for o in ox])[None, :]]
            y += np.einsum("nyxgi,goi->nyxgo", xs, wr[:, :, ky, kx, :])
    y = y.reshape(n, ho, wo, groups * cog)
    return y if b is None else y + b.astype(np.float64)


def _canvas_elements(g) -> int:
    """Elements the reference allocates for its canvas (transposed) or padded input (forward)."""
    (h, wd), (kh, kw), (sh, sw), (dh, dw) = g.input_hw, g.kernel_hw, g.stride, g.dilation
    ((pt, pb), (pl, pr)), (ho, wo) = g.pad, g.output_hw
    # numpy refuses shapes whose nonzero extents multiply past its limit even when one extent is 0
    if g.transposed:
        return max(g.batch, 1) * max(pt + ho, (h - 1) * sh + (kh - 1) * dh + 1) * max(
            pl + wo, (wd - 1) * sw + (kw - 1) * dw + 1) * max(g.out_channels, 1)
    return max(g.batch, 1) * (h + pt + pb) * (wd + pl + pr) * max(g.in_channels, 1)


def _work_elements(ex, x, w, kwargs):
    """The output's element count (or the group count, if larger: the weights are packed per group)
    if the call were accepted; None if it cannot be estimated (the call is then rejected during
    validation, before anything is allocated). Lists and other array-likes count by the array they
    make (a weight given as a list is accepted)."""
    try:
        x, w = np.asarray(x), np.asarray(w)
    except Exception:   # a hostile array-like: the call rejects it too
        return None
    if not (x.ndim in (3, 4) and w.ndim == 4):
        return None
    shape_args = {k: v for k, v in kwargs.items() if k not in ("groups", "output_size")}
    fn = fastdeconv.conv_transpose2d_output_shape if ex.op != "c" else fastdeconv.conv2d_output_shape
    try:
        hw = fn(x.shape[-3:-1], w.shape[1:3], **shape_args)
    except (ValueError, TypeError):
        return None
    output_size = kwargs.get("output_size")
    if output_size is not None:
        if _int_like(output_size):
            hw = (int(output_size), int(output_size))
        else:
            try:
                hw = tuple(int(v) for v in output_size)
            except (TypeError, ValueError, OverflowError):
                return None
            if len(hw) != 2:
                return None
    groups = int(kwargs["groups"]) if _int_like(kwargs["groups"]) and kwargs["groups"] >= 1 else 1
    channels = w.shape[3] * groups if ex.op != "c" else w.shape[0]
    n = x.shape[0] if x.ndim == 4 else 1
    return max(n * abs(int(hw[0])) * abs(int(hw[1])) * channels, groups)


def expected(ex, x, w, b, kwargs):
    """(oracle result, magnitude bound, result dtype, k, oracle name, result shape); the result and
    bound are None for an empty result (whose extent may be beyond what numpy can allocate)."""
    from fastdeconv._params import resolve_conv2d, resolve_conv_transpose2d

    xa, wa = np.asarray(x), np.asarray(w)
    dtype = np.result_type(xa.dtype.newbyteorder("="), wa.dtype.newbyteorder("="))
    x4 = xa[np.newaxis] if xa.ndim == 3 else xa
    bb = None if b is None else np.asarray(b).astype(dtype)
    if ex.op != "c":
        g = resolve_conv_transpose2d(x4.shape, wa.shape, **kwargs)
    else:
        g = resolve_conv2d(x4.shape, wa.shape, **kwargs)
    k = g.kernel_hw[0] * g.kernel_hw[1] * g.in_per_group + 1
    shape = g.output_shape[1:] if xa.ndim == 3 else g.output_shape
    if 0 in shape:
        return None, None, np.dtype(dtype), k, "none (empty result)", shape
    small = _canvas_elements(g) <= REFERENCE_LIMIT
    if small:
        ref_kwargs = {k_: v for k_, v in kwargs.items()}
        fn = fastdeconv.conv_transpose2d if ex.op != "c" else fastdeconv.conv2d
        ref = fn(x, w, b, **ref_kwargs, backend="reference")
        oracle = (fastdeconv.reference.conv_transpose2d_geometry if ex.op != "c"
                  else fastdeconv.reference.conv2d_geometry)
    else:
        oracle = _gather_transposed if ex.op != "c" else _gather_forward
        ref = oracle(x4, wa, bb, g).astype(dtype)
        if xa.ndim == 3:
            ref = ref[0]
    # |x|·|w| + |b| with non-finite values as 0: the scale of the terms (cancellation included)
    finite = [None if a is None else np.nan_to_num(np.abs(a.astype(np.float64)), nan=0, posinf=0, neginf=0)
              for a in (x4, wa, bb)]
    magnitude = oracle(*finite, g)
    if xa.ndim == 3:
        magnitude = magnitude[0]
    name = "reference" if small else "gather (the reference's canvas would be huge)"
    return np.asarray(ref), magnitude, np.dtype(dtype), k, name, shape


# ----------------------------------------------------------------------------------------------
# The property
# ----------------------------------------------------------------------------------------------


def _names(message: str, names) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names)


def _snapshot(value):
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return np.array(value, dtype=object)
    return value


def _same(a, b) -> bool:
    return a is b or a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _unchanged(before, after) -> bool:
    if isinstance(after, list):
        after = np.array(after, dtype=object)
    if not isinstance(after, np.ndarray):
        return True
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    if after.dtype.kind in "fc":
        return np.array_equal(before, after, equal_nan=True)
    if after.dtype.kind == "O":
        return all(_same(a, b) for a, b in zip(before.reshape(-1), after.reshape(-1)))
    return np.array_equal(before, after)


def run(ex: Example, x, w, b, kwargs):
    """Call the library as the example says: (result, the same call again; for a layer, through
    its cache of shapes seen before)."""
    if ex.op == "layer":
        layer_kwargs = {k: v for k, v in kwargs.items() if k != "output_size"}
        layer = fastdeconv.ConvTranspose2d(w, b, **layer_kwargs, algorithm=ex.algorithm, backend="cpu")
        y = layer(x, output_size=kwargs.get("output_size"))
        return y, layer(x, output_size=kwargs.get("output_size"))
    fn = fastdeconv.conv_transpose2d if ex.op == "t" else fastdeconv.conv2d
    return fn(x, w, b, **kwargs, backend="cpu", algorithm=ex.algorithm), None


def _layout_hint_expected(ex: Example, message: str):
    """The words an error must hold when the example's only mutation is a layout mistake that the
    error's own subject (the channel count, the bias length) reveals; None when none is owed."""
    if len(ex.mutations) != 1 or ex.cig == 0 or ex.cog == 0:
        return None
    name, mutation = ex.mutations[0]
    if name not in ("x", "weight") or mutation not in LAYOUT_MUTATIONS:
        return None
    cin, transposed = ex.groups * ex.cig, ex.op != "c"
    if name == "x" and "channels (its last axis)" in message:
        return LAYOUT_MUTATIONS[mutation] if ex.hw[1] != cin else None
    if name == "weight" and not transposed and "channels (its last axis)" in message:
        return LAYOUT_MUTATIONS[mutation]   # torch's (C_out, C_in/g, kH, kW): axis 1 has the channels
    if name == "weight" and transposed and message.startswith("bias must have shape"):
        return LAYOUT_MUTATIONS[mutation]   # the bias has torch's C_out = g · axis 1
    return None


def check_example(ex: Example):
    x, w, b, kwargs, verdicts = build(ex)
    must_raise = any(v == "invalid" for _, v, _ in verdicts)
    suspects = set().union(*(s for _, _, s in verdicts)) if verdicts else set()
    if ex.algorithm is not None:
        suspects.add("algorithm")

    work = _work_elements(ex, x, w, kwargs)
    if work is not None and work > OUTPUT_LIMIT:
        event("skipped: the output (or the number of groups) would be huge")
        return
    before = {name: _snapshot(v) for name, v in (("x", x), ("weight", w), ("bias", b))}
    try:
        y, again = run(ex, x, w, b, kwargs)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert message.strip(), f"{type(error).__name__} with an empty message: {ex}"
        if not verdicts or all(v == "valid" for _, v, _ in verdicts):
            assert ex.algorithm is not None and _names(message, ["algorithm"]), (
                f"a valid call raised {type(error).__name__}: {message}\n{ex}")
        else:
            assert _names(message, suspects), (
                f"{type(error).__name__} names none of {sorted(suspects)}: {message!r}\n{ex}")
        hint = _layout_hint_expected(ex, message)
        assert hint is None or hint in message, f"the error does not say {hint!r}: {message!r}\n{ex}"
        masked_only = (len(ex.mutations) == 1 and ex.mutations[0][0] in ("x", "weight", "bias")
                       and ex.mutations[0][1] == "masked")
        if masked_only and not ex.beyond_limits and ex.cig and ex.cog and ex.algorithm is None:
            assert "np.ma.filled" in message, f"a masked argument's error does not name the fix: {message!r}\n{ex}"
        event(f"raised {type(error).__name__}")
    except Exception as error:  # noqa: BLE001 - any other exception type is the failure under test
        pytest.fail(f"{type(error).__name__} (only ValueError/TypeError may be raised): {error}\n{ex}")
    else:
        assert not must_raise, f"accepted invalid arguments {[m for m in ex.mutations]}: {ex}"
        event("computed")
        try:
            with np.errstate(all="ignore"):   # inf - inf in the oracles: NaN, as intended
                ref, magnitude, dtype, k, oracle, shape = expected(ex, x, w, b, kwargs)
        except (ValueError, TypeError) as error:
            pytest.fail(f"backend='cpu' accepted a call that the reference rejects ({error}): {ex}")
        event(f"oracle: {oracle}")
        assert isinstance(y, np.ndarray) and y.shape == shape and y.dtype == dtype, (
            f"shape/dtype {getattr(y, 'shape', None)} {getattr(y, 'dtype', None)} != {shape} {dtype}: {ex}")
        if ref is not None:
            _compare(y, ref, magnitude, dtype, k, ex)
        if again is not None:
            assert np.array_equal(y, again, equal_nan=True), f"a layer's second call differs from its first: {ex}"
    for name, value in (("x", x), ("weight", w), ("bias", b)):
        assert _unchanged(before[name], value), f"{name} was modified: {ex}"


def _compare(got, ref, magnitude, dtype, k, ex):
    g, r = got.astype(np.float64), ref.astype(np.float64)
    for what, mask in (("NaN", np.isnan), ("Inf", np.isinf)):
        mg, mr = mask(g), mask(r)
        if not np.array_equal(mg, mr):
            where = tuple(int(i) for i in np.argwhere(mg != mr)[0])
            raise AssertionError(f"{what} positions differ: {int(mg.sum())} vs reference {int(mr.sum())}, first at "
                                 f"{where}: got {g[where]!r}, reference {r[where]!r}\n{ex}")
    inf = np.isinf(r)
    assert np.array_equal(g[inf], r[inf]), f"infinities of the wrong sign\n{ex}"
    finite = np.isfinite(r)
    bound = tolerance(dtype, k) * magnitude[finite] + np.finfo(dtype).tiny
    err = np.abs(g[finite] - r[finite])
    if (err > bound).any():
        worst = int(np.argmax(err - bound))
        raise AssertionError(f"{int((err > bound).sum())} elements off: worst got {g[finite][worst]!r}, reference "
                             f"{r[finite][worst]!r} (bound {bound[worst]:.3g})\n{ex}")


@pytest.mark.parametrize("op", ["t", "c", "layer"])
@FUZZ
@given(data=st.data())
def test_fuzz(op, isa_path, data):
    """Each example raises ValueError/TypeError naming its argument, or equals the reference, on
    every GEMM ISA (op: "t" conv_transpose2d, "c" conv2d, "layer" ConvTranspose2d)."""
    check_example(data.draw(example_strategy(op), label="example"))
