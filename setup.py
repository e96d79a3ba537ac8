"""Extension modules only; the metadata is in pyproject.toml.

OpenMP is optional: the build probes the compiler for it and, when it is
missing (or FASTDECONV_NO_OPENMP=1), builds a serial extension instead.
fastdeconv.show_config() says which. No -march flags: SIMD kernels are chosen
at run time (src/gemm.c).

FASTDECONV_SANITIZE=1 builds a debugging extension instrumented with AddressSanitizer and
UndefinedBehaviorSanitizer (GCC or Clang, OpenMP kept): -O1 -g, -fno-wrapv so that signed overflow
is reported rather than defined, and any UB aborts. The interpreter is not instrumented, so the
ASan runtime must be preloaded to import it:

    FASTDECONV_SANITIZE=1 pip install --no-build-isolation -e .
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 pytest tests/test_cpu_vs_reference.py
"""

import glob
import os
import sys
import tempfile
import textwrap

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The GEMM and depthwise microkernels (one file per ISA where needed) and the algorithm table,
# which instantiates every src/*.template.c algorithm (src/algorithms.c).
C_SOURCES = [
    "src/gemm.c",
    "src/gemm_avx2.c",
    "src/gemm_avx512.c",
    "src/depthwise_rows.c",
    "src/algorithms.c",
    "src/fingerprint.c",
]


# After Python's own CFLAGS (which hold -fwrapv -O3) on the command line, so these win.
SANITIZE_COMPILE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-wrapv", "-O1", "-g",
                    "-fno-omit-frame-pointer"]
SANITIZE_LINK = ["-fsanitize=address,undefined"]


def sanitize_requested() -> bool:
    return os.environ.get("FASTDECONV_SANITIZE", "0") not in ("", "0")


def openmp_flags(compiler):
    """(compile, link) flags that make OpenMP work with this compiler, or None."""
    if os.environ.get("FASTDECONV_NO_OPENMP", "0") not in ("", "0"):
        return None
    if compiler.compiler_type == "msvc":
        candidates = [(["/openmp"], [])]
    elif sys.platform == "darwin":
        candidates = [(["-Xpreprocessor", "-fopenmp"], ["-lomp"]), (["-fopenmp"], ["-fopenmp"])]
    else:
        candidates = [(["-fopenmp"], ["-fopenmp"])]
    probe = textwrap.dedent("""
        #include <omp.h>
        int main(void) { int n = 0;
        #pragma omp parallel reduction(+:n)
          n += 1;
          return n > 0 ? 0 : 1; }
        """)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "probe_openmp.c")
        with open(source, "w") as f:
            f.write(probe)
        for cflags, ldflags in candidates:
            try:
                objects = compiler.compile([source], output_dir=tmp, extra_postargs=cflags)
                compiler.link_executable(objects, os.path.join(tmp, "probe_openmp"), extra_postargs=ldflags)
            except Exception:
                continue
            return cflags, ldflags
    return None


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
        flags = openmp_flags(self.compiler)
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
            if flags is None:
                print("fastdeconv: building WITHOUT OpenMP (serial kernels)")
            else:
                print(f"fastdeconv: building with OpenMP ({' '.join(flags[0])})")
                ext.extra_compile_args += flags[0]
                ext.extra_link_args += flags[1]
            if sanitize:
                # Last, so that -O1 and -fno-wrapv override -O3 and Python's -fwrapv.
                ext.extra_compile_args += SANITIZE_COMPILE
                ext.extra_link_args += SANITIZE_LINK
        if sanitize:
            print(f"fastdeconv: SANITIZER build ({' '.join(SANITIZE_COMPILE)}); import it with "
                  "LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0")
        super().build_extensions()


extensions = [
    Extension(
        "fastdeconv._cpu",
        sources=["src/_cpu.pyx", *C_SOURCES],
        include_dirs=["src", np.get_include()],
        # Headers and *.template.c files are #included: rebuild when they change.
        depends=sorted(glob.glob("src/*.h") + glob.glob("src/*.template.c") + glob.glob("src/third_party/*/*.h")),
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
    )
]

setup(
    ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}),
    cmdclass={"build_ext": BuildExt},
)
