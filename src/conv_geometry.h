/* The shape of one 2-D (transposed) convolution over NHWC data, as the C kernels see it.
 *
 * The Python layer (fastdeconv/_params.py) parses and validates every argument and
 * computes the output size; the kernels trust these numbers.
 *
 * Transposed convolution, Cig = C_in/groups, Cog = C_out/groups:
 *   y[n, oy, ox, g*Cog + o] = bias[g*Cog + o]
 *       + sum x[n, iy, ix, g*Cig + i] * w[g*Cig + i, ky, kx, o]
 *   over oy = iy*sH - pad_top + ky*dH, ox = ix*sW - pad_left + kx*dW.
 *   weight layout (C_in, kH, kW, Cog).
 * Convolution: weight layout (C_out, kH, kW, Cig), x read at
 *   (oy*sH - pad_top + ky*dH, ox*sW - pad_left + kx*dW), zero outside the image.
 */
#ifndef FASTDECONV_CONV_GEOMETRY_H
#define FASTDECONV_CONV_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

#if defined(_MSC_VER)
#define FD_RESTRICT __restrict
#else
#define FD_RESTRICT __restrict__
#endif

/* Largest kernel side the phase kernels accept (per-phase tap tables live on the stack). */
#define FD_MAX_PHASE_TAPS 256

enum { FD_OK = 0, FD_ERR_ARGUMENT = -1, FD_ERR_WORKSPACE = -2 };

typedef struct {
    ptrdiff_t batch, in_h, in_w, in_channels;
    ptrdiff_t out_h, out_w, out_channels;
    ptrdiff_t kernel_h, kernel_w;
    ptrdiff_t stride_h, stride_w;
    ptrdiff_t dilation_h, dilation_w;
    ptrdiff_t pad_top, pad_left;
    ptrdiff_t groups;
} fd_geometry;

static inline ptrdiff_t fd_floor_div(ptrdiff_t a, ptrdiff_t b) {
    ptrdiff_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static inline ptrdiff_t fd_ceil_div(ptrdiff_t a, ptrdiff_t b) { return -fd_floor_div(-a, b); }

#endif
