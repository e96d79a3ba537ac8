/* The planar microkernel of a transposed convolution with few outputs per group (planar_rows.c), for
 * algorithms/deconv_planar.template.c: vectorised over output pixels, not channels.
 *
 * fd_?planar_rows computes the output tile rows [row_begin, row_end) of the N*Ho output rows by columns
 * [col_begin, col_end) (a multiple of sW, or Wo) by groups [group_begin, group_end) of a transposed
 * convolution. taps_y/taps_x are the stride-phase tap tables (fd_phase_taps); wp is the weight reordered
 * to (C_out, kH, kW, C_in/groups). `ring` is fd_planar_ring_bytes(geo, col_end - col_begin,
 * group_end - group_begin) bytes of workspace: the input rows the tile reads, their channels of those
 * groups transposed to (channels, columns) with zero columns around them, cached in a ring of
 * fd_planar_ring_rows(geo) rows.
 *
 * The dispatch follows the GEMM's ISA choice (fd_gemm_get_isa), as the depthwise kernels do. */
#ifndef FASTDECONV_PLANAR_ROWS_H
#define FASTDECONV_PLANAR_ROWS_H
#include "runtime/conv_geometry.h"

/* Columns of slack on the right of a ring row: a block of accumulators rounds its run of pixels up to
 * whole vectors, at most 16 lanes (AVX-512 floats), so it may read up to 15 columns past the run. */
#define FD_PLANAR_SLACK 16

/* Input rows a run of output rows of one image reads at once: every tap's row of one output row lies in
 * a window of ceil((kH-1)*dH / sH) + 1 input rows; one more lets the next output row's new rows in. */
static inline ptrdiff_t fd_planar_ring_rows(const fd_geometry *geo) {
    return fd_ceil_div((geo->kernel_h - 1) * geo->dilation_h, geo->stride_h) + 2;
}

/* Input columns a run of one phase's output pixels reads beyond the run's own (the spread of the taps'
 * column offsets, plus one for the rounding of the run's ends), and a ring row's width (columns) for a
 * tile `cols` output columns wide. */
static inline ptrdiff_t fd_planar_halo(const fd_geometry *geo) {
    return fd_ceil_div((geo->kernel_w - 1) * geo->dilation_w + geo->stride_w - 1, geo->stride_w) + 1;
}
static inline ptrdiff_t fd_planar_ring_width(const fd_geometry *geo, ptrdiff_t cols) {
    return fd_ceil_div(cols, geo->stride_w) + 2 + fd_planar_halo(geo) + FD_PLANAR_SLACK;
}
static inline size_t fd_planar_tags_bytes(const fd_geometry *geo) {
    return ((size_t)fd_planar_ring_rows(geo) * sizeof(ptrdiff_t) + 63) / 64 * 64;
}
static inline size_t fd_planar_ring_bytes(const fd_geometry *geo, ptrdiff_t cols, ptrdiff_t groups,
                                          size_t itemsize) {
    const ptrdiff_t channels = groups * (geo->in_channels / geo->groups);
    return fd_planar_tags_bytes(geo) + (size_t)fd_planar_ring_rows(geo) * (size_t)channels *
                                           (size_t)fd_planar_ring_width(geo, cols) * itemsize;
}

/* Outputs computed together over one load of the input vectors, by a clone with this many vector registers:
 * 8 outputs x 3 vectors of pixels with 32 (AVX-512, NEON), 4 x 3 with 16 (AVX2, SSE2). */
#define FD_PLANAR_BLOCK_OUTPUTS(registers) ((registers) >= 32 ? 8 : 4)
/* ... for the clone the GEMM's ISA choice (fd_gemm_get_isa) runs now: the automatic choice of algorithm
 * gives "planar" more outputs where it has the wider blocks. */
int fd_planar_block_outputs(void);

/* Taps of one output phase the kernel keeps pointers to on its stack: kH*kW at most. */
#define FD_PLANAR_MAX_TAPS 1024

int fd_splanar_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x, const float *x,
                    const float *wp, const float *bias, float *y, ptrdiff_t row_begin, ptrdiff_t row_end,
                    ptrdiff_t col_begin, ptrdiff_t col_end, ptrdiff_t group_begin, ptrdiff_t group_end,
                    int weights_finite, void *ring);
int fd_dplanar_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x, const double *x,
                    const double *wp, const double *bias, double *y, ptrdiff_t row_begin, ptrdiff_t row_end,
                    ptrdiff_t col_begin, ptrdiff_t col_end, ptrdiff_t group_begin, ptrdiff_t group_end,
                    int weights_finite, void *ring);

/* 1 if the kernel has a clone of its own for the GEMM's ISA id `isa` (gemm.h) in this build. */
int fd_planar_isa_compiled(int isa);

#endif
