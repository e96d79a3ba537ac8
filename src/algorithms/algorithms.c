/* The CPU algorithm table. Each algorithm is one template file (algorithm.h: the protocol, and how to
 * add one), instantiated here by two lines, and its row of fd_algorithms[]. Each template includes the
 * kernel headers it uses. Python reads the table through fastdeconv._cpu (names, supports, pack, run);
 * the order is the listing order. */
#include "algorithm.h"

#define FD_TEMPLATE "algorithms/deconv_col2im.template.c"
#include "instantiate_algorithm.h"

#define FD_TEMPLATE "algorithms/deconv_phase.template.c"
#include "instantiate_algorithm.h"

/* after deconv_phase, whose kernel (its fallback) and packed blob it uses */
#define FD_TEMPLATE "algorithms/deconv_winograd.template.c"
#include "instantiate_algorithm.h"

#define FD_TEMPLATE "algorithms/deconv_depthwise.template.c"
#include "instantiate_algorithm.h"

#define FD_TEMPLATE "algorithms/deconv_planar.template.c"
#include "instantiate_algorithm.h"

#define FD_TEMPLATE "algorithms/conv_im2col.template.c"
#include "instantiate_algorithm.h"

#define FD_TEMPLATE "algorithms/conv_depthwise.template.c"
#include "instantiate_algorithm.h"

/* after conv_depthwise, whose packing and kernel it uses */
#define FD_TEMPLATE "algorithms/conv_grouped.template.c"
#include "instantiate_algorithm.h"

/* after deconv_winograd and conv_im2col, whose kernels it runs (on a space-to-depth band of the input; on small outputs) */
#define FD_TEMPLATE "algorithms/conv_winograd.template.c"
#include "instantiate_algorithm.h"

const fd_algorithm *const fd_algorithms[] = {
    &fd_algorithm_col2im,    /* GEMM into a column buffer, then scatter-add: any layer */
    &fd_algorithm_phase,     /* one dense GEMM per stride phase, every output written once */
    &fd_algorithm_winograd,  /* phase decomposition, each phase by Winograd tiles: fewer multiplies */
    &fd_algorithm_depthwise, /* direct kernel over channels, one input channel per group */
    &fd_algorithm_planar,    /* direct kernel over runs of output pixels: few outputs per group */
    &fd_algorithm_im2col,    /* convolution: indirect GEMM over an im2col indirection buffer */
    &fd_algorithm_conv_depthwise, /* convolution, listed as "depthwise": direct kernel, C_in/groups = 1 */
    &fd_algorithm_conv_winograd,  /* convolution, listed as "winograd": stride phases as channels, Winograd tiles */
    &fd_algorithm_conv_grouped,   /* convolution, listed as "grouped": the depthwise kernel, C_in/groups > 1 */
};
const int fd_algorithm_count = (int)(sizeof(fd_algorithms) / sizeof(fd_algorithms[0]));
