/* The AVX2 clone of the Winograd tile transforms (winograd_tiles.template.c, 32-byte vectors: one ymm
 * register per channel vector), dispatched by winograd_tiles.c. GCC/clang: compiled with baseline flags,
 * only these functions carry the target attribute of FD_AVX2_FEATURES; MSVC: the whole file is compiled
 * with /arch:AVX2 (setup.py). fd_winograd_avx2_available() only calls fd_cpu_supports_all (baseline
 * runtime/cpu_features.c), so nothing of the ISA runs before the check. */
#include "winograd_tiles_internal.h"

FD_WINOGRAD_DECLARE_ISA(avx2)

#if FD_GEMM_X86_SIMD
#include <immintrin.h>

#define FD_TARGET FD_TARGET_FEATURES(FD_AVX2_FEATURES)
#define FD_ISA avx2
#define FD_WVEC_BYTES 32

int fd_winograd_avx2_available(void) { return FD_CPU_SUPPORTS(FD_AVX2_FEATURES) ? 1 : 0; }

/* Without GCC vector extensions (MSVC): the intrinsics (winograd_tiles_internal.h). */
#define FD_WV_TYPE_s __m256
#define FD_WV_SET1_s _mm256_set1_ps
#define FD_WV_ADD_s _mm256_add_ps
#define FD_WV_SUB_s _mm256_sub_ps
#define FD_WV_MUL_s _mm256_mul_ps
#define FD_WV_FMA_s _mm256_fmadd_ps
#define FD_WV_TYPE_d __m256d
#define FD_WV_SET1_d _mm256_set1_pd
#define FD_WV_ADD_d _mm256_add_pd
#define FD_WV_SUB_d _mm256_sub_pd
#define FD_WV_MUL_d _mm256_mul_pd
#define FD_WV_FMA_d _mm256_fmadd_pd

#include "runtime/instantiate_types.h"

#else /* no x86 SIMD in this build */

FD_WINOGRAD_PORTABLE_STUBS(avx2)

#endif
