/* GEMM + col2im transposed convolution, float and double. See deconv_col2im.template.c. */
#include "conv_geometry.h"
#include "templating.h"
#include "gemm.h"
#include "kernels.h"

#define FD_TEMPLATE "deconv_col2im.template.c"
#include "instantiate_types.h"
