/* Algorithm "phase": transposed convolution by stride-phase ("sub-pixel") decomposition
 * (an algorithm template, see algorithm.h).
 *
 * Output row oy only receives taps ky with (oy + pad_top - ky*dH) divisible by sH, and
 * which taps those are depends only on the phase ry = oy mod sH (likewise columns).
 * So each of the sH*sW output phases is an ordinary stride-1 correlation with a
 * sub-kernel of Ty(ry)*Tx(rx) taps, computed as one indirect GEMM per phase and group:
 *   y[p, g*Cog + o] = bias + sum_{t=(ky,kx)} sum_i x[n, iy_t(p), ix_t(p), g*Cig + i] * w[g*Cig + i, ky, kx, o]
 *   iy_t = (oy + pad_top - ky*dH) / sH   (exact),  the tap left out where it falls outside the image
 *   GEMM shape (|P|, Ty*Tx*Cig) @ (Ty*Tx*Cig, Cog), B packed once per (group, phase).
 * A tap outside the image gets a NULL A row, which the GEMM skips (FD_GEMM_SKIP_NULL), rather than
 * a row of zeros: 0 * Inf = NaN, so one infinite weight would turn every border pixel into NaN
 * where the formula has no such term.
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
 * col_begin must be a multiple of FD_GEMM_COLUMN_ALIGN (B's packed panels start there). The column
 * phases computed are [rx_begin, rx_end) (all of them for this algorithm; "winograd" computes some itself).
 *
 * taps_y: sH rows of (1 + kH) entries: the count Ty(ry), then the ky values (ascending);
 * taps_x likewise. B's K index is (ty*Tx + tx)*Cig + i, matching a_rows[m*T + ty*Tx + tx].
 */
#if defined(FD_ALGORITHM_SHARED)

#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "kernels/gemm.h"

/* Phase tap tables live on the stack of the kernel, and B is packed per (group, phase). */
#define FD_PHASE_MAX_STRIDE 32

static const char *phase_unsupported(const fd_geometry *geo) {
    if (geo->kernel_h > FD_MAX_PHASE_TAPS || geo->kernel_w > FD_MAX_PHASE_TAPS)
        return "its kernel sides are limited to FD_MAX_PHASE_TAPS = 256";
    if (geo->stride_h > FD_PHASE_MAX_STRIDE || geo->stride_w > FD_PHASE_MAX_STRIDE)
        return "its strides are limited to 32 (it packs groups*sH*sW sub-kernels)";
    return NULL;
}

/* One (row phase, column phase): its taps' input offsets (input row jy + base_y[ty] for phase row
 * jy, likewise columns) and the sizes that place its pixels in x and y. */
typedef struct {
    ptrdiff_t Ty, Tx;
    const ptrdiff_t *base_y, *base_x;
    ptrdiff_t H, W, Cin, Ho, Wo, Cout, ry, sH, sW;
} phase_pixels;

/* Blob parts: the row and column tap tables, then the packed (Ty*Tx*Cig, Cog) sub-kernel of every
 * (group, row phase, column phase). */
enum { PHASE_TAPS_Y, PHASE_TAPS_X, PHASE_MATRICES };

#define phase_workspace fd_indirect_gemm_workspace

/* Per row phase ry: its rows counted across the batch. Threads split the operand that is larger,
 * so the other is the one read twice: B's columns (output channels, in aligned blocks) when the
 * phase has fewer pixels than channels, else the rows. */
static ptrdiff_t phase_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    const ptrdiff_t sH = geo->stride_h, cols = geo->out_channels / geo->groups;
    ptrdiff_t count = 0;
    for (ptrdiff_t ry = 0; ry < sH && ry < geo->out_h; ry++) {
        const ptrdiff_t rows = geo->batch * fd_ceil_div(geo->out_h - ry, sH);
        const ptrdiff_t pixels = rows * fd_ceil_div(geo->out_w, geo->stride_w);
        if (threads > 1 && pixels < cols && cols > FD_GEMM_COLUMN_ALIGN) {
            ptrdiff_t parts = fd_ceil_div(threads, sH);
            if (parts > fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN)) parts = fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN);
            const ptrdiff_t per_part = fd_ceil_div(fd_ceil_div(cols, parts), FD_GEMM_COLUMN_ALIGN) * FD_GEMM_COLUMN_ALIGN;
            for (ptrdiff_t c0 = 0; c0 < cols; c0 += per_part)
                fd_task_add(tasks, &count, ry, 0, rows, c0, c0 + per_part < cols ? c0 + per_part : cols);
        } else {
            fd_row_range_tasks(rows, threads, ry, sH, cols, tasks, &count);
        }
    }
    return count;
}

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_ALGORITHM(phase, 1)

#else

/* Output pixel (image n, phase row jy, phase column jx) of the phase in `p` as one GEMM row: its C
 * row (y_phase: y offset to the phase's column, group and channels) and its Ty*Tx A rows (x_group:
 * x offset to the group), NULL for a tap outside the image. Returns whether there was one. */
static inline int FD_FN(phase_pixel)(const phase_pixels *p, const FD_REAL *x_group, FD_REAL *y_phase, ptrdiff_t n,
                                     ptrdiff_t jy, ptrdiff_t jx, const FD_REAL **a, FD_REAL **c)
{
    const FD_REAL *x_image = x_group + n * p->H * p->W * p->Cin;
    int outside = 0;
    *c = y_phase + ((n * p->Ho + p->ry + jy * p->sH) * p->Wo + jx * p->sW) * p->Cout;
    for (ptrdiff_t ty = 0; ty < p->Ty; ty++) {
        const ptrdiff_t iy = jy + p->base_y[ty];
        const int row_inside = iy >= 0 && iy < p->H;
        for (ptrdiff_t tx = 0; tx < p->Tx; tx++) {
            const ptrdiff_t ix = jx + p->base_x[tx];
            const int inside = row_inside && ix >= 0 && ix < p->W;
            a[ty * p->Tx + tx] = inside ? x_image + (iy * p->W + ix) * p->Cin : NULL;
            outside |= !inside;
        }
    }
    return outside;
}

/* Rows [row_begin, row_end) of row phase ry (counted across the batch), columns [col_begin, col_end) of
 * each of the groups [group_begin, group_end), column phases [rx_begin, rx_end). */
static int FD_FN(deconv_phase_rows)(const fd_geometry *geo, const void *packed, const FD_REAL *FD_RESTRICT x,
                                    const FD_REAL *FD_RESTRICT bias, FD_REAL *FD_RESTRICT y, ptrdiff_t ry,
                                    ptrdiff_t row_begin, ptrdiff_t row_end, ptrdiff_t col_begin, ptrdiff_t col_end,
                                    ptrdiff_t group_begin, ptrdiff_t group_end,
                                    ptrdiff_t rx_begin, ptrdiff_t rx_end, ptrdiff_t chunk_pixels,
                                    const FD_REAL **a_rows, FD_REAL **c_rows)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, dH = geo->dilation_h, dW = geo->dilation_w;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const ptrdiff_t Jy = (Ho - ry + sH - 1) / sH;
    const ptrdiff_t cols = col_end - col_begin;
    const ptrdiff_t *taps_y = (const ptrdiff_t *)fd_blob_part(packed, PHASE_TAPS_Y);
    const ptrdiff_t *taps_x = (const ptrdiff_t *)fd_blob_part(packed, PHASE_TAPS_X);
    if (ry < 0 || ry >= sH || row_begin < 0 || row_end > geo->batch * Jy || chunk_pixels < 1 || col_begin < 0 ||
        col_end > Cog || cols < 0 || col_begin % FD_GEMM_COLUMN_ALIGN != 0 || group_begin < 0 ||
        group_begin > group_end || group_end > G)
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
        for (ptrdiff_t g = group_begin; g < group_end; g++) {
            const FD_REAL *g_bias = bias ? bias + g * Cog + col_begin : NULL;
            for (ptrdiff_t rx = rx_begin; rx < rx_end && rx < sW && rx < Wo; rx++) {
                const ptrdiff_t *kx_list = taps_x + rx * (1 + kW) + 1;
                const ptrdiff_t Tx = kx_list[-1], T = Ty * Tx;
                const ptrdiff_t Jx = (Wo - rx + sW - 1) / sW;
                for (ptrdiff_t tx = 0; tx < Tx; tx++) base_x[tx] = (rx + geo->pad_left - kx_list[tx] * dW) / sW;
                const phase_pixels taps = {Ty, Tx, base_y, base_x, H, W, Cin, Ho, Wo, Cout, ry, sH, sW};
                const FD_REAL *B = (const FD_REAL *)fd_blob_part(packed, PHASE_MATRICES + (size_t)((g * sH + ry) * sW + rx)) +
                                   T * Cig * col_begin;
                for (ptrdiff_t jx0 = 0; jx0 < Jx; jx0 += chunk_pixels) {
                    const ptrdiff_t jx1 = jx0 + chunk_pixels < Jx ? jx0 + chunk_pixels : Jx;
                    /* The chunk's pixels in an order that gives most GEMM row tiles one pattern of
                       taps outside the image: first the interior (rows and columns whose taps all
                       land in the image), then the border columns of the interior rows a column at a
                       time, then the border rows. A tile whose rows all lack a tap skips it; one
                       without a missing tap runs the plain kernel. */
                    ptrdiff_t cx_lo = jx0, cx_hi = jx1, jy_lo = 0, jy_hi = Jy;
                    if (T > 0) {   /* base_* descend with the tap index */
                        cx_lo = -base_x[Tx - 1] > jx0 ? -base_x[Tx - 1] : jx0;
                        cx_hi = W - base_x[0] < jx1 ? W - base_x[0] : jx1;
                        if (cx_lo > jx1) cx_lo = jx1;
                        if (cx_hi < cx_lo) cx_hi = cx_lo;
                        jy_lo = -base_y[Ty - 1];
                        jy_hi = H - base_y[0];
                    }
                    const FD_REAL *x_group = x + g * Cig;
                    FD_REAL *y_phase = y + rx * Cout + g * Cog + col_begin;
                    ptrdiff_t M = 0;
                    int outside = 0;   /* some tap of this chunk falls outside the image */
                    for (int border_rows = 0; border_rows <= 1; border_rows++) {
                        /* image n and phase row jy of row r, stepped rather than divided per row: a 1-D
                           layer (run as rows of one pixel) would pay a division per pixel */
                        ptrdiff_t n = r0 / Jy, jy = r0 % Jy;
                        ptrdiff_t above = -1;   /* the first pixel of row jy - 1 of image n, when interior */
                        for (ptrdiff_t r = r0; r < r1; r++, jy++) {   /* interior columns, row by row */
                            if (jy == Jy) {
                                jy = 0;
                                n++;
                                above = -1;
                            }
                            if ((jy < jy_lo || jy >= jy_hi) != border_rows || cx_lo >= cx_hi) {
                                above = -1;
                                continue;
                            }
                            /* The row's first pixel: the one above it moved one input row down (W·Cin)
                               and sH output rows, where that one was interior too; else in full. Each
                               next pixel is its left neighbour moved by one input pixel (Cin) and sW
                               output pixels: no bounds test per tap in an interior row. */
                            int first_outside = 0;
                            if (above >= 0) {
                                const FD_REAL **a_above = a_rows + above * T, **a_first = a_rows + M * T;
                                for (ptrdiff_t t = 0; t < T; t++) a_first[t] = a_above[t] + W * Cin;
                                c_rows[M] = c_rows[above] + sH * Wo * Cout;
                            } else {
                                first_outside = FD_FN(phase_pixel)(&taps, x_group, y_phase, n, jy, cx_lo,
                                                                   a_rows + M * T, c_rows + M);
                            }
                            outside |= first_outside;
                            above = first_outside ? -1 : M;
                            M++;
                            for (ptrdiff_t jx = cx_lo + 1; jx < cx_hi; jx++, M++) {
                                if (first_outside) {   /* a border row: taps outside in every column */
                                    outside |= FD_FN(phase_pixel)(&taps, x_group, y_phase, n, jy, jx,
                                                                  a_rows + M * T, c_rows + M);
                                    continue;
                                }
                                const FD_REAL **a_prev = a_rows + (M - 1) * T, **a_next = a_rows + M * T;
                                for (ptrdiff_t t = 0; t < T; t++) a_next[t] = a_prev[t] + Cin;
                                c_rows[M] = c_rows[M - 1] + sW * Cout;
                            }
                        }
                        for (ptrdiff_t jx = jx0; jx < jx1; jx++) {   /* border columns, column by column */
                            if (jx == cx_lo) jx = cx_hi;
                            if (jx >= jx1) break;
                            n = r0 / Jy;
                            jy = r0 % Jy;
                            for (ptrdiff_t r = r0; r < r1; r++, jy++) {
                                if (jy == Jy) {
                                    jy = 0;
                                    n++;
                                }
                                if ((jy < jy_lo || jy >= jy_hi) != border_rows) continue;
                                outside |= FD_FN(phase_pixel)(&taps, x_group, y_phase, n, jy, jx, a_rows + M * T,
                                                              c_rows + M);
                                M++;
                            }
                        }
                    }
                    if (T == 0 || Cig == 0) {
                        for (ptrdiff_t m = 0; m < M; m++)
                            for (ptrdiff_t o = 0; o < cols; o++) c_rows[m][o] = g_bias ? g_bias[o] : (FD_REAL)0;
                    } else {
                        FD_FN(gemm_indirect)((size_t)M, (size_t)cols, (size_t)T, (size_t)Cig, a_rows, B, g_bias,
                                             c_rows, outside ? FD_GEMM_SKIP_NULL : 0);
                    }
                }
            }
        }
    }
    return FD_OK;
}

/* Row (ty*Tx + tx)*Cig + i of group g's sub-kernel for phase (ry, rx) is the Cog-vector
 * w[g*Cig + i, ky_ty, kx_tx, :]. */
static int FD_FN(phase_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, sH = geo->stride_h, sW = geo->stride_w;
    const ptrdiff_t G = geo->groups, Cig = geo->in_channels / G, Cog = geo->out_channels / G;
    const size_t taps_y_bytes = (size_t)(sH * (1 + kH)) * sizeof(ptrdiff_t);
    const size_t taps_x_bytes = (size_t)(sW * (1 + kW)) * sizeof(ptrdiff_t);
    /* the tap tables decide every sub-kernel's size, so they are built when measuring too */
    ptrdiff_t *taps_y = (ptrdiff_t *)malloc(taps_y_bytes + taps_x_bytes);
    const FD_REAL **rows = blob ? (const FD_REAL **)malloc((size_t)(kH * kW * Cig + 1) * sizeof(*rows)) : NULL;
    if (taps_y == NULL || (blob != NULL && rows == NULL)) {
        free(taps_y);
        free(rows);
        return FD_ERR_WORKSPACE;
    }
    ptrdiff_t *taps_x = taps_y + sH * (1 + kH);
    fd_phase_taps(sH, kH, geo->dilation_h, geo->pad_top, taps_y);
    fd_phase_taps(sW, kW, geo->dilation_w, geo->pad_left, taps_x);

    fd_blob b;
    fd_blob_begin(&b, blob, PHASE_MATRICES + (size_t)(G * sH * sW));
    void *taps_y_part = fd_blob_add(&b, PHASE_TAPS_Y, taps_y_bytes);
    void *taps_x_part = fd_blob_add(&b, PHASE_TAPS_X, taps_x_bytes);
    if (blob != NULL) {
        memcpy(taps_y_part, taps_y, taps_y_bytes);
        memcpy(taps_x_part, taps_x, taps_x_bytes);
    }
    const FD_REAL *w = (const FD_REAL *)weight;
    for (ptrdiff_t g = 0; g < G; g++)
        for (ptrdiff_t ry = 0; ry < sH; ry++)
            for (ptrdiff_t rx = 0; rx < sW; rx++) {
                const ptrdiff_t *ky = taps_y + ry * (1 + kH) + 1, *kx = taps_x + rx * (1 + kW) + 1;
                const ptrdiff_t Ty = ky[-1], Tx = kx[-1], K = Ty * Tx * Cig;
                const size_t size = K > 0 && Cog > 0 ? FD_FN(gemm_packed_size)((size_t)K, (size_t)Cog) : 0;
                FD_REAL *packed = (FD_REAL *)fd_blob_add(&b, PHASE_MATRICES + (size_t)((g * sH + ry) * sW + rx),
                                                         size * sizeof(FD_REAL));
                if (packed == NULL || size == 0) continue;
                for (ptrdiff_t ty = 0; ty < Ty; ty++)
                    for (ptrdiff_t tx = 0; tx < Tx; tx++)
                        for (ptrdiff_t i = 0; i < Cig; i++)
                            rows[(ty * Tx + tx) * Cig + i] = w + (((g * Cig + i) * kH + ky[ty]) * kW + kx[tx]) * Cog;
                FD_FN(gemm_pack_b_rows)((size_t)K, (size_t)Cog, rows, packed);
            }
    free(taps_y);
    free(rows);
    *bytes = b.size;
    return FD_OK;
}

/* Task: (row phase ry, its rows [row_begin, row_end), output channels [col_begin, col_end)). */
static int FD_FN(phase_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    const FD_REAL **a_rows = (const FD_REAL **)workspace;
    FD_REAL **c_rows = (FD_REAL **)(a_rows + op->chunk * op->geo->kernel_h * op->geo->kernel_w);
    return FD_FN(deconv_phase_rows)(op->geo, op->packed, (const FD_REAL *)op->x, (const FD_REAL *)op->bias,
                                    (FD_REAL *)op->y, t->part, t->row_begin, t->row_end, t->col_begin, t->col_end,
                                    0, op->geo->groups, 0, op->geo->stride_w, op->chunk, a_rows, c_rows);
}

#endif
