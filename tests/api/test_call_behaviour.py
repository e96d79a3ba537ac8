"""Behaviour beyond the numbers: inputs untouched, out=, threads, NaN, N=0, dtypes, config."""

from __future__ import annotations

import contextlib
import platform
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastdeconv
from helpers import Case, array_at, assert_close, deconv_supported, make_bias, make_weight_t, make_x, threaded

BACKENDS = ["cpu", "reference", "auto"]
DTYPES = [np.float16, np.float32, np.float64]


def _t_args(dtype=np.float64, seed=0, n=2, hw=(5, 4), c_in=4, c_out=6, groups=2, k=(3, 2)):
    rng = np.random.default_rng(seed)
    signs = np.where(np.arange(c_out) % 2, -1.0, 1.0)
    x = make_x((n, *hw, c_in), dtype, rng)
    w = make_weight_t(c_in, *k, c_out, groups, dtype, rng, signs)
    b = make_bias(c_out, dtype, rng, signs)
    return x, w, b


# ---------------------------------------------------------------------------------------------
# Inputs are never modified
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contig", "sliced", "transposed"])
@pytest.mark.parametrize("op", ["t", "c"])
def test_inputs_not_modified(op, layout, dtype, backend):
    case = Case(op=op, n=2, hw=(5, 6), c_in=4, c_out=6, groups=2, kernel=(3, 2), stride=2, padding=1,
                dtype=np.dtype(dtype).name, x_layout=layout, w_layout=layout, seed=3)
    x, w, b = case.arrays()
    owners = [a if a.base is None else a.base for a in (x, w, b)]
    before = [o.tobytes() for o in owners]
    before_views = [a.copy() for a in (x, w, b)]
    y = case.call(x, w, b, backend=backend)
    case.call(x, w, b, backend=backend, out=np.zeros_like(y))
    for name, o, bytes_before, a, view_before in zip(("x", "weight", "bias"), owners, before, (x, w, b),
                                                    before_views):
        assert o.tobytes() == bytes_before, f"{name}'s buffer was modified"
        assert np.array_equal(a, view_before, equal_nan=True), f"{name} was modified"


# ---------------------------------------------------------------------------------------------
# out=
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unbatched", [False, True])
def test_out_is_filled_and_returned(dtype, unbatched, backend):
    x, w, b = _t_args(dtype)
    if unbatched:
        x = x[0]
    expected = fastdeconv.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2,
                                           backend=backend)
    out = np.full(expected.shape, np.nan, dtype=dtype)
    got = fastdeconv.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2, out=out,
                                      backend=backend)
    assert got is out
    assert got.dtype == dtype
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unbatched", [False, True])
def test_conv2d_out_is_filled_and_returned(dtype, unbatched, backend):
    rng = np.random.default_rng(1)
    x = make_x((3, 6, 5, 4) if not unbatched else (6, 5, 4), dtype, rng)
    w = rng.uniform(0.5, 1.5, (6, 3, 2, 2)).astype(dtype)
    expected = fastdeconv.conv2d(x, w, stride=(2, 1), padding="same", groups=2, backend=backend)
    out = np.full(expected.shape, np.nan, dtype=dtype)
    got = fastdeconv.conv2d(x, w, stride=(2, 1), padding="same", groups=2, out=out, backend=backend)
    assert got is out
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("call", ["function", "plan", "conv2d", "conv2d_plan"])
@pytest.mark.parametrize("shape", [(1, 3, 5, 2), (2, 64, 64, 16)], ids=["small", "large"])
def test_results_start_on_a_cache_line(shape, call, dtype):
    """The CPU backend allocates its float32/float64 results 64-byte aligned (numpy's large arrays start
    16 bytes past a line), as a C-contiguous, writeable array that owns nothing else; the values are
    the reference's. out= arrays are the caller's and are used as given."""
    rng = np.random.default_rng(2)
    x = make_x(shape, dtype, rng)
    c = shape[-1]
    if call in ("function", "plan"):
        w = make_weight_t(c, 4, 4, 3, 1, dtype, rng)
        kwargs = dict(stride=2, padding=1)
        expected = fastdeconv.reference.conv_transpose2d(x, w, None, **kwargs)
        layer = fastdeconv.ConvTranspose2d(w, None, backend="cpu", **kwargs)
        y = fastdeconv.conv_transpose2d(x, w, None, backend="cpu", **kwargs) if call == "function" else layer(x)
    else:
        w = rng.uniform(-1, 1, (3, 3, 3, c)).astype(dtype)
        expected = fastdeconv.reference.conv2d(x, w, None, padding=1)
        layer = fastdeconv.Conv2d(w, None, padding=1, backend="cpu")
        y = fastdeconv.conv2d(x, w, None, padding=1, backend="cpu") if call == "conv2d" else layer(x)
    again = layer(x)   # a plan's second call of a shape takes its fast path, which allocates on its own
    assert y.ctypes.data % 64 == 0 and again.ctypes.data % 64 == 0
    np.testing.assert_array_equal(again, y)
    assert y.flags.c_contiguous and y.flags.writeable and y.dtype == dtype and y.shape == expected.shape
    assert y.base is None or y.base.size <= y.size + 64 // y.itemsize
    assert_close(y, expected, dtype, 16 * c)
    misaligned = array_at(y.shape, dtype, y.itemsize)
    assert misaligned.ctypes.data % 64 != 0
    assert layer(x, out=misaligned) is misaligned
    np.testing.assert_array_equal(misaligned, y)


GARBAGE_CASES = {
    # geometries where some output pixels get no tap (stride > dilated kernel) or only bias
    "stride_gt_kernel": dict(hw=(3, 4), kernel=(1, 2), stride=(3, 4), c_in=4, c_out=8, groups=4),
    "stride_gt_kernel_dense": dict(hw=(3, 4), kernel=(2, 1), stride=(3, 2), c_in=3, c_out=5),
    "same_bias_only_rows": dict(hw=(3, 3), kernel=(1, 1), stride=3, padding="same", c_in=3, c_out=3, groups=3),
    "dilated_gaps": dict(hw=(3, 3), kernel=(2, 2), dilation=3, output_padding=2, c_in=2, c_out=4, groups=2),
    "plain": dict(hw=(4, 5), kernel=(3, 3), stride=2, padding=1, output_padding=1, c_in=3, c_out=5),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", list(GARBAGE_CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_out_garbage_is_overwritten(deconv_path, name, dtype, bias):
    """out= may hold anything (NaN, huge values): every element is overwritten, also the ones no tap reaches."""
    case = Case(dtype=dtype, bias=bias, n=2, seed=7, **GARBAGE_CASES[name])
    x, w, b = case.arrays()
    if not deconv_supported(deconv_path[0], x.shape, w.shape, **case.kwargs()):
        pytest.skip(f"{deconv_path[0]} declares this geometry unsupported")
    ref = case.reference(x, w, b)
    for garbage in (np.nan, 1e30):
        out = np.full(ref.shape, garbage, dtype=dtype)
        got = case.call(x, w, b, backend="cpu", algorithm=deconv_path[0], out=out)
        assert got is out
        assert_close(out, ref, dtype, case.k, garbage=garbage, **case.describe(deconv_path[0]))


@pytest.mark.parametrize("garbage", [np.nan, 1e30])
def test_conv2d_out_garbage_is_overwritten(isa_path, garbage):
    case = Case(op="c", n=2, hw=(7, 6), c_in=4, c_out=6, groups=2, kernel=(2, 3), stride=(3, 2), padding=1,
                seed=8)
    x, w, b = case.arrays()
    ref = case.reference(x, w, b)
    out = np.full(ref.shape, garbage)
    assert case.call(x, w, b, backend="cpu", out=out) is out
    assert_close(out, ref, np.float64, case.k, isa=isa_path, garbage=garbage)


# ---------------------------------------------------------------------------------------------
# Threads
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("inner_threads", [None, 2])
@pytest.mark.parametrize("op", ["t", "c"])
def test_concurrent_calls_are_identical_to_serial(deconv_path, op, inner_threads):
    """8 Python threads calling at once (each with its own input) get exactly the serial results."""
    algorithm = deconv_path[0]
    rng = np.random.default_rng(11)
    if op == "t":
        w = make_weight_t(8, 3, 3, 8, 8 if algorithm == "depthwise" else 2, np.float32, rng)
        groups = 8 if algorithm == "depthwise" else 2
        if not deconv_supported(algorithm, (2, 9, 11, 8), w.shape, 2, 1, 1, 1, groups):
            pytest.skip(f"{algorithm} declares this geometry unsupported")

        def run(x):
            return fastdeconv.conv_transpose2d(x, w, None, stride=2, padding=1, output_padding=1, groups=groups,
                                               backend="cpu", algorithm=algorithm)
    else:
        w = rng.uniform(-1, 1, (8, 3, 3, 4)).astype(np.float32)

        def run(x):
            return fastdeconv.conv2d(x, w, None, stride=1, padding=1, groups=2, backend="cpu")

    xs = [make_x((2, 9, 11, 8), np.float32, np.random.default_rng(100 + i)) for i in range(16)]
    serial = [run(x) for x in xs]
    with threaded(inner_threads) if inner_threads else contextlib.nullcontext():
        with ThreadPoolExecutor(max_workers=8) as pool:
            for _ in range(3):
                results = list(pool.map(run, xs))
                for got, want in zip(results, serial):
                    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["t", "c"])
def test_thread_count_does_not_change_results(deconv_path, op):
    algorithm = deconv_path[0] if op == "t" else None
    case = Case(op=op, n=1, hw=(17, 9), c_in=6, c_out=6, groups=6 if deconv_path[0] == "depthwise" else 2,
                kernel=(3, 3), stride=2 if op == "t" else 1, padding=1, dtype="float32", seed=4)
    x, w, b = case.arrays()
    if op == "t" and not deconv_supported(deconv_path[0], x.shape, w.shape, **case.kwargs()):
        pytest.skip(f"{deconv_path[0]} declares this geometry unsupported")
    results = []
    for n in (1, 2, 3):
        with threaded(n):
            assert fastdeconv.get_num_threads() in (n, 1)   # 1: serial build
            results.append(case.call(x, w, b, algorithm=algorithm))
    for n in (1, 2):                                        # the public API alone, default serial threshold
        fastdeconv.set_num_threads(n)
        results.append(case.call(x, w, b, algorithm=algorithm))
    for r in results[1:]:
        np.testing.assert_array_equal(results[0], r)
    assert_close(results[0], case.reference(x, w, b), np.float32, case.k)


def test_show_config_prints_thread_pool_and_simd(capsys):
    fastdeconv.show_config()
    text = capsys.readouterr().out
    assert "thread_pool" in text
    assert "threads" in text
    for isa, ok in fastdeconv._cpu.build_info()["gemm_isa_supported"].items():
        assert isa in text


# The SIMD paths each machine type must have compiled in (whatever this CPU supports), and the kernel
# families each must cover: a wheel (.ci/run tests the installed wheel) can never silently ship the
# portable code only. x86-64: AVX2 and AVX-512 for every family, on every compiler (MSVC included: each
# family's per-ISA files are compiled with /arch:, src/kernels/gemm_internal.h); arm64: the NEON GEMM and
# depthwise kernels (the Winograd transforms' portable clone is their NEON code there: no clone of its own).
_X86_FAMILIES = ("gemm", "winograd", "depthwise")
_EXPECTED_SIMD_PATHS = {
    **dict.fromkeys(("x86_64", "amd64"), {"avx2": _X86_FAMILIES, "avx512": _X86_FAMILIES}),
    **dict.fromkeys(("aarch64", "arm64"), {"neon": ("gemm", "depthwise")}),
}


def test_show_config_has_the_simd_paths_of_this_platform():
    machine = platform.machine().lower()
    if machine not in _EXPECTED_SIMD_PATHS:
        pytest.skip(f"no SIMD paths expected on {machine}")
    paths = fastdeconv._config.config()["simd_paths"]
    for isa, families in _EXPECTED_SIMD_PATHS[machine].items():
        assert isa in paths, f"no {isa} path in this build: {paths}"
        missing = [family for family in families if family not in paths[isa]["compiled"]]
        assert not missing, f"the {isa} path has no {missing} kernels compiled in: {paths}"
    assert paths["portable"] == {"compiled": ["gemm", "winograd", "depthwise", "planar"], "supported": True}
    for path in paths.values():   # a supported path is a compiled one
        assert path["compiled"] or not path["supported"]


# ---------------------------------------------------------------------------------------------
# NaN, N = 0, dtypes, array-likes, backends
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["x", "weight", "bias", "x_inf"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_propagates(deconv_path, where, dtype):
    algorithm = deconv_path[0]
    groups = 4 if algorithm == "depthwise" else 2
    x, w, b = _t_args(dtype, n=2, hw=(4, 5), c_in=4, c_out=8, groups=groups, k=(3, 3))
    x, w, b = x.copy(), w.copy(), b.copy()
    if where == "x":
        x[1, 2, 3, 1] = np.nan
    elif where == "x_inf":
        x[0, 0, 4, 2] = np.inf
    elif where == "weight":
        w[3, 1, 2, 0] = np.nan
    else:
        b[5] = np.nan
    kw = dict(stride=2, padding=1, output_padding=1, groups=groups)
    if not deconv_supported(algorithm, x.shape, w.shape, **kw):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    ref = fastdeconv.reference.conv_transpose2d(x, w, b, **kw)
    got = fastdeconv.conv_transpose2d(x, w, b, backend="cpu", algorithm=algorithm, **kw)
    assert np.isnan(ref).any() or np.isinf(ref).any()
    assert_close(got, ref, dtype, 9 * 2, where=where, path=deconv_path)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))


@pytest.mark.parametrize("where", ["x", "weight"])
def test_nan_propagates_conv2d(isa_path, where):
    rng = np.random.default_rng(2)
    x = make_x((2, 5, 6, 4), np.float32, rng)
    w = rng.uniform(0.5, 1.5, (6, 3, 3, 2)).astype(np.float32)
    if where == "x":
        x[1, 2, 2, 3] = np.nan
    else:
        w[4, 0, 0, 1] = np.nan
    ref = fastdeconv.reference.conv2d(x, w, stride=2, padding=1, groups=2)
    got = fastdeconv.conv2d(x, w, stride=2, padding=1, groups=2, backend="cpu")
    assert np.isnan(ref).any()
    assert_close(got, ref, np.float32, 18, where=where, isa=isa_path)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_batch(backend, dtype):
    x = np.ones((0, 4, 5, 6), dtype)
    w = np.ones((6, 3, 2, 2), dtype)
    kw = dict(stride=2, padding=1, output_padding=1, groups=3)
    shape = (0, *fastdeconv.conv_transpose2d_output_shape((4, 5), (3, 2), 2, 1, 1), 6)
    y = fastdeconv.conv_transpose2d(x, w, np.ones(6, dtype), backend=backend, **kw)
    assert y.shape == shape and y.dtype == dtype
    out = np.empty(shape, dtype)
    assert fastdeconv.conv_transpose2d(x, w, backend=backend, out=out, **kw) is out
    wc = np.ones((6, 3, 2, 2), dtype)
    yc = fastdeconv.conv2d(x, wc, backend=backend, stride=2, padding=1, groups=3)
    assert yc.shape == (0, *fastdeconv.conv2d_output_shape((4, 5), (3, 2), 2, 1), 6) and yc.dtype == dtype


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("xd,wd,bd,expect", [
    (np.float16, np.float16, None, np.float16),
    (np.float16, np.float16, np.float64, np.float16),
    (np.float16, np.float32, None, np.float32),
    (np.float32, np.float16, np.float16, np.float32),
    (np.float32, np.float32, np.float64, np.float32),
    (np.float32, np.float64, None, np.float64),
    (np.float64, np.float32, np.float16, np.float64),
    (np.float16, np.float64, np.float32, np.float64),
])
def test_dtype_promotion(xd, wd, bd, expect, backend):
    rng = np.random.default_rng(0)
    x = make_x((1, 3, 4, 2), xd, rng)
    w = rng.uniform(0.5, 1.5, (2, 2, 3, 3)).astype(wd)
    b = None if bd is None else np.ones(3, bd)
    assert np.result_type(xd, wd) == expect
    y = fastdeconv.conv_transpose2d(x, w, b, stride=2, backend=backend)
    assert y.dtype == expect
    ref = fastdeconv.reference.conv_transpose2d(x.astype(np.float64), w.astype(np.float64),
                                                None if b is None else b.astype(expect), stride=2)
    assert_close(y, ref.astype(expect), expect, 4 * 6, xd=xd, wd=wd, bd=bd)
    wc = rng.uniform(0.5, 1.5, (3, 2, 2, 2)).astype(wd)
    assert fastdeconv.conv2d(x, wc, b, backend=backend).dtype == expect


def test_float16_accumulates_in_float32():
    """A float16 sum that would lose precision if accumulated in float16 (2048 + 1 + 1 + ...)."""
    x = np.ones((1, 1, 1, 64), np.float16)
    w = np.ones((64, 1, 1, 1), np.float16)
    w[0] = 2048
    y = fastdeconv.conv_transpose2d(x, w)
    assert y.dtype == np.float16
    assert float(y[0, 0, 0, 0]) == 2048 + 64   # 2111 rounds to 2112 in float16; float16 accumulation gives 2048
    assert float(fastdeconv.conv2d(x, w.reshape(1, 1, 1, 64))[0, 0, 0, 0]) == 2048 + 64


@pytest.mark.parametrize("backend", BACKENDS)
def test_array_likes_accepted(backend):
    x = [[[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]]               # (1, 2, 2, 2)
    w = [[[[1.0]], ], [[[2.0]], ]]                                              # (2, 1, 1, 1)
    y = fastdeconv.conv_transpose2d(x, w, [0.5], backend=backend)
    expect = fastdeconv.reference.conv_transpose2d(np.array(x), np.array(w), np.array([0.5]))
    assert isinstance(y, np.ndarray) and y.dtype == np.float64 and y.shape == (1, 2, 2, 1)
    np.testing.assert_allclose(y, expect, rtol=1e-15)
    np.testing.assert_allclose(y[0, :, :, 0], np.array(x)[0, :, :, 0] + 2 * np.array(x)[0, :, :, 1] + 0.5)
    yc = fastdeconv.conv2d(x, [[[[1.0, 2.0]]]], (1.0,), backend=backend)       # tuple bias
    np.testing.assert_allclose(yc[0, :, :, 0], np.array(x)[0, :, :, 0] + 2 * np.array(x)[0, :, :, 1] + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unbatched_gives_unbatched(backend):
    x, w, b = _t_args(np.float32)
    y = fastdeconv.conv_transpose2d(x[1], w, b, stride=2, groups=2, backend=backend)
    yb = fastdeconv.conv_transpose2d(x[1:2], w, b, stride=2, groups=2, backend=backend)
    assert y.shape == yb.shape[1:]
    np.testing.assert_array_equal(y, yb[0])
    wc = np.ones((4, 2, 2, 2), np.float32)
    assert fastdeconv.conv2d(x[0], wc, groups=2, backend=backend).shape == (4, 3, 4)


def test_integer_bias_is_cast():
    x, w, _ = _t_args(np.float32)
    y = fastdeconv.conv_transpose2d(x, w, np.arange(6), groups=2)
    y2 = fastdeconv.conv_transpose2d(x, w, np.arange(6, dtype=np.float32), groups=2)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, y2)


def test_mps_backend_raises_runtime_error_mentioning_mps():
    x, w, b = _t_args()
    with pytest.raises(RuntimeError, match="mps"):
        fastdeconv.conv_transpose2d(x, w, b, groups=2, backend="mps")
    with pytest.raises(RuntimeError, match="mps"):
        fastdeconv.conv2d(x, np.ones((2, 3, 3, 2)), groups=2, backend="mps")


def test_reference_module_is_public():
    assert callable(fastdeconv.reference.conv_transpose2d)
    assert callable(fastdeconv.reference.conv2d)


def _torch_formula(h, k, s, p, op, d):
    return (h - 1) * s - 2 * p + d * (k - 1) + op + 1


def test_conv_transpose2d_output_shape_matches_torch_formula():
    torch = None
    try:
        import torch
    except ImportError:
        pass
    for h in (1, 2, 5):
        for k in (1, 2, 3):
            for s in (1, 2, 3):
                for d in (1, 2):
                    for p in (0, 1, 2):
                        for op in range(max(s, d)):
                            expect = _torch_formula(h, k, s, p, op, d)
                            if expect < 1:
                                continue
                            got = fastdeconv.conv_transpose2d_output_shape((h, h + 1), (k, k), s, p, op, d)
                            assert got == (expect, _torch_formula(h + 1, k, s, p, op, d))
                            if torch is not None and k == 3 and h == 2:
                                t = torch.nn.functional.conv_transpose2d(
                                    torch.zeros(1, 1, h, h + 1), torch.zeros(1, 1, k, k), stride=s, padding=p,
                                    output_padding=op, dilation=d)
                                assert tuple(t.shape[2:]) == got


@pytest.mark.parametrize("op", ["t", "c"])
def test_gil_is_released_during_the_kernel(op):
    """While one thread runs a long convolution, another Python thread keeps running.

    One call of at least 0.6 s (a batch sized from a first, timed call) runs on a worker thread while this
    thread ticks every millisecond. Had the kernel held the GIL, the ticks would stop for the whole call
    (the kernel's part of it); the test asks only that no pause among the ticks within the call span half
    of it, so that a busy machine's scheduling gaps (tens of ms) do not decide it.
    """
    import threading
    import time

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 48, 48, 64)).astype(np.float32)
    w = rng.standard_normal((64, 3, 3, 64)).astype(np.float32)
    fn = fastdeconv.conv_transpose2d if op == "t" else fastdeconv.conv2d
    fastdeconv.set_num_threads(1)
    start = time.perf_counter()
    fn(x, w, padding=1)
    single = time.perf_counter() - start
    x = np.repeat(x, min(64, max(1, int(np.ceil(0.6 / max(single, 1e-4))))), axis=0)
    span = []

    def work():
        span.append(time.perf_counter())
        fn(x, w, padding=1)
        span.append(time.perf_counter())

    ticks = []
    worker = threading.Thread(target=work)
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    t0, t1 = span
    inside = np.array([t0, *(t for t in ticks if t0 < t < t1), t1])
    assert np.diff(inside).max() < 0.5 * (t1 - t0), (
        f"the ticking thread stalled for {np.diff(inside).max():.3f}s of a {t1 - t0:.3f}s call "
        f"({len(inside) - 2} ticks during it)")


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_strided_read_only_and_strided_bias(backend):
    """Broadcast (zero-stride, read-only) x and weight, a strided bias: accepted and computed like copies."""
    rng = np.random.default_rng(9)
    row = make_x((1, 1, 7, 4), np.float64, rng)
    x = np.broadcast_to(row, (2, 5, 7, 4))
    assert x.strides[0] == 0 and not x.flags.writeable
    w = np.broadcast_to(rng.uniform(0.5, 1.5, (1, 3, 2, 3)), (4, 3, 2, 3))
    b = np.arange(12.0)[::4]
    got = fastdeconv.conv_transpose2d(x, w, b, stride=2, padding=1, backend=backend)
    ref = fastdeconv.reference.conv_transpose2d(np.array(x), np.array(w), np.array(b), stride=2, padding=1)
    assert_close(got, ref, np.float64, 4 * 6)
    wc = np.broadcast_to(rng.uniform(0.5, 1.5, (1, 3, 3, 4)), (3, 3, 3, 4))
    got = fastdeconv.conv2d(x, wc, b, padding=1, backend=backend)
    assert_close(got, fastdeconv.reference.conv2d(np.array(x), np.array(wc), np.array(b), padding=1), np.float64, 36)


# ---------------------------------------------------------------------------------------------
# Degenerate channel counts: must never crash the interpreter (run in a subprocess)
# ---------------------------------------------------------------------------------------------

_ZERO_CHANNEL_SCRIPT = """
import numpy as np, fastdeconv
x, w = np.ones({x}), np.ones({w})
want = fastdeconv.reference.conv_transpose2d(x, w, groups={g}, stride=2)
try:
    got = fastdeconv.conv_transpose2d(x, w, groups={g}, stride=2, backend="cpu", algorithm={algorithm!r})
except ValueError as e:
    print("ValueError", e)
else:
    assert got.shape == want.shape and np.array_equal(got, want), (got.shape, want.shape)
    print("ok", got.shape)
"""


def _zero_channel_params():
    params = []
    for algorithm in [None, *sorted(fastdeconv._backends.cpu.DECONV_ALGORITHMS)]:
        for x, w, g in [((1, 3, 3, 2), (2, 2, 2, 0), 2), ((1, 3, 3, 1), (1, 2, 2, 0), 1),
                        ((1, 3, 3, 2), (2, 2, 2, 0), 1), ((1, 3, 3, 0), (0, 2, 2, 3), 1)]:
            params.append(pytest.param(algorithm, x, w, g, id=f"{algorithm or 'auto'}-x{x}-w{w}-g{g}"))
    return params


@pytest.mark.parametrize("algorithm,x_shape,w_shape,groups", _zero_channel_params())
def test_zero_channels_do_not_crash(algorithm, x_shape, w_shape, groups):
    """C_out = 0 or C_in = 0: an empty/bias-only result like the reference, or a ValueError -- never a crash."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastdeconv.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _ZERO_CHANNEL_SCRIPT.format(x=x_shape, w=w_shape, g=groups, algorithm=algorithm)],
                          env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit status {proc.returncode} (negative: killed by signal); {proc.stderr[-2000:]}"
