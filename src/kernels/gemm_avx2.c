/* AVX2+FMA indirect GEMM kernels (float: 6x16 tiles, double: 6x8 tiles; a packed
 * panel of 32 floats / 16 doubles is processed as two tiles side by side).
 * GCC/clang: compiled with baseline flags, only these functions carry the AVX2 target
 * attribute, and fd_gemm_avx2_available() gates them at run time. MSVC: the whole file is compiled
 * with /arch:AVX2 (setup.py); fd_gemm_avx2_available() only calls fd_cpu_supports_all (baseline
 * runtime/cpu_features.c), so nothing of the ISA runs before the check. */
#include "gemm_internal.h"

FD_GEMM_DECLARE_ISA(avx2)

#if FD_GEMM_X86_SIMD
#include <immintrin.h>

#include "runtime/templating.h"

#define FD_TARGET FD_TARGET_FEATURES(FD_AVX2_FEATURES)
#define FD_SIMD_FN(name) FD_CAT(FD_FN(name), _avx2)

int fd_gemm_avx2_available(void) { return FD_CPU_SUPPORTS(FD_AVX2_FEATURES) ? 1 : 0; }

/* Lane masks for the first n lanes (maskload/maskstore never touch the others). */
static inline FD_TARGET __m256i fd_avx2_mask32(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline FD_TARGET __m256i fd_avx2_mask64(int n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}

#define FD_SUMS_FN(name) FD_CAT(fd_avx2_, name)
#include "gemm_x86_sums.h"

/* ---- float: 8 lanes */
#define FD_REAL float
#define FD_PREFIX s
#define FD_PANEL FD_SPANEL
#define FD_GRANULE FD_SGRANULE
#define FD_VEC __m256
#define FD_LANES 8
#define FD_VZERO() _mm256_setzero_ps()
#define FD_VLOADU(p) _mm256_loadu_ps(p)
#define FD_VSTOREU(p, v) _mm256_storeu_ps((p), (v))
#define FD_VBCAST(p) _mm256_broadcast_ss(p)
#define FD_VADD(a, b) _mm256_add_ps((a), (b))
#define FD_VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define FD_VLOAD_PART(p, n) _mm256_maskload_ps((p), fd_avx2_mask32(n))
#define FD_VSTORE_PART(p, v, n) _mm256_maskstore_ps((p), fd_avx2_mask32(n), (v))
#define FD_VHSUMS(v, out) fd_avx2_sums8x8_ps((v), (out))
#define FD_DOT_ACC 8
#define FD_WIDE_MR 6
#define FD_WIDE_NV 2
#define FD_NARROW_MR 6
#define FD_NARROW_NV 2
#define FD_DENSE_WIDE_MR 6
#define FD_DENSE_NARROW_MR 6
#include "gemm_simd.template.c"

/* ---- double: 4 lanes */
#define FD_REAL double
#define FD_PREFIX d
#define FD_PANEL FD_DPANEL
#define FD_GRANULE FD_DGRANULE
#define FD_VEC __m256d
#define FD_LANES 4
#define FD_VZERO() _mm256_setzero_pd()
#define FD_VLOADU(p) _mm256_loadu_pd(p)
#define FD_VSTOREU(p, v) _mm256_storeu_pd((p), (v))
#define FD_VBCAST(p) _mm256_broadcast_sd(p)
#define FD_VADD(a, b) _mm256_add_pd((a), (b))
#define FD_VFMA(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define FD_VLOAD_PART(p, n) _mm256_maskload_pd((p), fd_avx2_mask64(n))
#define FD_VSTORE_PART(p, v, n) _mm256_maskstore_pd((p), fd_avx2_mask64(n), (v))
#define FD_VHSUMS(v, out) fd_avx2_sums4x4_pd((v), (out))
#define FD_DOT_ACC 8
#define FD_WIDE_MR 6
#define FD_WIDE_NV 2
#define FD_NARROW_MR 6
#define FD_NARROW_NV 2
#define FD_DENSE_WIDE_MR 6
#define FD_DENSE_NARROW_MR 6
#include "gemm_simd.template.c"

#else /* no x86 SIMD in this build */

FD_GEMM_PORTABLE_STUBS(avx2)

#endif
