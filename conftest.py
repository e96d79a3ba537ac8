"""pytest's configuration for the docstring Examples (``pytest --doctest-modules fastdeconv/...``, as
.ci/run's docs stage runs them): an Example that needs an optional package (torch, dask, onnx) is
skipped where that package is missing, so that the doctests depend on nothing optional.
fastdeconv/dask.py itself cannot be imported without dask: name it only where dask is installed (.ci/run
does). The tests in tests/ have their own conftest.py."""

from __future__ import annotations

import importlib

import pytest

# module of the docstrings -> the optional packages its Examples import
_NEEDS = {
    "fastdeconv._torch": ("torch",),
    "fastdeconv.dask": ("dask", "distributed", "zarr"),
    "fastdeconv.convert.converter": ("onnx",),
    "fastdeconv.convert.verify": ("onnx",),
}


def _missing(packages) -> list[str]:
    """The packages that cannot be imported (an import, not a lookup: a package that is there but fails
    to import counts as missing, as it would for the Example)."""
    missing = []
    for name in packages:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not isinstance(item, pytest.DoctestItem):
            continue
        module = item.dtest.name.rsplit(".", 1)[0] if item.dtest is not None else ""
        for prefix, packages in _NEEDS.items():
            if module == prefix or item.name.startswith(prefix + "."):
                missing = _missing(packages)
                if missing:
                    item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)} (optional)"))
