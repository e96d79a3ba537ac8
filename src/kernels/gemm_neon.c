/* AArch64 Advanced SIMD (NEON) indirect GEMM kernels, instantiated from gemm_simd.template.c like the x86
 * files. Tiles: float 5 rows x 16 columns (4 float32x4_t), a packed panel of 32 floats processed as two
 * tiles side by side; double 5 x 8 (4 float64x2_t), two per 16-double panel: 20 accumulators, enough
 * independent FMA chains for 4 FMA pipes of 4-cycle latency (16), and with the 4 B vectors and the 5
 * broadcast A elements 29 of the 32 vector registers. 6 rows (24 accumulators) measured 2-3 spills per
 * k step with GCC 12 (aarch64-linux-gnu-gcc -O3): it loads all 6 A elements before the FMAs, 34 live
 * vectors. Each k step of a tile: 2 LDP of B, 5 scalar loads of A (FD_VBCAST is vdupq_n of a loaded
 * scalar, folded into the by-element FMLA Vd.4S, Vn.4S, Vm.S[0]: no DUP), 20 FMLA.
 * No FD_GEMM_DENSE tiles (FD_DENSE_*_MR undefined): GCC 12 spills the fully unrolled Kc = 32 tile (~900
 * stack accesses); FD_GEMM_DENSE calls take the indirect tiles, with the same results.
 * Advanced SIMD is baseline on every AArch64 CPU, so no target attribute and no run-time check:
 * fd_gemm_neon_available() is 1 wherever this file compiles its kernels (GCC or clang for AArch64), 0
 * elsewhere (stubs). Room is left for SVE/SME: each would be one more file and dispatch line. */
#include "gemm_internal.h"

FD_GEMM_DECLARE_ISA(neon)

#if FD_GEMM_NEON
#include <arm_neon.h>
#include <string.h>

#include "runtime/templating.h"

#define FD_TARGET
#define FD_SIMD_FN(name) FD_CAT(FD_FN(name), _neon)

int fd_gemm_neon_available(void) { return 1; }

/* No masked loads/stores in Advanced SIMD: the first n < lanes elements through a zeroed buffer (only
 * at the N tails and the last k step of a narrow panel's dot products, never in a steady-state loop). */
static inline float32x4_t fd_neon_load_part_f32(const float *p, int n) {
    float buf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    memcpy(buf, p, (size_t)n * sizeof(float));
    return vld1q_f32(buf);
}
static inline void fd_neon_store_part_f32(float *p, float32x4_t v, int n) {
    float buf[4];
    vst1q_f32(buf, v);
    memcpy(p, buf, (size_t)n * sizeof(float));
}
static inline float64x2_t fd_neon_load_part_f64(const double *p, int n) {
    double buf[2] = {0.0, 0.0};
    memcpy(buf, p, (size_t)n * sizeof(double));
    return vld1q_f64(buf);
}
static inline void fd_neon_store_part_f64(double *p, float64x2_t v, int n) {
    double buf[2];
    vst1q_f64(buf, v);
    memcpy(p, buf, (size_t)n * sizeof(double));
}

/* ---- float: 4 lanes */
#define FD_REAL float
#define FD_PREFIX s
#define FD_PANEL FD_SPANEL
#define FD_GRANULE FD_SGRANULE
#define FD_VEC float32x4_t
#define FD_LANES 4
#define FD_VZERO() vdupq_n_f32(0.0f)
#define FD_VLOADU(p) vld1q_f32(p)
#define FD_VSTOREU(p, v) vst1q_f32((p), (v))
#define FD_VBCAST(p) vdupq_n_f32(*(p))
#define FD_VADD(a, b) vaddq_f32((a), (b))
#define FD_VFMA(a, b, c) vfmaq_f32((c), (a), (b))
#define FD_VLOAD_PART(p, n) fd_neon_load_part_f32((p), (n))
#define FD_VSTORE_PART(p, v, n) fd_neon_store_part_f32((p), (v), (n))
#define FD_VHSUM(v) vaddvq_f32(v)
#define FD_DOT_ACC 16
#define FD_WIDE_MR 5
#define FD_WIDE_NV 4
#define FD_NARROW_MR 5
#define FD_NARROW_NV 4
#include "gemm_simd.template.c"

/* ---- double: 2 lanes */
#define FD_REAL double
#define FD_PREFIX d
#define FD_PANEL FD_DPANEL
#define FD_GRANULE FD_DGRANULE
#define FD_VEC float64x2_t
#define FD_LANES 2
#define FD_VZERO() vdupq_n_f64(0.0)
#define FD_VLOADU(p) vld1q_f64(p)
#define FD_VSTOREU(p, v) vst1q_f64((p), (v))
#define FD_VBCAST(p) vdupq_n_f64(*(p))
#define FD_VADD(a, b) vaddq_f64((a), (b))
#define FD_VFMA(a, b, c) vfmaq_f64((c), (a), (b))
#define FD_VLOAD_PART(p, n) fd_neon_load_part_f64((p), (n))
#define FD_VSTORE_PART(p, v, n) fd_neon_store_part_f64((p), (v), (n))
#define FD_VHSUM(v) vaddvq_f64(v)
#define FD_DOT_ACC 16
#define FD_WIDE_MR 5
#define FD_WIDE_NV 4
#define FD_NARROW_MR 5
#define FD_NARROW_NV 4
#include "gemm_simd.template.c"

#else /* not AArch64 GCC/clang */

FD_GEMM_PORTABLE_STUBS(neon)

#endif
