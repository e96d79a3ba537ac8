/* SIMD indirect GEMM (XNNPACK-style igemm), included once per (ISA, type) by
 * gemm_avx2.c / gemm_avx512.c. The includer defines:
 *   FD_REAL, FD_PREFIX, FD_PANEL, FD_GRANULE   type and packed layout
 *   FD_SIMD_FN(name)     name mangling, e.g. fd_sgemm_indirect_avx512
 *   FD_TARGET            __attribute__((target(...)))
 *   FD_VEC, FD_LANES     vector type and its element count
 *   FD_VZERO() FD_VLOADU(p) FD_VSTOREU(p, v) FD_VBCAST(p) FD_VADD(a, b) FD_VFMA(a, b, c) (= a*b + c)
 *   FD_VLOAD_PART(p, n) FD_VSTORE_PART(p, v, n)   first n < FD_LANES lanes only
 *   FD_WIDE_MR x FD_WIDE_NV     tile (rows x vectors) for full panels
 *   FD_NARROW_MR x FD_NARROW_NV tile for panels narrower than the wide tile
 *   FD_DENSE_WIDE_MR, FD_DENSE_NARROW_MR (optional) rows of the FD_GEMM_DENSE tiles of each width
 *   FD_STRIDED_MR, FD_STRIDED_K_UNROLL (optional, with FD_NARROW_NV = 1) rows and k steps of the strided
 *                        tile: evenly spaced rows on a narrow panel
 *   FD_PAIR_MR (optional) rows of the pair tile: two adjacent full panels at once, 2*FD_WIDE_NV vectors
 * Both tile widths (NV*LANES) must divide the panel widths they are used on. */
#ifndef FD_REAL
#error "FD_REAL must be defined"
#endif

#define FD_TILE_MAX_MR (FD_WIDE_MR > FD_NARROW_MR ? FD_WIDE_MR : FD_NARROW_MR)
#ifdef FD_PAIR_MR
#if FD_PAIR_MR > FD_TILE_MAX_MR || FD_NARROW_NV > FD_WIDE_NV
#error "the pair tile must fit the tile arrays sized for the wide and narrow tiles"
#endif
#define FD_TILE_MAX_NV (2 * FD_WIDE_NV)
#else
#define FD_TILE_MAX_NV (FD_WIDE_NV > FD_NARROW_NV ? FD_WIDE_NV : FD_NARROW_NV)
#endif

/* One MR x (NV*LANES) tile of C: rows [0, mr) of a_rows (T pointers per row, of which the first `taps`
 * are this call's) and c_rows, C columns [n, n + nc). b points at the tile's first column inside its
 * packed panel, at the first tap's row; row k of the panel is b + k*b_stride. A pair tile (NV =
 * 2*FD_WIDE_NV) spans two full panels: its vectors from FD_WIDE_NV on lie b_pair elements further, in
 * the next panel. MR and NV are compile-time constants after inlining, so acc[][] lives in registers. */
/* vector v of a tile's B row: in the tile's panel, or for a pair tile's second half in the next one */
#define FD_B_VECTOR(v) ((v) < FD_WIDE_NV ? (size_t)(v) * FD_LANES : b_pair + (size_t)((v) - FD_WIDE_NV) * FD_LANES)
/* elements of A in a 64-byte cache line */
#define FD_A_LINE (64 / (int)sizeof(FD_REAL))
/* k steps unrolled inside a line of A (the tile's inner loop) */
#define FD_K_UNROLL 8

/* A GEMM of at most this many rows (a convolution of a 2x2 output over a large weight, a deconvolution of a
 * 2x2 input) runs tiles of this many rows instead of the wide/narrow tiles' 6-12, which would compute the
 * missing rows as copies of the last, and streams B (read once by the whole call, from memory when the
 * weight is large) with software prefetches FD_STREAM_AHEAD_BYTES ahead: a row tile this short has
 * too few FMAs per B line to hide the misses the hardware prefetcher leaves. */
#define FD_SHORT_MR 4
#define FD_STREAM_AHEAD_BYTES 1536

/* SKIP (a constant): a_rows entries may be NULL (gemm.h, FD_GEMM_SKIP_NULL). A tap missing from
 * every row of the tile is skipped; one missing from some rows runs for all of them (those rows
 * read another row's A) and the missing rows' accumulators are put back afterwards, so they never
 * see the product. The plain instantiation (SKIP = 0) is unchanged. */
static FD_FORCE_INLINE FD_TARGET void FD_SIMD_FN(tile)(
    const int MR, const int NV, const int SKIP, const int STREAM, size_t mr, size_t nc, size_t T, size_t taps, size_t Kc,
    const FD_REAL *const *a_rows, const FD_REAL *b, size_t b_stride, size_t b_pair, const FD_REAL *bias,
    FD_REAL *const *c_rows, size_t n, int accumulate) {
    FD_VEC acc[FD_TILE_MAX_MR][FD_TILE_MAX_NV];
    FD_VEC saved[FD_TILE_MAX_MR][FD_TILE_MAX_NV]; /* SKIP only */
    FD_REAL *c[FD_TILE_MAX_MR];
    const int full = nc >= (size_t)(NV * FD_LANES);
    int i, v;
    size_t t, k, k0;

    /* Rows past mr repeat row mr-1 so the inner loop keeps its fixed shape. */
FD_UNROLL_BY(32)
    for (i = 0; i < MR; i++) c[i] = c_rows[(size_t)i < mr ? (size_t)i : mr - 1] + n;

    /* Prefetch the tile's C lines now so their misses resolve under the FMAs. For
     * the same reason accumulate adds C at the end instead of loading it here. */
FD_UNROLL_BY(32)
    for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
        for (v = 0; v < NV; v++) FD_PREFETCH_WRITE(c[i] + v * FD_LANES);

FD_UNROLL_BY(4)
    for (v = 0; v < NV; v++) {
        const ptrdiff_t left = (ptrdiff_t)nc - v * FD_LANES;
        FD_VEC init = FD_VZERO();
        if (bias != NULL && !accumulate)
            init = full || left >= FD_LANES ? FD_VLOADU(bias + n + v * FD_LANES)
                   : left > 0              ? FD_VLOAD_PART(bias + n + v * FD_LANES, (int)left)
                                           : FD_VZERO();
FD_UNROLL_BY(32)
        for (i = 0; i < MR; i++) acc[i][v] = init;
    }

    for (t = 0; t < taps; t++) {
        const FD_REAL *a[FD_TILE_MAX_MR];
        const FD_REAL *bk = b + t * Kc * b_stride;
        unsigned missing = 0;
FD_UNROLL_BY(32)
        for (i = 0; i < MR; i++) a[i] = a_rows[((size_t)i < mr ? (size_t)i : mr - 1) * T + t];
        if (SKIP) {
            const FD_REAL *present = NULL;
FD_UNROLL_BY(32)
            for (i = 0; i < MR; i++) {
                if (a[i] == NULL) missing |= 1u << i;
                else present = a[i];
            }
            if (present == NULL) continue;
            if (missing) {
FD_UNROLL_BY(32)
                for (i = 0; i < MR; i++) {
                    if (a[i] == NULL) a[i] = present;
FD_UNROLL_BY(4)
                    for (v = 0; v < NV; v++) saved[i][v] = acc[i][v];
                }
            }
        }
        /* A line of k at a time (FD_A_LINE elements): A rows stream from memory through MR pointers at
           once, more streams than the hardware prefetcher follows, so each row's line two lines ahead is
           asked for once per line: in this tap's Kc elements, then in the next tap's (where Kc is a few
           lines, 128 channels, the first two lines of every tap would otherwise miss), never past the
           block's last tap (memory that this call may never read) nor into a NULL tap; a tap of a few
           channels, Kc = 3, would issue MR prefetches for a few FMAs per row, which cost more than they
           save). Inside a line the k steps are unrolled (FD_K_UNROLL): the loop's own instructions and the
           reloads of spilled row pointers then no longer share every step's issue slots with its FMAs. */
        for (k0 = 0; k0 < Kc; k0 += FD_A_LINE) {
            const size_t k_end = Kc - k0 < FD_A_LINE ? Kc : k0 + FD_A_LINE;
            if (k0 + 2 * FD_A_LINE < Kc) {
FD_UNROLL_BY(32)
                for (i = 0; i < MR; i++) FD_PREFETCH_READ(a[i] + k0 + 2 * FD_A_LINE);
            } else if (!SKIP && t + 1 < taps && k0 + 2 * FD_A_LINE - Kc < Kc) {
                const size_t next = k0 + 2 * FD_A_LINE - Kc;   /* in the next tap's row */
FD_UNROLL_BY(32)
                for (i = 0; i < MR; i++) FD_PREFETCH_READ(a_rows[((size_t)i < mr ? (size_t)i : mr - 1) * T + t + 1] + next);
            }
FD_UNROLL_BY(FD_K_UNROLL)
            for (k = k0; k < k_end; k++) {
                FD_VEC bv[FD_TILE_MAX_NV];
                /* STREAM (a constant): B's line this far ahead, while it is still in this tap's rows */
                if (STREAM && k + FD_STREAM_AHEAD_BYTES / (NV * FD_LANES * sizeof(FD_REAL)) < Kc) {
FD_UNROLL_BY(4)
                    for (v = 0; v < NV; v++)
                        FD_PREFETCH_READ(bk + FD_STREAM_AHEAD_BYTES / (NV * FD_LANES * sizeof(FD_REAL)) * b_stride +
                                         FD_B_VECTOR(v));
                }
FD_UNROLL_BY(4)
                for (v = 0; v < NV; v++) bv[v] = FD_VLOADU(bk + FD_B_VECTOR(v));
                bk += b_stride;
FD_UNROLL_BY(32)
                for (i = 0; i < MR; i++) {
                    const FD_VEC ai = FD_VBCAST(a[i] + k);
FD_UNROLL_BY(4)
                    for (v = 0; v < NV; v++) acc[i][v] = FD_VFMA(ai, bv[v], acc[i][v]);
                }
            }
        }
        if (SKIP && missing) {
FD_UNROLL_BY(32)
            for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
                for (v = 0; v < NV; v++) acc[i][v] = (missing >> i & 1u) ? saved[i][v] : acc[i][v];
        }
    }

    /* Clamped duplicate rows (i >= mr) are computed but never stored. */
FD_UNROLL_BY(32)
    for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
        for (v = 0; v < NV; v++) {
            if ((size_t)i >= mr) break;
            const ptrdiff_t left = (ptrdiff_t)nc - v * FD_LANES;
            if (full || left >= FD_LANES) {
                if (accumulate) acc[i][v] = FD_VADD(acc[i][v], FD_VLOADU(c[i] + v * FD_LANES));
                FD_VSTOREU(c[i] + v * FD_LANES, acc[i][v]);
            } else if (left > 0) {
                if (accumulate) acc[i][v] = FD_VADD(acc[i][v], FD_VLOAD_PART(c[i] + v * FD_LANES, (int)left));
                FD_VSTORE_PART(c[i] + v * FD_LANES, acc[i][v], (int)left);
            }
        }
}

#ifdef FD_DENSE_WIDE_MR
#define FD_DENSE_MAX_MR (FD_DENSE_WIDE_MR > FD_DENSE_NARROW_MR ? FD_DENSE_WIDE_MR : FD_DENSE_NARROW_MR)

/* FD_GEMM_DENSE (gemm.h): a full tile of MR rows whose A rows are a + i*KC (T = 1, Kc = KC, a
 * compile-time constant) and whose C rows are c + i*ldc: every address is a compile-time offset from one
 * base pointer, where the indirect tile loads MR row pointers of each kind and keeps MR of them in
 * registers; no prefetch (the tile reads every line of its rows itself). With so few k steps per tile
 * (32 or 64) the indirect tile's per-tile work is a large share of the time; the Winograd layers' GEMMs
 * gain most. The narrow dense tile's 24 rows of one vector measured faster than 16 or 28. */
static FD_FORCE_INLINE FD_TARGET void FD_SIMD_FN(dense_tile)(
    const int MR, const int NV, const int KC, const FD_REAL *a, const FD_REAL *b, size_t b_stride, FD_REAL *c,
    size_t ldc) {
    FD_VEC acc[FD_DENSE_MAX_MR][FD_TILE_MAX_NV];
    int i, v, k;
FD_UNROLL_BY(32)
    for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
        for (v = 0; v < NV; v++) acc[i][v] = FD_VZERO();
FD_UNROLL_BY(32)
    for (k = 0; k < KC; k++) {
        FD_VEC bv[FD_TILE_MAX_NV];
FD_UNROLL_BY(4)
        for (v = 0; v < NV; v++) bv[v] = FD_VLOADU(b + v * FD_LANES);
        b += b_stride;
FD_UNROLL_BY(32)
        for (i = 0; i < MR; i++) {
            const FD_VEC ai = FD_VBCAST(a + i * KC + k);
FD_UNROLL_BY(4)
            for (v = 0; v < NV; v++) acc[i][v] = FD_VFMA(ai, bv[v], acc[i][v]);
        }
    }
FD_UNROLL_BY(32)
    for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
        for (v = 0; v < NV; v++) FD_VSTOREU(c + i * ldc + v * FD_LANES, acc[i][v]);
}

#define FD_DEFINE_DENSE(name, MR, NV, KC)                                                                         \
    static FD_TARGET void FD_SIMD_FN(name)(const FD_REAL *a, const FD_REAL *b, size_t b_stride, FD_REAL *c,       \
                                           size_t ldc) {                                                         \
        FD_SIMD_FN(dense_tile)(MR, NV, KC, a, b, b_stride, c, ldc);                                              \
    }
FD_DEFINE_DENSE(dense_wide_32, FD_DENSE_WIDE_MR, FD_WIDE_NV, 32)
FD_DEFINE_DENSE(dense_wide_64, FD_DENSE_WIDE_MR, FD_WIDE_NV, 64)
FD_DEFINE_DENSE(dense_narrow_32, FD_DENSE_NARROW_MR, FD_NARROW_NV, 32)
FD_DEFINE_DENSE(dense_narrow_64, FD_DENSE_NARROW_MR, FD_NARROW_NV, 64)
#undef FD_DEFINE_DENSE

/* The whole dense tiles of a panel of `width` columns (all of them valid) at column n0 of C, rows from 0,
 * each row tile across the panel: returns the first row left for the indirect tiles (0 when no dense
 * tile fits Kc and the width). */
static FD_TARGET size_t FD_SIMD_FN(dense_rows)(size_t M, size_t N, size_t Kc, size_t width, const FD_REAL *const *a_rows,
                                               const FD_REAL *panel, FD_REAL *const *c_rows, size_t n0) {
    const size_t wide = FD_WIDE_NV * FD_LANES, narrow = FD_NARROW_NV * FD_LANES;
    void (*tile)(const FD_REAL *, const FD_REAL *, size_t, FD_REAL *, size_t) = NULL;
    size_t mr = 0, step = 0, m0 = 0, j;
    if (width % wide == 0) {
        mr = FD_DENSE_WIDE_MR;
        step = wide;
        tile = Kc == 32 ? FD_SIMD_FN(dense_wide_32) : Kc == 64 ? FD_SIMD_FN(dense_wide_64) : NULL;
    } else if (width % narrow == 0) {
        mr = FD_DENSE_NARROW_MR;
        step = narrow;
        tile = Kc == 32 ? FD_SIMD_FN(dense_narrow_32) : Kc == 64 ? FD_SIMD_FN(dense_narrow_64) : NULL;
    }
    if (tile != NULL)
        for (; m0 + mr <= M; m0 += mr)
            for (j = 0; j < width; j += step) tile(a_rows[m0], panel + j, width, c_rows[m0] + n0 + j, N);
    return m0;
}
#endif

/* Whether a row tile's A pointers (mr rows of T, the first `taps` of each) hold a NULL: it then takes the
 * tile that skips NULL taps (FD_GEMM_SKIP_NULL); checked once per tile and panel, only under that flag. */
static inline FD_TARGET int FD_SIMD_FN(has_null)(const FD_REAL *const *a_rows, size_t mr, size_t T, size_t taps) {
    size_t i, t;
    for (i = 0; i < mr; i++)
        for (t = 0; t < taps; t++)
            if (a_rows[i * T + t] == NULL) return 1;
    return 0;
}

#ifdef FD_STRIDED_MR
#if FD_NARROW_NV != 1
#error "the strided tile covers a narrow panel of one vector"
#endif
/* A full tile of FD_STRIDED_MR rows x one vector whose A rows are evenly spaced (row i's tap t at
 * a_first[t] + i*a_step) and whose C rows are too (c + i*c_step): the rows of one output row of a
 * convolution, at any stride. The indirect narrow tile keeps a pointer per row in a general register,
 * which caps it at 8 rows: 8 accumulators just cover the FMA latency and each B line feeds only 8 FMAs.
 * Here one pointer walks the rows, so the tile holds FD_STRIDED_MR accumulators and the B vectors of
 * FD_STRIDED_K_UNROLL k steps; A is broadcast from memory inside the FMAs. Each C element still sums
 * bias, then taps and k in ascending order: the same bits as the indirect tiles. */
static FD_FORCE_INLINE FD_TARGET void FD_SIMD_FN(strided_tile)(size_t taps, size_t Kc, const FD_REAL *const *a_first,
                                                               ptrdiff_t a_step, const FD_REAL *b, size_t b_stride,
                                                               const FD_REAL *bias, FD_REAL *c, ptrdiff_t c_step,
                                                               int accumulate) {
    const FD_VEC init = bias != NULL && !accumulate ? FD_VLOADU(bias) : FD_VZERO();
    FD_VEC acc[FD_STRIDED_MR];
    int i, u;
    size_t t, k;
FD_UNROLL_BY(32)
    for (i = 0; i < FD_STRIDED_MR; i++) {
        FD_PREFETCH_WRITE(c + i * c_step);
        acc[i] = init;
    }
    for (t = 0; t < taps; t++) {
        const FD_REAL *a0 = a_first[t];
        const FD_REAL *bk = b + t * Kc * b_stride;
        for (k = 0; k + FD_STRIDED_K_UNROLL <= Kc; k += FD_STRIDED_K_UNROLL) {
            FD_VEC bv[FD_STRIDED_K_UNROLL];
            const FD_REAL *p = a0 + k;
            /* each row's line two lines ahead, once per line, continuing into the next tap, as the
               indirect tiles ask */
            if (k % FD_A_LINE == 0) {
                const size_t next = k + 2 * FD_A_LINE - Kc;   /* in the next tap's row, once past this one */
                const FD_REAL *ahead = k + 2 * FD_A_LINE < Kc          ? p + 2 * FD_A_LINE
                                       : t + 1 < taps && next < Kc ? a_first[t + 1] + next
                                                                   : NULL;
                if (ahead != NULL) {
FD_UNROLL_BY(32)
                    for (i = 0; i < FD_STRIDED_MR; i++) FD_PREFETCH_READ(ahead + i * a_step);
                }
            }
FD_UNROLL_BY(8)
            for (u = 0; u < FD_STRIDED_K_UNROLL; u++) bv[u] = FD_VLOADU(bk + u * b_stride);
            bk += FD_STRIDED_K_UNROLL * b_stride;
FD_UNROLL_BY(32)
            for (i = 0; i < FD_STRIDED_MR; i++, p += a_step) {
                FD_KEEP_IN_REGISTER(p);
FD_UNROLL_BY(8)
                for (u = 0; u < FD_STRIDED_K_UNROLL; u++) acc[i] = FD_VFMA(FD_VBCAST(p + u), bv[u], acc[i]);
            }
        }
        for (; k < Kc; k++) {
            const FD_VEC bv = FD_VLOADU(bk);
            const FD_REAL *p = a0 + k;
            bk += b_stride;
FD_UNROLL_BY(32)
            for (i = 0; i < FD_STRIDED_MR; i++, p += a_step) acc[i] = FD_VFMA(FD_VBCAST(p), bv, acc[i]);
        }
    }
FD_UNROLL_BY(32)
    for (i = 0; i < FD_STRIDED_MR; i++) {
        if (accumulate) acc[i] = FD_VADD(acc[i], FD_VLOADU(c + i * c_step));
        FD_VSTOREU(c + i * c_step, acc[i]);
    }
}

/* Whether FD_STRIDED_MR rows (T pointers each, the first `taps` of them this call's, none NULL) are
 * evenly spaced in every tap and in C; if so, sets the steps in elements. Compared as addresses: the
 * rows may lie in different allocations, where subtracting pointers is undefined. */
static inline int FD_SIMD_FN(evenly_spaced)(const FD_REAL *const *a_rows, size_t T, size_t taps,
                                            FD_REAL *const *c_rows, ptrdiff_t *a_step, ptrdiff_t *c_step) {
    const uintptr_t a_bytes = (uintptr_t)a_rows[T] - (uintptr_t)a_rows[0];
    const uintptr_t c_bytes = (uintptr_t)c_rows[1] - (uintptr_t)c_rows[0];
    size_t i, t;
    if (a_bytes % sizeof(FD_REAL) != 0 || c_bytes % sizeof(FD_REAL) != 0) return 0;
    for (t = 0; t < taps; t++)
        for (i = 1; i < FD_STRIDED_MR; i++)
            if ((uintptr_t)a_rows[i * T + t] != (uintptr_t)a_rows[t] + i * a_bytes) return 0;
    for (i = 2; i < FD_STRIDED_MR; i++)
        if ((uintptr_t)c_rows[i] != (uintptr_t)c_rows[0] + i * c_bytes) return 0;
    *a_step = (ptrdiff_t)(intptr_t)a_bytes / (ptrdiff_t)sizeof(FD_REAL);
    *c_step = (ptrdiff_t)(intptr_t)c_bytes / (ptrdiff_t)sizeof(FD_REAL);
    return 1;
}

/* Whether rows [m0, m0 + FD_STRIDED_MR) of a full panel take a strided tile: at least FD_STRIDED_MIN_K products
 * per element, all the rows there, no tap missing, evenly spaced (then sets the steps). The rows of one
 * output row are; a row's end or a border with a missing tap takes the indirect tiles. With a short K
 * (a 1x1 layer or a col2im of few input channels) A streams from memory once, and there the indirect
 * tiles measured faster. */
#define FD_STRIDED_MIN_K 256
static inline int FD_SIMD_FN(strided_rows)(size_t M, size_t m0, size_t T, size_t taps, size_t Kc,
                                           const FD_REAL *const *a_rows, FD_REAL *const *c_rows, int skip,
                                           ptrdiff_t *a_step, ptrdiff_t *c_step) {
    return taps * Kc >= FD_STRIDED_MIN_K && M - m0 >= FD_STRIDED_MR &&
           !(skip && FD_SIMD_FN(has_null)(a_rows + m0 * T, FD_STRIDED_MR, T, taps)) &&
           FD_SIMD_FN(evenly_spaced)(a_rows + m0 * T, T, taps, c_rows + m0, a_step, c_step);
}
#endif

/* The tile kernels: wide/narrow/pair, plain/skipping NULL taps/short and streaming B (FD_SHORT_MR). The
 * plain ones are inlined into rows_by_panel; the skipping ones (border tiles only) are kept out of line.
 * With pair tiles rows_by_panel holds two copies of panel_tiles, after which GCC calls the plain tiles
 * instead of inlining them: there it is forced. */
#ifdef FD_PAIR_MR
#define FD_PLAIN_TILE_INLINE FD_FORCE_INLINE
#else
#define FD_PLAIN_TILE_INLINE
#endif
#define FD_DEFINE_TILE(name, MR, NV, SKIP, STREAM, attributes)                                                   \
    static attributes FD_TARGET void FD_SIMD_FN(name)(size_t mr, size_t nc, size_t T, size_t taps, size_t Kc,   \
                                                      const FD_REAL *const *a_rows, const FD_REAL *b,             \
                                                      size_t b_stride, size_t b_pair, const FD_REAL *bias,        \
                                                      FD_REAL *const *c_rows, size_t n, int accumulate) {         \
        FD_SIMD_FN(tile)(MR, NV, SKIP, STREAM, mr, nc, T, taps, Kc, a_rows, b, b_stride, b_pair, bias, c_rows,  \
                         n, accumulate);                                                                         \
    }
FD_DEFINE_TILE(tile_wide, FD_WIDE_MR, FD_WIDE_NV, 0, 0, FD_PLAIN_TILE_INLINE)
FD_DEFINE_TILE(tile_narrow, FD_NARROW_MR, FD_NARROW_NV, 0, 0, FD_PLAIN_TILE_INLINE)
#ifdef FD_PAIR_MR
FD_DEFINE_TILE(tile_pair, FD_PAIR_MR, 2 * FD_WIDE_NV, 0, 0, FD_PLAIN_TILE_INLINE)
#endif
/* GCC 12 loses track of acc[][] through the save/restore (a false "may be used uninitialized":
 * every acc[i][v] with i < MR, v < NV is set from the bias first; the code is register-only). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
FD_DEFINE_TILE(tile_wide_skip, FD_WIDE_MR, FD_WIDE_NV, 1, 0, FD_NOINLINE)
FD_DEFINE_TILE(tile_narrow_skip, FD_NARROW_MR, FD_NARROW_NV, 1, 0, FD_NOINLINE)
/* short tiles skip NULL taps too (a tap found in no row costs a check of FD_SHORT_MR pointers) */
FD_DEFINE_TILE(tile_wide_short, FD_SHORT_MR, FD_WIDE_NV, 1, 1, FD_NOINLINE)
FD_DEFINE_TILE(tile_narrow_short, FD_SHORT_MR, FD_NARROW_NV, 1, 1, FD_NOINLINE)
#ifdef FD_PAIR_MR
FD_DEFINE_TILE(tile_pair_skip, FD_PAIR_MR, 2 * FD_WIDE_NV, 1, 0, FD_NOINLINE)
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef FD_DEFINE_TILE
#undef FD_PLAIN_TILE_INLINE

/* A narrow last panel (gemm.h): columns [n0, n0 + NC) of C rows [0, mr) as dot products along k with the
 * panel transposed (bt[n*K + k]). A tile of MR rows x NC columns (constants after inlining) holds MR*NC
 * vector accumulators, fed by MR vectors of A and NC of B per step of FD_LANES k (the last step of each
 * tap masked: both operands zero past Kc), then summed across lanes, FD_LANES accumulators at a time
 * (FD_VHSUMS). A tap missing from a row
 * (FD_GEMM_SKIP_NULL) is left out of that row's accumulators alone. */
static FD_FORCE_INLINE FD_TARGET void FD_SIMD_FN(dot_tile)(
    const int MR, const int NC, size_t mr, size_t T, size_t Kc, const FD_REAL *const *a_rows, const FD_REAL *bt,
    const FD_REAL *bias, FD_REAL *const *c_rows, size_t n0, int accumulate) {
    FD_VEC acc[FD_DOT_ACC][FD_GEMM_DOT_MAX_N];
    const size_t K = T * Kc, full = Kc / FD_LANES * FD_LANES;
    int i, n;
    size_t t, k;
FD_UNROLL_BY(16)
    for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
        for (n = 0; n < NC; n++) acc[i][n] = FD_VZERO();
    for (t = 0; t < T; t++) {
        const FD_REAL *a[FD_DOT_ACC];
        int complete = 1;
FD_UNROLL_BY(16)
        for (i = 0; i < MR; i++) {
            a[i] = a_rows[((size_t)i < mr ? (size_t)i : mr - 1) * T + t];
            complete &= a[i] != NULL;
        }
        if (complete) {
            for (k = 0; k < Kc; k += FD_LANES) {
                FD_VEC x[FD_DOT_ACC], w[FD_GEMM_DOT_MAX_N];
                const int part = (int)(Kc - k);
                if (k < full) {
FD_UNROLL_BY(16)
                    for (i = 0; i < MR; i++) x[i] = FD_VLOADU(a[i] + k);
FD_UNROLL_BY(4)
                    for (n = 0; n < NC; n++) w[n] = FD_VLOADU(bt + (size_t)n * K + t * Kc + k);
                } else {
FD_UNROLL_BY(16)
                    for (i = 0; i < MR; i++) x[i] = FD_VLOAD_PART(a[i] + k, part);
FD_UNROLL_BY(4)
                    for (n = 0; n < NC; n++) w[n] = FD_VLOAD_PART(bt + (size_t)n * K + t * Kc + k, part);
                }
FD_UNROLL_BY(16)
                for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
                    for (n = 0; n < NC; n++) acc[i][n] = FD_VFMA(x[i], w[n], acc[i][n]);
            }
        } else {   /* some rows lack this tap: row by row (rows and columns unrolled, as everywhere here, so
                      that acc[][] has constant indices and stays in registers in the loop above too) */
FD_UNROLL_BY(16)
            for (i = 0; i < MR; i++) {
                if (a[i] == NULL) continue;
                for (k = 0; k < Kc; k += FD_LANES) {
                    const int part = (int)(Kc - k);
                    const FD_VEC x = k < full ? FD_VLOADU(a[i] + k) : FD_VLOAD_PART(a[i] + k, part);
FD_UNROLL_BY(4)
                    for (n = 0; n < NC; n++) {
                        const FD_REAL *b = bt + (size_t)n * K + t * Kc + k;
                        acc[i][n] = FD_VFMA(x, k < full ? FD_VLOADU(b) : FD_VLOAD_PART(b, part), acc[i][n]);
                    }
                }
            }
        }
    }
    FD_REAL sums[FD_DOT_ACC + FD_LANES];   /* acc[i][n]'s lanes summed, at [i*NC + n] */
    {   /* FD_LANES accumulators at a time (the rest of the last group zero) */
        FD_VEC flat[FD_DOT_ACC + FD_LANES];
        const int count = MR * NC, padded = (MR * NC + FD_LANES - 1) / FD_LANES * FD_LANES;
FD_UNROLL_BY(16)
        for (i = 0; i < MR; i++)
FD_UNROLL_BY(4)
            for (n = 0; n < NC; n++) flat[i * NC + n] = acc[i][n];
        for (i = count; i < padded; i++) flat[i] = FD_VZERO();
        for (i = 0; i < padded; i += FD_LANES) FD_VHSUMS(flat + i, sums + i);
    }
FD_UNROLL_BY(16)
    for (i = 0; i < MR; i++) {
        if ((size_t)i >= mr) break;
FD_UNROLL_BY(4)
        for (n = 0; n < NC; n++) {
            FD_REAL *c = c_rows[i] + n0 + n;
            *c = (accumulate ? *c : bias ? bias[n0 + n] : (FD_REAL)0) + sums[i * NC + n];
        }
    }
}

/* One instantiation per column count, each with as many rows as FD_DOT_ACC accumulators allow. */
#define FD_DOT_ROWS(nc) (FD_DOT_ACC / (nc) < 8 ? FD_DOT_ACC / (nc) : 8)
#define FD_DEFINE_DOT(nc)                                                                                        \
    static FD_TARGET void FD_SIMD_FN(dot_##nc)(size_t M, size_t T, size_t Kc, const FD_REAL *const *a_rows,      \
                                               const FD_REAL *bt, const FD_REAL *bias, FD_REAL *const *c_rows,    \
                                               size_t n0, int accumulate) {                                       \
        size_t m0;                                                                                                \
        for (m0 = 0; m0 < M; m0 += FD_DOT_ROWS(nc))                                                               \
            FD_SIMD_FN(dot_tile)(FD_DOT_ROWS(nc), nc, M - m0 < FD_DOT_ROWS(nc) ? M - m0 : FD_DOT_ROWS(nc), T, Kc, \
                                 a_rows + m0 * T, bt, bias, c_rows + m0, n0, accumulate);                         \
    }
FD_DEFINE_DOT(1)
FD_DEFINE_DOT(2)
FD_DEFINE_DOT(3)
FD_DEFINE_DOT(4)
#undef FD_DEFINE_DOT
#undef FD_DOT_ROWS

/* The row tiles of one panel (of `width` columns, `valid` of them C's) from row `first`, over the taps
 * [0, taps) of a_rows (T pointers per row) against the panel's rows from b on. */
static FD_FORCE_INLINE FD_TARGET void FD_SIMD_FN(panel_tiles)(size_t M, size_t first, size_t width, size_t valid,
                                                              size_t T, size_t taps, size_t Kc,
                                                              const FD_REAL *const *a_rows, const FD_REAL *b,
                                                              const FD_REAL *bias, FD_REAL *const *c_rows, size_t n0,
                                                              int accumulate, int skip) {
    const size_t wide = FD_WIDE_NV * FD_LANES, narrow = FD_NARROW_NV * FD_LANES;
    size_t m0, j;
    if (width >= wide) {
        for (m0 = first; m0 < M; m0 += FD_WIDE_MR) {
            const size_t mr = M - m0 < FD_WIDE_MR ? M - m0 : FD_WIDE_MR;
            const int sparse = skip && FD_SIMD_FN(has_null)(a_rows + m0 * T, mr, T, taps);
            for (j = 0; j < valid; j += wide) {
                if (M <= FD_SHORT_MR)
                    FD_SIMD_FN(tile_wide_short)(mr, valid - j, T, taps, Kc, a_rows + m0 * T, b + j, width, 0, bias,
                                                c_rows + m0, n0 + j, accumulate);
                else if (sparse)
                    FD_SIMD_FN(tile_wide_skip)(mr, valid - j, T, taps, Kc, a_rows + m0 * T, b + j, width, 0, bias,
                                               c_rows + m0, n0 + j, accumulate);
                else
                    FD_SIMD_FN(tile_wide)(mr, valid - j, T, taps, Kc, a_rows + m0 * T, b + j, width, 0, bias,
                                          c_rows + m0, n0 + j, accumulate);
            }
        }
    } else {
        for (m0 = first; m0 < M; m0 += FD_NARROW_MR) {
            const size_t mr = M - m0 < FD_NARROW_MR ? M - m0 : FD_NARROW_MR;
#ifdef FD_STRIDED_MR
            ptrdiff_t a_step, c_step;
            if (valid == width &&
                FD_SIMD_FN(strided_rows)(M, m0, T, taps, Kc, a_rows, c_rows, skip, &a_step, &c_step)) {
                for (j = 0; j < valid; j += narrow)
                    FD_SIMD_FN(strided_tile)(taps, Kc, a_rows + m0 * T, a_step, b + j, width,
                                             bias != NULL ? bias + n0 + j : NULL, c_rows[m0] + n0 + j, c_step,
                                             accumulate);
                m0 += FD_STRIDED_MR - FD_NARROW_MR;
                continue;
            }
#endif
            const int sparse = skip && FD_SIMD_FN(has_null)(a_rows + m0 * T, mr, T, taps);
            for (j = 0; j < valid; j += narrow) {
                if (M <= FD_SHORT_MR)
                    FD_SIMD_FN(tile_narrow_short)(mr, valid - j, T, taps, Kc, a_rows + m0 * T, b + j, width, 0, bias,
                                                  c_rows + m0, n0 + j, accumulate);
                else if (sparse)
                    FD_SIMD_FN(tile_narrow_skip)(mr, valid - j, T, taps, Kc, a_rows + m0 * T, b + j, width, 0, bias,
                                                 c_rows + m0, n0 + j, accumulate);
                else
                    FD_SIMD_FN(tile_narrow)(mr, valid - j, T, taps, Kc, a_rows + m0 * T, b + j, width, 0, bias,
                                            c_rows + m0, n0 + j, accumulate);
            }
        }
    }
}

#ifdef FD_PAIR_MR
/* The row tiles of two adjacent full panels at once (the second b_pair elements after the first):
 * FD_PAIR_MR rows of 2*FD_WIDE_NV vectors. With half the rows of the wide tile it holds
 * half the A row pointers, none spilled, and loads fewer vectors per FMA (two B rows and FD_PAIR_MR
 * broadcasts per 2*FD_WIDE_NV*FD_PAIR_MR FMAs). Each C element sums as in the wide tile: the same bits. */
static FD_FORCE_INLINE FD_TARGET void FD_SIMD_FN(pair_tiles)(size_t M, size_t T, size_t taps, size_t Kc,
                                                             const FD_REAL *const *a_rows, const FD_REAL *b,
                                                             size_t b_pair, const FD_REAL *bias,
                                                             FD_REAL *const *c_rows, size_t n0, int accumulate,
                                                             int skip) {
    size_t m0;
    for (m0 = 0; m0 < M; m0 += FD_PAIR_MR) {
        const size_t mr = M - m0 < FD_PAIR_MR ? M - m0 : FD_PAIR_MR;
        if (skip && FD_SIMD_FN(has_null)(a_rows + m0 * T, mr, T, taps))
            FD_SIMD_FN(tile_pair_skip)(mr, 2 * FD_PANEL, T, taps, Kc, a_rows + m0 * T, b, FD_PANEL, b_pair, bias,
                                       c_rows + m0, n0, accumulate);
        else
            FD_SIMD_FN(tile_pair)(mr, 2 * FD_PANEL, T, taps, Kc, a_rows + m0 * T, b, FD_PANEL, b_pair, bias,
                                  c_rows + m0, n0, accumulate);
    }
}
#endif

/* All tiles of C rows [0, M) (pointer arrays already offset), panel by panel: a B panel is reused from
 * L1/L2 by every row tile before moving on; a panel too long for L2 by blocks of its taps
 * (fd_gemm_tap_block), each block by every row tile before the next, whose tiles add to C. */
static FD_TARGET void FD_SIMD_FN(rows_by_panel)(size_t M, size_t N, size_t T, size_t Kc,
                                                const FD_REAL *const *a_rows, const FD_REAL *packed_b,
                                                const FD_REAL *bias, FD_REAL *const *c_rows, int flags,
                                                size_t panel_budget) {
    const size_t K = T * Kc;
    const int accumulate = (flags & FD_GEMM_ACCUMULATE) != 0, skip = (flags & FD_GEMM_SKIP_NULL) != 0;
    const int dense = (flags & FD_GEMM_DENSE) != 0 && T == 1 && !accumulate && bias == NULL;
    size_t n0, t0;
    for (n0 = 0; n0 < N; n0 += FD_PANEL) {
        const size_t width = fd_gemm_panel_width(N, n0, FD_PANEL, FD_GRANULE);
        const size_t valid = N - n0 < width ? N - n0 : width;
        const FD_REAL *panel = packed_b + K * n0;
        if (fd_gemm_panel_is_dot(N, n0, FD_PANEL)) {
            typedef void (*dot_fn)(size_t, size_t, size_t, const FD_REAL *const *, const FD_REAL *, const FD_REAL *,
                                   FD_REAL *const *, size_t, int);
            static const dot_fn dots[FD_GEMM_DOT_MAX_N] = {FD_SIMD_FN(dot_1), FD_SIMD_FN(dot_2), FD_SIMD_FN(dot_3),
                                                           FD_SIMD_FN(dot_4)};
            dots[valid - 1](M, T, Kc, a_rows, panel, bias, c_rows, n0, accumulate);
            continue;
        }
#ifdef FD_DENSE_WIDE_MR
        const size_t first = dense && valid == width ? FD_SIMD_FN(dense_rows)(M, N, Kc, width, a_rows, panel, c_rows, n0) : 0;
#else
        const size_t first = 0;
        (void)dense;
#endif
        const size_t block = fd_gemm_tap_block(T, Kc, width * sizeof(FD_REAL), panel_budget);
#ifdef FD_PAIR_MR
        /* this panel and the next, both full, as one (cut into the same tap blocks as one panel, so
           that every split of the columns between threads sums alike). The first FD_WIDE_MR rows take
           the wide tiles, a panel at a time: B's first pass comes from L3 or memory, which deliver
           the wide tile's bytes per FMA but not the pair tile's twice as many (Winograd GEMMs of 24-60
           tiles, each point's B read once, ran 2-11 % slower with pair tiles from the first row);
           the other rows take pair tiles over B from L2. */
        if (first == 0 && M > FD_SHORT_MR && N - n0 >= 2 * FD_PANEL) {
            const size_t lead = M < FD_WIDE_MR ? M : FD_WIDE_MR;
            for (t0 = 0; t0 < T; t0 += block) {
                const size_t taps = T - t0 < block ? T - t0 : block, second = K * FD_PANEL;
                const FD_REAL *b = panel + t0 * Kc * FD_PANEL, *block_bias = t0 == 0 ? bias : NULL;
                const int add = accumulate || t0 > 0;
                size_t j;
                for (j = 0; j < 2; j++)
                    FD_SIMD_FN(panel_tiles)(lead, 0, FD_PANEL, FD_PANEL, T, taps, Kc, a_rows + t0, b + j * second,
                                            block_bias, c_rows, n0 + j * FD_PANEL, add, skip);
                FD_SIMD_FN(pair_tiles)(M - lead, T, taps, Kc, a_rows + lead * T + t0, b, second, block_bias,
                                       c_rows + lead, n0, add, skip);
            }
            n0 += FD_PANEL;
            continue;
        }
#endif
        for (t0 = 0; t0 < T; t0 += block)
            FD_SIMD_FN(panel_tiles)(M, first, width, valid, T, T - t0 < block ? T - t0 : block, Kc, a_rows + t0,
                                    panel + t0 * Kc * width, t0 == 0 ? bias : NULL, c_rows, n0, accumulate || t0 > 0,
                                    skip);
    }
}


FD_TARGET void FD_SIMD_FN(gemm_indirect)(size_t M, size_t N, size_t T, size_t Kc, const FD_REAL *const *a_rows,
                                         const FD_REAL *packed_b, const FD_REAL *bias, FD_REAL *const *c_rows,
                                         int flags) {
    const size_t chunk = fd_gemm_row_chunk(M, N, T * Kc, sizeof(FD_REAL), FD_WIDE_MR * FD_NARROW_MR);
    const size_t panel_budget = fd_gemm_panel_budget();
    size_t m0;
    for (m0 = 0; m0 < M; m0 += chunk)
        FD_SIMD_FN(rows_by_panel)(M - m0 < chunk ? M - m0 : chunk, N, T, Kc, a_rows + m0 * T, packed_b, bias,
                                  c_rows + m0, flags, panel_budget);
}

#undef FD_A_LINE
#undef FD_K_UNROLL
#undef FD_SHORT_MR
#undef FD_STREAM_AHEAD_BYTES
#undef FD_TILE_MAX_MR
#undef FD_TILE_MAX_NV

/* The template's parameters end with it, ready for the next instantiation. */
#undef FD_REAL
#undef FD_PREFIX
#undef FD_PANEL
#undef FD_GRANULE
#undef FD_VEC
#undef FD_LANES
#undef FD_VZERO
#undef FD_VLOADU
#undef FD_VSTOREU
#undef FD_VBCAST
#undef FD_VFMA
#undef FD_VADD
#undef FD_VLOAD_PART
#undef FD_VSTORE_PART
#undef FD_WIDE_MR
#undef FD_WIDE_NV
#undef FD_DENSE_WIDE_MR
#undef FD_DENSE_NARROW_MR
#undef FD_STRIDED_MR
#undef FD_STRIDED_K_UNROLL
#undef FD_STRIDED_MIN_K
#undef FD_PAIR_MR
#undef FD_B_VECTOR
#undef FD_DENSE_MAX_MR
#undef FD_NARROW_MR
#undef FD_NARROW_NV
#undef FD_VHSUMS
#undef FD_DOT_ACC
