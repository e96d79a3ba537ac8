"""Weight layouts, BatchNorm folding and the settings of Apple's MPSCNN convolution kernels.

Our layouts (see :func:`fastdeconv.conv_transpose2d` and :func:`fastdeconv.conv2d`):

* transposed convolution: ``(C_in, kH, kW, C_out // groups)``
* convolution:            ``(C_out, kH, kW, C_in // groups)``  (MPSCNNConvolution's OHWI)

One namespace for four concerns, each in its own module:

* :mod:`.layouts`: ours <-> torch, ONNX, MXNet, TensorFlow (``from_torch``, ``to_tf``, ...);
* :mod:`.batchnorm`: ``fold_batchnorm``, an inference-mode BatchNorm folded into the weight and bias;
* :mod:`.mpscnn`: the rotated weight and the offsets / destination size that make MPSCNNConvolution(Transpose)
  compute ``conv2d`` / ``conv_transpose2d`` (``to_mpscnn_transpose``, ``mpscnn_transpose_params``, ...);
* :mod:`.files`: the raw little-endian float32 ``.dat`` files (``save_mps``, ``load_mps``).
"""

from .batchnorm import fold_batchnorm
from .files import load_mps, save_mps
from .layouts import from_mxnet, from_onnx, from_tf, from_torch, to_mxnet, to_onnx, to_tf, to_torch
from .mpscnn import (
    MPSCNNConvolutionParams,
    MPSCNNTransposeParams,
    MPSCNNUnsupportedError,
    mpscnn_conv_params,
    mpscnn_transpose_params,
    to_mpscnn_transpose,
)

__all__ = [
    "from_torch", "to_torch", "from_onnx", "to_onnx", "from_mxnet", "to_mxnet", "from_tf", "to_tf",
    "to_mpscnn_transpose", "MPSCNNTransposeParams", "mpscnn_transpose_params",
    "MPSCNNConvolutionParams", "mpscnn_conv_params", "MPSCNNUnsupportedError",
    "fold_batchnorm", "save_mps", "load_mps",
]
