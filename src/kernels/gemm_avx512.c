/* AVX-512 indirect GEMM kernels (float: 6x64 over two panels, 12x32 and 8x16 tiles, double: 6x32, 8x16 and
 * 8x8; with FD_GEMM_DENSE rows, 12 x two vectors and 24 x one vector; rows evenly spaced on a one-vector
 * panel, 24 x one vector).
 * GCC/clang: compiled with baseline flags, only these functions carry the AVX-512 target
 * attribute, and fd_gemm_avx512_available() gates them at run time. MSVC: the whole file is compiled
 * with /arch:AVX512 (setup.py); fd_gemm_avx512_available() only calls fd_cpu_supports_all (baseline
 * runtime/cpu_features.c), so nothing of the ISA runs before the check. */
#include "gemm_internal.h"

FD_GEMM_DECLARE_ISA(avx512)

#if FD_GEMM_X86_SIMD
#include <immintrin.h>

#include "runtime/templating.h"

#define FD_TARGET FD_TARGET_FEATURES(FD_AVX512_FEATURES)
#define FD_SIMD_FN(name) FD_CAT(FD_FN(name), _avx512)

/* All of FD_AVX512_FEATURES, not avx512f alone: the kernels are also compiled for fma (and avx2). */
int fd_gemm_avx512_available(void) { return FD_CPU_SUPPORTS(FD_AVX512_FEATURES) ? 1 : 0; }

#define FD_SUMS_FN(name) FD_CAT(fd_avx512_, name)
#include "gemm_x86_sums.h"

/* 16 float vectors of 16 lanes (8 double vectors of 8): each one's halves added (lane i + lane i+8, as
 * reduce_add begins), then 8 (4) at a time as AVX's. */
static inline FD_TARGET __m256 fd_avx512_halves_ps(__m512 v) {
    return _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
}
static inline FD_TARGET void fd_avx512_sums16x16_ps(const __m512 *v, float *out) {
    __m256 h[16];
    int i;
    for (i = 0; i < 16; i++) h[i] = fd_avx512_halves_ps(v[i]);
    fd_avx512_sums8x8_ps(h, out);
    fd_avx512_sums8x8_ps(h + 8, out + 8);
}
static inline FD_TARGET void fd_avx512_sums8x8_pd(const __m512d *v, double *out) {
    __m256d h[8];
    int i;
    for (i = 0; i < 8; i++) h[i] = _mm256_add_pd(_mm512_extractf64x4_pd(v[i], 1), _mm512_castpd512_pd256(v[i]));
    fd_avx512_sums4x4_pd(h, out);
    fd_avx512_sums4x4_pd(h + 4, out + 4);
}

/* ---- float: 16 lanes */
#define FD_REAL float
#define FD_PREFIX s
#define FD_PANEL FD_SPANEL
#define FD_GRANULE FD_SGRANULE
#define FD_VEC __m512
#define FD_LANES 16
#define FD_VZERO() _mm512_setzero_ps()
#define FD_VLOADU(p) _mm512_loadu_ps(p)
#define FD_VSTOREU(p, v) _mm512_storeu_ps((p), (v))
#define FD_VBCAST(p) _mm512_set1_ps(*(p))
#define FD_VADD(a, b) _mm512_add_ps((a), (b))
#define FD_VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define FD_VLOAD_PART(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), (p))
#define FD_VSTORE_PART(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1u), (v))
#define FD_VHSUMS(v, out) fd_avx512_sums16x16_ps((v), (out))
#define FD_DOT_ACC 16
#define FD_WIDE_MR 12
#define FD_WIDE_NV 2
#define FD_NARROW_MR 8
#define FD_NARROW_NV 1
#define FD_DENSE_WIDE_MR 12
#define FD_DENSE_NARROW_MR 24
#define FD_STRIDED_MR 24
#define FD_STRIDED_K_UNROLL 4
#define FD_PAIR_MR 6
#include "gemm_simd.template.c"

/* ---- double: 8 lanes */
#define FD_REAL double
#define FD_PREFIX d
#define FD_PANEL FD_DPANEL
#define FD_GRANULE FD_DGRANULE
#define FD_VEC __m512d
#define FD_LANES 8
#define FD_VZERO() _mm512_setzero_pd()
#define FD_VLOADU(p) _mm512_loadu_pd(p)
#define FD_VSTOREU(p, v) _mm512_storeu_pd((p), (v))
#define FD_VBCAST(p) _mm512_set1_pd(*(p))
#define FD_VADD(a, b) _mm512_add_pd((a), (b))
#define FD_VFMA(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define FD_VLOAD_PART(p, n) _mm512_maskz_loadu_pd((__mmask8)((1u << (n)) - 1u), (p))
#define FD_VSTORE_PART(p, v, n) _mm512_mask_storeu_pd((p), (__mmask8)((1u << (n)) - 1u), (v))
#define FD_VHSUMS(v, out) fd_avx512_sums8x8_pd((v), (out))
#define FD_DOT_ACC 16
#define FD_WIDE_MR 8
#define FD_WIDE_NV 2
#define FD_NARROW_MR 8
#define FD_NARROW_NV 1
#define FD_DENSE_WIDE_MR 12
#define FD_DENSE_NARROW_MR 24
#define FD_STRIDED_MR 24
#define FD_STRIDED_K_UNROLL 4
#define FD_PAIR_MR 6
#include "gemm_simd.template.c"

#else /* no x86 SIMD in this build */

FD_GEMM_PORTABLE_STUBS(avx512)

#endif
