"""``python -m fastdeconv selftest`` (fastdeconv.selftest) where no Mac is: its checks run on the numpy
executors (fastdeconv.metal.engine.simulated), its diagnosis names a transposed weight order, and the
command says plainly that there is no Metal device, with exit status 3."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import fastdeconv
from fastdeconv import metal
from fastdeconv.__main__ import main as cli
from fastdeconv import selftest
from fastdeconv.metal import descriptors, engine, executors
from helpers import script_env

TRANSPOSE = next(c for c in selftest.CHECKS if c.name == "transpose k3x2 s2")


def test_the_checks_cover_what_the_first_mac_run_must_settle():
    checks = selftest.CHECKS
    assert any(c.kernel[0] != c.kernel[1] for c in checks if c.op == "t")                       # non-square
    assert any(c.stride[0] != c.stride[1] for c in checks if c.op == "t")                       # asymmetric strides
    assert any(1 < c.groups < c.c_in for c in checks if c.op == "t")                            # groups
    assert any(c.groups == c.c_in == c.c_out > 1 for c in checks)                               # depthwise
    assert any(c.c_in % 4 or c.c_out % 4 for c in checks)                                       # channels not x4
    assert any(c.n > 1 for c in checks) and {c.dtype for c in checks} == {"float32", "float16"}


def test_every_check_passes_on_the_simulated_backends():
    """The numpy executors run exactly the descriptors the GPU gets: every check must pass there, on MPSCNN
    kernels and fastdeconv's direct kernel alike, so that a failure on a Mac is the GPU's answer."""
    with engine.simulated():
        results = selftest.run_checks()
    failed = [f"{r.check.name} {r.path}: {r.error:.1e} > {r.tol:.0e} {r.diagnosis}" for r in results if not r.ok]
    assert not failed, failed
    engines = {r.engine.split(" (")[0] for r in results}
    assert engines == {"MPSGraph", "MPSCNNConvolutionTranspose", "MPSCNNConvolution", "direct kernel"}, engines


@pytest.mark.parametrize("order, words", [
    ("[O][kW][kH][I/g]: kernel height and width exchanged", "exchanged"),
    ("[O][kH][kW][I/g] rotated by 180 degrees", "[O][kH][kW][I/g] rotated by 180"),
])
def test_a_gpu_reading_the_weights_in_another_order_is_diagnosed(monkeypatch, order, words):
    """A simulated MPSCNN that reads the weight buffer in another order fails the check, and the report
    names the order it read."""
    original = executors.CnnRunner.__init__

    def reading_in_another_order(self, descriptor, weights, bias):
        if isinstance(descriptor.stage, descriptors.CnnKernelDescriptor):
            weights = np.ascontiguousarray(selftest.weight_orders(weights)[order])
        original(self, descriptor, weights, bias)

    monkeypatch.setattr(executors.CnnRunner, "__init__", reading_in_another_order)
    fastdeconv.clear_weight_cache()              # layers (and their kernels) made by earlier tests are cached
    try:
        with engine.simulated():
            result = selftest.run_check(TRANSPOSE, "mps-cnn")
    finally:
        fastdeconv.clear_weight_cache()
    assert not result.ok and result.engine == "MPSCNNConvolutionTranspose"
    assert result.diagnosis.startswith("MPSCNN read the weights as") and words in result.diagnosis, result.diagnosis


def test_the_report_is_a_table_with_the_environment():
    with engine.simulated():
        results = selftest.run_checks(paths=["mps-cnn"], checks=[TRANSPOSE])
    report = selftest.format_report(results, {"mps-cnn": metal.MetalStatus(True, "Metal device Test GPU")})
    lines = report.splitlines()
    assert lines[0].startswith("fastdeconv ") and "numpy" in lines[0] and "PyObjC" in lines[0]
    assert "| check | backend | runs on | dtype | result | error / tolerance | diagnosis |" in lines
    assert any(line.startswith("| transpose k3x2 s2:") and "| ok |" in line for line in lines)
    assert lines[-1] == "1 of 1 checks passed"


def test_without_metal_selftest_says_so_and_exits_3(monkeypatch, capsys):
    unavailable = metal.MetalStatus(False, "Metal needs macOS; this is Linux")
    monkeypatch.setattr(metal, "status", lambda path="mps": unavailable)
    assert cli(["selftest"]) == selftest.EXIT_NO_METAL == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert "fastdeconv selftest: no Metal device to check here" in err and "Metal needs macOS" in err
    assert "Nothing was checked; exit status 3." in err


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the command may find a Metal device")
def test_python_m_fastdeconv_selftest_off_macos():
    run = subprocess.run([sys.executable, "-m", "fastdeconv", "selftest"], capture_output=True, text=True,
                         env=script_env(), timeout=120)
    assert run.returncode == 3, run
    assert "python -m fastdeconv selftest: no Metal device to check here" in run.stderr
    assert "Metal needs macOS; this is" in run.stderr and run.stdout == ""
