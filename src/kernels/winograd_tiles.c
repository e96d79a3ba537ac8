/* The Winograd tile transforms (winograd_tiles.h): their run-time ISA dispatch and their portable clone. The
 * SIMD clones are files of their own, one per ISA (winograd_tiles_avx2.c, winograd_tiles_avx512.c: target
 * attributes on GCC/clang, never -march; /arch: on MSVC), dispatched by the GEMM's ISA choice
 * (fd_gemm_get_isa) like the depthwise kernels (depthwise_rows.c), so FASTDECONV_ISA and fd_gemm_set_isa
 * force every path here too. See winograd_tiles.template.c. */
#include "winograd_tiles_internal.h"

/* On AArch64 this portable clone is already the NEON one: its 16-byte vectors are Advanced SIMD q registers,
 * baseline there (aarch64-linux-gnu-gcc 12 -O3: every FP multiply-add of the transforms a vector FMLA .4S/.2D,
 * none scalar), so the NEON GEMM path (FD_ISA_NEON) takes it: the table below has no neon row. */
#define FD_TARGET
#define FD_ISA portable
#define FD_WVEC_BYTES 16
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_WVEC_BYTES

int fd_winograd_portable_available(void) { return 1; }

/* Every ISA with a clone: the GEMM's ISA id (gemm.h) and the clone's suffix. A new ISA is its file
 * (winograd_tiles_<isa>.c, defining what FD_WINOGRAD_DECLARE_ISA declares) and its line here. */
#define FD_WINOGRAD_ISAS(ISA)      \
    ISA(FD_ISA_PORTABLE, portable) \
    ISA(FD_ISA_AVX2, avx2)         \
    ISA(FD_ISA_AVX512, avx512)

#define WINOGRAD_DECLARATIONS(id, isa) FD_WINOGRAD_DECLARE_ISA(isa)
FD_WINOGRAD_ISAS(WINOGRAD_DECLARATIONS)
#undef WINOGRAD_DECLARATIONS

typedef struct {
    int (*available)(void);
    void (*sinput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, float *);
    int (*soutput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, const float *);
    void (*dinput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, double *);
    int (*doutput)(const fd_winograd_phase *, const fd_winograd_tile *, ptrdiff_t, const double *);
} winograd_clone;

/* Indexed by the GEMM's ISA id; an ISA without a clone (neon) has an empty row and runs the portable one
 * (FD_ISA_ROW_LOOKUP, gemm_internal.h). */
#define WINOGRAD_CLONE(id, isa)                                                                                 \
    [id] = {fd_winograd_##isa##_available, fd_swinograd_input_##isa, fd_swinograd_output_##isa,                 \
            fd_dwinograd_input_##isa, fd_dwinograd_output_##isa},
static const winograd_clone winograd_clones[FD_ISA_COUNT] = {FD_WINOGRAD_ISAS(WINOGRAD_CLONE)};
#undef WINOGRAD_CLONE

FD_ISA_ROW_LOOKUP(winograd_clone_for, winograd_clone, winograd_clones)

int fd_winograd_isa_compiled(int isa) { return FD_ISA_ROW_COMPILED(winograd_clones, isa); }

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
    if (fd_winograd_avx512_available() <= 0) return INT_MAX;   /* only the AVX-512 path streams */
    if (fd_cpu_vendor() == FD_CPU_VENDOR_INTEL) return 0;
    const long long third = fd_cpu_cache_kib(3) / 3;
    return third > 0 && third < INT_MAX ? (int)third : INT_MAX;
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
