/* The CPU algorithm table. Each algorithm is one template file (see algorithm.h for the
 * protocol) instantiated here, and one entry of fd_algorithms[]: adding an algorithm is a
 * new src/algorithms/<name>.template.c plus its three-line block and its entry below. Python reads the
 * table through fastdeconv._cpu (names, supports, pack, run); the order is the listing order. */
#include <stdlib.h>
#include <string.h>

#include "algorithm.h"
#include "kernels/depthwise_rows.h"
#include "kernels/winograd_tiles.h"

#define FD_TEMPLATE "algorithms/deconv_col2im.template.c"
#include "instantiate_algorithm.h"
#undef FD_TEMPLATE

#define FD_TEMPLATE "algorithms/deconv_phase.template.c"
#include "instantiate_algorithm.h"
#undef FD_TEMPLATE

#define FD_TEMPLATE "algorithms/deconv_winograd.template.c"
#include "instantiate_algorithm.h"
#undef FD_TEMPLATE

#define FD_TEMPLATE "algorithms/deconv_depthwise.template.c"
#include "instantiate_algorithm.h"
#undef FD_TEMPLATE

#define FD_TEMPLATE "algorithms/conv_im2col.template.c"
#include "instantiate_algorithm.h"
#undef FD_TEMPLATE

#define FD_TEMPLATE "algorithms/conv_depthwise.template.c"
#include "instantiate_algorithm.h"
#undef FD_TEMPLATE

const fd_algorithm *const fd_algorithms[] = {
    &fd_algorithm_col2im,    /* GEMM into a column buffer, then scatter-add: any layer */
    &fd_algorithm_phase,     /* one dense GEMM per stride phase, every output written once */
    &fd_algorithm_winograd,  /* phase decomposition, each phase by Winograd tiles: fewer multiplies */
    &fd_algorithm_depthwise, /* direct kernel over channels, one input channel per group */
    &fd_algorithm_im2col,    /* convolution: indirect GEMM over an im2col indirection buffer */
    &fd_algorithm_conv_depthwise, /* convolution, listed as "depthwise": direct kernel, C_in/groups = 1 */
};
const int fd_algorithm_count = (int)(sizeof(fd_algorithms) / sizeof(fd_algorithms[0]));
