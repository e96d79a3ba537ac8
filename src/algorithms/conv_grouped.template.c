/* Algorithm "grouped" of conv2d (C symbols conv_grouped_*): convolution with few channels per group
 * (groups > 1, C_in/groups > 1), an algorithm template (see algorithm.h) that runs the direct kernel of
 * "depthwise" (conv_depthwise.template.c, kernels/depthwise_rows*.c), vectorised over output channels
 * across groups: each FMA is a full vector of useful products, with the input channel of each lane's
 * group spread over the lanes by a permute. As an im2col GEMM a group has N = C_out/groups (a fraction
 * of a tile), and merged groups (group_merge) multiply the zeros of block-diagonal weights. Instantiated
 * after conv_depthwise, whose packing (wr[ky, kx, ci, c] = w[c, ky, kx, ci]) and run it uses.
 *
 * Task: rows [row_begin, row_end) of the N*Ho output rows, all output channels. No workspace.
 */
#if defined(FD_ALGORITHM_SHARED)

static const char *conv_grouped_unsupported(const fd_geometry *geo) {
    if (geo->groups < 2 || geo->in_channels == geo->groups)
        return "it needs groups > 1 and more than one input channel per group (one is \"depthwise\")";
    return NULL;
}

#define conv_grouped_workspace fd_no_workspace

/* A tasks rule (fd_tasks_fn): as fd_output_row_tasks, with every channel (conv_depthwise_bands). */
static inline ptrdiff_t conv_grouped_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    return conv_depthwise_bands(geo, threads, 1, 0, tasks);
}

#elif defined(FD_ALGORITHM_DESCRIPTOR)

FD_DEFINE_NAMED_ALGORITHM(conv_grouped, "grouped", 0)

#else

static int FD_FN(conv_grouped_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    return FD_FN(conv_depthwise_pack)(geo, weight, blob, bytes);
}

static int FD_FN(conv_grouped_run)(const fd_operands *op, const fd_task *t, void *workspace)
{
    return FD_FN(conv_depthwise_run)(op, t, workspace);
}

#endif
