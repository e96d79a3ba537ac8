"""Processes and signals around the threaded CPU backend.

* fork: the helper threads of the parent's pool do not exist in a forked child; the child must
  compute with fresh helpers of its own (threaded, no hang), whatever the start method.
* Ctrl-C: SIGINT during a long call raises KeyboardInterrupt within a bounded time.
* thread-count limits.

Every scenario runs in a subprocess of its own (this file run as a script) under a timeout, so that
a hang fails the test instead of blocking the run, and the pytest process never forks itself.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import fastdeconv
from fastdeconv import _config, _cpu, _params
from fastdeconv._backends import cpu as _cpu_backend

CHILD_TIMEOUT = 30   # seconds for a child's small call: generous for a loaded machine, finite for a hang


def _script(*args, timeout=240, env=None):
    """Run this file as a script; its last stdout line is JSON."""
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Start methods


def _layer_call():
    """A small layer with several tasks, so that it really uses threads when allowed."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 9, 11, 8), dtype=np.float32)
    w = rng.standard_normal((8, 3, 3, 6), dtype=np.float32)
    return fastdeconv.conv_transpose2d(x, w, stride=2, padding=1)


def _child(request_threads):
    """In the child: the thread count it reports, whether set_num_threads warned, the pool's helpers
    before and after its call (0, then its own), and the result."""
    _cpu.set_serial_flops(0)            # the small layer must use the threads here too
    threads = fastdeconv.get_num_threads()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fastdeconv.set_num_threads(request_threads)
    helpers_before = _cpu.pool_helpers()
    result = _layer_call()
    return {"threads": threads, "threads_after_request": fastdeconv.get_num_threads(),
            "warned": any(issubclass(w.category, RuntimeWarning) for w in caught),
            "helpers_before": helpers_before, "helpers_after": _cpu.pool_helpers()}, result


def _start_method_scenario(method, parent_threaded):
    """Parent: optionally a threaded call (starts the pool's helpers), then a child of `method` calls
    the same layer. Prints the child's facts and whether its result equals the parent's."""
    _cpu.set_serial_flops(0)            # the small layer must use the threads
    fastdeconv.set_num_threads(2)
    expected = _layer_call() if parent_threaded else None
    context = multiprocessing.get_context(method)
    with context.Pool(1) as pool:
        pending = pool.apply_async(_child, (2,))
        try:
            facts, result = pending.get(timeout=CHILD_TIMEOUT)
        except multiprocessing.TimeoutError:
            pool.terminate()
            print(json.dumps({"hang": True}))
            return
    if expected is None:
        expected = _layer_call()
    facts.update(hang=False, equal=bool(np.array_equal(result, expected)), parent_threads=fastdeconv.get_num_threads(),
                 parent_helpers=_cpu.pool_helpers())
    print(json.dumps(facts))


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_child_process_after_threaded_parent(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method!r} start method on this platform")
    facts = _script("start-method", method, "threaded")
    assert not facts["hang"], f"a {method} child's call did not return within {CHILD_TIMEOUT} s"
    assert facts["equal"], "the child's result differs from the parent's"
    assert facts["parent_threads"] == 2 and facts["parent_helpers"] >= 1
    # Whatever the start method: the child starts with no helper (a fork copies none of the parent's
    # threads) and its threaded call starts its own.
    assert facts == {**facts, "threads_after_request": 2, "warned": False, "helpers_before": 0}
    assert facts["helpers_after"] >= 1


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork() here")
def test_fork_child_of_a_parent_that_never_ran_threads_keeps_them():
    """No helpers in the parent: the child starts its own (and does not hang using them)."""
    facts = _script("start-method", "fork", "serial")
    assert not facts["hang"] and facts["equal"]
    assert not facts["warned"] and facts["threads_after_request"] == 2 and facts["helpers_after"] >= 1


# ---------------------------------------------------------------------------------------------
# Ctrl-C

SIGINT_AFTER = 0.5      # seconds into the call
LATENCY_BOUND = 0.5     # seconds; measured about 0.02 s (README "## Threads"); without polling it is the rest
CALL_SECONDS = 3.0      # of the call, > 2 s: so the test tells the two apart
TASK_SECONDS = 0.05     # the time of one task of the long call, set from its measured speed
IMAGE_FLOPS = 2 * 32 * 32 * 512 * 512 * 4 * 4   # the long call's layer, per image (8.6 GFLOP)


def _long_call_scenario(threads):
    """Child: size a layer to take about CALL_SECONDS here, say when the call starts, run it.
    On KeyboardInterrupt print when it arrived, then let it propagate."""
    # Python raises KeyboardInterrupt only if SIGINT was not ignored when it started; a shell's background
    # job (`pytest &`, nohup) starts with SIGINT ignored, so the child takes Python's handler explicitly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    fastdeconv.set_num_threads(threads)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 4, 4, 512), dtype=np.float32)   # many FLOPs per output byte:
    x1 = rng.standard_normal((1, 32, 32, 512), dtype=np.float32)  # 8.6 GFLOP and 8 MiB of output per image
    # The direct sum, whatever the automatic choice, so that faster algorithms do not shorten the call
    # (winograd: 17 ms an image on 2 threads here, 64 images 1.1 s against the SIGINT at 0.5 s).
    layer = fastdeconv.ConvTranspose2d(w, stride=2, padding=1, algorithm="phase")
    layer(x1)
    start = time.perf_counter()
    layer(x1)
    one_image = time.perf_counter() - start
    batch = min(128, max(2, math.ceil(CALL_SECONDS / one_image)))   # at most 1.3 GiB of arrays
    x = np.repeat(x1, batch, axis=0)
    # Tasks of about TASK_SECONDS on this build, however fast it is (an optimised build, the sanitizer
    # build, a busy machine): the signal is looked for between tasks, so the bound below follows from
    # the task time measured here, not from the machine's speed. The call is cut into tasks of at most
    # task_flops, as far as the algorithm's task rule can cut and a task keeps a few of its GEMM chunks
    # (rows of an image); one image took one_image on `threads`, so a task takes the call's time per task.
    _cpu.set_task_flops(max(1.0, IMAGE_FLOPS * TASK_SECONDS / (one_image * threads)))
    geometry = _params.resolve_conv_transpose2d(x.shape, w.shape, stride=2, padding=1)
    tasks = len(_cpu_backend.PackedLayer(w, None, x.dtype, geometry, "phase").runner(geometry).tasks)
    task_seconds = one_image * batch * threads / tasks
    print(json.dumps({"calling": time.monotonic(), "batch": batch, "one_image": one_image,
                      "task_seconds": task_seconds}), flush=True)
    try:
        layer(x)
    except KeyboardInterrupt:
        print(json.dumps({"interrupted": time.monotonic()}), flush=True)
        raise
    print(json.dumps({"returned": time.monotonic()}), flush=True)


def _readline(proc, timeout):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("threads", [1, 2], ids=["serial", "threaded"])
def test_ctrl_c_interrupts_a_long_call(threads):
    proc = subprocess.Popen([sys.executable, __file__, "long-call", str(threads)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = _readline(proc, 120)
        assert line, "the child did not start its call"
        child = json.loads(line)
        assert child["batch"] * child["one_image"] > SIGINT_AFTER + 0.5, f"the call would end before SIGINT: {child}"
        started = child["calling"]
        time.sleep(max(0.0, started + SIGINT_AFTER - time.monotonic()))
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    facts = json.loads(out.strip().splitlines()[-1])
    assert "interrupted" in facts, f"the call ran to its end despite SIGINT:\n{out}\n{err}"
    latency = facts["interrupted"] - sent
    print(f"Ctrl-C latency, {threads} thread(s): {latency * 1e3:.1f} ms")
    # The call stops once the tasks running at SIGINT end: the caller's own (it looks for signals
    # between its tasks) and, threaded, one a helper may have claimed just before that look. So on a
    # slow build (the sanitizer stage: -O1 and ASan, a task 0.4-0.5 s) the bound is two tasks' time.
    # It stays below the rest of the call (2.5 s), which an unpolled call would take.
    bound = max(LATENCY_BOUND, 2 * child["task_seconds"] + 0.1)
    if bound >= CALL_SECONDS - SIGINT_AFTER:
        pytest.skip(f"one task takes {child['task_seconds']:.2f} s cut as finely as Ctrl-C cuts: a build this slow "
                    "cannot tell polling apart from running to the end")
    assert latency < bound, f"KeyboardInterrupt came {latency:.2f} s after SIGINT (bound {bound:.2f} s)"
    assert proc.returncode == -signal.SIGINT and "KeyboardInterrupt" in err   # it propagated out of the call


# ---------------------------------------------------------------------------------------------
# Thread-count limits


@pytest.mark.parametrize("n", [2**31, 2**63, 1024, _config.MAX_THREADS + 1, -1])
def test_set_num_threads_out_of_range_is_a_value_error(n):
    with pytest.raises(ValueError, match=rf"n must be between 0 and MAX_THREADS={_config.MAX_THREADS}.*got {n}"):
        fastdeconv.set_num_threads(n)


@pytest.mark.parametrize("n", [2.0, "4", None, True, np.float32(2)])
def test_set_num_threads_non_int_is_a_type_error(n):
    with pytest.raises(TypeError, match="n must be an int"):
        fastdeconv.set_num_threads(n)
    with pytest.raises(TypeError, match="n must be an int"):
        _cpu.set_num_threads(n)


def test_max_threads_is_allowed_and_documented():
    assert _config.MAX_THREADS == max(256, os.cpu_count() or 1)
    fastdeconv.set_num_threads(_config.MAX_THREADS)
    assert fastdeconv.get_num_threads() == _config.MAX_THREADS
    np.testing.assert_array_equal(_layer_call(), _layer_call())
    assert fastdeconv._config.config()["max_threads"] == _config.MAX_THREADS


def test_omp_num_threads_beyond_the_limit_is_capped():
    facts = _script("threads", timeout=120, env={"OMP_NUM_THREADS": str(_config.MAX_THREADS * 4)})
    assert facts["threads"] == _config.MAX_THREADS


# ---------------------------------------------------------------------------------------------

if __name__ == "__main__":
    scenario, *rest = sys.argv[1:]
    if scenario == "start-method":
        _start_method_scenario(rest[0], rest[1] == "threaded")
    elif scenario == "long-call":
        _long_call_scenario(int(rest[0]))
    elif scenario == "threads":
        print(json.dumps({"threads": fastdeconv.get_num_threads()}))
