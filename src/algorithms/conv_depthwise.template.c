/* Algorithm "depthwise" of conv2d (C symbols conv_depthwise_*; the transposed convolution's
 * "depthwise" is deconv_depthwise.template.c): convolution with one input channel per group
 * (groups == C_in, any channel multiplier Cog = C_out/C_in), an algorithm template (see algorithm.h).
 *
 * As an im2col GEMM it would have K = kH*kW and N = Cog per group, far too small, so it is a direct
 * kernel vectorised over output channels, bound by memory: the microkernel in kernels/depthwise_rows*.c
 * (one clone per ISA, a file each), with the weight reordered to wr[ky, kx, c] = w[c, ky, kx, 0]. Padding taps
 * are terms of the sum (0 * wr, as in im2col). The packing and the run serve "grouped" too
 * (conv_grouped.template.c: C_in/groups input channels, wr[ky, kx, ci, c] = w[c, ky, kx, ci]).
 *
 * Task: rows [row_begin, row_end) of the N*Ho output rows, output channels [col_begin, col_end). No workspace.
 * Where consecutive output rows share input rows of a large image and there are channels to cut instead
 * (C_out >= 128), a call on many threads has bands up to kH rows tall, so that a task reads its input rows
 * once for several output rows: one-row tasks, each on another thread, read every input row about kH/sH
 * times from the shared cache or memory (conv_depthwise_bands).
 */
#if defined(FD_ALGORITHM_SHARED)

#include "algorithm.h"
#include "kernels/depthwise_rows.h"

static const char *conv_depthwise_unsupported(const fd_geometry *geo) {
    if (geo->groups != geo->in_channels) return "it needs one input channel per group (groups == C_in)";
    return NULL;
}

/* Blob parts: the reordered weight. */
enum { CONV_DEPTHWISE_WEIGHT };

#define conv_depthwise_workspace fd_no_workspace

/* (part 0, rows [r0, r1) of the N*Ho output rows, output channels [c0, c1)): about 4 tasks per thread, one
 * when serial. Bands are N*Ho / (4*threads) rows tall, every channel; where that is at most half of
 * least_rows, they are taller, up to least_rows, as far as cutting the channels into chunks of at least
 * channel_step keeps about 4 tasks per thread. Chunks start at multiples of 16 channels (whole vectors in every clone). */
static inline ptrdiff_t conv_depthwise_bands(const fd_geometry *geo, int threads, ptrdiff_t least_rows,
                                             ptrdiff_t channel_step, fd_task *tasks) {
    const ptrdiff_t rows = geo->batch * geo->out_h, C = geo->out_channels, want = 4 * (ptrdiff_t)threads;
    ptrdiff_t count = 0;
    if (rows <= 0 || C <= 0) return 0;
    ptrdiff_t band = threads > 1 ? fd_ceil_div(rows, want) : rows, width = C;
    if (threads > 1 && 2 * band <= least_rows && channel_step > 0 && C / channel_step > 1) {
        const ptrdiff_t steps = C / channel_step;
        const ptrdiff_t taller = fd_ceil_div(rows * steps, want);
        band = taller < least_rows ? taller : least_rows;
        ptrdiff_t chunks = fd_ceil_div(want, fd_ceil_div(rows, band));
        if (chunks > steps) chunks = steps;
        width = fd_ceil_div(fd_ceil_div(C, chunks), 16) * 16;
    }
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += band)
        for (ptrdiff_t c0 = 0; c0 < C; c0 += width)
            fd_task_add(tasks, &count, 0, r0, r0 + band < rows ? r0 + band : rows, c0, c0 + width < C ? c0 + width : C);
    return count;
}

/* Input images of more elements than this (2 MiB of float32) do not stay in a core's cache between tasks,
 * so one-row tasks on different threads would read each of their input rows again from the shared cache. */
#define CONV_DEPTHWISE_CACHED_IMAGE (1 << 19)

/* A tasks rule (fd_tasks_fn): conv_depthwise_bands, up to kH rows tall where consecutive output rows share
 * input rows of a large image, channels in chunks of at least 64. */
static inline ptrdiff_t conv_depthwise_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    const int rows_share = (geo->kernel_h - 1) * geo->dilation_h + 1 > geo->stride_h;
    const int large = geo->in_h * geo->in_w * geo->in_channels > CONV_DEPTHWISE_CACHED_IMAGE;
    return conv_depthwise_bands(geo, threads, rows_share && large ? geo->kernel_h : 1, 64, tasks);
}

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_NAMED_ALGORITHM(conv_depthwise, "depthwise", 0)

#else

static int FD_FN(conv_depthwise_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t C = geo->out_channels, Cig = geo->in_channels / geo->groups;
    const ptrdiff_t taps = geo->kernel_h * geo->kernel_w * Cig;   /* (ky, kx, ci) */
    fd_blob b;
    fd_blob_begin(&b, blob, 1);
    FD_REAL *wr = (FD_REAL *)fd_blob_add(&b, CONV_DEPTHWISE_WEIGHT, (size_t)(taps * C) * sizeof(FD_REAL));
    *bytes = b.size;
    if (blob == NULL) return FD_OK;
    const FD_REAL *w = (const FD_REAL *)weight;   /* (C_out, kH, kW, Cig) */
    for (ptrdiff_t c = 0; c < C; c++)
        for (ptrdiff_t t = 0; t < taps; t++) wr[t * C + c] = w[c * taps + t];
    return FD_OK;
}

static int FD_FN(conv_depthwise_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    (void)workspace;
    return FD_FN(conv_depthwise_rows)(op->geo, (const FD_REAL *)op->x,
                                      (const FD_REAL *)fd_blob_part(op->packed, CONV_DEPTHWISE_WEIGHT),
                                      (const FD_REAL *)op->bias, (FD_REAL *)op->y, t->row_begin, t->row_end,
                                      t->col_begin, t->col_end);
}

#endif
