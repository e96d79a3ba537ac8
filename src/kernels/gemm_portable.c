/* Indirect GEMM: runtime ISA dispatch, B packing and the portable C path.
 * The layout and the math are documented in gemm.h. */
#include <stdlib.h>
#include <string.h>

#include "gemm_internal.h"
#include "runtime/templating.h"

/* ---------------------------------------------------------------- dispatch */

/* -1 until resolved (fd_choice_get). */
static int fd_gemm_isa_state = -1;

const char *fd_gemm_isa_name(int isa) {
    switch (isa) {
    case FD_ISA_PORTABLE: return "portable";
    case FD_ISA_AVX2: return "avx2";
    case FD_ISA_AVX512: return "avx512";
    default: return "unknown";
    }
}

int fd_gemm_isa_supported(int isa) {
    switch (isa) {
    case FD_ISA_PORTABLE: return 1;
    case FD_ISA_AVX2: return fd_gemm_avx2_available();
    case FD_ISA_AVX512: return fd_gemm_avx512_available();
    default: return 0;
    }
}

static int best_supported_isa(void) {
    if (fd_gemm_isa_supported(FD_ISA_AVX512)) return FD_ISA_AVX512;
    if (fd_gemm_isa_supported(FD_ISA_AVX2)) return FD_ISA_AVX2;
    return FD_ISA_PORTABLE;
}

int fd_gemm_get_isa(void) { return fd_choice_get(&fd_gemm_isa_state, best_supported_isa); }

int fd_gemm_set_isa(int isa) {
    if (!fd_gemm_isa_supported(isa)) return -1;
    fd_choice_store(&fd_gemm_isa_state, isa);
    return 0;
}

/* The public entry of one element type: the ISA path chosen at run time. */
#define FD_GEMM_DISPATCH(p, real)                                                                              \
    void fd_##p##gemm_indirect(size_t M, size_t N, size_t T, size_t Kc, const real *const *a_rows,             \
                               const real *packed_b, const real *bias, real *const *c_rows, int flags) {        \
        if (M == 0 || N == 0) return;                                                                          \
        switch (fd_gemm_get_isa()) {                                                                           \
        case FD_ISA_AVX512: fd_##p##gemm_indirect_avx512(M, N, T, Kc, a_rows, packed_b, bias, c_rows, flags); break; \
        case FD_ISA_AVX2: fd_##p##gemm_indirect_avx2(M, N, T, Kc, a_rows, packed_b, bias, c_rows, flags); break;     \
        default: fd_##p##gemm_indirect_portable(M, N, T, Kc, a_rows, packed_b, bias, c_rows, flags); break;          \
        }                                                                                                      \
    }

FD_GEMM_DISPATCH(s, float)
FD_GEMM_DISPATCH(d, double)

/* ------------------------------------------------- packing + portable path */

/* GCC's loop vectoriser would rather vectorise the k loop as a reduction (with
 * strided B gathers), which is several times slower; keep it to straight-line SLP
 * vectorisation across the fully unrolled tile. Other compilers: plain loops. */
#if defined(__GNUC__) && !defined(__clang__)
#define FD_PORTABLE_TILE_ATTR __attribute__((optimize("no-tree-loop-vectorize")))
#define FD_PORTABLE_UNROLL _Pragma("GCC unroll 16")
#else
#define FD_PORTABLE_TILE_ATTR
#define FD_PORTABLE_UNROLL
#endif

/* Portable register tile: PORTABLE_MR rows x PORTABLE_NR columns of plain C
 * arrays, sized so the accumulators fit the 16 SSE2 registers (8 xmm for acc,
 * the rest for B and the broadcast) and the compiler vectorises the column loop. */
#define FD_REAL float
#define FD_PREFIX s
#define FD_PANEL FD_SPANEL
#define FD_GRANULE FD_SGRANULE
#define FD_PORTABLE_MR 4
#define FD_PORTABLE_NR 8
#include "gemm_portable.template.c"
#undef FD_REAL
#undef FD_PREFIX
#undef FD_PANEL
#undef FD_GRANULE
#undef FD_PORTABLE_MR
#undef FD_PORTABLE_NR

#define FD_REAL double
#define FD_PREFIX d
#define FD_PANEL FD_DPANEL
#define FD_GRANULE FD_DGRANULE
#define FD_PORTABLE_MR 4
#define FD_PORTABLE_NR 4
#include "gemm_portable.template.c"
#undef FD_REAL
#undef FD_PREFIX
#undef FD_PANEL
#undef FD_GRANULE
#undef FD_PORTABLE_MR
#undef FD_PORTABLE_NR
