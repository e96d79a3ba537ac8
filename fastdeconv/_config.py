"""Build and run-time facts (show_config) and the thread count (set_num_threads)."""

from __future__ import annotations

import os
import platform
import sysconfig
from typing import Any

import numpy as np

from . import _cpu
from ._params import is_int
from ._version import __version__


# The most threads a call uses: 256, or the CPU count where larger (a fixed bound, so that a
# script's set_num_threads(n) works on every machine or on none).
MAX_THREADS = _cpu.MAX_THREADS


def set_num_threads(n: int) -> None:
    """Use n threads (1 <= n <= MAX_THREADS, 256 unless the machine has more CPUs) in every later call;
    0 restores the default (OMP_NUM_THREADS, else the CPUs this process may use; capped to MAX_THREADS).

    TypeError unless n is an integer (Python's or numpy's, not a bool), ValueError outside
    0..MAX_THREADS. Ctrl-C stops a running call within about 0.1 s (its ``out=`` is then partly
    written). Forked children (``os.fork``, every multiprocessing start method) use threads too: the
    package's thread pool starts fresh helpers there.

    Examples
    --------
    >>> import fastdeconv
    >>> fastdeconv.set_num_threads(1)
    >>> fastdeconv.get_num_threads()
    1
    >>> fastdeconv.set_num_threads(0)                                # back to the default
    """
    if not is_int(n):
        raise TypeError(f"n must be an int, got {n!r}")
    _cpu.set_num_threads(int(n))


def get_num_threads() -> int:
    """Threads the next call will use: set_num_threads's n or the default. Calls too small to gain from
    threads run on one regardless.

    Examples
    --------
    >>> import fastdeconv
    >>> fastdeconv.get_num_threads() >= 1
    True
    """
    return int(_cpu.get_num_threads())


def _winograd_stores(info: dict[str, Any]) -> str:
    """How "winograd" writes its outputs (src/kernels/winograd_tiles.h): only the AVX-512 path streams."""
    least = info["winograd_stream_min_bytes"]
    if info["gemm_isa"] != "avx512" or least is None:
        return "normal"
    if least == 0:
        return "non-temporal (AVX-512 path)"
    return f"non-temporal for outputs of {least / 2**20:g} MiB or more (AVX-512 path; a third of the last-level cache)"


def _simd_paths(info: dict[str, Any]) -> dict[str, Any]:
    """Per ISA path (portable, avx2, avx512, ...): "compiled" (the kernel families with code of their own for
    it in this build: gemm, winograd, depthwise; [] when the path is not compiled in, and a family missing
    from a compiled path runs its portable code there) and "supported" (whether this CPU and OS can run
    it)."""
    return {isa: {"compiled": list(info["isa_kernels_compiled"][isa]), "supported": ok}
            for isa, ok in info["gemm_isa_supported"].items()}


def _format_simd_paths(paths: dict[str, Any]) -> str:
    parts = []
    for isa, path in paths.items():
        kernels = "+".join(path["compiled"]) or "not compiled in"
        parts.append(f"{isa} ({kernels}; {'supported' if path['supported'] else 'not supported'} by this CPU)")
    return "; ".join(parts)


def config() -> dict[str, Any]:
    """show_config()'s facts as a dict."""
    info = _cpu.build_info()
    return {
        "fastdeconv": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "compiler": sysconfig.get_config_var("CC") or "unknown",
        "compiler_version": platform.python_compiler(),
        "thread_pool": f"own ({info['thread_pool']}), {_cpu.pool_helpers()} helper threads started",
        "threads": get_num_threads(),
        "max_threads": MAX_THREADS,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "simd_paths": _simd_paths(info),
        "algorithms": (f"conv_transpose2d: {', '.join(_cpu.algorithms(True))}; "
                       f"conv2d: {', '.join(_cpu.algorithms(False))}"),
        "gemm": (f"own indirect-GEMM microkernels, path in use: {info['gemm_isa']} (no BLAS library); "
                 f"B panels over {info['gemm_panel_budget_bytes'] >> 10} KiB run in blocks of taps (0: never)"),
        "winograd_stores": _winograd_stores(info),
        "workspace_bound": (
            f"per thread, independent of the image size: col2im a {_cpu.COL2IM_WORKSPACE_BYTES >> 20} MiB "
            f"column buffer (>= {_cpu.COL2IM_MIN_PIXELS} input pixels of a block of the kH*kW*C_out/groups "
            f"columns) and 2 pointers per pixel, independent of the weight too; phase/im2col indirection "
            f"chunk*(kH*kW+1) pointers, chunk <= {_cpu.GEMM_CHUNK_MAX_PIXELS} output pixels; depthwise none"
        ),
    }


def show_config() -> None:
    """Print build and run-time facts: compiler, thread pool, SIMD paths, the CPU algorithms (the names
    ``algorithm=`` takes), GEMM, threads, workspace bound.

    ``python -m fastdeconv info`` prints the same.

    Examples
    --------
    >>> import fastdeconv
    >>> fastdeconv.show_config()                                     # doctest: +ELLIPSIS
            fastdeconv: ...
    ...
            algorithms: conv_transpose2d: ...; conv2d: ...
    ...
    """
    for key, value in config().items():
        if key == "simd_paths":
            value = _format_simd_paths(value)
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in value.items())
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        print(f"{key:>18}: {value}")

