"""``python -m fastdeconv selftest``: the Metal backends on this Mac's GPU against the numpy reference, as a
table to paste into a bug report.

The checks (:data:`CHECKS`) are the cases Apple's documentation leaves open: non-square kernels,
asymmetric strides, groups, depthwise, channel counts that are not multiples of 4, batches of more than
one image, float32 and float16; each runs on backend "mps" (MPSGraph) and "mps-cnn" (MPSCNN, or
fastdeconv's own kernel where MPSCNN cannot express the layer). When an MPSCNN kernel disagrees,
:func:`diagnose_weight_order` says which weight order would explain what the GPU returned (the
data-source documentation says [O][kH][kW][I/g], MPSCNNConvolutionTranspose.h's comment [O][kW][kH][I]).
tests/metal/test_metal_device.py runs the same checks.

Exit status (:func:`main`): 0 every check passed; 1 a check failed (the table says which and why);
3 nothing was checked because no Metal backend can run here (not macOS, no Metal device, PyObjC
missing): the reason is printed.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from dataclasses import dataclass, field

import numpy as np

EXIT_PASSED, EXIT_FAILED, EXIT_NO_METAL = 0, 1, 3
PATHS = ("mps", "mps-cnn")


@dataclass(frozen=True)
class Check:
    """One layer: ``op`` "t" (conv_transpose2d) or "c" (conv2d), NHWC input (n, *hw, c_in)."""

    name: str
    op: str
    c_in: int
    c_out: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    groups: int = 1
    n: int = 1
    hw: tuple[int, int] = (6, 5)
    dtype: str = "float32"
    bias: bool = True
    extra: dict = field(default_factory=dict)      # output_padding for "t"

    def kwargs(self) -> dict:
        return dict(stride=self.stride, padding=self.padding, groups=self.groups, **self.extra)

    def arrays(self):
        """Positive data (x, weights, bias): every output is a sum of positive terms, so a relative error is
        meaningful and a misplaced tap shows. fastdeconv's layouts: transposed (C_in, kH, kW, C_out/g), forward
        (C_out, kH, kW, C_in/g)."""
        rng = np.random.default_rng(sum(map(ord, self.name)))
        per_group = (self.c_out if self.op == "t" else self.c_in) // self.groups
        first = self.c_in if self.op == "t" else self.c_out
        x = rng.uniform(0.1, 1.0, (self.n, *self.hw, self.c_in)).astype(self.dtype)
        w = rng.uniform(0.1, 1.0, (first, *self.kernel, per_group)).astype(self.dtype)
        b = rng.uniform(0.1, 1.0, self.c_out).astype(self.dtype) if self.bias else None
        return x, w, b

    def describe(self) -> str:
        kind = "conv_transpose2d" if self.op == "t" else "conv2d"
        return (f"{kind} n={self.n} hw={self.hw} c={self.c_in}->{self.c_out} k={self.kernel} s={self.stride} "
                f"p={self.padding} g={self.groups} {self.extra or ''}").strip()


def _both_dtypes(*checks):
    return [c for check in checks for c in (check, Check(**{**check.__dict__, "name": check.name + "/f16",
                                                            "dtype": "float16"}))]


#: What the first Mac run must settle (issue 29), each in float32 and float16.
CHECKS = _both_dtypes(
    Check("transpose k3x2 s2", "t", 8, 8, (3, 2), stride=(2, 2), padding=(1, 0)),
    Check("transpose k2x4 s(2,3)", "t", 4, 8, (2, 4), stride=(2, 3), extra=dict(output_padding=(1, 2))),
    Check("transpose groups=2 k4x3", "t", 8, 8, (4, 3), stride=(2, 2), padding=(1, 1), groups=2),
    Check("transpose depthwise k3", "t", 8, 8, (3, 3), stride=(2, 2), padding=(1, 1), groups=8),
    Check("transpose c3->5 (not x4)", "t", 3, 5, (3, 3), stride=(2, 2)),
    Check("transpose n=3 k5x3 s(2,1)", "t", 8, 4, (5, 3), stride=(2, 1), padding=(2, 1), n=3, hw=(7, 5), bias=False),
    Check("conv k1x3 s(1,2)", "c", 8, 12, (1, 3), stride=(1, 2)),
    Check("conv depthwise k3x2", "c", 8, 8, (3, 2), padding=(1, 0), groups=8),
    Check("conv groups=2 k3 s2", "c", 8, 16, (3, 3), stride=(2, 2), padding=(1, 1), groups=2),
    Check("conv c6->7 (not x4) n=2", "c", 6, 7, (3, 2), stride=(2, 1), n=2),
)


def relative_error(got: np.ndarray, reference: np.ndarray) -> float:
    """max |got − ref| / (|ref| + 10⁻³·max|ref|): relative, with a floor for elements near zero."""
    g, r = np.asarray(got, np.float64), np.asarray(reference, np.float64)
    if g.shape != r.shape:
        return float("inf")
    scale = np.abs(r) + 1e-3 * np.abs(r).max(initial=0.0) + 1e-30
    return float(np.max(np.abs(g - r) / scale, initial=0.0))


def tolerance(path: str, dtype, stage=None) -> float:
    """float16: 1e-2. float32 through an MPSCNN kernel: 5e-3 (Apple: MPSCNNConvolution "Weights are converted to
    half float (fp16) internally"); otherwise 1e-4 (GPU summation order)."""
    from .metal.descriptors import CnnKernelDescriptor

    if np.dtype(dtype) == np.float16:
        return 1e-2
    return 5e-3 if path == "mps-cnn" and isinstance(stage, CnnKernelDescriptor) else 1e-4


@dataclass
class Result:
    check: Check
    path: str
    engine: str            # "MPSGraph", the MPSCNN kernel class, or "direct kernel (why)"
    error: float
    tol: float
    diagnosis: str = ""

    @property
    def ok(self) -> bool:
        return self.error <= self.tol


def _geometry(check: Check, x, w):
    from ._params import resolve_conv2d, resolve_conv_transpose2d

    kw = check.kwargs()
    if check.op == "t":
        return resolve_conv_transpose2d(x.shape, w.shape, kw["stride"], kw["padding"], kw.get("output_padding", 0),
                                        1, kw["groups"])
    return resolve_conv2d(x.shape, w.shape, kw["stride"], kw["padding"], 1, kw["groups"])


def run_check(check: Check, path: str) -> Result:
    """``check`` on backend ``path`` against :mod:`fastdeconv.reference` (numpy, float64)."""
    import fastdeconv
    from fastdeconv import reference

    from .metal.descriptors import CnnKernelDescriptor, cnn_descriptor

    x, w, b = check.arrays()
    geometry = _geometry(check, x, w)
    stage = cnn_descriptor(geometry, check.dtype, b is not None).stage if path == "mps-cnn" else None
    engine = ("MPSGraph" if stage is None else stage.kernel_class if isinstance(stage, CnnKernelDescriptor)
              else f"direct kernel ({stage.reason.split(':')[0]})")
    tol = tolerance(path, check.dtype, stage)
    call, ref_call = ((fastdeconv.conv_transpose2d, reference.conv_transpose2d) if check.op == "t"
                      else (fastdeconv.conv2d, reference.conv2d))
    ref = ref_call(x.astype(np.float64), w.astype(np.float64), None if b is None else b.astype(np.float64),
                   **check.kwargs())
    try:
        got = call(x, w, b, backend=path, **check.kwargs())
    except Exception as exc:  # noqa: BLE001 - a failure is a row of the report, not a crash
        first_line = (str(exc).splitlines() or [""])[0]
        return Result(check, path, engine, float("inf"), tol, f"raised {type(exc).__name__}: {first_line}")
    result = Result(check, path, engine, relative_error(got, ref), tol)
    if not result.ok:
        if got.shape != ref.shape or got.dtype != np.dtype(check.dtype):
            result.diagnosis = f"returned {got.shape} {got.dtype}, expected {ref.shape} {check.dtype}"
        elif isinstance(stage, CnnKernelDescriptor):
            result.diagnosis = diagnose_weight_order(geometry, check.dtype, x, w, b, got)
        else:
            worst = np.unravel_index(np.argmax(np.abs(got.astype(np.float64) - ref)), ref.shape)
            result.diagnosis = (f"worst at (n, y, x, c) = {tuple(map(int, worst))}: {got[worst]!r}, "
                                f"expected {ref[worst]!r}")
    return result


def weight_orders(buffer: np.ndarray) -> dict[str, np.ndarray]:
    """The weights an MPSCNN kernel would effectively use if it read the (O, kH, kW, I/g) buffer in another
    order, each as an (O, kH, kW, I/g) array in the documented order."""
    o, kh, kw, i = buffer.shape
    exchanged = buffer.reshape(o, kw, kh, i).transpose(0, 2, 1, 3)
    return {
        "the documented order [O][kH][kW][I/g]": buffer,
        "[O][kW][kH][I/g]: kernel height and width exchanged": exchanged,
        "[O][kH][kW][I/g] rotated by 180 degrees": buffer[:, ::-1, ::-1, :],
        "[O][kW][kH][I/g] rotated by 180 degrees": exchanged[:, ::-1, ::-1, :],
    }


def diagnose_weight_order(geometry, dtype, x, w, b, got) -> str:
    """Which reading of the weight buffer explains the GPU's result, by the numpy model of MPSCNN
    (fastdeconv.metal.mpscnn_model) fed each order of :func:`weight_orders`."""
    from .metal import executors
    from .metal.descriptors import cnn_bias, cnn_descriptor, cnn_weights

    descriptor = cnn_descriptor(geometry, dtype, b is not None)
    buffer = cnn_weights(descriptor, w, geometry.groups)
    bias = cnn_bias(descriptor, b, geometry.out_channels)
    source = np.ascontiguousarray(x, dtype)
    errors = {name: relative_error(got, executors.run_cnn(descriptor, source, np.ascontiguousarray(weights), bias))
              for name, weights in weight_orders(buffer).items()}
    name, error = min(errors.items(), key=lambda item: item[1])
    tol = tolerance("mps-cnn", dtype, descriptor.stage)
    documented = next(iter(errors))
    if error > tol:
        return (f"no weight order explains it (closest: {name}, error {error:.1e}); check the offsets and "
                "edge mode (fastdeconv.weights.mpscnn_transpose_params / mpscnn_conv_params)")
    if name == documented:
        return ("the GPU matches fastdeconv's model of MPSCNN but not the reference: the model's offsets "
                "(fastdeconv.weights.mpscnn_*_params) are wrong")
    return f"MPSCNN read the weights as {name} (error {error:.1e}), not {documented}"


def run_checks(paths=PATHS, checks=CHECKS) -> list[Result]:
    return [run_check(check, path) for path in paths for check in checks]


def environment_line() -> str:
    from . import __version__

    try:
        pyobjc = metadata.version("pyobjc-core")        # not imported: only pyobjc_layer imports PyObjC
    except metadata.PackageNotFoundError:
        pyobjc = "not installed"
    system = f"macOS {platform.mac_ver()[0]}" if platform.mac_ver()[0] else platform.system()
    return (f"fastdeconv {__version__}; {system} ({platform.machine()}); Python {platform.python_version()}; "
            f"numpy {np.__version__}; PyObjC {pyobjc}")


def format_report(results: list[Result], states: dict) -> str:
    """A markdown table of ``results`` under the environment and each backend's status."""
    lines = [environment_line(), ""]
    lines += [f"- backend {path!r}: {'available' if s.available else 'unavailable'} — {s.reason}"
              for path, s in states.items()]
    lines += ["", "| check | backend | runs on | dtype | result | error / tolerance | diagnosis |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.check.name}: {r.check.describe()} | {r.path} | {r.engine} | {r.check.dtype} | "
                     f"{'ok' if r.ok else 'FAIL'} | {r.error:.1e} / {r.tol:.0e} | {r.diagnosis} |")
    failed = sum(not r.ok for r in results)
    lines += ["", f"{len(results) - failed} of {len(results)} checks passed" + (
        "" if not failed else f"; {failed} FAILED: please paste this output into an issue")]
    return "\n".join(lines)


def main(prog: str = "fastdeconv selftest") -> int:
    """Run every check on every available Metal backend and print the report; see the module's exit statuses."""
    from .metal import status

    states = {path: status(path) for path in PATHS}
    runnable = [path for path, state in states.items() if state.available]
    if not runnable:
        reasons = "; ".join(f"{path!r}: {state.reason}" for path, state in states.items())
        print(f"{prog}: no Metal device to check here ({reasons}). Nothing was checked; exit status "
              f"{EXIT_NO_METAL}.", file=sys.stderr)
        return EXIT_NO_METAL
    results = run_checks(runnable)
    print(format_report(results, states))
    return EXIT_PASSED if all(r.ok for r in results) else EXIT_FAILED
