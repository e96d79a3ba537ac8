/* im2col + GEMM convolution, float and double. See conv_im2col.template.c. */
#include "conv_geometry.h"
#include "templating.h"
#include "gemm.h"
#include "kernels.h"

#define FD_REAL float
#define FD_PREFIX s
#include "conv_im2col.template.c"
#undef FD_REAL
#undef FD_PREFIX

#define FD_REAL double
#define FD_PREFIX d
#include "conv_im2col.template.c"
#undef FD_REAL
#undef FD_PREFIX
