/* Transposed convolution with few outputs per group, vectorised over output pixels (included by
 * planar_rows.c per type and ISA, with FD_TARGET, FD_ISA and FD_PLANAR_VECTOR_BYTES defined).
 *
 * Per output row oy and column phase r (output columns ox = r + sW*j), with the stride-phase tap tables:
 *   y[n, oy, r + sW*j, o] = bias[o] + sum_{ky, kx, i} x[n, iy, j + off(r, kx), g*Cig + i] * wp[o, ky, kx, i]
 *   iy = (oy + pad_top - ky*dH) / sH,  off(r, kx) = (r + pad_left - kx*dW) / sW   (exact), g = o / Cog
 * so along j every tap reads consecutive input pixels. With the input rows transposed to (C_in, columns)
 * in the ring, one tap and channel is a broadcast weight times a run of consecutive values: a block of
 * 8 accumulator vectors of pixels, with no horizontal sum and no scatter-add, whatever C_out. A GEMM
 * would have N = C_out/groups, a fraction of a register.
 */
#ifndef FD_REAL
#error "FD_REAL must be defined"
#endif

#if defined(__GNUC__)
typedef FD_REAL FD_ISA_FN(planar_vec) __attribute__((vector_size(FD_PLANAR_VECTOR_BYTES)));
#define PLANAR_LANES ((ptrdiff_t)(FD_PLANAR_VECTOR_BYTES / sizeof(FD_REAL)))
#else
typedef FD_REAL FD_ISA_FN(planar_vec);
#define PLANAR_LANES ((ptrdiff_t)1)
#endif
#define PLANAR_VEC FD_ISA_FN(planar_vec)
#define PLANAR_VECTORS 8
/* Outputs per block of several (planar_block_outputs) and vectors of pixels for each: with 32 vector
   registers (AVX-512, NEON) 8 outputs x 3 vectors, 24 accumulators beside 3 input vectors and a
   broadcast weight, so that each loaded vector feeds 8 multiply-adds and each weight 3; with 16, 4 x 3
   (12 accumulators, 3 input vectors and the weight: every register). */
#define PLANAR_MAX_OUTPUTS FD_PLANAR_BLOCK_OUTPUTS(FD_PLANAR_REGISTERS)
#if PLANAR_MAX_OUTPUTS >= 8
#define PLANAR_OUTPUT_VECTORS(no) ((no) > 4 ? 3 : 4)
#else
#define PLANAR_OUTPUT_VECTORS(no) ((no) > 2 ? 3 : 4)
#endif

/* nv (1..8, a constant where it is inlined) vectors of pixels: bias plus every tap's channels. */
FD_TARGET static FD_FORCE_INLINE void FD_ISA_FN(planar_block)(ptrdiff_t nv, FD_REAL *FD_RESTRICT out, FD_REAL b,
                                                              const FD_REAL *const *tap_x, const FD_REAL *wbase,
                                                              const ptrdiff_t *tap_w, ptrdiff_t taps,
                                                              ptrdiff_t Cig, ptrdiff_t width, ptrdiff_t shift)
{
    PLANAR_VEC acc[PLANAR_VECTORS];
    FD_UNROLL_BY(8)
    for (ptrdiff_t v = 0; v < nv; v++) acc[v] = (PLANAR_VEC){0} + b;
    for (ptrdiff_t t = 0; t < taps; t++) {
        const FD_REAL *FD_RESTRICT xr = tap_x[t] + shift;
        const FD_REAL *FD_RESTRICT w = wbase + tap_w[t];
        for (ptrdiff_t i = 0; i < Cig; i++) {
            const FD_REAL wi = w[i];
            const FD_REAL *FD_RESTRICT xc = xr + i * width;
            FD_UNROLL_BY(8)
            for (ptrdiff_t v = 0; v < nv; v++) {
                PLANAR_VEC xv;
                memcpy(&xv, xc + v * PLANAR_LANES, sizeof xv);
                acc[v] += xv * wi;
            }
        }
    }
    memcpy(out, acc, (size_t)nv * sizeof(PLANAR_VEC));
}

/* The same for nv of 1..4 vectors, on two sets of accumulators (even and odd channels), so that a short
 * run still has enough independent multiply-adds in flight to hide their latency. */
FD_TARGET static FD_FORCE_INLINE void FD_ISA_FN(planar_block_pairs)(ptrdiff_t nv, FD_REAL *FD_RESTRICT out,
                                                                    FD_REAL b, const FD_REAL *const *tap_x,
                                                                    const FD_REAL *wbase, const ptrdiff_t *tap_w,
                                                                    ptrdiff_t taps, ptrdiff_t Cig, ptrdiff_t width,
                                                                    ptrdiff_t shift)
{
    PLANAR_VEC acc[PLANAR_VECTORS / 2], odd[PLANAR_VECTORS / 2];
    FD_UNROLL_BY(8)
    for (ptrdiff_t v = 0; v < nv; v++) {
        acc[v] = (PLANAR_VEC){0} + b;
        odd[v] = (PLANAR_VEC){0};
    }
    for (ptrdiff_t t = 0; t < taps; t++) {
        const FD_REAL *FD_RESTRICT xr = tap_x[t] + shift;
        const FD_REAL *FD_RESTRICT w = wbase + tap_w[t];
        ptrdiff_t i = 0;
        for (; i + 2 <= Cig; i += 2) {
            const FD_REAL w0 = w[i], w1 = w[i + 1];
            const FD_REAL *FD_RESTRICT x0 = xr + i * width, *FD_RESTRICT x1 = x0 + width;
            FD_UNROLL_BY(8)
            for (ptrdiff_t v = 0; v < nv; v++) {
                PLANAR_VEC a, c;
                memcpy(&a, x0 + v * PLANAR_LANES, sizeof a);
                memcpy(&c, x1 + v * PLANAR_LANES, sizeof c);
                acc[v] += a * w0;
                odd[v] += c * w1;
            }
        }
        if (i < Cig) {
            const FD_REAL *FD_RESTRICT x0 = xr + i * width;
            FD_UNROLL_BY(8)
            for (ptrdiff_t v = 0; v < nv; v++) {
                PLANAR_VEC a;
                memcpy(&a, x0 + v * PLANAR_LANES, sizeof a);
                acc[v] += a * w[i];
            }
        }
    }
    FD_UNROLL_BY(8)
    for (ptrdiff_t v = 0; v < nv; v++) acc[v] += odd[v];
    memcpy(out, acc, (size_t)nv * sizeof(PLANAR_VEC));
}

/* no (2..PLANAR_MAX_OUTPUTS) outputs of one group at once, nv vectors each (at most
 * PLANAR_OUTPUT_VECTORS(no); constants where inlined): the input vectors are loaded once for all of them.
 * Output oo's weights start wstride after oo - 1's. The first `count` pixels go to y, pixel v's no
 * outputs at y + v*y_step, one pixel after the other (its outputs are adjacent in memory). */
FD_TARGET static FD_FORCE_INLINE void FD_ISA_FN(planar_block_outputs)(
    ptrdiff_t no, ptrdiff_t nv, FD_REAL *FD_RESTRICT y, ptrdiff_t y_step, ptrdiff_t count, const FD_REAL *b,
    const FD_REAL *const *tap_x, const FD_REAL *wbase, const ptrdiff_t *tap_w, ptrdiff_t wstride, ptrdiff_t taps,
    ptrdiff_t Cig, ptrdiff_t width, ptrdiff_t shift)
{
    PLANAR_VEC acc[PLANAR_MAX_OUTPUTS][4];
    FD_UNROLL_BY(8)
    for (ptrdiff_t oo = 0; oo < no; oo++)
        FD_UNROLL_BY(4)
        for (ptrdiff_t v = 0; v < nv; v++) acc[oo][v] = (PLANAR_VEC){0} + b[oo];
    for (ptrdiff_t t = 0; t < taps; t++) {
        const FD_REAL *FD_RESTRICT xr = tap_x[t] + shift;
        const FD_REAL *FD_RESTRICT w = wbase + tap_w[t];
        for (ptrdiff_t i = 0; i < Cig; i++) {
            const FD_REAL *FD_RESTRICT xc = xr + i * width;
            PLANAR_VEC xv[4];
            FD_UNROLL_BY(4)
            for (ptrdiff_t v = 0; v < nv; v++) memcpy(&xv[v], xc + v * PLANAR_LANES, sizeof xv[v]);
            FD_UNROLL_BY(8)
            for (ptrdiff_t oo = 0; oo < no; oo++) {
                const FD_REAL wi = w[oo * wstride + i];
                FD_UNROLL_BY(4)
                for (ptrdiff_t v = 0; v < nv; v++) acc[oo][v] += xv[v] * wi;
            }
        }
    }
    FD_REAL tmp[PLANAR_MAX_OUTPUTS][4 * PLANAR_LANES];
    FD_UNROLL_BY(8)
    for (ptrdiff_t oo = 0; oo < no; oo++) memcpy(tmp[oo], acc[oo], (size_t)nv * sizeof(PLANAR_VEC));
#if defined(FD_PLANAR_STORE8X16)
    /* float, 8 outputs: transposed in registers, 16 pixels at a time */
    if (sizeof(FD_REAL) == sizeof(float) && PLANAR_LANES == 16 && no == 8) {
        FD_UNROLL_BY(4)
        for (ptrdiff_t v = 0; v < nv; v++)
            FD_PLANAR_STORE8X16((const float *)tmp[0] + v * 16, 4 * PLANAR_LANES, (float *)y + v * 16 * y_step, y_step,
                                count - v * 16 < 16 ? count - v * 16 : 16);
        return;
    }
#endif
    for (ptrdiff_t v = 0; v < count; v++) {
        FD_REAL *FD_RESTRICT d = y + v * y_step;
        FD_UNROLL_BY(8)
        for (ptrdiff_t oo = 0; oo < no; oo++) d[oo] = tmp[oo][v];
    }
}

/* Input row iy of image n, columns [ix_lo, ix_lo + width), its Cin channels from x_row (pixels Cstride
 * apart) transposed into a ring row (Cin, width); columns outside the image are zero. */
FD_TARGET static void FD_ISA_FN(planar_fill)(FD_REAL *FD_RESTRICT dst, const FD_REAL *FD_RESTRICT x_row,
                                             ptrdiff_t W, ptrdiff_t Cin, ptrdiff_t Cstride, ptrdiff_t ix_lo,
                                             ptrdiff_t width)
{
    /* [c_begin, c_end) inside the image, clamped to the row (an input far from the tile reads no column) */
    const ptrdiff_t c_begin = ix_lo >= 0 ? 0 : (-ix_lo < width ? -ix_lo : width);
    ptrdiff_t c_end = ix_lo >= W ? 0 : (W - ix_lo < width ? W - ix_lo : width);
    if (c_end < c_begin) c_end = c_begin;
    for (ptrdiff_t i = 0; i < Cin; i++) {
        FD_REAL *FD_RESTRICT d = dst + i * width;
        for (ptrdiff_t c = 0; c < c_begin; c++) d[c] = 0;
        for (ptrdiff_t c = c_end; c < width; c++) d[c] = 0;
    }
    ptrdiff_t c = c_begin;
#if defined(FD_PLANAR_TRANSPOSE8)
    /* float: 8 columns by 8 channels at a time, transposed in registers */
    if (sizeof(FD_REAL) == sizeof(float) && Cin >= 8) {
        for (; c + 8 <= c_end; c += 8) {
            const float *FD_RESTRICT s = (const float *)(x_row + (ix_lo + c) * Cstride);
            ptrdiff_t i = 0;
            for (; i + 8 <= Cin; i += 8) FD_PLANAR_TRANSPOSE8(s + i, Cstride, (float *)dst + i * width + c, width);
            for (; i < Cin; i++)
                for (ptrdiff_t k = 0; k < 8; k++) dst[i * width + c + k] = (FD_REAL)s[k * Cstride + i];
        }
    }
#endif
    for (; c < c_end; c++) {
        const FD_REAL *FD_RESTRICT s = x_row + (ix_lo + c) * Cstride;
        for (ptrdiff_t i = 0; i < Cin; i++) dst[i * width + c] = s[i];
    }
}

/* case no*16 + nv of the block switch */
#define PLANAR_BLOCK_CASE(nvc) \
    case 16 + nvc: FD_ISA_FN(planar_block)(nvc, tmp, b[0], tap_x, wbase, tap_w, taps, Cig, width, j - j_lo); break;
#define PLANAR_PAIRS_CASE(nvc) \
    case 16 + nvc: FD_ISA_FN(planar_block_pairs)(nvc, tmp, b[0], tap_x, wbase, tap_w, taps, Cig, width, j - j_lo); break;
#define PLANAR_OUTPUTS_CASE(noc, nvc)                                                                          \
    case noc * 16 + nvc:                                                                                     \
        FD_ISA_FN(planar_block_outputs)(noc, nvc, y_row + (r + sW * j) * C + o0, sW * C, count, b, tap_x, wbase, \
                                        tap_w, wstride, taps, Cig, width, j - j_lo);                         \
        break;

FD_TARGET int FD_ISA_FN(planar_rows)(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                                     const FD_REAL *FD_RESTRICT x, const FD_REAL *FD_RESTRICT wp,
                                     const FD_REAL *FD_RESTRICT bias, FD_REAL *FD_RESTRICT y, ptrdiff_t row_begin,
                                     ptrdiff_t row_end, ptrdiff_t col_begin, ptrdiff_t col_end, ptrdiff_t group_begin,
                                     ptrdiff_t group_end, int weights_finite, void *ring)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, Cig = Cin / geo->groups;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, C = geo->out_channels, Cog = C / geo->groups;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, dH = geo->dilation_h, dW = geo->dilation_w;
    const ptrdiff_t pt = geo->pad_top, pl = geo->pad_left;
    if (row_begin < 0 || row_end > geo->batch * Ho || col_begin < 0 || col_end > Wo || col_begin % sW != 0 ||
        group_begin < 0 || group_end > geo->groups || kH * kW > FD_PLANAR_MAX_TAPS)
        return FD_ERR_ARGUMENT;
    if (row_begin >= row_end || col_begin >= col_end || group_begin >= group_end) return FD_OK;
    /* the tile's groups as groups 0 .. group_count - 1: their inputs, weights, bias and outputs from here */
    const ptrdiff_t group_count = group_end - group_begin, Cib = group_count * Cig;   /* Cib: the ring's channels */
    x += group_begin * Cig;
    wp += group_begin * Cog * kH * kW * Cig;
    if (bias) bias += group_begin * Cog;
    y += group_begin * Cog;

    const ptrdiff_t R = fd_planar_ring_rows(geo), width = fd_planar_ring_width(geo, col_end - col_begin);
    ptrdiff_t *tags = (ptrdiff_t *)ring;
    FD_REAL *data = (FD_REAL *)((char *)ring + fd_planar_tags_bytes(geo));
    for (ptrdiff_t s = 0; s < R; s++) tags[s] = -1;

    /* the ring rows start at input column ix_lo: the smallest any tap of the tile reads */
    const ptrdiff_t j_lo = col_begin / sW;
    ptrdiff_t min_off = 0, any = 0;
    for (ptrdiff_t r = 0; r < sW; r++) {
        const ptrdiff_t *kx_list = taps_x + r * (1 + kW);
        for (ptrdiff_t t = 1; t <= kx_list[0]; t++) {
            const ptrdiff_t off = (r + pl - kx_list[t] * dW) / sW;
            if (!any || off < min_off) min_off = off;
            any = 1;
        }
    }
    const ptrdiff_t ix_lo = j_lo + min_off;

    const FD_REAL *row_data[FD_MAX_PHASE_TAPS];
    ptrdiff_t row_ky[FD_MAX_PHASE_TAPS];
    const FD_REAL *tap_x[FD_PLANAR_MAX_TAPS];
    ptrdiff_t tap_w[FD_PLANAR_MAX_TAPS];   /* a tap's weights: wp + o*kH*kW*Cig + tap_w[t] */
    ptrdiff_t tap_off[FD_PLANAR_MAX_TAPS];
    FD_REAL tmp[PLANAR_VECTORS * PLANAR_LANES];

    for (ptrdiff_t q = row_begin; q < row_end; q++) {   /* q = n*Ho + oy */
        const ptrdiff_t n = q / Ho, oy = q % Ho, ry = oy % sH, jy = oy / sH;
        const ptrdiff_t *ky_list = taps_y + ry * (1 + kH);
        ptrdiff_t rows = 0;
        for (ptrdiff_t t = 1; t <= ky_list[0]; t++) {
            const ptrdiff_t ky = ky_list[t], iy = jy + (ry + pt - ky * dH) / sH;   /* exact division */
            if (iy < 0 || iy >= H) continue;
            const ptrdiff_t slot = iy % R;
            FD_REAL *slot_data = data + slot * Cib * width;
            if (tags[slot] != n * H + iy) {
                FD_ISA_FN(planar_fill)(slot_data, x + (n * H + iy) * W * Cin, W, Cib, Cin, ix_lo, width);
                tags[slot] = n * H + iy;
            }
            row_data[rows] = slot_data;
            row_ky[rows++] = ky;
        }
        FD_REAL *FD_RESTRICT y_row = y + q * Wo * C;
        const ptrdiff_t wstride = kH * kW * Cig;   /* between one output channel's weights and the next's */
        for (ptrdiff_t g = 0; g < group_count; g++)
            for (ptrdiff_t r = 0; r < sW && r < Wo; r++) {
                const ptrdiff_t j_hi = (col_end - r + sW - 1) / sW;
                if (j_hi <= j_lo) continue;
                const ptrdiff_t *kx_list = taps_x + r * (1 + kW);
                ptrdiff_t taps = 0, off_min = 0, off_max = 0;
                for (ptrdiff_t i = 0; i < rows; i++)
                    for (ptrdiff_t t = 1; t <= kx_list[0]; t++) {
                        const ptrdiff_t kx = kx_list[t], off = (r + pl - kx * dW) / sW;
                        if (taps == 0 || off < off_min) off_min = off;
                        if (taps == 0 || off > off_max) off_max = off;
                        tap_off[taps] = off;
                        tap_x[taps] = row_data[i] + g * Cig * width + (j_lo + off - ix_lo);
                        tap_w[taps++] = (row_ky[i] * kW + kx) * Cig;
                    }
                /* Pixels [ja, jb) run in vector blocks: those with every tap inside the image, or all of them
                   when every weight is finite. There a tap outside the image reads the ring's zero columns,
                   whose products are +-0 and leave every sum as it is, but the sign of a zero: -0 + +0 is
                   +0. Otherwise the border pixels skip their taps outside the image one by one: those
                   must not multiply anything (0 * Inf = NaN where the formula has no term). */
                ptrdiff_t ja = j_lo > -off_min ? j_lo : -off_min, jb = j_hi < W - off_max ? j_hi : W - off_max;
                if (weights_finite) {
                    ja = j_lo;
                    jb = j_hi;
                }
                if (jb < ja) jb = ja = j_hi;
                for (ptrdiff_t o = g * Cog; o < (g + 1) * Cog; o++)
                    for (ptrdiff_t j = j_lo; j < j_hi; j++) {
                        if (j == ja) j = jb;
                        if (j >= j_hi) break;
                        FD_REAL acc = bias ? bias[o] : (FD_REAL)0;
                        for (ptrdiff_t t = 0; t < taps; t++) {
                            if (j + tap_off[t] < 0 || j + tap_off[t] >= W) continue;
                            const FD_REAL *xc = tap_x[t] + (j - j_lo), *w = wp + o * wstride + tap_w[t];
                            for (ptrdiff_t i = 0; i < Cig; i++) acc += xc[i * width] * w[i];
                        }
                        y_row[(r + sW * j) * C + o] = acc;
                    }
                if (jb <= ja) continue;
                /* up to PLANAR_MAX_OUTPUTS outputs at once over one load of the input vectors (blocks of
                   PLANAR_MAX_OUTPUTS, then up to 4); the run in blocks of equal whole vectors */
                const ptrdiff_t vectors = (jb - ja + PLANAR_LANES - 1) / PLANAR_LANES;
                for (ptrdiff_t o0 = g * Cog; o0 < (g + 1) * Cog;) {
                    const ptrdiff_t left = (g + 1) * Cog - o0;
                    const ptrdiff_t no = left >= PLANAR_MAX_OUTPUTS ? PLANAR_MAX_OUTPUTS : left < 4 ? left : 4;
                    const ptrdiff_t most = no == 1 ? PLANAR_VECTORS : PLANAR_OUTPUT_VECTORS(no);
                    const ptrdiff_t blocks = (vectors + most - 1) / most;
                    const ptrdiff_t step = (vectors + blocks - 1) / blocks * PLANAR_LANES;
                    const FD_REAL *wbase = wp + o0 * wstride;
                    FD_REAL b[PLANAR_MAX_OUTPUTS];
                    for (ptrdiff_t oo = 0; oo < no; oo++) b[oo] = bias ? bias[o0 + oo] : (FD_REAL)0;
                    for (ptrdiff_t j = ja; j < jb; j += step) {
                        const ptrdiff_t count = jb - j < step ? jb - j : step;
                        const ptrdiff_t nv = (count + PLANAR_LANES - 1) / PLANAR_LANES;
                        switch (no * 16 + nv) {
                            PLANAR_PAIRS_CASE(1)
                            PLANAR_PAIRS_CASE(2)
                            PLANAR_PAIRS_CASE(3)
                            PLANAR_PAIRS_CASE(4)
                            PLANAR_BLOCK_CASE(5)
                            PLANAR_BLOCK_CASE(6)
                            PLANAR_BLOCK_CASE(7)
                            PLANAR_BLOCK_CASE(8)
                            PLANAR_OUTPUTS_CASE(2, 1)
                            PLANAR_OUTPUTS_CASE(2, 2)
                            PLANAR_OUTPUTS_CASE(2, 3)
                            PLANAR_OUTPUTS_CASE(2, 4)
                            PLANAR_OUTPUTS_CASE(3, 1)
                            PLANAR_OUTPUTS_CASE(3, 2)
                            PLANAR_OUTPUTS_CASE(4, 1)
                            PLANAR_OUTPUTS_CASE(4, 2)
                            PLANAR_OUTPUTS_CASE(3, 3)
                            PLANAR_OUTPUTS_CASE(4, 3)
#if PLANAR_MAX_OUTPUTS >= 8
                            PLANAR_OUTPUTS_CASE(3, 4)
                            PLANAR_OUTPUTS_CASE(4, 4)
                            PLANAR_OUTPUTS_CASE(8, 1)
                            PLANAR_OUTPUTS_CASE(8, 2)
                            PLANAR_OUTPUTS_CASE(8, 3)
#endif
                            default: return FD_ERR_ARGUMENT;
                        }
                        if (no == 1)
                            for (ptrdiff_t v = 0; v < count; v++) y_row[(r + sW * (j + v)) * C + o0] = tmp[v];
                    }
                    o0 += no;
                }
            }
    }
    return FD_OK;
}

#undef PLANAR_BLOCK_CASE
#undef PLANAR_PAIRS_CASE
#undef PLANAR_OUTPUTS_CASE
#undef PLANAR_LANES
#undef PLANAR_VEC
#undef PLANAR_VECTORS
#undef PLANAR_MAX_OUTPUTS
#undef PLANAR_OUTPUT_VECTORS
