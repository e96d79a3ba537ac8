"""Compatibility path, for code written against earlier releases: the names this module had, now in
:mod:`fastdeconv.metal.engine` (the per-layer GPU state, ``simulated()``) and the backend objects of
``backend="mps"`` / ``"mps-cnn"`` (use ``fastdeconv.ConvTranspose2d(..., backend="mps")``)."""

from .._backends.mps import MPS, MPS_CNN, MetalBackend
from .engine import GRAPH_CACHE_SIZE, MetalLayer, engine, graph_runner, simulated

__all__ = ["MPS", "MPS_CNN", "MetalBackend", "GRAPH_CACHE_SIZE", "MetalLayer", "engine", "graph_runner", "simulated"]
