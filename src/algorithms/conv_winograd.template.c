/* Algorithm "winograd" of conv2d (C symbols conv_winograd_*; the transposed convolution's "winograd" is
 * deconv_winograd.template.c, whose kernel this one runs): a convolution whose kernel sides are 2 or 3
 * times its strides (k3 s1, k4 s2, k2 s1, k6 s3, ...), dilated only with stride 1, an algorithm template
 * (see algorithm.h).
 *
 * Stride phases. With kH = Ty*sH, kW = Tx*sW, write the padded input's rows as iy = j*sH + ry and its
 * columns as ix = i*sW + rx, and each tap as ky = u*sH + ry, kx = v*sW + rx. Then
 *   y[n, oy, ox, o] = bias + sum_{u < Ty, v < Tx} sum_c X[n, oy + u, ox + v, c] * Wc[o, u, v, c],
 *   X[n, j, i, (g, ry, rx, c)] = xpad[n, j*sH + ry, i*sW + rx, g*Cig + c]      (space to depth)
 *   Wc[g*Cog + o, u, v, (ry, rx, c)] = w[g*Cog + o, u*sH + ry, v*sW + rx, c]
 * a stride-1, unpadded correlation with Ty x Tx taps over sH*sW*C_in channels (groups keep their own
 * sH*sW*Cig channels). Every term of X is a term of the formula, padding zeros included (0 * Inf = NaN
 * as in fastdeconv.reference), because every stride phase holds exactly Ty x Tx taps. That correlation is
 * the transposed convolution of X with stride 1, padding (Ty - 1, Tx - 1) and the flipped weight
 *   wd[(g, ry, rx, c), Ty-1-u, Tx-1-v, o] = Wc[g*Cog + o, u, v, (ry, rx, c)],
 * which deconv_winograd computes: F(2,3) for 3 taps (2.25x fewer multiplies), F(3,2) or F(2,2) for 2
 * (2.25x or 1.78x), with its exactness rules (a non-finite weight, or a task with a non-finite output,
 * runs the phase kernel over the same X).
 *
 * Dilation phases. With stride 1 and dilation (dH, dW), the outputs oy = j*dH + qy, ox = i*dW + qx of one
 * phase (qy, qx) read only the inputs of that phase's residues:
 *   y[n, j*dH + qy, i*dW + qx, o] = bias + sum_{u < kH, v < kW} sum_c Xq[n, j + u, i + v, c] * w[o, u, v, c],
 *   Xq[n, j, i, c] = xpad[n, j*dH + qy, i*dW + qx, c]
 * a stride-1, unpadded correlation of kH x kW taps with dilation 1 (the "space to batch" of dilated
 * convolutions), which runs as above; its tiles are written to the workspace and copied to every dH-th
 * row and dW-th column of y. A dilated convolution is dH*dW such correlations over images dH*dW times
 * smaller: their tiles only pay on phases of at least CONV_WINOGRAD_MIN_PHASE_PIXELS outputs.
 *
 * Small outputs. A call whose images have fewer than CONV_WINOGRAD_MIN_OUTPUT_PIXELS output pixels each
 * (or rows wider than CONV_WINOGRAD_MAX_BAND_ELEMENTS allows, or few outputs for large strided weights:
 * CONV_WINOGRAD_LARGE_WEIGHT) runs conv_im2col's kernel instead, whose packed weights the blob also
 * holds: there the tiles would be
 * mostly padding or cut short (a 7x7 image is 3 tiles of 2 and one of 1 per side), and im2col leaves out
 * the taps that fall in the padding (a 2x2 image in a k4 s2 p1 kernel reads a quarter of it). Tasks,
 * workspace and run decide it alike, from the call's geometry.
 *
 * Task: (image n times dH*dW plus dilation phase q = qy*dW + qx, the phase's output rows [row_begin,
 * row_end), output channels [col_begin, col_end) of each group); at most conv_winograd_band_rows rows. Its
 * run writes the band's X (rows row_begin .. row_end + Ty - 2) into the workspace, then runs deconv_winograd
 * over the band with the whole phase's choice of kernel and tiles (winograd_run_rows_of); the bands start on
 * the whole's tile grid, so the tiles are the whole phase's and the results do not depend on the bands (nor
 * on the thread count). Workspace: that X band (at most about CONV_WINOGRAD_BAND_ELEMENTS elements), with
 * dilation the band's outputs, and deconv_winograd's own workspace.
 */
#if defined(FD_ALGORITHM_SHARED)

#include <string.h>

#include "algorithm.h"

/* Elements of a task's X band: X rows are read by a band's Ty - 1 neighbours too, so bands are taller
 * than the tiles; this keeps a band of a wide image within L2 next to the tiles' V and M. */
#define CONV_WINOGRAD_BAND_ELEMENTS (96 << 10)

#define CONV_WINOGRAD_MIN_OUTPUT_PIXELS 64
/* ... and so does a dilated one whose smallest phase has fewer outputs than this: 9x9 phases (k3 d4 on 36x36,
 * 256 channels) ran 1.2x slower than im2col, 12x12 phases 1.5-1.6x faster (asv_benches/NOTES.md). */
#define CONV_WINOGRAD_MIN_PHASE_PIXELS 144
/* ... and so does one whose band of 2 output rows would hold more elements than this (a very wide image
 * of many channels): the workspace stays bounded whatever the image's width. */
#define CONV_WINOGRAD_MAX_BAND_ELEMENTS (1 << 20)
/* ... and so does a strided one of at least CONV_WINOGRAD_LARGE_WEIGHT elements of weights with fewer than
 * CONV_WINOGRAD_MIN_LARGE_CALL_PIXELS outputs in the whole call. Its 2-tap phases save 1.78x the multiplies
 * (F(2,2)) but read 2.25x the weights' bytes, and every chunk of at most 48 tiles reads all of them: from
 * memory or L3, that costs more than the multiplies save (k4 s2 layers of 384-512 channels on 64-256
 * outputs ran 2-11 % slower than im2col, on 1024 outputs from 4 % slower to 32 % faster;
 * asv_benches/NOTES.md). */
#define CONV_WINOGRAD_LARGE_WEIGHT ((ptrdiff_t)2 << 20)
#define CONV_WINOGRAD_MIN_LARGE_CALL_PIXELS 512

/* Dilation phases (module comment): dH*dW of them, asked for only where conv_winograd_direct is false (every
 * phase then has outputs, so their count is at most the output's pixels, whatever the dilations); the
 * outputs of phase q along an axis of `outputs` (those o = q mod d); the widest phase's width (phase 0's). */
static ptrdiff_t conv_winograd_phases(const fd_geometry *geo) { return geo->dilation_h * geo->dilation_w; }

static ptrdiff_t conv_winograd_phase_size(ptrdiff_t outputs, ptrdiff_t dilation, ptrdiff_t q) {
    return outputs > q ? fd_ceil_div(outputs - q, dilation) : 0;
}

static ptrdiff_t conv_winograd_phase_width(const fd_geometry *geo) {
    return conv_winograd_phase_size(geo->out_w, geo->dilation_w, 0);
}

static int conv_winograd_direct(const fd_geometry *geo) {
    const ptrdiff_t Ty = geo->kernel_h / geo->stride_h, Tx = geo->kernel_w / geo->stride_w;
    const ptrdiff_t two_rows =
        (2 + Ty - 1) * (conv_winograd_phase_width(geo) + Tx - 1) * geo->in_channels * geo->stride_h * geo->stride_w;
    const ptrdiff_t smallest_phase = (geo->out_h / geo->dilation_h) * (geo->out_w / geo->dilation_w);
    const int dilated = geo->dilation_h > 1 || geo->dilation_w > 1;
    const int strided = geo->stride_h > 1 || geo->stride_w > 1;
    const ptrdiff_t weight = geo->out_channels * geo->kernel_h * geo->kernel_w * (geo->in_channels / geo->groups);
    return smallest_phase < (dilated ? CONV_WINOGRAD_MIN_PHASE_PIXELS : CONV_WINOGRAD_MIN_OUTPUT_PIXELS) ||
           two_rows > CONV_WINOGRAD_MAX_BAND_ELEMENTS ||
           (strided && weight >= CONV_WINOGRAD_LARGE_WEIGHT &&
            geo->batch * geo->out_h * geo->out_w < CONV_WINOGRAD_MIN_LARGE_CALL_PIXELS);
}

/* Blob parts: conv_im2col's blob (small outputs), then deconv_winograd's for the stride-1 correlation. */
enum { CONV_WINOGRAD_IM2COL_BLOB, CONV_WINOGRAD_INNER_BLOB };

/* The stride-1 transposed convolution that computes `rows` output rows of `width` outputs (any image, any
 * band, any dilation phase). */
static fd_geometry conv_winograd_inner(const fd_geometry *geo, ptrdiff_t rows, ptrdiff_t width) {
    const ptrdiff_t Ty = geo->kernel_h / geo->stride_h, Tx = geo->kernel_w / geo->stride_w;
    fd_geometry inner = *geo;
    inner.batch = 1;
    inner.in_h = rows + Ty - 1;
    inner.in_w = width + Tx - 1;
    inner.in_channels = geo->in_channels * geo->stride_h * geo->stride_w;
    inner.out_h = rows;
    inner.out_w = width;
    inner.kernel_h = Ty;
    inner.kernel_w = Tx;
    inner.stride_h = inner.stride_w = 1;
    inner.dilation_h = inner.dilation_w = 1;
    inner.pad_top = Ty - 1;
    inner.pad_left = Tx - 1;
    return inner;
}

static const char *conv_winograd_unsupported(const fd_geometry *geo) {
    if ((geo->dilation_h != 1 || geo->dilation_w != 1) && (geo->stride_h != 1 || geo->stride_w != 1))
        return "it needs dilation 1, or stride 1 with a dilation";
    if (geo->kernel_h % geo->stride_h != 0 || geo->kernel_w % geo->stride_w != 0)
        return "it needs kernel sides that are multiples of the strides (every stride phase then has the same taps)";
    const ptrdiff_t Ty = geo->kernel_h / geo->stride_h, Tx = geo->kernel_w / geo->stride_w;
    if (Ty < 2 || Ty > 3 || Tx < 2 || Tx > 3) return "it needs kernel sides of 2 or 3 times the strides";
    const fd_geometry inner = conv_winograd_inner(geo, 1, conv_winograd_phase_width(geo));
    return winograd_unsupported(&inner);
}

/* The side of the tiles along the rows of the whole correlation of dilation phase (., qx) of `rows`
 * output rows (deconv_winograd's choice, by the phase's rows), or 1 where that runs the phase kernel
 * (whose tasks count output rows): every band of that phase starts at a multiple of it. */
static ptrdiff_t conv_winograd_side(const fd_geometry *geo, ptrdiff_t rows, ptrdiff_t qx) {
    const ptrdiff_t width = conv_winograd_phase_size(geo->out_w, geo->dilation_w, qx);
    const fd_geometry inner = conv_winograd_inner(geo, rows, width);
    if (winograd_direct(&inner)) return 1;
    return winograd_tile_side(winograd_taps(inner.kernel_h, 1, inner.pad_top, 0), rows, inner.in_channels / inner.groups);
}

/* The most output rows of a task: its X band holds (rows + Ty - 1) rows of (W_out + Tx - 1) pixels of
 * sH*sW*C_in channels. A multiple of 6 when 6 fit, else of every phase's tile side (or the whole phase):
 * the bands then start on the tile grids (conv_winograd_run). */
static ptrdiff_t conv_winograd_band_rows(const fd_geometry *geo) {
    const ptrdiff_t Ty = geo->kernel_h / geo->stride_h, Tx = geo->kernel_w / geo->stride_w;
    const ptrdiff_t row = (conv_winograd_phase_width(geo) + Tx - 1) * geo->in_channels * geo->stride_h * geo->stride_w;
    const ptrdiff_t phase_rows = conv_winograd_phase_size(geo->out_h, geo->dilation_h, 0);
    ptrdiff_t rows = (ptrdiff_t)CONV_WINOGRAD_BAND_ELEMENTS / (row > 0 ? row : 1) - (Ty - 1);
    if (rows >= 6) {
        rows = rows / 6 * 6;
    } else {   /* a wide image: a multiple of every phase's side (2, 3, both or none) */
        ptrdiff_t sides = 1;
        for (ptrdiff_t q = 0; q < geo->dilation_h * geo->dilation_w; q++) {
            const ptrdiff_t side = conv_winograd_side(
                geo, conv_winograd_phase_size(geo->out_h, geo->dilation_h, q / geo->dilation_w), q % geo->dilation_w);
            if (sides % side != 0) sides *= side;   /* sides 1, 2 and 3: their least common multiple */
        }
        rows = rows >= sides ? rows / sides * sides : sides;
    }
    return rows < phase_rows ? rows : phase_rows > 0 ? phase_rows : 1;
}

/* The widest band's X; with dilation, its outputs (written to y's every dH-th row and dW-th column after). */
static size_t conv_winograd_band_bytes(const fd_geometry *geo, int dtype) {
    const fd_geometry inner = conv_winograd_inner(geo, conv_winograd_band_rows(geo), conv_winograd_phase_width(geo));
    return fd_round_up((size_t)(inner.in_h * inner.in_w * inner.in_channels) * fd_itemsize(dtype), FD_BLOB_ALIGN);
}

static size_t conv_winograd_outputs_bytes(const fd_geometry *geo, int dtype) {
    if (geo->dilation_h == 1 && geo->dilation_w == 1) return 0;
    const size_t pixels = (size_t)(conv_winograd_band_rows(geo) * conv_winograd_phase_width(geo));
    return fd_round_up(pixels * (size_t)geo->out_channels * fd_itemsize(dtype), FD_BLOB_ALIGN);
}

/* The band and its outputs, then deconv_winograd's workspace for a phase's whole correlation (phase 0's
 * rows, the most); its chunk is the inner run's. */
static fd_workspace conv_winograd_workspace(const fd_geometry *geo, int dtype) {
    if (conv_winograd_direct(geo)) return im2col_workspace(geo, dtype);
    const fd_geometry inner = conv_winograd_inner(geo, conv_winograd_phase_size(geo->out_h, geo->dilation_h, 0),
                                                  conv_winograd_phase_width(geo));
    fd_workspace ws = winograd_workspace(&inner, dtype);
    ws.bytes += conv_winograd_band_bytes(geo, dtype) + conv_winograd_outputs_bytes(geo, dtype);
    return ws;
}

/* Bands of at most conv_winograd_band_rows rows, about 4 tasks per thread (fewer rows per band, then
 * blocks of output channels when the images have too few rows for that). */
static ptrdiff_t conv_winograd_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    if (conv_winograd_direct(geo)) return im2col_tasks(geo, threads, tasks);
    const ptrdiff_t P = conv_winograd_phases(geo), images = geo->batch * P;
    const ptrdiff_t rows = conv_winograd_phase_size(geo->out_h, geo->dilation_h, 0);   /* phase 0's, the most */
    const ptrdiff_t cols = geo->out_channels / geo->groups;
    ptrdiff_t count = 0;
    if (geo->batch <= 0 || rows <= 0) return 0;
    const ptrdiff_t want = threads > 1 ? 4 * (ptrdiff_t)threads : 1;
    ptrdiff_t per_band = conv_winograd_band_rows(geo);
    const ptrdiff_t even = fd_ceil_div(rows, fd_ceil_div(want, images));
    /* Bands of whole 2-row tiles and at least twice the Ty - 1 rows each band reads beyond its own (which
       are transformed again by the next band), rounded up per phase to its tiles' side (the bands start on
       its tile grid: conv_winograd_run); the columns are cut instead when that leaves too few tasks. Above 6
       rows, rounded down to a multiple of 6: rounded up, they left a short last band (12 + 4 rows) or too
       few bands, whose columns were then cut, and every column part transforms the whole band again. */
    if (even < per_band) {
        const ptrdiff_t least = fd_ceil_div(2 * (geo->kernel_h / geo->stride_h - 1), 2) * 2;
        ptrdiff_t rounded = even > 6 ? even / 6 * 6 : fd_ceil_div(even, 2) * 2;
        if (rounded < least) rounded = least;
        if (rounded < per_band) per_band = rounded;
    }
    const ptrdiff_t bands = images * fd_ceil_div(rows, per_band);
    ptrdiff_t col_parts = bands < want ? fd_ceil_div(want, bands) : 1;
    if (col_parts > fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN)) col_parts = fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN);
    if (col_parts < 1) col_parts = 1;
    const ptrdiff_t per_cols = fd_ceil_div(fd_ceil_div(cols, col_parts), FD_GEMM_COLUMN_ALIGN) * FD_GEMM_COLUMN_ALIGN;
    for (ptrdiff_t part = 0; part < images; part++) {   /* image part / P, dilation phase part % P */
        const ptrdiff_t phase_rows = conv_winograd_phase_size(geo->out_h, geo->dilation_h, part % P / geo->dilation_w);
        const ptrdiff_t side = conv_winograd_side(geo, phase_rows, part % P % geo->dilation_w);
        const ptrdiff_t step = fd_ceil_div(per_band, side) * side;   /* band_rows: a multiple of it, or one phase */
        for (ptrdiff_t r0 = 0; r0 < phase_rows; r0 += step)
            for (ptrdiff_t c0 = 0; c0 < cols || c0 == 0; c0 += per_cols)
                fd_task_add(tasks, &count, part, r0, r0 + step < phase_rows ? r0 + step : phase_rows, c0,
                            c0 + per_cols < cols ? c0 + per_cols : cols);
    }
    return count;
}

#elif defined(FD_ALGORITHM_DESCRIPTOR)

static const char *conv_winograd_delegate(const fd_geometry *geo) {
    return conv_winograd_direct(geo) ? "im2col" : NULL;
}

FD_DEFINE_DELEGATING_ALGORITHM(conv_winograd, "winograd", 0, conv_winograd_delegate)

#else

/* conv_im2col's packing of the weight, then deconv_winograd's of the flipped space-to-depth weight wd
 * (module comment). */
static int FD_FN(conv_winograd_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const fd_geometry inner = conv_winograd_inner(geo, 1, conv_winograd_phase_width(geo));
    size_t im2col_bytes = 0, inner_bytes = 0;
    int status = FD_FN(im2col_pack)(geo, weight, NULL, &im2col_bytes);
    if (status == FD_OK) status = FD_FN(winograd_pack)(&inner, NULL, NULL, &inner_bytes);
    if (status != FD_OK) return status;
    fd_blob b;
    fd_blob_begin(&b, blob, CONV_WINOGRAD_INNER_BLOB + 1);
    void *im2col_blob = fd_blob_add(&b, CONV_WINOGRAD_IM2COL_BLOB, im2col_bytes);
    void *inner_blob = fd_blob_add(&b, CONV_WINOGRAD_INNER_BLOB, inner_bytes);
    *bytes = b.size;
    if (blob == NULL) return FD_OK;
    status = FD_FN(im2col_pack)(geo, weight, im2col_blob, &im2col_bytes);
    if (status != FD_OK) return status;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t Ty = inner.kernel_h, Tx = inner.kernel_w, G = geo->groups;
    const ptrdiff_t Cig = geo->in_channels / G, Cog = geo->out_channels / G;
    const size_t count = (size_t)(geo->out_channels * kH * kW * Cig);
    FD_REAL *wd = (FD_REAL *)malloc((count > 0 ? count : 1) * sizeof(FD_REAL));
    if (wd == NULL) return FD_ERR_WORKSPACE;
    const FD_REAL *w = (const FD_REAL *)weight;
    for (ptrdiff_t g = 0; g < G; g++)
        for (ptrdiff_t ry = 0; ry < sH; ry++)
            for (ptrdiff_t rx = 0; rx < sW; rx++)
                for (ptrdiff_t c = 0; c < Cig; c++) {
                    const ptrdiff_t i = g * sH * sW * Cig + (ry * sW + rx) * Cig + c;   /* X's channel */
                    for (ptrdiff_t u = 0; u < Ty; u++)
                        for (ptrdiff_t v = 0; v < Tx; v++)
                            for (ptrdiff_t o = 0; o < Cog; o++)
                                wd[((i * Ty + (Ty - 1 - u)) * Tx + (Tx - 1 - v)) * Cog + o] =
                                    w[(((g * Cog + o) * kH + u * sH + ry) * kW + v * sW + rx) * Cig + c];
                }
    status = FD_FN(winograd_pack)(&inner, wd, inner_blob, &inner_bytes);
    free(wd);
    return status;
}

/* X's rows [0, inner->in_h) for output rows from oy0 of image n's dilation phase (qy, qx) (module comment),
 * zeros in the padding. A stride or a dilation steps through the input (one of them is 1). */
static void FD_FN(conv_winograd_band)(const fd_geometry *geo, const fd_geometry *inner, const FD_REAL *FD_RESTRICT x,
                                      ptrdiff_t n, ptrdiff_t oy0, ptrdiff_t qy, ptrdiff_t qx, FD_REAL *FD_RESTRICT band)
{
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t step_h = sH * geo->dilation_h, step_w = sW * geo->dilation_w;
    const ptrdiff_t G = geo->groups, Cig = Cin / G;
    for (ptrdiff_t j = 0; j < inner->in_h; j++)
        for (ptrdiff_t i = 0; i < inner->in_w; i++) {
            FD_REAL *to = band + (j * inner->in_w + i) * inner->in_channels;
            for (ptrdiff_t g = 0; g < G; g++)
                for (ptrdiff_t ry = 0; ry < sH; ry++) {
                    const ptrdiff_t iy = (oy0 + j) * step_h + qy + ry - geo->pad_top;
                    for (ptrdiff_t rx = 0; rx < sW; rx++, to += Cig) {
                        const ptrdiff_t ix = i * step_w + qx + rx - geo->pad_left;
                        if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                            memcpy(to, x + ((n * H + iy) * W + ix) * Cin + g * Cig, (size_t)Cig * sizeof(FD_REAL));
                        else
                            memset(to, 0, (size_t)Cig * sizeof(FD_REAL));
                    }
                }
        }
}

static int FD_FN(conv_winograd_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    const fd_geometry *geo = op->geo;
    if (conv_winograd_direct(geo)) {   /* an im2col task (conv_winograd_tasks) */
        fd_operands im2col_op = *op;
        im2col_op.packed = fd_blob_part(op->packed, CONV_WINOGRAD_IM2COL_BLOB);
        return FD_FN(im2col_run)(&im2col_op, t, workspace);
    }
    const ptrdiff_t P = conv_winograd_phases(geo), n = t->part / P, qy = t->part % P / geo->dilation_w,
                    qx = t->part % P % geo->dilation_w;
    const ptrdiff_t rows = t->row_end - t->row_begin, width = conv_winograd_phase_size(geo->out_w, geo->dilation_w, qx);
    if (rows < 1 || t->row_begin < 0 || rows > conv_winograd_band_rows(geo) || t->part < 0 || n >= geo->batch ||
        t->row_end > conv_winograd_phase_size(geo->out_h, geo->dilation_h, qy))
        return FD_ERR_WORKSPACE;
    /* The band's rows of the phase's whole correlation: deconv_winograd's one-thread task over the band,
       with the whole's choice of kernel and tiles (winograd_run_rows_of), so that no band boundary changes
       a bit (the bands start on the whole's tile grid: conv_winograd_tasks). */
    const ptrdiff_t phase_rows = conv_winograd_phase_size(geo->out_h, geo->dilation_h, qy);
    const fd_geometry whole = conv_winograd_inner(geo, phase_rows, width);
    const fd_geometry band_geo = conv_winograd_inner(geo, rows, width);
    const ptrdiff_t side = conv_winograd_side(geo, phase_rows, qx);
    if (t->row_begin % side != 0 || (t->row_end % side != 0 && t->row_end != phase_rows)) return FD_ERR_ARGUMENT;
    const int dtype = sizeof(FD_REAL) == sizeof(double) ? FD_FLOAT64 : FD_FLOAT32;
    FD_REAL *band = (FD_REAL *)workspace;
    FD_REAL *outputs = (FD_REAL *)((char *)workspace + conv_winograd_band_bytes(geo, dtype));
    FD_FN(conv_winograd_band)(geo, &band_geo, (const FD_REAL *)op->x, n, t->row_begin, qy, qx, band);

    const fd_task band_task = {0, 0, fd_ceil_div(rows, side), t->col_begin, t->col_end};   /* its tile rows */
    fd_operands band_op = *op;
    band_op.geo = &band_geo;
    band_op.packed = fd_blob_part(op->packed, CONV_WINOGRAD_INNER_BLOB);
    band_op.x = band;
    FD_REAL *const y = (FD_REAL *)op->y;
    const ptrdiff_t Wo = geo->out_w, Cout = geo->out_channels;
    band_op.y = P == 1 ? y + (n * geo->out_h + t->row_begin) * Wo * Cout : outputs;
    const int status = FD_FN(winograd_run_rows_of)(&band_op, &whole, &band_task,
                                                   (char *)outputs + conv_winograd_outputs_bytes(geo, dtype));
    if (status != FD_OK || P == 1) return status;
    /* the phase's outputs to every dH-th row and dW-th column of y: the task's columns of each group */
    const ptrdiff_t G = geo->groups, Cog = Cout / G, cols = t->col_end - t->col_begin;
    for (ptrdiff_t j = 0; j < rows; j++) {
        const ptrdiff_t oy = (t->row_begin + j) * geo->dilation_h + qy;
        for (ptrdiff_t i = 0; i < width; i++) {
            FD_REAL *to = y + ((n * geo->out_h + oy) * Wo + i * geo->dilation_w + qx) * Cout + t->col_begin;
            const FD_REAL *from = outputs + (j * width + i) * Cout + t->col_begin;
            for (ptrdiff_t g = 0; g < G; g++) memcpy(to + g * Cog, from + g * Cog, (size_t)cols * sizeof(FD_REAL));
        }
    }
    return FD_OK;
}

#endif
