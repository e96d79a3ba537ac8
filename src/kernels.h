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

#endif
