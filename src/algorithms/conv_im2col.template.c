/* Algorithm "im2col": convolution as im2col + GEMM (an algorithm template, see algorithm.h).
 *
 * The im2col matrix is never copied: it is an indirection buffer (XNNPACK's
 * "indirect GEMM"), one pointer per (output pixel, tap) to the Cig input
 * channels that tap reads, or to a zero vector where the tap falls in the padding
 * (a convolution's formula reads x as zero there, so 0 * w is one of its terms and
 * 0 * Inf = NaN is right, as in fastdeconv.reference; the transposed convolutions
 * have no such terms and skip their outside taps instead). When every weight is finite,
 * those terms are all zero and are left out (FD_GEMM_SKIP_NULL): a tiny image in a
 * large padded kernel (a U-Net's innermost 4x4 layer on a 2x2 input) reads a quarter of it:
 *   y[p, g*Cog + o] = bias + sum_{t = (ky, kx)} sum_i im2col[p, t, i] * w[g*Cog + o, ky, kx, i]
 *   GEMM shape (|P|, kH*kW*Cig) @ (kH*kW*Cig, Cog) per group; B is the group's
 *   weight slice transposed, packed once per layer (see PackedLayer).
 * With fewer than IM2COL_DENSE_MAX_CIG channels per group, each chunk's rows are copied into a contiguous
 * A (one row of kH*kW*Cig per pixel, zeros in the padding: terms of the formula) and multiplied as one tap;
 * without groups and dilation along W, and below IM2COL_ROW_TAPS_MAX_CIN channels, only the pixels at the
 * image's left and right edges are copied, the others read their kH kernel rows (taps of kW*Cin) in place
 * (im2col_row_taps).
 * Task: (part 0, output rows [row_begin, row_end) counted across the batch: row r is image r / H_out's row
 * r % H_out, output channels [col_begin, col_end) of each group); threads take disjoint bands (of one
 * image, or whole small images: im2col_tasks), or, when the images have fewer pixels than a group has
 * output channels (few pixels, many weights), disjoint column ranges (col_begin a multiple of
 * FD_GEMM_COLUMN_ALIGN, where B's packed panels start). Workspace: chunk*kH*kW pointers for A's rows,
 * chunk for C's.
 */
#if defined(FD_ALGORITHM_SHARED)

#include <string.h>

#include "algorithm.h"
#include "kernels/gemm.h"

static const char *im2col_unsupported(const fd_geometry *geo) {
    (void)geo;
    return NULL;
}

/* Blob parts: whether every weight is finite (an int), Cig zeros (the A row of taps in the padding
 * otherwise), then each group's matrix. */
enum { IM2COL_FINITE, IM2COL_ZEROS, IM2COL_MATRICES };

/* Taps of fewer input channels per group than this are copied, per chunk, into one contiguous A row of
 * kH*kW*Cig elements per pixel (zeros in the padding), and the GEMM runs with one tap of that length: a
 * tap of 3 channels (an RGB input) would fill 3 of a vector's 8-16 lanes and pay a pointer per 3 FMAs. */
#define IM2COL_DENSE_MAX_CIG 16

static int im2col_dense(const fd_geometry *geo) {
    return geo->in_channels / geo->groups < IM2COL_DENSE_MAX_CIG;
}

/* Kernel rows read in place (row taps) below this many input channels: without groups and dilation along
 * W, the kW taps of one kernel row are kW adjacent pixels, kW*Cin contiguous elements of x. A pixel whose
 * taps are all inside the image along W then needs no copy: its A row is kH pointers (taps of kW*Cin
 * elements) into x, or to a row of zeros above and below the image (terms 0 * w of the formula, as in the
 * copy). Only the pixels at the left and right edges are copied. B is the same matrix either way (K in
 * (ky, kx, i) order), and so is every sum's order: the results are the same bits as the dense copy's. A
 * tap of 16-63 channels would otherwise cost a pointer per 16-63 FMAs. Above the dense copy's channels, only
 * kernels of at most IM2COL_ROW_TAPS_MAX_K taps x channels: the edge pixels' copies take a chunk of rows of
 * that length (the dense copy's workspace), which would otherwise grow with the kernel's area. */
#define IM2COL_ROW_TAPS_MAX_CIN 64
#define IM2COL_ROW_TAPS_MAX_K 4096

static int im2col_row_taps(const fd_geometry *geo) {
    return geo->groups == 1 && geo->dilation_w == 1 &&
           (im2col_dense(geo) || (geo->in_channels < IM2COL_ROW_TAPS_MAX_CIN &&
                                  geo->kernel_h * geo->kernel_w * geo->in_channels <= IM2COL_ROW_TAPS_MAX_K));
}

/* The indirect GEMM's pointers, then (dense A or row taps) chunk rows of kH*kW*Cig elements: at most about
 * FD_GEMM_CHUNK_BYTES, since such a chunk is sized by that row length alone (not by B's size); one more
 * row of zeros for the row taps above and below the image. */
static fd_workspace im2col_workspace(const fd_geometry *geo, int dtype) {
    const ptrdiff_t taps = geo->kernel_h * geo->kernel_w, K = taps * (geo->in_channels / geo->groups);
    if (!im2col_dense(geo) && !im2col_row_taps(geo)) return fd_indirect_gemm_workspace(geo, dtype);
    fd_workspace ws = fd_gemm_pointers_workspace(taps, K, 0, dtype);
    ws.bytes = fd_round_up(ws.bytes, FD_BLOB_ALIGN) + (size_t)(ws.chunk + 1) * (size_t)K * fd_itemsize(dtype);
    return ws;
}

/* Output pixels below which a threaded call's tasks take fewer rows of A than the GEMM's tiles use well. */
#define IM2COL_TASK_PIXELS 48
/* Whole images of fewer output pixels than this share a task, up to about this many pixels (and at least two
 * tasks per thread): the indirect GEMM's rows then group the border pixels of all of them by the taps they
 * lack (im2col_indirect_band), so that row tiles of one such class skip those taps. A 7x7 output in a 3x3
 * kernel with padding 1 has 24 border pixels of its 49: one image alone gives classes of 5 pixels, fewer
 * than a row tile, and tiles mixing classes compute every tap. */
#define IM2COL_SHARED_TASK_PIXELS 1536

/* Tasks over output rows counted across the batch: image n's rows [r0, r1) are rows n*H_out + [r0, r1). */
static void im2col_rows_across_batch(const fd_geometry *geo, fd_task *tasks, ptrdiff_t count) {
    for (ptrdiff_t i = 0; tasks != NULL && i < count; i++) {
        tasks[i].row_begin += tasks[i].part * geo->out_h;
        tasks[i].row_end += tasks[i].part * geo->out_h;
        tasks[i].part = 0;
    }
}

static ptrdiff_t im2col_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    const ptrdiff_t cols = geo->out_channels / geo->groups, pixels = geo->batch * geo->out_h * geo->out_w;
    ptrdiff_t count = 0;
    if (threads > 1 && pixels < cols && cols > FD_GEMM_COLUMN_ALIGN && geo->out_h > 0) {
        ptrdiff_t parts = fd_ceil_div(threads, geo->batch);
        if (parts > fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN)) parts = fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN);
        const ptrdiff_t per_part = fd_ceil_div(fd_ceil_div(cols, parts), FD_GEMM_COLUMN_ALIGN) * FD_GEMM_COLUMN_ALIGN;
        for (ptrdiff_t n = 0; n < geo->batch; n++)
            for (ptrdiff_t c0 = 0; c0 < cols; c0 += per_part)
                fd_task_add(tasks, &count, 0, n * geo->out_h, (n + 1) * geo->out_h, c0,
                            c0 + per_part < cols ? c0 + per_part : cols);
        return count;
    }
    /* bands of the images' rows; where they would hold fewer than IM2COL_TASK_PIXELS pixels, or the images
       have fewer rows than there are threads, and there are columns to cut instead: bands of at least that
       many pixels, each band's columns cut into parts (starting at multiples of FD_GEMM_COLUMN_ALIGN, where
       B's packed panels start) to give about two tasks per thread. A part is at least two of those wide,
       or one where that would leave threads without a task. */
    const ptrdiff_t row_bands = fd_image_bands(geo, threads, 1, NULL);
    const int cut_columns = threads > 1 && cols >= 4 * FD_GEMM_COLUMN_ALIGN && geo->out_w > 0 &&
                            (pixels < IM2COL_TASK_PIXELS * row_bands || row_bands < threads);
    const ptrdiff_t least = cut_columns ? fd_ceil_div(IM2COL_TASK_PIXELS, geo->out_w) : 1;
    const ptrdiff_t image_pixels = geo->out_h * geo->out_w;
    if (!cut_columns && row_bands == geo->batch && image_pixels > 0 && image_pixels < IM2COL_SHARED_TASK_PIXELS) {
        /* one band per image: whole small images per task */
        ptrdiff_t images = fd_ceil_div(IM2COL_SHARED_TASK_PIXELS, image_pixels);
        const ptrdiff_t balanced = threads > 1 ? geo->batch / (2 * (ptrdiff_t)threads) : geo->batch;
        if (images > balanced) images = balanced > 1 ? balanced : 1;
        count = 0;
        for (ptrdiff_t n = 0; n < geo->batch; n += images)
            fd_task_add(tasks, &count, 0, n * geo->out_h, (n + images < geo->batch ? n + images : geo->batch) * geo->out_h,
                        0, cols);
        return count;
    }
    count = fd_image_bands(geo, threads, least, tasks);
    im2col_rows_across_batch(geo, tasks, count);
    ptrdiff_t parts = 1, per_part = cols;
    if (cut_columns && count < 2 * (ptrdiff_t)threads) {
        ptrdiff_t most = cols / (2 * FD_GEMM_COLUMN_ALIGN);
        if (count * most < threads) most = cols / FD_GEMM_COLUMN_ALIGN;
        parts = fd_ceil_div(2 * (ptrdiff_t)threads, count);
        if (parts > most) parts = most;
        per_part = fd_ceil_div(fd_ceil_div(cols, parts), FD_GEMM_COLUMN_ALIGN) * FD_GEMM_COLUMN_ALIGN;
        parts = fd_ceil_div(cols, per_part);
    }
    for (ptrdiff_t i = count - 1; tasks != NULL && i >= 0; i--)   /* band i becomes tasks i*parts .. */
        for (ptrdiff_t p = parts - 1; p >= 0; p--) {
            fd_task t = tasks[i];
            t.col_begin = p * per_part;
            t.col_end = t.col_begin + per_part < cols ? t.col_begin + per_part : cols;
            tasks[i * parts + p] = t;
        }
    return count * parts;
}

/* Output rows or columns [*lo, *hi) whose taps all land inside an input side of `size` pixels. */
static void im2col_inside_range(ptrdiff_t size, ptrdiff_t out_size, ptrdiff_t kernel, ptrdiff_t stride,
                                ptrdiff_t pad, ptrdiff_t dilation, ptrdiff_t *lo, ptrdiff_t *hi)
{
    const ptrdiff_t last = size - 1 + pad - (kernel - 1) * dilation;   /* o * stride <= last */
    *lo = pad > 0 ? fd_ceil_div(pad, stride) : 0;
    *hi = last >= 0 ? last / stride + 1 : 0;
    if (*hi > out_size) *hi = out_size;
    if (*lo > *hi) *lo = *hi;
}

/* Class c of output coordinates along one side of `size`, whose taps all lie inside for [lo, hi): class 0 is
 * [lo, hi), each coordinate outside it a class of its own (those before lo, then those from hi). */
static inline void im2col_class_range(ptrdiff_t c, ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t *begin, ptrdiff_t *end) {
    if (c == 0) {
        *begin = lo;
        *end = hi;
        return;
    }
    *begin = c - 1 < lo ? c - 1 : hi + (c - 1 - lo);
    *end = *begin + 1;
}

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_ALGORITHM(im2col, 0)

#else

/* count < IM2COL_DENSE_MAX_CIG elements, zeros where from is NULL: an unrolled loop with an exit, which
 * compilers keep inline (a plain copy loop becomes a call of memcpy, which costs more than the copy). */
static inline void FD_FN(im2col_copy_short)(FD_REAL *FD_RESTRICT to, const FD_REAL *FD_RESTRICT from, ptrdiff_t count)
{
#if defined(__GNUC__)
#pragma GCC unroll 16
#endif
    for (ptrdiff_t i = 0; i < IM2COL_DENSE_MAX_CIG; i++) {
        if (i >= count) break;
        to[i] = from != NULL ? from[i] : (FD_REAL)0;
    }
}

/* Pixels [p0, p0 + M) of image n's output (counted row by row), group g: row m of `dense` holds the
 * pixel's kH*kW taps of Cig channels each, zeros for a tap in the padding (a term 0 * w of the formula).
 * A kernel row whose taps are adjacent pixels of one group (dilation 1 along W, no groups) inside the
 * image is one copy of kW*Cin elements. */
static void FD_FN(im2col_dense_rows)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x, ptrdiff_t n, ptrdiff_t g,
                                     ptrdiff_t p0, ptrdiff_t M, FD_REAL *FD_RESTRICT dense)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, Wo = geo->out_w;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, Cig = Cin / geo->groups, K = kH * kW * Cig;
    const int runs = geo->dilation_w == 1 && geo->groups == 1;
    ptrdiff_t oy = p0 / Wo, ox = p0 % Wo;
    for (ptrdiff_t m = 0; m < M; m++) {
        FD_REAL *row = dense + m * K;
        const ptrdiff_t ix0 = ox * geo->stride_w - geo->pad_left;
        for (ptrdiff_t ky = 0; ky < kH; ky++, row += kW * Cig) {
            const ptrdiff_t iy = oy * geo->stride_h - geo->pad_top + ky * geo->dilation_h;
            const FD_REAL *x_row = iy >= 0 && iy < H ? x + ((n * H + iy) * W) * Cin + g * Cig : NULL;
            if (x_row != NULL && runs && ix0 >= 0 && ix0 + kW <= W) {
                memcpy(row, x_row + ix0 * Cin, (size_t)(kW * Cin) * sizeof(FD_REAL));
                continue;
            }
            for (ptrdiff_t kx = 0; kx < kW; kx++) {
                const ptrdiff_t ix = ix0 + kx * geo->dilation_w;
                const FD_REAL *from = x_row != NULL && ix >= 0 && ix < W ? x_row + ix * Cin : NULL;
                if (Cig < IM2COL_DENSE_MAX_CIG)
                    FD_FN(im2col_copy_short)(row + kx * Cig, from, Cig);
                else if (from != NULL)   /* the edge pixels of row taps (im2col_row_taps) */
                    memcpy(row + kx * Cig, from, (size_t)Cig * sizeof(FD_REAL));
                else
                    memset(row + kx * Cig, 0, (size_t)Cig * sizeof(FD_REAL));
            }
        }
        if (++ox == Wo) {
            ox = 0;
            oy++;
        }
    }
}

/* Row taps (im2col_row_taps) for pixels [p0, p0 + M) of image n's output: a_rows[m*kH + ky] is kernel row
 * ky (kW*Cin elements) of pixel m. For a pixel whose taps are all inside the image along W, that is x
 * itself, or `zeros` above and below the image; for the others, the pixel's row copied into `dense`.
 * Returns the taps per pixel: kH, or 1 for an image one pixel wide without padding along W or dilation (a
 * 1-D layer run as rows, rows_for_columns), whose kH kernel rows are adjacent pixels of x: one tap of K
 * elements, read in place where the whole kernel column is inside the image, else copied. */
static size_t FD_FN(im2col_row_tap_rows)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x, ptrdiff_t n,
                                         ptrdiff_t p0, ptrdiff_t M, FD_REAL *FD_RESTRICT dense, const FD_REAL *zeros,
                                         const FD_REAL **a_rows)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, Wo = geo->out_w;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, K = kH * kW * Cin, sW = geo->stride_w, pl = geo->pad_left;
    if (W == 1 && Wo == 1 && kW == 1 && pl == 0 && geo->dilation_h == 1) {
        for (ptrdiff_t m = 0, oy = p0; m < M; m++, oy++) {
            const ptrdiff_t iy = oy * geo->stride_h - geo->pad_top;
            if (iy >= 0 && iy + kH <= H) {
                a_rows[m] = x + (n * H + iy) * Cin;
                continue;
            }
            FD_REAL *row = dense + m * K;   /* the padding's zeros are terms 0 * w of the formula */
            for (ptrdiff_t ky = 0; ky < kH; ky++, row += Cin) {
                if (iy + ky >= 0 && iy + ky < H)
                    memcpy(row, x + (n * H + iy + ky) * Cin, (size_t)Cin * sizeof(FD_REAL));
                else
                    memset(row, 0, (size_t)Cin * sizeof(FD_REAL));
            }
            a_rows[m] = dense + m * K;
        }
        return 1;
    }
    /* output columns [inside_first, inside_end) read only inside the image along W */
    ptrdiff_t inside_first, inside_end;
    im2col_inside_range(W, Wo, kW, sW, pl, 1, &inside_first, &inside_end);
    ptrdiff_t oy = p0 / Wo, ox = p0 % Wo;
    for (ptrdiff_t m = 0; m < M;) {
        const ptrdiff_t run = Wo - ox < M - m ? Wo - ox : M - m;   /* pixels left in this output row */
        const ptrdiff_t lo = inside_first > ox ? inside_first : ox;
        const ptrdiff_t hi = inside_end < ox + run ? inside_end : ox + run;
        for (ptrdiff_t ky = 0; ky < kH; ky++) {
            const ptrdiff_t iy = oy * geo->stride_h - geo->pad_top + ky * geo->dilation_h;
            const FD_REAL **to = a_rows + m * kH + ky;   /* pixel o's pointer: to[(o - ox) * kH] */
            /* stepped through x's row, or the zero row above and below the image (lo < hi: no pointer
               is formed outside x when no pixel is inside) */
            const int reads_x = lo < hi && iy >= 0 && iy < H;
            const FD_REAL *from = reads_x ? x + ((n * H + iy) * W + lo * sW - pl) * Cin : zeros;
            const ptrdiff_t step = reads_x ? sW * Cin : 0;
            for (ptrdiff_t o = lo; o < hi; o++, from += step) to[(o - ox) * kH] = from;
        }
        for (ptrdiff_t o = ox, end = ox + run; o < end; o++) {   /* the pixels outside [lo, hi) */
            if (o == lo && lo < hi) o = hi;
            if (o == end) break;
            const ptrdiff_t row = m + o - ox;
            FD_FN(im2col_dense_rows)(geo, x, n, 0, oy * Wo + o, 1, dense + row * K);
            for (ptrdiff_t ky = 0; ky < kH; ky++) a_rows[row * kH + ky] = dense + row * K + ky * kW * Cin;
        }
        m += run;
        ox = 0;
        oy++;
    }
    return (size_t)kH;
}

/* C rows [0, M) = bias + the indirect GEMM over T taps of Kc elements (the bias alone where Kc is 0: no input
 * channels). */
static void FD_FN(im2col_rows_gemm)(ptrdiff_t M, ptrdiff_t cols, ptrdiff_t T, ptrdiff_t Kc, const FD_REAL **a_rows,
                                    const FD_REAL *matrix, const FD_REAL *bias, FD_REAL **c_rows, int flags)
{
    if (Kc == 0) {
        for (ptrdiff_t m = 0; m < M; m++)
            for (ptrdiff_t o = 0; o < cols; o++) c_rows[m][o] = bias ? bias[o] : (FD_REAL)0;
        return;
    }
    FD_FN(gemm_indirect)((size_t)M, (size_t)cols, (size_t)T, (size_t)Kc, a_rows, matrix, bias, c_rows, flags);
}

/* The indirect GEMM rows of a task's pixels (output rows [row_begin, row_end) across the batch), group g, in
 * calls of at most chunk_pixels rows: a_rows[m*T + t] is tap t's input pixel, `outside` where it falls outside
 * the image (NULL: skipped, FD_GEMM_SKIP_NULL); c_rows[m] the output pixel. The pixels come in classes of the
 * taps they lack, each class over every image of the task: first those whose taps all lie inside (each output
 * row's run of them evenly spaced: the GEMM's strided tiles take such runs whole), then each border row and
 * column's, so that a row tile of one class skips the taps its rows lack (a tile mixing classes computes every
 * tap and puts the missing rows' products back). Any order gives the same bits. */
static void FD_FN(im2col_indirect_band)(const fd_geometry *geo, const FD_REAL *x_group, const FD_REAL *matrix,
                                        const FD_REAL *bias, FD_REAL *y_group, ptrdiff_t row_begin, ptrdiff_t row_end,
                                        ptrdiff_t cols, ptrdiff_t chunk_pixels, const FD_REAL *outside, int flags,
                                        const FD_REAL **a_rows, FD_REAL **c_rows)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels, Ho = geo->out_h, Wo = geo->out_w;
    const ptrdiff_t Cout = geo->out_channels, kH = geo->kernel_h, kW = geo->kernel_w, T = kH * kW;
    const ptrdiff_t Cig = Cin / geo->groups;
    ptrdiff_t oy_lo, oy_hi, ox_lo, ox_hi, M = 0;
    im2col_inside_range(H, Ho, kH, geo->stride_h, geo->pad_top, geo->dilation_h, &oy_lo, &oy_hi);
    im2col_inside_range(W, Wo, kW, geo->stride_w, geo->pad_left, geo->dilation_w, &ox_lo, &ox_hi);
    const ptrdiff_t y_classes = 1 + Ho - (oy_hi - oy_lo), x_classes = 1 + Wo - (ox_hi - ox_lo);
    for (ptrdiff_t cy = 0; cy < y_classes; cy++) {
        ptrdiff_t y0, y1;
        im2col_class_range(cy, oy_lo, oy_hi, &y0, &y1);
        for (ptrdiff_t cx = 0; cx < x_classes; cx++) {
            ptrdiff_t x0, x1;
            im2col_class_range(cx, ox_lo, ox_hi, &x0, &x1);
            if (y0 >= y1 || x0 >= x1) continue;
            for (ptrdiff_t n = row_begin / Ho; n * Ho < row_end; n++) {
                const ptrdiff_t first = row_begin - n * Ho > y0 ? row_begin - n * Ho : y0;
                const ptrdiff_t last = row_end - n * Ho < y1 ? row_end - n * Ho : y1;
                const FD_REAL *x_image = x_group + n * H * W * Cin;
                for (ptrdiff_t oy = first; oy < last; oy++) {
                    for (ptrdiff_t ox = x0; ox < x1; ox++) {
                        for (ptrdiff_t ky = 0; ky < kH; ky++) {
                            const ptrdiff_t iy = oy * geo->stride_h - geo->pad_top + ky * geo->dilation_h;
                            for (ptrdiff_t kx = 0; kx < kW; kx++) {
                                const ptrdiff_t ix = ox * geo->stride_w - geo->pad_left + kx * geo->dilation_w;
                                const int tap_inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
                                a_rows[M * T + ky * kW + kx] = tap_inside ? x_image + (iy * W + ix) * Cin : outside;
                            }
                        }
                        c_rows[M++] = y_group + ((n * Ho + oy) * Wo + ox) * Cout;
                        if (M == chunk_pixels) {
                            FD_FN(im2col_rows_gemm)(M, cols, T, Cig, a_rows, matrix, bias, c_rows, flags);
                            M = 0;
                        }
                    }
                }
            }
        }
    }
    if (M > 0) FD_FN(im2col_rows_gemm)(M, cols, T, Cig, a_rows, matrix, bias, c_rows, flags);
}

/* Rows [oy_begin, oy_end) of image n, as the dense copy, the row taps or (pointwise) x's own pixels. */
static void FD_FN(im2col_image_band)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x, const void *packed,
                                     const FD_REAL *FD_RESTRICT bias, FD_REAL *FD_RESTRICT y, ptrdiff_t n,
                                     ptrdiff_t oy_begin, ptrdiff_t oy_end, ptrdiff_t col_begin, ptrdiff_t cols,
                                     ptrdiff_t chunk_pixels, const FD_REAL **a_rows, FD_REAL **c_rows,
                                     FD_REAL *FD_RESTRICT dense, const FD_REAL *zeros)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const size_t K = (size_t)(geo->kernel_h * geo->kernel_w * Cig);
    const ptrdiff_t first = oy_begin * Wo, last = oy_end * Wo;
    FD_REAL *const y_pixels = y + n * Ho * Wo * Cout;   /* image n's output pixel p is y_pixels[p * Cout...] */
    for (ptrdiff_t p0 = first; p0 < last; p0 += chunk_pixels) {
        const ptrdiff_t M = (last - p0 < chunk_pixels) ? last - p0 : chunk_pixels;
        for (ptrdiff_t g = 0; g < G; g++) {
            const FD_REAL *matrix = (const FD_REAL *)fd_blob_part(packed, IM2COL_MATRICES + (size_t)g) + K * (size_t)col_begin;
            const FD_REAL *g_bias = bias ? bias + g * Cog + col_begin : NULL;
            size_t taps = 1;
            if (dense != NULL) {
                if (zeros != NULL) {
                    taps = FD_FN(im2col_row_tap_rows)(geo, x, n, p0, M, dense, zeros, a_rows);
                } else {
                    FD_FN(im2col_dense_rows)(geo, x, n, g, p0, M, dense);
                    for (ptrdiff_t m = 0; m < M; m++) a_rows[m] = dense + (size_t)m * K;
                }
            } else {   /* pointwise: output pixel p reads input pixel p */
                const FD_REAL *x_first = x + (n * H * W + p0) * Cin + g * Cig;
                for (ptrdiff_t m = 0; m < M; m++) a_rows[m] = x_first + m * Cin;
            }
            for (ptrdiff_t m = 0; m < M; m++) c_rows[m] = y_pixels + (p0 + m) * Cout + g * Cog + col_begin;
            FD_FN(im2col_rows_gemm)(M, cols, (ptrdiff_t)taps, (ptrdiff_t)(K / taps), a_rows, matrix, g_bias, c_rows, 0);
        }
    }
}

/* Output rows [row_begin, row_end) counted across the batch, output channels [col_begin, col_end) of each group. */
static int FD_FN(conv_im2col_band)(const fd_geometry *geo, const FD_REAL *FD_RESTRICT x, const void *packed,
                                   const FD_REAL *FD_RESTRICT bias, FD_REAL *FD_RESTRICT y, ptrdiff_t row_begin,
                                   ptrdiff_t row_end, ptrdiff_t col_begin, ptrdiff_t col_end,
                                   ptrdiff_t chunk_pixels, const FD_REAL **a_rows, FD_REAL **c_rows,
                                   FD_REAL *FD_RESTRICT dense)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, T = kH * kW;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const ptrdiff_t cols = col_end - col_begin;
    if (chunk_pixels < 1 || row_begin < 0 || row_end > geo->batch * Ho || row_begin >= row_end || col_begin < 0 ||
        cols < 0 || col_end > Cog || col_begin % FD_GEMM_COLUMN_ALIGN != 0)
        return FD_ERR_WORKSPACE;
    const int finite = *(const int *)fd_blob_part(packed, IM2COL_FINITE);
    const FD_REAL *outside = finite ? NULL : (const FD_REAL *)fd_blob_part(packed, IM2COL_ZEROS);
    const size_t K = (size_t)(T * Cig);
    /* row taps: the zeros after the chunk's rows of `dense` */
    FD_REAL *zeros = dense != NULL && im2col_row_taps(geo) ? dense + (size_t)chunk_pixels * K : NULL;
    if (zeros != NULL) memset(zeros, 0, K * sizeof(FD_REAL));

    /* a 1x1 kernel of stride 1 without padding: the output's pixels are the input's */
    const int pointwise = T == 1 && geo->stride_h == 1 && geo->stride_w == 1 && geo->pad_top == 0 &&
                          geo->pad_left == 0 && Ho == H && Wo == W;
    if ((dense != NULL && Cig > 0) || pointwise) {   /* image by image, each in chunks of its pixels in order */
        for (ptrdiff_t r = row_begin; r < row_end;) {
            const ptrdiff_t n = r / Ho, oy_begin = r % Ho;
            const ptrdiff_t oy_end = row_end - n * Ho < Ho ? row_end - n * Ho : Ho;
            FD_FN(im2col_image_band)(geo, x, packed, bias, y, n, oy_begin, oy_end, col_begin, cols, chunk_pixels,
                                     a_rows, c_rows, dense != NULL && Cig > 0 ? dense : NULL, zeros);
            r += oy_end - oy_begin;
        }
        return FD_OK;
    }
    for (ptrdiff_t g = 0; g < G; g++)
        FD_FN(im2col_indirect_band)(geo, x + g * Cig,
                                    (const FD_REAL *)fd_blob_part(packed, IM2COL_MATRICES + (size_t)g) + K * (size_t)col_begin,
                                    bias ? bias + g * Cog + col_begin : NULL, y + g * Cog + col_begin, row_begin, row_end,
                                    cols, chunk_pixels, outside, finite ? FD_GEMM_SKIP_NULL : 0, a_rows, c_rows);
    return FD_OK;
}

/* Group g's (kH*kW*Cig, Cog) matrix is its (Cog, kH, kW, Cig) weight slice transposed. */
static int FD_FN(im2col_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t G = geo->groups, Cig = geo->in_channels / G, Cog = geo->out_channels / G;
    const ptrdiff_t K = geo->kernel_h * geo->kernel_w * Cig;
    fd_blob b;
    fd_blob_begin(&b, blob, IM2COL_MATRICES + (size_t)G);
    int *finite = (int *)fd_blob_add(&b, IM2COL_FINITE, sizeof(int));
    if (finite != NULL) *finite = FD_FN(values_finite)((const FD_REAL *)weight, G * Cog * K);
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
    FD_REAL *dense = im2col_dense(op->geo) || im2col_row_taps(op->geo) ? (FD_REAL *)((char *)workspace + fd_round_up((size_t)op->chunk *
                         (size_t)(op->geo->kernel_h * op->geo->kernel_w + 1) * sizeof(void *), FD_BLOB_ALIGN)) : NULL;
    return FD_FN(conv_im2col_band)(op->geo, (const FD_REAL *)op->x, op->packed, (const FD_REAL *)op->bias,
                                   (FD_REAL *)op->y, t->row_begin, t->row_end, t->col_begin, t->col_end,
                                   op->chunk, a_rows, c_rows, dense);
}

#endif
