#!/usr/bin/env bash
# CI stage: the C sources on Windows, as far as this Linux machine can take them (.ci/run runs it).
#
# 1. mingw-w64 (x86_64-w64-mingw32-gcc, the GCC/clang code paths: target attributes, the pool's Win32
#    threads): every C source in src/ compiled; the GEMM harness (tests/c/test_gemm.c, every ISA this
#    CPU has; AVX-512 reports "not supported" where the CPU lacks it), the algorithm harness's quick set
#    (tests/c/test_algorithms.c, likewise) and the thread-pool harness
#    (tests/c/test_pool.c; no fork() on Windows) linked and run under wine; no object references
#    libgcc's __cpu_model (the kernels' run-time checks are src/runtime/cpu_features.c's cpuid/xgetbv).
# 2. MSVC's view of the sources, emulated with clang (no MSVC here): --target=x86_64-pc-windows-msvc
#    -fms-compatibility -fms-extensions with __clang__ and __x86_64__ undefined after clang's intrinsic
#    headers, so that _MSC_VER/_M_X64 select the MSVC branches exactly as cl.exe would; glibc's headers
#    stand in for the Windows SDK's (clang's own stdint/stddef: LLP64). What it proves: with _MSC_VER
#    and without __GNUC__/__clang__, every source but pool.c and fingerprint.c (see below) parses and
#    type-checks with MS extensions;
#    the per-ISA kernel files (gemm_, winograd_tiles_, depthwise_rows_ avx2.c / avx512.c) do so with
#    /arch:AVX2 / /arch:AVX512's features (setup.py's MSVC_ARCH_FLAGS, which must list exactly these six
#    files) and compile (clang) to ymm / zmm FMAs; no GCC-only construct (__attribute__,
#    __builtin_*, __atomic_*, inline asm, GCC pragmas, <cpuid.h>) is left in the project's own code after
#    preprocessing (pool.c included: its Windows SDK headers are empty stand-ins there); the MSVC
#    branches are the ones taken (cpuid through __cpuidex/_xgetbv, __forceinline, Interlocked*/SRWLOCK
#    in the pool, the Winograd transforms' intrinsics instead of GCC vectors), and the Winograd and
#    depthwise SIMD clones are present. What it does not prove: that cl.exe accepts every construct clang's MS mode
#    does, that the Windows SDK's declarations match the stand-ins, or anything about MSVC's code
#    generation: only a Windows machine with MSVC (the cibuildwheel job) settles those.
# The tools are installed with apt-get when absent (CI runs as root on Debian); if they still are not
# there, the stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d)
# the prefix's wineserver (started persistent below) goes with the prefix
trap 'if [ -n "${WINEPREFIX:-}" ]; then wineserver -k 2>/dev/null || true; fi; rm -rf "$work"' EXIT

need=()
command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(mingw-w64)
command -v wine >/dev/null || need+=(wine wine64)
command -v clang >/dev/null || need+=(clang)
if [ "${#need[@]}" -gt 0 ]; then
    echo "windows: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
for tool in x86_64-w64-mingw32-gcc x86_64-w64-mingw32-nm wine clang objdump; do
    command -v "$tool" >/dev/null || { echo "windows: $tool is missing" >&2; exit 1; }
done

sources=$(find src -name '*.c' ! -name '*.template.c' ! -path 'src/third_party/*' | sort)
mingw="x86_64-w64-mingw32-gcc -O2 -std=c99 -Wall -Wextra -Werror -Isrc"

echo "-- mingw-w64: every source compiled"
mkdir -p "$work/obj"
for f in $sources; do
    $mingw -c "$f" -o "$work/obj/$(echo "$f" | tr / _).o"
done
if x86_64-w64-mingw32-nm "$work"/obj/*.o | grep -i "cpu_model\|cpu_features2\|__cpu_indicator_init"; then
    echo "windows: an object needs libgcc's CPU model (__builtin_cpu_supports)" >&2
    exit 1
fi
echo "$(echo "$sources" | wc -w) sources compiled, none references __cpu_model"

echo "-- mingw-w64: harnesses under wine"
# -static: no MinGW runtime DLLs to find under wine; -pthread: winpthreads (clock_gettime, the harness'
# own threads; the pool itself uses Win32 threads on _WIN32).
$mingw -static -pthread src/kernels/gemm_dispatch.c src/kernels/gemm_portable.c src/kernels/gemm_avx2.c \
    src/kernels/gemm_avx512.c src/kernels/gemm_neon.c src/runtime/cpu_features.c tests/c/test_gemm.c -o "$work/test_gemm.exe"
$mingw -static -pthread src/runtime/pool.c tests/c/test_pool.c -o "$work/test_pool.exe"
# every algorithm against the naive reference (the quick set), with the depthwise and Winograd kernels' per-ISA files
$mingw -static -pthread src/kernels/gemm_dispatch.c src/kernels/gemm_portable.c src/kernels/gemm_avx2.c \
    src/kernels/gemm_avx512.c src/kernels/gemm_neon.c src/runtime/cpu_features.c \
    src/kernels/depthwise_rows.c src/kernels/depthwise_rows_avx2.c src/kernels/depthwise_rows_avx512.c \
    src/kernels/depthwise_rows_neon.c src/kernels/winograd_tiles.c src/kernels/winograd_tiles_avx2.c \
    src/kernels/winograd_tiles_avx512.c src/kernels/planar_rows.c src/algorithms/algorithms.c tests/c/test_algorithms.c -o "$work/test_algorithms.exe"
export WINEPREFIX="$work/wineprefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
# One wineserver for every harness, started before wineboot: by default it exits soon after its last
# client, and on a busy machine a harness started in that window lost its connection ("wine client
# error:0: recvmsg: Connection reset by peer") and printed nothing.
mkdir -p "$WINEPREFIX"
wineserver -p
wineboot -i >/dev/null 2>&1 || true
wine "$work/test_gemm.exe" 2>&1 | tr -d '\r' | tee "$work/gemm.log"
grep -q "^all tests passed" "$work/gemm.log" || { echo "windows: test_gemm.exe failed" >&2; exit 1; }
grep -q "avx2 *ok" "$work/gemm.log" || grep -q "avx2 *not supported" "$work/gemm.log" \
    || { echo "windows: test_gemm.exe did not report the avx2 path" >&2; exit 1; }
wine "$work/test_algorithms.exe" quick 2>&1 | tr -d '\r' | tee "$work/algorithms.log"
grep -q "^all [0-9]* cases passed" "$work/algorithms.log" || { echo "windows: test_algorithms.exe failed" >&2; exit 1; }
grep -q "^  avx2 .* ok$" "$work/algorithms.log" || grep -q "^  avx2 .*not supported" "$work/algorithms.log" \
    || { echo "windows: test_algorithms.exe did not pass on the avx2 path" >&2; exit 1; }
wine "$work/test_pool.exe" 2>&1 | tr -d '\r' | tee "$work/pool.log"
grep -q "(win32)" "$work/pool.log" || { echo "windows: the pool's Win32 branch did not run" >&2; exit 1; }
grep -q "^pool: all checks passed" "$work/pool.log" || { echo "windows: test_pool.exe failed" >&2; exit 1; }

echo "-- MSVC's view (clang, MS mode, _MSC_VER without __GNUC__/__clang__)"
msvc="$work/msvc"
mkdir -p "$msvc/include/gnu" "$msvc/sdk"
# glibc in 32-bit word mode (no __x86_64__, as under MSVC) looks for its 32-bit stubs list
: > "$msvc/include/gnu/stubs-32.h"
: > "$msvc/sdk/windows.h"
: > "$msvc/sdk/process.h"
cat > "$msvc/prelude.h" <<'EOF'
/* clang's intrinsic headers first (they need __x86_64__), then MSVC's macro set: no __x86_64__. */
#include <intrin.h>
#include <immintrin.h>
#include <sys/cdefs.h>
#undef __attribute__ /* glibc defines it away for non-GNU compilers: keep it visible to the checks */
#undef __x86_64__
#undef __x86_64
#undef __amd64__
#undef __amd64
/* MSVC's <stdlib.h> declares these (xxhash uses them) */
unsigned long _byteswap_ulong(unsigned long);
unsigned __int64 _byteswap_uint64(unsigned __int64);
EOF
cl=(clang --target=x86_64-pc-windows-msvc -fms-compatibility -fms-extensions -U__clang__ -U__GNUC__
    -Wno-builtin-macro-redefined -ffreestanding -include "$msvc/prelude.h" -idirafter /usr/include
    -idirafter /usr/include/x86_64-linux-gnu -idirafter "$msvc/include" -Isrc -std=c11 -Wall -Werror)
simd_files="gemm winograd_tiles depthwise_rows"   # the kernel families with avx2 / avx512 files
arch_flags() {   # clang's equivalent of setup.py's MSVC_ARCH_FLAGS for one source
    case "$1" in
        src/kernels/*_avx2.c) echo "-mavx2 -mfma -mbmi -mbmi2 -mlzcnt" ;;
        src/kernels/*_avx512.c) echo "-mavx2 -mfma -mbmi -mbmi2 -mlzcnt -mavx512f -mavx512cd -mavx512vl -mavx512bw -mavx512dq" ;;
    esac
}
# setup.py's MSVC_ARCH_FLAGS: exactly the avx2 / avx512 file of each family, with its /arch: flag
arch_table=$(sed -n '/^MSVC_ARCH_FLAGS = {/,/^}/p' setup.py | grep -o '"src/[^"]*": \["[^"]*"\]' | sort)
expected_table=$(for family in $simd_files; do
    echo "\"src/kernels/${family}_avx2.c\": [\"/arch:AVX2\"]"
    echo "\"src/kernels/${family}_avx512.c\": [\"/arch:AVX512\"]"
done | sort)
[ "$arch_table" = "$expected_table" ] || {
    printf 'windows: setup.py MSVC_ARCH_FLAGS:\n%s\nexpected:\n%s\n' "$arch_table" "$expected_table" >&2; exit 1; }
for f in src/kernels/*_avx2.c src/kernels/*_avx512.c; do
    echo "$expected_table" | grep -qF "\"$f\"" || { echo "windows: $f has no /arch: flag in setup.py" >&2; exit 1; }
done
for f in $sources; do
    name=$(echo "$f" | tr / _)
    # shellcheck disable=SC2046
    # not pool.c (its Windows SDK headers have no stand-in here) nor fingerprint.c (vendored xxhash's
    # x86 dispatch uses AVX-512 intrinsics without /arch:, which MSVC allows and clang's MS mode does not)
    case "$f" in
        src/runtime/pool.c | src/runtime/fingerprint.c) ;;
        *) "${cl[@]}" $(arch_flags "$f") -fsyntax-only "$f" ;;
    esac
    # the project's own lines after preprocessing (linemarkers name the file each line comes from)
    "${cl[@]}" $(arch_flags "$f") -idirafter "$msvc/sdk" -E "$f" \
        | awk '/^# [0-9]+ "/ { own = ($3 ~ /^"src\//) && ($3 !~ /third_party/); next } own' > "$msvc/$name.i"
    # (__builtin_ia32_* and __builtin_shufflevector come from clang's intrinsic macros, which MSVC's
    # headers define its own way)
    if grep -nP '__attribute__|__builtin_(?!ia32_|shufflevector)|__atomic_|__asm|\basm\b|_Pragma|#pragma GCC|__typeof|__get_cpuid|__cpuid_count|__cpu_model' \
        "$msvc/$name.i"; then
        echo "windows: $f keeps a GCC-only construct under MSVC (above)" >&2
        exit 1
    fi
done
expect() {   # expect <source> <present|absent> <extended regex>: the MSVC branch taken
    local name
    name=$(echo "$1" | tr / _)
    if grep -qE "$3" "$msvc/$name.i"; then [ "$2" = present ]; else [ "$2" = absent ]; fi \
        || { echo "windows: under MSVC, $1 should have $3 $2" >&2; exit 1; }
}
expect src/runtime/cpu_features.c present '__cpuidex'
expect src/runtime/cpu_features.c present '_xgetbv'
expect src/kernels/gemm_avx2.c present '__forceinline'
expect src/kernels/gemm_avx2.c present '_mm256_fmadd_ps'
expect src/kernels/gemm_avx2.c present 'fd_cpu_supports_all'
expect src/kernels/gemm_avx512.c present '_mm512_fmadd_pd'
expect src/runtime/pool.c present 'InterlockedCompareExchange64'
expect src/runtime/pool.c present 'SRWLOCK'
# the Winograd transforms and the depthwise kernels: their SIMD clones, MSVC spellings (intrinsics for the
# Winograd vectors, no empty asm)
for isa in avx2:_mm256 avx512:_mm512; do
    expect "src/kernels/winograd_tiles_${isa%%:*}.c" present "fd_swinograd_input_${isa%%:*}\\("
    expect "src/kernels/winograd_tiles_${isa%%:*}.c" present "fd_dwinograd_output_${isa%%:*}\\("
    expect "src/kernels/winograd_tiles_${isa%%:*}.c" present "${isa#*:}_fmadd_ps"
    expect "src/kernels/winograd_tiles_${isa%%:*}.c" present '__forceinline'
    expect "src/kernels/winograd_tiles_${isa%%:*}.c" absent 'vector_size'
    expect "src/kernels/winograd_tiles_${isa%%:*}.c" present 'fd_cpu_supports_all'
    expect "src/kernels/depthwise_rows_${isa%%:*}.c" present "fd_sconv_depthwise_rows_${isa%%:*}\\("
    expect "src/kernels/depthwise_rows_${isa%%:*}.c" present "${isa#*:}_fmadd_pd"
    expect "src/kernels/depthwise_rows_${isa%%:*}.c" present 'fd_cpu_supports_all'
done
expect src/kernels/winograd_tiles_avx512.c present '_mm512_stream_ps'
expect src/kernels/depthwise_rows_avx512.c present 'fd_sdepthwise_rows_avx512_c1'
# the /arch files compiled by clang in MS mode: ymm / zmm FMAs
for family in $simd_files; do
    for isa in avx2:ymm avx512:zmm; do
        f=src/kernels/${family}_${isa%%:*}.c
        # shellcheck disable=SC2046
        "${cl[@]}" -O2 $(arch_flags "$f") -c "$f" -o "$msvc/${family}_${isa%%:*}.obj"
        fmas=$(objdump -d "$msvc/${family}_${isa%%:*}.obj" | grep -cE "vfmadd[0-9a-z]+ .*%${isa#*:}" || true)
        echo "$f (MSVC branch, clang MS mode): $fmas ${isa#*:} FMAs"
        [ "$fmas" -gt 0 ] || { echo "windows: no ${isa#*:} FMAs in $f's MSVC build" >&2; exit 1; }
    done
done
echo "windows: all checks passed"
