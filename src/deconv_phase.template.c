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
 * Workspace: chunk_pixels * T pointers in a_rows and chunk_pixels in c_rows.
 * Threads take disjoint (ry, row range) units.
 *
 * A unit may also take only the output channels [col_begin, col_end) of each group, so that
 * threads can split B's columns when B is larger than A (few pixels, many weights);
 * col_begin must be a multiple of FD_GEMM_COLUMN_ALIGN (B's packed panels start there).
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
                             ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t col_begin, ptrdiff_t col_end,
                             const FD_REAL *zeros,
                             ptrdiff_t chunk_pixels, const FD_REAL **a_rows, FD_REAL **c_rows)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, dH = geo->dilation_h, dW = geo->dilation_w;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const ptrdiff_t Jy = (Ho - ry + sH - 1) / sH;
    const ptrdiff_t cols = col_end - col_begin;
    if (ry < 0 || ry >= sH || row_begin < 0 || row_end > geo->batch * Jy || chunk_pixels < 1 || col_begin < 0 ||
        col_end > Cog || cols < 0 || col_begin % FD_GEMM_COLUMN_ALIGN != 0)
        return FD_ERR_ARGUMENT;

    const ptrdiff_t *ky_list = taps_y + ry * (1 + kH) + 1;
    const ptrdiff_t Ty = ky_list[-1];
    /* Input row of tap ty for output row oy = ry + jy*sH is jy + base_y[ty] (likewise columns):
       precomputed so that building the indirection buffer needs no division per tap. */
    ptrdiff_t base_y[FD_MAX_PHASE_TAPS], base_x[FD_MAX_PHASE_TAPS];
    if (Ty > FD_MAX_PHASE_TAPS || kW > FD_MAX_PHASE_TAPS) return FD_ERR_ARGUMENT;
    for (ptrdiff_t ty = 0; ty < Ty; ty++) base_y[ty] = (ry + geo->pad_top - ky_list[ty] * dH) / sH;
    /* Loop order: a chunk of phase rows, then groups, then column phases. The input pixels a
       chunk reads are shared by its groups' channel slices and by the column phases, so they
       are read from memory once and reused from cache. A GEMM call takes at most chunk_pixels
       output pixels: whole rows, or pieces of one row when a row alone is longer. */
    const ptrdiff_t Jx_max = (Wo + sW - 1) / sW;
    const ptrdiff_t rows_per_chunk = Jx_max >= chunk_pixels ? 1 : chunk_pixels / Jx_max;
    for (ptrdiff_t r0 = row_begin; r0 < row_end; r0 += rows_per_chunk) {
        const ptrdiff_t r1 = r0 + rows_per_chunk < row_end ? r0 + rows_per_chunk : row_end;
        for (ptrdiff_t g = 0; g < G; g++) {
            const FD_REAL *g_bias = bias ? bias + g * Cog + col_begin : NULL;
            for (ptrdiff_t rx = 0; rx < sW && rx < Wo; rx++) {
                const ptrdiff_t *kx_list = taps_x + rx * (1 + kW) + 1;
                const ptrdiff_t Tx = kx_list[-1], T = Ty * Tx;
                const ptrdiff_t Jx = (Wo - rx + sW - 1) / sW;
                for (ptrdiff_t tx = 0; tx < Tx; tx++) base_x[tx] = (rx + geo->pad_left - kx_list[tx] * dW) / sW;
                const FD_REAL *B = packed_w[(g * sH + ry) * sW + rx] + T * Cig * col_begin;
                for (ptrdiff_t jx0 = 0; jx0 < Jx; jx0 += chunk_pixels) {
                    const ptrdiff_t jx1 = jx0 + chunk_pixels < Jx ? jx0 + chunk_pixels : Jx;
                    ptrdiff_t M = 0;
                    for (ptrdiff_t r = r0; r < r1; r++) {
                        const ptrdiff_t n = r / Jy, jy = r % Jy;
                        const FD_REAL *x_image = x + n * H * W * Cin + g * Cig;
                        FD_REAL *y_row = y + ((n * Ho + ry + jy * sH) * Wo + rx) * Cout + g * Cog + col_begin;
                        for (ptrdiff_t jx = jx0; jx < jx1; jx++, M++) {
                            c_rows[M] = y_row + jx * sW * Cout;
                            const FD_REAL **a = a_rows + M * T;
                            for (ptrdiff_t ty = 0; ty < Ty; ty++) {
                                const ptrdiff_t iy = jy + base_y[ty];
                                const int row_inside = iy >= 0 && iy < H;
                                for (ptrdiff_t tx = 0; tx < Tx; tx++) {
                                    const ptrdiff_t ix = jx + base_x[tx];
                                    a[ty * Tx + tx] =
                                        (row_inside && ix >= 0 && ix < W) ? x_image + (iy * W + ix) * Cin : zeros;
                                }
                            }
                        }
                    }
                    if (T == 0 || Cig == 0) {
                        for (ptrdiff_t m = 0; m < M; m++)
                            for (ptrdiff_t o = 0; o < cols; o++) c_rows[m][o] = g_bias ? g_bias[o] : (FD_REAL)0;
                    } else {
                        FD_FN(gemm_indirect)((size_t)M, (size_t)cols, (size_t)T, (size_t)Cig, a_rows, B, g_bias,
                                             c_rows, 0);
                    }
                }
            }
        }
    }
    return FD_OK;
}
