"""Reading an ONNX graph for ``fastdeconv convert``: constants (through Identity, Cast and Reshape),
static shapes, the conv layers (Conv / ConvTranspose [-> BatchNormalization] [-> activation]) and the
nodes left to the app, each with the reason.

onnx is imported only inside the functions (``import fastdeconv`` never needs it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ConversionError", "OnnxGraph", "Chain", "Skipped", "ACTIVATIONS", "CONV_OPS"]

#: Activations recorded after a conv (+ BN): ONNX op -> attribute defaults (ONNX Operators.md).
ACTIVATIONS = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Softplus": {}, "Clip": {},
    "LeakyRelu": {"alpha": 0.01}, "Elu": {"alpha": 1.0}, "HardSigmoid": {"alpha": 0.2, "beta": 0.5},
    "Selu": {"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}, "PRelu": {},
}
CONV_OPS = {"Conv": False, "ConvTranspose": True}   # op -> transposed
#: Ops whose output is computed here when every input is constant (weights stored through them).
_FOLDABLE = ("Identity", "Cast", "Reshape")


class ConversionError(Exception):
    """Bad input (file, graph, node): the message names it. No output is written."""


@dataclass
class Chain:
    """One conv layer: the Conv/ConvTranspose node, the BatchNormalization folded into it (or None) and
    the activation recorded after it (or None)."""

    conv: object                 # onnx NodeProto
    batchnorm: object = None
    activation: object = None

    @property
    def output(self) -> str:
        """The tensor the layer's weights compute: the BatchNormalization's output when one is folded."""
        return (self.batchnorm or self.conv).output[0]

    @property
    def final_output(self) -> str:
        """The tensor after the recorded activation (what the next layer or skip connection reads)."""
        return (self.activation or self.batchnorm or self.conv).output[0]


@dataclass
class Skipped:
    """A node that is not part of a converted layer: the app runs it (or --strict refuses the model)."""

    node: object
    reason: str

    def entry(self) -> dict:
        return {"node": self.node.name, "op": self.node.op_type, "reason": self.reason,
                "inputs": list(self.node.input), "outputs": list(self.node.output)}


class OnnxGraph:
    """An ONNX model with its constants, static shapes, producers and consumers indexed."""

    def __init__(self, model, path):
        from onnx import numpy_helper

        self.path, self.model, self.graph = Path(path), model, model.graph
        self.initializers = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        self.shapes, self.elem_types = {}, {}
        for info in [*self.graph.input, *self.graph.value_info, *self.graph.output]:
            tensor_type = info.type.tensor_type
            self.elem_types[info.name] = tensor_type.elem_type
            if tensor_type.HasField("shape"):
                self.shapes[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                               for d in tensor_type.shape.dim)
        self.consumers, self.producer = {}, {}
        for node in self.graph.node:
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(node)
            for name in node.output:
                if name:
                    self.producer[name] = node
        self.graph_outputs = [o.name for o in self.graph.output]
        self.graph_inputs = [i for i in self.graph.input if i.name not in self.initializers]
        self._constants = {}     # tensor name -> (array, root initializer/Constant name) or None

    @classmethod
    def load(cls, path) -> "OnnxGraph":
        import onnx

        path = Path(path)
        if not path.is_file():
            raise ConversionError(f"model file {path} does not exist")
        try:
            model = onnx.load(str(path))
            onnx.checker.check_model(model)
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as error:  # onnx raises DecodeError, ValidationError, InferenceError, ...
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise ConversionError(f"cannot read {path} as an ONNX model: {type(error).__name__}: "
                                  f"{first_line}") from None
        return cls(model, path)

    # ---------------------------------------------------------------------------------------- basics

    def attributes(self, node) -> dict:
        from onnx import helper

        values = {}
        for attribute in node.attribute:
            value = helper.get_attribute_value(attribute)
            values[attribute.name] = value.decode() if isinstance(value, bytes) else value
        return values

    @staticmethod
    def describe(node) -> str:
        return f"node {node.name!r} ({node.op_type})"

    def sole_consumer(self, tensor):
        consumers = self.consumers.get(tensor, [])
        if len(consumers) == 1 and tensor not in self.graph_outputs:
            return consumers[0]
        return None

    # ------------------------------------------------------------------------------------- constants

    def constant(self, name):
        """The value of tensor ``name`` if it is constant, else None: an initializer, a Constant node's
        value, or Identity / Cast / Reshape of constants (torch's exporter stores equal tensors once and
        names the second use through an Identity)."""
        found = self._resolve(name)
        return None if found is None else found[0]

    def constant_source(self, name):
        """The initializer or Constant output a constant tensor comes from (through Identity, Cast,
        Reshape), or None."""
        found = self._resolve(name)
        return None if found is None else found[1]

    def _resolve(self, name):
        if not name:
            return None
        if name in self._constants:
            return self._constants[name]
        self._constants[name] = None    # a cycle (invalid ONNX anyway) resolves to "not constant"
        result = None
        if name in self.initializers:
            result = (self.initializers[name], name)
        elif name in self.producer:
            result = self._fold(self.producer[name], name)
        self._constants[name] = result
        return result

    def _fold(self, node, name):
        from onnx import helper, numpy_helper

        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            attribute = node.attribute[0] if len(node.attribute) == 1 else None
            if attribute is None:
                return None
            if attribute.name == "value":
                return numpy_helper.to_array(attribute.t), name
            if attribute.name in ("value_float", "value_floats"):
                return np.asarray(helper.get_attribute_value(attribute), dtype=np.float32), name
            if attribute.name in ("value_int", "value_ints"):
                return np.asarray(helper.get_attribute_value(attribute), dtype=np.int64), name
            return None
        if node.op_type not in _FOLDABLE or node.domain not in ("", "ai.onnx") or node.output[0] != name:
            return None
        inputs = [self._resolve(i) for i in node.input]
        if not inputs or any(i is None for i in inputs):
            return None
        value, root = inputs[0]
        attributes = self.attributes(node)
        try:
            if node.op_type == "Cast":
                value = value.astype(helper.tensor_dtype_to_np_dtype(attributes["to"]))
            elif node.op_type == "Reshape":
                shape = [int(v) for v in inputs[1][0].ravel()]
                if not attributes.get("allowzero", 0):   # 0 copies the input's dimension
                    shape = [value.shape[i] if v == 0 else v for i, v in enumerate(shape)]
                value = value.reshape(shape)
        except (KeyError, ValueError, TypeError, IndexError):
            return None
        return value, root

    def is_constant_node(self, node) -> bool:
        """A node computed here from constants (Constant, or Identity/Cast/Reshape of constants): it
        runs nowhere, its value is part of what uses it."""
        if node.op_type == "Constant":
            return True
        return bool(node.output) and all(self._resolve(o) is not None for o in node.output if o)

    # ----------------------------------------------------------------------------------------- layers

    def analyse(self):
        """(chains, skipped): the conv layers found, and every other node that is not a constant, with
        the reason it is left to the app."""
        chains, reasons = [], {}
        for node in self.graph.node:
            if node.op_type not in CONV_OPS or node.domain not in ("", "ai.onnx"):
                continue
            problem = self._unconvertible(node)
            if problem is not None:
                reasons[id(node)] = problem
                continue
            chain = Chain(node)
            following = self.sole_consumer(node.output[0])
            if following is not None and following.op_type == "BatchNormalization" \
                    and following.input[0] == node.output[0] and self._unfoldable(following) is None:
                chain.batchnorm = following
                following = self.sole_consumer(following.output[0])
            if following is not None and following.op_type in ACTIVATIONS \
                    and following.input[0] == chain.output and self._activation_constants(following):
                chain.activation = following
            chains.append(chain)
        used = {id(n) for c in chains for n in (c.conv, c.batchnorm, c.activation) if n is not None}
        converted = {id(c.conv) for c in chains}
        skipped = []
        for node in self.graph.node:
            if id(node) in used or self.is_constant_node(node):
                continue
            reason = reasons.get(id(node)) or self._skip_reason(node, converted)
            skipped.append(Skipped(node, reason))
        return chains, skipped

    def _unconvertible(self, conv):
        """Why a Conv/ConvTranspose cannot be converted, or None."""
        weight = self.constant(conv.input[1]) if len(conv.input) > 1 else None
        if weight is None:
            return (f"its weight {conv.input[1] if len(conv.input) > 1 else ''!r} is not constant (not an "
                    "initializer, a Constant, or an Identity/Cast/Reshape of one)")
        if weight.ndim != 4:
            return f"its weight has shape {weight.shape}: only 2-D convolutions (4-D weights) are converted"
        if len(conv.input) > 2 and conv.input[2] and self.constant(conv.input[2]) is None:
            return f"its bias {conv.input[2]!r} is not constant"
        shape = self.shapes.get(conv.input[0])
        if shape is None or len(shape) != 4 or any(v is None for v in shape[1:]):
            return (f"its input {conv.input[0]!r} has no static NCHW shape (C, H, W known), got "
                    f"{None if shape is None else tuple('?' if v is None else v for v in shape)}")
        return None

    def _unfoldable(self, batchnorm):
        """Why this BatchNormalization (directly after a conv) cannot be folded into it, or None."""
        attributes = self.attributes(batchnorm)
        if attributes.get("training_mode", 0):
            return "training_mode=1 (only an inference-mode BatchNormalization can be folded)"
        if attributes.get("spatial", 1) != 1:
            return f"spatial={attributes['spatial']} (only per-channel statistics can be folded)"
        if len([o for o in batchnorm.output if o]) > 1:
            return "its running mean/var outputs are used (only inference mode can be folded)"
        for index, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
            if index >= len(batchnorm.input) or self.constant(batchnorm.input[index]) is None:
                name = batchnorm.input[index] if index < len(batchnorm.input) else ""
                return f"its {what} {name!r} is not constant"
        return None

    def _activation_constants(self, node) -> bool:
        """Clip's bounds and PRelu's slope must be constants to be recorded."""
        if node.op_type == "Clip":
            return all(self.constant(name) is not None for name in node.input[1:] if name)
        if node.op_type == "PRelu":
            return self.constant(node.input[1]) is not None
        return True

    def _skip_reason(self, node, converted) -> str:
        if node.op_type == "BatchNormalization":
            source = self.producer.get(node.input[0])
            unfoldable = self._unfoldable(node)
            if source is None:
                where = f"its input {node.input[0]!r} is a graph input, not a convolution's output"
            elif source.op_type in CONV_OPS and id(source) not in converted:
                where = f"{self.describe(source)} before it is not converted"
            elif source.op_type in CONV_OPS and unfoldable is None:
                where = (f"the output of {self.describe(source)} is also read by "
                         f"{len(self.consumers.get(node.input[0], [])) - 1} other node(s) or is a graph "
                         "output, which must not see the BatchNormalization")
            elif source.op_type in CONV_OPS:
                where = unfoldable
            else:
                where = f"its input comes from {self.describe(source)}, not from a Conv/ConvTranspose"
            return f"BatchNormalization not folded: {where}"
        if node.op_type in ACTIVATIONS:
            source = self.producer.get(node.input[0])
            after = "a graph input" if source is None else self.describe(source)
            return f"activation after {after}, not directly after a converted layer"
        if node.domain not in ("", "ai.onnx"):
            return f"{node.op_type} of domain {node.domain!r} is not a convolution of the ONNX domain"
        return f"{node.op_type} is not a convolution"

    @staticmethod
    def skipped_counts(skipped) -> str:
        """'Concat×6, Relu×6' (most frequent first, then by name)."""
        counts = Counter(s.node.op_type for s in skipped)
        return ", ".join(f"{op}×{n}" for op, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
