/* Transposed convolution by stride-phase ("sub-pixel") decomposition
 * (included by deconv_phase.c per type).
 *
 * Output row oy only receives taps ky with (oy + pad_top - ky*dH) divisible by sH, and
 * which taps those are depends only on the phase ry = oy mod sH (likewise columns).
 * So each of the sH*sW output phases is an ordinary stride-1 correlation with a
 * sub-kernel of Ty(ry)*Tx(rx) taps, computed as one indirect GEMM per phase and group:
 *   y[p, g*Cog + o] = bias + sum_{t=(ky,kx)} sum_i x[n, iy_t(p), ix_t(p), g*Cig + i] * w[g*Cig + i, ky, kx, o]
 *   iy_t = (oy + pad_top - ky*dH) / sH   (exact),  zero where it falls outside the image
 *   GEMM shape (|P|, Ty*Tx*Cig) @ (Ty*Tx*Cig, Cog), B packed once per (group, phase).
 * Every output element is written exactly once: no column buffer, no zero fill, no
 * scatter-add, and no multiplication by inserted zeros. Phases with no taps (the
 * dilated kernel shorter than the stride) get the bias.
 *
 * Work unit: output rows of one row phase ry, counted across the batch: row r in
 * [0, N*Jy) is image r / Jy, output row ry + (r % Jy)*sH, with Jy = ceil((Ho - ry)/sH).
 * Threads take disjoint (ry, row range) units.
 *
 * taps_y: sH rows of (1 + kH) entries: the count Ty(ry), then the ky values (ascending);
 * taps_x likewise. B's K index is (ty*Tx + tx)*Cig + i, matching a_rows[m*T + ty*Tx + tx].
 */
#ifndef FD_REAL
#error "FD_REAL must be defined"
#endif

int FD_FN(deconv_phase_rows)(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                             const FD_REAL *FD_RESTRICT x, const FD_REAL *const *packed_w,
                             const FD_REAL *FD_RESTRICT bias, FD_REAL *FD_RESTRICT y, ptrdiff_t ry,
                             ptrdiff_t row_begin, ptrdiff_t row_end, const FD_REAL *zeros,
                             ptrdiff_t chunk_pixels, const FD_REAL **a_rows, FD_REAL **c_rows)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, dH = geo->dilation_h, dW = geo->dilation_w;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const ptrdiff_t Jy = (Ho - ry + sH - 1) / sH;
    if (ry < 0 || ry >= sH || row_begin < 0 || row_end > geo->batch * Jy || chunk_pixels < 1) return FD_ERR_ARGUMENT;

    const ptrdiff_t *ky_list = taps_y + ry * (1 + kH) + 1;
    const ptrdiff_t Ty = ky_list[-1];
    for (ptrdiff_t g = 0; g < G; g++) {
        const FD_REAL *g_bias = bias ? bias + g * Cog : NULL;
        for (ptrdiff_t rx = 0; rx < sW && rx < Wo; rx++) {
            const ptrdiff_t *kx_list = taps_x + rx * (1 + kW) + 1;
            const ptrdiff_t Tx = kx_list[-1], T = Ty * Tx;
            const ptrdiff_t Jx = (Wo - rx + sW - 1) / sW;
            const FD_REAL *B = packed_w[(g * sH + ry) * sW + rx];
            const ptrdiff_t first = row_begin * Jx, last = row_end * Jx;   /* pixels of this phase */
            for (ptrdiff_t p0 = first; p0 < last; p0 += chunk_pixels) {
                const ptrdiff_t M = (last - p0 < chunk_pixels) ? last - p0 : chunk_pixels;
                for (ptrdiff_t m = 0; m < M; m++) {
                    const ptrdiff_t r = (p0 + m) / Jx, j = (p0 + m) % Jx;
                    const ptrdiff_t n = r / Jy, oy = ry + (r % Jy) * sH, ox = rx + j * sW;
                    c_rows[m] = y + ((n * Ho + oy) * Wo + ox) * Cout + g * Cog;
                    const FD_REAL **a = a_rows + m * T;
                    for (ptrdiff_t ty = 0; ty < Ty; ty++) {
                        /* a multiple of sH by the choice of taps, so the division is exact */
                        const ptrdiff_t num_y = oy + geo->pad_top - ky_list[ty] * dH, iy = num_y / sH;
                        for (ptrdiff_t tx = 0; tx < Tx; tx++) {
                            const ptrdiff_t num_x = ox + geo->pad_left - kx_list[tx] * dW, ix = num_x / sW;
                            const int inside = num_y >= 0 && iy < H && num_x >= 0 && ix < W;
                            a[ty * Tx + tx] = inside ? x + ((n * H + iy) * W + ix) * Cin + g * Cig : zeros;
                        }
                    }
                }
                if (T == 0 || Cig == 0) {
                    for (ptrdiff_t m = 0; m < M; m++)
                        for (ptrdiff_t o = 0; o < Cog; o++) c_rows[m][o] = g_bias ? g_bias[o] : (FD_REAL)0;
                } else {
                    FD_FN(gemm_indirect)((size_t)M, (size_t)Cog, (size_t)T, (size_t)Cig, a_rows, B, g_bias,
                                         c_rows, 0);
                }
            }
        }
    }
    return FD_OK;
}
