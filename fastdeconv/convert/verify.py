"""Verification for ``fastdeconv convert``: each layer on its own, and the whole network from the files.

**Per layer** (always): the layer's files run through fastdeconv (and the MPSCNN numpy model with the
MPSCNN files) on a seeded random input, against onnx's ReferenceEvaluator on the original
Conv/ConvTranspose node and the nodes folded into it. A mismatch names the layer.

**Whole network** (:func:`verify_network`): ``manifest.json`` and the ``.dat`` files of an output
directory are read back; the ONNX graph runs in ``onnx.reference.ReferenceEvaluator`` with Conv and
ConvTranspose replaced (its ``new_ops``) by implementations that call fastdeconv with the loaded weights
(the folded BatchNormalization and Add/Sub/Mul/Div nodes are removed from the graph, the layer computes
them; the check fails unless every converted layer was substituted); a second run uses the
numpy MPSCNN model (:mod:`fastdeconv.metal.mpscnn_model`) with the MPSCNN files for every layer MPSCNN can
express (fastdeconv for the others). Both are compared, output by output, with the unmodified graph in
``onnx.reference`` and, when it is installed and can load the model, onnxruntime, on one seeded
standard-normal input (a symbolic batch dimension is 1).

It runs when onnx.reference can run the model's other ops: building the evaluator loads an
implementation for every node (an op it lacks, or a custom domain, fails there) and some attribute
combinations fail only when run; either failure, or a graph input that is not a float tensor with
static non-batch dimensions, gives status "not run" with the reason, and the conversion rests on the
per-layer verification.

onnx.reference departs from the ONNX spec for ConvTranspose (onnx 1.21-1.23,
``onnx/reference/ops/op_conv_transpose.py``): a grouped layer fails or keeps one output channel per group,
and ``output_shape`` is applied as a crop at the end instead of deriving the pads from it; and for
BatchNormalization opsets 9-13 with a ``momentum`` attribute (torch's exports at opset 11) it mixes the
batch's own statistics into the running ones, where the spec (one output: inference) uses the given mean
and variance; onnx.reference 1.21 also pads a SAME Conv wrongly on odd sizes. Every run here uses
:func:`reference_ops` (:mod:`.oracle`), which pads a SAME Conv per the spec, evaluates a grouped
ConvTranspose as one ungrouped call per group, turns output_shape (and SAME auto_pad) into the pads and
output_padding the spec gives, and computes an inference-mode BatchNormalization (one output, no training_mode) as
``scale·(x − mean)/sqrt(var + epsilon) + bias`` (training mode: NotImplementedError, so "not run").
"""

from __future__ import annotations

import functools
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import weights
from ..metal import mpscnn_model
from .graph import CONV_OPS, DEFAULT_VERIFY_ELEMENTS, FLOAT_TYPES, ConversionError
from .oracle import reference_ops

__all__ = ["RELATIVE_TOLERANCE", "layer_runner", "reference_ops", "max_error", "NetworkCheck", "verify_network",
           "onnxruntime_rejection", "oversized_reason"]

#: Largest accepted max|error| / max(1, max|reference|) in float32, for a layer and for a network output.
RELATIVE_TOLERANCE = 1e-4
_RUN_NAMES = {"fastdeconv": "fastdeconv", "mpscnn_model": "MPSCNN model"}


def layer_runner(transposed, weight, bias, arguments):
    """A callable x (N, H, W, C_in) -> y for one layer, its weights prepared once: a
    :class:`fastdeconv.ConvTranspose2d` or :class:`fastdeconv.Conv2d`."""
    from .._layers import Conv2d, ConvTranspose2d

    return (ConvTranspose2d if transposed else Conv2d)(weight, bias, **arguments)


def _numeric(value) -> bool:
    return value.dtype.kind in "biuf"


def max_error(actual, expected) -> float:
    """max |actual − expected| in float64; inf for a shape mismatch; equal values (the same infinity
    included) and NaN where both are NaN count 0. Values that are not numbers (a STRING output) are
    compared exactly: 0 when equal, else inf."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return float("inf")
    if not (_numeric(actual) and _numeric(expected)):
        return 0.0 if np.array_equal(actual, expected) else float("inf")
    actual, expected = actual.astype(np.float64), expected.astype(np.float64)
    if actual.size == 0:
        return 0.0
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    with np.errstate(invalid="ignore"):   # inf − inf where the infinities differ in sign or place
        difference = np.where(same, 0.0, np.abs(actual - expected))
    return float(np.nan_to_num(difference, nan=np.inf).max())


def tolerance_for(expected) -> float:
    """The network check's tolerance for an output: relative to its largest finite value; 0 for values
    that are not numbers."""
    expected = np.asarray(expected)
    if not _numeric(expected):
        return 0.0
    expected = expected.astype(np.float64)
    finite = expected[np.isfinite(expected)]
    return RELATIVE_TOLERANCE * max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)


def _converted_ops(runners, reference, substituted) -> list:
    """``new_ops`` whose Conv / ConvTranspose call ``runners[output tensor]`` (NCHW in and out, the
    runner works in NHWC) and add that tensor to the set ``substituted``; a node without a runner keeps
    the (corrected) reference implementation."""
    _ReferenceConv, _ReferenceConvTranspose, *others = reference

    def run_layer(node, X):
        substituted.add(node.output[0])
        y = runners[node.output[0]](np.ascontiguousarray(X.transpose(0, 2, 3, 1), dtype=np.float32))
        return (np.ascontiguousarray(np.asarray(y).transpose(0, 3, 1, 2)).astype(X.dtype),)

    class Conv(_ReferenceConv):
        op_domain = ""

        def _run(self, X, W, B=None, **attributes):
            if self.onnx_node.output[0] in runners:
                return run_layer(self.onnx_node, X)
            return super()._run(X, W, B, **attributes)

    class ConvTranspose(_ReferenceConvTranspose):
        op_domain = ""

        def _run(self, X, W, B=None, **attributes):
            if self.onnx_node.output[0] in runners:
                return run_layer(self.onnx_node, X)
            return super()._run(X, W, B, **attributes)

    return [Conv, ConvTranspose, *others]


# --------------------------------------------------------------------------------------------------------
# The whole network, from the written files
# --------------------------------------------------------------------------------------------------------

class _NotRunnable(Exception):
    """The whole-network check cannot run on this model (the reason is the message)."""


@dataclass
class NetworkCheck:
    """The whole-network verification: status "passed", "failed" or "not run" (with the reason)."""

    status: str
    reason: str | None = None
    seed: int = 0
    inputs: dict = field(default_factory=dict)      # graph input -> shape fed
    outputs: list = field(default_factory=list)     # per output: name, shape, tolerance, max_error {...}
    notes: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    @property
    def worst(self):
        """(largest error, its tolerance) over outputs and comparisons, or None."""
        pairs = [(e, o["tolerance"]) for o in self.outputs for e in o["max_error"].values() if e is not None]
        def relative(pair):   # an exact comparison (tolerance 0) either matches or is the worst
            error, tolerance = pair
            return error / tolerance if tolerance > 0 else (0.0 if error == 0 else float("inf"))

        return max(pairs, key=relative) if pairs else None

    def entry(self) -> dict:
        return {"status": self.status, "reason": self.reason, "seed": self.seed,
                "inputs": {k: list(v) for k, v in self.inputs.items()}, "outputs": self.outputs,
                "notes": self.notes, "seconds": round(self.seconds, 3)}

    def lines(self) -> list:
        """Human-readable lines, one per output."""
        if self.status == "not run":
            return [f"whole-network verification not run: {self.reason}"]
        lines = []
        for output in self.outputs:
            by_run = {}
            for comparison, error in output["max_error"].items():
                run, oracle = comparison.split(" vs ")
                by_run.setdefault(run, []).append(f"{'n/a' if error is None else f'{error:.1e}'} vs {oracle}")
            ok = all(e is not None and e <= output["tolerance"] for e in output["max_error"].values())
            lines.append(f"network output {output['name']!r} {'x'.join(map(str, output['shape']))} (tolerance "
                         f"{output['tolerance']:.1e}): " + "; ".join(f"{_RUN_NAMES.get(run, run)} {', '.join(errors)}"
                                                               for run, errors in by_run.items())
                         + f" -> {'ok' if ok else 'MISMATCH'}")
        if self.reason:
            lines.append(f"whole-network verification failed: {self.reason}")
        return lines + [f"note: {note}" for note in self.notes]


def _feeds(graph, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in graph.graph_inputs:
        dtype = FLOAT_TYPES.get(graph.elem_types.get(info.name))
        shape = graph.shapes.get(info.name)
        if dtype is None:
            raise _NotRunnable(f"graph input {info.name!r} is not a float tensor")
        if shape is None or any(v is None for v in shape[1:]):
            raise _NotRunnable(f"graph input {info.name!r} has shape "
                               f"{None if shape is None else tuple('?' if v is None else v for v in shape)}; "
                               "only the batch dimension may be symbolic (give the others with --input-shape)")
        shape = tuple(1 if v is None else v for v in shape)
        feeds[info.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _read_dat(directory, filename, shape):
    """A .dat file named by the manifest: a plain file name inside ``directory`` (never a path out of it,
    nor a symbolic link)."""
    path = Path(directory) / str(filename)
    if Path(str(filename)).name != filename or filename in ("", ".", "..") or path.is_symlink() \
            or path.resolve().parent != Path(directory).resolve():
        raise ValueError(f"the manifest names {filename!r}, which is not a file name inside {directory}")
    shape = tuple(int(v) for v in shape)
    size, expected = path.stat().st_size, 4 * int(np.prod(shape))
    if size != expected:
        raise ValueError(f"{path} has {size} bytes, but shape {shape} needs {expected} (raw float32)")
    return np.fromfile(path, dtype="<f4").reshape(shape)


def _layer_arguments(layer) -> dict:
    arguments = {"stride": tuple(layer["stride"]), "padding": tuple(tuple(p) for p in layer["padding"]),
                 "dilation": tuple(layer["dilation"]), "groups": layer["groups"]}
    if layer["kind"] == "conv_transpose2d":
        arguments["output_padding"] = tuple(layer["output_padding"])
    return arguments


def _runners(layers, directory, use_mpscnn):
    """tensor name (the layer's output in the rewritten graph) -> x -> y, from the files alone; and how
    many layers run the MPSCNN model."""
    runners, on_mpscnn = {}, 0
    for layer in layers:
        files, transposed = layer["files"], layer["kind"] == "conv_transpose2d"
        weight = _read_dat(directory, files["weight"], layer["weight_shape"])
        bias = _read_dat(directory, files["bias"], (layer["out_channels"],)) if "bias" in files else None
        settings = layer.get("mpscnn")
        if use_mpscnn and settings is not None:
            parameters = {k: v for k, v in settings.items() if k not in ("class", "weight_shape", "weight_file")}
            if transposed:
                mps_weight = _read_dat(directory, files["mpscnn_weight"], settings["weight_shape"])
                params = weights.MPSCNNTransposeParams(**parameters)
                runners[layer["onnx_output_before_activation"]] = functools.partial(
                    mpscnn_model.convolution_transpose, w_mpscnn=mps_weight, params=params, bias=bias)
            else:
                params = weights.MPSCNNConvolutionParams(**parameters)
                runners[layer["onnx_output_before_activation"]] = functools.partial(
                    mpscnn_model.convolution, w_ohwi=weight, params=params, bias=bias)
            on_mpscnn += 1
        else:
            runners[layer["onnx_output_before_activation"]] = layer_runner(transposed, weight, bias,
                                                                           _layer_arguments(layer))
    return runners, on_mpscnn


def _folded_outputs(layer) -> set:
    """The outputs of the nodes folded into a manifest layer (older manifests: the BatchNormalization)."""
    folded = layer.get("folded")
    if folded is None:
        folded = [layer["batchnorm"]] if layer.get("batchnorm") else []
    return {entry["output"] for entry in folded}


def _rewritten_model(model, layers):
    """A copy of the model where each converted layer's conv node writes the tensor the layer computes
    (the last folded node's output) and the folded nodes are gone; and the names of the layers whose conv
    output is not in the model (a manifest that does not belong to it)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    by_conv_output = {layer["onnx_conv_output"]: layer for layer in layers}
    folded = set().union(*(_folded_outputs(layer) for layer in layers))
    kept, found = [], set()
    for node in copy.graph.node:
        if node.output and node.output[0] in folded:
            continue
        layer = by_conv_output.get(node.output[0]) if node.op_type in CONV_OPS else None
        if layer is not None:
            node.output[0] = layer["onnx_output_before_activation"]
            found.add(layer["name"])
        kept.append(node)
    del copy.graph.node[:]
    copy.graph.node.extend(kept)
    return copy, [layer["name"] for layer in layers if layer["name"] not in found]


def _onnxruntime_session(graph):
    """An onnxruntime session of ``graph``'s model: from memory, or from its file (with its external
    data, already checked) when it is too large to serialize."""
    import onnxruntime

    from google.protobuf.message import EncodeError

    try:
        source = graph.model.SerializeToString()
    except EncodeError:   # over 2 GiB
        source = str(graph.path)
    return onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])


def onnxruntime_rejection(graph):
    """Why onnxruntime refuses to load ``graph``'s model (one line), or None: it loads it, or onnxruntime
    is not installed. A model it refuses (an unknown opset, integer Conv weights, ...) is not a valid
    ONNX model for any runtime, whatever onnx.reference makes of it."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    try:
        _onnxruntime_session(graph)
    except Exception as error:   # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
        # "[ONNXRuntimeError] : 1 : FAIL : /src/file.h:46 void f(...) The message.": the message
        text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", _first_line(error))
        text = re.sub(r"^/\S+:\d+ .*?\) (?=[A-Z])", "", text)
        return f"{type(error).__name__}: {text if len(text) <= 300 else text[:297] + '...'}"
    return None


def _onnxruntime_outputs(graph, feeds, notes):
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        notes.append("onnxruntime is not installed: compared with onnx.reference only")
        return None
    try:
        return _onnxruntime_session(graph).run(None, feeds)
    except Exception as error:   # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
        notes.append(f"onnxruntime could not run the model ({type(error).__name__}: "
                     f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}); "
                     "compared with onnx.reference only")
        return None


def oversized_reason(graph, max_elements):
    """Why the whole network is too large to run for verification, or None."""
    found = graph.oversized(max_elements)
    if found is None:
        return None
    return (f"tensor {found[0]!r} would have {found[1]:,} elements, over the verification budget of "
            f"{max_elements:,} (--max-verify-elements)")


def verify_network(graph, manifest, directory, *, seed=0, mpscnn=True,
                   max_elements=DEFAULT_VERIFY_ELEMENTS) -> NetworkCheck:
    """Run the whole network with the layers read back from ``directory`` (see the module docstring).

    ``graph`` is the model's :class:`fastdeconv.convert.graph.OnnxGraph`, ``manifest`` the parsed
    manifest.json of ``directory``. Returns a :class:`NetworkCheck`; status "not run" when onnx.reference
    cannot run the model or a tensor would have more than ``max_elements`` elements (never raises for
    that).
    """
    from onnx.reference import ReferenceEvaluator

    started = time.perf_counter()
    check = NetworkCheck("not run", seed=seed)
    reference_fix = reference_ops()
    try:
        too_large = oversized_reason(graph, max_elements)
        if too_large is not None:
            raise _NotRunnable(too_large)
        feeds = _feeds(graph, seed)
        check.inputs = {name: value.shape for name, value in feeds.items()}
        try:
            expected = ReferenceEvaluator(graph.model, new_ops=reference_fix).run(None, feeds)
        except Exception as error:   # NotImplementedError, or whatever an op's implementation raises
            raise _NotRunnable(f"onnx.reference cannot run this model ({type(error).__name__}: "
                               f"{_first_line(error)})") from None
    except _NotRunnable as reason:
        check.reason, check.seconds = str(reason), time.perf_counter() - started
        return check
    layers = manifest["layers"]
    rewritten, missing = _rewritten_model(graph.model, layers)
    runs = [("fastdeconv", False)]
    if mpscnn and any(layer.get("mpscnn") is not None for layer in layers):
        runs.append(("mpscnn_model", True))
    results = {}
    check.status = "passed"
    for label, use_mpscnn in runs:
        try:
            runners, on_mpscnn = _runners(layers, directory, use_mpscnn)
            substituted = set()
            evaluator = ReferenceEvaluator(rewritten, new_ops=_converted_ops(runners, reference_fix, substituted))
            results[label] = evaluator.run(None, feeds)
        except Exception as error:   # a missing or short file, a shape that does not fit, ...
            check.status = "failed"
            check.reason = f"the {label} run failed: {type(error).__name__}: {_first_line(error)}"
            results[label] = None
            continue
        if missing or len(substituted) != len(layers):
            # A check that compares the model with itself would pass whatever the files hold.
            check.status = "failed"
            check.reason = (f"the {label} run substituted {len(substituted)} of the {len(layers)} converted "
                            "layers into the network" + (f"; not in the model: {', '.join(missing)}"
                                                          if missing else "")
                            + " (does the manifest belong to this model?)")
        if use_mpscnn:
            check.notes.append(f"mpscnn_model run: {on_mpscnn} of {len(layers)} layers on the MPSCNN model "
                               "with the MPSCNN files, the others on fastdeconv")
    ort = _onnxruntime_outputs(graph, feeds, check.notes)
    for index, name in enumerate(graph.graph_outputs):
        reference = np.asarray(expected[index])
        errors = {}
        for label, _ in runs:
            got = None if results[label] is None else results[label][index]
            errors[f"{label} vs onnx.reference"] = None if got is None else max_error(got, reference)
            if ort is not None:
                errors[f"{label} vs onnxruntime"] = None if got is None else max_error(got, ort[index])
        tolerance = tolerance_for(reference)
        check.outputs.append({"name": name, "shape": list(reference.shape), "tolerance": tolerance,
                              "max_error": errors})
        if any(e is not None and not e <= tolerance for e in errors.values()):
            check.status = "failed"
        if ort is not None:
            # the two oracles against each other: a large value points at the oracle, not the conversion
            check.outputs[-1]["onnx.reference vs onnxruntime"] = max_error(reference, ort[index])
    check.seconds = time.perf_counter() - started
    return check


def verify_directory(model_path, directory, *, seed=0, mpscnn=True,
                     max_elements=DEFAULT_VERIFY_ELEMENTS) -> NetworkCheck:
    """:func:`verify_network` on a converted output directory (its manifest.json and .dat files).

    The ONNX graph runs in onnx.reference with its Conv and ConvTranspose nodes replaced by fastdeconv
    on the weights read back from the directory, and is compared with the unmodified graph.

    Examples
    --------
    >>> import os, tempfile
    >>> from fastdeconv import convert
    >>> outdir = os.path.join(tempfile.mkdtemp(), "decoder_mps")
    >>> _ = convert.convert(convert.DEFAULT_MODEL, outdir, verify_model=False)
    >>> convert.verify_directory(convert.DEFAULT_MODEL, outdir).status
    'passed'
    """
    from .graph import OnnxGraph

    manifest_path = Path(directory) / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as error:
        raise ConversionError(f"cannot read {manifest_path}: {error}") from None
    # the input sizes the files were converted at (a symbolic batch is run as 1)
    shapes = {entry["name"]: tuple(1 if v is None else v for v in entry["shape"])
              for entry in manifest.get("graph_inputs", [])
              if entry.get("shape_source", "model") != "model" and entry.get("shape") is not None}
    graph = OnnxGraph.load(model_path, shapes)
    return verify_network(graph, manifest, directory, seed=seed, mpscnn=mpscnn, max_elements=max_elements)


def _first_line(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)
