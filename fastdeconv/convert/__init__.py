"""``fastdeconv convert``: ONNX conv layers to MPS weight files, verified (:mod:`.converter`), with the
graph reading (:mod:`.graph`) and the verification (:mod:`.verify`). A tool on top of the library:
nothing in the library imports it."""

from .converter import (
    DEFAULT_MODEL,
    EXIT_CODES,
    INSTALL_HINT,
    RELATIVE_TOLERANCE,
    Conversion,
    ConversionError,
    LayerResult,
    NetworkCheck,
    StrictModeError,
    convert,
    main,
    verify_directory,
)

__all__ = ["main", "convert", "verify_directory", "Conversion", "ConversionError", "StrictModeError",
           "LayerResult", "NetworkCheck", "DEFAULT_MODEL", "INSTALL_HINT", "EXIT_CODES", "RELATIVE_TOLERANCE"]
