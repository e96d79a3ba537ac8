/* Algorithm "depthwise": transposed convolution with one input channel per group (groups == C_in,
 * any channel multiplier Cog = C_out/C_in), an algorithm template (see algorithm.h).
 *
 * A GEMM would have K = taps and N = Cog, far too small, so this is a direct kernel vectorised
 * over channels and bound by memory: the microkernel in kernels/depthwise_rows*.c (one clone per ISA,
 * a file each) visits only each output phase's taps, with wr[ky, kx, c] = w[c / Cog, ky, kx, c % Cog].
 *
 * Task: rows [row_begin, row_end) of the N*Ho output rows. No workspace.
 */
#if defined(FD_ALGORITHM_SHARED)

#include "algorithm.h"
#include "kernels/depthwise_rows.h"

#define FD_DEPTHWISE_MAX_STRIDE 4096

static const char *depthwise_unsupported(const fd_geometry *geo) {
    if (geo->groups != geo->in_channels) return "it needs one input channel per group (groups == C_in)";
    if (geo->kernel_h > FD_MAX_PHASE_TAPS || geo->kernel_w > FD_MAX_PHASE_TAPS)
        return "its kernel sides are limited to FD_MAX_PHASE_TAPS = 256";
    if (geo->stride_h > FD_DEPTHWISE_MAX_STRIDE || geo->stride_w > FD_DEPTHWISE_MAX_STRIDE)
        return "its strides are limited to 4096 (its tap tables have a row per stride phase)";
    return NULL;
}

/* Blob parts: the row and column tap tables, then the reordered weight. */
enum { DEPTHWISE_TAPS_Y, DEPTHWISE_TAPS_X, DEPTHWISE_WEIGHT };

#define depthwise_workspace fd_no_workspace
#define depthwise_tasks fd_output_row_tasks

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_ALGORITHM(depthwise, 1)

#else

static int FD_FN(depthwise_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, sH = geo->stride_h, sW = geo->stride_w;
    const ptrdiff_t C = geo->out_channels, Cog = C / geo->in_channels;
    fd_blob b;
    fd_blob_begin(&b, blob, 3);
    ptrdiff_t *taps_y = (ptrdiff_t *)fd_blob_add(&b, DEPTHWISE_TAPS_Y, (size_t)(sH * (1 + kH)) * sizeof(ptrdiff_t));
    ptrdiff_t *taps_x = (ptrdiff_t *)fd_blob_add(&b, DEPTHWISE_TAPS_X, (size_t)(sW * (1 + kW)) * sizeof(ptrdiff_t));
    FD_REAL *wr = (FD_REAL *)fd_blob_add(&b, DEPTHWISE_WEIGHT, (size_t)(kH * kW * C) * sizeof(FD_REAL));
    *bytes = b.size;
    if (blob == NULL) return FD_OK;
    fd_phase_taps(sH, kH, geo->dilation_h, geo->pad_top, taps_y);
    fd_phase_taps(sW, kW, geo->dilation_w, geo->pad_left, taps_x);
    const FD_REAL *w = (const FD_REAL *)weight;   /* (C_in, kH, kW, Cog) */
    for (ptrdiff_t c = 0; c < C; c++)
        for (ptrdiff_t t = 0; t < kH * kW; t++) wr[t * C + c] = w[((c / Cog) * kH * kW + t) * Cog + c % Cog];
    return FD_OK;
}

static int FD_FN(depthwise_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    (void)workspace;
    return FD_FN(depthwise_rows)(op->geo, (const ptrdiff_t *)fd_blob_part(op->packed, DEPTHWISE_TAPS_Y),
                                 (const ptrdiff_t *)fd_blob_part(op->packed, DEPTHWISE_TAPS_X),
                                 (const FD_REAL *)op->x, (const FD_REAL *)fd_blob_part(op->packed, DEPTHWISE_WEIGHT),
                                 (const FD_REAL *)op->bias, (FD_REAL *)op->y, t->row_begin, t->row_end);
}

#endif
