/* Internal glue between the Winograd transforms' run-time dispatch and portable clone (winograd_tiles.c) and
 * their per-ISA files (winograd_tiles_avx2.c, winograd_tiles_avx512.c), which all instantiate
 * winograd_tiles.template.c: one clone per ISA (FD_ISA, FD_TARGET, FD_WVEC_BYTES) and element type.
 * Not part of the public API. */
#ifndef FASTDECONV_WINOGRAD_TILES_INTERNAL_H
#define FASTDECONV_WINOGRAD_TILES_INTERNAL_H

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "gemm_internal.h"
#include "runtime/conv_geometry.h"
#include "runtime/templating.h"
#include "winograd_tiles.h"

#define FD_ISA_FN(name) FD_CAT(FD_FN(name), FD_CAT(_, FD_ISA))
#define FD_TEMPLATE "kernels/winograd_tiles.template.c"

/* How a clone holds one vector of channels (winograd_tiles.template.c's WV):
 *  - GCC and clang: a generic vector of FD_WVEC_BYTES (one zmm, ymm or xmm register; on AArch64 a NEON q
 *    register) and its operators, with the tile loops unrolled so that constant tables fold.
 *  - MSVC (no vector extensions): in the SIMD files their ISA's intrinsic vector type and operations, which
 *    each file names per element type (FD_WV_TYPE_s, FD_WV_SET1_s, FD_WV_ADD_s, FD_WV_SUB_s, FD_WV_MUL_s,
 *    FD_WV_FMA_s, FD_WV_STREAM_s for AVX-512, and the same with _d); in the portable clone one element at a
 *    time.
 * A build with -DFD_WINOGRAD_INTRINSICS takes the MSVC way on GCC/clang too (tests/c/build.sh runs it), so
 * that the intrinsic code MSVC compiles is tested here. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(FD_WINOGRAD_INTRINSICS)
#define FD_WINOGRAD_VECTORS 1
#else
#define FD_WINOGRAD_VECTORS 0
#endif
/* the tile loops (at most FD_WINOGRAD_MAX_POINTS long) unrolled, so that constant tables fold (MSVC has no
 * unroll pragma: its own heuristics decide) */
#if defined(__GNUC__) || defined(__clang__)
#define FD_UNROLL _Pragma("GCC unroll 8")
#else
#define FD_UNROLL
#endif
#define FD_WINLINE static FD_FORCE_INLINE FD_TARGET

/* What the files of ISA `isa` (portable, avx2, avx512) define: fd_winograd_<isa>_available() (1, 0 or -1:
 * gemm_internal.h's FD_ISA_ROW_LOOKUP) and the float and double transforms (winograd_tiles.h's contract). */
#define FD_WINOGRAD_DECLARE_ISA(isa)                                                                           \
    int fd_winograd_##isa##_available(void);                                                                   \
    void fd_swinograd_input_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  float *V);                                                                   \
    int fd_swinograd_output_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  const float *M);                                                             \
    void fd_dwinograd_input_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  double *V);                                                                  \
    int fd_dwinograd_output_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  const double *M);

/* A build without an ISA's clone (x86 SIMD off x86-64) still defines its entry points (winograd_tiles.c's
 * table names them), never chosen (available() is -1) and running the portable clone. */
#define FD_WINOGRAD_PORTABLE_STUBS(isa)                                                                        \
    FD_WINOGRAD_DECLARE_ISA(portable)                                                                          \
    int fd_winograd_##isa##_available(void) { return -1; }                                                     \
    void fd_swinograd_input_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  float *V) {                                                                  \
        fd_swinograd_input_portable(ph, tiles, count, V);                                                      \
    }                                                                                                          \
    int fd_swinograd_output_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  const float *M) {                                                            \
        return fd_swinograd_output_portable(ph, tiles, count, M);                                              \
    }                                                                                                          \
    void fd_dwinograd_input_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  double *V) {                                                                 \
        fd_dwinograd_input_portable(ph, tiles, count, V);                                                      \
    }                                                                                                          \
    int fd_dwinograd_output_##isa(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, \
                                  const double *M) {                                                           \
        return fd_dwinograd_output_portable(ph, tiles, count, M);                                              \
    }

#endif
