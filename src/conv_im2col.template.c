/* Convolution as im2col + GEMM (included by conv_im2col.c per type).
 *
 * The im2col matrix is never copied: it is an indirection buffer (XNNPACK's
 * "indirect GEMM"), one pointer per (output pixel, tap) to the Cig input
 * channels that tap reads, or to a zero vector where the tap falls in the padding:
 *   y[p, g*Cog + o] = bias + sum_{t = (ky, kx)} sum_i im2col[p, t, i] * w[g*Cog + o, ky, kx, i]
 *   GEMM shape (|P|, kH*kW*Cig) @ (kH*kW*Cig, Cog) per group; B is the group's
 *   weight slice transposed, packed once per layer (see PackedLayer).
 * A band is a range of output rows of one image; threads take disjoint bands.
 */
#ifndef FD_REAL
#error "FD_REAL must be defined"
#endif

int FD_FN(conv_im2col_band)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x,
                            const FD_REAL *const *packed_w, const FD_REAL *FD_RESTRICT bias,
                            FD_REAL *FD_RESTRICT y, ptrdiff_t n, ptrdiff_t oy_begin, ptrdiff_t oy_end,
                            const FD_REAL *zeros, ptrdiff_t chunk_pixels,
                            const FD_REAL **a_rows, FD_REAL **c_rows)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, T = kH * kW;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    if (chunk_pixels < 1 || oy_begin < 0 || oy_end > Ho || oy_begin >= oy_end) return FD_ERR_WORKSPACE;

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
            FD_FN(gemm_indirect)((size_t)M, (size_t)Cog, (size_t)T, (size_t)Cig, a_rows, packed_w[g],
                                 bias ? bias + g * Cog : NULL, c_rows, 0);
        }
    }
    return FD_OK;
}
