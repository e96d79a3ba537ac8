/* Every C kernel the Cython shim calls. Each works on a band of output rows so that
 * the caller can run disjoint bands on different threads; each returns FD_OK or a
 * negative status. Workspace is owned by the caller; the sizes are stated per kernel. */
#ifndef FASTDECONV_KERNELS_H
#define FASTDECONV_KERNELS_H
#include "conv_geometry.h"

/* GEMM + col2im transposed convolution (deconv_col2im.template.c).
 * packed_w[g]: the (Cig, kH*kW*Cog) group slice packed with fd_?gemm_pack_b.
 * Workspace: col holds col_pixels * kH*kW*Cog elements (col_pixels >= in_w);
 * a_rows and c_rows hold col_pixels pointers each. */
int fd_sdeconv_col2im_band(const fd_geometry *geo, const float *x, const float *const *packed_w,
                           const float *bias, float *y, ptrdiff_t n, ptrdiff_t oy_begin, ptrdiff_t oy_end,
                           float *col, ptrdiff_t col_pixels, const float **a_rows, float **c_rows);
int fd_ddeconv_col2im_band(const fd_geometry *geo, const double *x, const double *const *packed_w,
                           const double *bias, double *y, ptrdiff_t n, ptrdiff_t oy_begin, ptrdiff_t oy_end,
                           double *col, ptrdiff_t col_pixels, const double **a_rows, double **c_rows);

/* im2col + GEMM convolution (conv_im2col.template.c).
 * packed_w[g]: the group's (kH*kW*Cig, Cog) matrix (weight slice transposed), packed.
 * zeros: at least Cig zero elements. Workspace: a_rows holds chunk_pixels*kH*kW
 * pointers, c_rows chunk_pixels pointers. */
int fd_sconv_im2col_band(const fd_geometry *geo, const float *x, const float *const *packed_w,
                         const float *bias, float *y, ptrdiff_t n, ptrdiff_t oy_begin, ptrdiff_t oy_end,
                         const float *zeros, ptrdiff_t chunk_pixels, const float **a_rows, float **c_rows);
int fd_dconv_im2col_band(const fd_geometry *geo, const double *x, const double *const *packed_w,
                         const double *bias, double *y, ptrdiff_t n, ptrdiff_t oy_begin, ptrdiff_t oy_end,
                         const double *zeros, ptrdiff_t chunk_pixels, const double **a_rows, double **c_rows);

/* Stride-phase (sub-pixel) transposed convolution (deconv_phase.template.c).
 * taps_y: sH x (1 + kH) (count, then the ky of each row phase); taps_x: sW x (1 + kW).
 * packed_w[(g*sH + ry)*sW + rx]: the (Ty*Tx*Cig, Cog) sub-kernel, packed.
 * Rows [row_begin, row_end) of phase ry, counted across the batch, and output channels
 * [col_begin, col_end) of each group (col_begin a multiple of FD_GEMM_COLUMN_ALIGN).
 * zeros: at least Cig zero elements. Workspace: a_rows chunk_pixels*kH*kW pointers,
 * c_rows chunk_pixels pointers. */
int fd_sdeconv_phase_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                          const float *x, const float *const *packed_w, const float *bias, float *y,
                          ptrdiff_t ry, ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t col_begin,
                          ptrdiff_t col_end, const float *zeros,
                          ptrdiff_t chunk_pixels, const float **a_rows, float **c_rows);
int fd_ddeconv_phase_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                          const double *x, const double *const *packed_w, const double *bias, double *y,
                          ptrdiff_t ry, ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t col_begin,
                          ptrdiff_t col_end, const double *zeros,
                          ptrdiff_t chunk_pixels, const double **a_rows, double **c_rows);

/* Depthwise transposed convolution, groups == C_in (deconv_depthwise.template.c).
 * wr: the weight reordered to (kH, kW, C_out); taps as in deconv_phase.
 * Rows [row_begin, row_end) of the N*Ho output rows. No workspace. */
int fd_sdeconv_depthwise_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                              const float *x, const float *wr, const float *bias, float *y,
                              ptrdiff_t row_begin, ptrdiff_t row_end);
int fd_ddeconv_depthwise_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                              const double *x, const double *wr, const double *bias, double *y,
                              ptrdiff_t row_begin, ptrdiff_t row_end);

#endif
