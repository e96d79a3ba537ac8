/* Internal glue between the depthwise kernels' run-time dispatch and portable clone (depthwise_rows.c) and
 * their per-ISA files (depthwise_rows_avx2.c, depthwise_rows_avx512.c, depthwise_rows_neon.c), which all
 * instantiate depthwise_rows.template.c: one clone per ISA (FD_ISA, FD_TARGET, FD_DW_SIMD) and element type.
 * Not part of the public API. */
#ifndef FASTDECONV_DEPTHWISE_ROWS_INTERNAL_H
#define FASTDECONV_DEPTHWISE_ROWS_INTERNAL_H

#include <stdint.h>

#include "depthwise_rows.h"
#include "gemm_internal.h"
#include "runtime/conv_geometry.h"
#include "runtime/templating.h"

#define FD_ISA_FN(name) FD_CAT(FD_FN(name), FD_CAT(_, FD_ISA))
#define FD_TEMPLATE "kernels/depthwise_rows.template.c"

/* The SIMD clones' register hints (depthwise_rows.template.c): FD_DW_KEEP(v) keeps vector v in a register and
 * FD_DW_KEEP_PTR(p) pointer p in a general register, each through an empty asm the compiler cannot see
 * through (GCC/clang; each SIMD file spells FD_DW_KEEP with its ISA's register class). MSVC has no such
 * asm: there they are no-ops, and the unroll pragmas (FD_UNROLL_BY) are none too. */
#if defined(__GNUC__) || defined(__clang__)
#define FD_DW_ASM_KEEP(constraint, v) __asm__("" : constraint(v))
#else
#define FD_DW_ASM_KEEP(constraint, v) ((void)0)
#endif
#define FD_DW_KEEP_PTR(p) FD_DW_ASM_KEEP("+r", p)

/* What the files of ISA `isa` (portable, avx2, avx512, neon) define: fd_depthwise_<isa>_available() (1, 0 or
 * -1: gemm_internal.h's FD_ISA_ROW_LOOKUP) and the float and double kernels (depthwise_rows.h's contract). */
#define FD_DEPTHWISE_DECLARE_ISA(isa)                                                                            \
    int fd_depthwise_##isa##_available(void);                                                                    \
    int fd_sdepthwise_rows_##isa(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,       \
                                 const float *x, const float *wr, const float *bias, float *y,                   \
                                 ptrdiff_t row_begin, ptrdiff_t row_end);                                        \
    int fd_ddepthwise_rows_##isa(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,       \
                                 const double *x, const double *wr, const double *bias, double *y,               \
                                 ptrdiff_t row_begin, ptrdiff_t row_end);                                        \
    int fd_sconv_depthwise_rows_##isa(const fd_geometry *geo, const float *x, const float *wr, const float *bias, \
                                      float *y, ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t channel_begin, \
                                      ptrdiff_t channel_end);                                                    \
    int fd_dconv_depthwise_rows_##isa(const fd_geometry *geo, const double *x, const double *wr,                 \
                                      const double *bias, double *y, ptrdiff_t row_begin, ptrdiff_t row_end,     \
                                      ptrdiff_t channel_begin, ptrdiff_t channel_end);

/* A build without an ISA's clone (x86 SIMD off x86-64, NEON off AArch64) still defines its entry points
 * (depthwise_rows.c's table names them), never chosen (available() is -1) and running the portable clone. */
#define FD_DEPTHWISE_PORTABLE_STUBS(isa)                                                                         \
    FD_DEPTHWISE_DECLARE_ISA(portable)                                                                           \
    int fd_depthwise_##isa##_available(void) { return -1; }                                                      \
    int fd_sdepthwise_rows_##isa(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,       \
                                 const float *x, const float *wr, const float *bias, float *y,                   \
                                 ptrdiff_t row_begin, ptrdiff_t row_end) {                                       \
        return fd_sdepthwise_rows_portable(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end);            \
    }                                                                                                            \
    int fd_ddepthwise_rows_##isa(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,       \
                                 const double *x, const double *wr, const double *bias, double *y,               \
                                 ptrdiff_t row_begin, ptrdiff_t row_end) {                                       \
        return fd_ddepthwise_rows_portable(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end);            \
    }                                                                                                            \
    int fd_sconv_depthwise_rows_##isa(const fd_geometry *geo, const float *x, const float *wr, const float *bias, \
                                      float *y, ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t channel_begin, \
                                      ptrdiff_t channel_end) {                                                   \
        return fd_sconv_depthwise_rows_portable(geo, x, wr, bias, y, row_begin, row_end, channel_begin,          \
                                                channel_end);                                                    \
    }                                                                                                            \
    int fd_dconv_depthwise_rows_##isa(const fd_geometry *geo, const double *x, const double *wr,                 \
                                      const double *bias, double *y, ptrdiff_t row_begin, ptrdiff_t row_end,     \
                                      ptrdiff_t channel_begin, ptrdiff_t channel_end) {                          \
        return fd_dconv_depthwise_rows_portable(geo, x, wr, bias, y, row_begin, row_end, channel_begin,          \
                                                channel_end);                                                    \
    }

#endif
