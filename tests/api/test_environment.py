"""Environment variables are read once, at import, never on the call path; a bad value warns."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import GEMM_ISAS

_SCRIPT = ("import warnings, numpy as np; warnings.simplefilter('always'); import fastdeconv; "
           "print(fastdeconv._cpu.get_gemm_isa()); "
           "print(fastdeconv.conv_transpose2d(np.ones((1, 2, 2, 2), np.float32), np.ones((2, 3, 3, 4), np.float32)).sum())")


def _run(value):
    env = {**os.environ, "FASTDECONV_ISA": value}
    return subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=120,
                          check=True)


@pytest.mark.parametrize("isa", GEMM_ISAS)
def test_isa_variable_forces_the_path(isa):
    proc = _run(isa)
    assert proc.stdout.split() == [isa, "288.0"]
    assert "RuntimeWarning" not in proc.stderr


@pytest.mark.parametrize("value", ["bogus", "AVX512 ", "sse"])
def test_bad_isa_variable_warns_once_and_keeps_the_best_path(value):
    proc = _run(value)
    best = GEMM_ISAS[-1]
    assert proc.stdout.split() == [best, "288.0"]
    assert proc.stderr.count("RuntimeWarning") == 1 and "FASTDECONV_ISA" in proc.stderr and repr(value.strip()) in proc.stderr
