"""``python -m fastdeconv bench --contention``: call latency on a busy machine.

For every suite case (fastdeconv.bench.SUITE) and every load below, one ConvTranspose2d plan is
called alternately at 1 thread and at the default thread count (``set_num_threads(0)``) for about
``--seconds`` (at least MIN_CALLS calls of each), and the table reports the p50 of the 1-thread
calls, the p50 and p99 of the default-threads calls, and the ratios it bounds:
p50(default) / p50(1 thread) (target <= 1.25) and p99(default) / p50(default) (target <= 3).
Interleaving the two (in random order) puts them under the same load, however it drifts. "paired" is
the median over adjacent pairs of (default-threads time / 1-thread time): where other processes make
the times bimodal (a call either runs or waits out another process's time slice), the two medians can
land on different modes by chance, and the paired ratio is the steadier estimate of the same thing. The p99 of
the 1-thread calls is shown too: on a machine busy with other processes even a 1-thread call waits
for the CPU now and then, which bounds what any thread count can reach.

Loads (each started before its cases and stopped after them):

* ``none``: nothing else running (besides whatever the machine already runs);
* ``1 busy`` / ``3 busy``: that many plain Python busy loops in subprocesses;
* ``bench 2T``: a second process calling our own suite plans at 2 threads in a loop.

"after ORT" (when onnxruntime and onnx import): an onnxruntime session of the same layer (on our default
thread count; its idle threads spin for about 90 ms after a run) is run, then immediately our
default-threads call is timed; compared with our default-threads call alone in the same cell (blocks
alternate), target within 10 %. The same with a session whose threads do not spin
("session.intra_op.allow_spinning" = "0") shows how much of a slowdown is the spinning: on 2 cores a
spinning thread holds one of them, whatever we do.

The numbers are wall times of single calls (time.perf_counter), so they include everything the
caller waits for: waking helper threads, helpers the OS has not scheduled, the end of the call.
This is a measuring tool, not a test: nothing here asserts a time.

Runs from the installed package or as a script (``python path/to/contention.py``) against whichever
fastdeconv is importable, so two builds can be compared with the same code.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from .suites import ORT_SPIN_SECONDS

#: The latency bounds this tool reports against.
P50_RATIO_TARGET = 1.25
P99_RATIO_TARGET = 3.0
AFTER_ORT_TARGET = 1.10
#: Each mode (1 thread, default threads) is called at least this many times per cell, so that p99 means
#: something even for the slowest case.
MIN_CALLS = 60
#: ... and a cell never takes more than this many times --seconds (the slowest case under load).
MAX_SECONDS_FACTOR = 6

BUSY_LOOP = "while True: pass"

#: The "bench 2T" load: our own suite's plans at 2 threads, called in turn forever (public API only,
#: so it runs against any build).
BENCH_LOAD = """
import fastdeconv
from fastdeconv.bench import SUITE
fastdeconv.set_num_threads(2)
work = []
for case in SUITE:
    x, w, b = case.arrays()
    plan = fastdeconv.ConvTranspose2d(w, b, **case.kwargs)   # SUITE: transposed convolutions
    work.append((plan, x, plan(x)))
print("ready", flush=True)
while True:
    for plan, x, out in work:
        plan(x, out=out)
"""

LOADS = ("none", "1 busy", "3 busy", "bench 2T")


class Load:
    """Background processes that keep the machine busy while the cases run."""

    def __init__(self, name):
        self.name = name
        self.processes = []

    def __enter__(self):
        if self.name.endswith(" busy"):
            count = int(self.name.split()[0])
            self.processes = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(count)]
        elif self.name == "bench 2T":
            process = subprocess.Popen([sys.executable, "-c", BENCH_LOAD], stdout=subprocess.PIPE, text=True)
            self.processes = [process]
            if process.stdout.readline().strip() != "ready":   # its plans are built and it is calling them
                raise RuntimeError(f"the {self.name!r} load process did not start (exit status {process.wait()})")
        time.sleep(0.2 if self.processes else 0)   # the scheduler sees them running
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()
        if self.processes and self.processes[0].stdout is not None:
            self.processes[0].stdout.close()
        return False


def _layer_class(case):
    """The plan class of the case's operation (ConvTranspose2d for the transposed suite)."""
    import fastdeconv

    return case.functions()[1] if hasattr(case, "functions") else fastdeconv.ConvTranspose2d


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_cell(case, seconds):
    """(1-thread times, default-threads times) of one case's plan, alternating, in seconds."""
    import fastdeconv

    x, w, b = case.arrays()
    plan = _layer_class(case)(w, b, **case.kwargs)
    out = plan(x)

    def call():
        plan(x, out=out)

    single, default = [], []
    # Which of the two goes first is random (fixed seed): a fixed alternation can fall in step with the
    # scheduler's time slices and put every call of one mode into the other processes' turn.
    order = [(1, 0) if first else (0, 1) for first in np.random.default_rng(0).integers(0, 2, 997)]
    try:
        for threads in (1, 0):   # bind both runners and warm up
            fastdeconv.set_num_threads(threads)
            call()
            call()
        start = time.perf_counter()
        deadline, limit = start + seconds, start + MAX_SECONDS_FACTOR * seconds
        while True:
            now = time.perf_counter()
            if now >= limit or (now >= deadline and min(len(single), len(default)) >= MIN_CALLS):
                break
            for threads in order[len(single) % len(order)]:
                fastdeconv.set_num_threads(threads)
                (single if threads == 1 else default).append(_timed(call))
    finally:
        fastdeconv.set_num_threads(0)
    return np.array(single), np.array(default)


def _ort_session(case, w, b, spinning=True):
    """An onnxruntime session of the case's layer on as many threads as our default (onnxruntime's own
    default counts physical cores, ignoring a CPU affinity mask). With spinning (onnxruntime's default)
    its idle threads spin after a run; without ("session.intra_op.allow_spinning" = "0") they sleep."""
    import onnx
    import onnxruntime as ort

    import fastdeconv
    from fastdeconv.bench.suites import _onnx_model

    options = ort.SessionOptions()
    options.intra_op_num_threads = fastdeconv.get_num_threads()   # the machine's threads, as ours
    options.inter_op_num_threads = 1
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(_onnx_model(onnx, case, w, b).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def measure_after_ort(case, seconds, block=15):
    """Times (s) of the default-threads plan call: alone (ORT_SPIN_SECONDS, the time onnxruntime's idle
    threads spin, after any onnxruntime run), right after a run of an onnxruntime session whose threads
    spin, and right after one whose threads sleep; blocks of `block` calls of each kind take turns."""
    import fastdeconv

    x, w, b = case.arrays()
    sessions = [_ort_session(case, w, b, spinning) for spinning in (True, False)]
    feed = {"x": np.ascontiguousarray(x.transpose(0, 3, 1, 2))}
    plan = _layer_class(case)(w, b, **case.kwargs)
    out = plan(x)
    for session in sessions:
        session.run(None, feed)

    def call():
        plan(x, out=out)

    alone, after_spinning, after_sleeping = [], [], []
    start = time.perf_counter()
    deadline, limit = start + seconds, start + MAX_SECONDS_FACTOR * seconds
    while True:
        now = time.perf_counter()
        if now >= limit or (now >= deadline and len(alone) >= MIN_CALLS):
            break
        time.sleep(ORT_SPIN_SECONDS)
        for _ in range(block):
            alone.append(_timed(call))
        for session, times in zip(sessions[::-1], (after_sleeping, after_spinning)):
            for _ in range(block):
                session.run(None, feed)
                times.append(_timed(call))
    return np.array(alone), np.array(after_spinning), np.array(after_sleeping)


def _ort_available():
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except Exception as error:  # noqa: BLE001 - a broken peer is skipped with its reason
        return f"{type(error).__name__}: {error}"
    return ""


def _ms(seconds):
    return f"{seconds * 1e3:.3f}"


def run_contention(cases=None, seconds=1.0, loads=LOADS, ort=True, stdout=None, stderr=None) -> int:
    """Measure and print the markdown tables; returns 0 (the targets are reported, not enforced)."""
    import fastdeconv
    from fastdeconv.bench import CASES, SUITE

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    selected = [CASES[name] for name in dict.fromkeys(cases)] if cases else list(SUITE)
    fastdeconv.set_num_threads(0)
    threads = fastdeconv.get_num_threads()
    limits = None
    try:   # numpy's BLAS threads (the arrays' setup) must not spin on the timed cores
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(limits=1, user_api="blas")
    except ImportError:
        pass
    worst = {}
    try:
        print(f"fastdeconv {fastdeconv.__version__} from {fastdeconv.__file__}; default threads: {threads}; "
              f"{seconds:g} s per cell (>= {MIN_CALLS} calls of each mode); times in ms", file=stdout)
        for load in loads:
            print(f"bench --contention: load {load!r}", file=stderr, flush=True)
            rows = []
            with Load(load):
                for case in selected:
                    single, default = measure_cell(case, seconds)
                    p50_1, p50, p99 = np.median(single), np.median(default), np.percentile(default, 99)
                    pairs = min(len(single), len(default))
                    paired = np.median(default[:pairs] / single[:pairs])
                    rows.append((case.name, p50_1, p50, p99, len(default), np.percentile(single, 99), paired))
            print(f"\n### load: {load}\n", file=stdout)
            print("| case | 1T p50 | 1T p99 | default p50 | default p99 | p50 / 1T p50 | p99 / p50 | paired | calls |",
                  file=stdout)
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|", file=stdout)
            for name, p50_1, p50, p99, calls, p99_1, paired in rows:
                r50, r99 = p50 / p50_1, p99 / p50
                mark50 = " !" if r50 > P50_RATIO_TARGET else ""
                mark99 = " !" if r99 > P99_RATIO_TARGET else ""
                print(f"| {name} | {_ms(p50_1)} | {_ms(p99_1)} | {_ms(p50)} | {_ms(p99)} | {r50:.2f}{mark50} | {r99:.2f}{mark99} "
                      f"| {paired:.2f} | {calls} |", file=stdout)
            worst[load] = (max(r[2] / r[1] for r in rows), max(r[3] / r[2] for r in rows))
            stdout.flush()
        reason = _ort_available() if ort else "not requested"
        if reason:
            print(f"\nafter ORT: skipped ({reason})", file=stdout)
        else:
            print("bench --contention: after an onnxruntime call", file=stderr, flush=True)
            print("\n### right after an onnxruntime call (default threads, no load)\n", file=stdout)
            print("| case | alone p50 | after ORT p50 | after / alone | after non-spinning ORT p50 | after / alone |",
                  file=stdout)
            print("|---|---:|---:|---:|---:|---:|", file=stdout)
            ratios, sleeping_ratios = [], []
            for case in selected:
                alone, after, after_sleeping = (np.median(t) for t in measure_after_ort(case, seconds))
                ratios.append(after / alone)
                sleeping_ratios.append(after_sleeping / alone)
                marks = [" !" if r[-1] > AFTER_ORT_TARGET else "" for r in (ratios, sleeping_ratios)]
                print(f"| {case.name} | {_ms(alone)} | {_ms(after)} | {ratios[-1]:.2f}{marks[0]} | {_ms(after_sleeping)} "
                      f"| {sleeping_ratios[-1]:.2f}{marks[1]} |", file=stdout)
            worst["after ORT"] = (max(ratios), None)
            worst["after non-spinning ORT"] = (max(sleeping_ratios), None)
    finally:
        if limits is not None:
            limits.restore_original_limits()
    print(f"\nworst per load (targets: p50 / 1T p50 <= {P50_RATIO_TARGET}, p99 / p50 <= {P99_RATIO_TARGET}, "
          f"after ORT / alone <= {AFTER_ORT_TARGET}; \"!\" marks a miss):", file=stdout)
    for load, (a, b) in worst.items():
        print(f"- {load}: " + (f"after / alone {a:.2f}" if b is None else f"p50 / 1T p50 {a:.2f}, p99 / p50 {b:.2f}"),
              file=stdout)
    return 0


if __name__ == "__main__":   # a script against whichever fastdeconv is importable (e.g. an older build)
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--loads", default=",".join(LOADS))
    parser.add_argument("--no-ort", action="store_true")
    args = parser.parse_args()
    sys.exit(run_contention([c for c in args.cases.split(",") if c] or None, args.seconds,
                            [name for name in args.loads.split(",") if name], not args.no_ort))
