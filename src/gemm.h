/* Single-threaded, runtime-dispatched indirect GEMM with prepacked B (float32/float64).
 *
 * MATH
 *   for m < M, n < N:
 *     c_rows[m][n] = init + sum_{t<T} sum_{k<Kc} a_rows[m*T + t][k] * B[t*Kc + k][n]
 *   init = accumulate ? c_rows[m][n] : (bias ? bias[n] : 0)
 *   a_rows holds M*T pointers to Kc contiguous elements (entries may alias, e.g. a
 *   shared zero row for padding taps); c_rows holds M pointers to N contiguous
 *   elements, rows never overlap. B (K x N, K = T*Kc) is packed once with
 *   fd_?gemm_pack_b. M == 0 or N == 0 is a no-op.
 *
 * THREADS
 *   No mutable global state besides the ISA choice, which is resolved once
 *   (idempotent, benign race, atomic store) on first use. Every call only touches its
 *   own arguments, so callers may run many calls concurrently on disjoint c rows.
 *
 * PACKED LAYOUT (identical for every ISA, so packing never depends on the ISA)
 *   Columns are cut into panels of P columns (P = 32 floats / 16 doubles = two
 *   512-bit vectors). The last panel is only rounded up to G columns (G = 16 floats /
 *   8 doubles = one 512-bit vector), so small N wastes little. Panel p starts at
 *   column n0 = p*P and at packed offset K*n0; inside it, row k occupies pw
 *   consecutive elements (pw = panel width): element (k, n) sits at
 *       packed[K*n0 + k*pw + (n - n0)],   padding columns are zero.
 *   fd_?gemm_packed_size(K, N) = K * roundup(N, G). No alignment is required (the
 *   kernels use unaligned loads), though 64-byte aligned buffers are slightly faster.
 *
 * KERNELS (XNNPACK-style igemm: A broadcast straight from the row pointers, no A
 * packing; loop order: panel outer, m-block inner, so a panel stays in L1/L2)
 *   ISA       dtype  full panel tile  narrow (last G) tile
 *   avx512    f32    12 x 32 (24 zmm acc)   (see gemm_avx512.c)
 *   ...  (filled in with measurements below)
 */
#ifndef FASTDECONV_GEMM_H
#define FASTDECONV_GEMM_H

#include <stddef.h>

#ifndef FD_RESTRICT
#if defined(_MSC_VER)
#define FD_RESTRICT __restrict
#else
#define FD_RESTRICT __restrict__
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Number of floats/doubles the packed form of a K x N matrix B needs (includes padding). */
size_t fd_sgemm_packed_size(size_t K, size_t N);
size_t fd_dgemm_packed_size(size_t K, size_t N);

/* Pack B: element (k, n) is read at b[k*stride_k + n*stride_n]. */
void fd_sgemm_pack_b(size_t K, size_t N, const float *b, ptrdiff_t stride_k, ptrdiff_t stride_n, float *packed);
void fd_dgemm_pack_b(size_t K, size_t N, const double *b, ptrdiff_t stride_k, ptrdiff_t stride_n,
                     double *packed);

/* Indirect GEMM, see the top of this file. packed_b comes from fd_?gemm_pack_b with K = T*Kc. */
void fd_sgemm_indirect(size_t M, size_t N, size_t T, size_t Kc, const float *const *a_rows,
                       const float *packed_b, const float *bias, float *const *c_rows, int accumulate);
void fd_dgemm_indirect(size_t M, size_t N, size_t T, size_t Kc, const double *const *a_rows,
                       const double *packed_b, const double *bias, double *const *c_rows, int accumulate);

/* ISA paths. Initial choice: the best supported one, overridable with the
 * environment variable FASTDECONV_ISA=portable|avx2|avx512 (read once; an
 * unsupported request falls back to the best supported path). */
enum { FD_ISA_PORTABLE = 0, FD_ISA_AVX2 = 1, FD_ISA_AVX512 = 2 };
int fd_gemm_isa_supported(int isa);    /* 1 if this CPU + build can run it */
int fd_gemm_get_isa(void);             /* the path in use */
int fd_gemm_set_isa(int isa);          /* force a path (tests); 0 on success, -1 if unsupported */
const char *fd_gemm_isa_name(int isa); /* "portable", "avx2", "avx512" */

#ifdef __cplusplus
}
#endif

#endif
