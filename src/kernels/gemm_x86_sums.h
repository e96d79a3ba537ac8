/* The lane sums of several vectors at once (the dot tiles' last step, FD_VHSUMS in gemm_simd.template.c):
 * out[j] = the sum of v[j]'s lanes by the tree of a scalar reduce_add (AVX-512's: lane i + lane i+8; then,
 * as AVX's: i + i+4, i + i+2, i + i+1), so the same bits, with the vectors transposed on the way instead of
 * each summed down to a scalar. Included by gemm_avx2.c and gemm_avx512.c after their FD_TARGET, with
 * FD_SUMS_FN(name) naming the functions per ISA. */
#ifndef FD_SUMS_FN
#error "define FD_TARGET and FD_SUMS_FN before including gemm_x86_sums.h"
#endif

/* 8 float vectors of 8 lanes */
static inline FD_TARGET void FD_SUMS_FN(sums8x8_ps)(const __m256 *v, float *out) {
    __m256 s[4], t[2];
    int i;
    for (i = 0; i < 4; i++)   /* [v[2i] lo + hi | v[2i+1] lo + hi] */
        s[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    for (i = 0; i < 2; i++)   /* per half: [a0 + a2, a1 + a3, b0 + b2, b1 + b3] of its two vectors */
        t[i] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes [sum0, sum2, sum4, sum6 | sum1, sum3, sum5, sum7] */
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* 4 double vectors of 4 lanes */
static inline FD_TARGET void FD_SUMS_FN(sums4x4_pd)(const __m256d *v, double *out) {
    const __m256d s01 = _mm256_add_pd(_mm256_permute2f128_pd(v[0], v[1], 0x20), _mm256_permute2f128_pd(v[0], v[1], 0x31));
    const __m256d s23 = _mm256_add_pd(_mm256_permute2f128_pd(v[2], v[3], 0x20), _mm256_permute2f128_pd(v[2], v[3], 0x31));
    /* lanes [sum0, sum2 | sum1, sum3] */
    const __m256d r = _mm256_add_pd(_mm256_unpacklo_pd(s01, s23), _mm256_unpackhi_pd(s01, s23));
    _mm256_storeu_pd(out, _mm256_permute4x64_pd(r, _MM_SHUFFLE(3, 1, 2, 0)));
}
