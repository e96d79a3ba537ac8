"""fastdeconv.dask.to_zarr: a result written all or nothing.

A failed computation never leaves a zarr array at the target path (dask's own ``to_zarr`` leaves one
that opens at its full shape and reads as fill values where blocks were never written); an existing
array survives a failed overwrite; irregular chunks and object-store URLs are refused up front.
tests/dask/test_multihost.py runs the same writer on a cluster across network namespaces.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
zarr = pytest.importorskip("zarr")

import fastdeconv  # noqa: E402
import fastdeconv.dask as fdask  # noqa: E402

WEIGHT = np.random.default_rng(1).standard_normal((3, 4, 4, 2)).astype(np.float32)


def _layer(x):
    return fastdeconv.conv_transpose2d(x, WEIGHT, stride=2, padding=1)


def _input():
    values = np.random.default_rng(0).standard_normal((2, 32, 32, 3)).astype(np.float32)
    return values, da.from_array(values, chunks=(1, 8, 8, 3))


def _failing_block(block, block_info=None):
    if block_info[None]["chunk-location"][:3] == (1, 2, 3):
        raise RuntimeError("block (1, 2, 3) failed")
    return block


def _leftovers(folder):
    return sorted(name for name in os.listdir(folder) if ".partial-" in name or ".replaced-" in name)


def test_writes_the_result(tmp_path):
    values, x = _input()
    path = fdask.to_zarr(_layer(x), tmp_path / "y.zarr")
    assert path == str(tmp_path / "y.zarr")
    written = zarr.open_array(path)
    assert written.chunks == (1, 16, 16, 2)
    np.testing.assert_array_equal(written[...], fastdeconv.conv_transpose2d(values, WEIGHT, stride=2, padding=1))
    assert _leftovers(tmp_path) == []


def test_a_failed_computation_leaves_no_array(tmp_path):
    _, x = _input()
    target = tmp_path / "y.zarr"
    with pytest.raises(RuntimeError, match=r"block \(1, 2, 3\) failed") as caught:
        fdask.to_zarr(_layer(x.map_blocks(_failing_block, dtype=x.dtype)), target)
    assert not os.path.lexists(target)
    assert _leftovers(tmp_path) == []
    if hasattr(caught.value, "add_note"):
        assert any("nothing was written to" in note for note in caught.value.__notes__)


def test_a_failed_overwrite_keeps_the_old_array(tmp_path):
    values, x = _input()
    target = tmp_path / "y.zarr"
    fdask.to_zarr(_layer(x), target)
    with pytest.raises(RuntimeError, match="failed"):
        fdask.to_zarr(_layer(x.map_blocks(_failing_block, dtype=x.dtype) * 2), target, overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(target))[...],
                                  fastdeconv.conv_transpose2d(values, WEIGHT, stride=2, padding=1))
    assert _leftovers(tmp_path) == []


def test_overwrite_replaces_and_refuses_without_it(tmp_path):
    values, x = _input()
    target = tmp_path / "y.zarr"
    fdask.to_zarr(_layer(x), target)
    # refused before anything is computed: the failing block never runs
    with pytest.raises(FileExistsError, match="overwrite=True"):
        fdask.to_zarr(_layer(x.map_blocks(_failing_block, dtype=x.dtype)), target)
    fdask.to_zarr(_layer(x) * 2, target, overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(target))[...],
                                  2 * fastdeconv.conv_transpose2d(values, WEIGHT, stride=2, padding=1))
    assert _leftovers(tmp_path) == []


def test_irregular_chunks_are_refused(tmp_path):
    _, x = _input()
    irregular = x.rechunk({1: (8, 16, 8)})
    with pytest.raises(ValueError, match=r"irregular chunks along axis 1: \(8, 16, 8\).*rechunk\(\{1: 16\}\)"):
        fdask.to_zarr(irregular, tmp_path / "y.zarr")
    assert os.listdir(tmp_path) == []
    # a smaller last chunk is regular
    fdask.to_zarr(x.rechunk({1: (12, 12, 8)}), tmp_path / "z.zarr")
    assert zarr.open_array(str(tmp_path / "z.zarr")).chunks[1] == 12


@pytest.mark.parametrize("path, error, match", [
    ("s3://bucket/y.zarr", ValueError, "object store has no rename"),
    (3, TypeError, "path must be a str or os.PathLike, got int"),
])
def test_bad_paths(path, error, match):
    _, x = _input()
    with pytest.raises(error, match=match):
        fdask.to_zarr(x, path)


def test_numpy_input_is_refused(tmp_path):
    with pytest.raises(TypeError, match="array must be a dask.array.Array, got numpy.ndarray"):
        fdask.to_zarr(np.ones((2, 2)), tmp_path / "y.zarr")
