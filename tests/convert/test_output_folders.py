"""Folders fastdeconv creates: weights.save_mps makes missing parents, and both it and the convert command
give the folder the permissions the umask allows (mkdtemp's 0o700 would lock other users out)."""

from __future__ import annotations

import os
import stat
import sys
from contextlib import contextmanager

import numpy as np
import pytest

from fastdeconv import weights
from fastdeconv.__main__ import main

posix_modes = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")


@contextmanager
def umask(value):
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_save_mps_creates_missing_parents(tmp_path):
    folder = tmp_path / "a" / "b" / "weights"
    written = weights.save_mps(folder, "layer", np.ones((2, 3, 3, 1), np.float32), np.zeros(2, np.float32))
    assert [p.name for p in written] == ["layer_weight.dat", "layer_bias.dat"]
    weight, bias = weights.load_mps(folder, "layer", (2, 3, 3, 1))
    assert weight.sum() == 18 and bias.shape == (2,)
    weights.save_mps(folder, "layer", np.ones(4, np.float32))        # an existing folder is fine too


@posix_modes
@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["022", "077"])
def test_save_mps_folders_follow_the_umask(tmp_path, mask):
    with umask(mask):
        weights.save_mps(tmp_path / "new" / "weights", "w", np.ones(3, np.float32))
    assert _mode(tmp_path / "new") == _mode(tmp_path / "new" / "weights") == 0o777 & ~mask


@posix_modes
@pytest.mark.parametrize("mask", [0o022, 0o027], ids=["022", "027"])
def test_convert_output_folder_follows_the_umask(tmp_path, mask, capsys):
    pytest.importorskip("onnx")
    out = tmp_path / "out"
    with umask(mask):
        assert main(["convert", str(out)]) == 0
        assert _mode(out) == 0o777 & ~mask                           # not mkdtemp's 0o700
        assert _mode(out / "manifest.json") == 0o666 & ~mask
        assert main(["convert", "--force", str(out)]) == 0           # the replacing path too
    assert _mode(out) == 0o777 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]     # no staging folder left behind
    capsys.readouterr()
