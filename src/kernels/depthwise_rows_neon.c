/* The NEON clone of the depthwise kernels (depthwise_rows.template.c), dispatched by depthwise_rows.c: the
 * convolution kernel with NEON intrinsics; the transposed kernel is the template's plain C, compiled as the
 * portable clone is. Advanced SIMD is baseline on AArch64: no target attribute, and available() is 1 wherever
 * the file is compiled in (AArch64 GCC/clang: FD_GEMM_NEON); elsewhere it compiles to stubs. Tiles of 8 pixels
 * as on AVX2 (16 pixels compiled to ~65 % more code and more stack traffic with GCC 12; neither is measured on
 * Arm hardware yet). No masked loads: partial vectors go through a zeroed buffer. A lane permute is a byte
 * table lookup (TBL). */
#include "depthwise_rows_internal.h"

FD_DEPTHWISE_DECLARE_ISA(neon)

#if FD_GEMM_NEON
#include <arm_neon.h>
#include <string.h>

#define FD_TARGET
#define FD_ISA neon

int fd_depthwise_neon_available(void) { return 1; }

/* The vector helpers of the convolution kernel's SIMD clone (FD_DW_SIMD in the template), named
 * FD_ISA_FN(dw_*): fd_<s|d>dw_<op>_neon. Per type: the vector (dwv) and lane-index (dwi) types, lanes per
 * vector, output pixels per register tile, whether a tile may take two vectors of channels (pairs), and
 *   zero()  load(p)  load_part(p, n)  store(p, v)  store_part(p, v, n)   (first n lanes only)
 *   fma(a, b, c) = a*b + c
 *   index(c0, Cog, Cig)     lane l reads element ((c0 + l)/Cog - c0/Cog)*Cig of a loaded vector
 *   expand(p, n, idx)       n elements from p (no more are read), spread over the lanes by idx
 * A tile of TILE pixels holds TILE accumulators, up to 5 weight vectors and an input vector in
 * registers (32 q). */
#define DW_HELPER static FD_FORCE_INLINE FD_TARGET

typedef float32x4_t fd_sdwv_neon;
typedef uint8x16_t fd_sdwi_neon;
enum { fd_sdw_lanes_neon = 4, fd_sdw_tile_neon = 8, fd_sdw_pairs_neon = 0 };
DW_HELPER float32x4_t fd_sdw_zero_neon(void) { return vdupq_n_f32(0.0f); }
DW_HELPER float32x4_t fd_sdw_load_neon(const float *p) { return vld1q_f32(p); }
DW_HELPER float32x4_t fd_sdw_load_part_neon(const float *p, ptrdiff_t n) {
    float buf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    memcpy(buf, p, (size_t)n * sizeof(float));
    return vld1q_f32(buf);
}
DW_HELPER void fd_sdw_store_neon(float *p, float32x4_t v) { vst1q_f32(p, v); }
DW_HELPER void fd_sdw_store_part_neon(float *p, float32x4_t v, ptrdiff_t n) {
    float buf[4];
    vst1q_f32(buf, v);
    memcpy(p, buf, (size_t)n * sizeof(float));
}
DW_HELPER float32x4_t fd_sdw_fma_neon(float32x4_t a, float32x4_t b, float32x4_t c) { return vfmaq_f32(c, a, b); }
DW_HELPER uint8x16_t fd_sdw_index_neon(ptrdiff_t c0, ptrdiff_t cog, ptrdiff_t cig) {
    uint8_t byte[16];
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < 4; i++) byte[4 * l + i] = (uint8_t)(4 * ((c0 + l) / cog - c0 / cog) * cig + i);
    return vld1q_u8(byte);
}
DW_HELPER float32x4_t fd_sdw_expand_neon(const float *p, ptrdiff_t n, uint8x16_t idx) {
    return vreinterpretq_f32_u8(vqtbl1q_u8(vreinterpretq_u8_f32(fd_sdw_load_part_neon(p, n)), idx));
}

typedef float64x2_t fd_ddwv_neon;
typedef uint8x16_t fd_ddwi_neon;
enum { fd_ddw_lanes_neon = 2, fd_ddw_tile_neon = 8, fd_ddw_pairs_neon = 0 };
DW_HELPER float64x2_t fd_ddw_zero_neon(void) { return vdupq_n_f64(0.0); }
DW_HELPER float64x2_t fd_ddw_load_neon(const double *p) { return vld1q_f64(p); }
DW_HELPER float64x2_t fd_ddw_load_part_neon(const double *p, ptrdiff_t n) {
    double buf[2] = {0.0, 0.0};
    memcpy(buf, p, (size_t)n * sizeof(double));
    return vld1q_f64(buf);
}
DW_HELPER void fd_ddw_store_neon(double *p, float64x2_t v) { vst1q_f64(p, v); }
DW_HELPER void fd_ddw_store_part_neon(double *p, float64x2_t v, ptrdiff_t n) {
    double buf[2];
    vst1q_f64(buf, v);
    memcpy(p, buf, (size_t)n * sizeof(double));
}
DW_HELPER float64x2_t fd_ddw_fma_neon(float64x2_t a, float64x2_t b, float64x2_t c) { return vfmaq_f64(c, a, b); }
DW_HELPER uint8x16_t fd_ddw_index_neon(ptrdiff_t c0, ptrdiff_t cog, ptrdiff_t cig) {
    uint8_t byte[16];
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 8; i++) byte[8 * l + i] = (uint8_t)(8 * ((c0 + l) / cog - c0 / cog) * cig + i);
    return vld1q_u8(byte);
}
DW_HELPER float64x2_t fd_ddw_expand_neon(const double *p, ptrdiff_t n, uint8x16_t idx) {
    return vreinterpretq_f64_u8(vqtbl1q_u8(vreinterpretq_u8_f64(fd_ddw_load_part_neon(p, n)), idx));
}
#undef DW_HELPER

#define FD_DW_SIMD 1
#define FD_DW_KEEP(v) FD_DW_ASM_KEEP("+w", v)
#include "runtime/instantiate_types.h"

#else /* not AArch64 GCC/clang */

FD_DEPTHWISE_PORTABLE_STUBS(neon)

#endif
