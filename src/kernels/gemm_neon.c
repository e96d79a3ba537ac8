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
 *
 * STEADY-STATE ESTIMATE (counted, not measured: no Arm hardware ran it yet; tests/c/build.sh bench on a Mac or an
 * Arm server settles it). Method: aarch64-linux-gnu-gcc 12 -O3 (setup.py's flags), objdump of the innermost k
 * loop (tests/c/fma_loops.py, checked by .ci/aarch64.sh): per k step 35 instructions for 20 FMLA (5 LDR of A,
 * 2 LDP of B, 4 ADD, the prefetch test TST+B.NE, CMP+B.NE; every 16th step adds 5 PRFM), the same for f64.
 * clang 14 (--target=aarch64-linux-gnu, same flags): 31-34 instructions per 20 FMLA, no spills either, so this
 * path does not have the portable tile's 3-4x compiler dependence (clang 14's portable f32 loop: 34
 * instructions per 8 FMA, against GCC's 17). Apple's clang was not available to check.
 * Each accumulator is updated once per step, so its FMA chain has 5 cycles at 4 FMLA per cycle, above the
 * 4-cycle latency. Assuming the by-element FMLA issues like the vector form on every 128-bit FMA pipe:
 *   Apple M1-M4 P-core (4 x 128-bit FMA, latency 4, 8-wide decode): 20 FMLA = 5 cycles, front end 35/8 =
 *     4.4 cycles, 7 loads on 3 load pipes < 3 cycles: FMA-bound, ~100 % of peak in the loop (M1 3.2 GHz:
 *     102 GFLOP/s f32, 51 f64); with the tiles' own work (bias, C stores, row pointers per tap) perhaps
 *     85-95 % for K >= 256, less for short taps (Kc = 16-32).
 *   Neoverse V1 (4 x 128-bit, latency 4, 5-wide decode, 8 macro-ops/cycle from its MOP cache): from the MOP
 *     cache FMA-bound (4.4 < 5 cycles), ~100 %; decoder-fed 35/5 = 7 cycles, ~70 %.
 *   Neoverse V2 (4 x 128-bit, latency 4, 6-wide decode, MOP cache): FMA-bound from the MOP cache; decoder-fed
 *     5.8 cycles, ~85 %.
 *   Neoverse N1/N2 (2 x 128-bit): 10 cycles per step, FMA-bound, ~100 %.
 * The portable 4x8 tile counted the same way: 17 instructions per 8 FMA and 8 accumulators, so on a core of
 * 4 pipes with latency 4 at most 8/4 = 2 FMA per cycle, <= 50 % of peak: this file's loop is about 2x that.
 * The narrow last panel's dot tiles (N <= 4): 37-38 instructions per 15-16 FMLA, front-end-bound on M1
 * (~84 %) before the final lane sums.
 *
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
/* the dot kernel's sums of 4 vectors' lanes at once, by vaddvq_f32's tree ((lane 0 + 1) + (2 + 3)) */
#define FD_VHSUMS(v, out) vst1q_f32((out), vpaddq_f32(vpaddq_f32((v)[0], (v)[1]), vpaddq_f32((v)[2], (v)[3])))
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
#define FD_VHSUMS(v, out) vst1q_f64((out), vpaddq_f64((v)[0], (v)[1]))
#define FD_DOT_ACC 16
#define FD_WIDE_MR 5
#define FD_WIDE_NV 4
#define FD_NARROW_MR 5
#define FD_NARROW_NV 4
#include "gemm_simd.template.c"

#else /* not AArch64 GCC/clang */

FD_GEMM_PORTABLE_STUBS(neon)

#endif
