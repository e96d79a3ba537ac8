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
 *
 * THE BOUND THE KERNELS ASSUME (fastdeconv/_params.py must reject anything beyond it). The kernels
 * never rely on wrapping: they are UBSan-clean under -fno-wrapv up to this bound.
 *   1. Per spatial axis, with in, out, k, s, d, pad_begin, pad_end that axis's input size, output
 *      size, kernel, stride, dilation and pads (k, s, d, in, out >= 1; pads >= 0):
 *        transposed:  in + out + (in - 1)*s  + (k - 1)*d + pad_begin + pad_end + s + d  <  2^63
 *        convolution: in + out + (out - 1)*s + (k - 1)*d + pad_begin + pad_end + s + d  <  2^63
 *      (output_padding < max(s, d) is within it). Every coordinate a kernel forms (a tap's row
 *      iy*s - pad_begin + ky*d, its quotient by s, a loop bound such as out + s - 1) is a sum of
 *      some of these terms, each at most once and with either sign, so it fits in ptrdiff_t. A
 *      coordinate that may lie outside the image or the kernel (e.g. the first tap of a pixel
 *      2^60 columns left of the output) is compared or clamped before it is multiplied by a size.
 *   2. The element counts N*H*W*C_in (x), N*H_out*W_out*C_out (y) and C_in*kH*kW*C_out/groups (the
 *      weight) are each < 2^48, so that offsets into them, packed weights and workspaces (at most
 *      2^14 bytes per weight element: 1536 pointers per tap) fit in 64 bits. Arrays that exist in
 *      memory always satisfy this.
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
