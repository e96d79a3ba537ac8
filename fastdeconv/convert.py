"""``python -m fastdeconv convert [MODEL.onnx] OUTDIR``: ONNX conv layers -> MPS weight files, verified.

For every Conv / ConvTranspose node of the ONNX graph, with the BatchNormalization that directly follows
it folded in (:func:`fastdeconv.weights.fold_batchnorm`) and the activation after that recorded, the
converter writes into OUTDIR (raw little-endian float32, C order, see :func:`fastdeconv.weights.save_mps`):

* convolutions: ``NAME_weight.dat`` (C_out, kH, kW, C_in/groups) -- MPSCNNConvolution's OHWI, and ours --
  and ``NAME_bias.dat`` (C_out,);
* transposed convolutions: ``NAME_weight.dat`` in our layout (C_in, kH, kW, C_out/groups), i.e. the
  forward convolution's OHWI weight, unrotated (the MPSGraph / fastdeconv weight), ``NAME_bias.dat``, and
  ``NAME_mpscnn_weight.dat``: (C_out, kH, kW, C_in/groups) rotated by 180° for MPSCNNConvolutionTranspose
  (:func:`fastdeconv.weights.to_mpscnn_transpose`);
* ``manifest.json``: per layer its shapes, stride, padding ((top, bottom), (left, right)), dilation,
  groups, output padding, the MPSCNN settings (kernelOffsetX/Y, offset, destination size; null with a
  reason where MPSCNN cannot express the layer), the folded BatchNorm and the activation.

Before anything lands in OUTDIR, every layer is verified on random input: fastdeconv with the weights
read back from the .dat files, and the MPSCNN numpy model (:mod:`fastdeconv.mpscnn_model`) with the MPSCNN
weights, both against onnx's ReferenceEvaluator running the original node (or the Conv+BN pair). The
files are written into a temporary directory next to OUTDIR and moved into place only if every layer
matches; an existing OUTDIR is replaced only with ``--force``.

Exit codes: 0 success, 1 bad input or a mismatching layer (nothing written), 2 usage or onnx missing.
onnx is imported only inside :func:`main`/:func:`convert`: ``import fastdeconv`` never needs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import __version__, _params, mpscnn_model, weights
from ._api import conv2d, conv_transpose2d

__all__ = ["main", "convert", "ConversionError", "LayerResult", "DEFAULT_MODEL", "INSTALL_HINT"]

DEFAULT_MODEL = Path(__file__).with_name("default_decoder.onnx")
INSTALL_HINT = 'pip install "fastdeconv[convert]" (from a clone of the repository: pip install -e ".[convert]")'
#: Largest accepted max|error| / max(1, max|reference|) in float32.
RELATIVE_TOLERANCE = 1e-4
#: Opset of the one/two-node models run by onnx's ReferenceEvaluator.
VERIFY_OPSET = 17

#: Activations recorded after a conv (+ BN): ONNX op -> attribute defaults (ONNX Operators.md).
ACTIVATIONS = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Softplus": {}, "Clip": {},
    "LeakyRelu": {"alpha": 0.01}, "Elu": {"alpha": 1.0}, "HardSigmoid": {"alpha": 0.2, "beta": 0.5},
    "Selu": {"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}, "PRelu": {},
}
_CONV_OPS = {"Conv": False, "ConvTranspose": True}   # op -> transposed


class ConversionError(Exception):
    """Bad input (file, graph, node): the message names it. No output is written."""


@dataclass
class LayerResult:
    """One converted layer: its manifest entry and its verification."""

    name: str
    kind: str
    input_shape: tuple
    output_shape: tuple
    weight_shape: tuple
    error_fastdeconv: float
    error_mpscnn: float | None   # None: MPSCNN cannot express the layer
    tolerance: float
    manifest: dict = field(repr=False)

    @property
    def ok(self) -> bool:
        errors = [self.error_fastdeconv] + ([self.error_mpscnn] if self.error_mpscnn is not None else [])
        return all(e <= self.tolerance for e in errors)


# --------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------

def main(paths: list[str], force: bool = False) -> int:
    """``python -m fastdeconv convert [--force] [MODEL.onnx] OUTDIR``; returns the exit code."""
    try:
        import onnx  # noqa: F401
        import onnx.reference  # noqa: F401
    except ImportError:
        print(f"error: 'python -m fastdeconv convert' needs the onnx package; install it with: {INSTALL_HINT}",
              file=sys.stderr)
        return 2
    if len(paths) == 1:
        model_path, outdir = DEFAULT_MODEL, paths[0]
    elif len(paths) == 2:
        model_path, outdir = paths
    else:
        print(f"error: convert takes [MODEL.onnx] OUTDIR, got {len(paths)} paths: {paths}", file=sys.stderr)
        return 2
    try:
        results = convert(model_path, outdir, force=force, progress=sys.stderr)
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(format_table(results))
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"error: {len(failed)} of {len(results)} layers do not match the ONNX reference "
              f"({', '.join(failed)}); nothing was written to {outdir}", file=sys.stderr)
        return 1
    print(f"wrote {len(results)} layers to {outdir} (manifest.json, raw little-endian float32 .dat files)",
          file=sys.stderr)
    return 0


def _shape_text(shape) -> str:
    return "x".join(str(v) for v in shape)


def format_table(results) -> str:
    """The per-layer table: layer, kind, NHWC shapes, weight shape, max errors, status."""
    rows = [("layer", "kind", "input -> output (NHWC)", "weight", "max err fastdeconv", "max err MPSCNN", "")]
    for r in results:
        mps = "n/a (see manifest)" if r.error_mpscnn is None else f"{r.error_mpscnn:.2e}"
        rows.append((r.name, r.kind, f"{_shape_text(r.input_shape)} -> {_shape_text(r.output_shape)}",
                     _shape_text(r.weight_shape), f"{r.error_fastdeconv:.2e}", mps,
                     "ok" if r.ok else f"MISMATCH (tol {r.tolerance:.1e})"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


# --------------------------------------------------------------------------------------------------------
# The conversion
# --------------------------------------------------------------------------------------------------------

def convert(model_path, outdir, *, force: bool = False, progress=None) -> list[LayerResult]:
    """Convert and verify every conv layer of ``model_path`` into ``outdir``; see the module docstring.

    Returns the per-layer results. OUTDIR is created (or, with ``force``, replaced) only if every layer
    matches; raises :class:`ConversionError` for bad input.
    """
    model_path, outdir = Path(model_path), Path(outdir)
    if outdir.exists() and not force:
        raise ConversionError(f"output directory {outdir} already exists; pass --force to replace it")
    if outdir.exists() and not outdir.is_dir():
        raise ConversionError(f"output path {outdir} exists and is not a directory")
    if not outdir.parent.is_dir():
        raise ConversionError(f"the parent directory of {outdir} does not exist")
    graph = _Graph.load(model_path)
    chains = graph.conv_chains()
    if not chains:
        raise ConversionError(f"{model_path} has no Conv or ConvTranspose node")
    for node in graph.unconverted_nodes(chains):
        _log(progress, f"note: node {node.name!r} ({node.op_type}) is not part of a conv layer; skipped")

    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.partial-", dir=outdir.parent))
    try:
        _chmod_as_umask_allows(staging)
        results, names = [], set()
        for index, chain in enumerate(chains, 1):
            name = _unique_name(chain.conv.name or f"{chain.conv.op_type.lower()}{index}", names)
            _log(progress, f"[{index}/{len(chains)}] {name} ({chain.conv.op_type}"
                           f"{' + BatchNormalization' if chain.batchnorm else ''}): converting and verifying")
            result = _convert_layer(graph, chain, name, staging, seed=index)
            _log(progress, f"[{index}/{len(chains)}] {name}: max error {result.error_fastdeconv:.2e} (fastdeconv), "
                           f"{'n/a' if result.error_mpscnn is None else f'{result.error_mpscnn:.2e}'} (MPSCNN model)"
                           f" -> {'ok' if result.ok else 'MISMATCH'}")
            results.append(result)
        if not all(r.ok for r in results):
            shutil.rmtree(staging)
            return results
        manifest = {
            "format": "raw little-endian float32, C order, no header",
            "converter": f"fastdeconv {__version__}",
            "model": str(model_path),
            "layers": [r.manifest for r in results],
        }
        (staging / "manifest.json").write_text(_manifest_json(manifest))
        _move_into_place(staging, outdir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return results


_SCALAR = r"(?:-?[0-9][0-9.eE+-]*|-?Infinity|NaN|null|true|false)"
_SCALAR_LIST = re.compile(r"\[\s*(" + _SCALAR + r"(?:,\s*" + _SCALAR + r")*)\s*\]")


def _manifest_json(manifest) -> str:
    """Indented JSON with lists of numbers (and lists of such lists) kept on one line."""
    text = json.dumps(manifest, indent=2)
    for _ in range(2):   # [[top, bottom], [left, right]] needs two passes
        text = _SCALAR_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text)
        text = re.sub(r"\[\s*(\[[^\[\]]*\](?:,\s*\[[^\[\]]*\])*)\s*\]",
                      lambda m: "[" + re.sub(r"\],\s*\[", "], [", m.group(1)) + "]", text)
    return text + "\n"


def _log(progress, line):
    if progress is not None:
        print(line, file=progress, flush=True)


def _unique_name(raw, taken):
    """A file-name-safe layer name whose files (NAME_*.dat and NAME_mpscnn_*.dat) are nobody else's."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", raw).lstrip(".") or "layer"
    candidate, suffix = name, 2
    while candidate in taken or _mpscnn_name(candidate) in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    taken.update((candidate, _mpscnn_name(candidate)))
    return candidate


def _chmod_as_umask_allows(directory: Path):
    """mkdtemp makes 0o700; OUTDIR gets what mkdir would give it (0o777 & ~umask), as the user expects."""
    umask = os.umask(0)   # the only portable way to read the umask is to set it
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)


def _move_into_place(staging: Path, outdir: Path):
    if outdir.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.old-", dir=outdir.parent))
        os.rename(outdir, retired / outdir.name)
        os.rename(staging, outdir)
        shutil.rmtree(retired)
    else:
        os.rename(staging, outdir)


# --------------------------------------------------------------------------------------------------------
# Reading the ONNX graph
# --------------------------------------------------------------------------------------------------------

@dataclass
class _Chain:
    conv: object                 # onnx NodeProto
    batchnorm: object = None
    activation: object = None


class _Graph:
    """An ONNX model with its constants, static shapes and consumers indexed."""

    def __init__(self, model, path):
        from onnx import numpy_helper

        self.path, self.graph = path, model.graph
        self.constants = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        for node in self.graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        self.shapes = {}
        for info in [*self.graph.input, *self.graph.value_info, *self.graph.output]:
            dims = info.type.tensor_type.shape.dim
            self.shapes[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
        self.consumers, self.producer = {}, {}
        for node in self.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
            for name in node.output:
                self.producer[name] = node
        self.graph_outputs = {o.name for o in self.graph.output}

    @classmethod
    def load(cls, path: Path) -> "_Graph":
        import onnx

        if not path.is_file():
            raise ConversionError(f"model file {path} does not exist")
        try:
            model = onnx.load(str(path))
            onnx.checker.check_model(model)
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as error:  # onnx raises DecodeError, ValidationError, InferenceError, ...
            raise ConversionError(f"cannot read {path} as an ONNX model: {type(error).__name__}: "
                                  f"{str(error).strip().splitlines()[0] if str(error).strip() else error!r}") from None
        return cls(model, path)

    def attributes(self, node) -> dict:
        from onnx import helper

        values = {}
        for attribute in node.attribute:
            value = helper.get_attribute_value(attribute)
            values[attribute.name] = value.decode() if isinstance(value, bytes) else value
        return values

    def sole_consumer(self, tensor):
        consumers = self.consumers.get(tensor, [])
        if len(consumers) == 1 and tensor not in self.graph_outputs:
            return consumers[0]
        return None

    def describe(self, node) -> str:
        return f"node {node.name!r} ({node.op_type})"

    def constant(self, node, index, what):
        if index >= len(node.input) or not node.input[index]:
            return None
        name = node.input[index]
        if name not in self.constants:
            raise ConversionError(f"{self.describe(node)} in {self.path}: its {what} {name!r} is not an "
                                  "initializer or Constant; only constant weights can be converted")
        return self.constants[name]

    def conv_chains(self) -> list[_Chain]:
        """Conv/ConvTranspose [-> BatchNormalization] [-> activation], following sole consumers."""
        chains, folded = [], set()
        for node in self.graph.node:
            if node.op_type not in _CONV_OPS:
                continue
            chain = _Chain(node)
            following = self.sole_consumer(node.output[0])
            if following is not None and following.op_type == "BatchNormalization" \
                    and following.input[0] == node.output[0]:
                chain.batchnorm, following = following, self.sole_consumer(following.output[0])
                folded.add(id(chain.batchnorm))
            if following is not None and following.op_type in ACTIVATIONS:
                chain.activation = following
            chains.append(chain)
        for node in self.graph.node:
            if node.op_type == "BatchNormalization" and id(node) not in folded:
                self._explain_unfoldable(node)
        return chains

    def _explain_unfoldable(self, batchnorm):
        source = self.producer.get(batchnorm.input[0])
        if source is None:
            where = f"its input {batchnorm.input[0]!r} is a graph input"
        elif source.op_type in _CONV_OPS:
            where = (f"the output of {self.describe(source)} is also used elsewhere "
                     f"({len(self.consumers.get(batchnorm.input[0], []))} consumers or a graph output)")
        else:
            where = (f"its input comes from {self.describe(source)}, an unsupported op between the convolution "
                     "and the BatchNormalization")
        raise ConversionError(f"{self.describe(batchnorm)} in {self.path} cannot be folded into a convolution: "
                              f"{where}; only a BatchNormalization directly after a Conv/ConvTranspose is supported")

    def unconverted_nodes(self, chains):
        used = {id(n) for c in chains for n in (c.conv, c.batchnorm, c.activation) if n is not None}
        return [n for n in self.graph.node if id(n) not in used and n.op_type != "Constant"]


# --------------------------------------------------------------------------------------------------------
# ONNX attributes -> fastdeconv arguments
# --------------------------------------------------------------------------------------------------------

def _pair(values, default, name, node_text):
    values = default if values is None else list(values)
    if len(values) != 2:
        raise ConversionError(f"{node_text}: {name}={values} -- only 2-D convolutions are supported")
    return tuple(int(v) for v in values)


def _conv_arguments(graph, node, transposed, input_hw, kernel_hw, in_channels, w_shape):
    """Map Conv / ConvTranspose attributes (ONNX Operators.md) to fastdeconv's stride, padding, ..."""
    text = graph.describe(node)
    attrs = graph.attributes(node)
    stride = _pair(attrs.get("strides"), [1, 1], "strides", text)
    dilation = _pair(attrs.get("dilations"), [1, 1], "dilations", text)
    groups = int(attrs.get("group", 1))
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != tuple(kernel_hw):
        raise ConversionError(f"{text}: kernel_shape={list(attrs['kernel_shape'])} does not match the weight's "
                              f"kernel {tuple(kernel_hw)}")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ConversionError(f"{text}: unknown auto_pad={auto_pad!r}")
    pads = attrs.get("pads", [0, 0, 0, 0])
    if len(pads) != 4:
        raise ConversionError(f"{text}: pads={list(pads)} -- only 2-D convolutions are supported")
    explicit = ((int(pads[0]), int(pads[2])), (int(pads[1]), int(pads[3])))   # [top, left, bottom, right]
    arguments = {"stride": stride, "dilation": dilation, "groups": groups}
    try:
        if not transposed:
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                # ONNX: out = ceil(in / s); SAME_UPPER puts the odd row at the end (our "same").
                same = _params.resolve_conv2d((1, *input_hw, in_channels), w_shape, stride, "same", dilation,
                                              groups).pad
                explicit = same if auto_pad == "SAME_UPPER" else tuple((end, begin) for begin, end in same)
            arguments["padding"] = ((0, 0), (0, 0)) if auto_pad == "VALID" else explicit
            return arguments
        output_padding = _pair(attrs.get("output_padding"), [0, 0], "output_padding", text)
        output_shape = attrs.get("output_shape")
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # ONNX: total_padding = s·(in − 1) + output_padding + ((k − 1)·d + 1) − output_shape, with
            # output_shape = in·s for SAME; SAME_UPPER: begin = total // 2, otherwise begin = total − total // 2.
            if output_shape is not None:
                target = tuple(int(v) for v in list(output_shape)[-2:])
            else:
                target = tuple(i * s for i, s in zip(input_hw, stride))
            unpadded = _params.conv_transpose2d_output_shape(input_hw, kernel_hw, stride, 0, output_padding, dilation)
            axes, extra = [], []
            for total in (u - t for u, t in zip(unpadded, target)):
                if total >= 0:
                    begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
                    axes.append((begin, total - begin))
                    extra.append(0)
                else:   # a larger output than the unpadded one: rows added at the end (onnxruntime clamps to 0)
                    axes.append((0, 0))
                    extra.append(-total)
            arguments["padding"] = tuple(axes)
            arguments["output_padding"] = tuple(o + e for o, e in zip(output_padding, extra))
        else:
            arguments["padding"] = ((0, 0), (0, 0)) if auto_pad == "VALID" else explicit
            arguments["output_padding"] = output_padding
    except ValueError as error:
        raise ConversionError(f"{text}: {error}") from None
    return arguments


# --------------------------------------------------------------------------------------------------------
# One layer: resolve, fold, write, verify, describe
# --------------------------------------------------------------------------------------------------------

@dataclass
class _Layer:
    """One conv chain, resolved: our weight and bias (BatchNorm folded in), conv(_transpose)2d's keyword
    arguments and the geometry they give, and the MPSCNN settings (or why MPSCNN cannot express it)."""

    name: str
    chain: _Chain
    arguments: dict
    weight: np.ndarray
    bias: np.ndarray
    batchnorm: dict | None          # the folded BatchNormalization's parameters
    geometry: _params.ConvGeometry
    mpscnn_settings: weights.MPSCNNTransposeParams | weights.MPSCNNConvolutionParams | None
    mpscnn_reason: str | None

    @property
    def transposed(self) -> bool:
        return self.geometry.transposed

    @property
    def kind(self) -> str:
        return "conv_transpose2d" if self.transposed else "conv2d"


def _convert_layer(graph, chain, name, directory, seed) -> LayerResult:
    """Resolve and fold one chain, write its files into ``directory`` and verify them."""
    layer = _resolve_layer(graph, chain, name)
    files = _write_files(layer, directory)
    errors = _verify(graph, layer, directory, seed)
    g = layer.geometry
    return LayerResult(name, layer.kind, g.input_shape, g.output_shape, tuple(layer.weight.shape), *errors,
                       _manifest_entry(graph, layer, files, *errors))


def _resolve_layer(graph, chain, name) -> _Layer:
    """Read the conv node, map its attributes, fold the BatchNormalization, resolve the geometry."""
    node = chain.conv
    transposed = _CONV_OPS[node.op_type]
    weight, onnx_bias, in_channels, input_hw = _read_conv(graph, node, transposed)
    arguments = _conv_arguments(graph, node, transposed, input_hw, weight.shape[1:3], in_channels, weight.shape)
    groups = arguments["groups"]
    out_channels = weight.shape[3] * groups if transposed else weight.shape[0]
    bias = np.zeros(out_channels, np.float32) if onnx_bias is None else onnx_bias.astype(np.float32)
    weight, bias, batchnorm = _fold_batchnorm(graph, chain.batchnorm, weight, bias, transposed, groups)
    geometry = _geometry(graph, node, (1, *input_hw, in_channels), weight.shape, arguments)
    return _Layer(name, chain, arguments, weight, bias, batchnorm, geometry, *_mpscnn_settings(geometry, arguments))


def _read_conv(graph, node, transposed):
    """(weight in our layout as float32, the ONNX bias or None, C_in, (H, W) of the input)."""
    text = graph.describe(node)
    onnx_weight = graph.constant(node, 1, "weight")
    if onnx_weight is None or onnx_weight.ndim != 4:
        raise ConversionError(f"{text}: weight shape {None if onnx_weight is None else onnx_weight.shape} -- "
                              "only 2-D convolutions (4-D weights) are supported")
    onnx_bias = graph.constant(node, 2, "bias")
    input_shape = graph.shapes.get(node.input[0])
    if input_shape is None or len(input_shape) != 4 or any(v is None for v in input_shape[1:]):
        raise ConversionError(f"{text}: the input {node.input[0]!r} needs a static NCHW shape "
                              f"(C, H, W known), got {input_shape}")
    weight = weights.from_onnx(onnx_weight.astype(np.float32), transposed=transposed)
    return weight, onnx_bias, input_shape[1], tuple(input_shape[2:])


def _fold_batchnorm(graph, batchnorm_node, weight, bias, transposed, groups):
    """(weight, bias, BatchNorm parameters) with the BatchNormalization folded in; (weight, bias, None)
    without one."""
    if batchnorm_node is None:
        return weight, bias, None
    parameters = _batchnorm_parameters(graph, batchnorm_node)
    try:
        weight, bias = weights.fold_batchnorm(weight, bias, **parameters, transposed=transposed, groups=groups)
    except ValueError as error:
        raise ConversionError(f"{graph.describe(batchnorm_node)}: {error}") from None
    return weight, bias, parameters


def _geometry(graph, node, x_shape, w_shape, arguments):
    """The layer's geometry from fastdeconv._params, which validates everything; its message (which
    repeats the values) is prefixed with the node."""
    resolve = _params.resolve_conv_transpose2d if _CONV_OPS[node.op_type] else _params.resolve_conv2d
    try:
        return resolve(x_shape, w_shape, **arguments)
    except ValueError as error:
        raise ConversionError(f"{graph.describe(node)}: {error}") from None


def _mpscnn_settings(geometry, arguments):
    """(the MPSCNN kernel's settings, None), or (None, why MPSCNN cannot express the layer)."""
    make = weights.mpscnn_transpose_params if geometry.transposed else weights.mpscnn_conv_params
    try:
        return make(geometry.input_hw, geometry.kernel_hw, **arguments,
                    in_channels=geometry.in_channels, out_channels=geometry.out_channels), None
    except weights.MPSCNNUnsupportedError as error:
        return None, str(error)


def _mpscnn_name(name) -> str:
    """The save_mps name of a transposed layer's MPSCNN weight (NAME_mpscnn_weight.dat)."""
    return f"{name}_mpscnn"


def _mpscnn_weight_shape(geometry) -> tuple:
    """MPSCNN's weight layout for both kernels: (C_out, kH, kW, C_in/groups)."""
    return (geometry.out_channels, *geometry.kernel_hw, geometry.in_per_group)


def _write_files(layer, directory) -> dict:
    """Save the layer's .dat files; the manifest's "files": role -> file name."""
    weight_path, bias_path = weights.save_mps(directory, layer.name, layer.weight, layer.bias)
    files = {"weight": weight_path.name, "bias": bias_path.name}
    if layer.transposed:
        mpscnn_weight = weights.to_mpscnn_transpose(layer.weight, layer.geometry.groups)
        (mpscnn_path,) = weights.save_mps(directory, _mpscnn_name(layer.name), mpscnn_weight)
        files["mpscnn_weight"] = mpscnn_path.name
    return files


def _verify(graph, layer, directory, seed):
    """(max error of fastdeconv, of the MPSCNN model or None, tolerance) on one random input.

    Both run on the files as written, against onnx's reference evaluator on the original node(s).
    """
    g = layer.geometry
    x_nchw = np.random.default_rng(seed).standard_normal((1, g.in_channels, *g.input_hw)).astype(np.float32)
    expected = _onnx_reference(graph, layer.chain, layer.arguments, x_nchw).transpose(0, 2, 3, 1).astype(np.float64)
    x = np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1))
    saved_weight, saved_bias = weights.load_mps(directory, layer.name, layer.weight.shape)
    run = conv_transpose2d if layer.transposed else conv2d
    error_fastdeconv = _max_error(run(x, saved_weight, saved_bias, **layer.arguments), expected)
    error_mpscnn = None
    if layer.mpscnn_settings is not None:
        error_mpscnn = _max_error(_run_mpscnn_model(layer, directory, x, saved_weight, saved_bias), expected)
    tolerance = RELATIVE_TOLERANCE * max(1.0, float(np.abs(expected).max()))
    return error_fastdeconv, error_mpscnn, tolerance


def _run_mpscnn_model(layer, directory, x, saved_weight, saved_bias) -> np.ndarray:
    """The MPSCNN numpy model with the weight MPSCNN is given: NAME_mpscnn_weight.dat for the transpose,
    the layer's own (OHWI) weight for the convolution."""
    if not layer.transposed:
        return mpscnn_model.convolution(x, saved_weight, layer.mpscnn_settings, saved_bias)
    mps_weight, _ = weights.load_mps(directory, _mpscnn_name(layer.name), _mpscnn_weight_shape(layer.geometry))
    return mpscnn_model.convolution_transpose(x, mps_weight, layer.mpscnn_settings, saved_bias)


def _max_error(actual, expected) -> float:
    if actual.shape != expected.shape:
        return float("inf")
    return float(np.abs(actual.astype(np.float64) - expected).max())


def _manifest_entry(graph, layer, files, error_fastdeconv, error_mpscnn, tolerance) -> dict:
    """The layer's entry in manifest.json (see the module docstring)."""
    g, node, transposed = layer.geometry, layer.chain.conv, layer.transposed
    return {
        "name": layer.name,
        "kind": layer.kind,
        "onnx_node": node.name,
        "onnx_op": node.op_type,
        "input_shape_nhwc": list(g.input_shape),
        "output_shape_nhwc": list(g.output_shape),
        "in_channels": g.in_channels,
        "out_channels": g.out_channels,
        "kernel_hw": list(g.kernel_hw),
        "stride": list(g.stride),
        "padding": [list(p) for p in g.pad],
        "dilation": list(g.dilation),
        "groups": g.groups,
        "output_padding": list(g.output_padding) if transposed else None,
        "weight_shape": list(layer.weight.shape),
        "weight_layout": "(C_in, kH, kW, C_out/groups)" if transposed else "(C_out, kH, kW, C_in/groups)",
        "files": files,
        "mpscnn": _mpscnn_entry(layer),
        "mpscnn_unsupported_reason": layer.mpscnn_reason,
        "batchnorm": _batchnorm_entry(layer.chain.batchnorm, layer.batchnorm),
        "activation": _activation_entry(graph, layer.chain.activation),
        "max_error": {"fastdeconv": error_fastdeconv, "mpscnn_model": error_mpscnn, "tolerance": tolerance},
    }


def _mpscnn_entry(layer):
    if layer.mpscnn_settings is None:
        return None
    entry = {"class": "MPSCNNConvolutionTranspose" if layer.transposed else "MPSCNNConvolution"}
    entry.update(vars(layer.mpscnn_settings))
    entry["weight_shape"] = list(_mpscnn_weight_shape(layer.geometry))
    entry["weight_file"] = "mpscnn_weight" if layer.transposed else "weight"
    return entry


def _batchnorm_entry(node, parameters):
    if node is None:
        return None
    # The float32 that ONNX stores, written as its shortest decimal: 1e-05, not 9.999999747378752e-06.
    return {"node": node.name, "epsilon": float(str(np.float32(parameters["eps"]))), "folded": True}


def _activation_entry(graph, node):
    if node is None:
        return None
    entry = {"op": node.op_type, "node": node.name}
    entry.update(ACTIVATIONS[node.op_type])
    entry.update({k: v for k, v in graph.attributes(node).items() if isinstance(v, (int, float))})
    if node.op_type == "Clip":
        for index, bound in ((1, "min"), (2, "max")):
            value = graph.constant(node, index, f"{bound} input")
            if value is not None:
                entry[bound] = float(value)
    if node.op_type == "PRelu":
        entry["slope"] = np.asarray(graph.constant(node, 1, "slope"), dtype=float).ravel().tolist()
    return entry


def _batchnorm_parameters(graph, node):
    attrs = graph.attributes(node)
    text = graph.describe(node)
    if attrs.get("training_mode", 0):
        raise ConversionError(f"{text}: training_mode=1 cannot be folded (inference-mode BatchNormalization only)")
    if attrs.get("spatial", 1) != 1:
        raise ConversionError(f"{text}: spatial={attrs['spatial']} is not supported (per-channel statistics only)")
    if len([o for o in node.output if o]) > 1:
        raise ConversionError(f"{text}: the running mean/var outputs are used; only inference mode can be folded")
    gamma, beta, mean, var = (graph.constant(node, i, what) for i, what in
                              ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")))
    return {"gamma": gamma, "beta": beta, "mean": mean, "var": var, "eps": float(attrs.get("epsilon", 1e-5))}


# --------------------------------------------------------------------------------------------------------
# The ONNX side of the verification
# --------------------------------------------------------------------------------------------------------

def _onnx_reference(graph, chain, arguments, x_nchw) -> np.ndarray:
    """Run the original Conv/ConvTranspose (+ BatchNormalization) node in a tiny model through
    onnx.reference.ReferenceEvaluator.

    Two rewrites work around the reference implementation where it departs from the ONNX spec (onnx
    1.14-1.23, ``onnx/reference/ops/op_conv_transpose.py``): a grouped ConvTranspose is evaluated as
    ``group`` ungrouped ConvTranspose nodes on Split slices (its group path slices W by output channels
    and keeps one output channel per group), and ``output_shape`` is replaced by the pads and
    output_padding that the spec derives from it (the reference ignores it when pads are given).
    """
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    node = chain.conv
    initializers, nodes = [], []

    def constant(name, value, dtype=np.float32):
        initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    attributes = graph.attributes(node)
    weight = graph.constant(node, 1, "weight")
    bias = graph.constant(node, 2, "bias")
    if node.op_type == "ConvTranspose" and "output_shape" in attributes:
        del attributes["output_shape"]
        attributes.pop("auto_pad", None)
        (top, bottom), (left, right) = arguments["padding"]
        attributes["pads"] = [top, left, bottom, right]
        attributes["output_padding"] = list(arguments["output_padding"])
    groups = int(attributes.get("group", 1))
    if node.op_type == "ConvTranspose" and groups > 1:
        attributes["group"] = 1
        slices = [f"x{g}" for g in range(groups)]
        split = constant("split", [x_nchw.shape[1] // groups] * groups, np.int64)
        nodes.append(helper.make_node("Split", ["x", split], slices, axis=1))
        in_per_group, out_per_group = weight.shape[0] // groups, weight.shape[1]
        parts = []
        for g in range(groups):
            inputs = [slices[g], constant(f"W{g}", weight[g * in_per_group:(g + 1) * in_per_group])]
            if bias is not None:
                inputs.append(constant(f"B{g}", bias[g * out_per_group:(g + 1) * out_per_group]))
            nodes.append(helper.make_node("ConvTranspose", inputs, [f"y{g}"], **attributes))
            parts.append(f"y{g}")
        nodes.append(helper.make_node("Concat", parts, ["conv"], axis=1))
    else:
        inputs = ["x", constant("W", weight)] + ([constant("B", bias)] if bias is not None else [])
        nodes.append(helper.make_node(node.op_type, inputs, ["conv"], **attributes))
    result = "conv"
    if chain.batchnorm is not None:
        parameters = _batchnorm_parameters(graph, chain.batchnorm)
        inputs = ["conv"] + [constant(key, parameters[key]) for key in ("gamma", "beta", "mean", "var")]
        nodes.append(helper.make_node("BatchNormalization", inputs, ["bn"], epsilon=parameters["eps"]))
        result = "bn"
    tiny = helper.make_model(
        helper.make_graph(nodes, "verify", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_nchw.shape)],
                          [helper.make_tensor_value_info(result, TensorProto.FLOAT, None)], initializers),
        opset_imports=[helper.make_opsetid("", VERIFY_OPSET)])
    return np.asarray(ReferenceEvaluator(tiny).run(None, {"x": x_nchw})[0])

