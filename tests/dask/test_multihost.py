"""A Dask cluster across simulated hosts: faults survived, or reported, never a complete-looking zarr.

Each "host" is a Linux network namespace (``ip netns``) joined to the others by a veth pair to a
bridge in a hub namespace: the scheduler at 10.77.0.1, two workers at .2 and .3, the client at .4,
talking TCP over that network (nothing listens where another host could reach it otherwise). They
share the file system, as machines share NFS. The client (multihost_job.py) runs a zarr-to-zarr job
with fastdeconv.dask.to_zarr:

* a worker host killed mid-run (SIGKILL to its whole process group: a machine gone): the job
  finishes on the other worker, Dask recomputing what the lost one held, and every output tile
  equals the in-memory call;
* a block that exceeds its worker's memory limit: the nanny kills the worker on each retry, the job
  raises distributed's KilledWorker, and no zarr is left at the output path.

Needs root and iproute2 (``ip netns``), and the dask extra; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
pytest.importorskip("distributed")

import fastdeconv  # noqa: E402
from helpers import assert_close  # noqa: E402

JOB = Path(__file__).with_name("multihost_job.py")
SCHEDULER, WORKERS, CLIENT = "10.77.0.1", ("10.77.0.2", "10.77.0.3"), "10.77.0.4"
PORT = 8786
SHAPE, CHUNKS = (4, 256, 256, 8), (1, 64, 64, 8)   # 64 blocks
WAIT_S = 300   # a bound for hangs only: on a busy machine the job takes seconds to a minute


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _namespaces_available() -> str | None:
    """None if network namespaces can be made here, otherwise why not."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "needs root (ip netns)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    probe = f"fdprobe-{uuid.uuid4().hex[:8]}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as error:
        return f"ip netns add failed: {error.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


class Hosts:
    """Namespaces NAME-hub (a bridge) and NAME-<host>, each host with one veth to the bridge; the
    processes started on them, each in a process group of its own, killed at close()."""

    def __init__(self, addresses: dict):
        self.prefix = f"fd{uuid.uuid4().hex[:6]}"
        self.namespaces, self.processes = [], {}
        try:
            hub = self._add("hub")
            _ip("-n", hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", hub, "link", "set", "br0", "up")
            for i, (host, address) in enumerate(addresses.items()):
                namespace = self._add(host)
                _ip("link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name", f"p{i}",
                    "netns", hub)
                _ip("-n", hub, "link", "set", f"p{i}", "master", "br0")
                _ip("-n", hub, "link", "set", f"p{i}", "up")
                _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
                _ip("-n", namespace, "link", "set", "eth0", "up")
                _ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def _add(self, host):
        namespace = f"{self.prefix}-{host}"
        _ip("netns", "add", namespace)
        self.namespaces.append(namespace)
        return namespace

    def start(self, host, *command, log=None, **kwargs):
        """command on host, in a new session (its process group is the host's processes)."""
        process = subprocess.Popen(["ip", "netns", "exec", f"{self.prefix}-{host}", *command],
                                   start_new_session=True, stdout=kwargs.pop("stdout", log),
                                   stderr=subprocess.STDOUT if log else None, **kwargs)
        self.processes[host] = process
        return process

    def kill(self, host):
        """SIGKILL to every process of host (a worker and its nanny's children alike)."""
        process = self.processes[host]
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def close(self):
        for host in list(self.processes):
            self.kill(host)
        for namespace in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        self.namespaces = []


_why_not = _namespaces_available()
pytestmark = pytest.mark.skipif(_why_not is not None, reason=f"multi-host Dask tests: {_why_not}")


def _python(module, *args):
    return (sys.executable, "-m", module, *args)


@pytest.fixture
def cluster(tmp_path, request):
    """The four hosts, the scheduler and two workers running (their logs in tmp_path); request.param:
    the workers' options."""
    hosts = Hosts({"scheduler": SCHEDULER, "w1": WORKERS[0], "w2": WORKERS[1], "client": CLIENT})
    logs = []
    try:
        def logged(name):
            logs.append((name, tmp_path / f"{name}.log"))
            return open(logs[-1][1], "w")

        hosts.start("scheduler", *_python("distributed.cli.dask_scheduler", "--host", SCHEDULER, "--port",
                                          str(PORT), "--no-dashboard"), log=logged("scheduler"))
        for host, address in zip(("w1", "w2"), WORKERS):
            hosts.start(host, *_python("distributed.cli.dask_worker", f"tcp://{SCHEDULER}:{PORT}", "--host",
                                       address, "--nthreads", "1", "--no-dashboard", *request.param),
                        log=logged(host))
        yield hosts
    finally:
        hosts.close()
        for name, path in logs:   # shown by pytest when the test fails (captured output)
            print(f"---- {name} log\n{path.read_text()[-4000:]}")


def _inputs(tmp_path):
    values = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    source = tmp_path / "input.zarr"
    zarr.create_array(str(source), shape=SHAPE, chunks=CHUNKS, dtype=np.float32)[...] = values
    gate = tmp_path / "gate"
    gate.mkdir()
    return values, source, tmp_path / "output.zarr", gate


def _run_job(hosts, source, target, gate, mode):
    return hosts.start("client", *(sys.executable, str(JOB), f"tcp://{SCHEDULER}:{PORT}", str(source), str(target),
                                   str(gate), mode), stdout=subprocess.PIPE, text=True)


def _outcome(job):
    out, _ = job.communicate(timeout=WAIT_S)
    assert job.returncode == 0, f"the client job failed (exit {job.returncode}): {out}"
    return json.loads(out.strip().splitlines()[-1])


def _leftovers(folder):
    return sorted(name for name in os.listdir(folder) if ".partial-" in name or ".replaced-" in name)


@pytest.mark.parametrize("cluster", [("--no-nanny",)], indirect=True)
def test_a_killed_worker_host_is_survived(cluster, tmp_path):
    values, source, target, gate = _inputs(tmp_path)
    job = _run_job(cluster, source, target, gate, "kill")
    deadline = time.monotonic() + WAIT_S
    # the gate holds every block after the first GATE_AFTER until w1 is dead: the kill is mid-run
    while sum(name.startswith("done-") for name in os.listdir(gate)) < 16:
        assert job.poll() is None, f"the job ended before the kill: {job.communicate()[0]}"
        assert time.monotonic() < deadline, "the job never got 16 blocks through"
        time.sleep(0.02)
    state = json.loads((gate / "state.json").read_text()) if (gate / "state.json").exists() else {}
    done_at_kill = sum(name.startswith("done-") for name in os.listdir(gate))
    killed_at = time.monotonic()
    cluster.kill("w1")
    (gate / "open").touch()
    outcome = _outcome(job)
    print(f"killed w1 at {done_at_kill}/64 first-stage blocks; scheduler's view just before: {state}; "
          f"outcome: {outcome}; {time.monotonic() - killed_at:.1f} s after the kill")

    assert outcome["result"] == "finished", outcome
    assert outcome["workers_at_start"] == 2 and outcome["workers_at_end"] == 1, outcome
    expected = fastdeconv.conv_transpose2d(values, np.random.default_rng(7).standard_normal((8, 4, 4, 1))
                                           .astype(np.float32), stride=2, padding=1, groups=8)
    written = zarr.open_array(str(target))
    assert written.shape == expected.shape and written.chunks == (1, 128, 128, 8)
    tiles = 0
    for n in range(4):
        for i in range(0, 512, 128):
            for j in range(0, 512, 128):
                assert_close(written[n, i:i + 128, j:j + 128], expected[n, i:i + 128, j:j + 128], np.float32, 16,
                             tile=(n, i, j))
                tiles += 1
    assert tiles == 64
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("cluster", [("--memory-limit", "300MB")], indirect=True)
def test_a_worker_over_its_memory_limit_fails_the_job_cleanly(cluster, tmp_path):
    _, source, target, gate = _inputs(tmp_path)
    outcome = _outcome(_run_job(cluster, source, target, gate, "memory"))
    print(f"outcome: {outcome}")

    assert outcome["result"] == "raised", outcome
    assert outcome["error_type"] == "distributed.scheduler.KilledWorker", outcome
    # the task named is whichever of this job's tasks lost its workers first: the ballast block's, or a
    # halo task of the convolution that was running beside it (dask's timing decides)
    assert "workers died" in outcome["error"], outcome
    assert "first_stage" in outcome["error"] or "conv_transpose2d" in outcome["error"], outcome
    if sys.version_info >= (3, 11):
        assert any("nothing was written to" in note for note in outcome["notes"]), outcome
    assert not os.path.lexists(target)
    assert _leftovers(tmp_path) == []
