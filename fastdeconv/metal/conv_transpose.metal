// fastdeconv's own Metal compute kernels (Metal Shading Language).
//
// Direct ("gather") kernels: one thread per output element, for the configurations
// MPSCNNConvolution / MPSCNNConvolutionTranspose cannot express (channels per group not a
// multiple of 4, images beyond the texture limits, whatever fastdeconv.weights.mpscnn_transpose_params
// rejects). Buffers are plain NHWC arrays, the same memory as the numpy arrays:
//
//   x      (N, H, W, C_in)                         NHWC
//   weight (C_in, kH, kW, C_out/groups)            conv_transpose2d   (fastdeconv's layout, OHWI of the
//          (C_out, kH, kW, C_in/groups)            conv2d              forward convolution)
//   bias   (C_out,)                                zeros when the call has none
//   y      (N, H_out, W_out, C_out)                NHWC
//
// T is the storage type (float or half); every sum is accumulated in float and rounded once,
// as fastdeconv's CPU backend does for float16.
//
// Transposed convolution, gather form. With Cig = C_in/groups, Cog = C_out/groups,
// oc = g*Cog + o:
//   y[n, oy, ox, oc] = bias[oc] + sum over ky, kx, i of x[n, iy, ix, g*Cig + i] * w[g*Cig + i, ky, kx, o]
//   where oy + pad_top - ky*dH = iy*sH and ox + pad_left - kx*dW = ix*sW, 0 <= iy < H, 0 <= ix < W.
// Convolution:
//   y[n, oy, ox, oc] = bias[oc] + sum of x[n, oy*sH - pad_top + ky*dH, ox*sW - pad_left + kx*dW, g*Cig + i]
//                                        * w[oc, ky, kx, i]   (x is zero outside the image)
//
// The index arithmetic is transcribed line by line into Python in fastdeconv/metal/executors.py
// (class MslTranscription); tests/metal/test_metal_descriptors.py runs that transcription against
// backend="cpu" and checks that the ConvParams struct below has the field order of
// fastdeconv.metal.descriptors.PARAM_FIELDS.
// Every index fits in int: the direct-kernel descriptor refuses tensors of 2**31 elements or more.

#include <metal_stdlib>
using namespace metal;

struct ConvParams {
    int batch;
    int in_h;
    int in_w;
    int in_channels;
    int out_h;
    int out_w;
    int out_channels;
    int kernel_h;
    int kernel_w;
    int stride_h;
    int stride_w;
    int dilation_h;
    int dilation_w;
    int pad_top;
    int pad_left;
    int groups;
};

template <typename T>
static inline void conv_transpose2d_direct(device const T *x, device const T *w, device const T *bias,
                                           device T *y, constant ConvParams &p, uint gid)
{
    const int total = p.batch * p.out_h * p.out_w * p.out_channels;
    if ((int)gid >= total) {
        return;
    }
    const int oc = (int)gid % p.out_channels;
    int rest = (int)gid / p.out_channels;
    const int ox = rest % p.out_w;
    rest = rest / p.out_w;
    const int oy = rest % p.out_h;
    const int n = rest / p.out_h;
    const int cig = p.in_channels / p.groups;
    const int cog = p.out_channels / p.groups;
    const int g = oc / cog;
    const int o = oc - g * cog;
    const int w_step = p.kernel_h * p.kernel_w * cog;
    float acc = float(bias[oc]);
    for (int ky = 0; ky < p.kernel_h; ++ky) {
        const int ty = oy + p.pad_top - ky * p.dilation_h;
        if (ty < 0 || ty % p.stride_h != 0) {
            continue;
        }
        const int iy = ty / p.stride_h;
        if (iy >= p.in_h) {
            continue;
        }
        for (int kx = 0; kx < p.kernel_w; ++kx) {
            const int tx = ox + p.pad_left - kx * p.dilation_w;
            if (tx < 0 || tx % p.stride_w != 0) {
                continue;
            }
            const int ix = tx / p.stride_w;
            if (ix >= p.in_w) {
                continue;
            }
            const int x_base = ((n * p.in_h + iy) * p.in_w + ix) * p.in_channels + g * cig;
            const int w_base = ((g * cig * p.kernel_h + ky) * p.kernel_w + kx) * cog + o;
            for (int i = 0; i < cig; ++i) {
                acc = fma(float(x[x_base + i]), float(w[w_base + i * w_step]), acc);
            }
        }
    }
    y[gid] = T(acc);
}

template <typename T>
static inline void conv2d_direct(device const T *x, device const T *w, device const T *bias,
                                 device T *y, constant ConvParams &p, uint gid)
{
    const int total = p.batch * p.out_h * p.out_w * p.out_channels;
    if ((int)gid >= total) {
        return;
    }
    const int oc = (int)gid % p.out_channels;
    int rest = (int)gid / p.out_channels;
    const int ox = rest % p.out_w;
    rest = rest / p.out_w;
    const int oy = rest % p.out_h;
    const int n = rest / p.out_h;
    const int cig = p.in_channels / p.groups;
    const int cog = p.out_channels / p.groups;
    const int g = oc / cog;
    float acc = float(bias[oc]);
    for (int ky = 0; ky < p.kernel_h; ++ky) {
        const int iy = oy * p.stride_h - p.pad_top + ky * p.dilation_h;
        if (iy < 0 || iy >= p.in_h) {
            continue;
        }
        for (int kx = 0; kx < p.kernel_w; ++kx) {
            const int ix = ox * p.stride_w - p.pad_left + kx * p.dilation_w;
            if (ix < 0 || ix >= p.in_w) {
                continue;
            }
            const int x_base = ((n * p.in_h + iy) * p.in_w + ix) * p.in_channels + g * cig;
            const int w_base = ((oc * p.kernel_h + ky) * p.kernel_w + kx) * cig;
            for (int i = 0; i < cig; ++i) {
                acc = fma(float(x[x_base + i]), float(w[w_base + i]), acc);
            }
        }
    }
    y[gid] = T(acc);
}

// Entry points: buffer(0) x, buffer(1) weight, buffer(2) bias, buffer(3) y, buffer(4) ConvParams.
#define FASTDECONV_ENTRY(NAME, IMPL, T)                                                          \
    kernel void NAME(device const T *x [[buffer(0)]], device const T *w [[buffer(1)]],           \
                     device const T *bias [[buffer(2)]], device T *y [[buffer(3)]],              \
                     constant ConvParams &p [[buffer(4)]], uint gid [[thread_position_in_grid]]) \
    {                                                                                            \
        IMPL<T>(x, w, bias, y, p, gid);                                                          \
    }

FASTDECONV_ENTRY(conv_transpose2d_direct_float, conv_transpose2d_direct, float)
FASTDECONV_ENTRY(conv_transpose2d_direct_half, conv_transpose2d_direct, half)
FASTDECONV_ENTRY(conv2d_direct_float, conv2d_direct, float)
FASTDECONV_ENTRY(conv2d_direct_half, conv2d_direct, half)
