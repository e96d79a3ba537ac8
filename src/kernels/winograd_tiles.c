/* The Winograd tile transforms (winograd_tiles.h), float and double, compiled once per ISA through
 * function target attributes (never -march) and dispatched by the GEMM's ISA choice (fd_gemm_get_isa),
 * like the depthwise kernels (depthwise_rows.c). See winograd_tiles.template.c. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "runtime/conv_geometry.h"
#include "gemm_internal.h"
#include "runtime/templating.h"
#include "winograd_tiles.h"

/* The SIMD clones need per-function target attributes (GCC, clang); MSVC builds the portable one only
 * (gemm_internal.h), and fd_winograd_isa_compiled says so. */
#define FD_WINOGRAD_X86 FD_X86_TARGET_ATTRIBUTES
#if FD_WINOGRAD_X86
#include <immintrin.h>
#endif

#define FD_ISA_FN(name) FD_CAT(FD_FN(name), FD_CAT(_, FD_ISA))
#define FD_TEMPLATE "kernels/winograd_tiles.template.c"

/* GCC and clang: a generic vector type per ISA; elsewhere one element at a time. */
#if defined(__GNUC__) || defined(__clang__)
#define FD_WINOGRAD_VECTORS 1
#define FD_WINLINE static inline __attribute__((always_inline)) FD_TARGET
/* the tile loops (at most FD_WINOGRAD_MAX_POINTS long) unrolled, so that constant tables fold */
#define FD_UNROLL _Pragma("GCC unroll 8")
#else
#define FD_UNROLL
#define FD_WINOGRAD_VECTORS 0
#define FD_WINLINE static inline
#endif

/* On AArch64 this portable clone is already the NEON one: its 16-byte vectors are Advanced SIMD q registers,
 * baseline there (aarch64-linux-gnu-gcc 12 -O3: every FP multiply-add of the transforms a vector FMLA .4S/.2D,
 * none scalar), so the NEON GEMM path (FD_ISA_NEON) takes it through the fallback of the table below. */
#define FD_TARGET
#define FD_ISA portable
#define FD_WVEC_BYTES 16
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_WVEC_BYTES

#if FD_WINOGRAD_X86
#define FD_TARGET FD_TARGET_FEATURES(FD_AVX2_FEATURES)
#define FD_ISA avx2
#define FD_WVEC_BYTES 32
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_WVEC_BYTES

#define FD_TARGET FD_TARGET_FEATURES(FD_AVX512_FEATURES)
#define FD_ISA avx512
#define FD_WVEC_BYTES 64
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_WVEC_BYTES

/* A clone runs only where the CPU has every feature it was compiled for (the GEMM's choice checks the
 * same lists; this keeps the transforms safe on their own). */
static int winograd_avx512_ok(void) { return FD_CPU_SUPPORTS(FD_AVX512_FEATURES); }
static int winograd_avx2_ok(void) { return FD_CPU_SUPPORTS(FD_AVX2_FEATURES); }
#endif
static int winograd_portable_ok(void) { return 1; }

/* The clones, in the order in which they stand in for one another: the GEMM's ISA choice (gemm.h) takes
 * its own clone, or the first one after it in this table whose features this CPU has; an ISA without a
 * clone here takes the portable one, which is last. A new ISA is its instantiation above and its line
 * here. */
typedef struct {
    int isa; /* the GEMM's ISA id */
    int (*ok)(void);
    void (*sinput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, float *);
    int (*soutput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, const float *);
    void (*dinput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, double *);
    int (*doutput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, const double *);
} winograd_clone;

#define WINOGRAD_CLONE(id, isa)                                                                             \
    {id, winograd_##isa##_ok, fd_swinograd_input_##isa, fd_swinograd_output_##isa, fd_dwinograd_input_##isa, \
     fd_dwinograd_output_##isa}
static const winograd_clone winograd_clones[] = {
#if FD_WINOGRAD_X86
    WINOGRAD_CLONE(FD_ISA_AVX512, avx512),
    WINOGRAD_CLONE(FD_ISA_AVX2, avx2),
#endif
    WINOGRAD_CLONE(FD_ISA_PORTABLE, portable),
};
#undef WINOGRAD_CLONE

int fd_winograd_isa_compiled(int isa) {
    for (size_t i = 0; i < sizeof(winograd_clones) / sizeof(winograd_clones[0]); i++)
        if (winograd_clones[i].isa == isa) return 1;
    return 0;
}

static const winograd_clone *winograd_clone_for(int isa) {
    const size_t last = sizeof(winograd_clones) / sizeof(winograd_clones[0]) - 1;
    size_t i = 0;
    while (i < last && winograd_clones[i].isa != isa) i++;
    while (i < last && !winograd_clones[i].ok()) i++;
    return &winograd_clones[i];
}

#define WINOGRAD_DISPATCH(prefix, real)                                                                     \
    void fd_##prefix##winograd_input(const fd_winograd_phase *ph, const fd_winograd_tile *tiles,             \
                                     ptrdiff_t count, real *V) {                                            \
        winograd_clone_for(fd_gemm_get_isa())->prefix##input(ph, tiles, count, V);                          \
    }                                                                                                       \
    int fd_##prefix##winograd_output(const fd_winograd_phase *ph, const fd_winograd_tile *tiles,             \
                                     ptrdiff_t count, const real *M) {                                      \
        return winograd_clone_for(fd_gemm_get_isa())->prefix##output(ph, tiles, count, M);                  \
    }

/* Non-temporal output stores (winograd_tiles.h). The mode: FD_WINOGRAD_STREAM_AUTO, 0 or 1, as set by
 * fd_winograd_set_stream_output; the automatic threshold in KiB: -1 until resolved (fd_choice_get), then
 * a size, or INT_MAX for none. */
static int fd_winograd_stream_mode = FD_WINOGRAD_STREAM_AUTO;
static int fd_winograd_stream_auto_kib = -1;

static int stream_auto_kib(void) {
#if FD_WINOGRAD_X86
    if (!winograd_avx512_ok()) return INT_MAX;   /* only the AVX-512 path streams */
    if (fd_cpu_vendor() == FD_CPU_VENDOR_INTEL) return 0;
    const long long third = fd_cpu_l3_kib() / 3;
    return third > 0 && third < INT_MAX ? (int)third : INT_MAX;
#else
    return INT_MAX;
#endif
}

size_t fd_winograd_stream_min_bytes(void) {
    const int mode = fd_choice_load(&fd_winograd_stream_mode);
    const int kib = mode == 1 ? 0 : mode == 0 ? INT_MAX : fd_choice_get(&fd_winograd_stream_auto_kib, stream_auto_kib);
    return kib == INT_MAX ? SIZE_MAX : (size_t)kib * 1024;
}

int fd_winograd_set_stream_output(int mode) {
    if (mode != 0 && mode != 1 && mode != FD_WINOGRAD_STREAM_AUTO) return -1;
    fd_choice_store(&fd_winograd_stream_mode, mode);
    return 0;
}

WINOGRAD_DISPATCH(s, float)
WINOGRAD_DISPATCH(d, double)
