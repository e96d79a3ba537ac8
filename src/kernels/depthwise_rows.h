/* The depthwise microkernels (depthwise_rows.c, depthwise_rows_<isa>.c), dispatched by the GEMM's ISA choice; no workspace.
 *
 * fd_?depthwise_rows: rows [row_begin, row_end) of the N*Ho output rows of a transposed convolution
 * with groups == C_in. wr is the weight reordered to (kH, kW, C_out); taps_y/taps_x are the
 * stride-phase tap tables (fd_phase_taps).
 *
 * fd_?conv_depthwise_rows: output channels [channel_begin, channel_end) of the same rows of a convolution
 * with few channels per group (groups == C_in included); wr is the weight reordered to (kH, kW, C_in/groups,
 * C_out). A channel's sum does not depend on the range it is computed in. */
#ifndef FASTDECONV_DEPTHWISE_ROWS_H
#define FASTDECONV_DEPTHWISE_ROWS_H
#include "runtime/conv_geometry.h"

int fd_sdepthwise_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x, const float *x,
                       const float *wr, const float *bias, float *y, ptrdiff_t row_begin, ptrdiff_t row_end);
int fd_ddepthwise_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x, const double *x,
                       const double *wr, const double *bias, double *y, ptrdiff_t row_begin, ptrdiff_t row_end);
int fd_sconv_depthwise_rows(const fd_geometry *geo, const float *x, const float *wr, const float *bias, float *y,
                            ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t channel_begin, ptrdiff_t channel_end);
int fd_dconv_depthwise_rows(const fd_geometry *geo, const double *x, const double *wr, const double *bias, double *y,
                            ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t channel_begin, ptrdiff_t channel_end);

/* 1 if the kernels have a clone of their own for the GEMM's ISA id `isa` (gemm.h) in this build (an ISA
 * without one, or whose files are not compiled in, runs the portable clone). */
int fd_depthwise_isa_compiled(int isa);

#endif
