"""The "winograd" algorithm (src/algorithms/deconv_winograd.template.c): its transforms, every shape class it
handles against the reference on every ISA path, its error against the direct sum's, where NaN and Inf
land, and when the automatic choice takes it.

Its results are not the direct sum's bit for bit (the transforms reassociate), so the comparisons are
(a) element-wise within the package's per-dtype tolerance on same-signed data (helpers.Case: nothing
cancels, so a dropped or doubled term shows), and (b) on signed data, the error against the float64
reference within 4x the "phase" algorithm's (the direct sum over the same phases).
"""

from __future__ import annotations

import importlib.util
import io
import platform
import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import fastdeconv
from fastdeconv import _cpu
from fastdeconv._backends import cpu as _cpu_backend
from fastdeconv._params import resolve_conv2d, resolve_conv_transpose2d
from helpers import (GEMM_ISAS, Case, array_at, assert_close, channel_signs, check_case, examples, gemm_isa, make_bias,
                     make_weight_c, make_weight_t, make_x, threaded)

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "scripts" / "winograd_transforms.py"
HEADER = ROOT / "src" / "kernels" / "winograd_transforms.h"
needs_source = pytest.mark.skipif(not (ROOT / "src").is_dir(), reason="needs the source tree")


def _generator():
    spec = importlib.util.spec_from_file_location("winograd_transforms", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------------------------
# 1. The transforms
# ----------------------------------------------------------------------------------------------


@needs_source
def test_header_is_what_the_generator_prints():
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _generator().main()
    assert HEADER.read_text() == printed.getvalue(), "regenerate: python scripts/winograd_transforms.py > " \
                                                     "src/kernels/winograd_transforms.h"


@needs_source
@pytest.mark.parametrize("m,r", [(1, 2), (2, 2), (3, 2), (1, 3), (2, 3), (3, 1)])
def test_transform_computes_the_correlation_exactly(m, r):
    """In exact rationals, AT[(G g) * (BT d)] is the correlation for random integer d and g."""
    gen = _generator()
    AT, G, BT = gen.transforms(m, r)
    rng = np.random.default_rng(m * 10 + r)
    for _ in range(5):
        d = [gen.Fraction(int(v)) for v in rng.integers(-9, 10, m + r - 1)]
        g = [gen.Fraction(int(v)) for v in rng.integers(-9, 10, r)]
        gg = [sum(G[j][k] * g[k] for k in range(r)) for j in range(m + r - 1)]
        bd = [sum(BT[j][l] * d[l] for l in range(m + r - 1)) for j in range(m + r - 1)]
        y = [sum(AT[i][j] * gg[j] * bd[j] for j in range(m + r - 1)) for i in range(m)]
        assert y == [sum(d[i + u] * g[u] for u in range(r)) for i in range(m)]


@needs_source
@pytest.mark.parametrize("r,full", [(2, 3), (3, 2)])
def test_smaller_tiles_read_their_points_from_the_packed_tile(r, full):
    """The kernel packs G g for the largest tile only: a shorter last tile's point j is the packed
    tile's point j (its last point, infinity, the packed tile's last) - their G rows must be equal."""
    gen = _generator()
    _, G_full, _ = gen.transforms(full, r)
    for m in range(1, full):
        _, G, _ = gen.transforms(m, r)
        n = m + r - 1
        for j in range(n):
            assert G[j] == G_full[j if j < n - 1 else full + r - 2], (m, r, j)


# ----------------------------------------------------------------------------------------------
# 2. Every shape class against the reference, on every ISA path
# ----------------------------------------------------------------------------------------------

# (name, Case): phase extents J (outputs per phase along an axis) are chosen so that F(3, 2) has no
# shorter last tile, one of 1 and one of 2 outputs, and so that axes under 12 outputs take F(2, 2).
NAMED = [
    ("k4s2p1", Case(hw=(6, 6), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=1)),
    ("k4s2p0", Case(hw=(5, 5), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=0)),
    ("k4s2_output_padding", Case(hw=(5, 7), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=1,
                                 output_padding=1)),
    ("k4s2_groups", Case(n=2, hw=(7, 5), c_in=8, c_out=12, groups=2, kernel=(4, 4), stride=2, padding=1)),
    ("k4s2_depth_groups", Case(hw=(6, 6), c_in=12, c_out=24, groups=4, kernel=(4, 4), stride=2, padding=1)),
    ("k3s1p1", Case(hw=(7, 6), c_in=8, c_out=16, kernel=(3, 3), stride=1, padding=1)),
    ("k3s1p0", Case(hw=(5, 8), c_in=8, c_out=16, kernel=(3, 3), stride=1, padding=0)),
    ("k3s2_output_padding", Case(hw=(7, 5), c_in=8, c_out=16, kernel=(3, 3), stride=2, padding=1,
                                 output_padding=1)),
    ("k3s2p0", Case(hw=(6, 7), c_in=8, c_out=16, kernel=(3, 3), stride=2)),
    ("k2s1", Case(hw=(6, 5), c_in=8, c_out=16, kernel=(2, 2), stride=1)),
    ("k5s2", Case(hw=(6, 5), c_in=8, c_out=16, kernel=(5, 5), stride=2, padding=2, output_padding=1)),
    ("k6s2", Case(hw=(5, 6), c_in=8, c_out=16, kernel=(6, 6), stride=2, padding=2)),
    ("k4x3_s2x1", Case(hw=(7, 6), c_in=8, c_out=16, kernel=(4, 3), stride=(2, 1), padding=(1, 1))),
    ("odd_sizes_N3", Case(n=3, hw=(9, 11), c_in=7, c_out=5, kernel=(4, 4), stride=2, padding=1)),
    ("tile_edges_J13_J14", Case(hw=(13, 14), c_in=16, c_out=16, kernel=(4, 4), stride=2, padding=1)),
    ("tile_edges_J12_J16", Case(hw=(12, 16), c_in=16, c_out=16, kernel=(4, 4), stride=2, padding=1)),
    ("tiny_image", Case(hw=(1, 2), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=1)),
    ("channel_tails", Case(hw=(13, 5), c_in=33, c_out=17, kernel=(4, 4), stride=2, padding=1)),
    ("wide_F22_packed", Case(hw=(13, 6), c_in=80, c_out=40, kernel=(4, 4), stride=2, padding=1)),
    ("many_outputs", Case(n=2, hw=(3, 3), c_in=16, c_out=96, kernel=(4, 4), stride=2, padding=1)),
    ("no_bias", Case(hw=(6, 6), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=1, bias=False)),
    # shared tiles (every phase >= 24 outputs per axis): one input transform for all phases, a tile at
    # each edge partly outside some phase (origins differ by one row or column)
    ("shared_k4s2p1", Case(hw=(24, 25), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=1)),
    ("shared_k4s2p2_N2", Case(n=2, hw=(26, 27), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=2)),
    ("shared_k4s2p0_output_padding", Case(hw=(25, 24), c_in=8, c_out=16, kernel=(4, 4), stride=2, padding=0,
                                          output_padding=1)),
    ("shared_k6s3", Case(hw=(25, 26), c_in=8, c_out=16, kernel=(6, 6), stride=3, padding=1, output_padding=2)),
    ("shared_k4x6_s2x3", Case(hw=(25, 25), c_in=8, c_out=16, kernel=(4, 6), stride=(2, 3), padding=(1, 2))),
    ("shared_groups_channel_tails", Case(hw=(24, 26), c_in=66, c_out=34, groups=2, kernel=(4, 4), stride=2,
                                         padding=1)),
    ("shared_F22_packed", Case(hw=(24, 24), c_in=80, c_out=40, kernel=(4, 4), stride=2, padding=1)),
    # groups whose output slices are whole cache lines (16 channels): on several threads, one group per task
    ("shared_groups_per_task", Case(n=2, hw=(24, 25), c_in=16, c_out=32, groups=2, kernel=(4, 4), stride=2,
                                    padding=1)),
]
SHARED = [name for name, _ in NAMED if name.startswith("shared_")]
DTYPES = ["float32", "float64", "float16"]


@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,case", NAMED, ids=[name for name, _ in NAMED])
def test_named_cases_match_the_reference(name, case, dtype, isa):
    case = Case(**{**case.__dict__, "dtype": dtype, "seed": hash(name) % 1000})
    with gemm_isa(isa):
        assert check_case(case, "winograd"), f"winograd declared {name} unsupported"


def _runner_tasks(x, w, b, kwargs, threads):
    """The winograd runner's tasks (part, row_begin, row_end, col_begin, col_end) on `threads` threads."""
    geometry = resolve_conv_transpose2d(x.shape, w.shape, **kwargs)
    layer = _cpu_backend.PackedLayer(w, b, x.dtype, geometry, "winograd")
    with threaded(threads):
        return layer.runner(geometry).tasks


def _tasks(case, threads):
    return _runner_tasks(*case.arrays(), case.kwargs(), threads)


@pytest.mark.parametrize("threads", [2, 3, 4, 7, 16])
@pytest.mark.parametrize("name", ["dcgan2", "dcgan3", "stride1", "grouped", "big"])
def test_tasks_cut_rows_evenly_and_cover_each_output_once(name, threads):
    """Per part (a row phase; -1: shared tiles of every group; -2 - g: shared tiles of group g), the
    tasks' row ranges tile [0, rows) in order, none empty, their lengths within one row of each other (an
    even cut: 44 rows in 40 ranges are 1-2 rows each, not 22 ranges of 2), and every row range has the
    same column blocks, which tile the output channels of a group. Shared tiles come either as one
    part -1 or as one part per group (grouped: 4 groups of 32 channels, on several threads)."""
    from fastdeconv.bench import CASES

    case = CASES[name]
    tasks = _runner_tasks(*case.arrays(), case.kwargs, threads)
    columns = case.out_channels // case.groups
    for part in set(tasks[:, 0]):
        mine = tasks[tasks[:, 0] == part]
        ranges = sorted({(r0, r1) for _, r0, r1, _, _ in mine})
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), ranges
        lengths = [r1 - r0 for r0, r1 in ranges]
        assert min(lengths) >= 1 and max(lengths) - min(lengths) <= 1, (part, lengths)
        for r0, r1 in ranges:
            blocks = sorted((c0, c1) for _, a, z, c0, c1 in mine if (a, z) == (r0, r1))
            assert blocks[0][0] == 0 and blocks[-1][1] == columns, blocks
            assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:])), blocks
    shared = {part for part in set(tasks[:, 0]) if part < 0}
    if shared:
        per_group = case.groups > 1 and columns % 16 == 0
        assert shared == ({-2 - g for g in range(case.groups)} if per_group else {-1}), shared


@pytest.mark.parametrize("name", [name for name, _ in NAMED])
def test_shared_tiles_exactly_where_every_phase_is_large(name):
    """Tasks of shared tiles (part -1, every phase) for the shared_ cases, and per row phase otherwise:
    so the shared_ cases above test that path."""
    parts = set(_tasks(dict(NAMED)[name], 1)[:, 0])
    assert parts == {-1} if name in SHARED else min(parts) >= 0, parts


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("name,case", [n for n in NAMED if n[0] in ("many_outputs", "odd_sizes_N3", "k3s1p1",
                                                                      "tile_edges_J13_J14", "k4s2_groups",
                                                                      "shared_k4s2p2_N2", "shared_k6s3",
                                                                      "shared_groups_per_task")])
def test_threaded_tasks_match_the_reference(name, case, threads):
    """Row ranges of tile rows and output-channel blocks (many_outputs) on several threads."""
    assert check_case(Case(**{**case.__dict__, "dtype": "float32", "threads": threads}), "winograd")


@contextlib.contextmanager
def stream_output(mode):
    """Force the non-temporal output stores on or off for the block, then restore the automatic choice."""
    _cpu.set_winograd_stream_output(mode)
    try:
        yield
    finally:
        _cpu.set_winograd_stream_output(None)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "stored"])
@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["k4s2p1", "k4s2_groups", "k3s1p1", "channel_tails", "many_outputs",
                                  "shared_k4s2p2_N2", "shared_groups_channel_tails"])
def test_results_do_not_depend_on_where_out_starts(name, dtype, threads, isa, stream):
    """With non-temporal stores on, output vectors on a cache line take them (AVX-512), the others
    normal stores (winograd_tiles.template.c, wv_stream): out= arrays at every offset from a line get
    the same bits, every element written, whichever store each vector took, with the stores on or off."""
    case = Case(**{**dict(NAMED)[name].__dict__, "dtype": dtype, "seed": 5})
    x, w, b = case.arrays()
    layer = fastdeconv.ConvTranspose2d(w, b, **case.kwargs(), algorithm="winograd")
    with gemm_isa(isa), threaded(threads), stream_output(stream):
        want = layer(x)
        assert_close(want, case.reference(x, w, b), case.result_dtype, case.k, **case.describe("winograd"))
        for offset in (0, np.dtype(dtype).itemsize, 32):
            out = array_at(want.shape, dtype, offset)
            out[...] = np.nan
            assert layer(x, out=out) is out
            np.testing.assert_array_equal(out, want, err_msg=f"out= {offset} bytes past a cache line")


def _cpu_vendor():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":")[1].strip() for line in f if line.startswith("vendor_id")), None)
    except OSError:
        return None


def _last_level_cache_bytes():
    """The level-3 cache's size as Linux reports it (sysfs), or None."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
    except OSError:
        return None
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units and text[:-1].isdigit() else None


def test_non_temporal_stores_are_chosen_by_cpu_and_output_size():
    """The automatic choice (src/kernels/winograd_tiles.h): every output on Intel CPUs with AVX-512 (measured
    faster on a Sapphire Rapids Xeon); on other CPUs with AVX-512 the outputs of at least a third of the
    last-level cache (CPUID's size, checked here against Linux's sysfs; on an AMD Zen 4 an 8 MiB output
    was slower streamed and a 16 MiB one faster); none without AVX-512. Forcing either way and back
    works, anything but a bool or None is refused."""
    vendor = _cpu_vendor()
    if vendor is None:
        pytest.skip("no /proc/cpuinfo vendor_id here")
    automatic = _cpu.get_winograd_stream_min_bytes()
    if not _cpu.build_info()["gemm_isa_supported"]["avx512"]:
        assert automatic is None
    elif vendor == "GenuineIntel":
        assert automatic == 0
    else:
        cache = _last_level_cache_bytes()
        if cache is None:
            pytest.skip("no level-3 cache size in sysfs to compare with")
        assert automatic == cache // 1024 // 3 * 1024
    with stream_output(True):
        assert _cpu.get_winograd_stream_min_bytes() == 0
    with stream_output(False):
        assert _cpu.get_winograd_stream_min_bytes() is None
    assert _cpu.get_winograd_stream_min_bytes() == automatic
    with pytest.raises(TypeError, match="mode must be True, False or None, got 1"):
        _cpu.set_winograd_stream_output(1)


@pytest.mark.parametrize("kwargs,why", [
    (dict(kernel=(4, 4), stride=2, dilation=2), "dilation 1"),
    (dict(kernel=(7, 7), stride=2), "3 taps"),
    (dict(kernel=(4, 4), stride=1), "3 taps"),
])
def test_unsupported_layers_say_why(kwargs, why):
    w = np.ones((4, *kwargs["kernel"], 4), np.float32)
    with pytest.raises(ValueError, match=why):
        fastdeconv.ConvTranspose2d(w, stride=kwargs["stride"], dilation=kwargs.get("dilation", 1), algorithm="winograd")


# ----------------------------------------------------------------------------------------------
# 3. Error against the float64 reference, within 4x the direct sum's ("phase")
# ----------------------------------------------------------------------------------------------

ERROR_SHAPES = [  # (N, H, W, C_in, C_out, kernel, stride, padding, groups)
    (2, 9, 7, 32, 32, 4, 2, 1, 1),
    (1, 20, 20, 64, 32, 4, 2, 1, 1),     # F(3, 2) with shorter last tiles
    (4, 4, 4, 256, 64, 4, 2, 1, 1),      # F(2, 2) packed (C_in/groups > 64)
    (1, 14, 14, 64, 64, 3, 1, 1, 1),     # F(2, 3)
    (1, 9, 9, 32, 32, 3, 2, 1, 1),       # the k3 s2 2x2 phase
    (2, 10, 10, 64, 64, 4, 2, 1, 4),
]


def _relative_error(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", ERROR_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_error_within_four_times_the_direct_sums(shape, dtype, isa):
    n, h, w_, cin, cout, k, s, p, groups = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, h, w_, cin))
    w = rng.standard_normal((cin, k, k, cout // groups))
    b = rng.standard_normal(cout)
    kw = dict(stride=s, padding=p, groups=groups, output_padding=1 if (k, s) == (3, 2) else 0)
    ref = fastdeconv.reference.conv_transpose2d(x, w, b, **kw)
    errors = {}
    with gemm_isa(isa):
        for algorithm in ("phase", "winograd"):
            got = fastdeconv.conv_transpose2d(x.astype(dtype), w.astype(dtype), b.astype(dtype), **kw,
                                              algorithm=algorithm)
            errors[algorithm] = _relative_error(got, ref)
    floor = np.finfo(dtype).eps   # below one ulp of the largest output both are exact to rounding
    assert errors["winograd"] <= 4 * max(errors["phase"], floor), errors


# ----------------------------------------------------------------------------------------------
# 4. NaN and Inf land where the formula puts them
# ----------------------------------------------------------------------------------------------

def _poisoned(case: Case, where: str):
    x, w, b = case.arrays()
    x, w = x.copy(), w.copy()
    if where == "x_inf_interior":
        x[0, x.shape[1] // 2, x.shape[2] // 2, 1] = np.inf
    elif where == "x_inf_corner":
        x[-1, -1, -1, 0] = -np.inf
    elif where == "x_nan_edge":
        x[0, 0, x.shape[2] // 2, 2] = np.nan
    elif where == "x_inf_minus_inf":   # +Inf and -Inf in one tile: Inf - Inf inside a transform
        x[0, 2, 2, 0], x[0, 2, 3, 0] = np.inf, -np.inf
    elif where == "w_inf":
        w[1, 0, 1, 2] = np.inf
    elif where == "w_nan":
        w[0, -1, -1, 0] = np.nan
    else:
        raise ValueError(where)
    return x, w, b


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "stored"])
@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("where", ["x_inf_interior", "x_inf_corner", "x_nan_edge", "x_inf_minus_inf", "w_inf", "w_nan"])
@pytest.mark.parametrize("name", ["k4s2p1", "k3s1p1", "k3s2_output_padding", "tile_edges_J13_J14", "shared_k4s2p2_N2",
                                  "shared_groups_per_task"])
def test_nonfinite_values_land_where_the_formula_puts_them(name, where, isa, stream):
    """A task whose outputs are not all finite is recomputed by the phase kernel over what the
    Winograd pass wrote (non-temporal stores fenced before it, when on)."""
    case = Case(**{**dict(NAMED)[name].__dict__, "dtype": "float32", "c_in": 8})
    x, w, b = _poisoned(case, where)
    with np.errstate(invalid="ignore"):   # the reference's own Inf - Inf
        ref = case.reference(x, w, b)
    assert not np.isfinite(ref).all()
    with gemm_isa(isa), threaded(3), stream_output(stream):   # several tasks: only the poisoned ones fall back
        got = case.call(x, w, b, algorithm="winograd")
    assert_close(got, ref, np.float32, case.k, case=name, where=where, isa=isa)


@pytest.mark.parametrize("name", ["shared_k4s2p2_N2", "shared_k6s3", "shared_k4s2p0_output_padding",
                                  "shared_groups_per_task"])
def test_a_task_recomputes_exactly_its_own_rows(name):
    """An Inf in each input row in turn, on many small tasks: the task (or tasks) that wrote NaN for it
    recompute their rows by the phase kernel, and those rows meet the untouched tasks' with no row
    left over. With shared tiles a task's rows differ per row phase (by the phase's origin)."""
    case = Case(**{**dict(NAMED)[name].__dict__, "dtype": "float32", "c_in": 8})
    x, w, b = case.arrays()
    previous = _cpu.set_task_flops(2e5)   # tasks of one to three tile rows
    previous_chunks = _cpu.set_task_min_chunks(0)
    try:
        with threaded(2):
            assert len(_tasks(case, 2)) >= 4, _tasks(case, 2)
            for row in range(x.shape[1]):
                poisoned = x.copy()
                poisoned[-1, row, x.shape[2] // 2, 0] = np.inf
                with np.errstate(invalid="ignore"):
                    ref = case.reference(poisoned, w, b)
                got = case.call(poisoned, w, b, algorithm="winograd")
                assert_close(got, ref, np.float32, case.k, case=name, row=row)
    finally:
        _cpu.set_task_flops(previous)
        _cpu.set_task_min_chunks(previous_chunks)


# ----------------------------------------------------------------------------------------------
# 5. The automatic choice
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,w_shape,kw,want", [
    ((8, 8, 8, 256), (256, 4, 4, 128), dict(stride=2, padding=1), "winograd"),   # DCGAN
    ((1, 56, 56, 64), (64, 3, 3, 64), dict(stride=1, padding=1), "winograd"),    # k3 s1
    ((1, 32, 32, 64), (64, 3, 3, 64), dict(stride=2, padding=1, output_padding=1), "winograd"),
    ((4, 32, 32, 128), (128, 4, 4, 32), dict(stride=2, padding=1, groups=4), "winograd"),
    ((1, 256, 256, 32), (32, 4, 4, 16), dict(stride=2, padding=1), "winograd"),  # big
    # 8 outputs: phase GEMMs half a vector
    ((1, 32, 32, 8), (8, 4, 4, 8), dict(stride=2, padding=1), ("col2im", "planar")),
    # unequal phases
    ((1, 64, 64, 128), (128, 3, 3, 16), dict(stride=2, padding=1, output_padding=1), ("phase", "planar")),
    ((1, 64, 64, 16), (16, 3, 3, 16), dict(stride=2, padding=1, output_padding=1), ("phase", "planar")),   # C_in 16
    ((1, 64, 64, 16), (16, 3, 3, 24), dict(stride=2, padding=1, output_padding=1), ("phase", "planar")),
    ((1, 64, 64, 16), (16, 3, 3, 32), dict(stride=2, padding=1, output_padding=1), "phase"),     # 32 outputs
    ((1, 64, 64, 128), (128, 3, 3, 24), dict(stride=2, padding=1, output_padding=1), ("phase", "planar")),
    ((1, 64, 64, 256), (256, 3, 3, 16), dict(stride=2, padding=1, output_padding=1), "phase"),   # 256 inputs
    ((1, 64, 64, 32), (32, 3, 3, 8), dict(stride=1, padding=1), "col2im"),          # ... 32 with stride 1
    ((1, 1, 900, 32), (32, 1, 8, 16), dict(stride=(1, 4), padding=(0, 2)), "phase"),  # ... or 1-D to 16
    ((1, 1, 11000, 48), (48, 1, 8, 8), dict(stride=(1, 4)), ("col2im", "planar")),      # Demucs' last layer
    ((1, 1, 4000, 128), (128, 1, 8, 8), dict(stride=(1, 4), padding=(0, 2)), ("col2im", "planar")),
    ((1, 1, 4000, 64), (64, 1, 8, 1), dict(stride=(1, 4), padding=(0, 2)), ("phase", "planar")),
    ((1, 1, 4000, 128), (128, 1, 8, 2), dict(stride=(1, 4), padding=(0, 2)), "col2im"),  # 128 inputs to 2
    ((1, 32, 32, 32), (32, 4, 4, 24), dict(stride=2, padding=1), "winograd"),       # where winograd pays
    ((1, 64, 64, 16), (16, 3, 3, 12), dict(stride=1, padding=1), ("col2im", "planar")),          # stride 1: 12 outputs
    ((1, 64, 64, 16), (16, 3, 3, 16), dict(stride=1, padding=1), "phase"),                       # ... not 16
    ((1, 1, 900, 16), (16, 1, 3, 16), dict(stride=(1, 2), padding=(0, 1)), ("phase", "planar")),  # 1-D
    ((1, 64, 64, 16), (16, 2, 2, 16), dict(stride=2), "col2im"),                                 # kernel = stride
    ((1, 64, 64, 32), (32, 5, 5, 16), dict(stride=2, padding=2, output_padding=1), ("phase", "planar")),
    ((1, 64, 64, 32), (32, 5, 5, 32), dict(stride=2, padding=2, output_padding=1), "winograd"),  # ... 32 outputs
    ((1, 32, 32, 384), (384, 4, 4, 16), dict(stride=2, padding=1), "winograd"),  # 16 outputs, C_in <= 24·C_out
    ((50, 14, 14, 512), (512, 4, 4, 17), dict(stride=2, padding=1), "col2im"),   # Keypoint R-CNN: C_in > 24·C_out
    ((1, 64, 64, 64), (64, 3, 3, 12), dict(stride=1, padding=1), "col2im"),      # 12 outputs
    ((1, 64, 64, 64), (64, 3, 3, 12), dict(stride=1, padding=2, dilation=2), "phase"),   # ... dilated
    ((1, 64, 64, 64), (64, 2, 2, 32), dict(stride=2), "col2im"),                 # kernel = stride, < 64 outputs
    ((1, 1, 500, 64), (64, 1, 16, 12), dict(stride=(1, 8), padding=(0, 4)), ("col2im", "planar")),   # 1-D, 12
    ((1, 32, 32, 16), (16, 4, 4, 64), dict(stride=2, padding=1), "phase"),
    ((1, 32, 32, 64), (64, 2, 2, 64), dict(stride=2), "phase"),                 # one tap per phase
    ((1, 32, 32, 64), (64, 3, 3, 64), dict(stride=2, dilation=2), "phase"),     # dilated
    ((1, 32, 32, 64), (64, 4, 4, 3), dict(stride=2, padding=1), "col2im"),      # few outputs
    ((1, 100, 100, 32), (32, 2, 2, 3), dict(stride=2), "col2im"),               # a k2 s2 head, 3 outputs
    ((1, 200, 200, 8), (8, 2, 2, 1), dict(stride=2), "planar"),                 # the same, 8 inputs, 1 output
    ((1, 45, 45, 256), (256, 2, 2, 3), dict(stride=2), "col2im"),               # the same with 256 inputs
    ((1, 30, 30, 16), (16, 7, 7, 1), dict(stride=2, padding=3, output_padding=1), "planar"),   # an SR tail
    ((1, 30, 30, 32), (32, 5, 5, 1), dict(stride=2, padding=2, output_padding=1), "col2im"),   # 32 inputs
    ((1, 30, 30, 8), (8, 9, 9, 3), dict(stride=3, padding=3), "planar"),        # 8 inputs, 3 outputs
    ((1, 2, 2, 1024), (1024, 4, 4, 1024), dict(stride=2, padding=1), "phase"),  # 64 MiB of weights
    ((1, 2, 2, 512), (512, 4, 4, 512), dict(stride=2, padding=1), "winograd"),   # 16 MiB (tiny input: below)
    ((4, 4, 4, 512), (512, 4, 4, 256), dict(stride=2, padding=1), "winograd"),
    ((4, 56, 56, 128), (128, 4, 4, 16), dict(stride=2, padding=1, groups=8), "winograd"),   # 8 groups of 16
    ((1, 56, 56, 96), (96, 4, 4, 24), dict(stride=2, padding=1, groups=4), "phase"),       # groups of 24
    # several groups of few channels: "planar", which runs each group as it is (_planar_groups_pay)
    ((1, 56, 56, 32), (32, 4, 4, 8), dict(stride=2, padding=1, groups=4), "planar"),       # 4 groups of 8 -> 8
    ((4, 56, 56, 128), (128, 4, 4, 4), dict(stride=2, padding=1, groups=32), "planar"),    # 32 of 4 -> 4
    ((1, 48, 48, 1024), (1024, 3, 3, 8), dict(stride=2, padding=1, output_padding=1, groups=32), "planar"),
    ((1, 48, 48, 2048), (2048, 3, 3, 8), dict(stride=2, padding=1, output_padding=1, groups=32), "phase"),  # 64 in
    ((1, 32, 32, 64), (64, 3, 3, 16), dict(stride=2, padding=1, output_padding=1, groups=8), ("phase", "planar")),
    ((1, 32, 32, 128), (128, 3, 3, 16), dict(stride=2, padding=1, output_padding=1, groups=16), "phase"),  # 256 out
    ((1, 48, 48, 32), (32, 2, 2, 8), dict(stride=2, groups=4), "phase"),                   # kernel = stride
    ((1, 1, 900, 32), (32, 1, 8, 4), dict(stride=(1, 4), padding=(0, 2), groups=4), "planar"),   # 1-D
    ((1, 64, 64, 128), (128, 3, 3, 128), dict(stride=1, padding=3, dilation=3), "winograd"),   # as a convolution
])
def test_automatic_choice(isa_path, x_shape, w_shape, kw, want):
    """want: the choice, or (with "planar" blocks of 4 outputs, with blocks of 8) where the ISA decides."""
    geometry = resolve_conv_transpose2d(x_shape, w_shape, kw["stride"], kw.get("padding", 0),
                                        kw.get("output_padding", 0), kw.get("dilation", 1), kw.get("groups", 1), None)
    if isinstance(want, tuple):
        want = want[_cpu.planar_block_outputs() == 8]
    assert _cpu_backend.choose_algorithm(geometry) == want


def test_planar_blocks_follow_the_vector_registers(isa_path):
    """8 outputs per block where the planar clone has 32 vector registers (AVX-512; NEON, the portable
    clone on AArch64), 4 with 16 (AVX2; SSE2, the portable clone on x86-64)."""
    compiled = "planar" in _cpu.build_info()["isa_kernels_compiled"].get(isa_path, [])
    blocks = _cpu.planar_block_outputs()
    assert blocks in (4, 8)
    if compiled and isa_path in ("avx2", "avx512"):
        assert blocks == (8 if isa_path == "avx512" else 4)
    if isa_path == "portable":
        assert blocks == (8 if platform.machine().lower() in ("aarch64", "arm64") else 4)


@pytest.mark.parametrize("x_shape,w_shape,stride,want", [
    ((1, 45, 45, 768), (128, 4, 4, 768), 2, "winograd"),    # 64 outputs or more: whatever the inputs
    ((2, 16, 16, 1024), (96, 3, 3, 1024), 1, "winograd"),
    ((1, 64, 64, 512), (64, 4, 4, 512), 2, "winograd"),
    ((1, 48, 48, 768), (48, 3, 3, 768), 1, "im2col"),        # below 64: at most 8 inputs (times sH·sW) per output
    ((1, 48, 48, 384), (48, 3, 3, 384), 1, "winograd"),
    ((1, 96, 96, 768), (32, 4, 4, 768), 2, "im2col"),
    ((1, 128, 128, 384), (16, 3, 3, 384), 1, "im2col"),
    ((1, 64, 64, 2048), (512, 3, 3, 2048), 1, "im2col"),     # 36 MiB of weights
])
def test_automatic_conv_choice(x_shape, w_shape, stride, want):
    """The convolution's "winograd" rule (fastdeconv._backends.cpu._conv_winograd_pays): from 64 outputs
    per group any number of inputs, below that at most 8 inputs per output; never over 16 MiB of weights."""
    geometry = resolve_conv2d(x_shape, w_shape, stride, 1)
    assert _cpu_backend.choose_algorithm(geometry) == want


def test_the_choice_does_not_depend_on_the_input_size():
    """A layer packs once for every input, so its algorithm is chosen from the weights and parameters
    (a layer is built before any input exists): the same for a 1x1 and a 64x64 input."""
    w = np.zeros((256, 4, 4, 128), np.float32)
    layer = fastdeconv.ConvTranspose2d(w, stride=2, padding=1)
    assert layer.algorithm == "winograd"
    for hw in [(1, 1), (64, 64)]:
        geometry = resolve_conv_transpose2d((1, *hw, 256), w.shape, 2, 1, 0, 1, 1, None)
        assert _cpu_backend.choose_algorithm(geometry) == "winograd"


@pytest.mark.parametrize("op,hw,direct", [("deconv", (7, 9), True), ("deconv", (8, 8), False),
                                          ("conv", (7, 9), True), ("conv", (8, 8), False)])
def test_small_inputs_run_the_direct_kernel(op, hw, direct):
    """Below 64 input pixels (a transposed convolution) or output pixels (a convolution), "winograd"
    runs the direct kernel whose packed weights it holds, "phase" or "im2col": bit for bit its result.
    From 64 on, Winograd's tiles (a different rounding)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, *hw, 64)).astype(np.float32)
    if op == "deconv":
        w = rng.standard_normal((64, 3, 3, 32)).astype(np.float32)
        run = lambda algorithm: fastdeconv.conv_transpose2d(x, w, padding=1, algorithm=algorithm)
        got, direct_result = run("winograd"), run("phase")
    else:
        w = rng.standard_normal((32, 3, 3, 64)).astype(np.float32)
        run = lambda algorithm: fastdeconv.conv2d(x, w, padding=1, algorithm=algorithm)
        got, direct_result = run("winograd"), run("im2col")
    assert np.array_equal(got, direct_result) == direct
    np.testing.assert_allclose(got, direct_result, rtol=1e-4, atol=1e-4)


def _lazy_case(op, rng):
    """A winograd layer of 64 -> 32 channels, k3 s1 p1, its direct algorithm, and a forced direct layer."""
    if op == "deconv":
        w = rng.standard_normal((64, 3, 3, 32)).astype(np.float32)
        return fastdeconv.ConvTranspose2d, w, "phase"
    return fastdeconv.Conv2d, rng.standard_normal((32, 3, 3, 64)).astype(np.float32), "im2col"


@pytest.mark.parametrize("op", ["deconv", "conv"])
def test_small_calls_pack_only_the_direct_kernels_weights_until_a_large_one(op):
    """A "winograd" layer packs on its first call: for a small one, the weights of the kernel that runs
    it (phase / im2col: _cpu.delegate); its transformed weights on the first call that needs them,
    letting the other packing go (its own blob holds it). Small calls give the direct kernel's bits before and after:
    on the direct packing (a runner made before) or through winograd's own fallback (one made after)."""
    rng = np.random.default_rng(7)
    small, small2, large = (rng.standard_normal((1, *hw, 64)).astype(np.float32) for hw in [(7, 9), (5, 5), (12, 12)])
    layer_class, w, direct = _lazy_case(op, rng)
    layer, direct_layer, fresh = (layer_class(w, padding=1, algorithm=a) for a in (None, direct, None))
    assert layer.algorithm == "winograd"
    assert layer.nbytes() < direct_layer.nbytes()                # nothing packed before the first call
    want_small = direct_layer(small)
    assert np.array_equal(layer(small), want_small) and layer.nbytes() == direct_layer.nbytes()
    lean = layer.nbytes()
    got_large = layer(large)
    assert layer.nbytes() > 1.5 * lean                           # the transformed weights, the direct ones let go
    assert np.array_equal(got_large, fresh(large))               # a layer that ran large first: the same bits
    assert not np.array_equal(got_large, direct_layer(large))    # Winograd's tiles round differently
    assert np.array_equal(layer(small), want_small)              # its runner from before
    assert np.array_equal(layer(small2), direct_layer(small2))   # winograd's fallback on its own blob
    assert np.array_equal(layer(small2), fresh(small2))


@pytest.mark.parametrize("op", ["deconv", "conv"])
def test_small_and_large_calls_racing_on_a_fresh_layer(op):
    """Threads calling one fresh layer with small and large inputs at once, while it packs: every result
    is the one a layer called alone gives."""
    rng = np.random.default_rng(8)
    small, large = (rng.standard_normal((1, *hw, 64)).astype(np.float32) for hw in [(7, 9), (12, 12)])
    layer_class, w, _ = _lazy_case(op, rng)
    want = {"small": layer_class(w, padding=1)(small), "large": layer_class(w, padding=1)(large)}
    inputs = {"small": small, "large": large}
    for _ in range(10):
        layer = layer_class(w, padding=1)
        order = ["small", "large"] * 4
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda name: layer(inputs[name]), order))
        for name, got in zip(order, results):
            np.testing.assert_array_equal(got, want[name])


@pytest.mark.parametrize("groups,n,hw,kernel,stride,direct", [
    (2, 1, (16, 31), 4, 2, True), (2, 1, (16, 32), 4, 2, False), (2, 2, (16, 16), 4, 2, False),
    (1, 1, (16, 16), 4, 2, False), (2, 1, (16, 16), 3, 1, False)])
def test_strided_grouped_layers_run_the_phase_kernel_below_512_input_pixels(groups, n, hw, kernel, stride, direct):
    """A strided layer of several groups transforms each group's tiles on its own: below 512 input
    pixels (N·H·W) "winograd" runs the phase kernel, bit for bit "phase"'s result; one group, or stride
    1, only below 64."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((n, *hw, 32 * groups)).astype(np.float32)
    w = rng.standard_normal((32 * groups, kernel, kernel, 16)).astype(np.float32)
    run = lambda algorithm: fastdeconv.conv_transpose2d(x, w, stride=stride, padding=1, groups=groups,
                                                        algorithm=algorithm)
    got, direct_result = run("winograd"), run("phase")
    assert np.array_equal(got, direct_result) == direct
    np.testing.assert_allclose(got, direct_result, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------------
# 6. Properties: random layers it supports, against the reference (derandomized under $CI)
# ----------------------------------------------------------------------------------------------

def _draw_case(data, s, k, groups, n, hw, per_group, **extra):
    """A Case of stride s and kernel k (drawn by the caller): N in [1, n], H and W in hw, channels per
    group in [1, per_group], every padding and output padding, float32 or float64."""
    return Case(
        n=data.draw(st.integers(1, n), label="N"),
        hw=(data.draw(st.integers(*hw), label="H"), data.draw(st.integers(*hw), label="W")),
        c_in=groups * data.draw(st.integers(1, per_group), label="C_in/g"),
        c_out=groups * data.draw(st.integers(1, per_group), label="C_out/g"),
        groups=groups, kernel=k, stride=s,
        padding=(data.draw(st.integers(0, k[0] - 1), label="padH"), data.draw(st.integers(0, k[1] - 1), label="padW")),
        output_padding=(data.draw(st.integers(0, s[0] - 1), label="opH"), data.draw(st.integers(0, s[1] - 1), label="opW")),
        dtype=data.draw(st.sampled_from(["float32", "float64"]), label="dtype"),
        seed=data.draw(st.integers(0, 1000), label="seed"),
        **extra,
    )


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=bool(__import__("os").environ.get("CI")))
@given(data=st.data())
def test_property_random_layers_match_the_reference(data):
    s = (data.draw(st.integers(1, 3), label="sH"), data.draw(st.integers(1, 3), label="sW"))
    k = (data.draw(st.integers(1, 3 * s[0]), label="kH"), data.draw(st.integers(1, 3 * s[1]), label="kW"))
    groups = data.draw(st.integers(1, 3), label="groups")
    case = _draw_case(data, s, k, groups, n=3, hw=(1, 11), per_group=20, bias=data.draw(st.booleans(), label="bias"))
    x, w, b = case.arrays()
    try:
        case.geometry(x, w)
    except ValueError:   # an output smaller than 1 pixel: not a layer
        assume(False)
    isa = data.draw(st.sampled_from(GEMM_ISAS), label="isa")
    with gemm_isa(isa):
        assert check_case(case, "winograd")


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=bool(__import__("os").environ.get("CI")))
@given(data=st.data())
def test_property_large_images_match_the_reference(data):
    """Images of 16-40 pixels with stride 2-3: phases of 24 outputs and more, where the phases share
    their tiles when their taps agree (winograd_shared; about a fifth of the examples), with every padding
    and output padding, serial and threaded."""
    s = (data.draw(st.integers(2, 3), label="sH"), data.draw(st.integers(2, 3), label="sW"))
    # multiples of the stride give every phase the same taps, as sharing needs; the others do not
    k = tuple(data.draw(st.sampled_from([2 * si, 3 * si]) | st.integers(si + 1, 3 * si), label=f"k{axis}")
              for si, axis in zip(s, "HW"))
    groups = data.draw(st.integers(1, 2), label="groups")
    case = _draw_case(data, s, k, groups, n=2, hw=(16, 40), per_group=8)
    threads = data.draw(st.sampled_from([1, 3]), label="threads")
    with threaded(threads):
        assert check_case(case, "winograd")


@pytest.mark.parametrize("threads", [1, 2, 4, 16])
@pytest.mark.parametrize("x_shape,w_shape,kw", [
    ((1, 56, 56, 64), (64, 3, 3, 64), dict(padding=1)),               # k3 s1 (resnet3x3)
    ((1, 16, 16, 512), (512, 4, 4, 512), dict(stride=2, padding=1)),   # k4 s2 on an 8x8 output
    ((3, 18, 18, 64), (384, 3, 3, 64), dict(padding=1)),               # many output channels
    ((1, 130, 40, 48), (40, 3, 3, 48), dict(padding=1)),               # tall: bands bounded by their size
])
def test_conv_winograd_tasks_cover_the_output_once(x_shape, w_shape, kw, threads):
    """The convolution "winograd" tasks: every (image, output row, output channel) in exactly one task;
    column ranges start on packed-panel boundaries; a band has whole 2-row tiles but for an odd last row."""
    geometry = resolve_conv2d(x_shape, w_shape, kw.get("stride", 1), kw.get("padding", 0), 1, 1)
    with threaded(threads):
        tasks = _cpu_backend.PackedLayer(np.zeros(w_shape, np.float32), None, np.float32, geometry,
                                         "winograd").runner(geometry).tasks
    (ho, wo), cols = geometry.output_hw, geometry.out_channels
    covered = np.zeros((geometry.batch, ho, cols), int)
    for part, r0, r1, c0, c1 in tasks:
        assert c0 % 32 == 0 and (r1 - r0 >= 2 or r1 == ho)   # only an odd last row alone
        covered[part, r0:r1, c0:c1] += 1
    assert (covered == 1).all()
    assert threads == 1 or len(tasks) >= min(threads, geometry.batch * ho)   # a task for every thread


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_winograd_workspace_is_bounded_whatever_the_width(dtype):
    """A band of output rows spans the image's width: a very wide image of many channels runs the
    im2col kernel instead (its workspace is sized by the GEMM's chunk), so that no thread's workspace
    grows with the width. Results stay the reference's."""
    w = np.zeros((64, 4, 4, 256), dtype)
    sizes = {}
    for width in (64, 20000):
        geometry = resolve_conv2d((1, 8, width, 256), w.shape, 2, 1, 1, 1)
        runner = _cpu_backend.PackedLayer(w, None, dtype, geometry, "winograd").runner(geometry)
        sizes[width] = runner.workspace_bytes
    assert sizes[20000] <= max(sizes[64], 16 << 20), sizes
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 6, 3000, 256)).astype(dtype)
    w = rng.standard_normal((32, 4, 4, 256)).astype(dtype)
    got = fastdeconv.conv2d(x, w, stride=2, padding=1, algorithm="winograd")
    want = fastdeconv.reference.conv2d(x, w, stride=2, padding=1)
    tolerance = dict(rtol=1e-4, atol=1e-3) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(got, want, **tolerance)


# ----------------------------------------------------------------------------------------------
# 7. Dilated convolutions: dilation phases (src/algorithms/conv_winograd.template.c), each a stride-1
#    correlation over every dH-th row and dW-th column, written back to those rows and columns of y
# ----------------------------------------------------------------------------------------------

def _dilated(x_shape, c_out, k, dilation, padding, groups, dtype, seed=0, bias=True):
    """Positive x, weights and bias of one sign per output channel (helpers.make_*: nothing cancels)."""
    rng = np.random.default_rng(seed)
    kh, kw = (k, k) if isinstance(k, int) else k
    signs = channel_signs(c_out, rng)
    w = make_weight_c(c_out, kh, kw, x_shape[3], groups, dtype, rng, signs)
    b = make_bias(c_out, dtype, rng, signs) if bias else None
    return make_x(x_shape, dtype, rng), w, b, dict(padding=padding, dilation=dilation, groups=groups)


def _conv_reference(x, w, b, **kw):
    return fastdeconv.reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                       None if b is None else b.astype(np.float64), **kw)


NAMED_DILATED = {
    "k3_d2_16x16_phases": ((1, 32, 32, 16), 16, 3, 2, 2, 1),
    "uneven_phases_two_images": ((2, 29, 27, 8), 12, 3, 2, 2, 1),        # phases of 15/14 rows, 14/13 columns
    "dilation_per_axis": ((1, 40, 44, 8), 8, 3, (2, 3), (1, 3), 1),      # 6 phases of 19 x 15/15/14
    "k3_d3_unpadded": ((1, 44, 44, 16), 16, 3, 3, 0, 1),                 # 9 phases of exactly 12 x 12
    "k2_two_groups_uneven_padding": ((1, 28, 28, 8), 16, 2, 2, ((1, 0), (0, 1)), 2),
    "outputs_past_a_panel": ((1, 30, 30, 8), 40, 3, 2, 2, 1),             # column ranges of 32 + 8
    "k3x2_d2": ((1, 30, 34, 12), 8, (3, 2), 2, (2, 1), 1),
}


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("name", NAMED_DILATED)
def test_dilated_conv_matches_the_reference(name, isa, dtype, threads):
    x_shape, c_out, k, dilation, padding, groups = NAMED_DILATED[name]
    x, w, b, kw = _dilated(x_shape, c_out, k, dilation, padding, groups, dtype)
    with gemm_isa(isa), threaded(threads):
        got = fastdeconv.conv2d(x, w, b, **kw, algorithm="winograd")
    assert not np.array_equal(got, fastdeconv.conv2d(x, w, b, **kw, algorithm="im2col")), \
        "ran the im2col kernel: no phase reaches CONV_WINOGRAD_MIN_PHASE_PIXELS"
    assert_close(got, _conv_reference(x, w, b, **kw), dtype, w[0].size, name=name, isa=isa, threads=threads)


@pytest.mark.parametrize("where", ["x", "w"])
@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_dilated_conv_puts_inf_and_nan_where_the_reference_does(where, value):
    x, w, b, kw = _dilated((1, 32, 30, 8), 16, 3, 2, 2, 1, np.float32)
    if where == "x":
        x[0, 7, 9, 3] = value
    else:
        w[5, 1, 2, 4] = value
    got = fastdeconv.conv2d(x, w, b, **kw, algorithm="winograd")
    assert_close(got, _conv_reference(x, w, b, **kw), np.float32, w[0].size, where=where, value=value)


@pytest.mark.parametrize("hw,direct", [(22, True), (24, False)])
def test_dilated_phases_below_144_outputs_run_the_im2col_kernel(hw, direct):
    """k3 d2 p2: 22x22 outputs are phases of 11x11 = 121 outputs, which run conv_im2col's kernel (the same
    bits); 24x24, phases of 12x12, run the Winograd tiles."""
    x, w, b, kw = _dilated((1, hw, hw, 32), 32, 3, 2, 2, 1, np.float32)
    got = fastdeconv.conv2d(x, w, b, **kw, algorithm="winograd")
    assert np.array_equal(got, fastdeconv.conv2d(x, w, b, **kw, algorithm="im2col")) == direct
    assert_close(got, _conv_reference(x, w, b, **kw), np.float32, w[0].size)


@pytest.mark.parametrize("hw,c_out,direct", [(16, 128, True), (16, 120, False), (46, 128, False)])
def test_large_strided_weights_on_few_outputs_run_the_im2col_kernel(hw, c_out, direct):
    """k4 s2 with 1024 input channels: 128 outputs make 2 Mi weight elements, which on 8x8 = 64 outputs run
    conv_im2col's kernel (the same bits); 120 outputs (fewer weights) and 23x23 = 529 outputs (from 512
    on) run the Winograd tiles."""
    x, w, b, kw = _dilated((1, hw, hw, 1024), c_out, 4, 1, 1, 1, np.float32)
    kw["stride"] = 2
    got = fastdeconv.conv2d(x, w, b, **kw, algorithm="winograd")
    assert np.array_equal(got, fastdeconv.conv2d(x, w, b, **kw, algorithm="im2col")) == direct
    assert_close(got, _conv_reference(x, w, b, **kw), np.float32, w[0].size)


@pytest.mark.parametrize("threads", [1, 2, 5, 16])
@pytest.mark.parametrize("x_shape,w_shape,dilation", [
    ((2, 29, 27, 8), (12, 3, 3, 8), (2, 2)),
    ((1, 40, 44, 8), (40, 3, 3, 8), (2, 3)),
    ((1, 140, 36, 64), (64, 3, 3, 64), (2, 2)),   # bands within a phase
])
def test_dilated_conv_tasks_cover_the_output_once(x_shape, w_shape, dilation, threads):
    """Task part = image * dH*dW + phase (qy*dW + qx), rows counted within the phase: every (image, output
    row, output channel) in exactly one task."""
    geometry = resolve_conv2d(x_shape, w_shape, 1, dilation, dilation, 1)
    with threaded(threads):
        tasks = _cpu_backend.PackedLayer(np.zeros(w_shape, np.float32), None, np.float32, geometry,
                                         "winograd").runner(geometry).tasks
    (ho, wo), cols, (dh, dw) = geometry.output_hw, geometry.out_channels, dilation
    covered = np.zeros((geometry.batch, ho, wo, cols), int)
    for part, r0, r1, c0, c1 in tasks:
        n, q = divmod(part, dh * dw)
        qy, qx = divmod(q, dw)
        assert c0 % 32 == 0 and r0 < r1
        covered[n, r0 * dh + qy:r1 * dh + qy:dh, qx::dw, c0:c1] += 1
    assert (covered == 1).all()


@pytest.mark.parametrize("x_shape,w_shape,dilation", [
    ((1, 56, 56, 64), (64, 3, 3, 64), 1),       # ResNet's 3x3: 7 rows a band would round up to 12, 5 bands
    ((1, 32, 32, 128), (128, 3, 3, 128), 2),    # 4 phases of 16 rows: 12 + 4 rounded up
])
def test_conv_winograd_bands_round_down_before_cutting_columns(x_shape, w_shape, dilation):
    """On 2 threads (8 tasks wanted) the bands are rounded down to 6 rows: every task has all the output
    channels (a column part transforms the whole band again) and no band is twice another's height."""
    geometry = resolve_conv2d(x_shape, w_shape, 1, dilation, dilation, 1)
    with threaded(2):
        tasks = _cpu_backend.PackedLayer(np.zeros(w_shape, np.float32), None, np.float32, geometry,
                                         "winograd").runner(geometry).tasks
    assert len(tasks) >= 8
    assert (tasks[:, 3] == 0).all() and (tasks[:, 4] == geometry.out_channels).all(), tasks
    assert (tasks[:, 2] - tasks[:, 1]).max() == 6, tasks


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=bool(__import__("os").environ.get("CI")))
@given(data=st.data())
def test_property_dilated_convs_match_the_reference(data):
    """Any dilation of 1-3 per axis (one of them at least 2), kernel sides of 2-3, any padding, 1-2 images
    of 20-44 pixels, 1-12 channels per group, one or two groups, serial and threaded: the phases run the
    Winograd tiles where they have 144 outputs, the im2col kernel elsewhere."""
    dilation = (data.draw(st.integers(1, 3), label="dH"), data.draw(st.integers(1, 3), label="dW"))
    assume(max(dilation) > 1)
    k = (data.draw(st.integers(2, 3), label="kH"), data.draw(st.integers(2, 3), label="kW"))
    padding = tuple((data.draw(st.integers(0, d * (ki - 1)), label="pad_before"),
                     data.draw(st.integers(0, d * (ki - 1)), label="pad_after")) for d, ki in zip(dilation, k))
    groups = data.draw(st.integers(1, 2), label="groups")
    x_shape = (data.draw(st.integers(1, 2), label="N"), data.draw(st.integers(20, 44), label="H"),
               data.draw(st.integers(20, 44), label="W"), groups * data.draw(st.integers(1, 12), label="C_in/g"))
    c_out = groups * data.draw(st.integers(1, 12), label="C_out/g")
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    x, w, b, kw = _dilated(x_shape, c_out, k, dilation, padding, groups, dtype, seed=data.draw(st.integers(0, 99)),
                           bias=data.draw(st.booleans(), label="bias"))
    with threaded(data.draw(st.sampled_from([1, 3]), label="threads")):
        got = fastdeconv.conv2d(x, w, b, **kw, algorithm="winograd")
    assert_close(got, _conv_reference(x, w, b, **kw), dtype, w[0].size, **kw)


@pytest.mark.parametrize("stride,dilation,want", [(1, 2, "winograd"), (1, (1, 3), "winograd"), (2, 2, "im2col")])
def test_dilated_conv_choice(stride, dilation, want):
    """A dilated k3 convolution of 128 channels runs its dilation phases in Winograd tiles with stride 1;
    with a stride too, "winograd" cannot run it (ValueError when forced) and im2col is chosen."""
    w = np.zeros((128, 3, 3, 128), np.float32)
    assert fastdeconv.Conv2d(w, stride=stride, padding=2, dilation=dilation).algorithm == want
    if want == "im2col":
        with pytest.raises(ValueError, match="stride 1 with a dilation"):
            fastdeconv.Conv2d(w, stride=stride, padding=2, dilation=dilation, algorithm="winograd")


def test_merged_groups_choose_winograd():
    """4 groups of 48 -> 4 channels run merged as one group of 192 -> 16 (group_merge), whose k4 s2 phases
    "winograd" computes; 32 groups of 4 -> 4 (the field's grouped07) run as they are on "planar"."""
    w = np.zeros((192, 4, 4, 4), np.float32)
    geometry = resolve_conv_transpose2d((1, 56, 56, 192), w.shape, 2, 1, 0, 1, 4, None)
    layer = _cpu_backend.PackedLayer(w, None, np.float32, geometry)
    assert layer.algorithm == "winograd" and layer._merge == 4
    w = np.zeros((128, 4, 4, 4), np.float32)
    geometry = resolve_conv_transpose2d((1, 56, 56, 128), w.shape, 2, 1, 0, 1, 32, None)
    layer = _cpu_backend.PackedLayer(w, None, np.float32, geometry)
    assert layer.algorithm == "planar" and layer._merge == 1


# ----------------------------------------------------------------------------------------------
# 8. Stride-1 dilated transposed convolutions: "winograd" runs them as the equivalent convolution
#    (fastdeconv._backends.cpu.as_convolution: flipped weight, padding (k - 1)·d - p), whose dilation
#    phases section 7 tests
# ----------------------------------------------------------------------------------------------

def _dilated_transposed(x_shape, c_out, k, dilation, padding, output_padding, groups, dtype, seed=0):
    """As _dilated, for conv_transpose2d."""
    rng = np.random.default_rng(seed)
    kh, kw = (k, k) if isinstance(k, int) else k
    signs = channel_signs(c_out, rng)
    w = make_weight_t(x_shape[3], kh, kw, c_out, groups, dtype, rng, signs)
    return make_x(x_shape, dtype, rng), w, make_bias(c_out, dtype, rng, signs), dict(
        padding=padding, output_padding=output_padding, dilation=dilation, groups=groups)


def _transposed_reference(x, w, b, **kw):
    return fastdeconv.reference.conv_transpose2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                                                 **kw)


NAMED_DILATED_TRANSPOSED = {
    "k3_d3_like_dilated03": ((1, 40, 40, 32), 32, 3, 3, 3, 0, 1),
    "k3_d2_uneven": ((2, 29, 27, 16), 24, 3, 2, (1, 3), (1, 0), 1),
    "dilation_per_axis_output_padding": ((1, 36, 40, 8), 16, 3, (2, 3), (2, 1), (1, 2), 1),
    "k2_two_groups": ((1, 30, 30, 16), 32, 2, 2, 0, 1, 2),
    "k3x2_no_padding": ((1, 30, 34, 12), 8, (3, 2), 2, 0, 0, 1),
}


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("name", NAMED_DILATED_TRANSPOSED)
def test_dilated_transposed_conv_matches_the_reference(name, isa, dtype, threads):
    x_shape, c_out, k, dilation, padding, output_padding, groups = NAMED_DILATED_TRANSPOSED[name]
    x, w, b, kw = _dilated_transposed(x_shape, c_out, k, dilation, padding, output_padding, groups, dtype)
    with gemm_isa(isa), threaded(threads):
        got = fastdeconv.conv_transpose2d(x, w, b, **kw, algorithm="winograd")
    assert not np.array_equal(got, fastdeconv.conv_transpose2d(x, w, b, **kw, algorithm="phase")), \
        "ran no Winograd tile: no dilation phase reaches 144 outputs"
    terms = w.shape[0] // groups * w[0, :, :, 0].size
    assert_close(got, _transposed_reference(x, w, b, **kw), dtype, terms, name=name, isa=isa, threads=threads)


@pytest.mark.parametrize("where", ["x", "w"])
@pytest.mark.parametrize("value", [np.inf, np.nan])
@pytest.mark.parametrize("groups", [1, 4])   # 4 groups of 4 run merged, an Inf or NaN input unmerged
def test_dilated_transposed_conv_puts_inf_and_nan_where_the_reference_does(where, value, groups):
    """An Inf or NaN weight would meet the equivalent convolution's padding zeros (0 · Inf = NaN, a term the
    transposed convolution does not have): such a layer runs the "phase" kernel, bit for bit."""
    x, w, b, kw = _dilated_transposed((1, 30, 28, 16), 16, 3, 2, 2, 0, groups, np.float32)
    if where == "x":
        x[0, 0, 9, 3] = value
    else:
        w[5, 0, 2, 1] = value
    got = fastdeconv.conv_transpose2d(x, w, b, **kw, algorithm="winograd")
    assert_close(got, _transposed_reference(x, w, b, **kw), np.float32, 9 * 16, where=where, value=value)
    if where == "w":
        assert np.array_equal(got, fastdeconv.conv_transpose2d(x, w, b, **kw, algorithm="phase"), equal_nan=True)


def test_dilated_transposed_conv_that_crops_more_than_its_kernel_spans():
    """Padding over (k - 1)·d: the equivalent convolution's padding would be negative; "winograd" refuses
    the layer, naming why, and the automatic choice takes "phase"."""
    w = np.ones((64, 3, 3, 64), np.float32)
    with pytest.raises(ValueError, match="must not be negative"):
        fastdeconv.ConvTranspose2d(w, padding=5, dilation=2, algorithm="winograd")
    assert fastdeconv.ConvTranspose2d(w, padding=5, dilation=2).algorithm == "phase"
    assert fastdeconv.ConvTranspose2d(w, padding=3, dilation=2).algorithm == "winograd"


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=bool(__import__("os").environ.get("CI")))
@given(data=st.data())
def test_property_dilated_transposed_convs_match_the_reference(data):
    """Stride 1, any dilation of 1-3 per axis (one at least 2), kernel sides 2-3, any padding up to (k - 1)·d,
    any output padding below the dilation, 1-2 images of 20-40 pixels, 1-12 channels per group, one or two
    groups, serial and threaded."""
    dilation = (data.draw(st.integers(1, 3), label="dH"), data.draw(st.integers(1, 3), label="dW"))
    assume(max(dilation) > 1)
    k = (data.draw(st.integers(2, 3), label="kH"), data.draw(st.integers(2, 3), label="kW"))
    padding = tuple((data.draw(st.integers(0, d * (ki - 1)), label="pad_before"),
                     data.draw(st.integers(0, d * (ki - 1)), label="pad_after")) for d, ki in zip(dilation, k))
    output_padding = tuple(data.draw(st.integers(0, max(d - 1, 0)), label="output_padding") for d in dilation)
    groups = data.draw(st.integers(1, 2), label="groups")
    x_shape = (data.draw(st.integers(1, 2), label="N"), data.draw(st.integers(20, 40), label="H"),
               data.draw(st.integers(20, 40), label="W"), groups * data.draw(st.integers(1, 12), label="C_in/g"))
    c_out = groups * data.draw(st.integers(1, 12), label="C_out/g")
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    x, w, b, kw = _dilated_transposed(x_shape, c_out, k, dilation, padding, output_padding, groups, dtype,
                                      seed=data.draw(st.integers(0, 99)))
    try:
        geometry = resolve_conv_transpose2d(x.shape, w.shape, 1, padding, output_padding, dilation, groups, None)
    except ValueError:   # an output smaller than 1 pixel: not a layer
        assume(False)
    assert _cpu_backend.supports("winograd", geometry)
    with threaded(data.draw(st.sampled_from([1, 3]), label="threads")):
        got = fastdeconv.conv_transpose2d(x, w, b, **kw, algorithm="winograd")
    assert_close(got, _transposed_reference(x, w, b, **kw), dtype, w.shape[0] // groups * k[0] * k[1], **kw)
