"""Building small ONNX models and running ``fastdeconv convert`` on them, for the tests in
tests/convert (onnx is imported only when a model is built)."""

from __future__ import annotations

import json

import numpy as np

from fastdeconv.__main__ import main


def save_model(path, nodes, initializers, inputs, outputs, *, opset=17, domains=(), ir_version=None, elem_type=1):
    """Save a model with tensor inputs/outputs {name: shape} of ONNX element type ``elem_type`` (1:
    float); initializers {name: array} keep their dtype; ``domains`` get opset 1."""
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(name, elem_type, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, elem_type, shape) for name, shape in outputs.items()],
        [numpy_helper.from_array(np.asarray(value), name) for name, value in initializers.items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    if ir_version is not None:
        model.ir_version = ir_version
    onnx.save(model, str(path))
    return path


def run_convert(*args) -> int:
    """``fastdeconv convert ARGS`` in this process; the exit code."""
    return main(["convert", *map(str, args)])


def read_manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text())


def f32(rng, *shape, scale=0.3):
    return (scale * rng.standard_normal(shape)).astype(np.float32)
