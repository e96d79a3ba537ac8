/* Depthwise transposed convolution (groups == C_in, one input channel per group),
 * a direct kernel vectorised over channels (included per type by depthwise_rows.c, the portable
 * clone, and depthwise_rows_<isa>.c, after depthwise_rows_internal.h).
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

/* The transposed kernel, named FD_ISA_FN(depthwise_rows) unless the ISA's file renames it (FD_DW_ROWS_NAME) to
 * wrap it in kernels of its own. */
#ifndef FD_DW_ROWS_NAME
#define FD_DW_ROWS_NAME depthwise_rows
#endif
FD_TARGET int FD_ISA_FN(FD_DW_ROWS_NAME)(const fd_geometry *geo, const ptrdiff_t *taps_y,
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

/* ---------------------------------------------------------------------------------------------
 * Convolution with few channels per group, depthwise (Cig = 1) included: Cig = C_in / groups inputs and
 * Cog = C_out / groups outputs per group, with wr[ky, kx, ci, c] = w[c, ky, kx, ci] (the (C_out, kH, kW, Cig)
 * weight reordered once to (kH, kW, Cig, C_out)):
 *   y[n, oy, ox, c] = bias[c] + sum_{ky, kx, ci} x[n, oy*sH - pad_top + ky*dH, ox*sW - pad_left + kx*dW, (c / Cog)*Cig + ci]
 *                                                * wr[ky, kx, ci, c]
 * x is zero outside the image and those taps ARE terms of the sum, as in the formula, torch and
 * fastdeconv.reference: 0 * wr is added, so an Inf or NaN weight on a padding tap gives NaN.
 *
 * The SIMD clones (FD_DW_SIMD, vector helpers FD_ISA_FN(dw_*) from depthwise_rows_<isa>.c) vectorise over
 * output channels and block DW_TILE output pixels of a row in registers: each weight vector is loaded
 * once per tap row and input channel of the group and, for the common dense kernels (3 or 5 wide, stride 1
 * or 2, no dilation), each input vector once per tile, tap row and input channel of the group (a GEMM
 * would have N = Cog, a fraction of its tile, or multiply the zeros of block-diagonal weights). Where a
 * lane's input channel is not the lane's own (Cog > 1 or Cig > 1), the input vector is spread over the
 * lanes by a permute (MULT). Where the ISA has the registers (dw_pairs: AVX-512's float clone), a tile of
 * those dense kernels without a permute takes two vectors of channels and DW_TILE/2 pixels: a large image's
 * tile reads its input pixels from L2, a cache line each per vector, and two adjacent lines per pixel halve the
 * lines per FMA. Pixels whose taps leave the image left or right take a per-pixel path; rows
 * outside it add 0 * wr. Every path sums a pixel's terms in the same order, so they give the same bits.
 * The portable clone is plain C that the compiler vectorises over channels.
 */
#if FD_DW_SIMD

#define DW_VEC FD_ISA_FN(dwv)
#define DW_IDX FD_ISA_FN(dwi)
#define DW_LANES FD_ISA_FN(dw_lanes)
#define DW_TILE FD_ISA_FN(dw_tile)
#define DW_PAIRS FD_ISA_FN(dw_pairs)
#define DW_INLINE static FD_FORCE_INLINE FD_TARGET

/* One block of output channels [c0, c0 + lanes) and, where a lane's input channel is not its own (MULT),
 * the input channels it reads for the group's first input channel: [src, src + src_count), spread over the
 * lanes by idx (lane l reads ((c0 + l)/Cog - c0/Cog)*Cig + ci from src + ci for input channel ci of its group). */
typedef struct {
    ptrdiff_t c0, lanes, src, src_count;
    DW_IDX idx;
} FD_ISA_FN(dw_block);

/* x's vector for the block at the pixel whose Cin channels start at p. */
DW_INLINE DW_VEC FD_ISA_FN(dw_x)(const int MULT, const int FULL, const FD_REAL *p, const FD_ISA_FN(dw_block) *b)
{
    if (MULT) return FD_ISA_FN(dw_expand)(p + b->src, b->src_count, b->idx);
    return FULL ? FD_ISA_FN(dw_load)(p + b->c0) : FD_ISA_FN(dw_load_part)(p + b->c0, b->lanes);
}

DW_INLINE DW_VEC FD_ISA_FN(dw_w)(const int FULL, const FD_REAL *p, const FD_ISA_FN(dw_block) *b)
{
    return FULL ? FD_ISA_FN(dw_load)(p + b->c0) : FD_ISA_FN(dw_load_part)(p + b->c0, b->lanes);
}

/* OXB output pixels [ox0, ox0 + OXB) of row oy, VB vectors of channels from the block's c0 (VB = 2: two
 * full blocks side by side, KWC kernels without MULT only). KWC, SWC: the kernel width and stride as
 * constants, dilation 1 (each input vector is loaded once and shared by the taps that read it), or
 * 0: any kernel, stride and dilation (one input load per tap and pixel). CHECK: some horizontal
 * taps may fall outside the image (they read zero); else none does. */
DW_INLINE void FD_ISA_FN(conv_dw_tile)(const int KWC, const int SWC, const int OXB, const int VB, const int CHECK,
                                       const int MULT, const int FULL, const fd_geometry *geo,
                                       const FD_REAL *FD_RESTRICT x_image, ptrdiff_t oy, ptrdiff_t ox0,
                                       const FD_ISA_FN(dw_block) *b, const FD_REAL *FD_RESTRICT wr,
                                       const DW_VEC *bias_v, FD_REAL *FD_RESTRICT y_row)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, C = geo->out_channels;
    const ptrdiff_t Cig = Cin / geo->groups, kH = geo->kernel_h, kW = KWC ? KWC : geo->kernel_w;
    const ptrdiff_t sW = SWC ? SWC : geo->stride_w, dW = KWC ? 1 : geo->dilation_w;
    const ptrdiff_t ix0 = ox0 * sW - geo->pad_left, iy0 = oy * geo->stride_h - geo->pad_top;
    const DW_VEC zero = FD_ISA_FN(dw_zero)();
    DW_VEC acc[16];   /* acc[j]: pixel j's vector, acc[OXB + j] its second (VB = 2) */
    int j;
FD_UNROLL_BY(16)
    for (j = 0; j < OXB; j++) {
        acc[j] = bias_v[0];
        if (VB == 2) acc[OXB + j] = bias_v[1];
    }
    ptrdiff_t ky = 0, ci = -1;   /* tap row ky, input channel ci of the group (counted: no division) */
    for (ptrdiff_t kyc = 0; kyc < kH * Cig; kyc++) {
        if (++ci == Cig) {
            ci = 0;
            ky++;
        }
        const ptrdiff_t iy = iy0 + ky * geo->dilation_h;
        const FD_REAL *w_row = wr + (ky * kW * Cig + ci) * C;   /* tap kx at w_row + kx*Cig*C */
        if (iy < 0 || iy >= H) {   /* a padding row: every tap adds 0 * w */
            for (ptrdiff_t kx = 0; kx < kW; kx++) {
                const DW_VEC w = FD_ISA_FN(dw_w)(FULL, w_row + kx * Cig * C, b);
FD_UNROLL_BY(16)
                for (j = 0; j < OXB; j++) acc[j] = FD_ISA_FN(dw_fma)(zero, w, acc[j]);
                if (VB == 2) {
                    const DW_VEC w1 = FD_ISA_FN(dw_w)(FULL, w_row + kx * Cig * C + DW_LANES, b);
FD_UNROLL_BY(16)
                    for (j = 0; j < OXB; j++) acc[OXB + j] = FD_ISA_FN(dw_fma)(zero, w1, acc[OXB + j]);
                }
            }
            continue;
        }
        const FD_REAL *x_row = x_image + iy * W * Cin + ci;
        if (KWC) {
            DW_VEC w0[8], w1[8];   /* the first and (VB = 2) the second vector's weights of tap kx */
            int i, kx;
FD_UNROLL_BY(8)
            for (kx = 0; kx < KWC; kx++) {
                w0[kx] = FD_ISA_FN(dw_w)(FULL, w_row + kx * Cig * C, b);
                if (VB == 2) w1[kx] = FD_ISA_FN(dw_w)(FULL, w_row + kx * Cig * C + DW_LANES, b);
            }
            const FD_REAL *x_col = CHECK ? x_row : x_row + ix0 * Cin;
            /* input column ix0 + i serves output pixel j = (i - kx)/SWC through tap kx */
FD_UNROLL_BY(64)
            for (i = 0; i < (OXB - 1) * SWC + KWC; i++) {
                DW_VEC xv0, xv1 = zero;
                if (CHECK) {
                    const ptrdiff_t ix = ix0 + i;
                    const int inside = ix >= 0 && ix < W;
                    xv0 = inside ? FD_ISA_FN(dw_x)(MULT, FULL, x_col + ix * Cin, b) : zero;
                    if (VB == 2) xv1 = inside ? FD_ISA_FN(dw_x)(MULT, FULL, x_col + ix * Cin + DW_LANES, b) : zero;
                } else {
                    /* one load per column kept in a register, and one pointer stepping along the
                       columns: GCC otherwise reloads xv into every FMA from an offset register of
                       its own and spills them */
                    xv0 = FD_ISA_FN(dw_x)(MULT, FULL, x_col, b);
                    FD_DW_KEEP(xv0);
                    if (VB == 2) {
                        xv1 = FD_ISA_FN(dw_x)(MULT, FULL, x_col + DW_LANES, b);
                        FD_DW_KEEP(xv1);
                    }
                    x_col += Cin;
                    FD_DW_KEEP_PTR(x_col);
                }
FD_UNROLL_BY(8)
                for (kx = 0; kx < KWC; kx++) {
                    const int d = i - kx;
                    if (d >= 0 && d % SWC == 0 && d / SWC < OXB) {
                        acc[d / SWC] = FD_ISA_FN(dw_fma)(xv0, w0[kx], acc[d / SWC]);
                        if (VB == 2) acc[OXB + d / SWC] = FD_ISA_FN(dw_fma)(xv1, w1[kx], acc[OXB + d / SWC]);
                    }
                }
            }
        } else {
            for (ptrdiff_t kx = 0; kx < kW; kx++) {
                const DW_VEC w = FD_ISA_FN(dw_w)(FULL, w_row + kx * Cig * C, b);
FD_UNROLL_BY(16)
                for (j = 0; j < OXB; j++) {
                    const ptrdiff_t ix = ix0 + j * sW + kx * dW;
                    const DW_VEC xv = !CHECK || (ix >= 0 && ix < W) ? FD_ISA_FN(dw_x)(MULT, FULL, x_row + ix * Cin, b)
                                                                    : zero;
                    acc[j] = FD_ISA_FN(dw_fma)(xv, w, acc[j]);
                }
            }
        }
    }
FD_UNROLL_BY(16)
    for (j = 0; j < OXB; j++) {
        FD_REAL *yp = y_row + (ox0 + j) * C + b->c0;
        if (FULL) FD_ISA_FN(dw_store)(yp, acc[j]);
        else FD_ISA_FN(dw_store_part)(yp, acc[j], b->lanes);
        if (VB == 2) FD_ISA_FN(dw_store)(yp + DW_LANES, acc[OXB + j]);   /* pairs are full vectors */
    }
}

/* One output pixel anywhere: each tap checked, zero outside the image. Its terms are summed in the tiles'
   order (tap row, input channel, tap column), so that a pixel has the same bits whichever path computes
   it (a Dask block's narrow rows take this one). */
DW_INLINE void FD_ISA_FN(conv_dw_pixel)(const int MULT, const int FULL, const fd_geometry *geo,
                                        const FD_REAL *FD_RESTRICT x_image, ptrdiff_t oy, ptrdiff_t ox,
                                        const FD_ISA_FN(dw_block) *b, const FD_REAL *FD_RESTRICT wr, DW_VEC bias_v,
                                        FD_REAL *FD_RESTRICT y_row)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, C = geo->out_channels;
    const ptrdiff_t Cig = Cin / geo->groups, kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t ix0 = ox * geo->stride_w - geo->pad_left, iy0 = oy * geo->stride_h - geo->pad_top;
    const DW_VEC zero = FD_ISA_FN(dw_zero)();
    DW_VEC acc = bias_v;
    for (ptrdiff_t ky = 0; ky < kH; ky++) {
        const ptrdiff_t iy = iy0 + ky * geo->dilation_h;
        const int row_inside = iy >= 0 && iy < H;
        for (ptrdiff_t ci = 0; ci < Cig; ci++)
            for (ptrdiff_t kx = 0; kx < kW; kx++) {
                const ptrdiff_t ix = ix0 + kx * geo->dilation_w;
                const DW_VEC w = FD_ISA_FN(dw_w)(FULL, wr + ((ky * kW + kx) * Cig + ci) * C, b);
                const DW_VEC xv = row_inside && ix >= 0 && ix < W
                                      ? FD_ISA_FN(dw_x)(MULT, FULL, x_image + (iy * W + ix) * Cin + ci, b) : zero;
                acc = FD_ISA_FN(dw_fma)(xv, w, acc);
            }
    }
    if (FULL) FD_ISA_FN(dw_store)(y_row + ox * C + b->c0, acc);
    else FD_ISA_FN(dw_store_part)(y_row + ox * C + b->c0, acc, b->lanes);
}

/* Output row oy, one channel block (VB = 2: two, side by side), pixels [ox_begin, ox_end) (at least a tile
 * wide unless the row is narrower): tiles of TILE = DW_TILE/VB pixels where every horizontal tap falls inside
 * the image (columns [ox_lo, ox_hi)); elsewhere checked tiles of TILE/2 or TILE/4 pixels, the last one
 * moved left to end at ox_end (recomputing a few pixels of this row, with the same result). Rows
 * narrower than DW_TILE/4 go pixel by pixel. One function per VB (conv_dw_block_row, conv_dw_pair_row), so
 * that the tile sizes are constants where the tiles are inlined: computed from a VB argument, they made GCC
 * compile the one-vector tiles larger and slower (asv_benches/NOTES.md, 2026-12-07 (fifth)). */
#define DW_DEFINE_BLOCK_ROW(name, VB)                                                                              \
    DW_INLINE void FD_ISA_FN(name)(const int KWC, const int SWC, const int MULT, const int FULL,                   \
                                   const fd_geometry *geo, const FD_REAL *FD_RESTRICT x_image, ptrdiff_t oy,        \
                                   ptrdiff_t ox_begin, ptrdiff_t ox_end, ptrdiff_t ox_lo, ptrdiff_t ox_hi,          \
                                   const FD_ISA_FN(dw_block) *b, const FD_REAL *FD_RESTRICT wr,                    \
                                   const DW_VEC *bias_v, FD_REAL *FD_RESTRICT y_row)                               \
    {                                                                                                              \
        enum { TILE = DW_TILE / (VB), HALF = TILE / 2, QUARTER = TILE / 4 };                                       \
        if (geo->out_w < DW_TILE / 4) {                                                                            \
            for (int v = 0; v < (VB); v++) {                                                                       \
                FD_ISA_FN(dw_block) block = *b;                                                                    \
                block.c0 += v * DW_LANES;                                                                          \
                for (ptrdiff_t ox = ox_begin; ox < ox_end; ox++)                                                   \
                    FD_ISA_FN(conv_dw_pixel)(MULT, FULL, geo, x_image, oy, ox, &block, wr, bias_v[v], y_row);      \
            }                                                                                                      \
            return;                                                                                                \
        }                                                                                                          \
        for (ptrdiff_t ox = ox_begin; ox < ox_end;) {                                                              \
            const ptrdiff_t left = ox_end - ox;                                                                    \
            if (left >= TILE && ox >= ox_lo && ox + TILE <= ox_hi) {                                               \
                DW_TILE_AT(TILE, (VB), 0, ox);                                                                     \
                ox += TILE;                                                                                        \
            } else if (HALF <= DW_TILE / 4 || geo->out_w >= HALF) {   /* narrower rows went pixel by pixel */       \
                const ptrdiff_t at = left >= HALF ? ox : ox_end - HALF;                                            \
                if (at >= ox_lo && at + HALF <= ox_hi) DW_TILE_AT(HALF, (VB), 0, at);                              \
                else DW_TILE_AT(HALF, (VB), 1, at);                                                                \
                ox = at + HALF;                                                                                    \
            } else {                                                                                               \
                const ptrdiff_t at = left >= QUARTER ? ox : ox_end - QUARTER;                                      \
                DW_TILE_AT(QUARTER, (VB), 1, at);                                                                  \
                ox = at + QUARTER;                                                                                 \
            }                                                                                                      \
        }                                                                                                          \
    }
#define DW_TILE_AT(OXB, VB, CHECK, at) \
    FD_ISA_FN(conv_dw_tile)(KWC, SWC, OXB, VB, CHECK, MULT, FULL, geo, x_image, oy, at, b, wr, bias_v, y_row)
DW_DEFINE_BLOCK_ROW(conv_dw_block_row, 1)
DW_DEFINE_BLOCK_ROW(conv_dw_pair_row, 2)
#undef DW_TILE_AT
#undef DW_DEFINE_BLOCK_ROW

/* Output channels [c_begin, c_end) of row oy, in blocks of DW_LANES from c_begin. */
DW_INLINE void FD_ISA_FN(conv_dw_row)(const int KWC, const int SWC, const int MULT, const fd_geometry *geo,
                                      const FD_REAL *FD_RESTRICT x_image, ptrdiff_t oy, ptrdiff_t ox_begin,
                                      ptrdiff_t ox_end, ptrdiff_t ox_lo, ptrdiff_t ox_hi, ptrdiff_t c_begin,
                                      ptrdiff_t c_end, const FD_REAL *FD_RESTRICT wr,
                                      const FD_REAL *FD_RESTRICT bias, FD_REAL *FD_RESTRICT y_row)
{
    const ptrdiff_t C = geo->out_channels, Cog = C / geo->groups, Cig = geo->in_channels / geo->groups;
    FD_ISA_FN(dw_block) b;
    ptrdiff_t step;
    for (ptrdiff_t c0 = c_begin; c0 < c_end; c0 += step) {
        b.c0 = c0;
        b.lanes = c_end - c0 < DW_LANES ? c_end - c0 : DW_LANES;
        /* the lanes' input channels must fit in one vector: fewer lanes where they would not (Cig > Cog) */
        while (MULT && ((c0 + b.lanes - 1) / Cog - c0 / Cog) * Cig + 1 > DW_LANES) b.lanes--;
        b.src = (c0 / Cog) * Cig;
        b.src_count = ((c0 + b.lanes - 1) / Cog - c0 / Cog) * Cig + 1;
        b.idx = FD_ISA_FN(dw_index)(MULT ? c0 : 0, MULT ? Cog : 1, Cig);
        step = b.lanes;
        DW_VEC bias_v[2];
        if (DW_PAIRS && KWC && !MULT && c_end - c0 >= 2 * DW_LANES) {   /* two vectors of channels a tile */
            bias_v[0] = bias ? FD_ISA_FN(dw_load)(bias + c0) : FD_ISA_FN(dw_zero)();
            bias_v[1] = bias ? FD_ISA_FN(dw_load)(bias + c0 + DW_LANES) : FD_ISA_FN(dw_zero)();
            FD_ISA_FN(conv_dw_pair_row)(KWC, SWC, MULT, 1, geo, x_image, oy, ox_begin, ox_end, ox_lo, ox_hi, &b, wr,
                                        bias_v, y_row);
            step = 2 * DW_LANES;
        } else if (b.lanes == DW_LANES) {
            bias_v[0] = bias ? FD_ISA_FN(dw_load)(bias + c0) : FD_ISA_FN(dw_zero)();
            FD_ISA_FN(conv_dw_block_row)(KWC, SWC, MULT, 1, geo, x_image, oy, ox_begin, ox_end, ox_lo, ox_hi, &b, wr,
                                         bias_v, y_row);
        } else {   /* the last, partial vector: the generic tile only (code size) */
            bias_v[0] = bias ? FD_ISA_FN(dw_load_part)(bias + c0, b.lanes) : FD_ISA_FN(dw_zero)();
            FD_ISA_FN(conv_dw_block_row)(0, 0, MULT, 0, geo, x_image, oy, ox_begin, ox_end, ox_lo, ox_hi, &b, wr,
                                         bias_v, y_row);
        }
    }
}

/* The rows go in vertical strips of output columns whose kH input rows fit in about this many
 * bytes, so that consecutive output rows find the input rows they share in L1. */
#define DW_STRIP_BYTES (16 << 10)

FD_TARGET int FD_ISA_FN(conv_depthwise_rows)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x,
                                             const FD_REAL *FD_RESTRICT wr, const FD_REAL *FD_RESTRICT bias,
                                             FD_REAL *FD_RESTRICT y, ptrdiff_t row_begin, ptrdiff_t row_end,
                                             ptrdiff_t channel_begin, ptrdiff_t channel_end)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, C = geo->out_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, kW = geo->kernel_w, sW = geo->stride_w, dW = geo->dilation_w;
    if (geo->groups <= 0 || Cin % geo->groups != 0 || C % geo->groups != 0 || row_begin < 0 ||
        row_end > geo->batch * Ho || channel_begin < 0 || channel_end > C || channel_begin > channel_end)
        return FD_ERR_ARGUMENT;
    /* [ox_lo, ox_hi): the output columns whose taps 0 and kW-1 both fall inside the image */
    ptrdiff_t ox_lo = (geo->pad_left + sW - 1) / sW;
    ptrdiff_t ox_hi = fd_floor_div(W - 1 + geo->pad_left - (kW - 1) * dW, sW) + 1;
    if (ox_lo > Wo) ox_lo = Wo;
    if (ox_hi > Wo) ox_hi = Wo;
    if (ox_hi < ox_lo) ox_hi = ox_lo;
    /* strip width: a multiple of the tile; input columns (strip - 1)*sW + (kW - 1)*dW + 1 */
    const ptrdiff_t row_bytes = geo->kernel_h * (Cin > 0 ? Cin : 1) * (ptrdiff_t)sizeof(FD_REAL);   /* C_in 0: bias */
    const ptrdiff_t fit = DW_STRIP_BYTES / row_bytes - (kW - 1) * dW;
    ptrdiff_t strip = fit > 0 ? fit / sW / DW_TILE * DW_TILE : 0;
    if (strip < DW_TILE) strip = DW_TILE;
    /* the tiles specialised for a shape take whole vectors of channels: 3- and 5-wide kernels without a
       permute, 3-wide ones with (grouped layers); any other block the generic tile (fewer copies of the fully
       unrolled tile: code size) */
    const int mult = C != Cin || Cin != geo->groups;
    const int shape = dW != 1 ? 0 : kW == 3 ? (sW == 1 ? 1 : sW == 2 ? 2 : 0)
                                 : kW == 5 ? (sW == 1 ? 3 : sW == 2 ? 4 : 0) : 0;
    /* a last strip narrower than a tile joins the one before */
    for (ptrdiff_t ox_begin = 0, ox_end; ox_begin < Wo; ox_begin = ox_end) {
        ox_end = Wo - ox_begin >= strip + DW_TILE ? ox_begin + strip : Wo;
        for (ptrdiff_t r = row_begin; r < row_end; r++) {   /* r = n*Ho + oy */
            const FD_REAL *x_image = x + (r / Ho) * H * W * Cin;
            const ptrdiff_t oy = r % Ho;
            FD_REAL *y_row = y + r * Wo * C;
            switch (shape * 2 + mult) {
#define DW_ROW(KWC, SWC, MULT) \
    FD_ISA_FN(conv_dw_row)(KWC, SWC, MULT, geo, x_image, oy, ox_begin, ox_end, ox_lo, ox_hi, channel_begin, \
                           channel_end, wr, bias, y_row)
            case 2: DW_ROW(3, 1, 0); break;
            case 4: DW_ROW(3, 2, 0); break;
            case 6: DW_ROW(5, 1, 0); break;
            case 8: DW_ROW(5, 2, 0); break;
            case 3: DW_ROW(3, 1, 1); break;
            case 5: DW_ROW(3, 2, 1); break;
            case 1: case 7: case 9: DW_ROW(0, 0, 1); break;
            default: DW_ROW(0, 0, 0); break;
#undef DW_ROW
            }
        }
    }
    return FD_OK;
}

#undef DW_STRIP_BYTES
#undef DW_VEC
#undef DW_IDX
#undef DW_LANES
#undef DW_TILE
#undef DW_PAIRS
#undef DW_INLINE

#else /* portable */

/* Channels in chunks of this many accumulators (on the stack, vectorised by the compiler). */
#define DW_CHUNK 64

FD_TARGET int FD_ISA_FN(conv_depthwise_rows)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x,
                                             const FD_REAL *FD_RESTRICT wr, const FD_REAL *FD_RESTRICT bias,
                                             FD_REAL *FD_RESTRICT y, ptrdiff_t row_begin, ptrdiff_t row_end,
                                             ptrdiff_t channel_begin, ptrdiff_t channel_end)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, C = geo->out_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, kH = geo->kernel_h, kW = geo->kernel_w;
    if (geo->groups <= 0 || Cin % geo->groups != 0 || C % geo->groups != 0 || row_begin < 0 ||
        row_end > geo->batch * Ho || channel_begin < 0 || channel_end > C || channel_begin > channel_end)
        return FD_ERR_ARGUMENT;
    const ptrdiff_t Cog = C / geo->groups, Cig = Cin / geo->groups;
    FD_REAL acc[DW_CHUNK];
    for (ptrdiff_t r = row_begin; r < row_end; r++) {   /* r = n*Ho + oy */
        const FD_REAL *x_image = x + (r / Ho) * H * W * Cin;
        const ptrdiff_t iy0 = (r % Ho) * geo->stride_h - geo->pad_top;
        for (ptrdiff_t ox = 0; ox < Wo; ox++) {
            const ptrdiff_t ix0 = ox * geo->stride_w - geo->pad_left;
            FD_REAL *y_pixel = y + (r * Wo + ox) * C;
            for (ptrdiff_t c0 = channel_begin; c0 < channel_end; c0 += DW_CHUNK) {
                const ptrdiff_t nc = channel_end - c0 < DW_CHUNK ? channel_end - c0 : DW_CHUNK;
                for (ptrdiff_t c = 0; c < nc; c++) acc[c] = bias ? bias[c0 + c] : (FD_REAL)0;
                for (ptrdiff_t ky = 0; ky < kH; ky++) {
                    const ptrdiff_t iy = iy0 + ky * geo->dilation_h;
                    for (ptrdiff_t ci = 0; ci < Cig; ci++) {   /* the SIMD tiles' order */
                        for (ptrdiff_t kx = 0; kx < kW; kx++) {
                            const ptrdiff_t ix = ix0 + kx * geo->dilation_w;
                            const FD_REAL *FD_RESTRICT w = wr + ((ky * kW + kx) * Cig + ci) * C + c0;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) {
                                for (ptrdiff_t c = 0; c < nc; c++) acc[c] += (FD_REAL)0 * w[c];
                            } else if (Cog == 1 && Cig == 1) {
                                const FD_REAL *FD_RESTRICT xp = x_image + (iy * W + ix) * Cin + c0;
                                for (ptrdiff_t c = 0; c < nc; c++) acc[c] += xp[c] * w[c];
                            } else {
                                const FD_REAL *FD_RESTRICT xp = x_image + (iy * W + ix) * Cin + ci;
                                for (ptrdiff_t c = 0; c < nc; c++) acc[c] += xp[(c0 + c) / Cog * Cig] * w[c];
                            }
                        }
                    }
                }
                for (ptrdiff_t c = 0; c < nc; c++) y_pixel[c0 + c] = acc[c];
            }
        }
    }
    return FD_OK;
}

#undef DW_CHUNK

#endif
