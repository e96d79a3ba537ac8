/* im2col + GEMM convolution, float and double. See conv_im2col.template.c. */
#include "conv_geometry.h"
#include "templating.h"
#include "gemm.h"
#include "kernels.h"

#define FD_TEMPLATE "conv_im2col.template.c"
#include "instantiate_types.h"
