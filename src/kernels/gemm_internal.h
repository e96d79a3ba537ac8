/* Internal glue between the GEMM's run-time ISA dispatch (gemm_dispatch.c), its packing and portable
 * path (gemm_portable.c) and its SIMD files (gemm_avx2.c, gemm_avx512.c, gemm_neon.c); the depthwise and Winograd
 * kernels use its feature lists and run-time choices too. Not part of the public API. */
#ifndef FASTDECONV_GEMM_INTERNAL_H
#define FASTDECONV_GEMM_INTERNAL_H

#include <stdint.h>

#include "gemm.h"
#include "runtime/cpu_features.h"

/* x86-64 SIMD kernels (AVX2, AVX-512): every kernel family (GEMM, Winograd transforms, depthwise rows) has
 * one file per ISA (gemm_avx2.c, winograd_tiles_avx2.c, depthwise_rows_avx2.c, ... _avx512.c), built in
 * one of two ways:
 *  - GCC and clang (FD_X86_TARGET_ATTRIBUTES): per-function target attributes, the rest of the build at
 *    the baseline ISA.
 *  - MSVC (not clang-cl): no per-function targets; setup.py compiles each whole file with /arch:AVX2 or
 *    /arch:AVX512 (MSVC_ARCH_FLAGS). The GCC-only constructs of the templates (vector extensions, empty
 *    asm, unroll pragmas) have MSVC spellings or none there (winograd_tiles_internal.h,
 *    depthwise_rows_internal.h).
 * Elsewhere (arm64, ...) the x86 SIMD files compile to "unsupported" stubs. */
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(FD_GEMM_NO_SIMD) && \
    (defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER))
#define FD_GEMM_X86_SIMD 1
#else
#define FD_GEMM_X86_SIMD 0
#endif
#if FD_GEMM_X86_SIMD && (defined(__GNUC__) || defined(__clang__))
#define FD_X86_TARGET_ATTRIBUTES 1
#else
#define FD_X86_TARGET_ATTRIBUTES 0
#endif

/* AArch64 GCC/clang: the NEON kernels (gemm_neon.c). Advanced SIMD is baseline there, so they need
 * neither target attributes nor a run-time check; elsewhere gemm_neon.c compiles to stubs. */
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FD_GEMM_NO_SIMD)
#define FD_GEMM_NEON 1
#else
#define FD_GEMM_NEON 0
#endif

/* The x86 features each SIMD kernel is compiled for, one list per kernel family used twice: in its
 * target attribute (FD_TARGET_FEATURES) and in its run-time check (FD_CPU_SUPPORTS, the package's own
 * cpuid/xgetbv detection: runtime/cpu_features.h), so that a kernel never runs on a CPU lacking an
 * instruction it was allowed to use. Features GCC implies (avx512f enables avx2 and avx; avx2 enables
 * avx) are listed, and so checked, explicitly. */
#define FD_AVX2_FEATURES(X, SEP) X(avx) SEP X(avx2) SEP X(fma)
#define FD_AVX512_FEATURES(X, SEP) X(avx) SEP X(avx2) SEP X(fma) SEP X(avx512f)
#define FD_AVX512_DEPTHWISE_FEATURES(X, SEP) \
    X(avx) SEP X(avx2) SEP X(fma) SEP X(avx512f) SEP X(avx512vl) SEP X(avx512bw) SEP X(avx512dq)
#define FD_FEATURE_NAME(f) #f
#define FD_FEATURE_BIT(f) FD_CPU_##f
#if FD_X86_TARGET_ATTRIBUTES
/* "avx" "," "avx2" ... concatenates into one "avx,avx2,..." string (GCC and clang) */
#define FD_TARGET_FEATURES(list) __attribute__((target(list(FD_FEATURE_NAME, ","))))
#define FD_CPU_SUPPORTS(list) fd_cpu_supports_all(list(FD_FEATURE_BIT, |))
#else
/* MSVC: a whole file is compiled for /arch:AVX2 or /arch:AVX512 (setup.py, MSVC_ARCH_FLAGS), which lets
 * the compiler use more than the list (BMI/BMI2/LZCNT under /arch:AVX2; AVX512CD/VL/BW/DQ under
 * /arch:AVX512): the run-time check covers the flag's features too. */
#define FD_TARGET_FEATURES(list)
#define FD_MSVC_ARCH_AVX2 (FD_CPU_avx | FD_CPU_avx2 | FD_CPU_fma | FD_CPU_bmi | FD_CPU_bmi2 | FD_CPU_lzcnt)
#define FD_MSVC_ARCH_AVX512 \
    (FD_MSVC_ARCH_AVX2 | FD_CPU_avx512f | FD_CPU_avx512cd | FD_CPU_avx512vl | FD_CPU_avx512bw | FD_CPU_avx512dq)
#define FD_CPU_SUPPORTS(list) \
    fd_cpu_supports_all((list(FD_FEATURE_BIT, |)) | (((list(FD_FEATURE_BIT, |)) & FD_CPU_avx512f) ? \
                                                         FD_MSVC_ARCH_AVX512 : FD_MSVC_ARCH_AVX2))
#endif

/* The few compiler extensions the SIMD templates use, spelled for GCC/clang and for MSVC. */
#if defined(_MSC_VER) && !defined(__clang__)
#define FD_FORCE_INLINE __forceinline
#define FD_NOINLINE __declspec(noinline)
#define FD_PREFETCH_READ(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define FD_PREFETCH_WRITE(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
/* MSVC has no unroll pragma (it would warn C4068 and ignore it) */
#define FD_UNROLL_BY(n)
#define FD_KEEP_IN_REGISTER(pointer) ((void)0)
#else
#define FD_FORCE_INLINE inline __attribute__((always_inline))
#define FD_NOINLINE __attribute__((noinline))
#define FD_PREFETCH_READ(p) __builtin_prefetch((p), 0, 3)
#define FD_PREFETCH_WRITE(p) __builtin_prefetch((p), 1, 3)
/* #pragma GCC unroll n, usable in a macro */
#define FD_PRAGMA(text) _Pragma(#text)
#define FD_UNROLL_BY(n) FD_PRAGMA(GCC unroll n)
/* The pointer's value is unknown to the optimiser from here on: a pointer walked by a runtime step
 * (p += step per row) stays one register instead of becoming a precomputed offset per row, which the
 * compiler keeps on the stack and reloads for every use when the registers run out. */
#define FD_KEEP_IN_REGISTER(pointer) __asm__("" : "+r"(pointer))
#endif

/* Packed-B geometry, shared by every ISA (see gemm.h): panels of
 * FD_?PANEL columns; the last panel is only rounded up to FD_?GRANULE. */
#define FD_SPANEL 32
#define FD_SGRANULE 16
#define FD_DPANEL 16
#define FD_DGRANULE 8

/* Width of the panel starting at column n0 (n0 a multiple of the panel width): its elements per packed
 * row, or, for a last panel of at most FD_GEMM_DOT_MAX_N columns (packed transposed, gemm.h), its
 * columns. */
static inline size_t fd_gemm_panel_width(size_t N, size_t n0, size_t panel, size_t granule) {
    size_t rest = N - n0;
    if (rest >= panel) return panel;
    if (rest <= FD_GEMM_DOT_MAX_N) return rest;
    return (rest + granule - 1) / granule * granule;
}

/* Whether the panel starting at column n0 is a narrow last panel, packed transposed (gemm.h). */
static inline int fd_gemm_panel_is_dot(size_t N, size_t n0, size_t panel) {
    return N - n0 < panel && N - n0 <= FD_GEMM_DOT_MAX_N;
}

/* Rows of C to process per chunk (all panels of a chunk before the next one).
 * Panel-outer order streams A once per panel of 32/16 columns; when A is too big for
 * L2 but the whole packed B is small, cutting M into chunks whose A rows (~256 KiB)
 * stay in L2 next to B turns those A re-reads into L2 hits. The result is a multiple
 * of row_multiple so no chunk ends in a partial tile. Sizes assume >= 1 MiB L2. */
static inline size_t fd_gemm_row_chunk(size_t M, size_t N, size_t K, size_t elem_bytes, size_t row_multiple) {
    const size_t l2_a_budget = 256 * 1024, l2_b_budget = 512 * 1024;
    const size_t a_row_bytes = K * elem_bytes;
    size_t chunk;
    if (K * N * elem_bytes > l2_b_budget || M * a_row_bytes <= 2 * l2_a_budget) return M;
    chunk = l2_a_budget / a_row_bytes / row_multiple * row_multiple;
    return chunk < row_multiple ? row_multiple : chunk;
}

/* Taps per block of a B panel (the SIMD kernels' row tiles run a panel's taps in blocks, each block's
 * rows reused from L2 by every row tile before the next block): a panel of over `budget` bytes
 * (fd_gemm_panel_budget(); K rows of `row_bytes`: 128 for a 32-float or 16-double panel) is more than L2
 * keeps next to the A rows and C while the row tiles stream it again and again. Such a panel is cut at tap
 * boundaries into equal blocks of at most half the budget (one tap at least); the blocks after the first
 * add to C, so those C elements sum in another order than one block would. The cut depends on K, the
 * panel's width and the budget alone, never on M or a thread's share of the columns (cut at whole
 * panels), so every thread count gives the same bits. */
static inline size_t fd_gemm_tap_block(size_t T, size_t Kc, size_t row_bytes, size_t budget) {
    const size_t block_rows = budget / 2 / row_bytes;
    size_t per_block, blocks;
    if (budget == 0 || T * Kc * row_bytes <= budget) return T;
    per_block = Kc < block_rows ? block_rows / Kc : 1;
    blocks = (T + per_block - 1) / per_block;
    return (T + blocks - 1) / blocks;
}

/* Per-ISA entry points; same contract as fd_?gemm_indirect. */
typedef void (*fd_sgemm_indirect_fn)(size_t M, size_t N, size_t T, size_t Kc, const float *const *a_rows,
                                     const float *packed_b, const float *bias, float *const *c_rows,
                                     int flags);
typedef void (*fd_dgemm_indirect_fn)(size_t M, size_t N, size_t T, size_t Kc, const double *const *a_rows,
                                     const double *packed_b, const double *bias, double *const *c_rows,
                                     int flags);

/* What the kernel files of ISA `isa` (portable, avx2, avx512, neon) define: fd_gemm_<isa>_available(), 1 if
 * compiled in and the CPU/OS can run it, 0 if compiled in but not runnable here, -1 if not compiled in
 * (FD_GEMM_PORTABLE_STUBS), and the float and double entry points fd_?gemm_indirect_<isa>.
 * Declared by those files and by gemm_dispatch.c, for every ISA of its table. */
#define FD_GEMM_DECLARE_ISA(isa)                                                                              \
    int fd_gemm_##isa##_available(void);                                                                      \
    void fd_sgemm_indirect_##isa(size_t M, size_t N, size_t T, size_t Kc, const float *const *a_rows,        \
                                 const float *packed_b, const float *bias, float *const *c_rows, int flags); \
    void fd_dgemm_indirect_##isa(size_t M, size_t N, size_t T, size_t Kc, const double *const *a_rows,       \
                                 const double *packed_b, const double *bias, double *const *c_rows,           \
                                 int flags);

/* A build without an ISA's kernels (x86 SIMD off x86, NEON off AArch64, ...) still defines its entry points
 * (gemm_dispatch.c's table names them), never chosen (available() is -1: not compiled in) and running the
 * portable path. */
#define FD_GEMM_PORTABLE_STUBS(isa)                                                                           \
    FD_GEMM_DECLARE_ISA(portable)                                                                             \
    int fd_gemm_##isa##_available(void) { return -1; }                                                        \
    void fd_sgemm_indirect_##isa(size_t M, size_t N, size_t T, size_t Kc, const float *const *a_rows,        \
                                 const float *packed_b, const float *bias, float *const *c_rows, int flags) { \
        fd_sgemm_indirect_portable(M, N, T, Kc, a_rows, packed_b, bias, c_rows, flags);                       \
    }                                                                                                          \
    void fd_dgemm_indirect_##isa(size_t M, size_t N, size_t T, size_t Kc, const double *const *a_rows,       \
                                 const double *packed_b, const double *bias, double *const *c_rows,           \
                                 int flags) {                                                                 \
        fd_dgemm_indirect_portable(M, N, T, Kc, a_rows, packed_b, bias, c_rows, flags);                       \
    }

/* The kernel families beside the GEMM (Winograd transforms, depthwise rows) dispatch on the GEMM's ISA choice
 * through a table like gemm_dispatch.c's: indexed by the GEMM's ISA ids (FD_ISA_COUNT rows), a row per ISA the
 * family has files for (the others all zero), each row's `available` its files' fd_<family>_<isa>_available()
 * (1, 0 or -1 as for the GEMM: the CPU has every feature the file was compiled for, it has not, not compiled
 * in). FD_ISA_ROW_LOOKUP(fn, row_type, table) defines `static const row_type *fn(int isa)`: the row a call
 * runs when the GEMM's choice is `isa`, that ISA's own if this CPU can run it, else the nearest lower id's
 * that it can (the ids of one architecture ascend with the ISA, as the GEMM's best_supported_isa assumes:
 * avx512, then avx2, then portable; neon, then the x86 stubs (never runnable), then portable); the portable
 * row (id 0) always runs. FD_ISA_ROW_COMPILED(table, isa): the family has code of its own for `isa` in this
 * build. */
#define FD_ISA_ROW_RUNNABLE(row) ((row).available != NULL && (row).available() > 0)
#define FD_ISA_ROW_LOOKUP(fn, row_type, table)                                             \
    static const row_type *fn(int isa) {                                                   \
        if (isa < 0 || isa >= FD_ISA_COUNT) isa = FD_ISA_PORTABLE;                          \
        while (isa > FD_ISA_PORTABLE && !FD_ISA_ROW_RUNNABLE(table[isa])) isa--;            \
        return &table[isa];                                                                \
    }
#define FD_ISA_ROW_COMPILED(table, isa) \
    ((isa) >= 0 && (isa) < FD_ISA_COUNT && (table)[isa].available != NULL && (table)[isa].available() >= 0)

/* A run-time choice resolved once from the CPU (cpuid) and overridable by tests: -1 until resolved.
 * Resolution is idempotent, so threads racing to it store the same value; loads and stores are atomic
 * (acquire/release) where the compiler has them. Used for the GEMM's ISA (gemm_dispatch.c) and the
 * Winograd output stores (winograd_tiles.c). */
static inline int fd_choice_load(const int *choice) {
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_load_n(choice, __ATOMIC_ACQUIRE);
#else
    return *(const volatile int *)choice;
#endif
}

static inline void fd_choice_store(int *choice, int value) {
#if defined(__GNUC__) || defined(__clang__)
    __atomic_store_n(choice, value, __ATOMIC_RELEASE);
#else
    *(volatile int *)choice = value;
#endif
}

/* *choice, resolved by `resolve` first if it is still -1. */
static inline int fd_choice_get(int *choice, int (*resolve)(void)) {
    int value = fd_choice_load(choice);
    if (value < 0) {
        value = resolve();
        fd_choice_store(choice, value);
    }
    return value;
}

#endif
