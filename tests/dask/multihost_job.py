"""The client side of tests/dask/test_multihost.py, run in its own network namespace ("host").

    python multihost_job.py SCHEDULER INPUT.zarr OUTPUT.zarr GATE_DIR {kill,memory}

Reads INPUT.zarr (N, H, W, C), passes every block through a stage that marks its progress in
GATE_DIR, upsamples it with fastdeconv (depthwise conv_transpose2d k4 s2 p1) and writes OUTPUT.zarr with
fastdeconv.dask.to_zarr, on the cluster at SCHEDULER. Prints one JSON line: the outcome, the time, and
the cluster's state when the test killed a worker.

kill: once GATE_AFTER blocks are through the first stage, further blocks wait for GATE_DIR/open,
which the test creates after it has killed a worker, so the kill always falls mid-run, with most
blocks still to compute. memory: one block allocates far more than a worker's memory limit, so its
nanny kills the worker, again on each retry, until the scheduler gives up (KilledWorker).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import numpy as np

GATE_AFTER = 16
BALLAST_BYTES = 1 << 30   # the memory mode's block: far above the workers' limit
WAIT_LIMIT_S = 300


def first_stage(block, block_info=None, gate=None, ballast_block=None):
    """block unchanged; a progress marker per block, and the gate (kill) or the ballast (memory)."""
    location = block_info[None]["chunk-location"]
    index = int(np.ravel_multi_index(location, block_info[None]["num-chunks"]))
    deadline = time.monotonic() + WAIT_LIMIT_S
    if index == ballast_block:
        ballast = np.ones(BALLAST_BYTES // 8)   # touched: resident memory, which the nanny watches
        while time.monotonic() < deadline:     # held until the nanny kills this worker
            time.sleep(0.05)
        raise RuntimeError(f"the nanny did not kill the worker holding {ballast.nbytes} bytes")
    if ballast_block is None:
        while (not os.path.exists(os.path.join(gate, "open"))
               and sum(name.startswith("done-") for name in os.listdir(gate)) >= GATE_AFTER):
            if time.monotonic() > deadline:
                raise RuntimeError("the test never opened the gate")
            time.sleep(0.02)
    time.sleep(0.05)
    open(os.path.join(gate, f"done-{index}"), "w").close()
    return block


def watch(client, gate, stop):
    """Keep the scheduler's view of every worker (keys held, tasks processing) in GATE_DIR/state.json,
    for the test to read when it kills a worker."""
    while not stop.is_set():
        try:
            held, processing = client.has_what(), client.processing()
            state = {address: {"keys": len(held.get(address, ())), "processing": len(processing.get(address, ()))}
                     for address in set(held) | set(processing)}
            with open(os.path.join(gate, "state.tmp"), "w") as file:
                json.dump(state, file)
            os.replace(os.path.join(gate, "state.tmp"), os.path.join(gate, "state.json"))
        except Exception:   # the scheduler is busy with a dead worker: try again
            pass
        stop.wait(0.05)


def main(scheduler, source, target, gate, mode):
    import dask.array as da
    from distributed import Client

    import fastdeconv
    import fastdeconv.dask as fdask

    with Client(scheduler, timeout="120s") as client:
        client.wait_for_workers(2, timeout=120)
        fdask.configure_workers(client, threads=1)
        x = da.from_zarr(source)
        staged = x.map_blocks(first_stage, dtype=x.dtype, gate=gate,
                              ballast_block=5 if mode == "memory" else None)
        channels = x.shape[-1]
        weight = np.random.default_rng(7).standard_normal((channels, 4, 4, 1)).astype(x.dtype)
        y = fastdeconv.conv_transpose2d(staged, weight, stride=2, padding=1, groups=channels)
        stop = threading.Event()
        watcher = threading.Thread(target=watch, args=(client, gate, stop), daemon=True)
        watcher.start()
        started = time.perf_counter()
        outcome = {"mode": mode, "blocks": int(np.prod(y.numblocks)), "workers_at_start": len(client.nthreads())}
        try:
            fdask.to_zarr(y, target, compressors=None)
            outcome["result"] = "finished"
        except Exception as error:   # what the job returned: reported for the test to check
            outcome["result"] = "raised"
            outcome["error_type"] = f"{type(error).__module__}.{type(error).__name__}"
            outcome["error"] = str(error)
            outcome["notes"] = list(getattr(error, "__notes__", []))
        outcome["seconds"] = time.perf_counter() - started
        stop.set()
        watcher.join()
        outcome["workers_at_end"] = len(client.nthreads())
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
