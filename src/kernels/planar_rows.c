/* The planar microkernel (planar_rows.h, planar_rows.template.c), float and double, compiled once per
 * ISA (portable, AVX2, AVX-512 through function target attributes, never -march) and dispatched at run
 * time by the GEMM's ISA choice (fd_gemm_get_isa), as the depthwise kernels are. The template is plain C
 * on GCC's vector extensions (GCC, clang): each clone's vectors are its ISA's registers, 16 bytes on the
 * portable one (SSE2 on x86-64, NEON on AArch64). MSVC, which has no vector extensions, builds the
 * portable clone on scalars. */
#include <string.h>

#include "runtime/conv_geometry.h"
#include "runtime/templating.h"
#include "gemm_internal.h"
#include "planar_rows.h"

#define FD_ISA_FN(name) FD_CAT(FD_FN(name), FD_CAT(_, FD_ISA))
/* vector registers of the portable clone's ISA: NEON's 32 on AArch64, SSE2's 16 on x86-64 */
#if defined(__aarch64__) || defined(_M_ARM64)
#define FD_PLANAR_PORTABLE_REGISTERS 32
#else
#define FD_PLANAR_PORTABLE_REGISTERS 16
#endif
#define FD_TEMPLATE "kernels/planar_rows.template.c"

#define FD_TARGET
#define FD_ISA portable
#define FD_PLANAR_VECTOR_BYTES 16
#define FD_PLANAR_REGISTERS FD_PLANAR_PORTABLE_REGISTERS
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_PLANAR_VECTOR_BYTES
#undef FD_PLANAR_REGISTERS

#if FD_X86_TARGET_ATTRIBUTES
#define FD_PLANAR_X86_CLONES 1
#include <immintrin.h>

/* dst[m * dst_stride + k] = src[k * src_stride + m] for k, m < 8: an 8x8 float transpose (AVX). */
static inline __attribute__((always_inline)) FD_TARGET_FEATURES(FD_AVX2_FEATURES) void planar_transpose8_avx2(
    const float *src, ptrdiff_t src_stride, float *dst, ptrdiff_t dst_stride)
{
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + src_stride);
    __m256 r2 = _mm256_loadu_ps(src + 2 * src_stride), r3 = _mm256_loadu_ps(src + 3 * src_stride);
    __m256 r4 = _mm256_loadu_ps(src + 4 * src_stride), r5 = _mm256_loadu_ps(src + 5 * src_stride);
    __m256 r6 = _mm256_loadu_ps(src + 6 * src_stride), r7 = _mm256_loadu_ps(src + 7 * src_stride);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + dst_stride, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#define FD_PLANAR_TRANSPOSE8 planar_transpose8_avx2
#define FD_TARGET FD_TARGET_FEATURES(FD_AVX2_FEATURES)
#define FD_ISA avx2
#define FD_PLANAR_VECTOR_BYTES 32
#define FD_PLANAR_REGISTERS 16
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_PLANAR_VECTOR_BYTES
#undef FD_PLANAR_REGISTERS

/* The first `count` (<= 16) pixels of 8 outputs' rows of 16 (rows[o*row_stride + p]) to y, pixel p's 8
 * outputs at y + p*y_step: an 8 x 16 transpose in three rounds of two-source permutes (pairs of outputs,
 * then fours, then eights per pixel), then a 256-bit store per pixel. */
static inline __attribute__((always_inline)) FD_TARGET_FEATURES(FD_AVX512_FEATURES) void planar_store8x16_avx512(
    const float *rows, ptrdiff_t row_stride, float *y, ptrdiff_t y_step, ptrdiff_t count)
{
    static const int pairs[2][16] = {{0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
                                     {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
    static const int fours[2][16] = {{0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23},
                                     {8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31}};
    static const int eights[2][16] = {{0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
                                      {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}};
    __m512 a[8], t[8], u[8], v[8];
    for (int o = 0; o < 8; o++) a[o] = _mm512_loadu_ps(rows + o * row_stride);
    for (int h = 0; h < 2; h++) {
        const __m512i ip = _mm512_loadu_si512(pairs[h]);
        for (int o = 0; o < 4; o++) t[2 * o + h] = _mm512_permutex2var_ps(a[2 * o], ip, a[2 * o + 1]);
    }
    /* t[2*o + h]: outputs 2o and 2o+1 of pixels 8h..8h+7 */
    for (int h = 0; h < 2; h++) {
        const __m512i i4 = _mm512_loadu_si512(fours[h]);
        for (int q = 0; q < 2; q++)
            for (int g = 0; g < 2; g++) u[4 * g + 2 * q + h] = _mm512_permutex2var_ps(t[4 * g + q], i4, t[4 * g + q + 2]);
    }
    /* u[4g + 2q + h]: outputs 4g..4g+3 of pixels 8q + 4h .. 8q + 4h + 3 */
    for (int h = 0; h < 2; h++) {
        const __m512i i8 = _mm512_loadu_si512(eights[h]);
        for (int r = 0; r < 4; r++) v[2 * r + h] = _mm512_permutex2var_ps(u[r], i8, u[r + 4]);
    }
    /* v[2r + h]: outputs 0..7 of pixels 4r + 2h (low half) and 4r + 2h + 1 (high half) */
    for (ptrdiff_t p = 0; p < count; p++) {
        const __m512 w = v[p / 2];
        const __m256 half = p % 2 == 0 ? _mm512_castps512_ps256(w)
                                       : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1));
        _mm256_storeu_ps(y + p * y_step, half);
    }
}
#define FD_PLANAR_STORE8X16 planar_store8x16_avx512
#define FD_TARGET FD_TARGET_FEATURES(FD_AVX512_FEATURES)
#define FD_ISA avx512
#define FD_PLANAR_VECTOR_BYTES 64
#define FD_PLANAR_REGISTERS 32
#include "runtime/instantiate_types.h"
#undef FD_TARGET
#undef FD_ISA
#undef FD_PLANAR_VECTOR_BYTES
#undef FD_PLANAR_REGISTERS
#undef FD_PLANAR_TRANSPOSE8
#undef FD_PLANAR_STORE8X16
#else
#define FD_PLANAR_X86_CLONES 0
#endif

static int planar_portable_available(void) { return 1; }
#if FD_PLANAR_X86_CLONES
static int planar_avx2_available(void) { return FD_CPU_SUPPORTS(FD_AVX2_FEATURES) ? 1 : 0; }
static int planar_avx512_available(void) { return FD_CPU_SUPPORTS(FD_AVX512_FEATURES) ? 1 : 0; }
#endif

typedef struct {
    int (*available)(void);
    int block_outputs;   /* PLANAR_MAX_OUTPUTS of the clone (planar_rows.h) */
    int (*srows)(const fd_geometry *, const ptrdiff_t *, const ptrdiff_t *, const float *, const float *,
                 const float *, float *, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, int,
                 void *);
    int (*drows)(const fd_geometry *, const ptrdiff_t *, const ptrdiff_t *, const double *, const double *,
                 const double *, double *, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, int,
                 void *);
} planar_clone;

/* Indexed by the GEMM's ISA id (gemm.h); an ISA without a clone of its own (NEON: the portable clone is
 * NEON code there; every SIMD ISA on MSVC) has no row and runs the nearest lower one (FD_ISA_ROW_LOOKUP). */
#define PLANAR_CLONE(id, isa, registers) \
    [id] = {planar_##isa##_available, FD_PLANAR_BLOCK_OUTPUTS(registers), fd_splanar_rows_##isa, fd_dplanar_rows_##isa},
static const planar_clone planar_clones[FD_ISA_COUNT] = {
    PLANAR_CLONE(FD_ISA_PORTABLE, portable, FD_PLANAR_PORTABLE_REGISTERS)
#if FD_PLANAR_X86_CLONES
    PLANAR_CLONE(FD_ISA_AVX2, avx2, 16)
    PLANAR_CLONE(FD_ISA_AVX512, avx512, 32)
#endif
};
#undef PLANAR_CLONE

FD_ISA_ROW_LOOKUP(planar_clone_for, planar_clone, planar_clones)

int fd_planar_isa_compiled(int isa) { return FD_ISA_ROW_COMPILED(planar_clones, isa); }

int fd_planar_block_outputs(void) { return planar_clone_for(fd_gemm_get_isa())->block_outputs; }

#define FD_PLANAR_DISPATCH(prefix, real)                                                                       \
    int fd_##prefix##planar_rows(const fd_geometry *geo, const ptrdiff_t *taps_y, const ptrdiff_t *taps_x,     \
                                 const real *x, const real *wp, const real *bias, real *y, ptrdiff_t row_begin, \
                                 ptrdiff_t row_end, ptrdiff_t col_begin, ptrdiff_t col_end, ptrdiff_t group_begin, \
                                 ptrdiff_t group_end, int weights_finite, void *ring)                          \
    {                                                                                                          \
        return planar_clone_for(fd_gemm_get_isa())->prefix##rows(geo, taps_y, taps_x, x, wp, bias, y, row_begin, \
                                                                 row_end, col_begin, col_end, group_begin,     \
                                                                 group_end, weights_finite, ring);             \
    }

FD_PLANAR_DISPATCH(s, float)
FD_PLANAR_DISPATCH(d, double)
