/* Algorithm "planar": transposed convolution vectorised over output pixels, for layers with few outputs
 * per group (a probability-map or depth head with 1-4 outputs, a super-resolution tail to 1-3 colours),
 * an algorithm template (see algorithm.h).
 *
 * A GEMM over channels has N = C_out/groups there, a fraction of a register (phase), or a column
 * buffer and a scatter-add as large as the output times kH*kW (col2im). The microkernel in
 * kernels/planar_rows.c (one clone per ISA) instead transposes the input rows it reads to
 * (C_in, columns) and, per output row, channel and column phase, accumulates runs of consecutive output
 * pixels: one broadcast weight times a vector of input pixels per tap and channel, every output written
 * once, only each phase's own taps visited.
 *
 * Task: output rows [row_begin, row_end) of the N*Ho rows by output columns [col_begin, col_end), a
 * multiple of sW wide (the last one to Wo), by the part-th block of planar_groups(geo) groups. Workspace:
 * the ring of transposed input rows for a task of planar_columns(geo) columns (kernels/planar_rows.h),
 * bounded by about PLANAR_RING_BYTES whatever the image, and by the weight's C_in and kernel otherwise.
 */
#if defined(FD_ALGORITHM_SHARED)

#include "algorithm.h"
#include "kernels/planar_rows.h"

#define FD_PLANAR_MAX_STRIDE 4096
#define FD_PLANAR_MAX_SPREAD 256
#define PLANAR_RING_BYTES (1 << 20)
#define PLANAR_GROUP_ELEMENTS (64 << 10)
/* the narrowest task (output columns per stride): a vector of pixels per phase (16 floats on AVX-512) */
#define PLANAR_MIN_COLUMNS 16
#define PLANAR_MAX_STRIDES 256

static const char *planar_unsupported(const fd_geometry *geo) {
    if (geo->kernel_h > FD_MAX_PHASE_TAPS || geo->kernel_w > FD_MAX_PHASE_TAPS ||
        geo->kernel_h * geo->kernel_w > FD_PLANAR_MAX_TAPS)
        return "its kernels are limited to kH*kW <= FD_PLANAR_MAX_TAPS = 1024";
    if (geo->stride_h > FD_PLANAR_MAX_STRIDE || geo->stride_w > FD_PLANAR_MAX_STRIDE)
        return "its strides are limited to 4096 (its tap tables have a row per stride phase)";
    /* the ring holds every input row and column a tile's taps reach: (k - 1)*d / s <= FD_PLANAR_MAX_SPREAD,
       compared without forming the product (d may be near 2^63 / k) */
    if ((geo->kernel_h > 1 && geo->dilation_h > FD_PLANAR_MAX_SPREAD * geo->stride_h / (geo->kernel_h - 1)) ||
        (geo->kernel_w > 1 && geo->dilation_w > FD_PLANAR_MAX_SPREAD * geo->stride_w / (geo->kernel_w - 1)))
        return "its taps must lie within (k - 1)*dilation/stride <= 256 input rows and columns of each other";
    return NULL;
}

/* Groups per task: as many as have at most PLANAR_GROUP_ELEMENTS weights and ring elements together (at
 * least one; blocks of equal size but the last). A task reads its groups' weights and ring rows once per
 * output row: with every group in one task, layers of many groups outgrew the L2 cache. The ring's width
 * is that of the widest task, planar_columns's. */
static ptrdiff_t planar_groups(const fd_geometry *geo) {
    const ptrdiff_t G = geo->groups, Cig = geo->in_channels / G;
    const ptrdiff_t cols = fd_ceil_div(geo->out_w, geo->stride_w) * geo->stride_w;
    const ptrdiff_t ring = fd_planar_ring_rows(geo) * Cig * fd_planar_ring_width(geo, cols);
    const ptrdiff_t per_group = geo->kernel_h * geo->kernel_w * Cig * (geo->out_channels / G) + ring;
    const ptrdiff_t fit = per_group > 0 ? PLANAR_GROUP_ELEMENTS / per_group : G;
    if (fit >= G) return G;
    const ptrdiff_t blocks = fd_ceil_div(G, fit < 1 ? 1 : fit);
    return fd_ceil_div(G, blocks);
}

/* The widest task in output columns (a multiple of sW): at most PLANAR_MAX_STRIDES strides, its ring
 * within PLANAR_RING_BYTES of float64, or PLANAR_MIN_COLUMNS strides wide if even that is more.
 * Independent of the dtype, since the tasks are (fd_tasks_fn has none). Short ring rows keep the rows
 * a block of pixels reads (every tap's, of every channel) on few pages and cache sets: 1-D layers of
 * 32-64 inputs on rows of 1024-4096 ran 1.1-3x faster in tasks of 256 strides than of the whole row. */
static ptrdiff_t planar_columns(const fd_geometry *geo) {
    const ptrdiff_t sW = geo->stride_w;
    const ptrdiff_t task_channels = planar_groups(geo) * (geo->in_channels / geo->groups);
    const ptrdiff_t channels = task_channels > 0 ? task_channels : 1;   /* an empty input has none */
    const ptrdiff_t per_column = fd_planar_ring_rows(geo) * channels * (ptrdiff_t)sizeof(double);
    const ptrdiff_t fixed = per_column * (fd_planar_ring_width(geo, 0));
    ptrdiff_t strides = fixed < PLANAR_RING_BYTES ? (PLANAR_RING_BYTES - fixed) / per_column : 0;
    if (strides > PLANAR_MAX_STRIDES) strides = PLANAR_MAX_STRIDES;
    if (strides < PLANAR_MIN_COLUMNS) strides = PLANAR_MIN_COLUMNS;
    const ptrdiff_t whole = fd_ceil_div(geo->out_w, sW);
    return (strides < whole ? strides : whole) * sW;
}

static fd_workspace planar_workspace(const fd_geometry *geo, int dtype) {
    fd_workspace ws;
    ws.chunk = 0;
    ws.bytes = fd_planar_ring_bytes(geo, planar_columns(geo), planar_groups(geo), fd_itemsize(dtype));
    return ws;
}

/* Blocks of planar_groups(geo) groups; column ranges of at most planar_columns(geo), narrower (down to
 * PLANAR_MIN_COLUMNS strides) when the rows and group blocks alone give fewer than 2 tasks per thread (a
 * 1-D layer: H_out = 1); then ranges of rows, about 4 tasks per thread overall. A task's rows share its
 * ring: each input row's channels of the task's groups are transposed once per task. */
static ptrdiff_t planar_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    const ptrdiff_t sW = geo->stride_w, Wo = geo->out_w, group_blocks = fd_ceil_div(geo->groups, planar_groups(geo));
    const ptrdiff_t rows = geo->batch * geo->out_h, rows_and_blocks = rows * group_blocks;
    if (rows <= 0 || Wo <= 0) return 0;
    ptrdiff_t cols = planar_columns(geo);
    if (threads > 1 && rows_and_blocks < 2 * (ptrdiff_t)threads) {
        const ptrdiff_t want = fd_ceil_div(2 * (ptrdiff_t)threads, rows_and_blocks);
        ptrdiff_t narrow = fd_ceil_div(fd_ceil_div(Wo, want), sW) * sW;
        if (narrow < PLANAR_MIN_COLUMNS * sW) narrow = PLANAR_MIN_COLUMNS * sW;
        if (narrow < cols) cols = narrow;
    }
    const ptrdiff_t blocks = fd_ceil_div(Wo, cols);
    ptrdiff_t per_task = threads > 1 ? fd_ceil_div(rows_and_blocks * blocks, 4 * (ptrdiff_t)threads) : rows;
    if (per_task < 1) per_task = 1;
    if (per_task > rows) per_task = rows;
    ptrdiff_t count = 0;
    for (ptrdiff_t part = 0; part < group_blocks; part++)
        for (ptrdiff_t c0 = 0; c0 < Wo; c0 += cols)
            for (ptrdiff_t r0 = 0; r0 < rows; r0 += per_task)
                fd_task_add(tasks, &count, part, r0, r0 + per_task < rows ? r0 + per_task : rows, c0,
                            c0 + cols < Wo ? c0 + cols : Wo);
    return count;
}

/* Blob parts: the row and column tap tables, the reordered weight, then whether every weight is finite
   (an int: the border pixels then run in the vector blocks, kernels/planar_rows.h). */
enum { PLANAR_TAPS_Y, PLANAR_TAPS_X, PLANAR_WEIGHT, PLANAR_FINITE };

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_ALGORITHM(planar, 1)

#else

static int FD_FN(planar_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, sH = geo->stride_h, sW = geo->stride_w;
    const ptrdiff_t C = geo->out_channels, G = geo->groups, Cog = C / G, Cig = geo->in_channels / G;
    fd_blob b;
    fd_blob_begin(&b, blob, 4);
    ptrdiff_t *taps_y = (ptrdiff_t *)fd_blob_add(&b, PLANAR_TAPS_Y, (size_t)(sH * (1 + kH)) * sizeof(ptrdiff_t));
    ptrdiff_t *taps_x = (ptrdiff_t *)fd_blob_add(&b, PLANAR_TAPS_X, (size_t)(sW * (1 + kW)) * sizeof(ptrdiff_t));
    FD_REAL *wp = (FD_REAL *)fd_blob_add(&b, PLANAR_WEIGHT, (size_t)(C * kH * kW * Cig) * sizeof(FD_REAL));
    int *finite = (int *)fd_blob_add(&b, PLANAR_FINITE, sizeof(int));
    *bytes = b.size;
    if (blob == NULL) return FD_OK;
    fd_phase_taps(sH, kH, geo->dilation_h, geo->pad_top, taps_y);
    fd_phase_taps(sW, kW, geo->dilation_w, geo->pad_left, taps_x);
    const FD_REAL *w = (const FD_REAL *)weight;   /* (C_in, kH, kW, Cog) */
    for (ptrdiff_t o = 0; o < C; o++) {
        const ptrdiff_t g = o / Cog, oo = o % Cog;
        for (ptrdiff_t t = 0; t < kH * kW; t++)
            for (ptrdiff_t i = 0; i < Cig; i++)
                wp[(o * kH * kW + t) * Cig + i] = w[((g * Cig + i) * kH * kW + t) * Cog + oo];
    }
    *finite = FD_FN(values_finite)(wp, C * kH * kW * Cig);
    return FD_OK;
}

static int FD_FN(planar_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    const ptrdiff_t block = planar_groups(op->geo), g0 = t->part * block;
    const ptrdiff_t g1 = g0 + block < op->geo->groups ? g0 + block : op->geo->groups;
    return FD_FN(planar_rows)(op->geo, (const ptrdiff_t *)fd_blob_part(op->packed, PLANAR_TAPS_Y),
                              (const ptrdiff_t *)fd_blob_part(op->packed, PLANAR_TAPS_X), (const FD_REAL *)op->x,
                              (const FD_REAL *)fd_blob_part(op->packed, PLANAR_WEIGHT), (const FD_REAL *)op->bias,
                              (FD_REAL *)op->y, t->row_begin, t->row_end, t->col_begin, t->col_end, g0, g1,
                              *(const int *)fd_blob_part(op->packed, PLANAR_FINITE), workspace);
}

#endif
