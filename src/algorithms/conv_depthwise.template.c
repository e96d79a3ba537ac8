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
 * Task: rows [row_begin, row_end) of the N*Ho output rows. No workspace.
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
#define conv_depthwise_tasks fd_output_row_tasks

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
                                      (const FD_REAL *)op->bias, (FD_REAL *)op->y, t->row_begin, t->row_end);
}

#endif
