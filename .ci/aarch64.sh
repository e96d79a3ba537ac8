#!/usr/bin/env bash
# AArch64 (Linux arm64; Apple silicon runs the same NEON kernels): every C source cross-compiled with Debian's
# cross toolchain (-Wall -Wextra -Werror), the C harnesses (GEMM on every ISA path built for AArch64, the thread
# pool, every algorithm against a naive reference) run under qemu-aarch64 user-mode emulation, and the NEON GEMM's
# innermost loops checked in the compiled code (tests/c/fma_loops.py: no stack spills, a bound on instructions
# per FMA). Fails, never skips: a missing tool is installed (apt-get, as root) or the script fails.
# Then the Python package under emulation: the extension cross-built from
# the Cython output (as setup.py builds it, against an arm64 CPython 3.11 and numpy's aarch64 wheel) and a quick
# subset of the test suite run by an arm64 Python under qemu-aarch64, from an arm64 Debian root unpacked by
# debootstrap's first stage (no maintainer scripts run: nothing of it executes outside QEMU).
#   .ci/aarch64.sh              all of it
#   .ci/aarch64.sh c            the C part only
# $AARCH64_ROOTFS (default /srv/arm64) keeps the arm64 root between runs (about 250 MB; 1-2 minutes to make).
# QEMU >= 8 is required (bookworm-backports has 10): bookworm's own 7.2 has a fork bug in user-mode emulation
# (issue 28: Python tests that fork failed under 7.2 and pass under 10).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${BUILD_DIR:-$root/build/aarch64}
mkdir -p "$out"
CC=${AARCH64_CC:-aarch64-linux-gnu-gcc}
OBJDUMP=${AARCH64_OBJDUMP:-aarch64-linux-gnu-objdump}

qemu_major() { qemu-aarch64 --version 2>/dev/null | sed -n 's/^qemu-aarch64 version \([0-9]*\).*/\1/p'; }

if ! command -v "$CC" >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1 || [ "$(qemu_major)" -lt 8 ]; then
    if [ "$(id -u)" -ne 0 ]; then echo "aarch64: $CC or qemu-aarch64 >= 8 missing and not root to install them" >&2; exit 1; fi
    echo "-- installing the AArch64 cross toolchain and qemu-user (bookworm-backports)"
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
    if [ ! -f /etc/apt/sources.list.d/backports.list ]; then
        echo "deb http://deb.debian.org/debian ${codename}-backports main" > /etc/apt/sources.list.d/backports.list
    fi
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t "${codename}-backports" qemu-user >/dev/null
fi
major=$(qemu_major)
if [ -z "$major" ] || [ "$major" -lt 8 ]; then echo "aarch64: qemu-aarch64 $major is older than 8" >&2; exit 1; fi
echo "$($CC --version | head -n 1); $(qemu-aarch64 --version | head -n 1)"

# Static binaries: qemu-aarch64 then needs no AArch64 sysroot (QEMU_LD_PREFIX) at run time.
cflags="-O2 -std=c99 -ffp-contract=fast -Wall -Wextra -Werror -I$root/src"
kernels=$root/src/kernels
gemm="$kernels/gemm_dispatch.c $kernels/gemm_portable.c $kernels/gemm_avx2.c $kernels/gemm_avx512.c $kernels/gemm_neon.c src/runtime/cpu_features.c"

echo "-- every C source, as setup.py compiles it (-fPIC -O3 -fwrapv, the package's flags)"
for source in src/runtime/*.c src/kernels/*.c src/algorithms/*.c; do
    case $source in *.template.c) continue ;; esac
    $CC -O3 -fwrapv -fPIC -std=c99 -ffp-contract=fast -Wall -Wextra -Werror -I"$root/src" -c "$source" \
        -o "$out/$(basename "$source" .c).o"
done

echo "-- the NEON GEMM's innermost loops (steady-state instructions per FMA: an estimate, not a measurement)"
# Tiles: no spill, at most 2 instructions per FMA (5x16: 20 FMLA, 2 LDP, 5 LDR, loop and prefetch test = 1.85).
python3 tests/c/fma_loops.py "$OBJDUMP" "$out/gemm_neon.o" --functions 'tile_(wide|narrow)(_skip)?_neon(\.constprop\.[0-9]+)?$' \
    --max-stack 0 --max-per-fma 2.0
# The narrow last panel's dot tiles: their main loops (15-16 FMAs, operands loaded from A and B) without spills;
# the loop of each tap's last, partial k step loads its operands through stack buffers (no masked loads).
python3 tests/c/fma_loops.py "$OBJDUMP" "$out/gemm_neon.o" --functions 'dot_[34]_neon$' | tee "$out/dot_loops.txt"
if grep -E ' 1[56] FMA, +[1-9][0-9]* loads' "$out/dot_loops.txt" | grep -vq ' 0 stack'; then
    echo "aarch64: a NEON dot tile's main loop spills" >&2; exit 1
fi
echo "-- the portable GEMM (4x8 f32, 4x4 f64 tiles: 8 FMLA per step): no spill, at most 2.5 instructions per FMA"
# (as tests/c/build.sh checks natively; clang inlines the tile into fd_?gemm_indirect_portable)
python3 tests/c/fma_loops.py "$OBJDUMP" "$out/gemm_portable.o" --functions 'portable_tile|indirect_portable' \
    --max-stack 0 --max-per-fma 2.5

echo "-- GEMM harness under qemu-aarch64 (every ISA path of this build: portable, neon)"
$CC $cflags -static $gemm tests/c/test_gemm.c -o "$out/test_gemm" -lm
qemu-aarch64 "$out/test_gemm" | tee "$out/test_gemm.log"
grep -q "^  neon     ok" "$out/test_gemm.log" || { echo "aarch64: the neon GEMM path did not run" >&2; exit 1; }

echo "-- algorithm harness under qemu-aarch64 (every algorithm, conv and transposed, f32 and f64, portable and neon)"
# (the depthwise and Winograd kernels: a dispatch file with the portable clone, and one file per SIMD ISA; the
# x86 ones compile to stubs here)
dw_winograd="$kernels/depthwise_rows.c $kernels/depthwise_rows_avx2.c $kernels/depthwise_rows_avx512.c \
    $kernels/depthwise_rows_neon.c $kernels/winograd_tiles.c $kernels/winograd_tiles_avx2.c $kernels/winograd_tiles_avx512.c $kernels/planar_rows.c"
$CC $cflags -static $gemm $dw_winograd src/algorithms/algorithms.c tests/c/test_algorithms.c -o "$out/test_algorithms" -lm
qemu-aarch64 "$out/test_algorithms" | tee "$out/test_algorithms.log"
grep -q "^  neon .* ok$" "$out/test_algorithms.log" || { echo "aarch64: the algorithms did not run on neon" >&2; exit 1; }

echo "-- thread pool harness under qemu-aarch64 (spinning helpers, then helpers that never spin)"
$CC $cflags -static -pthread src/runtime/pool.c tests/c/test_pool.c -o "$out/test_pool"
qemu-aarch64 "$out/test_pool"
$CC $cflags -static -pthread -DFD_POOL_SPIN_NS=0 src/runtime/pool.c tests/c/test_pool.c -o "$out/test_pool_sleep"
qemu-aarch64 "$out/test_pool_sleep"
if [ "${1:-}" = c ]; then echo "aarch64: C part passed"; exit 0; fi

echo "-- the Python package under qemu-aarch64"
rootfs=${AARCH64_ROOTFS:-/srv/arm64}
site=$rootfs/usr/local/lib/python3.11/dist-packages
if [ ! -x "$rootfs/usr/bin/python3.11" ] || [ ! -f "$rootfs/usr/include/python3.11/Python.h" ]; then
    if [ "$(id -u)" -ne 0 ]; then echo "aarch64: no arm64 root at $rootfs and not root to make one" >&2; exit 1; fi
    command -v debootstrap >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
    rm -rf "$rootfs"
    # first stage only (no chroot: that would need binfmt_misc); then every downloaded package unpacked
    debootstrap --foreign --arch=arm64 --variant=minbase \
        --include=python3,python3-pytest,python3-hypothesis,libpython3.11-dev bookworm "$rootfs" \
        http://deb.debian.org/debian >/dev/null
    for deb in "$rootfs"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$rootfs"; done
fi
if [ ! -d "$site/numpy" ]; then   # numpy 2 (the build's headers and the runtime), from its aarch64 wheel
    mkdir -p "$site" "$out/wheels"
    python3 -m pip download -q --only-binary=:all: --platform manylinux_2_28_aarch64 --python-version 3.11 \
        --implementation cp --no-deps "numpy>=2.0,<2.4" -d "$out/wheels"
    python3 -m zipfile -e "$(ls "$out"/wheels/numpy-*.whl | head -n 1)" "$site"
fi
aarch64_python() {
    QEMU_LD_PREFIX=$rootfs OPENBLAS_NUM_THREADS=1 qemu-aarch64 "$rootfs/usr/bin/python3.11" "$@"
}
# The Cython step is platform-independent C: run natively (Cython >= 3.1, pyproject.toml's build requirement).
if ! python3 -c "import Cython, sys; sys.exit(tuple(map(int, Cython.__version__.split('.')[:2])) < (3, 1))" 2>/dev/null
then
    python3 -m venv "$out/cython-venv"
    "$out/cython-venv/bin/pip" install -q "Cython>=3.1"
    cython=("$out/cython-venv/bin/python" -m cython)
else
    cython=(python3 -m cython)
fi
"${cython[@]}" -3 -o "$out/_cpu.c" fastdeconv/_cpu.pyx
# setup.py's C sources and flags (-O3 -fwrapv -std=c99 -ffp-contract=fast -pthread, NPY_2_0_API_VERSION)
c_sources=$(sed -n '/^C_SOURCES = \[/,/^\]/p' setup.py | grep -o '"src/[^"*]*\.c"' | tr -d '"')
so=_cpu.cpython-311-aarch64-linux-gnu.so
$CC -shared -fPIC -O3 -fwrapv -std=c99 -ffp-contract=fast -pthread -Wall -Wno-unused-function \
    -DNPY_NO_DEPRECATED_API=NPY_2_0_API_VERSION -I"$root/src" -I"$site/numpy/_core/include" \
    -I"$rootfs/usr/include/python3.11" -idirafter "$rootfs/usr/include" "$out/_cpu.c" $c_sources \
    -o "$out/$so" -Wl,--strip-debug
# The package and its tests, as installed: a copy outside the source tree
rm -rf "$out/pkg" && mkdir -p "$out/pkg"
git ls-files -z --cached --others --exclude-standard fastdeconv tests pyproject.toml | tar --null -T - -cf - | tar -xf - -C "$out/pkg"
rm -f "$out/pkg/fastdeconv/_cpu.pyx"
cp "$out/$so" "$out/pkg/fastdeconv/"
cd "$out/pkg"
aarch64_python -c "
import platform, fastdeconv
from fastdeconv import _cpu
info = _cpu.build_info()
print(platform.machine(), fastdeconv.__file__, info)
assert platform.machine() == 'aarch64' and info['gemm_isa'] == 'neon' and info['gemm_isa_supported']['neon'], info
"
# A quick subset (the whole suite takes about half an hour under emulation): the CPU backend against the numpy
# reference through every algorithm on both GEMM paths (portable, neon), hypothesis' examples scaled down,
# and the SIMD-path checks (planar's blocks of 8 outputs with NEON's 32 registers among them).
CI=1 FASTDECONV_TEST_EXAMPLES=${FASTDECONV_AARCH64_EXAMPLES:-0.03} timeout 600 \
    env QEMU_LD_PREFIX="$rootfs" OPENBLAS_NUM_THREADS=1 qemu-aarch64 "$rootfs/usr/bin/python3.11" -m pytest -q \
    -p no:cacheprovider --durations=5 tests/cpu/test_cpu_vs_reference.py \
    tests/cpu/test_kernel_safety.py::test_aarch64_builds_have_the_neon_path \
    tests/cpu/test_winograd.py::test_planar_blocks_follow_the_vector_registers \
    tests/api/test_call_behaviour.py::test_show_config_prints_thread_pool_and_simd
cd "$root"
echo "aarch64: all passed"
