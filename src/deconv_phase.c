/* Stride-phase (sub-pixel) transposed convolution, float and double. See deconv_phase.template.c. */
#include "conv_geometry.h"
#include "templating.h"
#include "gemm.h"
#include "kernels.h"

#define FD_REAL float
#define FD_PREFIX s
#include "deconv_phase.template.c"
#undef FD_REAL
#undef FD_PREFIX

#define FD_REAL double
#define FD_PREFIX d
#include "deconv_phase.template.c"
#undef FD_REAL
#undef FD_PREFIX
