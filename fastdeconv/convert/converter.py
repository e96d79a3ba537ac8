"""``fastdeconv convert [MODEL.onnx] OUTDIR``: ONNX conv layers -> MPS weight files, verified.

Every Conv / ConvTranspose node of the ONNX graph whose weight is constant (an initializer or a Constant,
also through Identity, Cast, Reshape, Transpose, Squeeze and Unsqueeze: torch's exporter names a tied
weight's second use through an Identity, tf2onnx stores kernels behind a Transpose) becomes a layer. The
nodes after it that compute a per-channel ``scale·y + shift`` -- inference-mode BatchNormalization, and
Add/Sub/Mul/Div of a per-channel constant (paddle2onnx's bias Add) -- are folded in, in order
(:func:`fastdeconv.weights.fold_batchnorm`), and the activation after them is recorded. A symbolic input
height and width is fixed first (``input_shapes``, or a default size: :meth:`OnnxGraph.load`). The
converter writes into OUTDIR (raw little-endian float32, C order, see :func:`fastdeconv.weights.save_mps`):

* convolutions: ``NAME_weight.dat`` (C_out, kH, kW, C_in/groups) -- MPSCNNConvolution's OHWI, and ours --
  and ``NAME_bias.dat`` (C_out,);
* transposed convolutions: ``NAME_weight.dat`` in our layout (C_in, kH, kW, C_out/groups), i.e. the
  forward convolution's OHWI weight, unrotated (the MPSGraph / fastdeconv weight), ``NAME_bias.dat``, and,
  when MPSCNN can express the layer, ``NAME_mpscnn_weight.dat``: (C_out, kH, kW, C_in/groups) rotated by
  180° for MPSCNNConvolutionTranspose (:func:`fastdeconv.weights.to_mpscnn_transpose`);
* ``manifest.json`` (names exactly as in the model): per layer its ONNX node, input and output tensors
  (``onnx_input``; ``onnx_output`` after the recorded activation, ``onnx_output_before_activation`` what
  the weights compute), the initializer its weight comes from and the layers sharing it, shapes, stride,
  padding ((top, bottom), (left, right)), dilation, groups, output padding, the files with their shapes,
  the MPSCNN settings (kernelOffsetX/Y, offset, destination size; null with a reason where MPSCNN cannot
  express the layer), the folded nodes (``folded``; ``batchnorm``: the first BatchNormalization), the
  activation and the verification errors; the graph inputs with the shape used and where it came from;
  the ``skipped`` nodes (node, op, reason, input and output tensors: what the app must run and wire,
  e.g. the Concat of a skip connection); the whole-network ``verification``; and a one-line ``summary``.

Every other node (Add, Concat, pooling, an activation that does not directly follow a layer, a
BatchNormalization that cannot be folded, a conv whose weight is not constant, ...) is skipped and listed
with the reason; ``strict=True`` (``--strict``) refuses such a model before anything is written. Nodes
that only compute constants (Constant, and the ops above on constants) are neither.

Before anything lands in OUTDIR, every layer is verified on random input (fastdeconv with the weights read
back from the .dat files, and the MPSCNN numpy model with the MPSCNN weights, against onnx's
ReferenceEvaluator on the original conv and folded nodes), then the whole network from the written files
(:mod:`fastdeconv.convert.verify`: fastdeconv, and the MPSCNN model, in place of every converted layer,
against onnx.reference and onnxruntime when installed). The files are written into a temporary directory
next to OUTDIR and moved into place only if everything matches; an existing OUTDIR is replaced only with
``force``.

Exit codes of :func:`main`: 0 success; 1 bad input, a mismatch, or ``--verify-model`` on a model onnx.reference
cannot run (nothing written); 2 usage, a skipped node or a model onnxruntime refuses under ``--strict``
(nothing written), or onnx missing; 128 + N for signal N (SIGTERM, SIGHUP), nothing written.
onnx is imported only inside the functions: ``import fastdeconv`` never needs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import _params, weights
from .._version import __version__
from ..metal import mpscnn_model
from .graph import (
    ACTIVATIONS,
    CONV_OPS,
    DEFAULT_VERIFY_ELEMENTS,
    Chain,
    ConversionError,
    OnnxGraph,
    parse_input_shape,
)
from .verify import (
    RELATIVE_TOLERANCE,  # noqa: F401 - fastdeconv.convert.RELATIVE_TOLERANCE
    NetworkCheck,
    _first_line,
    layer_runner,
    max_error,
    onnxruntime_rejection,
    oversized_reason,
    reference_ops,
    tolerance_for,
    verify_directory,
    verify_network,
)

__all__ = ["main", "convert", "verify_directory", "Conversion", "ConversionError", "StrictModeError",
           "LayerResult", "NetworkCheck", "DEFAULT_MODEL", "INSTALL_HINT", "EXIT_CODES"]

DEFAULT_MODEL = Path(__file__).with_name("default_decoder.onnx")
INSTALL_HINT = ('pip install "onnx>=1.21" (the convert extra; from a clone of the repository: pip install -e ".[convert]"; '
                'fastdeconv is not on PyPI)')
#: Opset of the one/two-node models run by onnx's ReferenceEvaluator for the per-layer check.
VERIFY_OPSET = 17
#: The seed of the random inputs (per layer: the layer's index; the whole network: this).
NETWORK_SEED = 0
EXIT_CODES = """\
exit codes:
  0  converted and verified; OUTDIR written
  1  bad input (a missing or unreadable model, an invalid layer), a layer or the network does not match,
     --verify-model on a model onnx.reference cannot run, or an unexpected error (a bug: the error line
     names it, --traceback prints where it happened); nothing written
  2  usage error, a node that would be skipped or a model onnxruntime refuses under --strict (nothing
     written), or onnx not installed
  128 + N  stopped by signal N (SIGTERM, SIGHUP; 130 for Ctrl-C); nothing written"""
_CONV_OPS = CONV_OPS


class StrictModeError(ConversionError):
    """``strict=True`` and the model has nodes that would be skipped. Nothing is written."""


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


@dataclass
class Conversion:
    """What :func:`convert` did: the layers, the skipped nodes, the whole-network check (None when not
    asked for) and whether OUTDIR was written."""

    layers: list
    skipped: list
    network: NetworkCheck | None
    written: bool
    seconds: float = 0.0
    network_note: str = "--no-verify-model"   # why network is None
    inputs: dict = field(default_factory=dict)   # OnnxGraph.input_shapes: declared, used, source
    onnxruntime_rejection: str | None = None     # why onnxruntime refuses to load the model

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.layers) and (self.network is None or self.network.ok)

    def folded_count(self, batchnorm: bool) -> int:
        """How many BatchNormalization nodes (``batchnorm``) or per-channel Add/Sub/Mul/Div nodes (not
        ``batchnorm``) were folded into the layers."""
        return sum((e["op"] == "BatchNormalization") == batchnorm for r in self.layers for e in r.manifest["folded"])

    @property
    def folded(self) -> int:
        """The number of BatchNormalization nodes folded."""
        return self.folded_count(batchnorm=True)

    def summary(self) -> str:
        """'converted 14 layers (6 BatchNorm folded); skipped 12 nodes: Concat×6, Relu×6; ...'."""
        affine = self.folded_count(batchnorm=False)
        text = (f"converted {len(self.layers)} layer{'s' * (len(self.layers) != 1)} ({self.folded} BatchNorm"
                + (f", {affine} Add/Sub/Mul/Div" if affine else "") + " folded)")
        text += f"; skipped {len(self.skipped)} node{'s' * (len(self.skipped) != 1)}"
        if self.skipped:
            text += ": " + OnnxGraph.skipped_counts(self.skipped)
        worst_layer = max((r.error_fastdeconv for r in self.layers), default=0.0)
        text += f"; max layer error {worst_layer:.1e}"
        if self.network is None:
            text += f"; whole network not verified ({self.network_note})"
        elif self.network.status == "not run":
            text += "; whole network not verified (see above)"
        elif self.network.worst is not None:
            text += f"; max network error {self.network.worst[0]:.1e} ({self.network.status})"
        if self.onnxruntime_rejection is not None:
            text += "; onnxruntime refuses to load the model"
        for name, entry in self.inputs.items():
            if entry["source"] != "model":
                text += (f"; input {name!r} at {_shape_text(entry['shape'])} ({entry['source']}; the model "
                         f"declares {_shape_text(entry['declared'])})")
        return text


def _network_setting(verify_model):
    if verify_model not in (None, True, False):
        raise ValueError(f"verify_model must be None (when onnx.reference can run the model), True or False, "
                         f"got {verify_model!r}")
    return verify_model


# --------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------

def main(paths: list[str], force: bool = False, strict: bool = False, verify_model: bool | None = None,
         input_shapes: list[str] | None = None, max_verify_elements: int = DEFAULT_VERIFY_ELEMENTS,
         traceback: bool = False) -> int:
    """``fastdeconv convert [--force] [--strict] [--[no-]verify-model] [--input-shape NAME:N,C,H,W ...]
    [--max-verify-elements N] [--traceback] [MODEL.onnx] OUTDIR``; returns the exit code (see
    :data:`EXIT_CODES`). An exception that is not a :class:`ConversionError` is one error line naming it
    (with ``traceback``, re-raised), as the staging folder is removed either way."""
    try:
        import onnx  # noqa: F401
        import onnx.reference  # noqa: F401 - onnx without its reference evaluator is not enough
    except ImportError:
        return _error(f"'fastdeconv convert' needs the onnx package; install it with: {INSTALL_HINT}", 2)
    if len(paths) == 1:
        model_path, outdir = DEFAULT_MODEL, paths[0]
    elif len(paths) == 2:
        model_path, outdir = paths
    else:
        return _error(f"convert takes [MODEL.onnx] OUTDIR (one or two paths), got {len(paths)} paths: {paths}", 2)
    try:
        shapes = _parse_input_shapes(input_shapes or [])
    except ValueError as error:
        return _error(error, 2)
    try:
        with _signals_raise_system_exit():
            result = convert(model_path, outdir, force=force, strict=strict, verify_model=verify_model,
                             progress=sys.stderr, input_shapes=shapes, max_verify_elements=max_verify_elements)
    except StrictModeError as error:
        return _error(error, 2)
    except ConversionError as error:
        return _error(error, 1)
    except KeyboardInterrupt:
        return _error(f"interrupted; nothing was written to {outdir}", 128 + signal.SIGINT)
    except Exception as error:   # a bug, or memory exhausted: one line, the traceback on request
        if traceback:
            raise
        text = str(error).strip()
        return _error(f"converting {model_path} failed unexpectedly ({type(error).__name__}"
                      f"{': ' + _first_line(error) if text else ''}); nothing was written to {outdir}. Run "
                      "again with --traceback to see where, and please report it with the model", 1)
    print(format_table(result.layers))
    if result.network is not None:
        for line in result.network.lines():
            print(line)
    summary = result.summary()
    if not result.ok:
        failed = [r.name for r in result.layers if not r.ok]
        what = (f"{len(failed)} of {len(result.layers)} layers do not match the ONNX reference ({', '.join(failed)})"
                if failed else "the whole network does not match the ONNX reference")
        print(f"error: {what}; nothing was written to {outdir}", file=sys.stderr)
        print(_printable(summary))
        return 1
    print(_printable(f"{summary}; wrote {outdir}"))
    return 0


def _error(message, code: int) -> int:
    """Print ``error: message`` on stderr; return the exit code."""
    print(f"error: {message}", file=sys.stderr)
    return code


def _parse_input_shapes(texts) -> dict:
    """{name: shape} from --input-shape values; ValueError for a malformed one or a name given twice."""
    shapes = {}
    for text in texts:
        name, shape = parse_input_shape(text)
        if name in shapes:
            raise ValueError(f"--input-shape {text!r}: {name!r} is given twice")
        shapes[name] = shape
    return shapes


@contextlib.contextmanager
def _signals_raise_system_exit():
    """SIGTERM and SIGHUP (a closed terminal) raise SystemExit(128 + signal number) while converting, so
    that the staging folder is removed as for any other exception (the default action would kill the
    process and leave it). Only in the main thread, where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    saved = {}
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None:
            saved[number] = signal.signal(number, handler)
    try:
        yield
    finally:
        for number, previous in saved.items():
            signal.signal(number, previous)


def _printable(text, stream=None) -> str:
    """``text`` with × as x where the stream's encoding has no ×."""
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        text = text.replace("×", "x")
    return text


def _shape_text(shape) -> str:
    return "?" if shape is None else "x".join("?" if v is None else str(v) for v in shape)


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

def convert(model_path, outdir, *, force: bool = False, strict: bool = False, verify_model: bool | None = None,
            progress=None, input_shapes: dict | None = None,
            max_verify_elements: int = DEFAULT_VERIFY_ELEMENTS) -> Conversion:
    """Convert and verify every conv layer of ``model_path`` into ``outdir``; see the module docstring.

    ``verify_model``: None runs the whole-network check when onnx.reference can run the model (else a
    note, and the per-layer checks decide); True requires it (ConversionError when it cannot run);
    False skips it. ``input_shapes`` ({graph input: (N, C, H, W)}) fixes symbolic input sizes; a symbolic
    height and width not given is verified at a default size (:meth:`OnnxGraph.load`). Returns a
    :class:`Conversion`; ``max_verify_elements`` bounds every tensor of the checks (a layer over it is
    verified on a smaller input, the whole network is not run). OUTDIR is created (or, with ``force``, replaced) only
    if everything matches. Raises :class:`ConversionError` for bad input and :class:`StrictModeError`
    when ``strict`` and a node would be skipped.

    Examples
    --------
    The DCGAN-like decoder that ships with fastdeconv (needs the ``convert`` extra, onnx):

    >>> import json, os, tempfile
    >>> from fastdeconv import convert
    >>> outdir = os.path.join(tempfile.mkdtemp(), "decoder_mps")
    >>> conversion = convert.convert(convert.DEFAULT_MODEL, outdir)
    >>> conversion.ok, conversion.written, len(conversion.layers), conversion.network.status
    (True, True, 4, 'passed')
    >>> manifest = json.load(open(os.path.join(outdir, "manifest.json")))
    >>> [layer["kind"] for layer in manifest["layers"]]
    ['conv_transpose2d', 'conv_transpose2d', 'conv_transpose2d', 'conv_transpose2d']
    """
    started = time.perf_counter()
    verify_model = _network_setting(verify_model)
    model_path, outdir = Path(model_path), Path(outdir)
    _check_outdir(outdir, model_path, force)
    _remove_stale_staging(outdir)
    graph = OnnxGraph.load(model_path, input_shapes)
    for name, entry in graph.input_shapes.items():
        if entry["source"] != "model":
            _log(progress, f"note: graph input {name!r} {_shape_text(entry['declared'])} is converted and verified "
                           f"at {_shape_text(entry['shape'])} ({entry['source']}); the weights do not depend "
                           "on it, the manifest's geometry does")
    chains, skipped = graph.analyse()
    rejected = onnxruntime_rejection(graph)
    if rejected is not None and strict:
        raise StrictModeError(f"--strict: onnxruntime refuses to load {model_path} ({rejected}); nothing was written")
    if rejected is not None:
        _log(progress, f"warning: onnxruntime refuses to load {model_path} ({rejected}): other runtimes may refuse it "
                       "too; the checks below compare with onnx.reference only")
    if strict and skipped:
        listing = "; ".join(f"{graph.describe(s.node)}: {s.reason}" for s in skipped)
        raise StrictModeError(f"--strict: {len(skipped)} node(s) of {model_path} would be skipped "
                              f"({OnnxGraph.skipped_counts(skipped)}): {listing}; nothing was written")
    if not chains:
        reasons = "; ".join(f"{graph.describe(s.node)}: {s.reason}" for s in skipped if s.node.op_type in CONV_OPS)
        raise ConversionError(f"{model_path} has no convertible Conv or ConvTranspose node"
                              + (f" ({reasons})" if reasons else ""))
    for entry in skipped:
        _log(progress, f"note: skipped {graph.describe(entry.node)}: {entry.reason}")

    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(outdir, "partial"), dir=outdir.parent))
    try:
        _chmod_as_umask_allows(staging)
        results, names = [], set()
        for index, chain in enumerate(chains, 1):
            name = _unique_name(chain.conv.name or f"{chain.conv.op_type.lower()}{index}", names)
            _log(progress, f"[{index}/{len(chains)}] {name} ({chain.conv.op_type}"
                           f"{''.join(' + ' + n.op_type for n in chain.folded)}): converting and verifying")
            result = _convert_layer(graph, chain, name, staging, seed=index, max_elements=max_verify_elements)
            if result.manifest["verified_input_hw"] != list(result.input_shape[1:3]):
                _log(progress, f"note: {name} is verified on a {_shape_text(result.manifest['verified_input_hw'])} "
                               f"input, not its {_shape_text(result.input_shape[1:3])}: its input or output would "
                               f"have more than {max_verify_elements:,} elements (--max-verify-elements)")
            _log(progress, f"[{index}/{len(chains)}] {name}: max error {result.error_fastdeconv:.2e} (fastdeconv), "
                           f"{'n/a' if result.error_mpscnn is None else f'{result.error_mpscnn:.2e}'} (MPSCNN model)"
                           f" -> {'ok' if result.ok else 'MISMATCH'}")
            results.append(result)
        _record_sharing(graph, chains, results)
        conversion = Conversion(results, skipped, None, written=False, inputs=graph.input_shapes,
                                onnxruntime_rejection=rejected)
        if not all(r.ok for r in results):
            conversion.network_note = "a layer does not match"
            shutil.rmtree(staging)
            conversion.seconds = time.perf_counter() - started
            return conversion
        manifest = {
            "format": "raw little-endian float32, C order, no header",
            "converter": f"fastdeconv {__version__}",
            "model": str(model_path),
            "graph_inputs": [{"name": name, "shape": _shape_list(entry["shape"]),
                              "declared_shape": _shape_list(entry["declared"]), "shape_source": entry["source"]}
                             for name, entry in graph.input_shapes.items()],
            "graph_outputs": [{"name": name, "shape": _shape_list(graph.shapes.get(name))}
                              for name in graph.graph_outputs],
            "layers": [r.manifest for r in results],
            "shared_weights": _shared_weights(results),
            "skipped": [s.entry() for s in skipped],
        }
        (staging / "manifest.json").write_text(_manifest_json(manifest))
        if verify_model is not False:
            _log(progress, "whole network: running it with the layers read back from the written files")
            # read back from the staging directory: what the app will load, not what is in memory
            too_large = oversized_reason(graph, max_verify_elements)
            if too_large is not None:
                conversion.network = NetworkCheck("not run", reason=too_large, seed=NETWORK_SEED)
            else:
                conversion.network = _verify_network(graph, json.loads((staging / "manifest.json").read_text()),
                                                     staging)
            _log(progress, f"whole network: {conversion.network.status} ({conversion.network.seconds:.1f} s)")
            if conversion.network.status == "not run" and verify_model:
                raise ConversionError(f"--verify-model: {conversion.network.reason}")
            manifest["verification"] = {"layers": "passed", "network": conversion.network.entry()}
        else:
            manifest["verification"] = {"layers": "passed", "network": None}
        manifest["verification"]["onnxruntime_rejection"] = rejected
        conversion.seconds = time.perf_counter() - started
        manifest["summary"] = conversion.summary()
        if not conversion.ok:
            shutil.rmtree(staging)
            return conversion
        (staging / "manifest.json").write_text(_manifest_json(manifest))
        _move_into_place(staging, outdir)
        conversion.written = True
    except OSError as error:   # a full disk, a file size limit, a permission, ...
        shutil.rmtree(staging, ignore_errors=True)
        raise ConversionError(f"{type(error).__name__}: {error}; nothing was written to {outdir}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return conversion


def _verify_network(graph, manifest, directory):
    """The whole-network check (a seam for tests)."""
    return verify_network(graph, manifest, directory, seed=NETWORK_SEED)


def _shape_list(shape):
    return None if shape is None else [v if v is not None else None for v in shape]


def _record_sharing(graph, chains, results):
    """Each layer's ``weight_source`` (the initializer or Constant its ONNX weight resolves to) and
    ``shares_weight_with`` (the other layers whose weight resolves to the same one)."""
    sources = [graph.constant_source(chain.conv.input[1]) for chain in chains]
    for source, result in zip(sources, results):
        result.manifest["weight_source"] = source
        result.manifest["shares_weight_with"] = [other.name for s, other in zip(sources, results)
                                                 if s == source and other is not result]


def _shared_weights(results):
    groups = {}
    for result in results:
        groups.setdefault(result.manifest["weight_source"], []).append(result.name)
    return {source: names for source, names in groups.items() if len(names) > 1}


def _manifest_json(manifest) -> str:
    """The manifest as indented JSON, exactly as json.dumps writes it: names, however odd, are kept."""
    return json.dumps(manifest, indent=2) + "\n"


def _log(progress, line):
    if progress is not None:
        print(line, file=progress, flush=True)


#: The longest layer name used in file names: NAME_mpscnn_weight.dat stays far below the usual 255 bytes.
_MAX_NAME = 160


def _unique_name(raw, taken):
    """A file-name-safe layer name whose files (NAME_*.dat and NAME_mpscnn_*.dat) are nobody else's; a
    long name is cut and keeps a hash of the whole (the manifest keeps the node's name as it is)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", raw).strip("._") or "layer"
    if len(name) > _MAX_NAME:
        name = f"{name[:_MAX_NAME - 9]}_{hashlib.sha256(raw.encode()).hexdigest()[:8]}"
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


def _staging_prefix(outdir: Path, role: str) -> str:
    """The name prefix of the hidden folders beside OUTDIR: ".OUTDIR.partial-PID-" (being written) and
    ".OUTDIR.old-PID-" (the replaced OUTDIR, being deleted); the PID tells a dead writer's from a live one's."""
    return f".{outdir.name}.{role}-{os.getpid()}-"


def _remove_stale_staging(outdir: Path):
    """Remove the staging folders a killed conversion into OUTDIR left (SIGKILL, power loss): those whose
    process no longer runs."""
    pattern = re.compile(re.escape(f".{outdir.name}.") + r"(?:partial|old)-(\d+)-[^/]*$")
    for entry in outdir.parent.iterdir():
        match = pattern.match(entry.name)
        if match is None or not entry.is_dir() or entry.is_symlink() or _process_alive(int(match.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    """False only when no process ``pid`` runs. On Windows always True: there os.kill(pid, 0) would
    terminate the process, so a stale folder is left for the user."""
    if pid == os.getpid() or os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):   # another user's process, or a PID this OS cannot ask about
        return True
    return True


def _check_outdir(outdir: Path, model_path: Path, force: bool):
    """OUTDIR may be created, or with ``force`` replaced: only a folder this converter wrote (its
    manifest.json and the files it names), never the current directory or one above it, never the
    model's folder or a folder holding anything else."""
    if outdir.is_symlink():
        raise ConversionError(f"output path {outdir} is a symbolic link (to {os.readlink(outdir)!r}); "
                              "pass the folder itself or a new path")
    if not outdir.exists():
        if not outdir.parent.is_dir():
            raise ConversionError(f"the parent directory of {outdir} does not exist")
        return
    if not outdir.is_dir():
        raise ConversionError(f"output path {outdir} exists and is not a directory")
    if not force:
        raise ConversionError(f"output directory {outdir} already exists; pass --force to replace it")
    resolved, cwd = outdir.resolve(), Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise ConversionError(f"--force would replace {outdir}, which is the current directory or holds it; "
                              "pass a new folder for the output")
    if resolved == model_path.resolve().parent or resolved in model_path.resolve().parents:
        raise ConversionError(f"--force would replace {outdir}, which holds the model {model_path}; "
                              "pass a new folder for the output")
    foreign = sorted(set(os.listdir(outdir)) - _written_files(outdir))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConversionError(f"--force replaces only a folder 'fastdeconv convert' wrote, and {outdir} holds "
                              f"files it did not write ({shown}); move them or pass a new folder")


def _written_files(outdir: Path) -> set:
    """manifest.json and the files it names, when OUTDIR's manifest.json is one this converter wrote."""
    try:
        manifest = json.loads((outdir / "manifest.json").read_text())
        if not str(manifest.get("converter", "")).startswith("fastdeconv "):
            return set()
        return {"manifest.json"} | {name for layer in manifest["layers"] for name in layer["files"].values()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()


def _move_into_place(staging: Path, outdir: Path):
    if outdir.exists():
        retired = Path(tempfile.mkdtemp(prefix=_staging_prefix(outdir, "old"), dir=outdir.parent))
        os.rename(outdir, retired / outdir.name)
        os.rename(staging, outdir)
        shutil.rmtree(retired)
    else:
        os.rename(staging, outdir)


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
    chain: Chain
    arguments: dict
    weight: np.ndarray
    bias: np.ndarray
    folded: list                    # the folded nodes' manifest entries, in order
    geometry: _params.ConvGeometry
    mpscnn_settings: weights.MPSCNNTransposeParams | weights.MPSCNNConvolutionParams | None
    mpscnn_reason: str | None

    @property
    def transposed(self) -> bool:
        return self.geometry.transposed

    @property
    def kind(self) -> str:
        return "conv_transpose2d" if self.transposed else "conv2d"


def _convert_layer(graph, chain, name, directory, seed, max_elements) -> LayerResult:
    """Resolve and fold one chain, write its files into ``directory`` and verify them."""
    layer = _resolve_layer(graph, chain, name)
    files = _write_files(layer, directory)
    *errors, verified_hw = _verify(graph, layer, directory, files, seed, max_elements)
    g = layer.geometry
    entry = _manifest_entry(graph, layer, files, *errors)
    entry["verified_input_hw"] = list(verified_hw)
    return LayerResult(name, layer.kind, g.input_shape, g.output_shape, tuple(layer.weight.shape), *errors, entry)


def _resolve_layer(graph, chain, name) -> _Layer:
    """Read the conv node, map its attributes, fold the BatchNormalization, resolve the geometry."""
    node = chain.conv
    transposed = CONV_OPS[node.op_type]
    weight, onnx_bias, in_channels, input_hw = _read_conv(graph, node, transposed)
    arguments = _conv_arguments(graph, node, transposed, input_hw, weight.shape[1:3], in_channels, weight.shape)
    groups = arguments["groups"]
    out_channels = weight.shape[3] * groups if transposed else weight.shape[0]
    bias = np.zeros(out_channels, np.float32) if onnx_bias is None else onnx_bias.astype(np.float32)
    weight, bias, folded = _fold(graph, chain, weight, bias, transposed, groups)
    geometry = _geometry(graph, node, (1, *input_hw, in_channels), weight.shape, arguments)
    return _Layer(name, chain, arguments, weight, bias, folded, geometry, *_mpscnn_settings(geometry, arguments))


def _read_conv(graph, node, transposed):
    """(weight in our layout as float32, the ONNX bias or None, C_in, (H, W) of the input).
    OnnxGraph.analyse has checked that the weight and bias are constant and the input shape static."""
    onnx_weight = graph.constant(node.input[1])
    onnx_bias = graph.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    input_shape = graph.shapes[node.input[0]]
    weight = weights.from_onnx(onnx_weight.astype(np.float32), transposed=transposed)
    return weight, onnx_bias, input_shape[1], tuple(input_shape[2:])


def _fold(graph, chain, weight, bias, transposed, groups):
    """(weight, bias, the folded nodes' manifest entries): every node of ``chain.folded`` folded in, in
    order, in float64 and rounded to float32 once. A per-channel ``scale·y + shift`` (Add/Sub/Mul/Div of
    a constant) folds as a BatchNormalization with gamma = scale, beta = shift, mean = 0, var = 1, eps = 0."""
    weight, bias, entries = weight.astype(np.float64), bias.astype(np.float64), []
    channels = bias.shape[0]
    for node in chain.folded:
        if node.op_type == "BatchNormalization":
            parameters = _batchnorm_parameters(graph, node)
        else:
            scale, shift = graph.affine(node, _folded_input(chain, node), channels)
            parameters = {"gamma": scale, "beta": shift, "mean": np.zeros(channels), "var": np.ones(channels),
                          "eps": 0.0}
        try:
            weight, bias = weights.fold_batchnorm(weight, bias, **parameters, transposed=transposed, groups=groups)
        except ValueError as error:
            raise ConversionError(f"{graph.describe(node)}: {error}") from None
        entries.append(_folded_entry(node, parameters))
    return weight.astype(np.float32), bias.astype(np.float32), entries


def _folded_input(chain, node) -> str:
    """The tensor of the layer that ``node`` (one of ``chain.folded``) reads."""
    index = chain.folded.index(node)
    return (chain.folded[index - 1] if index else chain.conv).output[0]


def _geometry(graph, node, x_shape, w_shape, arguments):
    """The layer's geometry from fastdeconv._params, which validates everything; its message (which
    repeats the values) is prefixed with the node."""
    resolve = _params.resolve_conv_transpose2d if CONV_OPS[node.op_type] else _params.resolve_conv2d
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
    """Save the layer's .dat files; the manifest's "files": role -> file name. The MPSCNN weight of a
    transposed layer is written only when MPSCNN can express the layer."""
    weight_path, bias_path = weights.save_mps(directory, layer.name, layer.weight, layer.bias)
    files = {"weight": weight_path.name, "bias": bias_path.name}
    if layer.transposed and layer.mpscnn_settings is not None:
        mpscnn_weight = weights.to_mpscnn_transpose(layer.weight, layer.geometry.groups)
        (mpscnn_path,) = weights.save_mps(directory, _mpscnn_name(layer.name), mpscnn_weight)
        files["mpscnn_weight"] = mpscnn_path.name
    return files


def _file_shapes(layer, files) -> dict:
    shapes = {"weight": list(layer.weight.shape), "bias": [layer.geometry.out_channels]}
    if "mpscnn_weight" in files:
        shapes["mpscnn_weight"] = list(_mpscnn_weight_shape(layer.geometry))
    return shapes


def _verify(graph, layer, directory, files, seed, max_elements):
    """(max error of fastdeconv, of the MPSCNN model or None, tolerance, the input (H, W) used) on one
    random input, of the layer's own size or, over ``max_elements``, a smaller one
    (:func:`_verification_geometry`).

    Both run on the files as written, against onnx's reference evaluator on the original node(s).
    """
    g = _verification_geometry(graph, layer, max_elements)
    settings = layer.mpscnn_settings
    if settings is not None and g is not layer.geometry:
        settings = _mpscnn_settings(g, layer.arguments)[0]
    shrunk = tuple(full - used for full, used in zip(layer.geometry.input_hw, g.input_hw))
    x_nchw = np.random.default_rng(seed).standard_normal((1, g.in_channels, *g.input_hw)).astype(np.float32)
    expected = _onnx_reference(graph, layer.chain, x_nchw, shrunk).transpose(0, 2, 3, 1).astype(np.float64)
    x = np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1))
    saved_weight, saved_bias = weights.load_mps(directory, layer.name, layer.weight.shape)
    run = layer_runner(layer.transposed, saved_weight, saved_bias, layer.arguments)
    error_fastdeconv = max_error(run(x), expected)
    error_mpscnn = None
    if settings is not None:
        error_mpscnn = max_error(_run_mpscnn_model(layer, settings, directory, x, saved_weight, saved_bias),
                                 expected)
    return error_fastdeconv, error_mpscnn, tolerance_for(expected), g.input_hw


def _verification_geometry(graph, layer, max_elements):
    """The layer's geometry, or, when its input or output has more than ``max_elements`` elements, the
    same layer on a smaller input: the larger axis halved, in whole strides for a convolution (so SAME
    padding stays the same) and whole input pixels for a transposed one (output_shape is shrunk to
    match), until it fits or cannot shrink further."""
    def elements(geometry):
        return max(int(np.prod(geometry.input_shape, dtype=np.float64)),
                   int(np.prod(geometry.output_shape, dtype=np.float64)))

    g = layer.geometry
    units = (1, 1) if g.transposed else g.stride
    stuck = set()
    while elements(g) > max_elements and len(stuck) < 2:
        axis = max((a for a in (0, 1) if a not in stuck), key=lambda a: g.input_hw[a])
        hw = list(g.input_hw)
        hw[axis] -= max(units[axis], (hw[axis] // units[axis] // 2) * units[axis])
        try:
            if hw[axis] < 1:
                raise ConversionError("no smaller size")
            g = _geometry(graph, layer.chain.conv, (1, *hw, g.in_channels), layer.weight.shape, layer.arguments)
        except ConversionError:
            stuck.add(axis)
    return g


def _run_mpscnn_model(layer, settings, directory, x, saved_weight, saved_bias) -> np.ndarray:
    """The MPSCNN numpy model with the weight MPSCNN is given (NAME_mpscnn_weight.dat for the transpose,
    the layer's own (OHWI) weight for the convolution) and ``settings`` for x's size."""
    if not layer.transposed:
        return mpscnn_model.convolution(x, saved_weight, settings, saved_bias)
    mps_weight, _ = weights.load_mps(directory, _mpscnn_name(layer.name), _mpscnn_weight_shape(layer.geometry))
    return mpscnn_model.convolution_transpose(x, mps_weight, settings, saved_bias)


def _manifest_entry(graph, layer, files, error_fastdeconv, error_mpscnn, tolerance) -> dict:
    """The layer's entry in manifest.json (see the module docstring)."""
    g, chain, node, transposed = layer.geometry, layer.chain, layer.chain.conv, layer.transposed
    return {
        "name": layer.name,
        "kind": layer.kind,
        "onnx_node": node.name,
        "onnx_op": node.op_type,
        "onnx_input": node.input[0],
        "onnx_output": chain.final_output,
        "onnx_output_before_activation": chain.output,
        "onnx_conv_output": node.output[0],
        "onnx_weight": node.input[1],
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
        "file_shapes": _file_shapes(layer, files),
        "mpscnn": _mpscnn_entry(layer),
        "mpscnn_unsupported_reason": layer.mpscnn_reason,
        "folded": layer.folded,
        "batchnorm": next((e for e in layer.folded if e["op"] == "BatchNormalization"), None),
        "activation": _activation_entry(graph, chain.activation),
        "max_error": {"fastdeconv": error_fastdeconv, "mpscnn_model": error_mpscnn, "tolerance": tolerance},
    }


def _mpscnn_entry(layer):
    if layer.mpscnn_settings is None:
        return None
    entry = {"class": "MPSCNNConvolutionTranspose" if layer.transposed else "MPSCNNConvolution"}
    entry.update(vars(layer.mpscnn_settings))
    entry["weight_shape"] = list(_mpscnn_weight_shape(layer.geometry))
    entry["weight_file"] = "mpscnn_weight" if layer.transposed else "weight"   # a key of "files"
    return entry


def _folded_entry(node, parameters) -> dict:
    """A folded node in the manifest: node, op, output; a BatchNormalization also its epsilon."""
    entry = {"node": node.name, "op": node.op_type, "output": node.output[0]}
    if node.op_type == "BatchNormalization":
        # The float32 that ONNX stores, written as its shortest decimal: 1e-05, not 9.999999747378752e-06.
        entry.update({"epsilon": float(str(np.float32(parameters["eps"]))), "folded": True})
    return entry


def _activation_entry(graph, node):
    if node is None:
        return None
    entry = {"op": node.op_type, "node": node.name}
    entry.update(ACTIVATIONS[node.op_type])
    entry.update({k: v for k, v in graph.attributes(node).items() if isinstance(v, (int, float))})
    if node.op_type == "Clip":
        for index, bound in ((1, "min"), (2, "max")):
            if index < len(node.input) and node.input[index]:
                entry[bound] = float(graph.constant(node.input[index]).reshape(()))   # a 1-element array
    if node.op_type == "PRelu":
        entry["slope"] = np.asarray(graph.constant(node.input[1]), dtype=float).ravel().tolist()
    entry["output"] = node.output[0]
    return entry


def _batchnorm_parameters(graph, node):
    """gamma, beta, mean, var, eps of a BatchNormalization that OnnxGraph.analyse found foldable."""
    gamma, beta, mean, var = (graph.constant(node.input[i]) for i in range(1, 5))
    return {"gamma": gamma, "beta": beta, "mean": mean, "var": var,
            "eps": float(graph.attributes(node).get("epsilon", 1e-5))}


# --------------------------------------------------------------------------------------------------------
# The ONNX side of the per-layer verification
# --------------------------------------------------------------------------------------------------------

def _onnx_reference(graph, chain, x_nchw, shrunk=(0, 0)) -> np.ndarray:
    """Run the original Conv/ConvTranspose node and the nodes folded into it in a tiny model through
    onnx.reference.ReferenceEvaluator, with ConvTranspose per the ONNX spec
    (:func:`fastdeconv.convert.verify.reference_ops`)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    node = chain.conv
    feeds = {"x": x_nchw}   # constants are fed, not initializers: a weight may be over protobuf's 2 GiB

    def constant(name, tensor):
        feeds[name] = np.asarray(graph.constant(tensor))
        return name

    inputs = ["x", constant("W", node.input[1])]
    if len(node.input) > 2 and node.input[2]:
        inputs.append(constant("B", node.input[2]))
    attributes = graph.attributes(node)
    if "output_shape" in attributes and any(shrunk):   # verified on an input smaller by ``shrunk``
        stride = list(attributes.get("strides", [1, 1]))
        attributes["output_shape"] = [v - s * d for v, s, d in zip(list(attributes["output_shape"])[-2:], stride,
                                                                   shrunk)]
    nodes = [helper.make_node(node.op_type, inputs, ["conv"], **attributes)]
    result = "conv"
    for index, folded in enumerate(chain.folded):
        previous, result = result, f"folded{index}"
        source = _folded_input(chain, folded)
        if folded.op_type == "BatchNormalization":
            inputs = [previous] + [constant(f"{result}_{key}", folded.input[i])
                                   for i, key in enumerate(("gamma", "beta", "mean", "var"), 1)]
            attributes = {k: v for k, v in graph.attributes(folded).items() if k in ("epsilon", "momentum")}
        else:   # the constant operand keeps its side (Sub and Div are not symmetric)
            inputs = [previous if name == source else constant(f"{result}_constant", name) for name in folded.input]
            attributes = {}
        nodes.append(helper.make_node(folded.op_type, inputs, [result], **attributes))
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
              for name, value in feeds.items()]
    tiny = helper.make_model(
        helper.make_graph(nodes, "verify", inputs, [helper.make_tensor_value_info(result, TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", VERIFY_OPSET)])
    return np.asarray(ReferenceEvaluator(tiny, new_ops=reference_ops()).run(None, feeds)[0])
