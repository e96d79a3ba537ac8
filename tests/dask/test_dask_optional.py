"""Dask is optional: numpy use never imports it, and a dask array without it installed gets
an ImportError that names the extra. These run whether or not dask is installed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import fastdeconv


class _DaskLike:
    """Stands for a dask array: the API recognises dask collections by their type's module."""


_DaskLike.__module__ = "dask.array.core"


@pytest.fixture
def without_dask(monkeypatch):
    """Imports of dask fail (None in sys.modules makes `import dask` raise ImportError), and
    fastdeconv.dask (and the demo that imports it) is not imported yet."""
    for name in [name for name in sys.modules if name == "dask" or name.startswith("dask.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.delitem(sys.modules, "fastdeconv.dask", raising=False)
    monkeypatch.delattr(fastdeconv, "dask", raising=False)
    monkeypatch.delitem(sys.modules, "fastdeconv.bench.dask_demo", raising=False)
    if "fastdeconv.bench" in sys.modules:
        monkeypatch.delattr(sys.modules["fastdeconv.bench"], "dask_demo", raising=False)


def test_import_fastdeconv_does_not_import_dask():
    code = ("import sys, numpy as np, fastdeconv; "
            "x = np.ones((1, 3, 3, 2), np.float32); w = np.ones((2, 3, 3, 2), np.float32); "
            "fastdeconv.conv_transpose2d(x, w); fastdeconv.conv2d(x, w); fastdeconv.ConvTranspose2d(w)(x); "
            "print(sorted(m for m in sys.modules if m == 'dask' or m.startswith(('dask.', 'distributed', 'zarr', "
            "'fastdeconv.dask'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


@pytest.mark.parametrize("call", ["conv_transpose2d", "conv2d", "ConvTranspose2d"])
def test_a_dask_array_without_dask_names_the_extra(without_dask, call):
    w = np.ones((2, 3, 3, 2), np.float32)
    function = fastdeconv.ConvTranspose2d(w) if call == "ConvTranspose2d" else getattr(fastdeconv, call)
    args = (_DaskLike(),) if call == "ConvTranspose2d" else (_DaskLike(), w)
    with pytest.raises(ImportError, match=r'pip install "dask\[array\]>=2025.1" "distributed>=2025.1" "zarr>=3.0.8"'):
        function(*args)


def test_numpy_calls_are_unchanged_without_dask(without_dask):
    """numpy in, numpy out, with dask unimportable."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 2)).astype(np.float32)
    y = fastdeconv.conv_transpose2d(x, w, stride=2)
    assert type(y) is np.ndarray and y.shape == (2, 11, 9, 2)
    np.testing.assert_array_equal(fastdeconv.ConvTranspose2d(w, stride=2)(x), y)
    assert "fastdeconv.dask" not in sys.modules


def test_dask_demo_without_dask_names_the_extra(without_dask, capsys):
    from fastdeconv.__main__ import main

    assert main(["dask-demo"], prog="fastdeconv") == 1
    err = capsys.readouterr().err
    assert 'pip install "dask[array]>=2025.1" "distributed>=2025.1" "zarr>=3.0.8"' in err
    assert 'pip install -e ".[dask]"' in err and "not on PyPI" in err
