"""Extension modules only; the metadata is in pyproject.toml.

Threads come from the package's own pool (src/runtime/pool.c: POSIX threads, or
Win32 on Windows), so no OpenMP runtime is needed or bundled. No -march flags: SIMD
kernels are chosen at run time (src/kernels/gemm_dispatch.c).

FASTDECONV_SANITIZE=1 builds a debugging extension instrumented with AddressSanitizer and
UndefinedBehaviorSanitizer (GCC or Clang): -O1 -g, -fno-wrapv so that signed overflow
is reported rather than defined, and any UB aborts. The interpreter is not instrumented, so the
ASan runtime must be preloaded to import it:

    FASTDECONV_SANITIZE=1 pip install --no-build-isolation -e .
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 pytest tests/cpu/test_cpu_vs_reference.py
"""

import concurrent.futures
import glob
import os
import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# src/ holds C only, in role folders; each layer includes only the ones below it:
#   algorithms/  the algorithm table (algorithms.c), which instantiates every algorithms/*.template.c
#   kernels/     the GEMM, depthwise and Winograd kernels (each: one file per ISA, and its run-time ISA dispatch)
#   runtime/     the thread pool, the weight fingerprint and the headers every layer shares
C_SOURCES = [
    "src/runtime/pool.c",
    "src/kernels/gemm_dispatch.c",
    "src/kernels/gemm_portable.c",
    "src/kernels/gemm_avx2.c",
    "src/kernels/gemm_avx512.c",
    "src/kernels/gemm_neon.c",
    "src/kernels/depthwise_rows.c",
    "src/kernels/depthwise_rows_avx2.c",
    "src/kernels/depthwise_rows_avx512.c",
    "src/kernels/depthwise_rows_neon.c",
    "src/kernels/winograd_tiles.c",
    "src/kernels/winograd_tiles_avx2.c",
    "src/kernels/winograd_tiles_avx512.c",
    "src/kernels/planar_rows.c",
    "src/algorithms/algorithms.c",
    "src/runtime/fingerprint.c",
    "src/runtime/cpu_features.c",
]

# MSVC has no per-function target attributes: the kernels' per-ISA files (GEMM, Winograd transforms,
# depthwise rows) are compiled whole for their ISA (src/kernels/gemm_internal.h; the run-time check covers
# what these flags let the compiler use). GCC and clang compile every file at the baseline and the kernels
# carry target attributes. .ci/windows.sh checks these files' MSVC branches with the same features.
MSVC_ARCH_FLAGS = {
    "src/kernels/gemm_avx2.c": ["/arch:AVX2"],
    "src/kernels/gemm_avx512.c": ["/arch:AVX512"],
    "src/kernels/winograd_tiles_avx2.c": ["/arch:AVX2"],
    "src/kernels/winograd_tiles_avx512.c": ["/arch:AVX512"],
    "src/kernels/depthwise_rows_avx2.c": ["/arch:AVX2"],
    "src/kernels/depthwise_rows_avx512.c": ["/arch:AVX512"],
}


# After Python's own CFLAGS (which hold -fwrapv -O3) on the command line, so these win.
SANITIZE_COMPILE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-wrapv", "-O1", "-g",
                    "-fno-omit-frame-pointer"]
SANITIZE_LINK = ["-fsanitize=address,undefined"]


def sanitize_requested() -> bool:
    return os.environ.get("FASTDECONV_SANITIZE", "0") not in ("", "0")


def compile_with_per_file_flags(compiler, per_file):
    """Make compiler.compile add per_file[source] (a list of flags) to the named sources: setuptools'
    build_ext compiles every source of an extension with the same flags, so the sources are compiled in
    groups of equal flags, and the objects returned in the sources' order."""
    compile_all = compiler.compile
    per_file = {os.path.normpath(path): list(flags) for path, flags in per_file.items()}

    def compile(sources, *args, extra_postargs=None, **kwargs):
        groups = {}
        for source in sources:
            groups.setdefault(tuple(per_file.get(os.path.normpath(source), ())), []).append(source)
        objects = {}
        for flags, group in groups.items():
            built = compile_all(group, *args, extra_postargs=list(extra_postargs or []) + list(flags), **kwargs)
            objects.update(zip(group, built))
        return [objects[source] for source in sources]

    compiler.compile = compile


def compile_in_parallel(compiler):
    """Make a Unix compiler (GCC, clang) compile an extension's sources in parallel, one job a core: build_ext
    compiles one file after another, and the per-ISA kernel files take seconds each. The body is
    CCompiler.compile's own, with its loop over the objects handed to a thread pool (each job is a compiler
    process)."""
    jobs = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8)
    if jobs < 2:
        return

    def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=0, extra_preargs=None,
                extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def compile_one(obj):
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            # list(): the first compiler error is raised here
            list(pool.map(compile_one, [obj for obj in objects if obj in build]))
        return objects

    compiler.compile = compile


class BuildExt(build_ext):
    def run(self):
        # Objects and an up-to-date extension from the other mode (sanitized or not) must not be
        # reused: a mode stamp in the build directory forces a full rebuild when the mode changes.
        mode = "sanitize" if sanitize_requested() else "release"
        stamp = os.path.join(self.build_temp, "fastdeconv-build-mode")
        try:
            with open(stamp) as f:
                previous = f.read().strip()
        except OSError:
            previous = None
        if previous != mode:
            self.force = True
        super().run()
        os.makedirs(self.build_temp, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(mode + "\n")

    def build_extensions(self):
        unix = self.compiler.compiler_type != "msvc"
        sanitize = sanitize_requested()
        if sanitize and not unix:
            raise RuntimeError("FASTDECONV_SANITIZE=1 needs GCC or Clang (AddressSanitizer + UBSan)")
        for ext in self.extensions:
            # -std=c99 alone turns off GCC's fusing of a*b + c into FMA instructions, which the
            # plain-C kernels (the depthwise template, the portable GEMM) rely on; -ffp-contract=fast
            # restores it.
            ext.extra_compile_args += ["-std=c99", "-ffp-contract=fast"] if unix else ["/O2", "/fp:contract"]
            if unix and not sanitize:
                ext.extra_compile_args.append("-O3")
                # Python's own CFLAGS carry -g: 2.6 MB of debug sections in a 0.4 MB extension.
                # Released builds drop them at link time (sanitizer builds keep them for the reports).
                ext.extra_link_args.append("-Wl,-S" if sys.platform == "darwin" else "-Wl,--strip-debug")
            if unix:   # POSIX threads for src/runtime/pool.c (glibc before 2.34 keeps them in libpthread)
                ext.extra_compile_args.append("-pthread")
                ext.extra_link_args.append("-pthread")
            if sanitize:
                # Last, so that -O1 and -fno-wrapv override -O3 and Python's -fwrapv.
                ext.extra_compile_args += SANITIZE_COMPILE
                ext.extra_link_args += SANITIZE_LINK
        if not unix:
            compile_with_per_file_flags(self.compiler, MSVC_ARCH_FLAGS)
        elif all(hasattr(self.compiler, name) for name in ("_setup_compile", "_get_cc_args", "_compile")):
            compile_in_parallel(self.compiler)
        if sanitize:
            print(f"fastdeconv: SANITIZER build ({' '.join(SANITIZE_COMPILE)}); import it with "
                  "LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0")
        super().build_extensions()


extensions = [
    Extension(
        "fastdeconv._cpu",
        # The Cython shim sits next to the Python that imports it; it includes the C headers by their
        # paths from src/ ("runtime/pool.h"), as the C files do across folders.
        sources=["fastdeconv/_cpu.pyx", *C_SOURCES],
        include_dirs=["src", np.get_include()],
        # Headers and *.template.c files are #included: rebuild when they change.
        depends=sorted(glob.glob("src/*/*.h") + glob.glob("src/*/*.template.c") + glob.glob("src/third_party/*/*.h")),
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
    )
]

setup(
    ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}),
    cmdclass={"build_ext": BuildExt},
    # The shim's source ships in the sdist (MANIFEST.in); a wheel holds only its compiled extension.
    exclude_package_data={"fastdeconv": ["_cpu.pyx", "_cpu.c"]},
)
