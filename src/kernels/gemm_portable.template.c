/* Packing and the portable (plain C) indirect GEMM, included by gemm_portable.c once per
 * type with FD_REAL, FD_PREFIX, FD_PANEL, FD_GRANULE, FD_PORTABLE_MR/NR defined. */
#ifndef FD_REAL
#error "FD_REAL must be defined"
#endif

size_t FD_FN(gemm_packed_size)(size_t K, size_t N) {
    const size_t full = N / FD_PANEL * FD_PANEL;
    return K * (full + (N > full ? fd_gemm_panel_width(N, full, FD_PANEL, FD_GRANULE) : 0));
}

/* One panel row: `valid` elements, zero-padded to `width`. A full panel is copied with a
 * constant size, which compilers inline as vector moves; a variable-size memcpy becomes
 * "rep movs", whose start-up cost dominated packing. */
static inline void FD_FN(copy_panel_row)(FD_REAL *FD_RESTRICT dst, const FD_REAL *FD_RESTRICT src, size_t valid,
                                     size_t width) {
    size_t j;
    if (valid == FD_PANEL) {
        memcpy(dst, src, FD_PANEL * sizeof(FD_REAL));
        return;
    }
    for (j = 0; j < valid; j++) dst[j] = src[j];
    for (; j < width; j++) dst[j] = (FD_REAL)0;
}

/* Blocks of FD_PACK_ROWS source rows stay in cache while they are spread over the panels,
 * so every source row is read from memory once and every panel is written in order. */
#ifndef FD_PACK_ROWS
#define FD_PACK_ROWS 32
#endif
void FD_FN(gemm_pack_b_rows)(size_t K, size_t N, const FD_REAL *const *rows, FD_REAL *packed) {
    size_t n0, k, k0, j;
    for (k0 = 0; k0 < K; k0 += FD_PACK_ROWS)
    for (n0 = 0; n0 < N; n0 += FD_PANEL) {
        const size_t width = fd_gemm_panel_width(N, n0, FD_PANEL, FD_GRANULE);
        const size_t valid = N - n0 < width ? N - n0 : width;
        for (k = k0; k < K && k < k0 + FD_PACK_ROWS; k++) {
            if (fd_gemm_panel_is_dot(N, n0, FD_PANEL)) {
                for (j = 0; j < valid; j++) packed[K * n0 + j * K + k] = rows[k][n0 + j];
                continue;
            }
            FD_FN(copy_panel_row)(packed + K * n0 + k * width, rows[k] + n0, valid, width);
        }
    }
}

void FD_FN(gemm_pack_b)(size_t K, size_t N, const FD_REAL *b, ptrdiff_t stride_k, ptrdiff_t stride_n,
                        FD_REAL *packed) {
    size_t n0, k, k0, j;
    for (k0 = 0; k0 < K; k0 += FD_PACK_ROWS)
    for (n0 = 0; n0 < N; n0 += FD_PANEL) {
        for (k = k0; k < K && k < k0 + FD_PACK_ROWS; k++) {
            const size_t width = fd_gemm_panel_width(N, n0, FD_PANEL, FD_GRANULE);
            const size_t valid = N - n0 < width ? N - n0 : width;
            const FD_REAL *src = b + (ptrdiff_t)k * stride_k + (ptrdiff_t)n0 * stride_n;
            FD_REAL *dst = packed + K * n0 + k * width;
            if (fd_gemm_panel_is_dot(N, n0, FD_PANEL)) {
                for (j = 0; j < valid; j++) packed[K * n0 + j * K + k] = src[(ptrdiff_t)j * stride_n];
            } else if (stride_n == 1) {
                FD_FN(copy_panel_row)(dst, src, valid, width);
            } else {
                for (j = 0; j < valid; j++) dst[j] = src[(ptrdiff_t)j * stride_n];
                for (; j < width; j++) dst[j] = (FD_REAL)0;
            }
        }
    }
}

/* One tile: rows [0, mr) of a_rows/c_rows, columns [n, n + nc) of C, whose B
 * columns start at b (row k of the panel at b + k*b_stride). With `skip`, NULL A rows
 * are left out as in gemm_simd.template.c: a tap missing from some rows runs for all
 * and the missing rows' accumulators are put back.
 *
 * Every compiler must keep the accumulators in vector registers (issue 28: clang 14 kept this tile's f32
 * accumulators on the stack, 2-2.5x slower than GCC 12 here). So `acc` is only ever indexed by constants:
 * every loop over it has a constant trip count and is fully unrolled (FD_PORTABLE_UNROLL), its address is
 * never taken, rows are put back by a select, and the partial-tile store (mr < MR, nc < NR, variable
 * indices) reads a copy, `out`, after the last k step. The k loop is then MR x NR independent multiply-adds per step on contiguous
 * B and a broadcast A element, which GCC and clang vectorise straight-line (SLP). tests/c/build.sh checks
 * the compiled loop (tests/c/fma_loops.py --mul-add). */
static FD_PORTABLE_TILE_ATTR void FD_FN(gemm_portable_tile)(size_t mr, size_t nc, size_t T, size_t Kc, const FD_REAL *const *a_rows,
                                      const FD_REAL *b, size_t b_stride, const FD_REAL *bias, size_t n,
                                      FD_REAL *const *c_rows, int accumulate, int skip) {
    FD_REAL acc[FD_PORTABLE_MR][FD_PORTABLE_NR], saved[FD_PORTABLE_MR][FD_PORTABLE_NR],
        out[FD_PORTABLE_MR][FD_PORTABLE_NR];
    size_t i, j, t, k;
    FD_PORTABLE_UNROLL
    for (i = 0; i < FD_PORTABLE_MR; i++) {
        FD_PORTABLE_UNROLL
        for (j = 0; j < FD_PORTABLE_NR; j++) acc[i][j] = saved[i][j] = (FD_REAL)0; /* saved: for -Wuninitialized */
    }

    for (t = 0; t < T; t++) {
        /* Rows past mr repeat the last valid row (results discarded), so the
         * inner loop has a fixed shape the compiler can keep in registers. */
        const FD_REAL *a[FD_PORTABLE_MR];
        const FD_REAL *FD_RESTRICT bk = b + t * Kc * b_stride;
        unsigned missing = 0;
        for (i = 0; i < FD_PORTABLE_MR; i++) a[i] = a_rows[(i < mr ? i : mr - 1) * T + t];
        if (skip) {
            const FD_REAL *present = NULL;
            for (i = 0; i < FD_PORTABLE_MR; i++) {
                if (a[i] == NULL) missing |= 1u << i;
                else present = a[i];
            }
            if (present == NULL) continue;
            for (i = 0; i < FD_PORTABLE_MR; i++)
                if (a[i] == NULL) a[i] = present;
            if (missing) {
                FD_PORTABLE_UNROLL
                for (i = 0; i < FD_PORTABLE_MR; i++) {
                    FD_PORTABLE_UNROLL
                    for (j = 0; j < FD_PORTABLE_NR; j++) saved[i][j] = acc[i][j];
                }
            }
        }
        for (k = 0; k < Kc; k++, bk += b_stride) {
            FD_PORTABLE_UNROLL
            for (i = 0; i < FD_PORTABLE_MR; i++) {
                const FD_REAL ai = a[i][k];
                FD_PORTABLE_UNROLL
                for (j = 0; j < FD_PORTABLE_NR; j++) {
                    /* two statements: under clang's default -ffp-contract=on, one would be an
                     * llvm.fmuladd, which clang 14 left scalar (fmadd s-registers on AArch64) or
                     * vectorised with spills (x86); -ffp-contract=fast (setup.py) fuses them anyway */
                    const FD_REAL product = ai * bk[j];
                    acc[i][j] += product;
                }
            }
        }
        if (missing) {
            FD_PORTABLE_UNROLL
            for (i = 0; i < FD_PORTABLE_MR; i++) {
                const int put_back = (int)(missing >> i & 1u);
                FD_PORTABLE_UNROLL
                for (j = 0; j < FD_PORTABLE_NR; j++) acc[i][j] = put_back ? saved[i][j] : acc[i][j];
            }
        }
    }

    FD_PORTABLE_UNROLL
    for (i = 0; i < FD_PORTABLE_MR; i++) {
        FD_PORTABLE_UNROLL
        for (j = 0; j < FD_PORTABLE_NR; j++) out[i][j] = acc[i][j];
    }
    for (i = 0; i < mr; i++) {
        FD_REAL *FD_RESTRICT c = c_rows[i] + n;
        for (j = 0; j < nc; j++) {
            const FD_REAL init = accumulate ? c[j] : (bias ? bias[n + j] : (FD_REAL)0);
            c[j] = init + out[i][j];
        }
    }
}

/* A narrow last panel (gemm.h): columns [n0, n0 + nc) of C, B transposed (bt[j*K + k]), each element a
 * dot product over k. */
static void FD_FN(gemm_portable_dot)(size_t M, size_t nc, size_t T, size_t Kc, const FD_REAL *const *a_rows,
                                     const FD_REAL *bt, const FD_REAL *bias, FD_REAL *const *c_rows, size_t n0,
                                     int accumulate) {
    const size_t K = T * Kc;
    size_t m, j, t, k;
    for (m = 0; m < M; m++)
        for (j = 0; j < nc; j++) {
            FD_REAL sum = (FD_REAL)0, *c = c_rows[m] + n0 + j;
            for (t = 0; t < T; t++) {
                const FD_REAL *a = a_rows[m * T + t], *b = bt + j * K + t * Kc;
                if (a == NULL) continue;   /* FD_GEMM_SKIP_NULL: a tap left out */
                for (k = 0; k < Kc; k++) sum += a[k] * b[k];
            }
            *c = (accumulate ? *c : bias ? bias[n0 + j] : (FD_REAL)0) + sum;
        }
}

void FD_FN(gemm_indirect_portable)(size_t M, size_t N, size_t T, size_t Kc, const FD_REAL *const *a_rows,
                                   const FD_REAL *packed_b, const FD_REAL *bias, FD_REAL *const *c_rows,
                                   int flags) {
    const size_t K = T * Kc;
    const int accumulate = (flags & FD_GEMM_ACCUMULATE) != 0, skip = (flags & FD_GEMM_SKIP_NULL) != 0;
    size_t n0, m0, j;
    for (n0 = 0; n0 < N; n0 += FD_PANEL) {
        const size_t width = fd_gemm_panel_width(N, n0, FD_PANEL, FD_GRANULE);
        const FD_REAL *panel = packed_b + K * n0;
        if (fd_gemm_panel_is_dot(N, n0, FD_PANEL)) {
            FD_FN(gemm_portable_dot)(M, N - n0, T, Kc, a_rows, panel, bias, c_rows, n0, accumulate);
            continue;
        }
        for (m0 = 0; m0 < M; m0 += FD_PORTABLE_MR) {
            const size_t mr = M - m0 < FD_PORTABLE_MR ? M - m0 : FD_PORTABLE_MR;
            for (j = 0; j < width && n0 + j < N; j += FD_PORTABLE_NR) {
                const size_t nc = N - n0 - j < FD_PORTABLE_NR ? N - n0 - j : FD_PORTABLE_NR;
                FD_FN(gemm_portable_tile)(mr, nc, T, Kc, a_rows + m0 * T, panel + j, width, bias, n0 + j,
                                          c_rows + m0, accumulate, skip);
            }
        }
    }
}
