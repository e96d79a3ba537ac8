"""fastdeconv: fast, exact grouped 2-D transposed convolution over NHWC arrays.

``conv_transpose2d`` and ``conv2d`` take numpy arrays in the NHWC layout of MPS
images; the CPU backend runs C kernels, backend="reference" runs the plain numpy
oracle in :mod:`fastdeconv.reference`.
"""

__version__ = "0.1.0"

from . import reference
from ._api import conv2d, conv_transpose2d
from ._backends import backends
from ._config import get_num_threads, set_num_threads, show_config
from ._params import conv2d_output_shape, conv_transpose2d_output_shape
from ._plan import ConvTranspose2d

__all__ = [
    "conv_transpose2d",
    "conv2d",
    "ConvTranspose2d",
    "backends",
    "conv_transpose2d_output_shape",
    "conv2d_output_shape",
    "show_config",
    "set_num_threads",
    "get_num_threads",
    "reference",
]
