"""Reading an ONNX graph for ``fastdeconv convert``: constants (through Identity, Cast, Reshape,
Transpose, Squeeze and Unsqueeze), static shapes (symbolic heights and widths fixed first, see
:meth:`OnnxGraph.load`), the conv layers (Conv / ConvTranspose, then the per-channel constant
Add/Sub/Mul/Div and inference-mode BatchNormalization nodes folded into it, then an activation) and the
nodes left to the app, each with the reason.

onnx is imported only inside the functions (``import fastdeconv`` never needs it).
"""

from __future__ import annotations

import operator
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["ConversionError", "OnnxGraph", "Chain", "Skipped", "ACTIVATIONS", "CONV_OPS", "DEFAULT_SIZES",
           "DEFAULT_VERIFY_ELEMENTS", "parse_input_shape"]

#: Activations recorded after a conv (+ BN): ONNX op -> attribute defaults (ONNX Operators.md).
ACTIVATIONS = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Softplus": {}, "Clip": {},
    "LeakyRelu": {"alpha": 0.01}, "Elu": {"alpha": 1.0}, "HardSigmoid": {"alpha": 0.2, "beta": 0.5},
    "Selu": {"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}, "PRelu": {},
}
CONV_OPS = {"Conv": False, "ConvTranspose": True}   # op -> transposed
#: Ops whose output is computed here when every input is constant (weights stored through them).
_FOLDABLE = ("Identity", "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze")
#: Elementwise ops with a per-channel constant that fold into the conv before them: y' = scale·y + shift.
AFFINE_OPS = ("Add", "Sub", "Mul", "Div")
#: The sizes tried, in order, for a symbolic height and width of a graph input: the first that shape
#: inference accepts (no error, no negative size, no empty image) is used to verify the conversion.
DEFAULT_SIZES = (*range(64, 128), *range(128, 1025, 32))


def _shape_text(shape) -> str:
    return "?" if shape is None else "x".join("?" if v is None else str(v) for v in shape)


def _type_name(value) -> str:
    """The ONNX element type of a constant's numpy array, as a phrase ("STRING values")."""
    from onnx import helper

    if value.dtype.kind in "OUS":
        return "STRING values"
    try:
        return f"{helper.tensor_dtype_to_string(helper.np_dtype_to_tensor_dtype(value.dtype))[len('TensorProto.'):]} values"
    except (KeyError, ValueError, TypeError):
        return f"{value.dtype} values"


def _error_text(error) -> str:
    if isinstance(error, str):
        return error
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else repr(error)}"


def _declared_shape(info):
    """A graph input's declared shape, symbolic dimensions as None; None without a shape."""
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    # a negative size (paddle2onnx writes -1 for a dynamic batch) is symbolic too
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                 for d in tensor_type.shape.dim)


#: The most elements any one tensor of a verification run may have (16 MiB of float32; onnx.reference's
#: Conv makes a copy of its input per kernel tap): over it, a layer is verified at a smaller input size and
#: the whole network is not run (``max_verify_elements``).
DEFAULT_VERIFY_ELEMENTS = 2 ** 22
#: ONNX element types fed as random floats: TensorProto.FLOAT, FLOAT16, DOUBLE.
FLOAT_TYPES = {1: np.float32, 10: np.float16, 11: np.float64}


def _static_image(shape) -> bool:
    """An NCHW shape whose C, H and W are known."""
    return shape is not None and len(shape) == 4 and all(v is not None for v in shape[1:])


def parse_input_shape(text) -> tuple:
    """``"NAME:N,C,H,W"`` -> (NAME, (N, C, H, W)); the name may contain colons (the last one splits).
    ValueError with the expected form otherwise."""
    name, colon, dims = text.rpartition(":")
    try:
        shape = tuple(int(v) for v in dims.split(","))
    except ValueError:
        shape = ()
    if not colon or not name or not shape:
        raise ValueError(f"--input-shape {text!r}: expected NAME:N,C,H,W (the graph input's name, a colon, "
                         "comma-separated sizes), e.g. --input-shape x:1,3,640,640")
    return name, shape


def _checked_input_shapes(input_shapes, declared, path) -> dict:
    """{name: shape} of the given shapes, each checked against the graph input it names."""
    checked = {}
    for name, shape in input_shapes.items():
        if name not in declared:
            raise ConversionError(f"--input-shape {name}: {path} has no graph input {name!r}; its inputs are "
                                  f"{', '.join(f'{n} {_shape_text(s)}' for n, s in declared.items()) or 'none'}")
        try:
            shape = tuple(operator.index(v) for v in shape)
        except TypeError:
            raise ConversionError(f"--input-shape {name}: the sizes must be integers, got {shape!r}") from None
        model_shape = declared[name]
        if model_shape is not None and len(model_shape) != len(shape):
            raise ConversionError(f"--input-shape {name}:{','.join(map(str, shape))}: the model declares rank "
                                  f"{len(model_shape)} ({_shape_text(model_shape)}), got {len(shape)} sizes")
        if any(v < 1 for v in shape):
            raise ConversionError(f"--input-shape {name}:{','.join(map(str, shape))}: every size must be >= 1")
        if model_shape is not None:
            for axis, (want, got) in enumerate(zip(model_shape, shape)):
                if want is not None and want != got:
                    raise ConversionError(
                        f"--input-shape {name}:{','.join(map(str, shape))}: axis {axis} is {want} in the "
                        f"model ({_shape_text(model_shape)}); only symbolic dimensions can be given")
        checked[name] = shape
    return checked


def _external_tensors(model):
    """Every TensorProto of the model stored as external data: initializers, and Constant (and other)
    attributes, subgraphs included."""
    from onnx import TensorProto

    graphs, found = [model.graph], []
    while graphs:
        graph = graphs.pop()
        tensors = list(graph.initializer)
        for node in graph.node:
            for attribute in node.attribute:
                tensors += [attribute.t] if attribute.HasField("t") else []
                tensors += list(attribute.tensors)
                graphs += ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
        found += [t for t in tensors if t.data_location == TensorProto.EXTERNAL]
    return found


def _tensor_bytes(tensor, itemsize) -> int:
    """Bytes of a TensorProto's data: its element count times ``itemsize``."""
    return itemsize * int(np.prod([int(d) for d in tensor.dims], dtype=np.int64))


def _check_external_data(model, path):
    """Refuse external data that onnx would read from outside the model's folder (an absolute or ``..``
    location, a symbolic link anywhere on the way, a file with several hard links) or past a file's end,
    or whose length does not match the tensor's shape and type: before onnx reads any of it."""
    from onnx import helper

    folder = path.resolve().parent
    for tensor in _external_tensors(model):
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        where = f"{path}: tensor {tensor.name!r} stores its data in {location!r}"
        relative = Path(location)
        if not location or relative.is_absolute() or ".." in relative.parts or relative.drive:
            raise ConversionError(f"{where}, which is not a file name inside the model's folder {folder}")
        step = folder
        for part in relative.parts:
            step = step / part
            if step.is_symlink():
                raise ConversionError(f"{where}, and {step} is a symbolic link; only files inside the model's "
                                      "folder are read")
        target = step
        if not target.is_file():
            raise ConversionError(f"{where}, which is not a file in {folder}")
        status = target.stat()
        if status.st_nlink > 1:
            raise ConversionError(f"{where}, which has {status.st_nlink} hard links; only a file of its own is read")
        try:
            offset = int(info.get("offset", 0))
            length = None if info.get("length") is None else int(info["length"])
            itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        except (ValueError, TypeError, KeyError):
            raise ConversionError(f"{where} with offset {info.get('offset')!r}, length {info.get('length')!r} and "
                                  f"data type {tensor.data_type}, which cannot be read") from None
        needed = _tensor_bytes(tensor, itemsize)
        if length is not None and length != needed:
            raise ConversionError(f"{where} with length {length}, but its shape {list(tensor.dims)} needs {needed} "
                                  "bytes")
        if offset < 0 or offset + needed > status.st_size:
            raise ConversionError(f"{where} at offset {offset}: {needed} bytes needed, the file has "
                                  f"{status.st_size}")


#: External tensors up to this size are read in before shape inference (shape constants for data
#: propagation); larger ones only once it is done.
SMALL_EXTERNAL_BYTES = 1 << 20


def _read_external_data(model, folder, max_bytes=None):
    """Read the external data of ``model``'s tensors (checked by :func:`_check_external_data`) into
    them, as ``onnx.load`` does; with ``max_bytes``, only of tensors of at most that many bytes."""
    from onnx import TensorProto, external_data_helper, helper

    for tensor in _external_tensors(model):
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        if max_bytes is not None and _tensor_bytes(tensor, itemsize) > max_bytes:
            continue
        external_data_helper.load_external_data_for_tensor(tensor, str(folder))
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]


def _initializer_arrays(model) -> dict:
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _with_shapes_of(full, inferred):
    """``full`` (the model with its weights) given the graph inputs, outputs and value_info of
    ``inferred`` (the same graph, shape-inferred without its large weights); changed in place."""
    for name in ("input", "output", "value_info"):
        field_of_full = getattr(full.graph, name)
        del field_of_full[:]
        field_of_full.extend(getattr(inferred.graph, name))
    return full


def _inferred(model, fixed):
    """The model shape-inferred (strict, with data propagation), with the graph inputs of ``fixed``
    given those shapes (None keeps a dimension symbolic)."""
    import onnx

    declared = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    negative = any(d.HasField("dim_value") and d.dim_value < 0 for info in declared
                   for d in info.type.tensor_type.shape.dim)
    if fixed or negative:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        for info in [*copy.graph.input, *copy.graph.output]:
            sizes = fixed.get(info.name, ())
            for axis, dim in enumerate(info.type.tensor_type.shape.dim):
                value = sizes[axis] if axis < len(sizes) else None
                if value is not None:
                    dim.Clear()
                    dim.dim_value = value
                elif dim.HasField("dim_value") and dim.dim_value < 0:
                    dim.Clear()   # unknown, as the -1 meant
        del copy.graph.value_info[:]   # shapes inferred for the declared (symbolic) sizes
        model = copy
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


class ConversionError(Exception):
    """Bad input (file, graph, node): the message names it. No output is written."""


@dataclass
class Chain:
    """One conv layer: the Conv/ConvTranspose node, the nodes folded into it in order (per-channel
    constant Add/Sub/Mul/Div, inference-mode BatchNormalization) and the activation recorded after them
    (or None)."""

    conv: object                 # onnx NodeProto
    folded: list = field(default_factory=list)
    activation: object = None

    @property
    def batchnorm(self):
        """The first BatchNormalization folded in, or None."""
        return next((n for n in self.folded if n.op_type == "BatchNormalization"), None)

    @property
    def output(self) -> str:
        """The tensor the layer's weights compute: the last folded node's output."""
        return (self.folded[-1] if self.folded else self.conv).output[0]

    @property
    def final_output(self) -> str:
        """The tensor after the recorded activation (what the next layer or skip connection reads)."""
        return self.activation.output[0] if self.activation is not None else self.output


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

    def __init__(self, model, path, initializers=None):
        self.path, self.model, self.graph = Path(path), model, model.graph
        self.initializers = _initializer_arrays(model) if initializers is None else initializers
        self.shapes, self.elem_types = {}, {}
        for info in [*self.graph.input, *self.graph.value_info, *self.graph.output]:
            tensor_type = info.type.tensor_type
            self.elem_types[info.name] = tensor_type.elem_type
            if tensor_type.HasField("shape"):   # a negative size here is inference's: see _size_problem
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
        #: graph input -> {"declared": shape in the model, "shape": shape used, "source": "model",
        #: "--input-shape" or "default size"} (a symbolic dimension is None); set by :meth:`load`.
        self.input_shapes = {}

    @classmethod
    def load(cls, path, input_shapes=None) -> "OnnxGraph":
        """Read, check and shape-infer the model at ``path``.

        ``input_shapes`` ({graph input: (N, C, H, W)}, e.g. from ``--input-shape``) fixes those inputs'
        symbolic dimensions. Every other rank-4 input with a symbolic dimension after the batch (height
        and width of NCHW, or of NHWC as tf2onnx writes it) is tried at the square sizes of
        :data:`DEFAULT_SIZES`, in order, until shape inference accepts one (no error, no negative size,
        no empty image). A symbolic batch stays symbolic. What was used is in :attr:`input_shapes`. The
        weights do not depend on the size; the geometry in the manifest (padding of SAME convs, MPSCNN
        destination sizes) and the verification do.
        """
        import onnx

        path = Path(path)
        if not path.is_file():
            raise ConversionError(f"model file {path} does not exist")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as error:  # onnx raises DecodeError, ...
            raise ConversionError(f"cannot read {path} as an ONNX model: {_error_text(error)}") from None
        _check_external_data(model, path)
        # Checked from its file, and shape-inferred with only the small external tensors read in (shapes
        # for data propagation): onnx serializes a model for both, and one with its weights may be over
        # protobuf's 2 GiB. The weights are read once, into `full`, which takes the inferred shapes.
        try:
            onnx.checker.check_model(str(path))   # given the path, it finds external data beside the model
            _read_external_data(model, path.parent, max_bytes=SMALL_EXTERNAL_BYTES)
            full = onnx.ModelProto()
            full.CopyFrom(model)
            _read_external_data(full, path.parent)
            initializers = _initializer_arrays(full)
        except Exception as error:  # onnx raises ValidationError, InferenceError, OSError, ...
            raise ConversionError(f"cannot read {path} as an ONNX model: {_error_text(error)}") from None
        inputs = {i.name: i for i in model.graph.input
                  if i.name not in {t.name for t in model.graph.initializer}}
        declared = {name: _declared_shape(info) for name, info in inputs.items()}
        given = _checked_input_shapes(input_shapes or {}, declared, path)
        # NCHW, or NHWC (tf2onnx): every symbolic dimension but the batch takes the size
        searched = [name for name, shape in declared.items() if name not in given and shape is not None
                    and len(shape) == 4 and any(v is None for v in shape[1:])]
        sizes = DEFAULT_SIZES if searched else (None,)
        first_error = None
        for size in sizes:
            fixed = dict(given)
            for name in searched:
                fixed[name] = tuple(size if v is None and axis else v for axis, v in enumerate(declared[name]))
            try:
                graph = cls(_with_shapes_of(full, _inferred(model, fixed)), path, initializers)
            except Exception as error:   # InferenceError, ValidationError, ...
                first_error = first_error or error
                continue
            problem = graph._size_problem() if searched else None
            if problem is None:
                graph._shapes_from_a_run()
                graph.input_shapes = {name: {"declared": declared[name], "shape": graph.shapes.get(name),
                                             "source": "--input-shape" if name in given else
                                             "default size" if name in searched else "model"}
                                      for name in declared}
                return graph
            first_error = first_error or problem
        if not searched:
            what = " with the given --input-shape" if given else ""
            raise ConversionError(f"cannot read {path} as an ONNX model{what}: {_error_text(first_error)}")
        listing = ", ".join(f"{name} {_shape_text(declared[name])}" for name in searched)
        raise ConversionError(
            f"{path}: shape inference accepts none of the sizes {DEFAULT_SIZES[0]}..{DEFAULT_SIZES[-1]} for the "
            f"symbolic height and width of {listing} (at {DEFAULT_SIZES[0]}: {_error_text(first_error)}); "
            f"give the size with --input-shape NAME:N,C,H,W (input_shapes= in Python)")

    def oversized(self, max_elements):
        """(tensor, elements) of the first tensor with a known shape of more than ``max_elements``
        elements (a symbolic batch counted as 1), or None: a run of the whole model would allocate it."""
        for name, shape in self.shapes.items():
            if shape and all(v is not None for v in shape[1:]):
                elements = int(np.prod([1 if v is None else v for v in shape], dtype=np.float64))
                if elements > max_elements:
                    return name, elements
        return None

    def _shapes_from_a_run(self):
        """Shapes of the conv inputs that shape inference leaves unknown (a Reshape to a shape computed
        from Shape nodes, as transformer blocks write it), from one run of the model in onnx.reference
        on a seeded random input. Only when every graph input is a float tensor with static
        dimensions after the batch (fed as 1); nothing changes when the run fails."""
        from .oracle import reference_ops

        unknown = [node.input[0] for node in self.graph.node if node.op_type in CONV_OPS
                   and node.domain in ("", "ai.onnx") and not _static_image(self.shapes.get(node.input[0]))]
        if not unknown or self.oversized(DEFAULT_VERIFY_ELEMENTS) is not None:
            return
        rng, feeds = np.random.default_rng(0), {}
        for info in self.graph_inputs:
            shape, dtype = self.shapes.get(info.name), FLOAT_TYPES.get(self.elem_types.get(info.name))
            if dtype is None or shape is None or any(v is None for v in shape[1:]):
                return
            feeds[info.name] = rng.standard_normal(tuple(1 if v is None else v for v in shape)).astype(dtype)
        try:
            from onnx.reference import ReferenceEvaluator

            with warnings.catch_warnings(), np.errstate(all="ignore"):   # random data: only shapes matter
                warnings.simplefilter("ignore")
                values = ReferenceEvaluator(self.model, new_ops=reference_ops()).run(None, feeds, intermediate=True)
        except Exception:   # an op onnx.reference lacks, an old onnx without intermediate=, ...
            return
        for name in unknown:
            value = values.get(name)
            if isinstance(value, np.ndarray) and value.ndim == 4:
                self.shapes[name] = value.shape

    def _size_problem(self):
        """Why the fixed input size is not usable (a negative size, or an empty 4-D tensor that is not a
        constant), or None. (A conv input that stays symbolic does so at every size: that conv is
        skipped, with the reason.)"""
        for name, shape in self.shapes.items():
            known = [v for v in (shape or ()) if v is not None]
            if any(v < 0 for v in known) or (len(shape or ()) == 4 and 0 in known and self.constant(name) is None):
                return f"tensor {name!r} would have shape {_shape_text(shape)}"
        return None

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
        value, or Identity / Cast / Reshape / Transpose / Squeeze / Unsqueeze of constants (torch's
        exporter stores equal tensors once and names the second use through an Identity; tf2onnx and
        paddle2onnx store weights behind Transpose and Constant nodes)."""
        found = self._resolve(name)
        return None if found is None else found[0]

    def constant_source(self, name):
        """The initializer or Constant output a constant tensor comes from (through the ops above), or
        None."""
        found = self._resolve(name)
        return None if found is None else found[1]

    def _resolve(self, name):
        """(value, root) of a constant tensor, or None. Iterative, inputs before the node that reads
        them: a chain of 400 Identity nodes must not exhaust Python's recursion limit."""
        if not name:
            return None
        pending, visiting = [name], set()
        while pending:
            current = pending[-1]
            if current in self._constants:
                pending.pop()
                continue
            node = None if current in self.initializers else self.producer.get(current)
            inputs = [i for i in node.input if i and i not in self._constants] \
                if node is not None and node.op_type in _FOLDABLE else []
            if inputs and current not in visiting:
                visiting.add(current)
                pending.extend(inputs)
                continue
            pending.pop()
            if current in self.initializers:
                self._constants[current] = (self.initializers[current], current)
            elif node is None or inputs:   # a graph input, or a cycle (invalid ONNX anyway): not constant
                self._constants[current] = None
            else:
                self._constants[current] = self._fold(node, current)
        return self._constants[name]

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
            elif node.op_type == "Transpose":
                value = np.transpose(value, attributes.get("perm"))   # no perm: the axes reversed
            elif node.op_type in ("Squeeze", "Unsqueeze"):   # axes: an attribute (opset < 13) or input 2
                axes = attributes.get("axes")
                if axes is None and len(inputs) > 1:
                    axes = [int(v) for v in inputs[1][0].ravel()]
                if node.op_type == "Squeeze":
                    value = np.squeeze(value, axis=None if axes is None else tuple(axes))
                else:
                    value = np.expand_dims(value, tuple(axes))
        except (KeyError, ValueError, TypeError, IndexError):   # (numpy AxisError is a ValueError)
            return None
        return value, root

    def is_constant_node(self, node) -> bool:
        """A node computed here from constants (Constant, or one of the ops above on constants): it
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
            channels = self.out_channels(node)
            following = self.sole_consumer(node.output[0])
            while following is not None and following.domain in ("", "ai.onnx") and (
                    (following.op_type == "BatchNormalization" and following.input[0] == chain.output
                     and self._unfoldable(following) is None)
                    or self.affine(following, chain.output, channels) is not None):
                chain.folded.append(following)
                following = self.sole_consumer(following.output[0])
            if following is not None and following.op_type in ACTIVATIONS \
                    and following.input[0] == chain.output and self._activation_constants(following):
                chain.activation = following
            chains.append(chain)
        used = {id(n) for c in chains for n in (c.conv, *c.folded, c.activation) if n is not None}
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
        if weight.dtype.kind not in "fiu":
            return f"its weight {conv.input[1]!r} holds {_type_name(weight)}, not numbers"
        if weight.ndim != 4:
            return f"its weight has shape {weight.shape}: only 2-D convolutions (4-D weights) are converted"
        if len(conv.input) > 2 and conv.input[2]:
            bias = self.constant(conv.input[2])
            if bias is None:
                return f"its bias {conv.input[2]!r} is not constant"
            if bias.dtype.kind not in "fiu":
                return f"its bias {conv.input[2]!r} holds {_type_name(bias)}, not numbers"
        shape = self.shapes.get(conv.input[0])
        if not _static_image(shape):
            return (f"its input {conv.input[0]!r} has no static NCHW shape (C, H, W known), got "
                    f"{None if shape is None else tuple('?' if v is None else v for v in shape)}; if it "
                    "depends on a graph input's size, give that with --input-shape NAME:N,C,H,W")
        return None

    def out_channels(self, conv) -> int:
        """C_out of a Conv/ConvTranspose whose weight is a constant 4-D array."""
        weight = self.constant(conv.input[1])
        if CONV_OPS[conv.op_type]:   # ConvTranspose: (C_in, C_out/group, kH, kW)
            return int(weight.shape[1]) * int(self.attributes(conv).get("group", 1))
        return int(weight.shape[0])

    def affine(self, node, tensor, channels):
        """(scale, shift), float64 vectors of length ``channels``, when ``node`` computes
        scale·tensor + shift per channel of an NCHW ``tensor``: an Add, Sub, Mul or Div of ``tensor``
        and a constant that broadcasts along the channel axis only (shape (C, 1, 1), (1, C, 1, 1), a
        scalar, ...), as paddle2onnx writes a conv's bias. Otherwise None (constant / tensor is not
        affine, and neither is a division by zero)."""
        if node.op_type not in AFFINE_OPS or len(node.input) != 2 or list(node.input).count(tensor) != 1:
            return None
        position = list(node.input).index(tensor)
        constant = self.constant(node.input[1 - position])
        if constant is None or constant.dtype.kind != "f" or constant.ndim > 4:
            return None
        try:
            if np.broadcast_shapes(constant.shape, (1, channels, 1, 1)) != (1, channels, 1, 1):
                return None
        except ValueError:
            return None
        vector = np.broadcast_to(constant.astype(np.float64), (1, channels, 1, 1)).reshape(channels)
        ones, zeros = np.ones(channels), np.zeros(channels)
        if node.op_type == "Add":
            return ones, vector
        if node.op_type == "Sub":
            return (ones, -vector) if position == 0 else (-ones, vector)
        if node.op_type == "Mul":
            return vector, zeros
        if position == 1 or not np.all(vector != 0):   # Div: constant / tensor, or / 0
            return None
        return 1 / vector, zeros

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
            name = batchnorm.input[index] if index < len(batchnorm.input) else ""
            value = self.constant(name)
            if value is None:
                return f"its {what} {name!r} is not constant"
            if value.dtype.kind != "f":
                return f"its {what} {name!r} holds {_type_name(value)}, not floating-point numbers"
        return None

    def _activation_constants(self, node) -> bool:
        """Clip's bounds must be constant scalars and PRelu's slope a constant to be recorded."""
        if node.op_type == "Clip":
            bounds = [self.constant(name) for name in node.input[1:] if name]
            return all(b is not None and b.size == 1 and b.dtype.kind in "fiu" for b in bounds)
        if node.op_type == "PRelu":
            slope = self.constant(node.input[1])
            return slope is not None and slope.dtype.kind == "f"
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
            if not self._activation_constants(node):
                what = "bounds are not constant scalars" if node.op_type == "Clip" else "slope is not a float constant"
                return f"activation not recorded: its {what}"
            return f"activation after {after}, not directly after a converted layer"
        if node.domain not in ("", "ai.onnx"):
            return f"{node.op_type} of domain {node.domain!r} is not a convolution of the ONNX domain"
        return f"{node.op_type} is not a convolution"

    @staticmethod
    def skipped_counts(skipped) -> str:
        """'Concat×6, Relu×6' (most frequent first, then by name)."""
        counts = Counter(s.node.op_type for s in skipped)
        return ", ".join(f"{op}×{n}" for op, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
