/* Depthwise transposed convolution (groups == C_in, one input channel per group),
 * a direct kernel vectorised over channels (included by depthwise_rows.c per type
 * and ISA).
 *
 * With Cog = C_out / C_in outputs per input channel and wr[ky, kx, c] = w[c / Cog, ky, kx, c % Cog]
 * (the weight reordered once to (kH, kW, C_out)):
 *   y[n, oy, ox, c] = bias[c] + sum_{(ky, kx) in taps(oy mod sH, ox mod sW)} x[n, iy, ix, c / Cog] * wr[ky, kx, c]
 *   iy = (oy + pad_top - ky*dH) / sH,  ix = (ox + pad_left - kx*dW) / sW   (exact)
 * Only the taps of each output phase are visited (taps_y/taps_x as in deconv_phase), so no
 * inserted zero is multiplied. A GEMM would have K = taps and N = Cog: far too small, so this is
 * bound by memory instead: each output row is accumulated in cache and written once.
 */
#ifndef FD_REAL
#error "FD_REAL must be defined"
#endif

FD_TARGET static void FD_ISA_FN(depthwise_axpy)(FD_REAL *FD_RESTRICT acc, const FD_REAL *FD_RESTRICT x,
                                                const FD_REAL *FD_RESTRICT w, ptrdiff_t C, ptrdiff_t Cog)
{
    if (Cog == 1) {
        for (ptrdiff_t c = 0; c < C; c++) acc[c] += x[c] * w[c];
    } else {
        for (ptrdiff_t ci = 0; ci < C / Cog; ci++)
            for (ptrdiff_t o = 0; o < Cog; o++) acc[ci * Cog + o] += x[ci] * w[ci * Cog + o];
    }
}

FD_TARGET int FD_ISA_FN(depthwise_rows)(const fd_geometry *geo, const ptrdiff_t *taps_y,
                                               const ptrdiff_t *taps_x, const FD_REAL *FD_RESTRICT x,
                                               const FD_REAL *FD_RESTRICT wr, const FD_REAL *FD_RESTRICT bias,
                                               FD_REAL *FD_RESTRICT y, ptrdiff_t row_begin, ptrdiff_t row_end)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, C = geo->out_channels, Cog = C / Cin;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, dH = geo->dilation_h, dW = geo->dilation_w;
    if (geo->groups != Cin || row_begin < 0 || row_end > geo->batch * Ho) return FD_ERR_ARGUMENT;

    for (ptrdiff_t r = row_begin; r < row_end; r++) {          /* r = n*Ho + oy */
        const ptrdiff_t n = r / Ho, oy = r % Ho, ry = oy % sH, jy = oy / sH;
        FD_REAL *FD_RESTRICT row = y + r * Wo * C;
        for (ptrdiff_t ox = 0; ox < Wo; ox++)
            for (ptrdiff_t c = 0; c < C; c++) row[ox * C + c] = bias ? bias[c] : (FD_REAL)0;
        const ptrdiff_t *ky_list = taps_y + ry * (1 + kH);
        for (ptrdiff_t ty = 1; ty <= ky_list[0]; ty++) {
            const ptrdiff_t ky = ky_list[ty];
            const ptrdiff_t iy = jy + (ry + geo->pad_top - ky * dH) / sH;   /* exact division */
            if (iy < 0 || iy >= H) continue;
            const FD_REAL *x_row = x + (n * H + iy) * W * Cin;
            /* Column phase rx: output columns ox = rx + jx*sW read input column jx + base (exact),
               so each tap is a run of consecutive input pixels: no division per pixel. */
            for (ptrdiff_t rx = 0; rx < sW && rx < Wo; rx++) {
                const ptrdiff_t *kx_list = taps_x + rx * (1 + kW);
                const ptrdiff_t Jx = (Wo - rx + sW - 1) / sW;
                for (ptrdiff_t tx = 1; tx <= kx_list[0]; tx++) {
                    const ptrdiff_t kx = kx_list[tx], base = (rx + geo->pad_left - kx * dW) / sW;
                    const ptrdiff_t jx_begin = base < 0 ? -base : 0, jx_end = Jx < W - base ? Jx : W - base;
                    const FD_REAL *w_tap = wr + (ky * kW + kx) * C;
                    for (ptrdiff_t jx = jx_begin; jx < jx_end; jx++)
                        FD_ISA_FN(depthwise_axpy)(row + (rx + jx * sW) * C, x_row + (jx + base) * Cin, w_tap, C, Cog);
                }
            }
        }
    }
    return FD_OK;
}
