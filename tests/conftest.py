"""Fixtures that run a test through every CPU path (algorithm x GEMM ISA) and restore global state."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import fastdeconv  # noqa: E402
from fastdeconv import _cpu  # noqa: E402

from helpers import CONV_PATHS, DECONV_PATHS, GEMM_ISAS, gemm_isa  # noqa: E402


def pytest_configure(config):
    # Registered here rather than in pyproject.toml so that the tests also run from a copy of
    # tests/ against an installed wheel.
    config.addinivalue_line("markers", "metal: needs a real Metal device (macOS)")


@pytest.fixture(autouse=True)
def _restore_global_state():
    """No test may leak a forced GEMM ISA or thread count into the next one."""
    isa = _cpu.get_gemm_isa()
    threads = fastdeconv.get_num_threads()
    yield
    _cpu.set_gemm_isa(isa)
    fastdeconv.set_num_threads(threads)


@pytest.fixture(params=DECONV_PATHS, ids=[f"{a}-{i}" for a, i in DECONV_PATHS])
def deconv_path(request):
    """(algorithm, isa): the test passes algorithm= to its transposed convolutions; the GEMM ISA is
    forced for the test and restored after."""
    algorithm, isa = request.param
    with gemm_isa(isa):
        yield algorithm, isa


@pytest.fixture(params=CONV_PATHS, ids=[f"{a}-{i}" for a, i in CONV_PATHS])
def conv_path(request):
    """(algorithm, isa) for conv2d, as deconv_path."""
    algorithm, isa = request.param
    with gemm_isa(isa):
        yield algorithm, isa


@pytest.fixture(params=GEMM_ISAS)
def isa_path(request):
    """A forced GEMM ISA (the automatic algorithm choice), restored after."""
    with gemm_isa(request.param):
        yield request.param
