#!/usr/bin/env bash
# AArch64 (Linux arm64; Apple silicon runs the same NEON kernels): every C source cross-compiled with Debian's
# cross toolchain (-Wall -Wextra -Werror), the C harnesses (GEMM on every ISA path built for AArch64, the thread
# pool, every algorithm against a naive reference) run under qemu-aarch64 user-mode emulation, and the NEON GEMM's
# innermost loops checked in the compiled code (tests/c/fma_loops.py: no stack spills, a bound on instructions
# per FMA). Fails, never skips: a missing tool is installed (apt-get, as root) or the script fails.
#   .ci/aarch64.sh              all of it
# QEMU 7.2 (Debian bookworm's own) has a fork bug in user-mode emulation that the pool harness's fork check
# meets; QEMU >= 8 is required (bookworm-backports has 10).
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
gemm="$kernels/gemm_dispatch.c $kernels/gemm_portable.c $kernels/gemm_avx2.c $kernels/gemm_avx512.c $kernels/gemm_neon.c"

echo "-- every C source, as setup.py compiles it (-fPIC -O3 -fwrapv, the package's flags)"
for source in src/runtime/*.c src/kernels/*.c src/algorithms/*.c; do
    case $source in *.template.c) continue ;; esac
    $CC -O3 -fwrapv -fPIC -std=c99 -ffp-contract=fast -Wall -Wextra -Werror -I"$root/src" -c "$source" \
        -o "$out/$(basename "$source" .c).o"
done

echo "-- the NEON GEMM's innermost loops (steady-state instructions per FMA: an estimate, not a measurement)"
# Tiles: no spill, at most 2 instructions per FMA (5x16: 20 FMLA, 2 LDP, 5 LDR, loop and prefetch test = 1.85).
python3 tests/c/fma_loops.py "$OBJDUMP" "$out/gemm_neon.o" --functions 'tile_(wide|narrow)(_skip)?_neon$' \
    --max-stack 0 --max-per-fma 2.0
# The narrow last panel's dot tiles: their main loops (15-16 FMAs, operands loaded from A and B) without spills;
# the loop of each tap's last, partial k step loads its operands through stack buffers (no masked loads).
python3 tests/c/fma_loops.py "$OBJDUMP" "$out/gemm_neon.o" --functions 'dot_[34]_neon$' | tee "$out/dot_loops.txt"
if grep -E ' 1[56] FMA, +[1-9][0-9]* loads' "$out/dot_loops.txt" | grep -vq ' 0 stack'; then
    echo "aarch64: a NEON dot tile's main loop spills" >&2; exit 1
fi
echo "-- the portable GEMM for comparison"
python3 tests/c/fma_loops.py "$OBJDUMP" "$out/gemm_portable.o" --functions portable_tile

echo "-- GEMM harness under qemu-aarch64 (every ISA path of this build: portable, neon)"
$CC $cflags -static $gemm tests/c/test_gemm.c -o "$out/test_gemm" -lm
qemu-aarch64 "$out/test_gemm" | tee "$out/test_gemm.log"
grep -q "^  neon     ok" "$out/test_gemm.log" || { echo "aarch64: the neon GEMM path did not run" >&2; exit 1; }

echo "-- algorithm harness under qemu-aarch64 (every algorithm, conv and transposed, f32 and f64, portable and neon)"
$CC $cflags -static $gemm "$kernels/depthwise_rows.c" "$kernels/winograd_tiles.c" src/algorithms/algorithms.c \
    tests/c/test_algorithms.c -o "$out/test_algorithms" -lm
qemu-aarch64 "$out/test_algorithms" | tee "$out/test_algorithms.log"
grep -q "^  neon .* ok$" "$out/test_algorithms.log" || { echo "aarch64: the algorithms did not run on neon" >&2; exit 1; }

echo "-- thread pool harness under qemu-aarch64 (spinning helpers, then helpers that never spin)"
$CC $cflags -static -pthread src/runtime/pool.c tests/c/test_pool.c -o "$out/test_pool"
qemu-aarch64 "$out/test_pool"
$CC $cflags -static -pthread -DFD_POOL_SPIN_NS=0 src/runtime/pool.c tests/c/test_pool.c -o "$out/test_pool_sleep"
qemu-aarch64 "$out/test_pool_sleep"
echo "aarch64: all passed"
