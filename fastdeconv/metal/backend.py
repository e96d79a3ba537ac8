"""Compatibility path: the Metal engine's layer state is :mod:`fastdeconv.metal.engine`, the backend
objects are in ``fastdeconv._backends.mps``. ``fastdeconv.metal.backend.simulated()`` keeps working."""

from .engine import MetalLayer, engine, graph_runner, simulated

__all__ = ["MetalLayer", "engine", "graph_runner", "simulated"]
