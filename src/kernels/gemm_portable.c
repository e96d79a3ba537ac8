/* The indirect GEMM's B packing (fd_?gemm_pack_b, fd_?gemm_pack_b_rows, fd_?gemm_packed_size) and its
 * portable path (plain C, any CPU), instantiated from gemm_portable.template.c for float and double.
 * The layout and the math are documented in gemm.h; gemm_dispatch.c chooses between this path and the
 * SIMD ones. */
#include <string.h>

#include "gemm_internal.h"
#include "runtime/templating.h"

FD_GEMM_DECLARE_ISA(portable)

int fd_gemm_portable_available(void) { return 1; }

/* GCC's loop vectoriser would rather vectorise the k loop as a reduction (with
 * strided B gathers), which is several times slower; keep it to straight-line SLP
 * vectorisation across the fully unrolled tile. Every loop over the accumulators has
 * a constant trip count and is unrolled (gemm_portable.template.c says why); MSVC has no
 * unroll pragma (FD_UNROLL_BY is empty there) and unrolls what it will. */
#if defined(__GNUC__) && !defined(__clang__)
#define FD_PORTABLE_TILE_ATTR __attribute__((optimize("no-tree-loop-vectorize")))
#else
#define FD_PORTABLE_TILE_ATTR
#endif
#define FD_PORTABLE_UNROLL FD_UNROLL_BY(32)

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
