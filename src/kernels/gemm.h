/* Single-threaded, runtime-dispatched indirect GEMM with prepacked B (float32/float64).
 *
 * MATH
 *   for m < M, n < N:
 *     c_rows[m][n] = init + sum_{t<T, a_rows[m*T + t] != NULL} sum_{k<Kc} a_rows[m*T + t][k] * B[t*Kc + k][n]
 *   init = (flags & FD_GEMM_ACCUMULATE) ? c_rows[m][n] : (bias ? bias[n] : 0)
 *   a_rows holds M*T pointers to Kc contiguous elements (entries may alias); c_rows
 *   holds M pointers to N contiguous elements, rows never overlap. B (K x N, K = T*Kc)
 *   is packed once with fd_?gemm_pack_b. M == 0 or N == 0 is a no-op.
 *   With FD_GEMM_SKIP_NULL in flags, an a_rows entry may be NULL: that tap is left out
 *   of that row's sum. A shared zero row would not do: 0 * Inf = NaN, so a non-finite
 *   weight would poison every pixel with a padding tap. Row tiles without a NULL run the
 *   plain kernel; the others a variant that skips a tap missing from every row of the
 *   tile and, for a tap missing from some rows only, restores those rows' accumulators.
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
 *   fd_?gemm_packed_size(K, N) = K * roundup(N, G), less the narrow last panel's padding (below). No alignment is required (the
 *   kernels use unaligned loads), though 64-byte aligned buffers are slightly faster.
 *
 * NARROW LAST PANEL (at most FD_GEMM_DOT_MAX_N columns: a convolution's head with 1-4 outputs, a
 *   col2im of one output over a 2x2 kernel, the last columns of a 33-36 wide B): a 16-wide tile would
 *   compute 4-16x the useful products. Such a panel is packed transposed instead, column j of it at
 *   packed[K*n0 + j*K + k] (K*valid elements), and its C elements are dot products along k: vectors of
 *   A and of B's column, a register tile of rows x all its columns, each accumulator summed across its
 *   lanes once at the end (gemm_simd.template.c, "dot"): a lane-count of accumulators at once,
 *   transposed as they are added (FD_VHSUMS, gemm_x86_sums.h and gemm_neon.c: the tree of a scalar
 *   reduce, so the same bits; with a short K, as a k2 s2 head's 64 channels, one-by-one sums took as
 *   long as the products). A column range that starts on a panel boundary still starts at
 *   packed + K*n0, so callers slice B as before.
 *
 * KERNELS (XNNPACK-style igemm, gemm_simd.template.c): A is broadcast straight from
 * the row pointers (no A packing), each k step loads one packed B row of the tile and
 * does MR x NV FMAs into register accumulators. Loop order: panel outer, row tile
 * inner (LOOP ORDER), so one B panel (K x 32 floats = 128 B per k) is reused from L1/L2 by every
 * row tile; when all of B fits in L2 but A does not, M is first cut into chunks of
 * ~256 KiB of A (gemm_internal.h). A panel too long for L2 (over fd_gemm_panel_budget() bytes,
 * below) is cut first: K in blocks of whole taps of at most half the budget
 * (fd_gemm_tap_block), all panels and row tiles of one block before the next, whose tiles
 * add to C (so such a C sums in another order than one block would; the same at every
 * thread count, since only the shape and the CPU's L2 decide). N tails use masked loads/stores; M tails repeat the
 * last row pointer (computed, never stored). Tiles chosen by measurement:
 *   avx512 f32:  6 x 64 (24 zmm acc) over two adjacent full panels (PAIR TILES), 12 x 32 on a full
 *                panel left alone, 8 x 16 on a 16-wide last panel
 *   avx512 f64:  6 x 32 (24 zmm acc) over two full panels, 8 x 16 (16 zmm acc) on one, 8 x 8
 *   avx2   f32:  6 x 16 (12 ymm acc), a 32-wide panel = two tiles side by side
 *   avx2   f64:  6 x 8
 *   neon   f32:  5 x 16 (20 q-register acc), two tiles per 32-wide panel (AArch64, gemm_neon.c)
 *   neon   f64:  5 x 8  (20 q-register acc)
 *   portable:    4 x 8 f32 / 4 x 4 f64 plain C arrays (GCC: SLP-vectorised, SSE2/NEON)
 * A call of at most 4 rows (a convolution's 2x2 output, a deconvolution's 2x2 input: the whole weight
 * read once for a few pixels) takes 4-row tiles of the same widths that prefetch B ahead of the loads.
 * Why P = 2 vectors: 2 B loads + MR broadcasts per 2*MR FMAs keeps the load ports far
 * below the FMA rate, and two accumulator columns give enough independent chains;
 * the 16-wide granule keeps N = 16 (1x1/2x2 deconvs with 4-16 channels) padding-free.
 * Larger MR (14-28) measured slower (GPR pressure: one pointer per row).
 * PAIR TILES (AVX-512): where a panel and the next are both full (64 floats or 32 doubles of C left), one
 * row tile covers both: 6 rows x 4 vectors, B's vectors from the two panels' rows (K*32 elements apart).
 * Against the wide tile's 12 x 2 it holds 6 row pointers instead of 12 (the wide tile spilled some and
 * reloaded them every k step) and loads 4 + 6 vectors per 24 FMAs instead of 2 + 12, but twice the B
 * bytes per FMA: the first 12 rows still take the wide tiles, which read B's first pass from L3 or memory
 * no faster than those deliver it. It measured 3-25 % faster on the GEMMs of real layers
 * (asv_benches/NOTES.md), 1x1 phases and large K included; the tap blocks are cut as for one panel, and
 * each C element sums in the same order as in the wide tile: the same bits.
 * STRIDED TILES (AVX-512): on a 16-wide panel, row tiles whose A rows are evenly spaced in every tap and
 * whose C rows are too (the pixels of one output row of a convolution, at any stride) are addressed
 * from one pointer walked by the spacing, so they hold 24 rows instead of 8 (8 x 16 reached about 70 %
 * of the FMA peak: 8 accumulators barely cover the FMA latency). Only with at least 256 products per C
 * element (taps x Kc): below that A streams from memory once and the indirect tile measured as fast or
 * faster; a 12 x 32 strided tile on full panels measured no faster than the indirect one. Same sums in
 * the same order: the same bits either way.
 *
 * MEASURED by tests/c/build.sh bench: GFLOP/s per ISA on the shapes (a)-(g) of tests/c/test_gemm.c,
 * against numpy's BLAS (results, with the machine they ran on: asv_benches/NOTES.md). The SIMD kernels
 * stay close to the FMA peak while C stays in L2; a very narrow N (3 columns) still computes a whole
 * 16-wide padded tile.
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

/* Columns [n0, N) of a packed B start at packed + K*n0 when n0 is a multiple of this
 * (a float panel; two double panels), so callers can split B's columns between threads. */
#define FD_GEMM_COLUMN_ALIGN 32

/* A last panel of at most this many columns is packed transposed and multiplied by dot products (NARROW
 * LAST PANEL above). */
#define FD_GEMM_DOT_MAX_N 4

/* Number of floats/doubles the packed form of a K x N matrix B needs (includes padding). */
size_t fd_sgemm_packed_size(size_t K, size_t N);
size_t fd_dgemm_packed_size(size_t K, size_t N);

/* Pack B: element (k, n) is read at b[k*stride_k + n*stride_n]. */
void fd_sgemm_pack_b(size_t K, size_t N, const float *b, ptrdiff_t stride_k, ptrdiff_t stride_n, float *packed);
void fd_dgemm_pack_b(size_t K, size_t N, const double *b, ptrdiff_t stride_k, ptrdiff_t stride_n,
                     double *packed);

/* Pack B given as K row pointers, each to N contiguous elements (B's rows gathered from
 * anywhere, e.g. the taps of one stride phase of a weight). */
void fd_sgemm_pack_b_rows(size_t K, size_t N, const float *const *rows, float *packed);
void fd_dgemm_pack_b_rows(size_t K, size_t N, const double *const *rows, double *packed);

/* fd_?gemm_indirect's flags (see MATH above). FD_GEMM_DENSE is the caller's promise that the rows are
 * evenly spaced: a_rows[m] = a_rows[0] + m*Kc (T = 1) and c_rows[m] = c_rows[0] + m*N for every m. The
 * kernels may then address whole row tiles from their first row (AVX2 and AVX-512, Kc = 32 or 64, no
 * bias, no accumulation; elsewhere the flag changes nothing). Results are the same bits either way. */
enum { FD_GEMM_ACCUMULATE = 1, FD_GEMM_SKIP_NULL = 2, FD_GEMM_DENSE = 4 };

/* Indirect GEMM, see the top of this file. packed_b comes from fd_?gemm_pack_b with K = T*Kc. */
void fd_sgemm_indirect(size_t M, size_t N, size_t T, size_t Kc, const float *const *a_rows,
                       const float *packed_b, const float *bias, float *const *c_rows, int flags);
void fd_dgemm_indirect(size_t M, size_t N, size_t T, size_t Kc, const double *const *a_rows,
                       const double *packed_b, const double *bias, double *const *c_rows, int flags);

/* ISA paths, by id 0 .. FD_ISA_COUNT - 1; gemm_dispatch.c's table gives each its name and kernels.
 * Ids ascend in preference: the initial choice is the highest supported one, overridable with the
 * Python package's $FASTDECONV_ISA=<name> (parsed once at import, see fastdeconv/_cpu.pyx) or
 * fd_gemm_set_isa. The depthwise and Winograd kernels follow the same choice. NEON (AArch64) and the x86
 * paths are never supported in the same build. */
enum { FD_ISA_PORTABLE = 0, FD_ISA_AVX2 = 1, FD_ISA_AVX512 = 2, FD_ISA_NEON = 3, FD_ISA_COUNT = 4 };
int fd_gemm_isa_supported(int isa);    /* 1 if this CPU + build can run it, else 0 (also for unknown ids) */
int fd_gemm_isa_compiled(int isa);     /* 1 if this build has the path's own kernels (whatever the CPU), else 0 */
int fd_gemm_get_isa(void);             /* the path in use */
int fd_gemm_set_isa(int isa);          /* force a path (tests); 0 on success, -1 if unsupported */
const char *fd_gemm_isa_name(int isa); /* "portable", "avx2", "avx512", "neon"; "unknown" for any other id */

/* The panel budget: B panels of more bytes than this run in blocks of taps (LOOP ORDER above); 0: never cut.
 * The automatic value is resolved once from the CPU: half of one core's L2 on Intel (2 MiB L2: 1 MiB), a
 * quarter on AMD (1 MiB L2: 256 KiB), 256 KiB where cpuid gives no L2 size (and off x86). Results depend
 * on it (blocked panels sum in another order), never on the thread count. fd_gemm_set_panel_budget forces
 * a value (tests); a negative one restores the automatic choice. */
size_t fd_gemm_panel_budget(void);
void fd_gemm_set_panel_budget(long long bytes);

#ifdef __cplusplus
}
#endif

#endif
