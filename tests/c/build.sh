#!/bin/sh
# Build and run the standalone GEMM test (tests/c/test_gemm.c) with baseline flags, the algorithms'
# (tests/c/test_algorithms.c: every algorithm against a naive reference) and the thread pool's
# (tests/c/test_pool.c). .ci/aarch64.sh builds the same harnesses for AArch64 and runs them under QEMU.
#   tests/c/build.sh            full tests, then the quick sets under valgrind, TSan (pool) and ASan/UBSan
#   tests/c/build.sh bench [isa|all] [reps]   benchmark build (-O3, like the package build)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${BUILD_DIR:-$root/build/tests_c}
mkdir -p "$out"
CC=${CC:-gcc}
kernels=$root/src/kernels
gemm_sources="$kernels/gemm_dispatch.c $kernels/gemm_portable.c $kernels/gemm_avx2.c $kernels/gemm_avx512.c $kernels/gemm_neon.c $root/src/runtime/cpu_features.c"
sources="$gemm_sources $here/test_gemm.c"

if [ "${1:-}" = bench ]; then
    shift
    $CC -O3 -std=c99 -ffp-contract=fast -Wall -Wextra -I"$root/src" $sources -o "$out/bench_gemm" -lm
    exec "$out/bench_gemm" bench "$@"
fi

# The portable GEMM's inner loop as this compiler builds it with the package's flags (setup.py: -O3 -fwrapv
# -ffp-contract=fast): vectorised, no accumulator on the stack, and at most a stated number of instructions per
# vector multiply-add (tests/c/fma_loops.py --mul-add). Issue 28: clang 14 kept the 4x8 f32 tile's accumulators
# on the stack (x86: 6.5 instructions per step, 15 stack accesses; AArch64: 4.25, 8), 2-2.5x slower than GCC.
# Bounds: x86-64 SSE2 (MULPS + ADDPS, B loads, 4 broadcasts, register copies for two-operand SSE) 4.12 with
# GCC 12 and clang 14, bound 4.5; AArch64 (FMLA, LDP of B, 4 LD1R) 2.00-2.12, bound 2.5.
case $($CC -dumpmachine 2>/dev/null) in
    x86_64*) portable_bound=4.5 ;;
    aarch64*) portable_bound=2.5 ;;
    *) portable_bound= ;;
esac
if [ -n "$portable_bound" ] && command -v python3 >/dev/null 2>&1 && command -v "${OBJDUMP:-objdump}" >/dev/null 2>&1; then
    echo "portable GEMM inner loop ($CC, at most $portable_bound instructions per vector multiply-add, no stack):"
    $CC -O3 -fwrapv -fPIC -std=c99 -ffp-contract=fast -Wall -Wextra -Werror -I"$root/src" \
        -c "$kernels/gemm_portable.c" -o "$out/gemm_portable_O3.o"
    python3 "$here/fma_loops.py" "${OBJDUMP:-objdump}" "$out/gemm_portable_O3.o" \
        --functions 'portable_tile|indirect_portable' --mul-add --max-stack 0 --max-per-fma "$portable_bound"
else
    echo "portable GEMM inner loop check: no bound for $($CC -dumpmachine 2>/dev/null), or no python3/objdump: skipped"
fi

$CC -O2 -g -std=c99 -Wall -Wextra -I"$root/src" $sources -o "$out/test_gemm" -lm
"$out/test_gemm"
# Memory checks on the quick set. valgrind cannot decode AVX-512, so the avx512 path
# (skipped there as "not supported") is checked with AddressSanitizer instead.
if command -v valgrind >/dev/null 2>&1; then
    echo "valgrind:"
    valgrind -q --error-exitcode=1 "$out/test_gemm" quick
else
    echo "valgrind not installed: skipped"
fi
if $CC -O1 -g -std=c99 -fsanitize=address,undefined -fno-sanitize-recover=all -I"$root/src" $sources \
    -o "$out/test_gemm_asan" -lm 2>/dev/null; then
    echo "AddressSanitizer + UBSan:"
    "$out/test_gemm_asan" quick
else
    echo "sanitizers unavailable: skipped"
fi

# Every algorithm of src/algorithms on every supported ISA, float32 and float64, against a naive reference;
# then the quick set under valgrind and ASan + UBSan, as for the GEMM.
# (the depthwise and Winograd kernels: a dispatch file with the portable clone, and one file per SIMD ISA)
kernel_sources="$kernels/depthwise_rows.c $kernels/depthwise_rows_avx2.c $kernels/depthwise_rows_avx512.c \
    $kernels/depthwise_rows_neon.c $kernels/winograd_tiles.c $kernels/winograd_tiles_avx2.c $kernels/winograd_tiles_avx512.c $kernels/planar_rows.c"
algorithm_sources="$gemm_sources $kernel_sources $root/src/algorithms/algorithms.c $here/test_algorithms.c"
$CC -O2 -g -std=c99 -ffp-contract=fast -Wall -Wextra -I"$root/src" $algorithm_sources -o "$out/test_algorithms" -lm
"$out/test_algorithms"
# The Winograd transforms as MSVC compiles them (intrinsics instead of GCC vector extensions:
# src/kernels/winograd_tiles_internal.h), here through GCC's/clang's target attributes.
echo "Winograd transforms with intrinsics (their MSVC code, -DFD_WINOGRAD_INTRINSICS):"
$CC -O2 -g -std=c99 -ffp-contract=fast -Wall -Wextra -DFD_WINOGRAD_INTRINSICS -I"$root/src" $algorithm_sources \
    -o "$out/test_algorithms_intrinsics" -lm
"$out/test_algorithms_intrinsics"
if command -v valgrind >/dev/null 2>&1; then
    echo "valgrind:"
    valgrind -q --error-exitcode=1 "$out/test_algorithms" quick
fi
if $CC -O1 -g -std=c99 -fsanitize=address,undefined -fno-sanitize-recover=all -I"$root/src" $algorithm_sources \
    -o "$out/test_algorithms_asan" -lm 2>/dev/null; then
    echo "AddressSanitizer + UBSan:"
    "$out/test_algorithms_asan" quick
else
    echo "sanitizers unavailable: skipped"
fi

# The thread pool (src/runtime/pool.c): every task once under concurrent submitters, stop, fork; then
# under ThreadSanitizer (without the fork part, which TSan cannot follow) and AddressSanitizer + UBSan.
pool_sources="$root/src/runtime/pool.c $here/test_pool.c"
$CC -O2 -g -std=c99 -Wall -Wextra -pthread -I"$root/src" $pool_sources -o "$out/test_pool"
"$out/test_pool"
# again with helpers that never spin: each sleeps between jobs and is woken down the chain
$CC -O2 -g -std=c99 -Wall -Wextra -pthread -DFD_POOL_SPIN_NS=0 -I"$root/src" $pool_sources -o "$out/test_pool_sleep"
echo "helpers that never spin:"
"$out/test_pool_sleep"
if $CC -O1 -g -std=c99 -fsanitize=thread -pthread -I"$root/src" $pool_sources -o "$out/test_pool_tsan" 2>/dev/null; then
    echo "ThreadSanitizer:"
    TSAN_OPTIONS=halt_on_error=1 "$out/test_pool_tsan" quick nofork
    # and with helpers that never spin
    $CC -O1 -g -std=c99 -fsanitize=thread -pthread -DFD_POOL_SPIN_NS=0 -I"$root/src" $pool_sources -o "$out/test_pool_tsan_sleep"
    echo "ThreadSanitizer, helpers that never spin:"
    TSAN_OPTIONS=halt_on_error=1 "$out/test_pool_tsan_sleep" quick nofork
else
    echo "ThreadSanitizer unavailable: skipped"
fi
if $CC -O1 -g -std=c99 -fsanitize=address,undefined -fno-sanitize-recover=all -pthread -I"$root/src" $pool_sources \
    -o "$out/test_pool_asan" 2>/dev/null; then
    echo "AddressSanitizer + UBSan:"
    # No fork() check here (as under TSan). GCC 12's ASan runtime does not hold its allocator's locks
    # across fork(): a child forked while the background thread is inside calloc inherits that lock held
    # and blocks in its first calloc of the same size class (gdb, 2026-12-01: the child in
    # SizeClassAllocator64::GetFromAllocator, 5 of 8 runs). glibc's own malloc is fork-safe and the
    # plain build above passes the check; later runtimes (LLVM 18) lock the allocator around fork().
    "$out/test_pool_asan" quick nofork
else
    echo "sanitizers unavailable: skipped"
fi
