"""fastdeconv: fast, exact grouped 2-D transposed convolution over NHWC arrays.

``conv_transpose2d`` and ``conv2d`` take numpy arrays in the NHWC layout of MPS
images; the CPU backend runs C kernels, backend="reference" runs the plain numpy
oracle in :mod:`fastdeconv.reference`.
"""

from ._version import __version__


def _import_extension() -> None:
    """Import the compiled extension, or say clearly that it was never built here and how to fix it."""
    try:
        from . import _cpu  # noqa: F401
    except ImportError as error:
        import importlib.util
        import os

        if importlib.util.find_spec(f"{__name__}._cpu") is not None:
            raise   # it is there but failed to load (a missing runtime library, ...): the real error says why
        folder = os.path.dirname(os.path.abspath(__file__))
        others = sorted(name for name in os.listdir(folder) if name.startswith("_cpu.") and name not in ("_cpu.pyx", "_cpu.c"))
        built_for = f" (found {', '.join(others)}: built for another Python)" if others else ""
        raise ImportError(
            f"the compiled extension fastdeconv._cpu is missing from {folder}{built_for}: this fastdeconv "
            "is a source tree without a built extension (Python imports the fastdeconv/ folder of the "
            "current directory before any installed copy). Fix: run `pip install -e .` from the repository "
            "root, or run from another directory to use the installed package.",
            name=f"{__name__}._cpu", path=folder) from None


_import_extension()
del _import_extension

from . import reference  # noqa: E402 - after the extension check, which gives the clear error
from ._api import conv2d, conv_transpose2d
from ._bilinear import bilinear_kernel
from ._backends.registry import backends
from ._call import LayoutWarning
from ._config import get_num_threads, set_num_threads, show_config
from ._layers import Conv2d, ConvTranspose2d
from ._params import conv2d_output_shape, conv_transpose2d_output_shape
from ._torch import from_torch
from ._weight_cache import clear_weight_cache, set_weight_cache_size

__all__ = [
    "conv_transpose2d",
    "conv2d",
    "ConvTranspose2d",
    "Conv2d",
    "LayoutWarning",
    "set_weight_cache_size",
    "clear_weight_cache",
    "backends",
    "conv_transpose2d_output_shape",
    "conv2d_output_shape",
    "show_config",
    "set_num_threads",
    "get_num_threads",
    "reference",
    "from_torch",
    "bilinear_kernel",
    "__version__",
]
