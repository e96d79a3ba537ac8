"""asv benchmarks: the overhead of fastdeconv on dask arrays, against the in-memory call.

Two layers, each on the same data in memory and as a dask array of large chunks (row bands of the whole
width): a compute-bound one (64 -> 64 channels, k4 s2 p1: the phase GEMM) and a memory-bound one (2x
bilinear upsampling of 16 channels, depthwise). ``where`` is "in-memory" (the function on numpy, the
machine's threads), "threads" (dask's threaded scheduler, one fastdeconv thread per block, as many
blocks at a time as cores) or a dask.distributed LocalCluster of process workers, "1x2" (1 worker of
2 threads) or "2x1" (2 workers of 1 thread), fastdeconv's threads set by configure_workers. On a
cluster x lives on the workers already and the result stays there (persisted), so the time is the
computation's, not the transfer of x or of the result to this process. Skipped without the dask
extra (``pip install -e ".[dask]"``).
"""

import itertools

import numpy as np

import fastdeconv


def _bilinear(channels):
    taps = np.array([0.25, 0.75, 0.75, 0.25])
    weight = np.zeros((channels, 4, 4, 1))
    weight[..., 0] = np.outer(taps, taps)
    return weight.astype(np.float32)


# name -> (x shape, weight maker, arguments, chunk rows)
LAYERS = {
    "phase-64ch-768": ((1, 768, 768, 64), lambda rng: (rng.standard_normal((64, 4, 4, 64)) / 32).astype(np.float32),
                       dict(stride=2, padding=1), 96),
    "bilinear-16ch-1536": ((1, 1536, 1536, 16), lambda rng: _bilinear(16), dict(stride=2, padding=1, groups=16),
                           192),
}
_CLUSTERS = {"1x2": (1, 2), "2x1": (2, 1)}


class DaskOverhead:
    """conv_transpose2d on a dask array of row bands vs the in-memory call (ratios: the overhead)."""

    params = [list(LAYERS), ["in-memory", "threads", "1x2", "2x1"]]
    param_names = ["layer", "where"]
    timeout = 300
    number = 1
    repeat = (3, 10, 120.0)

    def setup(self, layer, where):
        try:
            import dask.array as da
            import distributed  # noqa: F401
        except ImportError:
            raise NotImplementedError("needs the dask extra")
        from fastdeconv.dask import configure_workers

        shape, make_weight, self.kwargs, rows = LAYERS[layer]
        chunks = (1, rows, shape[2], shape[3])
        # the same values everywhere; made by dask, so that a cluster's workers make their blocks themselves
        x = da.random.default_rng(0).standard_normal(shape, chunks=chunks, dtype=np.float32)
        rng = np.random.default_rng(0)
        self.weight = make_weight(rng)
        self.bias = rng.standard_normal(self.weight.shape[3] * self.kwargs.get("groups", 1)).astype(np.float32)
        self.counter = itertools.count(1)
        self.client = self.cluster = None
        self.where = where
        if where == "in-memory":
            self.x = x.compute(scheduler="sync")
        elif where == "threads":
            self.threads = fastdeconv.get_num_threads()
            fastdeconv.set_num_threads(1)
            self.xd = x.persist(scheduler="sync")
        elif where in _CLUSTERS:
            from distributed import Client, LocalCluster, wait

            workers, threads = _CLUSTERS[where]
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                                        dashboard_address=None, memory_limit=0)
            self.client = Client(self.cluster)
            configure_workers(self.client)
            self.xd = self.client.persist(x)
            wait(self.xd)
            self._dask_call()   # the workers import fastdeconv.dask and pack the weights once

    def teardown(self, layer, where):
        if getattr(self, "client", None) is not None:
            self.client.close()
            self.cluster.close()
        if getattr(self, "where", None) == "threads":
            fastdeconv.set_num_threads(self.threads)

    def _dask_call(self):
        # a bias of its own each time: a new graph (new keys), so that nothing is reused from the last run
        bias = self.bias + np.float32(next(self.counter) * 1e-3)
        y = fastdeconv.conv_transpose2d(self.xd, self.weight, bias, **self.kwargs)
        if self.client is None:
            y.persist(scheduler="threads")
        else:
            from distributed import wait

            wait(self.client.persist(y))

    def time_conv_transpose2d(self, layer, where):
        if self.where == "in-memory":
            fastdeconv.conv_transpose2d(self.x, self.weight, self.bias, **self.kwargs)
        else:
            self._dask_call()
