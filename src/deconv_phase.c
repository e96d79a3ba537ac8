/* Stride-phase (sub-pixel) transposed convolution, float and double. See deconv_phase.template.c. */
#include "conv_geometry.h"
#include "templating.h"
#include "gemm.h"
#include "kernels.h"

#define FD_TEMPLATE "deconv_phase.template.c"
#include "instantiate_types.h"
