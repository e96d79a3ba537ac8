/* Algorithm "im2col": convolution as im2col + GEMM (an algorithm template, see algorithm.h).
 *
 * The im2col matrix is never copied: it is an indirection buffer (XNNPACK's
 * "indirect GEMM"), one pointer per (output pixel, tap) to the Cig input
 * channels that tap reads, or to a zero vector where the tap falls in the padding
 * (a convolution's formula reads x as zero there, so 0 * w is one of its terms and
 * 0 * Inf = NaN is right, as in fastdeconv.reference; the transposed convolutions
 * have no such terms and skip their outside taps instead):
 *   y[p, g*Cog + o] = bias + sum_{t = (ky, kx)} sum_i im2col[p, t, i] * w[g*Cog + o, ky, kx, i]
 *   GEMM shape (|P|, kH*kW*Cig) @ (kH*kW*Cig, Cog) per group; B is the group's
 *   weight slice transposed, packed once per layer (see PackedLayer).
 * Task: (image n, output rows [row_begin, row_end)); threads take disjoint bands. Workspace:
 * chunk*kH*kW pointers for A's rows, chunk for C's.
 */
#if defined(FD_ALGORITHM_SHARED)

#include <string.h>

#include "algorithm.h"
#include "kernels/gemm.h"

static const char *im2col_unsupported(const fd_geometry *geo) {
    (void)geo;
    return NULL;
}

/* Blob parts: Cig zeros (the A row of taps in the padding), then each group's matrix. */
enum { IM2COL_ZEROS, IM2COL_MATRICES };

#define im2col_workspace fd_indirect_gemm_workspace
#define im2col_tasks fd_image_band_tasks

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_ALGORITHM(im2col, 0)

#else

static int FD_FN(conv_im2col_band)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x, const void *packed,
                                   const FD_REAL *FD_RESTRICT bias, FD_REAL *FD_RESTRICT y, ptrdiff_t n,
                                   ptrdiff_t oy_begin, ptrdiff_t oy_end, ptrdiff_t chunk_pixels,
                            const FD_REAL **a_rows, FD_REAL **c_rows)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, T = kH * kW;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    if (chunk_pixels < 1 || oy_begin < 0 || oy_end > Ho || oy_begin >= oy_end) return FD_ERR_WORKSPACE;
    const FD_REAL *zeros = (const FD_REAL *)fd_blob_part(packed, IM2COL_ZEROS);

    const ptrdiff_t first = oy_begin * Wo, last = oy_end * Wo;
    for (ptrdiff_t p0 = first; p0 < last; p0 += chunk_pixels) {
        const ptrdiff_t M = (last - p0 < chunk_pixels) ? last - p0 : chunk_pixels;
        for (ptrdiff_t g = 0; g < G; g++) {
            for (ptrdiff_t m = 0; m < M; m++) {
                const ptrdiff_t oy = (p0 + m) / Wo, ox = (p0 + m) % Wo;
                for (ptrdiff_t ky = 0; ky < kH; ky++) {
                    const ptrdiff_t iy = oy * geo->stride_h - geo->pad_top + ky * geo->dilation_h;
                    for (ptrdiff_t kx = 0; kx < kW; kx++) {
                        const ptrdiff_t ix = ox * geo->stride_w - geo->pad_left + kx * geo->dilation_w;
                        const int inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
                        a_rows[m * T + ky * kW + kx] = inside ? x + ((n * H + iy) * W + ix) * Cin + g * Cig : zeros;
                    }
                }
                c_rows[m] = y + ((n * Ho + oy) * Wo + ox) * Cout + g * Cog;
            }
            if (Cig == 0) {
                for (ptrdiff_t m = 0; m < M; m++)
                    for (ptrdiff_t o = 0; o < Cog; o++) c_rows[m][o] = bias ? bias[g * Cog + o] : (FD_REAL)0;
                continue;
            }
            FD_FN(gemm_indirect)((size_t)M, (size_t)Cog, (size_t)T, (size_t)Cig, a_rows, (const FD_REAL *)fd_blob_part(packed, IM2COL_MATRICES + (size_t)g),
                                 bias ? bias + g * Cog : NULL, c_rows, 0);
        }
    }
    return FD_OK;
}

/* Group g's (kH*kW*Cig, Cog) matrix is its (Cog, kH, kW, Cig) weight slice transposed. */
static int FD_FN(im2col_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t G = geo->groups, Cig = geo->in_channels / G, Cog = geo->out_channels / G;
    const ptrdiff_t K = geo->kernel_h * geo->kernel_w * Cig;
    fd_blob b;
    fd_blob_begin(&b, blob, IM2COL_MATRICES + (size_t)G);
    void *zeros = fd_blob_add(&b, IM2COL_ZEROS, (size_t)Cig * sizeof(FD_REAL));
    if (zeros != NULL) memset(zeros, 0, (size_t)Cig * sizeof(FD_REAL));
    for (ptrdiff_t g = 0; g < G; g++) {
        const size_t size = FD_FN(gemm_packed_size)((size_t)K, (size_t)Cog);
        FD_REAL *packed = (FD_REAL *)fd_blob_add(&b, IM2COL_MATRICES + (size_t)g, size * sizeof(FD_REAL));
        if (packed != NULL && size > 0)
            FD_FN(gemm_pack_b)((size_t)K, (size_t)Cog, (const FD_REAL *)weight + g * Cog * K, 1, K, packed);
    }
    *bytes = b.size;
    return FD_OK;
}

static int FD_FN(im2col_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    const FD_REAL **a_rows = (const FD_REAL **)workspace;
    FD_REAL **c_rows = (FD_REAL **)(a_rows + op->chunk * op->geo->kernel_h * op->geo->kernel_w);
    return FD_FN(conv_im2col_band)(op->geo, (const FD_REAL *)op->x, op->packed, (const FD_REAL *)op->bias,
                                   (FD_REAL *)op->y, t->part, t->row_begin, t->row_end, op->chunk, a_rows, c_rows);
}

#endif
