#!/usr/bin/env bash
# CI stage: every C source in src/ compiled (-c, -O1, warnings as errors) by clang for the two macOS wheel
# targets, arm64-apple-macos11 and x86_64-apple-macos10.13 (.ci/run runs it). No Apple SDK here: glibc's
# headers stand in for it (x86_64: the host's; arm64: Debian's libc6-dev-arm64-cross), with clang's
# Darwin macro __nonnull (a nullability keyword that would clash with glibc's macro) undefined.
# What it proves: with __APPLE__/__MACH__ and each Darwin target's predefined macros and ABI, every
# source (every src/**/*.c except the *.template.c files, which the others include, and src/third_party,
# which is included through fingerprint.c) compiles without a warning; on x86_64 the AVX2 / AVX-512 files
# of the GEMM, the Winograd transforms and the depthwise rows hold ymm / zmm FMAs, on arm64 the NEON
# depthwise file vector FMLAs, and no object references ___cpu_model / ___cpu_indicator_init (what
# __builtin_cpu_supports needs and Apple's toolchain is reported not to provide: the kernels' checks are
# src/runtime/cpu_features.c's own cpuid/xgetbv). What it does not prove: that the Apple SDK's headers
# declare what glibc's do, that Apple's clang (a different version) accepts the code, or that the
# extension links and runs on a Mac: .github/workflows/macos.yml on a real Mac settles those.
# On arm64 the x86 SIMD files compile to their portable stubs; the NEON kernels are whatever src/ holds
# (every src/**/*.c is compiled, so a new kernels file is covered without a change here).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

need=()
command -v clang >/dev/null || need+=(clang)
command -v llvm-nm >/dev/null || need+=(llvm)
[ -d /usr/aarch64-linux-gnu/include ] || need+=(libc6-dev-arm64-cross)
if [ "${#need[@]}" -gt 0 ]; then
    echo "macos: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
for tool in clang llvm-nm llvm-objdump; do
    command -v "$tool" >/dev/null || { echo "macos: $tool is missing" >&2; exit 1; }
done
[ -d /usr/aarch64-linux-gnu/include ] || { echo "macos: /usr/aarch64-linux-gnu/include is missing" >&2; exit 1; }

sources=$(find src -name '*.c' ! -name '*.template.c' ! -path 'src/third_party/*' | sort)
for target in arm64-apple-macos11 x86_64-apple-macos10.13; do
    case $target in
        arm64-*) headers=/usr/aarch64-linux-gnu/include ;;
        *) headers=/usr/include ;;
    esac
    mkdir -p "$work/$target"
    for f in $sources; do
        clang --target="$target" -O1 -std=c99 -Wall -Wextra -Werror -U__nonnull -Isrc -idirafter "$headers" \
            -idirafter /usr/include/x86_64-linux-gnu -c "$f" -o "$work/$target/$(echo "$f" | tr / _).o"
    done
    echo "$target: $(echo "$sources" | wc -w) sources compiled"
done
x86=$work/x86_64-apple-macos10.13
if llvm-nm "$x86"/*.o | grep -E "cpu_model|cpu_indicator_init|cpu_features2"; then
    echo "macos: an x86_64 object needs libgcc's/compiler-rt's CPU model (__builtin_cpu_supports)" >&2
    exit 1
fi
echo "x86_64: no object references ___cpu_model"
for family in gemm winograd_tiles depthwise_rows; do
    for isa in avx2:ymm avx512:zmm; do
        f=${family}_${isa%%:*}.c
        fmas=$(llvm-objdump -d "$x86/src_kernels_$f.o" | grep -cE "vfmadd[0-9a-z]+.*%${isa#*:}" || true)
        echo "x86_64: $f has $fmas ${isa#*:} FMAs"
        [ "$fmas" -gt 0 ] || { echo "macos: no ${isa#*:} FMAs in $f for x86_64 macOS" >&2; exit 1; }
    done
done
# arm64: the NEON depthwise kernels (Advanced SIMD FMLA on q registers)
arm=$work/arm64-apple-macos11
# (llvm-objdump prints Mach-O arm64 in Apple's syntax: fmla.4s v2, v5, v0)
fmlas=$(llvm-objdump -d "$arm/src_kernels_depthwise_rows_neon.c.o" | grep -cE "fmla(\.(4s|2d)\s|\s+v[0-9]+\.(4s|2d))" || true)
echo "arm64: depthwise_rows_neon.c has $fmlas vector FMLAs"
[ "$fmlas" -gt 0 ] || { echo "macos: no vector FMLAs in depthwise_rows_neon.c for arm64 macOS" >&2; exit 1; }
echo "macos: all checks passed"
