"""``fastdeconv dask-demo``: upsample a zarr image with dask, out of core, and report the throughput.

Needs the dask extra (dask[array], distributed, zarr); ``--help`` says what it does.
"""

from __future__ import annotations

import math
import os

import numpy as np

import fastdeconv
import fastdeconv.dask as fdask

import dask
import dask.array as da

__all__ = ["demo", "bilinear_upsampling_weight"]


def bilinear_upsampling_weight(channels: int, dtype=np.float32) -> np.ndarray:
    """The depthwise 2× bilinear upsampling kernel (C, 4, 4, 1), for stride=2, padding=1, groups=C:
    the outer product of (1, 3, 3, 1) / 4 (FCN's initialisation of its upsampling layers)."""
    taps = np.array([0.25, 0.75, 0.75, 0.25])
    weight = np.zeros((channels, 4, 4, 1))
    weight[..., 0] = np.outer(taps, taps)
    return weight.astype(dtype)


def _demo_parser(prog):
    import argparse

    parser = argparse.ArgumentParser(
        prog=prog, description="Upsample a synthetic image 2× (bilinear, a depthwise conv_transpose2d k4 s2 p1) "
        "from zarr to zarr with dask, with a progress bar, and report the throughput. The input is made first "
        "(random values, written to DIR/input.zarr); the output is DIR/output.zarr. Both are removed at the end "
        "unless --keep.",
        epilog="Larger than memory: the output of `--size 24000 24000 --channels 3` is 25.7 GiB (the input 6.4 "
        "GiB), more than a 16 or 24 GiB machine holds; about 33 GiB of disk. Process workers with memory limits: "
        "add `--workers 2 --memory-limit 2GiB`.")
    parser.add_argument("--size", type=int, nargs=2, default=(2048, 2048), metavar=("H", "W"),
                        help="input height and width (default 2048 2048; the output is twice each)")
    parser.add_argument("--channels", type=int, default=3, help="channels (default 3)")
    parser.add_argument("--chunk", type=int, default=512, help="input chunk side (default 512; output: twice)")
    parser.add_argument("--dtype", choices=("float32", "float16", "float64"), default="float32")
    parser.add_argument("--workers", type=int, default=0,
                        help="process workers of a dask.distributed LocalCluster (default 0: dask's threaded "
                             "scheduler in this process)")
    parser.add_argument("--threads-per-worker", type=int, default=None,
                        help="dask threads per worker (default: cores // workers)")
    parser.add_argument("--memory-limit", default="auto", help="per worker, e.g. 2GiB (default: distributed's)")
    parser.add_argument("--dir", default=None, help="where the zarr arrays go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep input.zarr and output.zarr")
    return parser


def demo(argv=None, prog="fastdeconv dask-demo") -> int:
    """``python -m fastdeconv dask-demo``: see ``--help``."""
    import shutil
    import tempfile
    import time

    args = _demo_parser(prog).parse_args(argv)
    height, width = args.size
    if min(height, width, args.channels, args.chunk) < 1 or args.workers < 0:
        raise SystemExit(f"{prog}: error: sizes, --channels and --chunk must be >= 1 and --workers >= 0")
    folder = args.dir or tempfile.mkdtemp(prefix="fastdeconv-dask-demo-")
    os.makedirs(folder, exist_ok=True)
    source, target = os.path.join(folder, "input.zarr"), os.path.join(folder, "output.zarr")
    dtype = np.dtype(args.dtype)
    client = cluster = None
    try:
        if args.workers:
            from distributed import Client, LocalCluster, progress

            threads = args.threads_per_worker or max(1, fdask._cores() // args.workers)
            cluster = LocalCluster(n_workers=args.workers, threads_per_worker=threads, processes=True,
                                   memory_limit=args.memory_limit, dashboard_address=None)
            client = Client(cluster)
            per_worker = fdask.configure_workers(client)
            print(f"LocalCluster: {args.workers} process workers x {threads} threads, memory limit "
                  f"{args.memory_limit}; fastdeconv threads per worker: {sorted(set(per_worker.values()))}")
        else:
            from dask.diagnostics import ProgressBar

            threads = fdask._cores()
            print(f"dask's threaded scheduler: {threads} threads, 1 fastdeconv thread per block")
        chunks = (1, args.chunk, args.chunk, args.channels)
        x = da.random.default_rng(0).random((1, height, width, args.channels), chunks=chunks, dtype=np.float32)
        started = time.perf_counter()
        _store(x.astype(dtype), source, client, threads, progress if client else ProgressBar)
        print(f"input:  {source} {x.shape} {dtype}, {x.nbytes * dtype.itemsize / 4 / 2**30:.2f} GiB, written in "
              f"{time.perf_counter() - started:.1f} s")

        weight = bilinear_upsampling_weight(args.channels, dtype)
        y = fastdeconv.conv_transpose2d(da.from_zarr(source), weight, stride=2, padding=1, groups=args.channels)
        print(f"output: {target} {y.shape} {y.dtype}, {y.nbytes / 2**30:.2f} GiB in {math.prod(y.numblocks)} blocks "
              f"of {tuple(max(c) for c in y.chunks)}")
        started = time.perf_counter()
        _store(y, target, client, threads, progress if client else ProgressBar)
        seconds = time.perf_counter() - started
        pixels = y.shape[1] * y.shape[2]
        print(f"upsampled in {seconds:.1f} s: {y.nbytes / seconds / 1e6:.0f} MB/s written, "
              f"{pixels / seconds / 1e6:.1f} Mpixel/s")
        peak = fdask.peak_memory() if client is None else max(client.run(fdask.peak_memory).values())
        print(f"peak memory of {'this process' if client is None else 'a worker'}: {peak / 2**20:.0f} MiB "
              f"(the output is {y.nbytes / 2**20:.0f} MiB)")

        # one tile against the in-memory call (output rows/columns away from the tile's cut edges)
        import zarr

        tile = min(64, height, width)
        window = zarr.open_array(source)[:, :tile, :tile]
        expected = fastdeconv.conv_transpose2d(window, weight, stride=2, padding=1, groups=args.channels)
        rows, cols = (2 * tile if tile == height else 2 * tile - 2), (2 * tile if tile == width else 2 * tile - 2)
        got = zarr.open_array(target)[:, :rows, :cols]
        error = float(np.max(np.abs(got.astype(np.float64) - expected[:, :rows, :cols])))
        print(f"checked: the top-left {rows}x{cols} output pixels against the in-memory call, max |difference| "
              f"{error:.3g}")
        return 0 if error <= 10 * np.finfo(dtype).eps else 1   # values in [0, 1): a few ulps at most
    finally:
        if client is not None:
            client.close()
            cluster.close()
        if not args.keep:
            shutil.rmtree(source, ignore_errors=True)
            shutil.rmtree(target, ignore_errors=True)
            if args.dir is None:
                shutil.rmtree(folder, ignore_errors=True)


def _store(array, path, client, threads, progress_bar):
    """The array into a new zarr array at path, chunk for chunk (uncompressed: random values do not
    compress), with a progress bar; all or nothing, as fastdeconv.dask.to_zarr writes (a staging array
    renamed into place once complete)."""
    with fdask._staged_zarr(path, array.shape, fdask._zarr_chunks(array), array.dtype, overwrite=True,
                            compressors=None) as target:
        store = da.store(array, target, lock=False, compute=False)
        if client is None:
            previous = fastdeconv.get_num_threads()
            fastdeconv.set_num_threads(1)   # dask runs `threads` blocks at a time: 1 fastdeconv thread each
            try:
                with progress_bar():
                    dask.compute(store, scheduler="threads", num_workers=threads)
            finally:
                fastdeconv.set_num_threads(previous)
        else:
            future = client.compute(store)
            progress_bar(future)
            future.result()
            print()
