/* The depthwise microkernels (the rows of a depthwise transposed convolution, and of a depthwise
 * convolution), float and double, compiled once per ISA (portable, AVX2, AVX-512 through function
 * target attributes, never -march) and dispatched at run time by the same ISA choice as the GEMM
 * (fd_gemm_get_isa), so FASTDECONV_ISA / fd_gemm_set_isa force every path here too. See
 * depthwise_rows.template.c; the algorithms around them are algorithms/deconv_depthwise.template.c
 * and algorithms/conv_depthwise.template.c. */
#include "runtime/conv_geometry.h"
#include "runtime/templating.h"
#include "gemm_internal.h"
#include "depthwise_rows.h"

#define FD_ISA_FN(name) FD_CAT(FD_FN(name), FD_CAT(_, FD_ISA))

#define FD_TEMPLATE "kernels/depthwise_rows.template.c"

#define FD_TARGET
#define FD_ISA portable
#define FD_DW_SIMD 0
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_DW_SIMD

/* The SIMD clones need per-function target attributes and inline asm (GCC, clang); MSVC builds the
 * portable one only (gemm_internal.h), and fd_depthwise_isa_compiled says so. */
#if FD_X86_TARGET_ATTRIBUTES
#define FD_HAVE_X86_CLONES 1
#include <immintrin.h>

/* The vector helpers of the convolution kernel's SIMD clones (FD_DW_SIMD in the template), named
 * FD_ISA_FN(dw_*): fd_<s|d>dw_<op>_<isa>. Per type and ISA: the vector (dwv) and lane-index (dwi)
 * types, lanes per vector, output pixels per register tile, and
 *   zero()  load(p)  load_part(p, n)  store(p, v)  store_part(p, v, n)   (first n lanes only)
 *   fma(a, b, c) = a*b + c   add(a, b) = a + b
 *   index(c0, Cog)          lane l reads input channel (c0 + l)/Cog - c0/Cog of a loaded vector
 *   expand(p, n, idx)       n elements from p (no more are read), spread over the lanes by idx
 * A tile of TILE pixels holds TILE accumulators, up to 5 weight vectors and an input vector in
 * registers (16 on AVX2, 32 on AVX-512). */
#define DW_AVX2 static inline __attribute__((always_inline)) FD_TARGET_FEATURES(FD_AVX2_FEATURES)
#define DW_AVX512 static inline __attribute__((always_inline)) FD_TARGET_FEATURES(FD_AVX512_DEPTHWISE_FEATURES)

typedef __m256 fd_sdwv_avx2;
typedef __m256i fd_sdwi_avx2;
enum { fd_sdw_lanes_avx2 = 8, fd_sdw_tile_avx2 = 8 };
DW_AVX2 __m256i fd_sdw_mask_avx2(ptrdiff_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
DW_AVX2 __m256 fd_sdw_zero_avx2(void) { return _mm256_setzero_ps(); }
DW_AVX2 __m256 fd_sdw_load_avx2(const float *p) { return _mm256_loadu_ps(p); }
DW_AVX2 __m256 fd_sdw_load_part_avx2(const float *p, ptrdiff_t n) { return _mm256_maskload_ps(p, fd_sdw_mask_avx2(n)); }
DW_AVX2 void fd_sdw_store_avx2(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
DW_AVX2 void fd_sdw_store_part_avx2(float *p, __m256 v, ptrdiff_t n) { _mm256_maskstore_ps(p, fd_sdw_mask_avx2(n), v); }
DW_AVX2 __m256 fd_sdw_fma_avx2(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
DW_AVX2 __m256 fd_sdw_add_avx2(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
DW_AVX2 __m256i fd_sdw_index_avx2(ptrdiff_t c0, ptrdiff_t cog) {
    int32_t lane[8];
    for (int l = 0; l < 8; l++) lane[l] = (int32_t)((c0 + l) / cog - c0 / cog);
    return _mm256_loadu_si256((const __m256i *)lane);
}
DW_AVX2 __m256 fd_sdw_expand_avx2(const float *p, ptrdiff_t n, __m256i idx) {
    return _mm256_permutevar8x32_ps(fd_sdw_load_part_avx2(p, n), idx);
}

typedef __m256d fd_ddwv_avx2;
typedef __m256i fd_ddwi_avx2;
enum { fd_ddw_lanes_avx2 = 4, fd_ddw_tile_avx2 = 8 };
DW_AVX2 __m256i fd_ddw_mask_avx2(ptrdiff_t n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x((long long)n), _mm256_setr_epi64x(0, 1, 2, 3));
}
DW_AVX2 __m256d fd_ddw_zero_avx2(void) { return _mm256_setzero_pd(); }
DW_AVX2 __m256d fd_ddw_load_avx2(const double *p) { return _mm256_loadu_pd(p); }
DW_AVX2 __m256d fd_ddw_load_part_avx2(const double *p, ptrdiff_t n) { return _mm256_maskload_pd(p, fd_ddw_mask_avx2(n)); }
DW_AVX2 void fd_ddw_store_avx2(double *p, __m256d v) { _mm256_storeu_pd(p, v); }
DW_AVX2 void fd_ddw_store_part_avx2(double *p, __m256d v, ptrdiff_t n) { _mm256_maskstore_pd(p, fd_ddw_mask_avx2(n), v); }
DW_AVX2 __m256d fd_ddw_fma_avx2(__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); }
DW_AVX2 __m256d fd_ddw_add_avx2(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
/* AVX2 has no lane-crossing variable permute of doubles: each double moves as two floats. */
DW_AVX2 __m256i fd_ddw_index_avx2(ptrdiff_t c0, ptrdiff_t cog) {
    int32_t lane[8];
    for (int l = 0; l < 4; l++) {
        lane[2 * l] = (int32_t)(2 * ((c0 + l) / cog - c0 / cog));
        lane[2 * l + 1] = lane[2 * l] + 1;
    }
    return _mm256_loadu_si256((const __m256i *)lane);
}
DW_AVX2 __m256d fd_ddw_expand_avx2(const double *p, ptrdiff_t n, __m256i idx) {
    return _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(fd_ddw_load_part_avx2(p, n)), idx));
}

typedef __m512 fd_sdwv_avx512;
typedef __m512i fd_sdwi_avx512;
enum { fd_sdw_lanes_avx512 = 16, fd_sdw_tile_avx512 = 16 };
DW_AVX512 __mmask16 fd_sdw_mask_avx512(ptrdiff_t n) { return (__mmask16)((1u << n) - 1u); }
DW_AVX512 __m512 fd_sdw_zero_avx512(void) { return _mm512_setzero_ps(); }
DW_AVX512 __m512 fd_sdw_load_avx512(const float *p) { return _mm512_loadu_ps(p); }
DW_AVX512 __m512 fd_sdw_load_part_avx512(const float *p, ptrdiff_t n) { return _mm512_maskz_loadu_ps(fd_sdw_mask_avx512(n), p); }
DW_AVX512 void fd_sdw_store_avx512(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
DW_AVX512 void fd_sdw_store_part_avx512(float *p, __m512 v, ptrdiff_t n) { _mm512_mask_storeu_ps(p, fd_sdw_mask_avx512(n), v); }
DW_AVX512 __m512 fd_sdw_fma_avx512(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
DW_AVX512 __m512 fd_sdw_add_avx512(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
DW_AVX512 __m512i fd_sdw_index_avx512(ptrdiff_t c0, ptrdiff_t cog) {
    int32_t lane[16];
    for (int l = 0; l < 16; l++) lane[l] = (int32_t)((c0 + l) / cog - c0 / cog);
    return _mm512_loadu_si512(lane);
}
DW_AVX512 __m512 fd_sdw_expand_avx512(const float *p, ptrdiff_t n, __m512i idx) {
    return _mm512_permutexvar_ps(idx, fd_sdw_load_part_avx512(p, n));
}

typedef __m512d fd_ddwv_avx512;
typedef __m512i fd_ddwi_avx512;
enum { fd_ddw_lanes_avx512 = 8, fd_ddw_tile_avx512 = 8 };
DW_AVX512 __mmask8 fd_ddw_mask_avx512(ptrdiff_t n) { return (__mmask8)((1u << n) - 1u); }
DW_AVX512 __m512d fd_ddw_zero_avx512(void) { return _mm512_setzero_pd(); }
DW_AVX512 __m512d fd_ddw_load_avx512(const double *p) { return _mm512_loadu_pd(p); }
DW_AVX512 __m512d fd_ddw_load_part_avx512(const double *p, ptrdiff_t n) { return _mm512_maskz_loadu_pd(fd_ddw_mask_avx512(n), p); }
DW_AVX512 void fd_ddw_store_avx512(double *p, __m512d v) { _mm512_storeu_pd(p, v); }
DW_AVX512 void fd_ddw_store_part_avx512(double *p, __m512d v, ptrdiff_t n) { _mm512_mask_storeu_pd(p, fd_ddw_mask_avx512(n), v); }
DW_AVX512 __m512d fd_ddw_fma_avx512(__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); }
DW_AVX512 __m512d fd_ddw_add_avx512(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
DW_AVX512 __m512i fd_ddw_index_avx512(ptrdiff_t c0, ptrdiff_t cog) {
    long long lane[8];
    for (int l = 0; l < 8; l++) lane[l] = (long long)((c0 + l) / cog - c0 / cog);
    return _mm512_loadu_si512(lane);
}
DW_AVX512 __m512d fd_ddw_expand_avx512(const double *p, ptrdiff_t n, __m512i idx) {
    return _mm512_permutexvar_pd(idx, fd_ddw_load_part_avx512(p, n));
}
#undef DW_AVX2
#undef DW_AVX512

/* FD_DW_KEEP(v): v stays in a vector register (an empty asm the compiler cannot see through). */
#define FD_DW_SIMD 1
#define FD_TARGET FD_TARGET_FEATURES(FD_AVX2_FEATURES)
#define FD_ISA avx2
#define FD_DW_KEEP(v) __asm__("" : "+x"(v))
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_DW_KEEP

/* The AVX-512 clones may use more than the GEMM's AVX-512 kernels (vl, bw, dq): dispatch checks
 * their own list (depthwise_avx512_ok). */
#define FD_TARGET FD_TARGET_FEATURES(FD_AVX512_DEPTHWISE_FEATURES)
#define FD_ISA avx512
#define FD_DW_KEEP(v) __asm__("" : "+v"(v))
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_DW_KEEP
#undef FD_DW_SIMD
#else
#define FD_HAVE_X86_CLONES 0
#endif

#if FD_GEMM_NEON
/* AArch64: the convolution kernel's SIMD clone with NEON intrinsics (Advanced SIMD is baseline: no target
 * attribute, no run-time check); the transposed kernel's neon clone is the portable C again. Helpers as for
 * x86 above; tiles of 8 pixels as on AVX2 (16 pixels compiled to ~65 % more code and more stack traffic with
 * GCC 12; neither is measured on Arm hardware yet). No masked loads: partial vectors go through a zeroed
 * buffer. A lane permute is a byte table lookup (TBL). */
#include <arm_neon.h>
#include <string.h>
#define FD_HAVE_NEON_CLONES 1
#define DW_NEON static inline __attribute__((always_inline))

typedef float32x4_t fd_sdwv_neon;
typedef uint8x16_t fd_sdwi_neon;
enum { fd_sdw_lanes_neon = 4, fd_sdw_tile_neon = 8 };
DW_NEON float32x4_t fd_sdw_zero_neon(void) { return vdupq_n_f32(0.0f); }
DW_NEON float32x4_t fd_sdw_load_neon(const float *p) { return vld1q_f32(p); }
DW_NEON float32x4_t fd_sdw_load_part_neon(const float *p, ptrdiff_t n) {
    float buf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    memcpy(buf, p, (size_t)n * sizeof(float));
    return vld1q_f32(buf);
}
DW_NEON void fd_sdw_store_neon(float *p, float32x4_t v) { vst1q_f32(p, v); }
DW_NEON void fd_sdw_store_part_neon(float *p, float32x4_t v, ptrdiff_t n) {
    float buf[4];
    vst1q_f32(buf, v);
    memcpy(p, buf, (size_t)n * sizeof(float));
}
DW_NEON float32x4_t fd_sdw_fma_neon(float32x4_t a, float32x4_t b, float32x4_t c) { return vfmaq_f32(c, a, b); }
DW_NEON float32x4_t fd_sdw_add_neon(float32x4_t a, float32x4_t b) { return vaddq_f32(a, b); }
DW_NEON uint8x16_t fd_sdw_index_neon(ptrdiff_t c0, ptrdiff_t cog) {
    uint8_t byte[16];
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < 4; i++) byte[4 * l + i] = (uint8_t)(4 * ((c0 + l) / cog - c0 / cog) + i);
    return vld1q_u8(byte);
}
DW_NEON float32x4_t fd_sdw_expand_neon(const float *p, ptrdiff_t n, uint8x16_t idx) {
    return vreinterpretq_f32_u8(vqtbl1q_u8(vreinterpretq_u8_f32(fd_sdw_load_part_neon(p, n)), idx));
}

typedef float64x2_t fd_ddwv_neon;
typedef uint8x16_t fd_ddwi_neon;
enum { fd_ddw_lanes_neon = 2, fd_ddw_tile_neon = 8 };
DW_NEON float64x2_t fd_ddw_zero_neon(void) { return vdupq_n_f64(0.0); }
DW_NEON float64x2_t fd_ddw_load_neon(const double *p) { return vld1q_f64(p); }
DW_NEON float64x2_t fd_ddw_load_part_neon(const double *p, ptrdiff_t n) {
    double buf[2] = {0.0, 0.0};
    memcpy(buf, p, (size_t)n * sizeof(double));
    return vld1q_f64(buf);
}
DW_NEON void fd_ddw_store_neon(double *p, float64x2_t v) { vst1q_f64(p, v); }
DW_NEON void fd_ddw_store_part_neon(double *p, float64x2_t v, ptrdiff_t n) {
    double buf[2];
    vst1q_f64(buf, v);
    memcpy(p, buf, (size_t)n * sizeof(double));
}
DW_NEON float64x2_t fd_ddw_fma_neon(float64x2_t a, float64x2_t b, float64x2_t c) { return vfmaq_f64(c, a, b); }
DW_NEON float64x2_t fd_ddw_add_neon(float64x2_t a, float64x2_t b) { return vaddq_f64(a, b); }
DW_NEON uint8x16_t fd_ddw_index_neon(ptrdiff_t c0, ptrdiff_t cog) {
    uint8_t byte[16];
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 8; i++) byte[8 * l + i] = (uint8_t)(8 * ((c0 + l) / cog - c0 / cog) + i);
    return vld1q_u8(byte);
}
DW_NEON float64x2_t fd_ddw_expand_neon(const double *p, ptrdiff_t n, uint8x16_t idx) {
    return vreinterpretq_f64_u8(vqtbl1q_u8(vreinterpretq_u8_f64(fd_ddw_load_part_neon(p, n)), idx));
}
#undef DW_NEON

#define FD_DW_SIMD 1
#define FD_TARGET
#define FD_ISA neon
#define FD_DW_KEEP(v) __asm__("" : "+w"(v))
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_DW_KEEP
#undef FD_DW_SIMD
#else
#define FD_HAVE_NEON_CLONES 0
#endif

#if FD_HAVE_X86_CLONES

/* float, one output channel per input channel (Cog == 1), AVX-512: each output pixel is
 * accumulated in registers over all its taps and stored once, 32 channels (two masked zmm)
 * at a time. The generic kernel's read-modify-write of a whole output row per tap is bound
 * by L1/L2 traffic. Same math as the template. */
FD_TARGET_FEATURES(FD_AVX512_DEPTHWISE_FEATURES) static int fd_sdepthwise_rows_avx512_c1(
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
#endif

#if FD_HAVE_X86_CLONES
/* The GEMM's ISA choice picks the clone, but a clone runs only where the CPU has every feature it
 * was compiled for; the AVX-512 clones need more than the AVX-512 GEMM, so they fall back to the
 * AVX2 clone (or the portable one) on a CPU with avx512f but without vl/bw/dq. */
static int depthwise_avx512_ok(void) { return FD_CPU_SUPPORTS(FD_AVX512_DEPTHWISE_FEATURES); }
static int depthwise_avx2_ok(void) { return FD_CPU_SUPPORTS(FD_AVX2_FEATURES); }
#endif

int fd_depthwise_isa_compiled(int isa) {
    return isa == FD_ISA_PORTABLE || (FD_HAVE_X86_CLONES && (isa == FD_ISA_AVX2 || isa == FD_ISA_AVX512)) ||
           (FD_HAVE_NEON_CLONES && isa == FD_ISA_NEON);
}

#define FD_DEPTHWISE_DISPATCH(prefix, real)                                                                   \
    int fd_##prefix##depthwise_rows(const fd_geometry *geo, const ptrdiff_t *taps_y,                   \
                                           const ptrdiff_t *taps_x, const real *x, const real *wr,            \
                                           const real *bias, real *y, ptrdiff_t row_begin, ptrdiff_t row_end) \
    {                                                                                                          \
        switch (FD_HAVE_X86_CLONES ? fd_gemm_get_isa() : FD_ISA_PORTABLE) {                                    \
        DEPTHWISE_X86_CASES(prefix)                                                                            \
        default:                                                                                               \
            break;                                                                                             \
        }                                                                                                      \
        return fd_##prefix##depthwise_rows_portable(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end);  \
    }

#if FD_HAVE_X86_CLONES
#define DEPTHWISE_X86_CASES(prefix)                                                                           \
    case FD_ISA_AVX512:                                                                                       \
        if (depthwise_avx512_ok()) {                                                                          \
            if (DEPTHWISE_AVX512_C1_##prefix && geo->out_channels == geo->in_channels)                       \
                return DEPTHWISE_AVX512_C1_CALL_##prefix;                                                    \
            return fd_##prefix##depthwise_rows_avx512(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end); \
        }                                                                                                     \
        /* fall through */                                                                                    \
    case FD_ISA_AVX2:                                                                                         \
        if (depthwise_avx2_ok())                                                                              \
            return fd_##prefix##depthwise_rows_avx2(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end); \
        break;
#else
#define DEPTHWISE_X86_CASES(prefix)
#endif

/* the register-accumulating AVX-512 kernel exists for float only */
#define DEPTHWISE_AVX512_C1_s 1
#define DEPTHWISE_AVX512_C1_d 0
#define DEPTHWISE_AVX512_C1_CALL_s \
    fd_sdepthwise_rows_avx512_c1(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end)
#define DEPTHWISE_AVX512_C1_CALL_d FD_ERR_ARGUMENT

FD_DEPTHWISE_DISPATCH(s, float)
FD_DEPTHWISE_DISPATCH(d, double)

/* The convolution kernel: the same ISA choice, no special cases. */
#if FD_HAVE_X86_CLONES
#define CONV_DEPTHWISE_X86_CASES(prefix)                                                                \
    case FD_ISA_AVX512:                                                                                 \
        if (depthwise_avx512_ok())                                                                      \
            return fd_##prefix##conv_depthwise_rows_avx512(geo, x, wr, bias, y, row_begin, row_end);    \
        /* fall through */                                                                              \
    case FD_ISA_AVX2:                                                                                   \
        if (depthwise_avx2_ok())                                                                        \
            return fd_##prefix##conv_depthwise_rows_avx2(geo, x, wr, bias, y, row_begin, row_end);      \
        break;
#else
#define CONV_DEPTHWISE_X86_CASES(prefix)
#endif

/* AArch64: the NEON clone of the convolution kernel (the transposed kernel's neon clone is the portable C, so
 * it keeps the portable one). */
#if FD_HAVE_NEON_CLONES
#define CONV_DEPTHWISE_NEON_CASES(prefix)                                                               \
    case FD_ISA_NEON:                                                                                   \
        return fd_##prefix##conv_depthwise_rows_neon(geo, x, wr, bias, y, row_begin, row_end);
#else
#define CONV_DEPTHWISE_NEON_CASES(prefix)
#endif

#define FD_CONV_DEPTHWISE_DISPATCH(prefix, real)                                                        \
    int fd_##prefix##conv_depthwise_rows(const fd_geometry *geo, const real *x, const real *wr,         \
                                         const real *bias, real *y, ptrdiff_t row_begin, ptrdiff_t row_end) \
    {                                                                                                   \
        switch (FD_HAVE_X86_CLONES || FD_HAVE_NEON_CLONES ? fd_gemm_get_isa() : FD_ISA_PORTABLE) {      \
        CONV_DEPTHWISE_X86_CASES(prefix)                                                                \
        CONV_DEPTHWISE_NEON_CASES(prefix)                                                               \
        default:                                                                                        \
            break;                                                                                      \
        }                                                                                               \
        return fd_##prefix##conv_depthwise_rows_portable(geo, x, wr, bias, y, row_begin, row_end);      \
    }

FD_CONV_DEPTHWISE_DISPATCH(s, float)
FD_CONV_DEPTHWISE_DISPATCH(d, double)
