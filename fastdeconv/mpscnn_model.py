"""Compatibility path: this module is :mod:`fastdeconv.metal.mpscnn_model` (the same module object)."""

import sys

from .metal import mpscnn_model

sys.modules[__name__] = mpscnn_model
