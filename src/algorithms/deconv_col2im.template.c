/* Algorithm "col2im": transposed convolution as GEMM + col2im (an algorithm template, see
 * algorithm.h). Runs any layer; the baseline the others are tested against.
 *
 * For each group g and a chunk of input pixels P (rows of the NHWC input):
 *   col[p, (ky, kx, o)] = sum_i x[p, g*Cig + i] * w[g*Cig + i, ky, kx, o]
 *   GEMM shape (|P|, Cig) @ (Cig, kH*kW*Cog); the weight's group slice is already
 *   a contiguous (Cig, kH*kW*Cog) matrix, packed once per layer.
 * then col2im scatter-adds each col[p, ky, kx, :] (Cog contiguous values) into
 *   y[n, iy*sH - pad_top + ky*dH, ix*sW - pad_left + kx*dW, g*Cog : (g+1)*Cog].
 *
 * Threads work on disjoint bands of output rows, so the scatter never races: a
 * band recomputes the few input rows it shares with its neighbours (at most
 * ceil(dH*(kH-1)/sH) rows per band edge).
 *
 * Task: (image n, output rows [row_begin, row_end)). Workspace: the column buffer, chunk input
 * pixels of a block of the kH*kW*Cog columns (all of them unless one pixel's columns are large), and
 * chunk pointers each for the GEMM's A and C rows (and, for an exact cover, the bias repeated per tap).
 * A chunk is whole input rows when a row fits, else a piece of one row (FD_COL2IM_WORKSPACE_BYTES), so
 * the workspace grows with neither the image nor the weight. Pieces are taken in pixel order and an
 * output element's terms all come from one column, so every output element receives its terms in the
 * same order either way: the result depends on neither the chunk nor the block.
 */
#if defined(FD_ALGORITHM_SHARED)

#include <string.h>

#include "algorithm.h"
#include "kernels/gemm.h"

static const char *col2im_unsupported(const fd_geometry *geo) {
    (void)geo;
    return NULL;
}

/* The column buffer holds `chunk` pixels of `block` columns. block = kH*kW*Cog when
 * FD_COL2IM_MIN_PIXELS pixels of it fit in FD_COL2IM_WORKSPACE_BYTES; else the columns are cut into
 * blocks of a whole number of packed panels, so the buffer never outgrows that size, whatever the
 * weight's size. */
static ptrdiff_t col2im_column_block(const fd_geometry *geo, size_t itemsize) {
    const ptrdiff_t taps_cols = geo->kernel_h * geo->kernel_w * (geo->out_channels / geo->groups);
    const ptrdiff_t fitting = (ptrdiff_t)(FD_COL2IM_WORKSPACE_BYTES / (itemsize * FD_COL2IM_MIN_PIXELS))
                              / FD_GEMM_COLUMN_ALIGN * FD_GEMM_COLUMN_ALIGN;
    return taps_cols <= fitting ? taps_cols : fitting;
}

/* Whether every output element receives exactly one term: a kernel equal to the stride, dilation 1 (the
 * taps of neighbouring input pixels tile the output without overlap), and every output row and column
 * within reach of an input pixel (no output_padding beyond the input). The GEMM then adds the bias and the
 * scatter copies its columns, instead of adding them to an output filled with the bias first. */
static int col2im_exact_cover(const fd_geometry *geo) {
    return geo->kernel_h == geo->stride_h && geo->kernel_w == geo->stride_w && geo->dilation_h == 1 &&
           geo->dilation_w == 1 && (geo->out_h - 1 + geo->pad_top) / geo->stride_h < geo->in_h &&
           (geo->out_w - 1 + geo->pad_left) / geo->stride_w < geo->in_w;
}

static fd_workspace col2im_workspace(const fd_geometry *geo, int dtype) {
    const size_t itemsize = fd_itemsize(dtype);
    const ptrdiff_t block = col2im_column_block(geo, itemsize);
    fd_workspace ws;
    ws.chunk = (ptrdiff_t)(FD_COL2IM_WORKSPACE_BYTES / (itemsize * (size_t)(block > 0 ? block : 1)));
    if (ws.chunk < FD_COL2IM_MIN_PIXELS) ws.chunk = FD_COL2IM_MIN_PIXELS;
    /* pointers first, so that they are aligned whatever the element count */
    ws.bytes = (size_t)ws.chunk * (2 * sizeof(void *) + (size_t)block * itemsize);
    /* an exact cover's bias, repeated for every tap: the GEMM's bias (deconv_col2im_band) */
    if (col2im_exact_cover(geo)) ws.bytes += (size_t)block * itemsize;
    return ws;
}

/* Bands of output rows, at least as tall (in input rows) as the input rows each band edge recomputes when
 * the taps of neighbouring input rows overlap: the runner's finer cuts for many threads gave the k4-k9
 * heads bands of 2 output rows, each computing the GEMM of 2.5-3.5 input rows for one row's output. */
static ptrdiff_t col2im_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    const ptrdiff_t reach = geo->dilation_h * (geo->kernel_h - 1), sH = geo->stride_h;
    const ptrdiff_t least = reach >= sH ? sH * fd_ceil_div(reach, sH) : 1;
    return fd_image_bands(geo, threads, least, tasks);
}

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_ALGORITHM(col2im, 1)

#else

/* Pixels [q_from, q_to) of col2im_copy_rows's row: only their taps inside the output row. */
static void FD_FN(col2im_copy_ends)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT src_row, ptrdiff_t N,
                                    ptrdiff_t ix0, ptrdiff_t q_from, ptrdiff_t q_to, FD_REAL *FD_RESTRICT dst_row)
{
    const ptrdiff_t Wo = geo->out_w, Cout = geo->out_channels, Cog = Cout / geo->groups, kW = geo->kernel_w;
    for (ptrdiff_t q = q_from; q < q_to; q++) {
        const ptrdiff_t ox0 = (ix0 + q) * geo->stride_w - geo->pad_left;
        for (ptrdiff_t kx = 0; kx < kW; kx++) {
            if (ox0 + kx < 0 || ox0 + kx >= Wo) continue;
            FD_REAL *FD_RESTRICT dst = dst_row + (ox0 + kx) * Cout;
            const FD_REAL *FD_RESTRICT run = src_row + q * N + kx * Cog;
            memcpy(dst, run, (size_t)Cog * sizeof(FD_REAL));
        }
    }
}

/* The scatter of an exact cover (col2im_exact_cover: each column an output element's only term, the bias
 * included by the GEMM), a copy, by rows: for the chunk of `rows` input rows from iy0, `piece` pixels each
 * from ix0, col holds every pixel's kH*kW*Cog columns. Pixel ix's taps of row ky are the output pixels
 * [ix*sW - pad_left, + kW) of row iy*sH - pad_top + ky: the taps of consecutive pixels tile the row, so
 * only the pixels at its ends, cropped by the padding, need bounds; the others copy runs of kW*Cog
 * columns. (Overlapping taps are added pixel by pixel instead, col2im_add_rows: along one tap row, each
 * pixel's run would read what the previous one's had just written, a store-forwarding stall per pixel.) */
static void FD_FN(col2im_copy_rows)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT col, ptrdiff_t rows,
                                    ptrdiff_t iy0, ptrdiff_t ix0, ptrdiff_t piece, ptrdiff_t g,
                                    FD_REAL *FD_RESTRICT y_image, ptrdiff_t oy_begin, ptrdiff_t oy_end)
{
    const ptrdiff_t Wo = geo->out_w, Cout = geo->out_channels, Cog = Cout / geo->groups;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, sW = geo->stride_w, pl = geo->pad_left;
    const ptrdiff_t N = kH * kW * Cog, run_length = kW * Cog, dst_step = sW * Cout;
    /* pixels q in [q_lo, q_hi) of the piece have all kW taps inside the row: 0 <= ix*sW - pl, ix*sW - pl + kW <= Wo */
    ptrdiff_t q_lo = fd_ceil_div(pl, sW) - ix0, q_hi = fd_floor_div(Wo - kW + pl, sW) + 1 - ix0;
    if (q_lo < 0) q_lo = 0;
    if (q_hi > piece) q_hi = piece;
    if (q_hi < q_lo) q_hi = q_lo;
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t ky = 0; ky < kH; ky++) {
            const ptrdiff_t oy = (iy0 + r) * geo->stride_h - geo->pad_top + ky;
            if (oy < oy_begin || oy >= oy_end) continue;
            FD_REAL *FD_RESTRICT dst_row = y_image + oy * Wo * Cout + g * Cog;
            const FD_REAL *FD_RESTRICT src_row = col + r * piece * N + ky * run_length;
            FD_FN(col2im_copy_ends)(geo, src_row, N, ix0, 0, q_lo, dst_row);
            FD_REAL *FD_RESTRICT dst = dst_row + ((ix0 + q_lo) * sW - pl) * Cout;
            const FD_REAL *FD_RESTRICT run = src_row + q_lo * N;
            if (Cog == Cout) {
                /* runs of kW*Cout columns; a few elements (a head's 1-4 outputs) in copies of a constant size */
                const size_t bytes = (size_t)run_length * sizeof(FD_REAL);
                switch (bytes) {
#define COL2IM_COPY_CASE(size)                                                                  \
    case size:                                                                                  \
        for (ptrdiff_t q = q_lo; q < q_hi; q++, dst += dst_step, run += N) memcpy(dst, run, size); \
        break;
                    COL2IM_COPY_CASE(8)
                    COL2IM_COPY_CASE(12)
                    COL2IM_COPY_CASE(16)
                    COL2IM_COPY_CASE(24)
                    COL2IM_COPY_CASE(32)
                    COL2IM_COPY_CASE(48)
                    COL2IM_COPY_CASE(64)
#undef COL2IM_COPY_CASE
                    default:
                        for (ptrdiff_t q = q_lo; q < q_hi; q++, dst += dst_step, run += N) memcpy(dst, run, bytes);
                }
            } else {
                for (ptrdiff_t q = q_lo; q < q_hi; q++, dst += dst_step, run += N)
                    for (ptrdiff_t kx = 0; kx < kW; kx++)
                        memcpy(dst + kx * Cout, run + kx * Cog, (size_t)Cog * sizeof(FD_REAL));
            }
            FD_FN(col2im_copy_ends)(geo, src_row, N, ix0, q_hi, piece, dst_row);
        }
}

/* The scatter-add of a chunk with one group and adjacent taps along W (G == 1, dilation_w 1: a pixel's
 * taps of row ky are kW*C_out consecutive output elements from ix*sW - pad_left), all its columns in one
 * block: pixel by pixel (overlapping runs of neighbouring pixels would otherwise wait on each other's
 * stores), each input row's taps ky that land in [oy_begin, oy_end) found once, and only the pixels at a
 * row's ends clipped. The terms reach each element in pixel order, as in the general loop. */
static void FD_FN(col2im_add_rows)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT col, ptrdiff_t rows,
                                   ptrdiff_t iy0, ptrdiff_t ix0, ptrdiff_t piece, FD_REAL *FD_RESTRICT y_image,
                                   ptrdiff_t oy_begin, ptrdiff_t oy_end)
{
    const ptrdiff_t Wo = geo->out_w, Cout = geo->out_channels, kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sW = geo->stride_w, pl = geo->pad_left, dH = geo->dilation_h;
    const ptrdiff_t run_length = kW * Cout, N = kH * run_length, row_step = dH * Wo * Cout;
    for (ptrdiff_t r = 0; r < rows; r++) {
        const ptrdiff_t oy_first = (iy0 + r) * geo->stride_h - geo->pad_top;   /* the row of tap ky = 0 */
        ptrdiff_t ky_lo = oy_first >= oy_begin ? 0 : fd_ceil_div(oy_begin - oy_first, dH);
        ptrdiff_t ky_hi = oy_end - 1 >= oy_first ? fd_floor_div(oy_end - 1 - oy_first, dH) + 1 : 0;
        if (ky_hi > kH) ky_hi = kH;
        if (ky_lo >= ky_hi) continue;
        FD_REAL *FD_RESTRICT first_row = y_image + (oy_first + ky_lo * dH) * Wo * Cout;
        const FD_REAL *FD_RESTRICT src = col + r * piece * N + ky_lo * run_length;
        for (ptrdiff_t q = 0; q < piece; q++, src += N) {
            const ptrdiff_t ox0 = (ix0 + q) * sW - pl;
            /* the taps inside the row, kx in [kx_lo, kx_hi): offsets [e_lo, e_hi) of the run */
            const ptrdiff_t kx_lo = ox0 >= 0 ? 0 : -ox0, kx_hi = Wo - ox0 < kW ? Wo - ox0 : kW;
            if (kx_lo >= kx_hi) continue;
            const ptrdiff_t e_lo = kx_lo * Cout, count = (kx_hi - kx_lo) * Cout;
            FD_REAL *FD_RESTRICT dst = first_row + ox0 * Cout + e_lo;
            const FD_REAL *FD_RESTRICT run = src + e_lo;
            for (ptrdiff_t ky = ky_lo; ky < ky_hi; ky++, dst += row_step, run += run_length)
                for (ptrdiff_t e = 0; e < count; e++) dst[e] += run[e];
        }
    }
}

static int FD_FN(deconv_col2im_band)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x, const void *packed, const FD_REAL *FD_RESTRICT bias,
                              FD_REAL *FD_RESTRICT y, ptrdiff_t n, ptrdiff_t oy_begin, ptrdiff_t oy_end,
                              FD_REAL *FD_RESTRICT col, ptrdiff_t col_pixels, ptrdiff_t block,
                              const FD_REAL **a_rows, FD_REAL **c_rows, FD_REAL *FD_RESTRICT tap_bias)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, dH = geo->dilation_h, dW = geo->dilation_w;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const ptrdiff_t taps_cols = kH * kW * Cog;
    if (col_pixels < 1 || oy_begin < 0 || oy_end > Ho || oy_begin >= oy_end) return FD_ERR_WORKSPACE;
    if (taps_cols > 0 && (block < 1 || (block < taps_cols && block % FD_GEMM_COLUMN_ALIGN != 0)))
        return FD_ERR_WORKSPACE;

    FD_REAL *y_image = y + n * Ho * Wo * Cout;
    const int assign = Cig > 0 && taps_cols > 0 && col2im_exact_cover(geo) && block == taps_cols;
    /* Rows start as the bias: one call per row (GCC makes the pixel loop below a memmove per pixel, which
       for a head of 1-4 outputs cost a fifth of the layer), the band's first row filled pixel by pixel. */
    const FD_REAL *bias_row = NULL;
    for (ptrdiff_t oy = oy_begin; oy < oy_end && !assign; oy++) {
        FD_REAL *row = y_image + oy * Wo * Cout;
        if (bias == NULL) {
            memset(row, 0, (size_t)(Wo * Cout) * sizeof(FD_REAL));
        } else if (bias_row != NULL) {
            memcpy(row, bias_row, (size_t)(Wo * Cout) * sizeof(FD_REAL));
        } else {
            for (ptrdiff_t ox = 0; ox < Wo; ox++)
                for (ptrdiff_t c = 0; c < Cout; c++) row[ox * Cout + c] = bias[c];
            bias_row = row;
        }
    }
    if (Cig == 0 || taps_cols == 0) return FD_OK;

    /* Input rows whose taps can land in [oy_begin, oy_end). */
    ptrdiff_t iy_first = fd_ceil_div(oy_begin + geo->pad_top - (kH - 1) * dH, sH);
    ptrdiff_t iy_last = fd_floor_div(oy_end - 1 + geo->pad_top, sH);
    if (iy_first < 0) iy_first = 0;
    if (iy_last > H - 1) iy_last = H - 1;
    /* A chunk: rows_per_chunk whole rows, or (a row longer than the buffer) pieces of `width` pixels. */
    const ptrdiff_t rows_per_chunk = col_pixels >= W ? col_pixels / W : 1;
    const ptrdiff_t width = col_pixels >= W ? W : col_pixels;

    for (ptrdiff_t iy0 = iy_first; iy0 <= iy_last; iy0 += rows_per_chunk) {
        const ptrdiff_t rows = iy_last - iy0 + 1 < rows_per_chunk ? iy_last - iy0 + 1 : rows_per_chunk;
        for (ptrdiff_t ix0 = 0; ix0 < W; ix0 += width) {
            const ptrdiff_t piece = W - ix0 < width ? W - ix0 : width;   /* == W when rows > 1 */
            const ptrdiff_t M = rows * piece;
            for (ptrdiff_t g = 0; g < G; g++)
            for (ptrdiff_t c0 = 0; c0 < taps_cols; c0 += block) {
                /* columns [c0, c1) of (ky, kx, o), o fastest; c0 is a whole number of packed panels */
                const ptrdiff_t c1 = taps_cols - c0 < block ? taps_cols : c0 + block;
                const FD_REAL *x_first = x + ((n * H + iy0) * W + ix0) * Cin + g * Cig;
                for (ptrdiff_t p = 0; p < M; p++) {
                    a_rows[p] = x_first + p * Cin;   /* rows > 1 only with whole rows: consecutive pixels */
                    c_rows[p] = col + p * (c1 - c0);
                }
                /* an exact cover's columns are their outputs' only terms: the GEMM adds the bias */
                if (assign && bias != NULL)
                    for (ptrdiff_t c = 0; c < taps_cols; c++) tap_bias[c] = bias[g * Cog + c % Cog];
                FD_FN(gemm_indirect)((size_t)M, (size_t)(c1 - c0), 1, (size_t)Cig, a_rows,
                                     (const FD_REAL *)fd_blob_part(packed, (size_t)g) + Cig * c0,
                                     assign && bias != NULL ? tap_bias : NULL, c_rows, 0);
                if (assign) {   /* block == taps_cols: c0 == 0 */
                    FD_FN(col2im_copy_rows)(geo, col, rows, iy0, ix0, piece, g, y_image, oy_begin, oy_end);
                    continue;
                }
                if (G == 1 && dW == 1 && block == taps_cols) {
                    FD_FN(col2im_add_rows)(geo, col, rows, iy0, ix0, piece, y_image, oy_begin, oy_end);
                    continue;
                }
                const ptrdiff_t ky_lo = c0 / (kW * Cog), ky_hi = (c1 - 1) / (kW * Cog) + 1;
                /* pixel p is (iy, ix0 + q): counted along, not divided out per pixel */
                for (ptrdiff_t p = 0, q = 0, iy = iy0; p < M; p++, q = q + 1 < piece ? q + 1 : (iy++, 0)) {
                    const ptrdiff_t ix = ix0 + q;
                    /* the taps kx whose column lands inside the output, ox = ix*sW - pad_left + kx*dW:
                       [kx_lo, kx_hi), clamped to [0, kW] before anything is multiplied by it */
                    const ptrdiff_t ox0 = ix * sW - geo->pad_left;
                    /* (dilation 1 spelled out: a division per pixel costs more than a narrow pixel's scatter) */
                    ptrdiff_t kx_lo = ox0 >= 0 ? 0 : dW == 1 ? -ox0 : fd_ceil_div(-ox0, dW);
                    ptrdiff_t kx_hi = (dW == 1 ? Wo - 1 - ox0 : fd_floor_div(Wo - 1 - ox0, dW)) + 1;
                    if (kx_hi > kW) kx_hi = kW;
                    if (kx_lo >= kx_hi) continue;   /* also every pixel with |ox0| beyond the output */
                    const FD_REAL *FD_RESTRICT col_row = col + p * (c1 - c0);   /* column c at col_row[c - c0] */
                    for (ptrdiff_t ky = ky_lo; ky < ky_hi; ky++) {
                        const ptrdiff_t oy = iy * sH - geo->pad_top + ky * dH;
                        if (oy < oy_begin || oy >= oy_end) continue;
                        /* this row's columns of the taps [kx_lo, kx_hi) that the block holds, as
                           offsets e = kx*Cog + o into the row */
                        const ptrdiff_t row_first = ky * kW * Cog;
                        ptrdiff_t e_lo = kx_lo * Cog, e_hi = kx_hi * Cog;
                        if (e_lo < c0 - row_first) e_lo = c0 - row_first;
                        if (e_hi > c1 - row_first) e_hi = c1 - row_first;
                        if (e_lo >= e_hi) continue;
                        const ptrdiff_t shift = row_first - c0;   /* offset e is col_row[shift + e] */
                        FD_REAL *FD_RESTRICT dst_row = y_image + oy * Wo * Cout + g * Cog;
                        if (dW == 1 && G == 1) {
                            /* consecutive taps hit consecutive pixels: offset e lands at output
                               element ox0*Cout + e of the row, one contiguous run */
                            FD_REAL *FD_RESTRICT dst = dst_row + (ox0 * Cout + e_lo);
                            const FD_REAL *FD_RESTRICT run = col_row + (shift + e_lo);
                            for (ptrdiff_t e = 0; e < e_hi - e_lo; e++) dst[e] += run[e];
                            continue;
                        }
                        for (ptrdiff_t kx = e_lo / Cog; kx * Cog < e_hi; kx++) {
                            const ptrdiff_t o_lo = e_lo > kx * Cog ? e_lo - kx * Cog : 0;
                            const ptrdiff_t o_hi = e_hi < (kx + 1) * Cog ? e_hi - kx * Cog : Cog;
                            for (ptrdiff_t o = o_lo; o < o_hi; o++) dst_row[(ox0 + kx * dW) * Cout + o] += col_row[shift + kx * Cog + o];
                        }
                    }
                }
            }
        }
    }
    return FD_OK;
}

/* Blob parts: the (Cig, kH*kW*Cog) matrix of each group, packed; the weight's group slice is
 * already that matrix, row-major. */
static int FD_FN(col2im_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t G = geo->groups, Cig = geo->in_channels / G;
    const ptrdiff_t taps_cols = geo->kernel_h * geo->kernel_w * (geo->out_channels / G);
    fd_blob b;
    fd_blob_begin(&b, blob, (size_t)G);
    for (ptrdiff_t g = 0; g < G; g++) {
        const size_t size = FD_FN(gemm_packed_size)((size_t)Cig, (size_t)taps_cols);
        FD_REAL *packed = (FD_REAL *)fd_blob_add(&b, (size_t)g, size * sizeof(FD_REAL));
        if (packed != NULL && size > 0)
            FD_FN(gemm_pack_b)((size_t)Cig, (size_t)taps_cols, (const FD_REAL *)weight + g * Cig * taps_cols,
                               taps_cols, 1, packed);
    }
    *bytes = b.size;
    return FD_OK;
}

static int FD_FN(col2im_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    const FD_REAL **a_rows = (const FD_REAL **)workspace;
    FD_REAL **c_rows = (FD_REAL **)(a_rows + op->chunk);
    FD_REAL *col = (FD_REAL *)(c_rows + op->chunk);
    const ptrdiff_t block = col2im_column_block(op->geo, sizeof(FD_REAL));
    return FD_FN(deconv_col2im_band)(op->geo, (const FD_REAL *)op->x, op->packed, (const FD_REAL *)op->bias,
                                     (FD_REAL *)op->y, t->part, t->row_begin, t->row_end, col, op->chunk, block,
                                     a_rows, c_rows, col + op->chunk * block);
}

#endif
