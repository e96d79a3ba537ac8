"""Shared test helpers: random data, per-dtype tolerances, assert_close, CPU path switching.

Data design: x is positive and every weight of one *output* channel has one
sign (and the bias shares it), so every output element is a sum of same-signed
terms. Nothing cancels, which makes an element-wise relative tolerance valid
and lets a dropped or doubled tap show up as a large relative error.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import asdict, dataclass

import numpy as np

import fastdeconv
from fastdeconv import _cpu
from fastdeconv._backends import cpu as _cpu_backend

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def script_env(**extra) -> dict:
    """The environment for a test file run as a script in a subprocess: these helpers importable."""
    path = os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def examples(n: int) -> int:
    """Hypothesis max_examples, scaled by $FASTDECONV_TEST_EXAMPLES (e.g. 10 for a long bug hunt)."""
    return max(1, int(n * float(os.environ.get("FASTDECONV_TEST_EXAMPLES", "1"))))

# ----------------------------------------------------------------------------------------------
# The CPU paths every comparison runs through: every algorithm of its kind x every supported GEMM ISA.
# Collected at import (= collection) time so that newly added algorithms are picked up.
# ----------------------------------------------------------------------------------------------

DECONV_ALGORITHMS = sorted(_cpu_backend.DECONV_ALGORITHMS)
CONV_ALGORITHMS = sorted(_cpu_backend.CONV_ALGORITHMS)
GEMM_ISAS = [name for name, ok in _cpu.build_info()["gemm_isa_supported"].items() if ok]
DECONV_PATHS = [(a, i) for a in DECONV_ALGORITHMS for i in GEMM_ISAS]
CONV_PATHS = [(a, i) for a in CONV_ALGORITHMS for i in GEMM_ISAS]


def array_at(shape, dtype, offset: int):
    """An uninitialised C-contiguous array of `shape` whose data starts `offset` bytes past a 64-byte
    cache line (results and out= buffers at chosen alignments)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    return raw[start:start + nbytes].view(dtype).reshape(shape)


@contextlib.contextmanager
def gemm_isa(name: str):
    """Force a GEMM ISA for the duration of the block, then restore the previous one."""
    previous = _cpu.get_gemm_isa()
    _cpu.set_gemm_isa(name)
    try:
        yield
    finally:
        _cpu.set_gemm_isa(previous)


def algorithm_supports(algorithm: str | None, geometry) -> bool:
    """Whether a forced algorithm handles this geometry (None: the automatic choice)."""
    return algorithm is None or _cpu_backend.supports(algorithm, geometry)


#: The GEMM panel budget the tap-block cases are drawn for (src/kernels/gemm.h), forced by them on every CPU
#: (the automatic budget follows the CPU's L2 and may leave their panels whole).
TAP_BLOCK_BUDGET = 256 * 1024


@contextlib.contextmanager
def gemm_panel_budget(nbytes: int):
    """Force the GEMM's panel budget for the duration of the block, then restore the automatic one."""
    _cpu.set_gemm_panel_budget(nbytes)
    try:
        yield
    finally:
        _cpu.set_gemm_panel_budget(None)


@contextlib.contextmanager
def threaded(num_threads: int | None = None, serial_flops: int = 0):
    """Use threads even for tiny problems (the backend runs small layers serially by default)."""
    previous_threads = fastdeconv.get_num_threads()
    previous_flops = _cpu.set_serial_flops(serial_flops)
    if num_threads is not None:
        fastdeconv.set_num_threads(num_threads)
    try:
        yield
    finally:
        _cpu.set_serial_flops(previous_flops)
        fastdeconv.set_num_threads(previous_threads)


def deconv_supported(algorithm, x_shape, w_shape, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                     output_size=None) -> bool:
    """algorithm_supports for a conv_transpose2d call's arguments."""
    from fastdeconv._params import resolve_conv_transpose2d

    geometry = resolve_conv_transpose2d(x_shape, w_shape, stride, padding, output_padding, dilation, groups,
                                        output_size)
    return algorithm_supports(algorithm, geometry)


def conv_supported(algorithm, x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1) -> bool:
    """algorithm_supports for a conv2d call's arguments."""
    from fastdeconv._params import resolve_conv2d

    return algorithm_supports(algorithm, resolve_conv2d(x_shape, w_shape, stride, padding, dilation, groups))


# ----------------------------------------------------------------------------------------------
# Random data
# ----------------------------------------------------------------------------------------------


def channel_signs(c_out: int, rng: np.random.Generator) -> np.ndarray:
    """+1/-1 per output channel, both signs present when c_out > 1."""
    signs = rng.choice([-1.0, 1.0], size=c_out)
    if c_out > 1 and np.all(signs == signs[0]):
        signs[rng.integers(c_out)] *= -1
    return signs


def make_x(shape, dtype, rng, low=0.25, high=1.25) -> np.ndarray:
    """Positive input data."""
    return rng.uniform(low, high, size=shape).astype(dtype)


def make_weight_t(c_in, kh, kw, c_out, groups, dtype, rng, signs=None) -> np.ndarray:
    """conv_transpose2d weight (C_in, kH, kW, C_out//groups), one sign per output channel g·Cog+o."""
    cig, cog = c_in // groups, c_out // groups
    signs = channel_signs(c_out, rng) if signs is None else signs
    mag = rng.uniform(0.5, 1.5, size=(groups, cig, kh, kw, cog))
    w = mag * signs.reshape(groups, 1, 1, 1, cog)
    return w.reshape(c_in, kh, kw, cog).astype(dtype)


def make_weight_c(c_out, kh, kw, c_in, groups, dtype, rng, signs=None) -> np.ndarray:
    """conv2d weight (C_out, kH, kW, C_in//groups), one sign per output channel."""
    cig = c_in // groups
    signs = channel_signs(c_out, rng) if signs is None else signs
    mag = rng.uniform(0.5, 1.5, size=(c_out, kh, kw, cig))
    return (mag * signs.reshape(c_out, 1, 1, 1)).astype(dtype)


def make_bias(c_out, dtype, rng, signs) -> np.ndarray:
    """Bias with the sign of its channel's weights (so it does not cancel either)."""
    return (rng.uniform(0.1, 1.0, size=c_out) * signs).astype(dtype)


def strided_view(array: np.ndarray, layout: str, rng=None) -> np.ndarray:
    """The same values as ``array`` in a non-contiguous layout.

    "contig": as is; "sliced": every other element of a larger buffer on every axis;
    "transposed": stored with reversed axis order; "reversed": stored flipped on axis 0
    and the last axis (negative strides); "fortran": Fortran order.
    """
    if layout == "contig":
        return array
    if layout == "sliced":
        big = np.full(tuple(2 * s + 1 for s in array.shape), np.nan, dtype=array.dtype)
        view = big[tuple(slice(1, None, 2) for _ in array.shape)]
        view[...] = array
        return view
    if layout == "transposed":
        axes = tuple(range(array.ndim))[::-1]
        stored = np.ascontiguousarray(array.transpose(axes))
        return stored.transpose(axes)
    if layout == "reversed":
        stored = np.ascontiguousarray(array[::-1, ..., ::-1])
        return stored[::-1, ..., ::-1]
    if layout == "fortran":
        return np.asfortranarray(array)
    raise ValueError(layout)


LAYOUTS = ("contig", "sliced", "transposed", "reversed", "fortran")


# ----------------------------------------------------------------------------------------------
# Tolerances and comparison
# ----------------------------------------------------------------------------------------------


def tolerance(dtype, k: int) -> float:
    """Relative tolerance for a sum of k same-signed products whose result has ``dtype``.

    ``dtype`` is the result dtype, np.result_type(x, weight): float64 data, mixed with anything,
    is compared at float64's tolerance.
    float16 is accumulated in float32 and rounded once, as the reference (float64) is: the two
    differ by at most one float16 ulp (2^-10 relative) plus the float32 sum's error, so 2e-3;
    float32 sums grow roughly like sqrt(k)·eps; float64 is near exact.
    """
    dtype = np.dtype(dtype)
    k = max(int(k), 1)
    if dtype == F16:
        return 2e-3 + 1e-5 * max(1.0, math.sqrt(k))
    if dtype == F32:
        return 1e-5 * max(1.0, math.sqrt(k))
    if dtype == F64:
        return 1e-12 * max(1.0, math.sqrt(k))
    raise TypeError(dtype)


def assert_close(got, ref, dtype, k, /, **params):
    """got == ref up to tolerance(dtype, k), element-wise relative, plus a small floor relative to max|ref|.

    NaNs must be in the same places. On failure every param is reported.
    """
    dtype = np.dtype(dtype)
    got = np.asarray(got)
    ref = np.asarray(ref)
    described = ", ".join(f"{k_}={v!r}" for k_, v in params.items())
    assert got.shape == ref.shape, f"shape {got.shape} != reference {ref.shape}; {described}"
    assert got.dtype == dtype, f"dtype {got.dtype} != expected {dtype}; {described}"
    if got.size == 0:
        return
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    nan_g, nan_r = np.isnan(g), np.isnan(r)
    if not np.array_equal(nan_g, nan_r):
        raise AssertionError(
            f"NaN positions differ: {int(nan_g.sum())} NaNs vs reference {int(nan_r.sum())}, first mismatch at "
            f"{tuple(int(i) for i in np.argwhere(nan_g != nan_r)[0])}; {described}")
    finite = ~nan_r
    g, r = g[finite], r[finite]
    if g.size == 0:
        return
    inf_r = np.isinf(r)
    if not np.array_equal(np.isinf(g), inf_r) or not np.array_equal(g[inf_r], r[inf_r]):
        raise AssertionError(f"infinities differ: {int(np.isinf(g).sum())} vs reference {int(inf_r.sum())}; "
                             f"{described}")
    g, r = g[~inf_r], r[~inf_r]
    if g.size == 0:
        return
    tol = tolerance(dtype, k)
    scale = float(np.max(np.abs(r)))
    bound = tol * (np.abs(r) + 1e-3 * scale) + np.finfo(dtype).tiny
    err = np.abs(g - r)
    bad = err > bound
    if bad.any():
        worst = int(np.argmax(err - bound))
        full_idx = tuple(int(i) for i in np.argwhere(finite & ~np.isinf(ref.astype(np.float64)))[worst])
        raise AssertionError(
            f"{int(bad.sum())}/{bad.size} elements off (tol {tol:.3g} rel, k={k}); worst at {full_idx}: got "
            f"{g[worst]!r}, reference {r[worst]!r}, |err|={err[worst]:.3g}, max|ref|={scale:.3g}; {described}")


# ----------------------------------------------------------------------------------------------
# A test case: arrays + arguments for one call, built reproducibly
# ----------------------------------------------------------------------------------------------


@dataclass
class Case:
    op: str = "t"                      # "t": conv_transpose2d, "c": conv2d
    n: int = 1
    hw: tuple = (5, 5)
    c_in: int = 3
    c_out: int = 4
    groups: int = 1
    kernel: tuple = (3, 3)
    stride: object = 1
    padding: object = 0
    output_padding: object = 0         # conv_transpose2d only
    dilation: object = 1
    output_size: object = None         # conv_transpose2d only
    bias: bool = True
    unbatched: bool = False
    x_layout: str = "contig"
    w_layout: str = "contig"
    dtype: str = "float64"             # x's dtype
    w_dtype: str | None = None         # weight's dtype (default: dtype)
    b_dtype: str | None = None         # bias's dtype (default: result dtype)
    seed: int = 0
    threads: int | None = None         # run threaded (even if tiny) with this many threads

    @property
    def result_dtype(self):
        return np.result_type(np.dtype(self.dtype), np.dtype(self.w_dtype or self.dtype))

    @property
    def k(self) -> int:
        """Terms per output element (an upper bound)."""
        cig = self.c_in // self.groups
        return self.kernel[0] * self.kernel[1] * cig + 1

    def arrays(self):
        rng = np.random.default_rng(self.seed)
        signs = channel_signs(self.c_out, rng)
        xshape = (*self.hw, self.c_in) if self.unbatched else (self.n, *self.hw, self.c_in)
        x = make_x(xshape, np.dtype(self.dtype), rng)
        wdt = np.dtype(self.w_dtype or self.dtype)
        if self.op == "t":
            w = make_weight_t(self.c_in, *self.kernel, self.c_out, self.groups, wdt, rng, signs)
        else:
            w = make_weight_c(self.c_out, *self.kernel, self.c_in, self.groups, wdt, rng, signs)
        b = make_bias(self.c_out, np.dtype(self.b_dtype or self.result_dtype), rng, signs) if self.bias else None
        return strided_view(x, self.x_layout), strided_view(w, self.w_layout), b

    def kwargs(self):
        kw = dict(stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)
        if self.op == "t":
            kw["output_padding"] = self.output_padding
            if self.output_size is not None:
                kw["output_size"] = self.output_size
        return kw

    def call(self, x, w, b, backend="cpu", algorithm=None, **extra):
        """The call on ``backend``; ``algorithm`` forces the CPU algorithm."""
        fn = fastdeconv.conv_transpose2d if self.op == "t" else fastdeconv.conv2d
        return fn(x, w, b, **self.kwargs(), backend=backend, algorithm=algorithm, **extra)

    def reference(self, x, w, b):
        fn = fastdeconv.reference.conv_transpose2d if self.op == "t" else fastdeconv.reference.conv2d
        return fn(x, w, b, **self.kwargs())

    def geometry(self, x, w):
        from fastdeconv._params import resolve_conv2d, resolve_conv_transpose2d

        kw = self.kwargs()
        if self.op == "t":
            return resolve_conv_transpose2d(x.shape, w.shape, kw["stride"], kw["padding"], kw["output_padding"],
                                            kw["dilation"], kw["groups"], kw.get("output_size"))
        return resolve_conv2d(x.shape, w.shape, kw["stride"], kw["padding"], kw["dilation"], kw["groups"])

    def describe(self, algorithm=None):
        d = asdict(self)
        d["isa"] = _cpu.get_gemm_isa()
        d["algorithm"] = algorithm
        return d


def check_case(case: Case, algorithm: str | None = None):
    """Run ``case`` on the CPU backend and compare with the reference. Returns False if the forced
    algorithm declares the geometry unsupported (nothing was checked)."""
    x, w, b = case.arrays()
    if not algorithm_supports(algorithm, case.geometry(x, w)):
        return False
    copies = [None if a is None else a.copy() for a in (x, w, b)]
    ref = case.reference(x, w, b)
    if case.threads is None:
        got = case.call(x, w, b, backend="cpu", algorithm=algorithm)
    else:
        with threaded(case.threads):
            got = case.call(x, w, b, backend="cpu", algorithm=algorithm)
    assert_close(got, ref, case.result_dtype, case.k, **case.describe(algorithm))
    for before, after, name in zip(copies, (x, w, b), ("x", "weight", "bias")):
        if before is not None:
            assert np.array_equal(before, after, equal_nan=True), f"{name} was modified; {case.describe(algorithm)}"
    return True
