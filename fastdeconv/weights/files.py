"""The raw ``.dat`` files an MPSCNNConvolutionDataSource reads: ``NAME_weight.dat`` and ``NAME_bias.dat``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["save_mps", "load_mps"]


def _dat_paths(directory, name):
    directory = Path(directory)
    return directory / f"{name}_weight.dat", directory / f"{name}_bias.dat"


def save_mps(directory, name, weight, bias=None):
    """Write ``name_weight.dat`` (and ``name_bias.dat`` unless bias is None) into ``directory``.

    Raw little-endian float32, C order, no header -- what ``weight.astype('<f4').tofile(path)`` writes and
    what an MPSCNNConvolutionDataSource hands to MPS. ``weight`` must already be in the layout the app
    expects (e.g. :func:`fastdeconv.weights.to_mpscnn_transpose`). ``directory`` is created (parents too)
    when missing, with the permissions the umask allows. Returns the paths written.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from fastdeconv import weights
    >>> folder = tempfile.mkdtemp()
    >>> paths = weights.save_mps(folder, "deconv1", np.ones((4, 3, 3, 2)), np.zeros(2))
    >>> [os.path.basename(p) for p in paths]
    ['deconv1_weight.dat', 'deconv1_bias.dat']
    >>> os.path.getsize(paths[0])                                    # 72 float32 values
    288
    """
    weight_path, bias_path = _dat_paths(directory, name)
    weight_path.parent.mkdir(parents=True, exist_ok=True)   # mode 0o777 & ~umask, like mkdir -p
    _write_float32(weight_path, weight)
    written = [weight_path]
    if bias is not None:
        bias = np.asarray(bias)
        if bias.ndim != 1:
            raise ValueError(f"bias must be 1-D, got shape {bias.shape}")
        _write_float32(bias_path, bias)
        written.append(bias_path)
    elif os.path.exists(bias_path):
        os.remove(bias_path)   # a stale bias from an earlier save would be loaded as this layer's
    return written


def _write_float32(path, array):
    """Write the array as raw little-endian float32. Through a Python file, which raises OSError on a
    short write (a full disk, a file size limit) where ``ndarray.tofile`` may leave a short file silently."""
    data = np.ascontiguousarray(array, dtype="<f4").reshape(-1)   # 1-D: memoryview casts any size
    with open(path, "wb") as file:
        file.write(memoryview(data).cast("B"))


def load_mps(directory, name, weight_shape):
    """Read what :func:`save_mps` wrote: (weight with ``weight_shape``, bias or None), float32.

    Raises ValueError naming the file if its size is not ``4·prod(weight_shape)`` bytes (or, for the bias,
    a multiple of 4).

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from fastdeconv import weights
    >>> folder = tempfile.mkdtemp()
    >>> _ = weights.save_mps(folder, "layer", np.arange(6.0).reshape(1, 1, 2, 3), np.ones(3))
    >>> w, b = weights.load_mps(folder, "layer", (1, 1, 2, 3))
    >>> w.dtype, w.shape, b
    (dtype('float32'), (1, 1, 2, 3), array([1., 1., 1.], dtype=float32))
    """
    weight_path, bias_path = _dat_paths(directory, name)
    weight_shape = tuple(int(v) for v in weight_shape)
    expected = 4 * int(np.prod(weight_shape))
    size = os.path.getsize(weight_path)
    if size != expected:
        raise ValueError(f"{weight_path} has {size} bytes, but weight_shape={weight_shape} needs {expected} "
                         "(raw float32)")
    weight = np.fromfile(weight_path, dtype="<f4").reshape(weight_shape)
    bias = None
    if bias_path.exists():
        size = os.path.getsize(bias_path)
        if size % 4:
            raise ValueError(f"{bias_path} has {size} bytes, not a whole number of float32 values")
        bias = np.fromfile(bias_path, dtype="<f4")
    return weight, bias
