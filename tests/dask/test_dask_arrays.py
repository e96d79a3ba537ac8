"""fastdeconv over dask arrays: exact blockwise results, process workers, out of core.

* property tests: random parameters (the parameter space of test_cpu_vs_reference) on random
  chunkings of every axis (chunks of 1, chunks smaller than the halo) against the in-memory call;
* named cases for the corners: blocks that no tap reaches, blocks entirely in a convolution's
  padding, unbatched input, errors raised eagerly, one copy of the weights in the graph;
* a LocalCluster with 2 process workers: the same results, the weights packed once per worker,
  configure_workers, a layer pickled to a worker;
* out of core: zarr to zarr through workers whose memory limit is a fraction of the output.
"""

from __future__ import annotations

import os
import pickle
import shutil
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import fastdeconv  # noqa: E402
import fastdeconv.dask as fdask  # noqa: E402
from fastdeconv._backends import cpu as _cpu_backend  # noqa: E402
from helpers import DECONV_ALGORITHMS, Case, assert_close, examples  # noqa: E402
from strategies import conv_cases, deconv_cases  # noqa: E402

SETTINGS = settings(max_examples=examples(300), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ----------------------------------------------------------------------------------------------
# Helpers


@st.composite
def chunking(draw, size):
    """A random partition of one axis: chunks of 1, small chunks, or one chunk."""
    if size == 0:
        return (0,)
    style = draw(st.sampled_from(["ones", "random", "random", "whole"]))
    if style == "ones":
        return (1,) * size
    if style == "whole":
        return (size,)
    chunks, left = [], size
    while left:
        chunks.append(draw(st.integers(1, left)))
        left -= chunks[-1]
    return tuple(chunks)


def run_case(case: Case, chunks, algorithm=None, scheduler="sync"):
    """The case on a dask array of these chunks, against the in-memory call: shape, dtype, chunks
    before computing, values after."""
    x, w, b = case.arrays()
    expected = case.call(x, w, b, algorithm=algorithm)
    xd = da.from_array(x, chunks=chunks)
    y = case.call(xd, w, b, backend="auto", algorithm=algorithm)
    assert isinstance(y, da.Array)
    assert y.shape == expected.shape and y.dtype == expected.dtype, (y, expected.shape, expected.dtype)
    assert y.chunks[-1] == (expected.shape[-1],), y.chunks   # the channel axis is one chunk
    if not case.unbatched:
        assert y.chunks[0] == xd.chunks[0], (y.chunks, xd.chunks)   # batch chunks map one to one
    got = y.compute(scheduler=scheduler)
    assert_close(got, expected, case.result_dtype, case.k, chunks=chunks, **case.describe(algorithm))
    return y


def bilinear_weight(channels, dtype=np.float32):
    """The 2x bilinear upsampling kernel (k4 s2 p1, depthwise)."""
    f = np.array([0.25, 0.75, 0.75, 0.25])
    w = np.zeros((channels, 4, 4, 1))
    w[..., 0] = np.outer(f, f)
    return w.astype(dtype)


def zarr_array(path, like):
    """A new uncompressed zarr array for a dask array, chunk for chunk (zarr's own API: dask's to_zarr
    keywords for zarr 3 differ between dask versions)."""
    import zarr

    return zarr.create_array(str(path), shape=like.shape, chunks=tuple(max(c) for c in like.chunks), dtype=like.dtype,
                             compressors=None)


def task_functions(array):
    return [getattr(node, "func", None) for node in dict(array.__dask_graph__()).values()]


# ----------------------------------------------------------------------------------------------
# Exactness on random parameters and chunkings


@SETTINGS
@given(case=deconv_cases(), data=st.data())
def test_conv_transpose2d_matches_the_in_memory_call(case, data):
    x_shape = (*case.hw, case.c_in) if case.unbatched else (case.n, *case.hw, case.c_in)
    chunks = tuple(data.draw(chunking(size), label=f"chunks axis {axis}") for axis, size in enumerate(x_shape))
    x, w, _ = case.arrays()
    algorithm = data.draw(st.sampled_from([None, *DECONV_ALGORITHMS]), label="algorithm")
    if algorithm is not None and not _cpu_backend.supports(algorithm, case.geometry(x, w)):
        algorithm = None
    run_case(case, chunks, algorithm)


@SETTINGS
@given(case=conv_cases(), data=st.data())
def test_conv2d_matches_the_in_memory_call(case, data):
    x_shape = (*case.hw, case.c_in) if case.unbatched else (case.n, *case.hw, case.c_in)
    chunks = tuple(data.draw(chunking(size), label=f"chunks axis {axis}") for axis, size in enumerate(x_shape))
    run_case(case, chunks)


# ----------------------------------------------------------------------------------------------
# Named corners


@pytest.mark.parametrize("op", ["t", "c"])
def test_chunks_of_one_row_under_a_halo_of_many(op):
    """A dilated 7-tap kernel reaches 12 input rows; every input chunk is one row and one column."""
    case = Case(op=op, n=2, hw=(15, 13), c_in=4, c_out=6, groups=2, kernel=(7, 5), stride=(2, 1), dilation=2,
                padding=((5, 2), (3, 4)), dtype="float32")
    y = run_case(case, (1, 1, 1, 4))
    assert min(y.numblocks[1:3]) >= 5


def test_dilated_transposed_blocks_run_as_convolutions():
    """A stride-1 dilated transposed layer runs as its equivalent convolution ("winograd"): every block's
    pads (at most the kernel's reach) give that convolution non-negative pads, and the blocks' results are
    the in-memory call's."""
    case = Case(op="t", n=1, hw=(40, 38), c_in=32, c_out=32, kernel=(3, 3), stride=1, dilation=2, padding=2,
                output_padding=1, dtype="float32")
    x, w, _ = case.arrays()
    assert fastdeconv.ConvTranspose2d(w, stride=1, padding=2, output_padding=1, dilation=2).algorithm == "winograd"
    run_case(case, (1, 13, 11, 32), "winograd")


def test_blocks_that_no_tap_reaches_hold_the_bias():
    """k1 s4 with 2 rows cropped at the top and 3 rows of output_padding: the last output block
    (rows 8..9 of 10) lies in the output_padding, where no input row reaches: just the bias."""
    case = Case(op="t", n=1, hw=(3, 3), c_in=2, c_out=3, kernel=(1, 1), stride=4, padding=((2, 0), (2, 0)),
                output_padding=3, dtype="float64")
    y = run_case(case, (1, 1, 1, 2))
    assert fdask._bias_block in task_functions(y)
    _, _, b = case.arrays()
    np.testing.assert_array_equal(y.compute()[0, 8:, 8:], np.broadcast_to(b, (2, 2, 3)))


def test_blocks_without_a_bias_that_no_tap_reaches_are_zero():
    case = Case(op="t", n=1, hw=(3, 3), c_in=2, c_out=3, kernel=(1, 1), stride=4, padding=((2, 0), (2, 0)),
                output_padding=3, bias=False, dtype="float16")
    y = run_case(case, (1, 1, 1, 2))
    assert fdask._bias_block in task_functions(y)


def test_a_convolution_block_entirely_in_the_padding_multiplies_its_taps():
    """conv2d with 6 rows of top padding: the first output blocks read only padding. Their taps
    are multiplied by zero, as in the in-memory call, so an infinite weight makes them NaN."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 1.0, (1, 8, 5, 2))
    w = rng.uniform(0.5, 1.0, (3, 2, 2, 2))
    w[1, 0, 0, 0] = np.inf
    kwargs = dict(padding=((6, 0), (0, 0)))
    expected = fastdeconv.conv2d(x, w, np.ones(3), **kwargs)
    assert np.isnan(expected[0, :5, :, 1]).all() and np.isfinite(expected[0, :5, :, [0, 2]]).all()
    y = fastdeconv.conv2d(da.from_array(x, chunks=(1, 1, 2, 2)), w, np.ones(3), **kwargs)
    got = y.compute()
    np.testing.assert_array_equal(got, expected)   # NaNs in the same places (array_equal treats them equal)


@pytest.mark.parametrize("dtype, backend", [("float32", "auto"), ("float16", "auto"), ("float64", "reference")])
@pytest.mark.parametrize("op", ["t", "c"])
def test_row_bands_run_on_the_blocks_of_x_without_copying_them(op, dtype, backend):
    """Chunks of whole rows, one image each: a block's rows are computed in parts that read one
    block of x each (views of it) and parts across block edges (assembled), into one buffer."""
    case = Case(op=op, n=2, hw=(40, 13), c_in=3, c_out=4, kernel=(4, 3), stride=2, padding=1, dtype=dtype)
    x, w, b = case.arrays()
    y = fastdeconv.conv_transpose2d if op == "t" else fastdeconv.conv2d
    got = y(da.from_array(x, chunks=(1, 10, 13, 3)), w, b, **case.kwargs(), backend=backend)
    parts = [len(task.args[-1]) for task in dict(got.__dask_graph__()).values()
             if getattr(task, "func", None) is fdask._run_block]
    assert max(parts) == 3, parts   # above the top edge of x's block, within it, below its bottom edge
    expected = y(x, w, b, **case.kwargs(), backend="cpu" if backend == "auto" else backend)
    assert_close(got.compute(), expected, case.result_dtype, case.k)


def test_unbatched_input():
    case = Case(op="t", unbatched=True, hw=(9, 7), c_in=3, c_out=2, kernel=(3, 3), stride=2, padding=1,
                output_padding=1, dtype="float32")
    y = run_case(case, (2, 3, 3))
    assert y.ndim == 3


def test_the_channel_axis_is_rechunked_to_one_chunk():
    case = Case(op="c", n=3, hw=(6, 6), c_in=6, c_out=4, groups=2, kernel=(3, 3), padding="same", dtype="float32")
    run_case(case, (2, 3, 6, (1, 2, 3)))


def test_same_result_on_the_threaded_scheduler():
    case = Case(op="t", n=2, hw=(30, 20), c_in=8, c_out=8, kernel=(4, 4), stride=2, padding=1, dtype="float32")
    run_case(case, (1, 7, 6, 8), scheduler="threads")


def test_reference_backend():
    case = Case(op="t", n=1, hw=(7, 6), c_in=2, c_out=2, kernel=(3, 2), stride=2, padding=((1, 0), (0, 1)),
                dtype="float64")
    x, w, b = case.arrays()
    y = fastdeconv.conv_transpose2d(da.from_array(x, chunks=(1, 2, 3, 2)), w, b, **case.kwargs(),
                                    backend="reference")
    np.testing.assert_allclose(y.compute(), fastdeconv.reference.conv_transpose2d(x, w, b, **case.kwargs()),
                               rtol=1e-13)


def test_layer_object_on_a_dask_array():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((4, 3, 3, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    x = rng.standard_normal((2, 11, 9, 4)).astype(np.float32)
    layer = fastdeconv.ConvTranspose2d(w, b, stride=2, padding=1)
    y = layer(da.from_array(x, chunks=(1, 4, 5, 4)), output_size=(22, 18))
    assert isinstance(y, da.Array) and y.shape == (2, 22, 18, 5)
    np.testing.assert_array_equal(y.compute(), layer(x, output_size=(22, 18)))


def test_conv2d_layer_object_on_a_dask_array():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 3, 3, 2)).astype(np.float32)   # groups 2: C_in 4
    x = rng.standard_normal((2, 13, 10, 4)).astype(np.float32)
    layer = fastdeconv.Conv2d(w, None, stride=2, padding="same", groups=2)
    y = layer(da.from_array(x, chunks=(1, 3, 4, 4)))
    assert isinstance(y, da.Array) and y.shape == (2, 7, 5, 6)
    np.testing.assert_array_equal(y.compute(), layer(x))


def test_the_result_is_lazy_and_its_name_deterministic():
    def fail(block):
        raise AssertionError("x was computed at call time")

    x = da.zeros((1, 8, 8, 2), chunks=(1, 4, 4, 2), dtype=np.float32).map_blocks(fail, dtype=np.float32)
    w = np.ones((2, 3, 3, 2), np.float32)
    y = fastdeconv.conv_transpose2d(x, w, stride=2)
    assert y.name == fastdeconv.conv_transpose2d(x, w, stride=2).name
    assert y.name != fastdeconv.conv_transpose2d(x, w, stride=2, padding=1).name


@pytest.mark.parametrize("arguments, error, message", [
    (dict(stride=0), ValueError, "stride must be >= 1"),
    (dict(padding="full"), ValueError, "padding must be"),
    (dict(output_padding=2), ValueError, "output_padding must be smaller"),
    (dict(groups=3), ValueError, "not divisible by groups=3"),
    (dict(algorithm="im2col"), ValueError, "algorithm must be None or one of"),
    (dict(backend="gpu"), ValueError, "backend must be one of"),
    (dict(out=np.empty((1, 17, 17, 2), np.float32)), TypeError, "out= is not supported for a dask array"),
])
def test_errors_are_the_in_memory_calls_and_raised_at_call_time(arguments, error, message):
    x = np.ones((1, 8, 8, 4), np.float32)
    w = np.ones((4, 3, 3, 2), np.float32)
    if "out" not in arguments:
        with pytest.raises(error, match=message):
            fastdeconv.conv_transpose2d(x, w, **{"stride": 2, **arguments})
    with pytest.raises(error, match=message):
        fastdeconv.conv_transpose2d(da.from_array(x, chunks=4), w, **{"stride": 2, **arguments})


def test_unsupported_dtype_and_unknown_chunks():
    w = np.ones((2, 3, 3, 2), np.float32)
    with pytest.raises(TypeError, match="x has dtype int32"):
        fastdeconv.conv2d(da.ones((1, 5, 5, 2), dtype=np.int32, chunks=2), w)
    x = da.ones((4, 5, 5, 2), chunks=2, dtype=np.float32)
    x = x[x[:, 0, 0, 0] > 0]   # boolean indexing: unknown batch chunks
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        fastdeconv.conv2d(x, w)


def test_big_endian_input():
    x = np.arange(2 * 6 * 5 * 3, dtype=">f4").reshape(2, 6, 5, 3) / 100
    w = np.linspace(-1, 1, 3 * 2 * 2 * 4, dtype=np.float32).reshape(3, 2, 2, 4)
    got = fastdeconv.conv_transpose2d(da.from_array(x, chunks=(1, 2, 2, 3)), w, stride=2).compute()
    np.testing.assert_array_equal(got, fastdeconv.conv_transpose2d(x, w, stride=2))


def _buffer_reuse(scheduler):
    """A graph built, the caller's weight and bias buffers then reused for other values (as numpy code
    does): both that graph and a later one with the first values compute the first values."""
    rng = np.random.default_rng(12)
    x_np = rng.standard_normal((2, 9, 10, 6)).astype(np.float32)
    w1, b1 = rng.standard_normal((6, 4, 4, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    w2, b2 = rng.standard_normal((6, 4, 4, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    x = da.from_array(x_np, chunks=(1, 4, 5, 6))
    w, b = w1.copy(), b1.copy()
    lazy = fastdeconv.conv_transpose2d(x, w, b, stride=2, padding=1)
    w[...], b[...] = w2, b2                       # the buffers reused after the graph was built
    later = fastdeconv.conv_transpose2d(x, w1.copy(), b1.copy(), stride=2, padding=1)
    want = fastdeconv.reference.conv_transpose2d(x_np, w1, b1, stride=2, padding=1)
    for y in (lazy, later):
        assert_close(y.compute(scheduler=scheduler), want, np.float32, 6 * 4)
    other = fastdeconv.conv_transpose2d(x, w, b, stride=2, padding=1)   # the new contents: their own result
    assert_close(other.compute(scheduler=scheduler),
                 fastdeconv.reference.conv_transpose2d(x_np, w2, b2, stride=2, padding=1), np.float32, 6 * 4)


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_a_graph_keeps_the_weights_it_was_built_with(scheduler):
    _buffer_reuse(scheduler)


def test_the_graph_holds_the_weights_once_and_packs_them_once():
    """64 output blocks: the pickled graph carries the 1 MiB weight once, and computing it twice
    packs the weights once."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 4, 4, 64), dtype=np.float32) / 64   # 1 MiB
    x = da.from_array(rng.standard_normal((1, 32, 32, 64)).astype(np.float32), chunks=(1, 4, 4, 64))
    y = fastdeconv.conv_transpose2d(x, w, stride=2, padding=1)
    assert y.numblocks == (1, 8, 8, 1)
    graph_bytes = len(pickle.dumps(dict(y.__dask_graph__())))
    assert graph_bytes < w.nbytes + x.nbytes + 200_000, graph_bytes   # once per block would be 64 MiB
    before = fdask.packings
    y.compute(scheduler="sync")
    y.compute(scheduler="threads")
    assert fdask.packings - before == 1


def test_dask_demo(tmp_path, capsys):
    """The command line demo on the threaded scheduler, small: it writes, checks and reports."""
    pytest.importorskip("zarr")
    from fastdeconv.__main__ import main

    assert main(["dask-demo", "--size", "100", "90", "--channels", "2", "--chunk", "32", "--dir", str(tmp_path),
                 "--keep"]) == 0
    out = capsys.readouterr().out
    assert "output: " in out and "(1, 200, 180, 2) float32" in out and "MB/s written" in out
    assert "checked: the top-left 126x126 output pixels against the in-memory call" in out
    assert (tmp_path / "output.zarr").is_dir()


# ----------------------------------------------------------------------------------------------
# Process workers (dask.distributed LocalCluster)


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    # 2 process workers (spawned: distributed's default start method), 1 GiB each: the out-of-core
    # test below writes several times that.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client


def test_process_workers_compute_the_same_results(client):
    for case, chunks in [
        (Case(op="t", n=3, hw=(20, 17), c_in=6, c_out=4, groups=2, kernel=(4, 3), stride=(2, 3), dilation=(1, 2),
              padding=((2, 1), (0, 3)), output_padding=(1, 0), dtype="float32"), (2, 3, 5, 6)),
        (Case(op="c", n=2, hw=(19, 23), c_in=4, c_out=6, kernel=(5, 3), stride=2, padding="same", dtype="float64"),
         (1, 4, 6, 2)),
        (Case(op="t", n=1, hw=(16, 16), c_in=5, c_out=10, groups=5, kernel=(4, 4), stride=2, padding=1,
              dtype="float16"), (1, 5, 16, 5)),
    ]:
        run_case(case, chunks, scheduler=None)   # None: the default, the distributed client


def test_weights_are_packed_once_per_worker(client):
    rng = np.random.default_rng(6)
    w = rng.standard_normal((8, 3, 3, 8)).astype(np.float32)
    before = client.run(lambda: __import__("fastdeconv.dask").dask.packings)
    for seed in (1, 2):   # two graphs over different data: the workers keep the packed layer
        x = da.from_array(np.random.default_rng(seed).standard_normal((2, 24, 24, 8)).astype(np.float32),
                          chunks=(1, 4, 6, 8))
        y = fastdeconv.conv_transpose2d(x, w, stride=2, padding=1)
        np.testing.assert_array_equal(y.compute(), fastdeconv.conv_transpose2d(x.compute(), w, stride=2, padding=1))
    after = client.run(lambda: __import__("fastdeconv.dask").dask.packings)
    assert {address: after[address] - before[address] for address in after} == {a: 1 for a in after}


def test_a_graph_keeps_the_weights_it_was_built_with_on_process_workers(client):
    _buffer_reuse(None)


def test_configure_workers(client):
    cores = fdask._cores()
    try:
        assert fdask.configure_workers(client) == {a: max(1, cores // 2) for a in client.nthreads()}
        assert fdask.configure_workers(client, threads=3) == {a: 3 for a in client.nthreads()}
        with pytest.raises(ValueError, match="threads must be None or an int >= 1, got 0"):
            fdask.configure_workers(client, threads=0)
    finally:
        fdask.configure_workers(client)


def test_a_layer_pickles_to_its_weights_and_runs_on_a_worker(client):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 4, 4, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float64)   # the bias keeps its precision
    layer = fastdeconv.ConvTranspose2d(w, b, stride=2, padding=1, dilation=1)
    # weights, bias and parameters; not the packed weights (their size again)
    assert len(pickle.dumps(layer)) < w.nbytes + b.nbytes + 2000
    copy = pickle.loads(pickle.dumps(layer))
    assert repr(copy) == repr(layer) and copy.bias.dtype == np.float64
    x = rng.standard_normal((2, 9, 7, 16)).astype(np.float32)
    np.testing.assert_array_equal(copy(x), layer(x))
    np.testing.assert_array_equal(client.submit(layer, x).result(), layer(x))
    conv = fastdeconv.Conv2d(w, b, stride=2, padding=1, algorithm="im2col")   # the same for Conv2d
    copy = pickle.loads(pickle.dumps(conv))
    assert repr(copy) == repr(conv) and len(pickle.dumps(conv)) < w.nbytes + b.nbytes + 2000
    np.testing.assert_array_equal(client.submit(conv, x).result(), conv(x))


def test_peak_memory_without_proc_or_resource(monkeypatch):
    """Windows has neither /proc nor the `resource` module: peak_memory() falls back to the peak working
    set there (0 where that cannot be read either, as here off Windows), never an ImportError."""
    import builtins
    import sys

    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise OSError("no /proc")
        return real_open(path, *args, **kwargs)

    assert fdask.peak_memory() > 0
    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setitem(sys.modules, "resource", None)   # `import resource` raises ImportError
    peak = fdask.peak_memory()
    assert isinstance(peak, int) and peak >= 0
    if sys.platform == "win32":
        assert peak > 0


def _worker_memory(dask_worker):
    """Peak resident memory of the worker process so far (VmHWM: from its exec on, not its parent's
    pages before it), what it has spilled to disk, and its process id."""
    import psutil

    return dict(peak=fdask.peak_memory(), now=psutil.Process().memory_info().rss, pid=os.getpid(),
                spilled=dask_worker.data.cumulative_metrics.get(("disk-write", "count"), 0))


def test_out_of_core_zarr_to_zarr(client, tmp_path):
    """Upsample a 5120² × 8 float32 image (800 MiB) to 10240² × 8 (3.1 GiB) from zarr to zarr on 2
    workers of 1 GiB each: no worker spills, pauses or restarts, each stays well under its limit,
    and the stored result is right (checked on its corners and an interior tile against numpy)."""
    zarr = pytest.importorskip("zarr")
    limit = 2**30
    assert all(w["memory_limit"] == limit for w in client.scheduler_info()["workers"].values())
    side, channels, chunk = 5120, 8, 512
    fdask.configure_workers(client)
    before = client.run(_worker_memory)
    pids = {a: m["pid"] for a, m in before.items()}
    try:
        x = da.random.default_rng(8).random((1, side, side, channels), chunks=(1, chunk, chunk, channels),
                                            dtype=np.float32)
        da.store(x, zarr_array(tmp_path / "in.zarr", x), lock=False)
        w = bilinear_weight(channels)
        b = np.linspace(-1, 1, channels, dtype=np.float32)
        y = fastdeconv.conv_transpose2d(da.from_zarr(str(tmp_path / "in.zarr")), w, b, stride=2, padding=1,
                                        groups=channels)
        assert y.nbytes >= 3 * limit
        started = time.perf_counter()
        da.store(y, zarr_array(tmp_path / "out.zarr", y), lock=False)
        seconds = time.perf_counter() - started
        memory = client.run(_worker_memory)
        peaks = ", ".join(f"{m['peak'] / 2**20:.0f} MiB" for m in memory.values())
        baseline = ", ".join(f"{m['now'] / 2**20:.0f} MiB" for m in before.values())
        print(f"\nout of core: {y.nbytes / 2**30:.2f} GiB written in {seconds:.1f} s ({y.nbytes / seconds / 1e6:.0f} "
              f"MB/s); worker memory limit {limit / 2**30:.0f} GiB; worker memory before {baseline}, peak {peaks}")
        assert {a: m["pid"] for a, m in memory.items()} == pids, "a worker restarted"
        assert all(m["spilled"] == 0 for m in memory.values()), memory
        assert all(m["peak"] < limit / 2 for m in memory.values()), memory   # under the 0.6 spill target, with room
        logs = "\n".join(line for lines in client.get_worker_logs().values() for _, line in lines)
        assert "Pausing worker" not in logs and "Unmanaged memory use is high" not in logs, logs

        stored_in, stored_out = zarr.open_array(str(tmp_path / "in.zarr")), zarr.open_array(str(tmp_path / "out.zarr"))
        assert stored_out.shape == (1, 2 * side, 2 * side, channels)
        tile = 100   # input rows/columns around each checked region; the output is exact away from a cut
        for r0, c0 in [(0, 0), (side - tile, side - tile), (side // 2 - tile // 2, 1500)]:
            window = stored_in[:, r0:r0 + tile, c0:c0 + tile]
            expected = fastdeconv.conv_transpose2d(window, w, b, stride=2, padding=1, groups=channels)
            # output rows 2·r0 + 1 .. 2·(r0 + tile) − 2 depend only on the window's rows (k4 s2 p1)
            lo_r, lo_c = (0 if r0 == 0 else 2), (0 if c0 == 0 else 2)
            hi_r = 2 * tile if r0 + tile == side else 2 * tile - 2
            hi_c = 2 * tile if c0 + tile == side else 2 * tile - 2
            got = stored_out[:, 2 * r0 + lo_r:2 * r0 + hi_r, 2 * c0 + lo_c:2 * c0 + hi_c]
            np.testing.assert_array_equal(got, expected[:, lo_r:hi_r, lo_c:hi_c])
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)   # 4 GB: not left for pytest's temporary-directory keeping
