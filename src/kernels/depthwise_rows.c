/* The depthwise microkernels (the rows of a depthwise transposed convolution, and of a depthwise
 * convolution), float and double: their run-time ISA dispatch and their portable clone. The SIMD clones are
 * files of their own, one per ISA (depthwise_rows_avx2.c, depthwise_rows_avx512.c: target attributes on
 * GCC/clang, never -march; /arch: on MSVC; depthwise_rows_neon.c), dispatched by the same ISA choice as the
 * GEMM (fd_gemm_get_isa), so FASTDECONV_ISA / fd_gemm_set_isa force every path here too. See
 * depthwise_rows.template.c; the algorithms around them are algorithms/deconv_depthwise.template.c
 * and algorithms/conv_depthwise.template.c. */
#include "depthwise_rows_internal.h"

#define FD_TARGET
#define FD_ISA portable
#define FD_DW_SIMD 0
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_DW_SIMD

int fd_depthwise_portable_available(void) { return 1; }

/* Every ISA with a clone: the GEMM's ISA id (gemm.h) and the clone's suffix. A new ISA is its file
 * (depthwise_rows_<isa>.c, defining what FD_DEPTHWISE_DECLARE_ISA declares) and its line here. */
#define FD_DEPTHWISE_ISAS(ISA)     \
    ISA(FD_ISA_PORTABLE, portable) \
    ISA(FD_ISA_AVX2, avx2)         \
    ISA(FD_ISA_AVX512, avx512)     \
    ISA(FD_ISA_NEON, neon)

#define DEPTHWISE_DECLARATIONS(id, isa) FD_DEPTHWISE_DECLARE_ISA(isa)
FD_DEPTHWISE_ISAS(DEPTHWISE_DECLARATIONS)
#undef DEPTHWISE_DECLARATIONS

typedef struct {
    int (*available)(void);
    int (*srows)(const fd_geometry *, const ptrdiff_t *, const ptrdiff_t *, const float *, const float *,
                 const float *, float *, ptrdiff_t, ptrdiff_t);
    int (*drows)(const fd_geometry *, const ptrdiff_t *, const ptrdiff_t *, const double *, const double *,
                 const double *, double *, ptrdiff_t, ptrdiff_t);
    int (*sconv)(const fd_geometry *, const float *, const float *, const float *, float *, ptrdiff_t, ptrdiff_t,
                 ptrdiff_t, ptrdiff_t);
    int (*dconv)(const fd_geometry *, const double *, const double *, const double *, double *, ptrdiff_t,
                 ptrdiff_t, ptrdiff_t, ptrdiff_t);
} depthwise_clone;

/* Indexed by the GEMM's ISA id: the clone for the GEMM's choice if this CPU has every feature its file was
 * compiled for, else the nearest lower one that it has (FD_ISA_ROW_LOOKUP, gemm_internal.h): the AVX-512 clones
 * need more than the AVX-512 GEMM (vl, bw, dq), so on a CPU with avx512f alone they fall back to the AVX2 clone
 * (or the portable one). */
#define DEPTHWISE_CLONE(id, isa)                                                                              \
    [id] = {fd_depthwise_##isa##_available, fd_sdepthwise_rows_##isa, fd_ddepthwise_rows_##isa,                 \
            fd_sconv_depthwise_rows_##isa, fd_dconv_depthwise_rows_##isa},
static const depthwise_clone depthwise_clones[FD_ISA_COUNT] = {FD_DEPTHWISE_ISAS(DEPTHWISE_CLONE)};
#undef DEPTHWISE_CLONE

FD_ISA_ROW_LOOKUP(depthwise_clone_for, depthwise_clone, depthwise_clones)

int fd_depthwise_isa_compiled(int isa) { return FD_ISA_ROW_COMPILED(depthwise_clones, isa); }

#define FD_DEPTHWISE_DISPATCH(prefix, real)                                                                     \
    int fd_##prefix##depthwise_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,   \
                                    const real *x, const real *wr, const real *bias, real *y,                   \
                                    ptrdiff_t row_begin, ptrdiff_t row_end) {                                   \
        return depthwise_clone_for(fd_gemm_get_isa())->prefix##rows(geo, taps_y, taps_x, x, wr, bias, y,        \
                                                                    row_begin, row_end);                        \
    }                                                                                                           \
    int fd_##prefix##conv_depthwise_rows(const fd_geometry *geo, const real *x, const real *wr,                 \
                                         const real *bias, real *y, ptrdiff_t row_begin, ptrdiff_t row_end,     \
                                         ptrdiff_t channel_begin, ptrdiff_t channel_end) {                      \
        return depthwise_clone_for(fd_gemm_get_isa())->prefix##conv(geo, x, wr, bias, y, row_begin, row_end,     \
                                                                    channel_begin, channel_end);                \
    }

FD_DEPTHWISE_DISPATCH(s, float)
FD_DEPTHWISE_DISPATCH(d, double)
