/* The Winograd tile transforms of the "winograd" algorithm (src/algorithms/deconv_winograd.template.c),
 * float and double, compiled once per ISA (portable in winograd_tiles.c; AVX2, AVX-512 in a file each,
 * through function target attributes on GCC/clang, never -march, /arch: on MSVC) and dispatched at run time
 * by the GEMM's ISA choice (fd_gemm_get_isa), so FASTDECONV_ISA and fd_gemm_set_isa force every path here
 * too (src/kernels/winograd_tiles.c).
 *
 * One stride phase of a transposed convolution with dilation 1 is a stride-1 correlation over the
 * phase's output grid (jy, jx), jy < Jy, jx < Jx:
 *   y[jy, jx, o] = sum_{u<Ty, v<Tx} sum_i x[jy + y0 + u, jx + x0 + v, i] * g[u, v, i, o]
 * (zero outside the image). A tile is my x mx outputs starting at (jy, jx); with the 1-D transforms
 * fy = F(my, Ty) and fx = F(mx, Tx) (winograd_transforms.h, ny = my + Ty - 1 points, likewise nx):
 *   input   V[p, q]  = sum_{a<ny, b<nx} BTy[p, a] BTx[q, b] x[jy + y0 + a, jx + x0 + b]   (Cig-vectors)
 *   GEMM    M[p, q]  = V[p, q] @ U[p, q],   U[p, q] = sum_{u, v} Gy[p, u] Gx[q, v] g[u, v]   (packed once)
 *   output  y[jy + a, jx + b] = bias + sum_{p<ny, q<nx} ATy[a, p] ATx[b, q] M[p, q],   only a, b inside.
 * Both transforms are separable: one pass along the columns, then one along the rows, each a few
 * vector additions (and, for tiles beyond F(2, r), multiplications by small powers of two) per channel
 * vector. */
#ifndef FASTDECONV_WINOGRAD_TILES_H
#define FASTDECONV_WINOGRAD_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "winograd_transforms.h"

/* The tile per tap count T (a phase's taps along one axis): F(FD_WINOGRAD_M<T>, T), and F(J mod m, T)
 * for the last tile of an axis of J outputs (its points are a subset of the full tile's:
 * scripts/winograd_transforms.py). Chosen by measurement (README, algorithm table): F(3, 2) has the
 * direct sum's error and 16 multiplies per 9 outputs where the direct sum has 36; F(4, 2) and F(4, 3)
 * were 4-14x less accurate than the direct sum, F(3, 3) 2.6x. A build may override them
 * (-DFD_WINOGRAD_M2=2) to measure another choice. */
#ifndef FD_WINOGRAD_M1
#define FD_WINOGRAD_M1 3
#endif
#ifndef FD_WINOGRAD_M2
#define FD_WINOGRAD_M2 3
#endif
#ifndef FD_WINOGRAD_M3
#define FD_WINOGRAD_M3 2
#endif

/* F(m, taps), or NULL when not generated. */
static inline const fd_winograd_1d *fd_winograd_find(ptrdiff_t m, ptrdiff_t taps) {
    for (int i = 0; i < FD_WINOGRAD_TILE_COUNT; i++)
        if (fd_winograd_tiles[i].m == m && fd_winograd_tiles[i].r == taps) return &fd_winograd_tiles[i];
    return NULL;
}

/* The largest tile for T taps (1 <= T <= 3). */
static inline const fd_winograd_1d *fd_winograd_for_taps(ptrdiff_t taps) {
    return fd_winograd_find(taps == 1 ? FD_WINOGRAD_M1 : taps == 2 ? FD_WINOGRAD_M2 : FD_WINOGRAD_M3, taps);
}

/* Point j of the smaller tile `part` as a point of the full tile `full` (same taps). */
static inline ptrdiff_t fd_winograd_point(const fd_winograd_1d *part, const fd_winograd_1d *full, ptrdiff_t j) {
    return j < part->n - 1 ? j : full->n - 1;
}

/* One stride phase of one group, as the tile transforms see it. Distances are in elements. */
typedef struct {
    const fd_winograd_1d *fy, *fx; /* the transforms along rows and columns */
    const void *x;                 /* input: image 0, pixel (0, 0), the group's first channel */
    ptrdiff_t H, W;                /* input rows and columns */
    ptrdiff_t x_image, x_pixel;    /* between images (H*W*C_in) and pixels (C_in) */
    ptrdiff_t y0, x0;              /* tile output (jy, jx) reads input from (jy + y0, jx + x0) */
    ptrdiff_t channels;            /* Cig: the channels transformed */
    const void *zeros;             /* Cig zeros: the pixels outside the image */
    void *y;                       /* output: image 0, phase pixel (0, 0), the task's first channel */
    ptrdiff_t Jy, Jx;              /* the phase's rows and columns */
    ptrdiff_t y_image, y_row, y_col; /* between images (Ho*Wo*C_out), phase rows (sH*Wo*C_out), phase columns (sW*C_out) */
    ptrdiff_t cols;                /* output channels written */
    const void *bias;              /* cols values, or NULL */
    int stream;                    /* write whole output vectors with non-temporal stores (AVX-512 path) */
} fd_winograd_phase;

/* A tile: image n, first output (jy, jx) in phase coordinates; it may start before the phase (jy or jx
 * negative) or end past it: only its outputs inside the phase are written. */
typedef struct {
    ptrdiff_t n, jy, jx;
} fd_winograd_tile;

/* V[(point*count + t)*channels + i] for point = p*nx + q, tile t < count: the transformed inputs. */
void fd_swinograd_input(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, float *V);
void fd_dwinograd_input(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, double *V);

/* From M[(point*count + t)*cols + o] (the GEMMs' results), writes the tiles' outputs that lie inside
 * the phase (none for a tile wholly outside). Returns 1 if any written value is not finite (NaN or
 * infinite), else 0. Where ph->stream is set, the AVX-512 path writes each whole vector that starts on
 * a cache line with a non-temporal store (the line is not read first), then fences. */
int fd_swinograd_output(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, const float *M);
int fd_dwinograd_output(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, const double *M);

/* 1 if the transforms have a clone of their own for the GEMM's ISA id `isa` (gemm.h) in this build (an
 * ISA without one runs the portable clone: every non-x86 ISA; on AArch64 that clone is NEON code). */
int fd_winograd_isa_compiled(int isa);

/* Non-temporal output stores. A layer whose output (all images, bytes) is at least
 * fd_winograd_stream_min_bytes() sets ph->stream; SIZE_MAX means none. FD_WINOGRAD_STREAM_AUTO (the
 * default): every output on Intel CPUs with AVX-512 (only that path streams); on other CPUs with
 * AVX-512, outputs of at least a third of the last-level cache (CPUID's deterministic cache parameters),
 * none where that is unknown; none without AVX-512. Why: a streamed output is not in the cache for the
 * layer that reads it next, which then loads it from memory; that costs less than the stores save where
 * the output would not stay in the cache anyway. On the Intel CPU measured, streaming paid at every size
 * and with a reader too; on the AMD one it lost for an output of a quarter of the L3 and paid for one of
 * half, and a third lies between (measurements: asv_benches/NOTES.md). fd_winograd_set_stream_output
 * forces 0 (none) or 1 (every output) for tests and benchmarks, or restores AUTO; it returns -1 for any
 * other value. */
enum { FD_WINOGRAD_STREAM_AUTO = -1 };
size_t fd_winograd_stream_min_bytes(void);
int fd_winograd_set_stream_output(int mode);

#endif
