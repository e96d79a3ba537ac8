"""``fastdeconv convert``: ONNX conv layers to MPS weight files, verified (:mod:`.converter`), with the
graph reading (:mod:`.graph`) and the verification (:mod:`.verify`). A tool on top of the library:
nothing in the library imports it. The names here are those the converter module had."""

from .converter import (
    DEFAULT_MODEL,
    EXIT_CODES,
    INSTALL_HINT,
    NETWORK_SEED,
    VERIFY_OPSET,
    Conversion,
    LayerResult,
    StrictModeError,
    convert,
    format_table,
    main,
)
from .graph import ACTIVATIONS, CONV_OPS, DEFAULT_SIZES, Chain, ConversionError, OnnxGraph, parse_input_shape
from .verify import (
    RELATIVE_TOLERANCE,
    NetworkCheck,
    layer_runner,
    max_error,
    reference_ops,
    tolerance_for,
    verify_directory,
    verify_network,
)

__all__ = ["main", "convert", "verify_directory", "Conversion", "ConversionError", "StrictModeError",
           "LayerResult", "NetworkCheck", "DEFAULT_MODEL", "INSTALL_HINT", "EXIT_CODES", "RELATIVE_TOLERANCE",
           "DEFAULT_SIZES", "parse_input_shape"]
