/* The AVX-512 clone of the Winograd tile transforms (winograd_tiles.template.c, 64-byte vectors: one zmm
 * register per channel vector), dispatched by winograd_tiles.c. GCC/clang: compiled with baseline flags,
 * only these functions carry the target attribute of FD_AVX512_FEATURES; MSVC: the whole file is compiled
 * with /arch:AVX512 (setup.py). fd_winograd_avx512_available() only calls fd_cpu_supports_all (baseline
 * runtime/cpu_features.c), so nothing of the ISA runs before the check. */
#include "winograd_tiles_internal.h"

FD_WINOGRAD_DECLARE_ISA(avx512)

#if FD_GEMM_X86_SIMD
#include <immintrin.h>

#define FD_TARGET FD_TARGET_FEATURES(FD_AVX512_FEATURES)
#define FD_ISA avx512
#define FD_WVEC_BYTES 64

int fd_winograd_avx512_available(void) { return FD_CPU_SUPPORTS(FD_AVX512_FEATURES) ? 1 : 0; }

/* Without GCC vector extensions (MSVC): the intrinsics (winograd_tiles_internal.h). */
#define FD_WV_TYPE_s __m512
#define FD_WV_SET1_s _mm512_set1_ps
#define FD_WV_ADD_s _mm512_add_ps
#define FD_WV_SUB_s _mm512_sub_ps
#define FD_WV_MUL_s _mm512_mul_ps
#define FD_WV_FMA_s _mm512_fmadd_ps
#define FD_WV_TYPE_d __m512d
#define FD_WV_SET1_d _mm512_set1_pd
#define FD_WV_ADD_d _mm512_add_pd
#define FD_WV_SUB_d _mm512_sub_pd
#define FD_WV_MUL_d _mm512_mul_pd
#define FD_WV_FMA_d _mm512_fmadd_pd
#define FD_WV_STREAM_s _mm512_stream_ps
#define FD_WV_STREAM_d _mm512_stream_pd

#include "runtime/instantiate_types.h"

#else /* no x86 SIMD in this build */

FD_WINOGRAD_PORTABLE_STUBS(avx512)

#endif
