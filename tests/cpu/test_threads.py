"""The thread pool (src/runtime/pool.c) under the shim: results never depend on threads, task cut or concurrency.

* a hammer: many concurrent calls from several Python threads, runners bound at different thread
  counts, while the main thread changes set_num_threads and forks: every result equals the serial one;
* the task cut (tasks per thread, minimum FLOPs per task, the Ctrl-C cut) changes no bit of any
  algorithm's result;
* the default thread count: OMP_NUM_THREADS honoured at import, else the CPUs this process may use; a
  default-threads call uses fewer threads only when other threads take the CPUs, an explicit count
  exactly its threads.

The pool's own invariants (every task once, slots, stop, fork) are checked in C: tests/c/test_pool.c.
No test here times anything.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fastdeconv
from fastdeconv import _cpu, _params
from fastdeconv._backends import cpu as _cpu_backend

from helpers import (CONV_ALGORITHMS, DECONV_ALGORITHMS, TAP_BLOCK_BUDGET, Case, algorithm_supports, deconv_supported,
                     examples, gemm_panel_budget, script_env, threaded)

HANG_TIMEOUT = 120   # seconds for a subprocess scenario: generous for a loaded machine, finite for a hang


def _runner(x, w, b, kwargs, threads, algorithm=None, transposed=True):
    """A _cpu.Runner bound at `threads` (with the small-call threshold off, so it really threads)."""
    resolve = _params.resolve_conv_transpose2d if transposed else _params.resolve_conv2d
    geometry = resolve(x.shape, w.shape, **kwargs)
    layer = _cpu_backend.PackedLayer(w, b, x.dtype, geometry, algorithm)
    previous_threads = fastdeconv.get_num_threads()
    previous_flops = _cpu.set_serial_flops(0)
    try:
        fastdeconv.set_num_threads(threads)
        return layer.runner(geometry), geometry
    finally:
        _cpu.set_serial_flops(previous_flops)
        fastdeconv.set_num_threads(previous_threads)


def _layers():
    """(x, runners at 1..4 threads, geometry) for a few layers, one per algorithm (conv2d: im2col and
    depthwise, the automatic choices)."""
    rng = np.random.default_rng(11)
    specs = [
        ("phase", True, (3, 9, 7, 8), (8, 4, 4, 6), dict(stride=2, padding=1)),
        ("col2im", True, (2, 6, 5, 4), (4, 3, 3, 8), dict(stride=2, padding=1, dilation=2)),
        ("depthwise", True, (2, 10, 9, 6), (6, 3, 3, 1), dict(stride=2, padding=1, groups=6)),
        (None, False, (2, 11, 9, 6), (8, 3, 3, 3), dict(stride=1, padding=1, groups=2)),
        (None, False, (2, 12, 10, 8), (8, 3, 3, 1), dict(stride=1, padding=1, groups=8)),   # conv depthwise
    ]
    layers = []
    for algorithm, transposed, x_shape, w_shape, kwargs in specs:
        x = rng.standard_normal(x_shape, dtype=np.float32)
        w = rng.standard_normal(w_shape, dtype=np.float32)
        out_channels = w_shape[3] * kwargs.get("groups", 1) if transposed else w_shape[0]
        b = rng.standard_normal(out_channels, dtype=np.float32)
        runners = {}
        for threads in (1, 2, 3, 4):
            runners[threads], geometry = _runner(x, w, b, kwargs, threads, algorithm, transposed)
        layers.append((x, runners, geometry))
    return layers


def _run(runner, x, geometry):
    return runner.run(x, np.empty(geometry.output_shape, np.float32))


def test_concurrent_calls_at_different_thread_counts_equal_the_serial_results():
    """Six Python threads call runners bound at 1..4 threads, all at once (most calls then find the pool
    busy and run on their own thread, some get it), while the main thread changes set_num_threads."""
    layers = _layers()
    expected = [_run(runners[1], x, geometry) for x, runners, geometry in layers]
    assert all(runners[4].threads > 1 for _, runners, _ in layers), "the layers must really use threads"
    failures = []
    start = threading.Barrier(7)

    def worker(seed):
        rng = np.random.default_rng(seed)
        start.wait()
        for _ in range(60):
            index = int(rng.integers(len(layers)))
            x, runners, geometry = layers[index]
            got = _run(runners[int(rng.integers(1, 5))], x, geometry)
            if not np.array_equal(got, expected[index]):
                failures.append(index)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    x0 = layers[0][0]
    w0 = np.random.default_rng(2).standard_normal((8, 4, 4, 6), dtype=np.float32)
    plan = fastdeconv.ConvTranspose2d(w0, stride=2)
    with threaded(1):
        want0 = plan(x0)
    for thread in threads:
        thread.start()
    start.wait()
    with threaded():
        for n in [1, 3, 0, 2, 4, 0] * 10:   # the public API, its thread count changed between the workers' calls
            fastdeconv.set_num_threads(n)
            np.testing.assert_array_equal(plan(x0), want0, err_msg=f"set_num_threads({n})")
    for thread in threads:
        thread.join()
    assert not failures, f"{len(failures)} concurrent results differ from the serial ones (layers {set(failures)})"
    assert _cpu.pool_helpers() >= 1


def _fork_scenario():
    """Parent: two Python threads call threaded runners continuously while the main thread forks; each
    child runs every layer threaded (with fresh helpers) and compares with the serial result."""
    layers = _layers()
    expected = [_run(runners[1], x, geometry) for x, runners, geometry in layers]
    stop = threading.Event()
    failures = []

    def background():
        while not stop.is_set():
            for (x, runners, geometry), want in zip(layers, expected):
                if not np.array_equal(_run(runners[2], x, geometry), want):
                    failures.append("parent")

    threads = [threading.Thread(target=background) for _ in range(2)]
    for thread in threads:
        thread.start()
    children = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:   # the child: only this thread exists; the pool must start its own helpers
            code = 0 if _cpu.pool_helpers() == 0 else 3
            for (x, runners, geometry), want in zip(layers, expected):
                for threads_ in (2, 4):
                    if not np.array_equal(_run(runners[threads_], x, geometry), want):
                        code = 4
            if _cpu.pool_helpers() < 1:
                code = 5
            os._exit(code)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    stop.set()
    for thread in threads:
        thread.join()
    print(json.dumps({"codes": codes, "parent_failures": len(failures)}))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_fork_in_the_middle_of_threaded_calls():
    proc = subprocess.run([sys.executable, __file__, "fork"], capture_output=True, text=True, timeout=HANG_TIMEOUT,
                          env=script_env(PYTHONWARNINGS="ignore::DeprecationWarning"))
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    # 3: the child inherited helpers; 4: a wrong result; 5: it did not start its own helpers
    assert facts == {"codes": [0] * 8, "parent_failures": 0}, facts


# ---------------------------------------------------------------------------------------------
# The task cut


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("algorithm, x_shape, w_shape, kwargs", [
    # few pixels, many channels: phase splits B's columns
    ("phase", (1, 2, 3, 16), (16, 4, 4, 200), dict(stride=2, padding=1)),
    ("phase", (3, 9, 7, 8), (8, 3, 3, 12), dict(stride=3, padding=1, output_padding=2)),
    # one image: col2im cuts bands of rows that recompute shared input rows
    ("col2im", (1, 40, 6, 4), (4, 5, 3, 6), dict(stride=2, padding=2, dilation=(2, 1))),
    ("col2im", (5, 8, 4, 8), (8, 4, 4, 4), dict(stride=2, padding=1, groups=2)),
    ("depthwise", (2, 15, 8, 6), (6, 4, 4, 1), dict(stride=2, padding=1, groups=6)),
    (None, (2, 11, 9, 6), (8, 3, 3, 3), dict(stride=1, padding=1, groups=2)),   # conv2d: im2col
    (None, (2, 12, 10, 8), (8, 3, 3, 1), dict(stride=2, padding=1, groups=8)),  # conv2d: depthwise
    # conv2d: winograd's small outputs run im2col's indirect rows, whole images per task, border pixels by class
    (None, (9, 5, 6, 40), (24, 3, 3, 20), dict(padding=1, groups=2)),
    # GEMM panels of K > 2048 run in blocks of taps under a budget of 256 KiB (src/kernels/gemm_internal.h),
    # cut by K alone
    ("phase", (2, 6, 5, 260), (260, 6, 6, 40), dict(stride=2, padding=2)),
    (None, (1, 8, 7, 256), (40, 3, 3, 256), dict(padding=2, dilation=2)),         # conv2d: im2col
], ids=["phase-columns", "phase-rows", "col2im-bands", "col2im-images", "depthwise", "im2col", "conv-depthwise",
        "im2col-small-images", "phase-tap-blocks", "im2col-tap-blocks"])
def test_task_cut_changes_no_bit(algorithm, x_shape, w_shape, kwargs, dtype):
    """Every cut (the algorithm's own, finer per thread, the Ctrl-C cut down to tiny tasks) at 1-4
    threads gives the same bits as one serial task list."""
    rng = np.random.default_rng(5)
    transposed = algorithm is not None
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    out_channels = w_shape[3] * kwargs.get("groups", 1) if transposed else w_shape[0]
    b = rng.standard_normal(out_channels).astype(dtype)
    if transposed and not deconv_supported(algorithm, x.shape, w.shape, **kwargs):
        pytest.skip(f"{algorithm} declares this geometry unsupported")
    with gemm_panel_budget(TAP_BLOCK_BUDGET):
        previous_cut = _cpu.set_task_cut(1, float("inf"))
        previous_flops = _cpu.set_task_flops(1e300)
        previous_chunks = _cpu.set_task_min_chunks(0)
        try:
            runner, geometry = _runner(x, w, b, kwargs, 1, algorithm, transposed)
            want = runner.run(x, np.empty(geometry.output_shape, dtype))
            counts = set()
            for tasks_per_thread, min_flops, task_flops in [(1, float("inf"), 1e300), (4, 0, 1e300), (64, 0, 1e300),
                                                            (4, 1e6, 1e300), (1, float("inf"), 1e3)]:
                _cpu.set_task_cut(tasks_per_thread, min_flops)
                _cpu.set_task_flops(task_flops)
                for threads in (1, 2, 3, 4):
                    runner, geometry = _runner(x, w, b, kwargs, threads, algorithm, transposed)
                    counts.add(len(runner.tasks))
                    got = runner.run(x, np.empty(geometry.output_shape, dtype))
                    np.testing.assert_array_equal(got, want, err_msg=f"{len(runner.tasks)} tasks on {threads} threads")
            assert len(counts) >= 3, f"the cuts must differ to test anything: task counts {counts}"
        finally:
            _cpu.set_task_cut(*previous_cut)
            _cpu.set_task_flops(previous_flops)
            _cpu.set_task_min_chunks(previous_chunks)


def test_threaded_calls_are_cut_into_several_tasks_per_thread():
    """A 537-MFLOP layer whose phase rule alone gives one task per thread (few pixels, many channels:
    dcgan1) is cut into at least 4 per thread; a 1-thread call is not cut finer."""
    from fastdeconv.bench import CASES

    case = CASES["dcgan1"]
    x, w, b = case.arrays()
    for threads, at_least, at_most in [(2, 8, 64), (1, 1, 8)]:
        runner, _ = _runner(x, w, b, case.kwargs, threads)
        assert at_least <= len(runner.tasks) <= at_most, (threads, len(runner.tasks))


# Output pixels in a GEMM chunk where the packed weights exceed 2 MiB (src/algorithms/algorithm.h,
# FD_GEMM_CHUNK_B_PIXELS), and the chunks a task keeps under the Ctrl-C cut (_cpu.pyx, _task_min_chunks).
CHUNK_PIXELS_OF_LARGE_WEIGHTS = 576
TASK_MIN_CHUNKS = 1


def test_the_ctrl_c_cut_keeps_a_gemm_chunk_per_task():
    """A layer whose GEMM chunks each read all of its 2.25 MiB of packed weights, with Ctrl-C's limit
    lowered to 10 MFLOP a task: serially its tasks keep a chunk of output pixels (576) on average instead
    of the bands of one or two 100-pixel rows that the cut gives without that floor; on 2 threads the
    threads' own cut is cut no finer than that either. Every cut gives the same bits."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 100, 100, 256)).astype(np.float32)
    w = rng.standard_normal((256, 3, 3, 256)).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    kwargs = {"padding": 1}
    previous_flops = _cpu.set_task_flops(1e300)
    try:
        uncut = {threads: len(_runner(x, w, b, kwargs, threads, "im2col", transposed=False)[0].tasks)
                 for threads in (1, 2)}
        _cpu.set_task_flops(1e7)
        results = []
        for min_chunks, threads in [(TASK_MIN_CHUNKS, 1), (TASK_MIN_CHUNKS, 2), (0, 1)]:
            previous_chunks = _cpu.set_task_min_chunks(min_chunks)
            try:
                runner, geometry = _runner(x, w, b, kwargs, threads, "im2col", transposed=False)
            finally:
                _cpu.set_task_min_chunks(previous_chunks)
            heights = runner.tasks[:, 2] - runner.tasks[:, 1]
            if min_chunks == 0:
                assert len(runner.tasks) >= 50 and heights.max() <= 2, runner.tasks
            else:
                assert len(runner.tasks) > uncut[threads], (runner.tasks, uncut)   # Ctrl-C did cut
                per_task = math.prod(geometry.output_shape[:3]) / len(runner.tasks)
                assert per_task >= TASK_MIN_CHUNKS * CHUNK_PIXELS_OF_LARGE_WEIGHTS, runner.tasks
            results.append(runner.run(x, np.empty(geometry.output_shape, np.float32)))
    finally:
        _cpu.set_task_flops(previous_flops)
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])


def test_set_task_min_chunks_validates_and_restores():
    previous = _cpu.set_task_min_chunks(2)
    try:
        assert _cpu.set_task_min_chunks(previous) == 2
        with pytest.raises(ValueError, match="chunks must be at least 0, got -1"):
            _cpu.set_task_min_chunks(-1)
    finally:
        _cpu.set_task_min_chunks(previous)


def test_set_task_cut_validates_and_restores():
    previous = _cpu.set_task_cut(2, 5e5)
    try:
        assert _cpu.set_task_cut(*previous) == (2, 5e5)
        with pytest.raises(ValueError, match="tasks_per_thread must be at least 1, got 0"):
            _cpu.set_task_cut(0, 1e6)
    finally:
        _cpu.set_task_cut(*previous)


# ---------------------------------------------------------------------------------------------
# Thread counts


def test_explicit_thread_count_is_used_exactly_and_the_default_at_most():
    fastdeconv.set_num_threads(3)
    assert _cpu.participants(3) == 3                  # explicit: never reduced
    fastdeconv.set_num_threads(0)
    default = fastdeconv.get_num_threads()
    assert 1 <= _cpu.participants(default) <= default  # default: fewer when the CPUs are taken
    assert _cpu.participants(1) == 1


def test_results_equal_at_every_thread_count_through_the_public_api():
    """set_num_threads changes between calls of one plan: each thread count binds its own runner, and
    every result is the serial one."""
    case = Case(op="t", n=3, hw=(12, 10), c_in=16, c_out=24, groups=1, kernel=(4, 4), stride=2, padding=1,
                dtype="float32", seed=3)
    x, w, b = case.arrays()
    layer = fastdeconv.ConvTranspose2d(w, b, **case.kwargs())
    with threaded(1):
        want = layer(x)
    with threaded(1):
        for n in [2, 3, 1, 4, 2, 0, 7, 1] * 3:
            fastdeconv.set_num_threads(n)
            np.testing.assert_array_equal(layer(x), want, err_msg=f"set_num_threads({n})")


def _threads_scenario():
    print(json.dumps({"threads": fastdeconv.get_num_threads(), "cpus": len(os.sched_getaffinity(0))
                      if hasattr(os, "sched_getaffinity") else os.cpu_count()}))


@pytest.mark.parametrize("value, expected", [("3", 3), ("5,2", 5), (" 2 ", 2), ("", "cpus"), ("zero", "cpus"),
                                             ("0", "cpus"), ("-2", "cpus")])
def test_default_thread_count_honours_omp_num_threads(value, expected):
    proc = subprocess.run([sys.executable, __file__, "threads"], capture_output=True, text=True, timeout=HANG_TIMEOUT,
                          env=script_env(OMP_NUM_THREADS=value))
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["threads"] == (facts["cpus"] if expected == "cpus" else expected)
    invalid = value.strip() not in ("",) and expected == "cpus"
    assert ("OMP_NUM_THREADS" in proc.stderr and "ignored" in proc.stderr) == invalid, proc.stderr


def test_show_config_names_the_pool():
    config = fastdeconv._config.config()
    assert config["thread_pool"].startswith("own (pthreads)" if os.name != "nt" else "own (win32)")
    assert "openmp" not in config


def test_contention_command_reports_every_load():
    """`python -m fastdeconv bench --contention` on the tiniest case: a table per load with the ratio
    columns, the after-onnxruntime table (or why it is skipped), the worst-ratio summary. Structure only."""
    proc = subprocess.run([sys.executable, "-m", "fastdeconv", "bench", "--contention", "--cases", "seed_group",
                           "--seconds", "0.01"], capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for load in ("none", "1 busy", "3 busy", "bench 2T"):
        assert f"### load: {load}" in out
    assert out.count("| case | 1T p50 | 1T p99 | default p50 | default p99 | p50 / 1T p50 | p99 / p50 | paired |") == 4
    assert out.count("| seed_group |") == 5 or "after ORT: skipped" in out
    assert "worst per load" in out



def test_depthwise_bands_of_a_large_image_are_kernel_rows_tall_and_cut_channels_instead():
    """The convolution's "depthwise" on many threads: where consecutive output rows share input rows of an
    image too large to stay in a core's cache (k5 s2, 96 x 96 x 384), bands are kH = 5 rows tall and the
    channels are cut into chunks that start at multiples of 16, instead of the one-row tasks that would read
    each input row on two or three threads; a small image, or a kernel whose rows never overlap (k2 s2), is
    cut into rows of every channel as before. Every (row, channel) belongs to one task, and the results are
    those of one thread."""
    rng = np.random.default_rng(6)
    for hw, c, kernel, stride, least in [(96, 384, 5, 2, 5), (16, 384, 5, 2, 1), (96, 384, 2, 2, 1)]:
        x = rng.standard_normal((1, hw, hw, c)).astype(np.float32)
        w = rng.standard_normal((c, kernel, kernel, 1)).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32)
        kwargs = {"stride": stride, "padding": (kernel - 1) // 2, "groups": c}
        want = None
        for threads in (1, 16):
            runner, geometry = _runner(x, w, b, kwargs, threads, "depthwise", transposed=False)
            tasks = runner.tasks
            covered = np.zeros((geometry.output_shape[1], c), int)
            for _, r0, r1, c0, c1 in tasks:
                covered[r0:r1, c0:c1] += 1
            assert (covered == 1).all(), (hw, kernel, threads, tasks)
            assert (tasks[:, 3] % 16 == 0).all(), tasks
            rows = np.unique(tasks[:, 1:3], axis=0)
            heights = rows[:, 1] - rows[:, 0]
            if threads == 16:
                assert len(heights) == 1 or heights[:-1].min() >= least, (hw, kernel, tasks)
                assert (least > 1) == (len(np.unique(tasks[:, 3])) > 1), (hw, kernel, tasks)
            got = runner.run(x, np.empty(geometry.output_shape, np.float32))
            if want is None:
                want = got
            np.testing.assert_array_equal(got, want, err_msg=f"{hw}px k{kernel} s{stride} at {threads} threads")



def test_im2col_tasks_keep_48_pixels_and_cut_columns_instead():
    """im2col on many threads: where bands of an image's rows would hold fewer than 48 output pixels (a 20 x 20
    image at 16 threads: one row of 20), or the image has fewer rows than there are threads (4 rows of 64
    pixels), and there are at least 128 output channels, bands hold at least 48 pixels and each band's
    columns are cut into parts starting at multiples of 32 (where B's panels start), instead of GEMMs of a few
    rows that each read all of B: parts of at least 64 where that gives every thread a task, else of 32 (the
    4-row image: 4 bands x 4 parts, where parts of 64 would leave half the threads idle). With 40 output
    channels the rows are cut as before. Every (pixel row, channel) belongs to one task, and the results are
    those of one thread."""
    rng = np.random.default_rng(7)
    for (h, w_in, c_out), cut_columns in [((20, 20, 192), True), ((20, 20, 40), False), ((4, 64, 128), True)]:
        x = rng.standard_normal((1, h, w_in, 16)).astype(np.float32)
        w = rng.standard_normal((c_out, 3, 3, 16)).astype(np.float32)
        b = rng.standard_normal(c_out).astype(np.float32)
        kwargs = {"padding": 1}
        want = None
        for threads in (1, 16):
            runner, geometry = _runner(x, w, b, kwargs, threads, "im2col", transposed=False)
            tasks = runner.tasks
            covered = np.zeros((h, c_out), int)
            for _, r0, r1, c0, c1 in tasks:
                covered[r0:r1, c0:c1] += 1
            assert (covered == 1).all(), (c_out, threads, tasks)
            if threads == 16:
                heights = np.unique(tasks[:, 1:3], axis=0) @ [-1, 1]
                widths = tasks[:, 4] - tasks[:, 3]
                if cut_columns:
                    assert heights[:-1].min() * w_in >= 48 and len(np.unique(tasks[:, 3])) > 1, tasks
                    assert (tasks[:, 3] % 32 == 0).all() and widths.min() >= 32, tasks
                    assert len(tasks) >= 16, tasks
                    if len(heights) * (c_out // 64) >= 16:   # parts of 64 give every thread a task
                        assert widths.min() >= 64, tasks
                else:
                    assert heights.max() == 1 and (widths == c_out).all(), tasks
            got = runner.run(x, np.empty(geometry.output_shape, np.float32))
            if want is None:
                want = got
            np.testing.assert_array_equal(got, want, err_msg=f"{c_out} channels at {threads} threads")


@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((1, 9, 28, 8), (16, 4, 4, 8), dict(stride=2, padding=(2, 0))),      # 5 rows: F(2, 2) tiles
    ((1, 40, 28, 8), (16, 4, 4, 8), dict(stride=2, padding=1)),          # 20 rows: F(3, 2) tiles
    ((1, 24, 5, 3), (1, 3, 3, 3), dict(stride=1)),                       # F(2, 3) tiles
    ((1, 40, 40, 16), (32, 3, 3, 16), dict(stride=1, padding=2, dilation=2)),   # dilation phases
], ids=["k4s2-short", "k4s2-tall", "k3s1", "k3d2"])
def test_conv_winograd_bands_start_on_the_tile_grid(x_shape, w_shape, kwargs):
    """The convolution's winograd computes bands of output rows, finer on more threads. Each band runs
    over its own rows from a multiple of the tiles' side, with its phase's choice of tiles and kernel: the
    tiles, their side (F(3, 2) or F(2, 2), by the phase's rows) and the kernel are the whole phase's, so
    the bits are those of one thread. (Each band used to be tiled on its own: up to 90 % of the outputs differed in
    the last bits at 2 threads.)"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    runner, geometry = _runner(x, w, b, kwargs, 1, "winograd", transposed=False)
    want = runner.run(x, np.empty(geometry.output_shape, np.float32))
    counts = set()
    for threads in (2, 3, 5, 16):
        runner, geometry = _runner(x, w, b, kwargs, threads, "winograd", transposed=False)
        counts.add(len(runner.tasks))
        got = runner.run(x, np.empty(geometry.output_shape, np.float32))
        np.testing.assert_array_equal(got, want, err_msg=f"{len(runner.tasks)} tasks on {threads} threads")
    assert max(counts) > 1 or x_shape[1] == 9, counts   # the short image is one band at any thread count


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(data=st.data())
def test_many_threads_give_the_bits_of_one_on_any_layer(data):
    """The cuts for many threads (column parts of 32 and 64, bands of 48 pixels, row parts of 1-D
    layers, channel chunks, tap blocks) on random layers, transposed and forward, any algorithm that
    runs them, 1-D ones included: every thread count from 2 to 32 gives the bits of one thread. (The
    named tests above pin the shapes of the tasks; this one, that no rule loses or repeats a piece.)"""
    draw = data.draw
    transposed = draw(st.booleans(), "transposed")
    batch = draw(st.integers(1, 3), "batch")
    h = draw(st.sampled_from([1, 1, 2, 3, 5, 9, 17, 24]), "h")
    w_in = draw(st.integers(1, 70), "w")
    groups = draw(st.sampled_from([1, 1, 1, 2, 4]), "groups")
    c_in = groups * draw(st.sampled_from([1, 3, 8, 16, 33]), "c_in per group")
    c_out = groups * draw(st.sampled_from([1, 2, 16, 40, 64, 96, 130]), "c_out per group")
    family = draw(st.sampled_from(["any", "any", "k3 s1", "k4 s2"]), "family")   # the last two: winograd's
    if family == "any":
        kh = 1 if h == 1 else draw(st.integers(1, 5), "kh")
        kw = draw(st.integers(1, 5), "kw")
        stride = (draw(st.integers(1, 3), "sh"), draw(st.integers(1, 3), "sw"))
        dilation = (draw(st.integers(1, 2), "dh"), draw(st.integers(1, 2), "dw"))
    else:
        kh = kw = 3 if family == "k3 s1" else 4
        stride, dilation = (kh - 2, kh - 2), (1, 1)
    padding = (0 if h == 1 else draw(st.integers(0, kh - 1), "ph"), draw(st.integers(0, kw - 1), "pw"))
    kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x_shape = (batch, h, w_in, c_in)
    w_shape = (c_in, kh, kw, c_out // groups) if transposed else (c_out, kh, kw, c_in // groups)
    resolve = _params.resolve_conv_transpose2d if transposed else _params.resolve_conv2d
    try:
        geometry = resolve(x_shape, w_shape, **kwargs)
    except ValueError:
        assume(False)
    names = [a for a in (DECONV_ALGORITHMS if transposed else CONV_ALGORITHMS) if algorithm_supports(a, geometry)]
    algorithm = draw(st.sampled_from([None] + names), "algorithm")
    threads = draw(st.sampled_from([2, 3, 5, 8, 16, 32]), "threads")
    rng = np.random.default_rng(batch * 1000 + h * 100 + w_in)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    runner, geometry = _runner(x, w, b, kwargs, 1, algorithm, transposed)
    want = runner.run(x, np.empty(geometry.output_shape, np.float32))
    runner, geometry = _runner(x, w, b, kwargs, threads, algorithm, transposed)
    got = runner.run(x, np.empty(geometry.output_shape, np.float32))
    np.testing.assert_array_equal(got, want, err_msg=f"{runner.algorithm}: {len(runner.tasks)} tasks on {threads} threads")


if __name__ == "__main__":   # (as a script, this folder is on sys.path: `helpers` imports)
    scenario = sys.argv[1]
    if scenario == "fork":
        _fork_scenario()
    elif scenario == "threads":
        _threads_scenario()


def test_col2im_bands_are_at_least_as_tall_as_the_rows_their_edges_recompute():
    """col2im's bands of output rows: a band edge recomputes ceil(dH*(kH-1)/sH) input rows when
    neighbouring input rows' taps overlap, so at many threads the bands stay at least sH times that tall
    (a k6 s2 head: 6 rows) instead of the 1-2 rows a finer cut would give; a k2 s2 head, whose taps never
    overlap, is cut as finely as before. Results stay those of one thread."""
    rng = np.random.default_rng(5)
    for kernel, stride, least in [(6, 2, 6), (4, 2, 4), (9, 4, 8), (2, 2, 1)]:
        x = rng.standard_normal((1, 40, 23, 8)).astype(np.float32)
        w = rng.standard_normal((8, kernel, kernel, 3)).astype(np.float32)
        b = rng.standard_normal(3).astype(np.float32)
        kwargs = {"stride": stride, "padding": (kernel - stride) // 2}
        want = None
        for threads in (1, 16):
            runner, geometry = _runner(x, w, b, kwargs, threads, "col2im")
            rows = runner.tasks[:, 2] - runner.tasks[:, 1]   # one image: every band but the last is full
            assert len(rows) == 1 or rows[:-1].min() >= least, (kernel, stride, runner.tasks)
            if least == 1 and threads == 16:
                assert rows.max() <= 3, (kernel, stride, runner.tasks)
            got = runner.run(x, np.empty(geometry.output_shape, np.float32))
            if want is None:
                want = got
            np.testing.assert_array_equal(got, want, err_msg=f"k{kernel} s{stride} at {threads} threads")


def test_the_workspace_is_kept_between_calls_and_shared_by_none():
    """A call's workspace is kept for the next (one spare: no allocation, page faults or unmapping per
    call), and calls racing from several threads, which cannot share it, still get the serial results."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 24, 24, 64)).astype(np.float32)
    w = rng.standard_normal((64, 3, 3, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    runner, geometry = _runner(x, w, b, {"padding": 1}, 4, "winograd")
    want = runner.run(x, np.empty(geometry.output_shape, np.float32))
    assert _cpu.spare_workspace_bytes() >= runner.workspace_bytes * 4
    outs = [np.empty(geometry.output_shape, np.float32) for _ in range(4)]

    errors = []

    def call(i):
        try:
            for _ in range(5):
                runner.run(x, outs[i])
                np.testing.assert_array_equal(outs[i], want)
        except BaseException as error:   # reported by the main thread
            errors.append(error)

    workers = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors
    assert 0 < _cpu.spare_workspace_bytes() <= 256 << 20
