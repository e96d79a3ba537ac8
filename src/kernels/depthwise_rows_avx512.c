/* The AVX-512 clone of the depthwise kernels (depthwise_rows.template.c, and a float kernel of its own for one
 * output channel per input channel), dispatched by depthwise_rows.c. It may use more than the GEMM's AVX-512
 * kernels (vl, bw, dq): FD_AVX512_DEPTHWISE_FEATURES, checked by fd_depthwise_avx512_available(), so that on a
 * CPU with avx512f but without vl/bw/dq the dispatch falls back to the AVX2 clone (or the portable one).
 * GCC/clang: compiled with baseline flags, only these functions carry that target attribute; MSVC: the whole
 * file is compiled with /arch:AVX512 (setup.py: F, CD, VL, BW, DQ). fd_depthwise_avx512_available() only calls
 * fd_cpu_supports_all (baseline runtime/cpu_features.c), so nothing of the ISA runs before the check. */
#include "depthwise_rows_internal.h"

FD_DEPTHWISE_DECLARE_ISA(avx512)

#if FD_GEMM_X86_SIMD
#include <immintrin.h>

#define FD_TARGET FD_TARGET_FEATURES(FD_AVX512_DEPTHWISE_FEATURES)
#define FD_ISA avx512

int fd_depthwise_avx512_available(void) { return FD_CPU_SUPPORTS(FD_AVX512_DEPTHWISE_FEATURES) ? 1 : 0; }

/* The vector helpers of the convolution kernel's SIMD clone (FD_DW_SIMD in the template), named
 * FD_ISA_FN(dw_*): fd_<s|d>dw_<op>_avx512. Per type: the vector (dwv) and lane-index (dwi) types, lanes per
 * vector, output pixels per register tile, whether a tile may take two vectors of channels (pairs), and
 *   zero()  load(p)  load_part(p, n)  store(p, v)  store_part(p, v, n)   (first n lanes only)
 *   fma(a, b, c) = a*b + c
 *   index(c0, Cog, Cig)     lane l reads element ((c0 + l)/Cog - c0/Cog)*Cig of a loaded vector
 *   expand(p, n, idx)       n elements from p (no more are read), spread over the lanes by idx
 * A tile of TILE pixels holds TILE accumulators, up to 5 weight vectors and an input vector in
 * registers (32 zmm); with pairs (float), TILE/2 pixels of two vectors: 16 accumulators, up to 10 weight
 * vectors and two input vectors. */
#define DW_HELPER static FD_FORCE_INLINE FD_TARGET

typedef __m512 fd_sdwv_avx512;
typedef __m512i fd_sdwi_avx512;
enum { fd_sdw_lanes_avx512 = 16, fd_sdw_tile_avx512 = 16, fd_sdw_pairs_avx512 = 1 };
DW_HELPER __mmask16 fd_sdw_mask_avx512(ptrdiff_t n) { return (__mmask16)((1u << n) - 1u); }
DW_HELPER __m512 fd_sdw_zero_avx512(void) { return _mm512_setzero_ps(); }
DW_HELPER __m512 fd_sdw_load_avx512(const float *p) { return _mm512_loadu_ps(p); }
DW_HELPER __m512 fd_sdw_load_part_avx512(const float *p, ptrdiff_t n) { return _mm512_maskz_loadu_ps(fd_sdw_mask_avx512(n), p); }
DW_HELPER void fd_sdw_store_avx512(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
DW_HELPER void fd_sdw_store_part_avx512(float *p, __m512 v, ptrdiff_t n) { _mm512_mask_storeu_ps(p, fd_sdw_mask_avx512(n), v); }
DW_HELPER __m512 fd_sdw_fma_avx512(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
DW_HELPER __m512i fd_sdw_index_avx512(ptrdiff_t c0, ptrdiff_t cog, ptrdiff_t cig) {
    int32_t lane[16];
    for (int l = 0; l < 16; l++) lane[l] = (int32_t)(((c0 + l) / cog - c0 / cog) * cig);
    return _mm512_loadu_si512(lane);
}
DW_HELPER __m512 fd_sdw_expand_avx512(const float *p, ptrdiff_t n, __m512i idx) {
    return _mm512_permutexvar_ps(idx, fd_sdw_load_part_avx512(p, n));
}

typedef __m512d fd_ddwv_avx512;
typedef __m512i fd_ddwi_avx512;
enum { fd_ddw_lanes_avx512 = 8, fd_ddw_tile_avx512 = 8, fd_ddw_pairs_avx512 = 0 };
DW_HELPER __mmask8 fd_ddw_mask_avx512(ptrdiff_t n) { return (__mmask8)((1u << n) - 1u); }
DW_HELPER __m512d fd_ddw_zero_avx512(void) { return _mm512_setzero_pd(); }
DW_HELPER __m512d fd_ddw_load_avx512(const double *p) { return _mm512_loadu_pd(p); }
DW_HELPER __m512d fd_ddw_load_part_avx512(const double *p, ptrdiff_t n) { return _mm512_maskz_loadu_pd(fd_ddw_mask_avx512(n), p); }
DW_HELPER void fd_ddw_store_avx512(double *p, __m512d v) { _mm512_storeu_pd(p, v); }
DW_HELPER void fd_ddw_store_part_avx512(double *p, __m512d v, ptrdiff_t n) { _mm512_mask_storeu_pd(p, fd_ddw_mask_avx512(n), v); }
DW_HELPER __m512d fd_ddw_fma_avx512(__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); }
DW_HELPER __m512i fd_ddw_index_avx512(ptrdiff_t c0, ptrdiff_t cog, ptrdiff_t cig) {
    long long lane[8];
    for (int l = 0; l < 8; l++) lane[l] = (long long)(((c0 + l) / cog - c0 / cog) * cig);
    return _mm512_loadu_si512(lane);
}
DW_HELPER __m512d fd_ddw_expand_avx512(const double *p, ptrdiff_t n, __m512i idx) {
    return _mm512_permutexvar_pd(idx, fd_ddw_load_part_avx512(p, n));
}
#undef DW_HELPER

/* The template's transposed kernel as fd_?depthwise_rows_any_avx512, which the entry points below wrap. */
#define FD_DW_SIMD 1
#define FD_DW_KEEP(v) FD_DW_ASM_KEEP("+v", v)
#define FD_DW_ROWS_NAME depthwise_rows_any
#include "runtime/instantiate_types.h"

/* float, one output channel per input channel (Cog == 1), AVX-512: each output pixel is
 * accumulated in registers over all its taps and stored once, 32 channels (two masked zmm)
 * at a time. The generic kernel's read-modify-write of a whole output row per tap is bound
 * by L1/L2 traffic. Same math as the template. */
FD_TARGET static int fd_sdepthwise_rows_avx512_c1(
    const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x, const float *FD_RESTRICT x,
    const float *FD_RESTRICT wr, const float *FD_RESTRICT bias, float *FD_RESTRICT y, ptrdiff_t row_begin,
    ptrdiff_t row_end)
{
    const ptrdiff_t H = geo->in_h, W = geo->in_w, C = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, kH = geo->kernel_h, kW = geo->kernel_w;
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, dH = geo->dilation_h, dW = geo->dilation_w;
    const float *x_rows[FD_MAX_PHASE_TAPS];
    const float *w_rows[FD_MAX_PHASE_TAPS];
    ptrdiff_t base_x[FD_MAX_PHASE_TAPS];
    if (kH > FD_MAX_PHASE_TAPS || kW > FD_MAX_PHASE_TAPS) return FD_ERR_ARGUMENT;
    for (ptrdiff_t r = row_begin; r < row_end; r++) {
        const ptrdiff_t n = r / Ho, oy = r % Ho, ry = oy % sH, jy = oy / sH;
        const ptrdiff_t *ky_list = taps_y + ry * (1 + kH);
        ptrdiff_t rows = 0;   /* the taps of this output row that fall inside the image */
        for (ptrdiff_t ty = 1; ty <= ky_list[0]; ty++) {
            const ptrdiff_t iy = jy + (ry + geo->pad_top - ky_list[ty] * dH) / sH;
            if (iy < 0 || iy >= H) continue;
            x_rows[rows] = x + (n * H + iy) * W * C;
            w_rows[rows] = wr + ky_list[ty] * kW * C;
            rows++;
        }
        float *y_row = y + r * Wo * C;
        for (ptrdiff_t rx = 0; rx < sW && rx < Wo; rx++) {
            const ptrdiff_t *kx_list = taps_x + rx * (1 + kW);
            const ptrdiff_t Tx = kx_list[0], Jx = (Wo - rx + sW - 1) / sW;
            for (ptrdiff_t tx = 0; tx < Tx; tx++) base_x[tx] = (rx + geo->pad_left - kx_list[1 + tx] * dW) / sW;
            for (ptrdiff_t c0 = 0; c0 < C; c0 += 32) {
                const ptrdiff_t left = C - c0;
                const __mmask16 m0 = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
                const __mmask16 m1 = left >= 32 ? (__mmask16)0xFFFF : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
                const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias + c0) : _mm512_setzero_ps();
                const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + c0 + 16) : _mm512_setzero_ps();
                for (ptrdiff_t jx = 0; jx < Jx; jx++) {
                    __m512 acc0 = b0, acc1 = b1;
                    for (ptrdiff_t t = 0; t < rows; t++) {
                        for (ptrdiff_t tx = 0; tx < Tx; tx++) {
                            const ptrdiff_t ix = jx + base_x[tx];
                            if (ix < 0 || ix >= W) continue;
                            const float *xp = x_rows[t] + ix * C + c0;
                            const float *wp = w_rows[t] + kx_list[1 + tx] * C + c0;
                            acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, xp), _mm512_maskz_loadu_ps(m0, wp), acc0);
                            if (m1)
                                acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, xp + 16),
                                                       _mm512_maskz_loadu_ps(m1, wp + 16), acc1);
                        }
                    }
                    float *yp = y_row + (rx + jx * sW) * C + c0;
                    _mm512_mask_storeu_ps(yp, m0, acc0);
                    if (m1) _mm512_mask_storeu_ps(yp + 16, m1, acc1);
                }
            }
        }
    }
    return FD_OK;
}

/* The transposed kernel's entry points: the register-accumulating kernel above for float with one output
 * channel per input channel, the template's otherwise. Not themselves compiled for the ISA: the dispatch
 * calls them only where the CPU has it (fd_depthwise_avx512_available). */
int fd_sdepthwise_rows_avx512(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                              const float *x, const float *wr, const float *bias, float *y, ptrdiff_t row_begin,
                              ptrdiff_t row_end) {
    if (geo->out_channels == geo->in_channels)
        return fd_sdepthwise_rows_avx512_c1(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end);
    return fd_sdepthwise_rows_any_avx512(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end);
}

int fd_ddepthwise_rows_avx512(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,
                              const double *x, const double *wr, const double *bias, double *y, ptrdiff_t row_begin,
                              ptrdiff_t row_end) {
    return fd_ddepthwise_rows_any_avx512(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end);
}

#else /* no x86 SIMD in this build */

FD_DEPTHWISE_PORTABLE_STUBS(avx512)

#endif
