/* Standalone test + benchmark for the indirect GEMM (src/kernels/gemm.h, every ISA path).
 *   test_gemm            full correctness sweep over every supported ISA, float and double
 *   test_gemm quick      small sweep (for valgrind)
 *   test_gemm bench [isa|all] [reps] [M N T Kc]   GFLOP/s for the deconvolution
 *                        shapes (a)-(g), or for one custom shape
 * Exit status is non-zero on any mismatch. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gemm.h"
#include "runtime/cpu_features.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0; }
static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static int failures = 0;
static const size_t C_GUARD = 8; /* sentinel elements after each C row */
#define SENTINEL 12345.0

/* ------------------------------------------------------------ correctness */
/* The double-precision reference of gemm.h's MATH, and each element's sum of |products| (its error scale).
 * mode 0: zero init, 1: bias, 2: accumulate onto c_rows (the bias must be ignored). */
#define DEFINE_REFERENCE(REAL, P)                                                                               \
    static void reference_##P(size_t M, size_t N, size_t T, size_t Kc, const REAL *const *a_rows, const REAL *b, \
                              ptrdiff_t sk, ptrdiff_t sn, int mode, const REAL *bias, REAL *const *c_rows,     \
                              double *ref, double *scale) {                                                    \
        size_t k, m, n, t;                                                                                     \
        for (m = 0; m < M; m++)                                                                                \
            for (n = 0; n < N; n++) {                                                                          \
                double acc = mode == 2 ? (double)c_rows[m][n] : mode == 1 ? (double)bias[n] : 0.0;             \
                double mag = fabs(acc);                                                                        \
                for (t = 0; t < T; t++)                                                                        \
                    for (k = 0; k < Kc && a_rows[m * T + t] != NULL; k++) {                                    \
                        const double prod = (double)a_rows[m * T + t][k] * (double)b[(t * Kc + k) * sk + n * sn]; \
                        acc += prod;                                                                           \
                        mag += fabs(prod);                                                                     \
                    }                                                                                          \
                ref[m * N + n] = acc;                                                                          \
                scale[m * N + n] = mag;                                                                        \
            }                                                                                                  \
    }
DEFINE_REFERENCE(float, s)
DEFINE_REFERENCE(double, d)

/* Each distinct A row is its own exact-size allocation so valgrind/ASan catch
 * any read past a_rows[i][Kc-1]; about 1/5 of the taps point at one shared zero row.
 * skip: FD_GEMM_SKIP_NULL, about 1/5 of the taps are NULL instead and one B element is
 * infinite, so a NULL tap that leaked into the sum (0 * Inf) shows up as a NaN. */
#define DEFINE_CHECK(REAL, P, TOL)                                                                               \
    static void check_##P(size_t M, size_t N, size_t T, size_t Kc, int mode, int transposed_b, int skip) {     \
        const size_t K = T * Kc, rows = M * T;                                                                 \
        REAL *b = xmalloc(K * N * sizeof(REAL));                                                               \
        REAL *packed = xmalloc(fd_##P##gemm_packed_size(K, N) * sizeof(REAL));                                  \
        REAL *zero_row = xmalloc(Kc * sizeof(REAL));                                                           \
        REAL **a_store = xmalloc(rows * sizeof(REAL *));                                                       \
        const REAL **a_rows = xmalloc(rows * sizeof(REAL *));                                                  \
        REAL **c_rows = xmalloc((M ? M : 1) * sizeof(REAL *));                                                 \
        REAL *bias = xmalloc(N * sizeof(REAL));                                                                \
        double *ref = xmalloc(M * N * sizeof(double) + 1);                                                     \
        double *scale = xmalloc(M * N * sizeof(double) + 1);                                                   \
        size_t i, k, m, n;                                                                                     \
        const ptrdiff_t sk = transposed_b ? 1 : (ptrdiff_t)N, sn = transposed_b ? (ptrdiff_t)K : 1;             \
        for (k = 0; k < K; k++)                                                                                \
            for (n = 0; n < N; n++) b[k * sk + n * sn] = (REAL)rng_uniform();                                  \
        if (skip && K > 0 && N > 0) b[rng_below(K) * sk + rng_below(N) * sn] = (REAL)INFINITY;                 \
        fd_##P##gemm_pack_b(K, N, b, sk, sn, packed);                                                          \
        for (k = 0; k < Kc; k++) zero_row[k] = 0;                                                              \
        for (n = 0; n < N; n++) bias[n] = (REAL)rng_uniform();                                                 \
        for (i = 0; i < rows; i++) {                                                                           \
            a_store[i] = NULL;                                                                                 \
            if (rng_below(5) == 0) {                                                                           \
                a_rows[i] = skip && rng_below(4) != 0 ? NULL : zero_row;                                       \
            } else if (i > 0 && rng_below(6) == 0) {                                                           \
                a_rows[i] = a_rows[rng_below(i)]; /* alias an earlier row */                                   \
            } else {                                                                                           \
                a_store[i] = xmalloc(Kc * sizeof(REAL));                                                       \
                for (k = 0; k < Kc; k++) a_store[i][k] = (REAL)rng_uniform();                                  \
                a_rows[i] = a_store[i];                                                                        \
            }                                                                                                  \
        }                                                                                                      \
        for (m = 0; m < M; m++) {                                                                              \
            c_rows[m] = xmalloc((N + C_GUARD) * sizeof(REAL));                                                 \
            for (n = 0; n < N + C_GUARD; n++) c_rows[m][n] = (REAL)(n < N ? rng_uniform() : SENTINEL);         \
        }                                                                                                      \
        reference_##P(M, N, T, Kc, a_rows, b, sk, sn, mode, bias, c_rows, ref, scale);                        \
        fd_##P##gemm_indirect(M, N, T, Kc, a_rows, packed, mode == 1 ? bias : NULL, c_rows,                    \
                              (mode == 2 ? FD_GEMM_ACCUMULATE : 0) | (skip ? FD_GEMM_SKIP_NULL : 0));          \
        for (m = 0; m < M; m++) {                                                                              \
            for (n = 0; n < N + C_GUARD; n++) {                                                                \
                const double got = c_rows[m][n];                                                               \
                const double want = n < N ? ref[m * N + n] : SENTINEL;                                         \
                const int bad = n >= N                ? got != SENTINEL                                        \
                                : !isfinite(want)     ? !(got == want || (isnan(got) && isnan(want)))          \
                                                      : !(fabs(got - want) <= TOL * (scale[m * N + n] + 1e-30)); \
                if (bad) {                                                                                     \
                    if (failures < 20)                                                                         \
                        fprintf(stderr,                                                                        \
                                "FAIL %s " #P " M=%zu N=%zu T=%zu Kc=%zu mode=%d bT=%d skip=%d at (%zu,%zu): " \
                                "got %.9g want %.9g\n",                                                        \
                                fd_gemm_isa_name(fd_gemm_get_isa()), M, N, T, Kc, mode, transposed_b, skip, m, \
                                n, got, want);                                                                 \
                    failures++;                                                                                \
                    m = M;                                                                                     \
                    break;                                                                                     \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        for (i = 0; i < rows; i++) free(a_store[i]);                                                           \
        for (m = 0; m < M; m++) free(c_rows[m]);                                                               \
        free(b); free(packed); free(zero_row); free(a_store); free(a_rows); free(c_rows);                      \
        free(bias); free(ref); free(scale);                                                                    \
    }

DEFINE_CHECK(float, s, 2e-6)
DEFINE_CHECK(double, d, 1e-14)

/* FD_GEMM_DENSE: A is one exact-size allocation of M rows Kc apart (T = 1), C one of M rows N apart with
 * sentinels after the last. The dense tiles sum in the same order as the indirect ones, so the result
 * must equal the same call without the flag bit for bit (the flag is a no-op with a bias or
 * accumulation), and the double-precision reference within TOL. */
#define DEFINE_DENSE_CHECK(REAL, P, TOL)                                                                         \
    static void check_dense_##P(size_t M, size_t N, size_t Kc, int mode) {                                     \
        REAL *b = xmalloc(Kc * N * sizeof(REAL));                                                              \
        REAL *packed = xmalloc(fd_##P##gemm_packed_size(Kc, N) * sizeof(REAL));                                 \
        REAL *a = xmalloc(M * Kc * sizeof(REAL));                                                              \
        REAL *c = xmalloc((M * N + C_GUARD) * sizeof(REAL)), *plain = xmalloc((M * N + C_GUARD) * sizeof(REAL)); \
        const REAL **a_rows = xmalloc(M * sizeof(REAL *));                                                     \
        REAL **c_rows = xmalloc(M * sizeof(REAL *)), **plain_rows = xmalloc(M * sizeof(REAL *));              \
        REAL *bias = xmalloc(N * sizeof(REAL));                                                                \
        size_t i, k, m, n;                                                                                     \
        for (i = 0; i < Kc * N; i++) b[i] = (REAL)rng_uniform();                                               \
        fd_##P##gemm_pack_b(Kc, N, b, (ptrdiff_t)N, 1, packed);                                                \
        for (i = 0; i < M * Kc; i++) a[i] = (REAL)rng_uniform();                                               \
        for (n = 0; n < N; n++) bias[n] = (REAL)rng_uniform();                                                 \
        for (i = 0; i < M * N + C_GUARD; i++) c[i] = plain[i] = (REAL)(i < M * N ? rng_uniform() : SENTINEL);  \
        for (m = 0; m < M; m++) {                                                                              \
            a_rows[m] = a + m * Kc;                                                                            \
            c_rows[m] = c + m * N;                                                                             \
            plain_rows[m] = plain + m * N;                                                                     \
        }                                                                                                      \
        const int flags = mode == 2 ? FD_GEMM_ACCUMULATE : 0;                                                  \
        fd_##P##gemm_indirect(M, N, 1, Kc, a_rows, packed, mode == 1 ? bias : NULL, plain_rows, flags);        \
        fd_##P##gemm_indirect(M, N, 1, Kc, a_rows, packed, mode == 1 ? bias : NULL, c_rows, flags | FD_GEMM_DENSE); \
        int bad = memcmp(c, plain, (M * N + C_GUARD) * sizeof(REAL)) != 0;                                     \
        for (i = 0; i < C_GUARD; i++) bad |= c[M * N + i] != SENTINEL;                                         \
        for (m = 0; m < M && !bad; m++)                                                                        \
            for (n = 0; n < N && !bad; n++) {                                                                  \
                double acc = mode == 1 ? (double)bias[n] : 0.0, mag = fabs(acc);                               \
                for (k = 0; k < Kc; k++) {                                                                     \
                    acc += (double)a[m * Kc + k] * (double)b[k * N + n];                                       \
                    mag += fabs((double)a[m * Kc + k] * (double)b[k * N + n]);                                 \
                }                                                                                              \
                /* accumulation (mode 2) is checked against the flagless call only */                           \
                if (mode != 2 && !(fabs((double)c[m * N + n] - acc) <= TOL * (mag + 1e-30))) bad = 1;          \
            }                                                                                                  \
        if (bad) {                                                                                             \
            if (failures < 20)                                                                                 \
                fprintf(stderr, "FAIL %s " #P " dense M=%zu N=%zu Kc=%zu mode=%d\n",                           \
                        fd_gemm_isa_name(fd_gemm_get_isa()), M, N, Kc, mode);                                  \
            failures++;                                                                                        \
        }                                                                                                      \
        free(b); free(packed); free(a); free(c); free(plain); free(a_rows); free(c_rows); free(plain_rows);    \
        free(bias);                                                                                            \
    }

DEFINE_DENSE_CHECK(float, s, 2e-6)
DEFINE_DENSE_CHECK(double, d, 1e-14)

/* Evenly spaced rows (the strided tile, gemm_simd.template.c): row m's tap t reads one image at
 * (m + m/run)*step + t*Kc (a 1-D convolution of stride `step`, its spacing broken every `run` rows as at
 * a new output row), C rows lie ldc apart in one allocation with sentinels in the gaps, and with skip
 * the first and last row of each run miss a tap (a border; one B element is infinite, so a leaked NULL
 * tap shows as a NaN). The same values copied into separate allocations (no rows evenly spaced) take
 * the indirect tiles: both must give the same bits, and the double-precision reference within TOL. */
#define DEFINE_STRIDED_CHECK(REAL, P, TOL)                                                                       \
    static void check_strided_##P(size_t M, size_t N, size_t T, size_t Kc, size_t step, size_t run, int mode,   \
                                  int skip) {                                                                  \
        const size_t K = T * Kc, ldc = N + 3, extent = (M + M / run) * step + T * Kc;                          \
        REAL *image = xmalloc(extent * sizeof(REAL)), *b = xmalloc(K * N * sizeof(REAL));                      \
        REAL *packed = xmalloc(fd_##P##gemm_packed_size(K, N) * sizeof(REAL));                                  \
        REAL *c = xmalloc(M * ldc * sizeof(REAL)), *bias = xmalloc(N * sizeof(REAL));                          \
        REAL **copies = xmalloc(M * T * sizeof(REAL *)), **c_copies = xmalloc(M * sizeof(REAL *));             \
        const REAL **a_rows = xmalloc(M * T * sizeof(REAL *)), **copy_rows = xmalloc(M * T * sizeof(REAL *));  \
        REAL **c_rows = xmalloc(M * sizeof(REAL *));                                                           \
        double *ref = xmalloc(M * N * sizeof(double)), *scale = xmalloc(M * N * sizeof(double));               \
        size_t i, m, n, t;                                                                                     \
        int bad = 0;                                                                                           \
        for (i = 0; i < extent; i++) image[i] = (REAL)rng_uniform();                                           \
        for (i = 0; i < K * N; i++) b[i] = (REAL)rng_uniform();                                                \
        if (skip) b[rng_below(K * N)] = (REAL)INFINITY;                                                        \
        fd_##P##gemm_pack_b(K, N, b, (ptrdiff_t)N, 1, packed);                                                 \
        for (n = 0; n < N; n++) bias[n] = (REAL)rng_uniform();                                                 \
        for (i = 0; i < M * ldc; i++) c[i] = (REAL)(i % ldc < N ? rng_uniform() : SENTINEL);                   \
        for (m = 0; m < M; m++) {                                                                              \
            c_rows[m] = c + m * ldc;                                                                           \
            c_copies[m] = xmalloc(N * sizeof(REAL));                                                           \
            memcpy(c_copies[m], c_rows[m], N * sizeof(REAL));                                                  \
            for (t = 0; t < T; t++) {                                                                          \
                const int border = skip && ((m % run == 0 && t == 0) || (m % run == run - 1 && t == T - 1));   \
                a_rows[m * T + t] = border ? NULL : image + (m + m / run) * step + t * Kc;                     \
                copies[m * T + t] = border ? NULL : xmalloc(Kc * sizeof(REAL));                                \
                if (!border) memcpy(copies[m * T + t], a_rows[m * T + t], Kc * sizeof(REAL));                  \
                copy_rows[m * T + t] = copies[m * T + t];                                                      \
            }                                                                                                  \
        }                                                                                                      \
        reference_##P(M, N, T, Kc, a_rows, b, (ptrdiff_t)N, 1, mode, bias, c_rows, ref, scale);                   \
        const int flags = (mode == 2 ? FD_GEMM_ACCUMULATE : 0) | (skip ? FD_GEMM_SKIP_NULL : 0);               \
        fd_##P##gemm_indirect(M, N, T, Kc, a_rows, packed, mode == 1 ? bias : NULL, c_rows, flags);            \
        fd_##P##gemm_indirect(M, N, T, Kc, copy_rows, packed, mode == 1 ? bias : NULL, c_copies, flags);       \
        for (m = 0; m < M; m++)                                                                                \
            for (n = 0; n < ldc; n++) {                                                                        \
                const double got = c_rows[m][n], want = ref[m * N + (n < N ? n : 0)];                          \
                if (n >= N) bad |= got != SENTINEL;                                                            \
                else if (memcmp(&c_rows[m][n], &c_copies[m][n], sizeof(REAL)) != 0) bad = 1;                  \
                else if (isfinite(want)) bad |= !(fabs(got - want) <= TOL * (scale[m * N + n] + 1e-30));      \
                else bad |= !(got == want || (isnan(got) && isnan(want)));                                     \
            }                                                                                                  \
        if (bad) {                                                                                             \
            if (failures < 20)                                                                                 \
                fprintf(stderr, "FAIL %s " #P " strided M=%zu N=%zu T=%zu Kc=%zu step=%zu run=%zu mode=%d skip=%d\n", \
                        fd_gemm_isa_name(fd_gemm_get_isa()), M, N, T, Kc, step, run, mode, skip);              \
            failures++;                                                                                        \
        }                                                                                                      \
        for (i = 0; i < M * T; i++) free(copies[i]);                                                           \
        for (m = 0; m < M; m++) free(c_copies[m]);                                                             \
        free(image); free(b); free(packed); free(c); free(bias); free(copies); free(c_copies); free(a_rows);   \
        free(copy_rows); free(c_rows); free(ref); free(scale);                                                 \
    }

DEFINE_STRIDED_CHECK(float, s, 2e-6)
DEFINE_STRIDED_CHECK(double, d, 1e-14)

static void run_sweep(int quick) {
    static const size_t dims[] = {1, 2, 3, 7, 13, 16, 17, 31, 33, 64, 65};
    static const size_t big_n[] = {48, 96, 100, 128, 255, 512};
    const size_t ndims = sizeof dims / sizeof dims[0];
    const int count = quick ? 60 : 700;
    int isa, c;
    for (isa = FD_ISA_PORTABLE; isa < FD_ISA_COUNT; isa++) {
        if (!fd_gemm_isa_supported(isa)) {
            printf("  %-8s not supported here, skipped\n", fd_gemm_isa_name(isa));
            continue;
        }
        if (fd_gemm_set_isa(isa) != 0 || fd_gemm_get_isa() != isa) {
            fprintf(stderr, "FAIL could not select %s\n", fd_gemm_isa_name(isa));
            failures++;
            continue;
        }
        const int before = failures;
        /* M == 0 / N == 0 are no-ops even with NULL pointers. */
        fd_sgemm_indirect(0, 5, 1, 1, NULL, NULL, NULL, NULL, 0);
        fd_dgemm_indirect(3, 0, 1, 1, NULL, NULL, NULL, NULL, 1);
        for (c = 0; c < count; c++) {
            size_t M = dims[rng_below(ndims)], N = dims[rng_below(ndims)];
            size_t T = rng_below(4) == 0 ? 9 : 1 + rng_below(4), Kc = dims[rng_below(ndims)];
            const int mode = (int)rng_below(3), transposed = rng_below(4) == 0;
            if (!quick && rng_below(4) == 0) N = big_n[rng_below(sizeof big_n / sizeof big_n[0])];
            if (!quick && rng_below(8) == 0) M = 100 + rng_below(200);
            if (quick && M * N * T * Kc > 200000) T = 1;
            const int skip = rng_below(2) == 0;
            check_s(M, N, T, Kc, mode, transposed, skip);
            check_d(M, N, T, Kc, mode, transposed, skip);
        }
        { /* FD_GEMM_DENSE around the dense tiles' sizes: Kc 32 and 64 (and their neighbours, which take the
             indirect tiles), one or two vectors of columns and partial panels, rows around multiples of
             the tiles' 6, 12 and 24 */
            static const size_t dense_k[] = {1, 31, 32, 33, 64, 65}, dense_n[] = {8, 16, 17, 32, 40, 48, 64, 100};
            static const size_t dense_m[] = {1, 5, 6, 11, 12, 23, 24, 25, 48, 72, 77};
            const int dense_count = quick ? 40 : 400;
            for (c = 0; c < dense_count; c++) {
                const size_t M = dense_m[rng_below(sizeof dense_m / sizeof dense_m[0])];
                const size_t N = dense_n[rng_below(sizeof dense_n / sizeof dense_n[0])];
                const size_t Kc = dense_k[rng_below(sizeof dense_k / sizeof dense_k[0])];
                const int mode = rng_below(4) == 0 ? (int)rng_below(3) : 0;
                check_dense_s(M, N, Kc, mode);
                check_dense_d(M, N, Kc, mode);
            }
            check_dense_s(72, 16, 32, 0); /* big's Winograd GEMMs */
            check_dense_d(72, 16, 32, 0);
            check_dense_s(72, 64, 64, 0); /* stride1's */
            check_dense_d(72, 32, 64, 0);
        }
        { /* evenly spaced rows around the strided tiles' 24 and 12 rows: runs of 23-60 rows (some tiles
             across a run's end), narrow and wide panels and a partial one, Kc around their k unroll of 4
             and A's 16-element lines, taps x Kc on both sides of the tiles' least K (256), strides 1-3
             rows of Kc; taps in blocks below (the budget) */
            static const size_t strided_n[] = {8, 16, 24, 32, 48, 100}, strided_k[] = {3, 4, 7, 16, 37, 64, 130, 300};
            static const size_t strided_m[] = {23, 24, 25, 48, 50, 97}, strided_run[] = {23, 24, 25, 32, 60};
            const int strided_count = quick ? 24 : 240;
            for (c = 0; c < strided_count; c++) {
                const size_t M = strided_m[rng_below(sizeof strided_m / sizeof strided_m[0])];
                const size_t N = strided_n[rng_below(sizeof strided_n / sizeof strided_n[0])];
                const size_t Kc = strided_k[rng_below(sizeof strided_k / sizeof strided_k[0])];
                const size_t run = strided_run[rng_below(sizeof strided_run / sizeof strided_run[0])];
                const size_t T = 1 + rng_below(9), step = Kc * (1 + rng_below(3));
                const int mode = (int)rng_below(3), skip = rng_below(2) == 0;
                check_strided_s(M, N, T, Kc, step, run, mode, skip);
                check_strided_d(M, N, T, Kc, step, run, mode, skip);
            }
        }
        if (!quick) { /* every edge of the tiles, deterministically: N around the dot panels (1-4, 33-36), the
                         16/32-wide panels and the pairs of 32-wide panels (64, 96), M around the row tiles (4,
                         5, 6, 8, 12 rows; a pair's 12 wide rows, then its 6-row tiles), Kc not a multiple of
                         any vector's lanes */
            static const size_t edge_n[] = {1,  2,  3,  4,  5,  8,  15, 16, 17, 20, 31, 32, 33, 34,
                                            35, 36, 47, 48, 49, 63, 64, 65, 80, 96, 97};
            static const size_t edge_m[] = {1, 4, 5, 6, 7, 11, 13, 63, 64, 69}, edge_k[] = {1, 3, 4, 5, 17};
            size_t a, b2, d, t2;
            int e = 0;
            for (a = 0; a < sizeof edge_n / sizeof edge_n[0]; a++)
                for (b2 = 0; b2 < sizeof edge_m / sizeof edge_m[0]; b2++)
                    for (d = 0; d < sizeof edge_k / sizeof edge_k[0]; d++)
                        for (t2 = 1; t2 <= 3; t2 += 2, e++) {
                            check_s(edge_m[b2], edge_n[a], t2, edge_k[d], e % 3, e % 5 == 0, e % 2);
                            check_d(edge_m[b2], edge_n[a], t2, edge_k[d], e % 3, e % 5 == 0, e % 2);
                        }
        }
        if (!quick) { /* a few large-K and the benchmark-like shapes, scaled down in M */
            check_s(37, 70, 8, 512, 2, 0, 0);
            check_d(37, 70, 8, 512, 1, 1, 0);
            check_s(50, 256, 4, 512, 1, 0, 0);
            check_s(41, 16, 4, 32, 0, 0, 0);
            check_d(41, 16, 4, 32, 2, 0, 0);
            check_s(33, 3, 4, 64, 1, 0, 0);
            check_s(29, 64, 9, 64, 1, 0, 0);
            check_d(29, 64, 9, 64, 0, 0, 0);
            check_s(37, 70, 8, 512, 2, 0, 1);
            check_s(29, 64, 9, 64, 1, 0, 1);
            check_d(29, 64, 9, 64, 0, 0, 1);
            check_s(37, 70, 8, 512, 0, 0, 1);   /* large K with NULL taps */
            check_d(26, 40, 1, 700, 1, 0, 1);
        }
        /* B panels of over 256 rows (K = 600, 350) with several row tiles, NULL taps and partial panels; in
           the quick set too (valgrind, ASan) */
        check_s(30, 33, 2, 300, 1, 0, 1);
        check_d(30, 33, 2, 300, 0, 1, 1);
        check_s(27, 48, 7, 50, 0, 0, 1);
        /* B panels in blocks of taps (gemm_internal.h, fd_gemm_tap_block: panels over the budget, forced to
           256 KiB here whatever this CPU's L2 gives): the bias in
           the first block only, later blocks adding to C, NULL taps, a transposed dot panel of 3 columns
           beside them, one tap per block (a Kc over the block), a 16-wide panel of float (64-byte rows), a
           panel of 8 doubles left whole beside blocked ones, the short tiles of at most 4 rows */
        fd_gemm_set_panel_budget(256 * 1024);
        check_s(30, 35, 5, 500, 1, 0, 1);
        check_d(30, 18, 3, 1100, 2, 1, 1);
        check_s(25, 16, 9, 500, 1, 0, 0);
        check_d(7, 40, 6, 400, 1, 0, 1);
        check_s(3, 64, 6, 512, 2, 0, 1);
        check_strided_s(50, 16, 9, 400, 400, 30, 1, 1);
        check_strided_d(50, 8, 9, 400, 800, 30, 2, 0);
        fd_gemm_set_panel_budget(-1);
        printf("  %-8s %s\n", fd_gemm_isa_name(isa), failures == before ? "ok" : "FAILED");
    }
}

/* -------------------------------------------------------------- benchmark */
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *name;
    size_t M, N, T, Kc;
} bench_shape;

static const bench_shape shapes[] = {
    {"a", 2048, 256, 4, 512}, {"b", 4096, 64, 4, 128},  {"c", 4096, 512, 1, 256}, {"d", 16384, 16, 4, 32},
    {"e", 3136, 64, 9, 64},   {"f", 128, 256, 4, 512}, {"g", 2048, 3, 4, 64},
};

/* a_rows point into an NHWC image (row = pixel, stride = Kc): tap t of output row
 * m reads pixel m + dx + dy*W of a W=64 wide image (2x2, 3x3 or 4x4 neighbourhood; other T: a column
 * of T pixels), inside an image of M + T*(W + 1) pixels. */
#define DEFINE_BENCH(REAL, P)                                                                                  \
    static double bench_##P(const bench_shape *s, int reps) {                                                  \
        const size_t M = s->M, N = s->N, T = s->T, Kc = s->Kc, K = T * Kc, W = 64;                             \
        const size_t side = T == 16 ? 4 : T == 9 ? 3 : T == 4 ? 2 : 1, pixels = M + T * (W + 1);              \
        REAL *image = xmalloc(pixels * Kc * sizeof(REAL));                                                     \
        REAL *b = xmalloc(K * N * sizeof(REAL));                                                               \
        REAL *packed = xmalloc(fd_##P##gemm_packed_size(K, N) * sizeof(REAL) + 64);                            \
        REAL *packed_aligned = (REAL *)(((uintptr_t)packed + 63) & ~(uintptr_t)63);                            \
        REAL *out = xmalloc(M * N * sizeof(REAL));                                                             \
        REAL *bias = xmalloc(N * sizeof(REAL));                                                                \
        const REAL **a_rows = xmalloc(M * T * sizeof(REAL *));                                                 \
        REAL **c_rows = xmalloc(M * sizeof(REAL *));                                                           \
        size_t i, m, t;                                                                                        \
        double best = 1e30;                                                                                    \
        int r, it, iters = 1;                                                                                  \
        for (i = 0; i < pixels * Kc; i++) image[i] = (REAL)rng_uniform();                                      \
        for (i = 0; i < K * N; i++) b[i] = (REAL)rng_uniform();                                                \
        for (i = 0; i < N; i++) bias[i] = (REAL)rng_uniform();                                                 \
        fd_##P##gemm_pack_b(K, N, b, (ptrdiff_t)N, 1, packed_aligned);                                         \
        for (m = 0; m < M; m++) {                                                                              \
            c_rows[m] = out + m * N;                                                                           \
            for (t = 0; t < T; t++) a_rows[m * T + t] = image + (m + t % side + (t / side) * W) * Kc;         \
        }                                                                                                      \
        for (;;) { /* calibrate: one timing sample lasts >= 20 ms */                                           \
            double t0 = now_seconds();                                                                         \
            for (it = 0; it < iters; it++)                                                                     \
                fd_##P##gemm_indirect(M, N, T, Kc, a_rows, packed_aligned, bias, c_rows, 0);                   \
            if (now_seconds() - t0 > 0.02) break;                                                              \
            iters *= 2;                                                                                        \
        }                                                                                                      \
        for (r = 0; r < reps; r++) {                                                                           \
            double t0 = now_seconds(), dt;                                                                     \
            for (it = 0; it < iters; it++)                                                                     \
                fd_##P##gemm_indirect(M, N, T, Kc, a_rows, packed_aligned, bias, c_rows, 0);                   \
            dt = (now_seconds() - t0) / iters;                                                                 \
            if (dt < best) best = dt;                                                                          \
        }                                                                                                      \
        free(image); free(b); free(packed); free(out); free(bias); free(a_rows); free(c_rows);                 \
        return 2.0 * (double)M * (double)N * (double)K / best * 1e-9;                                          \
    }

DEFINE_BENCH(float, s)
DEFINE_BENCH(double, d)

static void run_bench(const char *which, int reps, const bench_shape *custom) {
    const bench_shape *list = custom ? custom : shapes;
    const size_t nshapes = custom ? 1 : sizeof shapes / sizeof shapes[0];
    size_t s;
    int isa;
    printf("GFLOP/s, 1 thread, best of %d (M N T Kc)\n%-9s %-6s", reps, "isa", "dtype");
    for (s = 0; s < nshapes; s++) printf(" %7s", list[s].name);
    printf("\n");
    for (isa = FD_ISA_PORTABLE; isa < FD_ISA_COUNT; isa++) {
        int dtype;
        if (strcmp(which, "all") != 0 && strcmp(which, fd_gemm_isa_name(isa)) != 0) continue;
        if (fd_gemm_set_isa(isa) != 0) continue;
        for (dtype = 0; dtype < 2; dtype++) {
            printf("%-9s %-6s", fd_gemm_isa_name(isa), dtype ? "f64" : "f32");
            for (s = 0; s < nshapes; s++) {
                printf(" %7.1f", dtype ? bench_d(&list[s], reps) : bench_s(&list[s], reps));
                fflush(stdout);
            }
            printf("\n");
        }
    }
}

/* The package's own detection (runtime/cpu_features.c) against the compiler's (libgcc's __cpu_model,
 * which checks the same cpuid bits and XCR0 state), feature by feature: the kernels' run-time checks
 * moved from one to the other and must not have changed. GCC on x86 only (mingw included); Apple's
 * toolchain has no __cpu_model, and clang's lacks some of these names. */
static void check_cpu_features(void) {
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
#define CHECK_FEATURE(f)                                                                               \
    if (!!fd_cpu_supports_all(FD_CPU_##f) != !!__builtin_cpu_supports(#f)) {                           \
        fprintf(stderr, "FAIL cpu feature %s: own detection %d, __builtin_cpu_supports %d\n", #f,       \
                fd_cpu_supports_all(FD_CPU_##f), !!__builtin_cpu_supports(#f));                        \
        failures++;                                                                                    \
    }
    FD_CPU_FEATURE_LIST(CHECK_FEATURE)
#undef CHECK_FEATURE
    printf("cpu features: own detection agrees with __builtin_cpu_supports on all %d\n", FD_CPU_FEATURE_COUNT);
#endif
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "full";
    printf("default isa: %s\n", fd_gemm_isa_name(fd_gemm_get_isa()));
    if (strcmp(mode, "bench") == 0) {
        bench_shape custom = {"custom", 0, 0, 0, 0};
        if (argc > 7) {
            custom.M = (size_t)atol(argv[4]);
            custom.N = (size_t)atol(argv[5]);
            custom.T = (size_t)atol(argv[6]);
            custom.Kc = (size_t)atol(argv[7]);
        }
        run_bench(argc > 2 ? argv[2] : "all", argc > 3 ? atoi(argv[3]) : 5, argc > 7 ? &custom : NULL);
        return 0;
    }
    check_cpu_features();
    for (int isa = 0; isa < FD_ISA_COUNT; isa++)
        if (fd_gemm_isa_supported(isa) && !fd_gemm_isa_compiled(isa)) {
            fprintf(stderr, "FAIL isa %s supported but not compiled in\n", fd_gemm_isa_name(isa));
            failures++;
        }
    if (fd_gemm_set_isa(99) != -1 || fd_gemm_isa_supported(-1) || fd_gemm_isa_compiled(-1)) {
        fprintf(stderr, "FAIL bad isa accepted\n");
        failures++;
    }
    if (fd_sgemm_packed_size(10, 17) < 170 || fd_dgemm_packed_size(10, 17) < 170) {
        fprintf(stderr, "FAIL packed size too small\n");
        failures++;
    }
    run_sweep(strcmp(mode, "quick") == 0);
    if (failures) {
        printf("%d FAILURES\n", failures);
        return 1;
    }
    printf("all tests passed\n");
    return 0;
}
