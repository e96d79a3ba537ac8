"""The Metal backends: backend="mps" (MPSGraph) and backend="mps-cnn" (MPSCNN + fastdeconv's own kernel).

Importing this package imports nothing from Apple: PyObjC (the ``metal`` extra: in a clone of the
repository ``pip install -e '.[metal]'``) is imported the first time a Metal backend runs
or :func:`status` is asked on macOS.

* :mod:`.descriptors` — what is sent to Metal (pure Python, any platform);
* :mod:`.executors` — numpy execution of a descriptor under the documented semantics (any platform);
* :mod:`.pyobjc_layer` — the Metal calls (macOS);
* :mod:`.engine` — the per-layer GPU state (weights uploaded once, compiled graphs and kernels) and
  the choice of engine (PyObjC, or the numpy executors inside :func:`.engine.simulated`);
* :mod:`.mpscnn_model` — a numpy model of Apple's documented MPSCNN convolutions.

The backend objects behind ``backend="mps"`` / ``"mps-cnn"`` are in ``fastdeconv._backends.mps``.

backend="auto" uses "mps" when :func:`status` says it is available, the dtype is float32/float16 and
the call's FLOPs reach :func:`mps_min_flops` (default :data:`DEFAULT_MPS_MIN_FLOPS`; **unmeasured**, see
the README), overridable with ``$FASTDECONV_MPS_MIN_FLOPS`` (read once, when this package is imported)
or :func:`set_mps_min_flops`.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import sys
import warnings
from dataclasses import dataclass

__all__ = ["MetalStatus", "status", "mps_min_flops", "set_mps_min_flops", "DEFAULT_MPS_MIN_FLOPS",
           "MPS_MIN_FLOPS_ENV"]

MPS_MIN_FLOPS_ENV = "FASTDECONV_MPS_MIN_FLOPS"
ALLOW_PARAVIRTUAL_ENV = "FASTDECONV_ALLOW_PARAVIRTUAL"
#: 1 GFLOP: a guess, not a measurement (no Mac was available to calibrate). At ~0.1–0.5 ms fixed cost
#: per GPU dispatch (command buffer + copies) and ~50–100 GFLOP/s on the CPU backend, the GPU cannot
#: win below ~10⁷–10⁸ FLOPs; 10⁹ leaves margin until a Mac measurement replaces it.
DEFAULT_MPS_MIN_FLOPS = 1_000_000_000

_PATH_FRAMEWORKS = {
    "mps": ("Metal", "MetalPerformanceShadersGraph", "MetalPerformanceShaders"),
    "mps-cnn": ("Metal", "MetalPerformanceShaders"),
}
#: The oldest macOS each backend runs on: the newest "introduced" version among the selectors it
#: calls (tests/metal/data/pyobjc_selectors.json, from PyObjC's header scans; tests/metal/test_metal_selectors.py
#: checks every call against it). "mps": ``castTensor:toType:name:`` (float16 in, float32 compute) is
#: macOS 12.0; the rest of MPSGraph is 11.0. One gate for the backend rather than a float16-only one,
#: so that status("mps") and backend="auto" need no dtype (macOS 11 has had no security updates since
#: 2023; PyTorch's MPS backend needs 12.3). "mps-cnn": ``encodeBatchToCommandBuffer:sourceImages:
#: destinationImages:`` and ``synchronizeOnCommandBuffer:`` are macOS 10.13.4, MPSCNN itself 10.13.
_MIN_MACOS = {"mps": (12, 0), "mps-cnn": (10, 13, 4)}
#: The selector that sets each gate (named in status()'s reason).
_GATE_SELECTOR = {"mps": "castTensor:toType:name:",
                  "mps-cnn": "encodeBatchToCommandBuffer:sourceImages:destinationImages:"}


@dataclass(frozen=True)
class MetalStatus:
    """Whether a Metal backend can run here; ``reason`` says why not (or names the device)."""

    available: bool
    reason: str


def _macos_version():
    """(major, minor, patch) of this macOS, e.g. (10, 13, 4), (14, 5, 0); None if unknown."""
    release = platform.mac_ver()[0]
    try:
        parts = tuple(int(part) for part in release.split(".")[:3]) if release else None
    except ValueError:
        return None
    return None if not parts else parts + (0,) * (3 - len(parts))


def _version_text(version) -> str:
    """(10, 13, 4) → "10.13.4", (12, 0) → "12.0"."""
    return ".".join(map(str, version))


@functools.lru_cache(maxsize=None)
def status(path: str = "mps") -> MetalStatus:
    """Availability of ``path`` ("mps" or "mps-cnn") on this machine, probed once per process.

    Checks, in order: macOS; the macOS version (:data:`_MIN_MACOS`: "mps" 12.0, "mps-cnn" 10.13.4);
    the PyObjC framework wrappers; a Metal device (``MTLCreateSystemDefaultDevice``); MPS support for
    it (``MPSSupportsMTLDevice``); not a virtual machine's "Apple Paravirtual device" unless
    ``$FASTDECONV_ALLOW_PARAVIRTUAL=1`` (GitHub documents that MPS is not supported on its arm64 macOS
    runners). Never raises: any failure becomes the reason.
    """
    if path not in _PATH_FRAMEWORKS:
        raise ValueError(f"path must be 'mps' or 'mps-cnn', got {path!r}")
    if sys.platform != "darwin":
        return MetalStatus(False, f"Metal needs macOS; this is {platform.system() or sys.platform} ({sys.platform})")
    version = _macos_version()
    need = _MIN_MACOS[path]
    if version is not None and version < need + (0,) * (3 - len(need)):
        return MetalStatus(False, f"backend {path!r} needs macOS {_version_text(need)} or later "
                                  f"({_GATE_SELECTOR[path]} is macOS {_version_text(need)}+), "
                                  f"this is macOS {platform.mac_ver()[0]}")
    modules = {}
    for name in _PATH_FRAMEWORKS[path]:
        try:
            modules[name] = __import__(name)
        except Exception as exc:  # noqa: BLE001 - any import failure is a reason, never a crash
            return MetalStatus(False, f"the PyObjC wrapper {name!r} cannot be imported ({exc}); "
                                      "install the metal extra: pip install pyobjc-framework-Metal "
                                      "pyobjc-framework-MetalPerformanceShaders "
                                      "pyobjc-framework-MetalPerformanceShadersGraph (from a clone of the "
                                      "repository: pip install -e '.[metal]')")
    try:
        device = modules["Metal"].MTLCreateSystemDefaultDevice()
    except Exception as exc:  # noqa: BLE001
        return MetalStatus(False, f"MTLCreateSystemDefaultDevice() failed: {exc}")
    if device is None:
        return MetalStatus(False, "MTLCreateSystemDefaultDevice() returned nil: no Metal device")
    try:
        supported = bool(modules["MetalPerformanceShaders"].MPSSupportsMTLDevice(device))
    except Exception as exc:  # noqa: BLE001
        return MetalStatus(False, f"MPSSupportsMTLDevice() failed: {exc}")
    if not supported:
        return MetalStatus(False, f"Metal Performance Shaders does not support the device {device.name()}")
    name = str(device.name())
    # Read on the call path, but status() is lru-cached: probed once per process and path, so the
    # environment is read once too (a later change of the variable is not seen).
    if "paravirtual" in name.lower() and os.environ.get(ALLOW_PARAVIRTUAL_ENV) != "1":
        return MetalStatus(False, (
            f"the Metal device is {name!r}, a virtual machine's GPU (e.g. GitHub's hosted macOS runners, whose "
            "documentation says Metal Performance Shaders is not supported there); set "
            f"{ALLOW_PARAVIRTUAL_ENV}=1 to use it anyway"))
    return MetalStatus(True, f"Metal device {name}")


def _is_flops(value: float) -> bool:
    """A finite number >= 0 (NaN is not)."""
    return 0 <= value < math.inf


def _min_flops_from_env(raw: str | None) -> int:
    """``$FASTDECONV_MPS_MIN_FLOPS`` as a threshold; unset or empty gives the default, and so does a bad
    value, with a RuntimeWarning that names the variable and the value."""
    if raw is None or raw.strip() == "":
        return DEFAULT_MPS_MIN_FLOPS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not _is_flops(value):
        warnings.warn(f"{MPS_MIN_FLOPS_ENV}={raw!r} is not a number of FLOPs >= 0 (e.g. 1e9); backend='auto' uses "
                      f"the default, {DEFAULT_MPS_MIN_FLOPS:.0e}", RuntimeWarning, stacklevel=2)
        return DEFAULT_MPS_MIN_FLOPS
    return int(value)


# Parsed once, here: backend="auto" asks mps_min_flops() on every call, which must not read (or fail
# on) the environment.
_ENV_MIN_FLOPS = _min_flops_from_env(os.environ.get(MPS_MIN_FLOPS_ENV))
_min_flops = _ENV_MIN_FLOPS


def mps_min_flops() -> int:
    """backend="auto"'s threshold: :func:`set_mps_min_flops`'s value, else ``$FASTDECONV_MPS_MIN_FLOPS``
    as it was when fastdeconv was imported, else :data:`DEFAULT_MPS_MIN_FLOPS` (unmeasured)."""
    return _min_flops


def set_mps_min_flops(value: int | float | None) -> None:
    """Set backend="auto"'s MPS threshold (FLOPs, >= 0); None returns to the value read from
    ``$FASTDECONV_MPS_MIN_FLOPS`` at import (or the default)."""
    global _min_flops
    if value is None:
        _min_flops = _ENV_MIN_FLOPS
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _is_flops(value):
        raise ValueError(f"value must be a number of FLOPs >= 0 or None, got {value!r}")
    _min_flops = int(value)
