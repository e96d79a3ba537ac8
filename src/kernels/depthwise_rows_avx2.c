/* The AVX2 clone of the depthwise kernels (depthwise_rows.template.c), dispatched by depthwise_rows.c. GCC/clang:
 * compiled with baseline flags, only these functions carry the target attribute of FD_AVX2_FEATURES; MSVC: the
 * whole file is compiled with /arch:AVX2 (setup.py). fd_depthwise_avx2_available() only calls
 * fd_cpu_supports_all (baseline runtime/cpu_features.c), so nothing of the ISA runs before the check. */
#include "depthwise_rows_internal.h"

FD_DEPTHWISE_DECLARE_ISA(avx2)

#if FD_GEMM_X86_SIMD
#include <immintrin.h>

#define FD_TARGET FD_TARGET_FEATURES(FD_AVX2_FEATURES)
#define FD_ISA avx2

int fd_depthwise_avx2_available(void) { return FD_CPU_SUPPORTS(FD_AVX2_FEATURES) ? 1 : 0; }

/* The vector helpers of the convolution kernel's SIMD clone (FD_DW_SIMD in the template), named
 * FD_ISA_FN(dw_*): fd_<s|d>dw_<op>_avx2. Per type: the vector (dwv) and lane-index (dwi) types, lanes per
 * vector, output pixels per register tile, whether a tile may take two vectors of channels (pairs), and
 *   zero()  load(p)  load_part(p, n)  store(p, v)  store_part(p, v, n)   (first n lanes only)
 *   fma(a, b, c) = a*b + c
 *   index(c0, Cog, Cig)     lane l reads element ((c0 + l)/Cog - c0/Cog)*Cig of a loaded vector
 *   expand(p, n, idx)       n elements from p (no more are read), spread over the lanes by idx
 * A tile of TILE pixels holds TILE accumulators, up to 5 weight vectors and an input vector in
 * registers (16 ymm). */
#define DW_HELPER static FD_FORCE_INLINE FD_TARGET

typedef __m256 fd_sdwv_avx2;
typedef __m256i fd_sdwi_avx2;
enum { fd_sdw_lanes_avx2 = 8, fd_sdw_tile_avx2 = 8, fd_sdw_pairs_avx2 = 0 };
DW_HELPER __m256i fd_sdw_mask_avx2(ptrdiff_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
DW_HELPER __m256 fd_sdw_zero_avx2(void) { return _mm256_setzero_ps(); }
DW_HELPER __m256 fd_sdw_load_avx2(const float *p) { return _mm256_loadu_ps(p); }
DW_HELPER __m256 fd_sdw_load_part_avx2(const float *p, ptrdiff_t n) { return _mm256_maskload_ps(p, fd_sdw_mask_avx2(n)); }
DW_HELPER void fd_sdw_store_avx2(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
DW_HELPER void fd_sdw_store_part_avx2(float *p, __m256 v, ptrdiff_t n) { _mm256_maskstore_ps(p, fd_sdw_mask_avx2(n), v); }
DW_HELPER __m256 fd_sdw_fma_avx2(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
DW_HELPER __m256i fd_sdw_index_avx2(ptrdiff_t c0, ptrdiff_t cog, ptrdiff_t cig) {
    int32_t lane[8];
    for (int l = 0; l < 8; l++) lane[l] = (int32_t)(((c0 + l) / cog - c0 / cog) * cig);
    return _mm256_loadu_si256((const __m256i *)lane);
}
DW_HELPER __m256 fd_sdw_expand_avx2(const float *p, ptrdiff_t n, __m256i idx) {
    return _mm256_permutevar8x32_ps(fd_sdw_load_part_avx2(p, n), idx);
}

typedef __m256d fd_ddwv_avx2;
typedef __m256i fd_ddwi_avx2;
enum { fd_ddw_lanes_avx2 = 4, fd_ddw_tile_avx2 = 8, fd_ddw_pairs_avx2 = 0 };
DW_HELPER __m256i fd_ddw_mask_avx2(ptrdiff_t n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x((long long)n), _mm256_setr_epi64x(0, 1, 2, 3));
}
DW_HELPER __m256d fd_ddw_zero_avx2(void) { return _mm256_setzero_pd(); }
DW_HELPER __m256d fd_ddw_load_avx2(const double *p) { return _mm256_loadu_pd(p); }
DW_HELPER __m256d fd_ddw_load_part_avx2(const double *p, ptrdiff_t n) { return _mm256_maskload_pd(p, fd_ddw_mask_avx2(n)); }
DW_HELPER void fd_ddw_store_avx2(double *p, __m256d v) { _mm256_storeu_pd(p, v); }
DW_HELPER void fd_ddw_store_part_avx2(double *p, __m256d v, ptrdiff_t n) { _mm256_maskstore_pd(p, fd_ddw_mask_avx2(n), v); }
DW_HELPER __m256d fd_ddw_fma_avx2(__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); }
/* AVX2 has no lane-crossing variable permute of doubles: each double moves as two floats. */
DW_HELPER __m256i fd_ddw_index_avx2(ptrdiff_t c0, ptrdiff_t cog, ptrdiff_t cig) {
    int32_t lane[8];
    for (int l = 0; l < 4; l++) {
        lane[2 * l] = (int32_t)(2 * ((c0 + l) / cog - c0 / cog) * cig);
        lane[2 * l + 1] = lane[2 * l] + 1;
    }
    return _mm256_loadu_si256((const __m256i *)lane);
}
DW_HELPER __m256d fd_ddw_expand_avx2(const double *p, ptrdiff_t n, __m256i idx) {
    return _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(fd_ddw_load_part_avx2(p, n)), idx));
}

#undef DW_HELPER

#define FD_DW_SIMD 1
#define FD_DW_KEEP(v) FD_DW_ASM_KEEP("+x", v)
#include "runtime/instantiate_types.h"

#else /* no x86 SIMD in this build */

FD_DEPTHWISE_PORTABLE_STUBS(avx2)

#endif
