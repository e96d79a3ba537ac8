/* The x86 CPU features the SIMD kernels are compiled for, detected by the package itself (cpuid and
 * xgetbv) on every compiler: GCC, clang, Apple clang (which has no ___cpu_model for
 * __builtin_cpu_supports) and MSVC (__cpuidex, _xgetbv). A feature counts as present only when the CPU
 * reports it and the operating system saves the register state it needs (XCR0: bits 1-2, XMM/YMM, for
 * every AVX feature; and 5-7, opmask/ZMM, for AVX-512), as libgcc's __builtin_cpu_supports does.
 * On other architectures no feature is ever present. */
#ifndef FASTDECONV_CPU_FEATURES_H
#define FASTDECONV_CPU_FEATURES_H

/* Every feature the package can check, by the names GCC's target attributes use (kernels/gemm_internal.h
 * lists them per kernel; bmi/bmi2/lzcnt/avx512cd are what MSVC's /arch:AVX2 and /arch:AVX512 may use on
 * top: see FD_MSVC_ARCH_*). FD_CPU_<name> is the feature's bit. */
#define FD_CPU_FEATURE_LIST(X) \
    X(avx) X(avx2) X(fma) X(bmi) X(bmi2) X(lzcnt) \
    X(avx512f) X(avx512vl) X(avx512bw) X(avx512dq) X(avx512cd)

#define FD_CPU_FEATURE_ID(f) FD_CPU_ID_##f,
enum { FD_CPU_FEATURE_LIST(FD_CPU_FEATURE_ID) FD_CPU_FEATURE_COUNT };
#undef FD_CPU_FEATURE_ID
#define FD_CPU_FEATURE_BIT(f) FD_CPU_##f = 1u << FD_CPU_ID_##f,
enum { FD_CPU_FEATURE_LIST(FD_CPU_FEATURE_BIT) FD_CPU_NONE = 0 };
#undef FD_CPU_FEATURE_BIT

/* The features present (FD_CPU_* bits), detected once (the first call; threads racing to it compute and
 * store the same value). */
unsigned fd_cpu_features(void);

/* 1 if every feature of `mask` is present. */
int fd_cpu_supports_all(unsigned mask);

/* The CPU's vendor (cpuid leaf 0): FD_CPU_VENDOR_INTEL ("GenuineIntel"), FD_CPU_VENDOR_AMD ("AuthenticAMD")
 * or FD_CPU_VENDOR_OTHER (every other vendor, and every non-x86 CPU). */
enum { FD_CPU_VENDOR_OTHER = 0, FD_CPU_VENDOR_INTEL = 1, FD_CPU_VENDOR_AMD = 2 };
int fd_cpu_vendor(void);

/* KiB of the data or unified cache of `level` (2: one core's L2, 3: the L3) from cpuid's deterministic
 * cache parameters (leaf 0x8000001D on AMD, leaf 4 on every other vendor: ways x partitions x line size x
 * sets), or 0 when no leaf describes one (and off x86). */
long long fd_cpu_cache_kib(int level);

#endif
