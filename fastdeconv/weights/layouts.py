"""Weight layouts: ours and the frameworks'.

Ours (see :func:`fastdeconv.conv_transpose2d` and :func:`fastdeconv.conv2d`):

* transposed convolution: ``(C_in, kH, kW, C_out // groups)``
* convolution:            ``(C_out, kH, kW, C_in // groups)``  (MPSCNNConvolution's OHWI)

Framework layouts:

============================  ===============================  ==========================
framework                     transposed (``transposed=True``)  convolution
============================  ===============================  ==========================
torch / ONNX / MXNet / Caffe  ``(C_in, C_out/g, kH, kW)``       ``(C_out, C_in/g, kH, kW)``
TensorFlow                    ``(kH, kW, C_out, C_in)``, g = 1  ``(kH, kW, C_in/g, C_out)``
============================  ===============================  ==========================

so ``from_torch`` is ``.transpose(0, 2, 3, 1)`` and ``from_tf`` is ``.transpose(3, 0, 1, 2)`` for both
kinds of layer.
"""

from __future__ import annotations

import numpy as np

from .. import _params

__all__ = ["from_torch", "to_torch", "from_onnx", "to_onnx", "from_mxnet", "to_mxnet", "from_tf", "to_tf"]


def four_d(weight, name="weight") -> np.ndarray:
    """``weight`` as an array, which must be 4-D."""
    array = np.asarray(weight)
    if array.ndim != 4:
        raise ValueError(f"{name} must be 4-D, got ndim={array.ndim} shape={array.shape}")
    return array


def transposed_by_group(weight, groups: int) -> np.ndarray:
    """Our transposed-convolution weight (C_in, kH, kW, Cog) viewed as (groups, C_in/groups, kH, kW, Cog).

    Group g's input channels are rows g·Cig .. (g+1)·Cig − 1 and its output channels g·Cog + o, so the
    view puts every group's block on its own leading index.
    """
    weight = four_d(weight)
    _params.check_groups(groups)
    in_channels, kernel_h, kernel_w, out_per_group = weight.shape
    if in_channels % groups:
        raise ValueError(f"weight's C_in={in_channels} (shape {weight.shape}) is not divisible by groups={groups}")
    return weight.reshape(groups, in_channels // groups, kernel_h, kernel_w, out_per_group)


def _permuted(weight, axes) -> np.ndarray:
    return np.ascontiguousarray(four_d(weight).transpose(axes))


def from_torch(weight, transposed: bool) -> np.ndarray:
    """torch weight -> ours, as a C-contiguous copy: ``.transpose(0, 2, 3, 1)``.

    ``ConvTranspose2d.weight`` (C_in, C_out/g, kH, kW) -> (C_in, kH, kW, C_out/g);
    ``Conv2d.weight`` (C_out, C_in/g, kH, kW) -> (C_out, kH, kW, C_in/g). ``transposed`` names the kind of
    layer; the permutation is the same for both. ``from_onnx`` and ``from_mxnet`` are this function
    (ONNX and MXNet store weights in torch's layouts).

    Examples
    --------
    >>> import numpy as np
    >>> from fastdeconv import weights
    >>> torch_weight = np.zeros((8, 4, 3, 3), np.float32)           # ConvTranspose2d: (C_in, C_out, kH, kW)
    >>> weights.from_torch(torch_weight, transposed=True).shape
    (8, 3, 3, 4)
    """
    del transposed  # same axes for both kinds; the argument keeps call sites explicit
    return _permuted(weight, (0, 2, 3, 1))


def to_torch(weight, transposed: bool) -> np.ndarray:
    """Ours -> torch: ``.transpose(0, 3, 1, 2)``; the inverse of :func:`from_torch`.

    Examples
    --------
    >>> import numpy as np
    >>> from fastdeconv import weights
    >>> w = np.arange(8 * 3 * 3 * 4, dtype=np.float32).reshape(8, 3, 3, 4)
    >>> bool(np.array_equal(weights.from_torch(weights.to_torch(w, transposed=True), transposed=True), w))
    True
    """
    del transposed
    return _permuted(weight, (0, 3, 1, 2))


#: ONNX ConvTranspose.W is (C, M/group, kH, kW) and Conv.W is (M, C/group, kH, kW): torch's layouts.
from_onnx, to_onnx = from_torch, to_torch
#: MXNet Deconvolution.weight is (C_in, num_filter/num_group, kH, kW), Convolution.weight is OIHW: torch's.
from_mxnet, to_mxnet = from_torch, to_torch


def from_tf(weight, transposed: bool) -> np.ndarray:
    """TensorFlow filter -> ours: ``.transpose(3, 0, 1, 2)``.

    ``tf.nn.conv2d_transpose`` filters (kH, kW, C_out, C_in) -> (C_in, kH, kW, C_out) (no groups in TF);
    ``tf.nn.conv2d`` filters HWIO (kH, kW, C_in/g, C_out) -> (C_out, kH, kW, C_in/g).

    Examples
    --------
    >>> import numpy as np
    >>> from fastdeconv import weights
    >>> tf_filter = np.zeros((4, 4, 16, 32), np.float32)            # conv2d_transpose: (kH, kW, C_out, C_in)
    >>> weights.from_tf(tf_filter, transposed=True).shape
    (32, 4, 4, 16)
    """
    del transposed
    return _permuted(weight, (3, 0, 1, 2))


def to_tf(weight, transposed: bool) -> np.ndarray:
    """Ours -> TensorFlow: ``.transpose(1, 2, 3, 0)``; the inverse of :func:`from_tf`.

    Examples
    --------
    >>> import numpy as np
    >>> from fastdeconv import weights
    >>> weights.to_tf(np.zeros((32, 4, 4, 16), np.float32), transposed=True).shape
    (4, 4, 16, 32)
    """
    del transposed
    return _permuted(weight, (1, 2, 3, 0))
