/* The Winograd tile transforms (see winograd_tiles.h), instantiated per ISA (FD_ISA, FD_TARGET,
 * FD_WVEC_BYTES) and per element type (FD_REAL, FD_PREFIX) by winograd_tiles.c.
 *
 * Channels are processed one vector at a time (a GCC/clang vector of FD_WVEC_BYTES: one zmm, one ymm or
 * one xmm register; a scalar elsewhere); a tile's ny*nx points of one channel vector stay in registers
 * through both passes. The transform matrices are static tables: for the tiles the algorithm uses, the
 * always-inline bodies are instantiated with the table itself, so the compiler unrolls the loops,
 * drops the zero coefficients and turns the +-1 ones into additions. Other tiles run the same code
 * with the coefficients read at run time. */

#define WV FD_ISA_FN(wvec)
#define WL ((ptrdiff_t)(sizeof(WV) / sizeof(FD_REAL)))
#if FD_WINOGRAD_VECTORS
typedef FD_REAL WV __attribute__((vector_size(FD_WVEC_BYTES)));
#else
typedef FD_REAL WV;
#endif

FD_WINLINE WV FD_ISA_FN(wv_zero)(void) {
    const WV zero = {0};
    return zero;
}

/* n (<= WL) elements from p; the other lanes zero. */
FD_WINLINE WV FD_ISA_FN(wv_load)(const FD_REAL *p, ptrdiff_t n) {
    WV v;
    if (n >= WL) {
        memcpy(&v, p, sizeof v);
    } else {
        FD_REAL part[sizeof(WV) / sizeof(FD_REAL)] = {0};
        memcpy(part, p, (size_t)n * sizeof(FD_REAL));
        memcpy(&v, part, sizeof v);
    }
    return v;
}

/* The first n (<= WL) lanes of v to p. */
FD_WINLINE void FD_ISA_FN(wv_store)(FD_REAL *p, WV v, ptrdiff_t n) {
    if (n >= WL) {
        memcpy(p, &v, sizeof v);
    } else {
        FD_REAL part[sizeof(WV) / sizeof(FD_REAL)];
        memcpy(part, &v, sizeof v);
        memcpy(p, part, (size_t)n * sizeof(FD_REAL));
    }
}

/* out = sum_j coef[j] * in[j] over the nonzero coefficients (no term: zero). */
#define WV_COMBINE(out, count, coef, in)                                                 \
    do {                                                                                 \
        int first_ = 1;                                                                  \
        FD_UNROLL for (int j_ = 0; j_ < (count); j_++) {                                           \
            const FD_REAL c_ = (FD_REAL)(coef)[j_];                                      \
            if (c_ == 0) continue;                                                       \
            if (first_) (out) = c_ * (in)[j_];                                           \
            else (out) += c_ * (in)[j_];                                                 \
            first_ = 0;                                                                  \
        }                                                                                \
        if (first_) (out) = FD_ISA_FN(wv_zero)();                                        \
    } while (0)

/* One tile's input transform for the channels [c, c + n). Inside the image (interior != 0) the tile's
 * pixels are read from `origin` (its first pixel's channel c) by stepping x_row and x_pixel; at the
 * border from pix[a*nx + b] (a pixel, or a row of zeros outside the image) at channel c. The outputs go
 * to V + c, v_point apart. Pointers are stepped rather than indexed: a tile has up to 36 points, more
 * addresses than registers. */
FD_WINLINE void FD_ISA_FN(win_in)(const int ny, const int nx, const double *BTy, const double *BTx, const int interior,
                                  const FD_REAL *origin, ptrdiff_t x_row, ptrdiff_t x_pixel,
                                  const FD_REAL *const *pix, ptrdiff_t c, FD_REAL *V, ptrdiff_t v_point, ptrdiff_t n) {
    WV t[FD_WINOGRAD_MAX_POINTS][FD_WINOGRAD_MAX_POINTS]; /* [a][q]: rows of d transformed along columns */
    FD_UNROLL for (int a = 0; a < ny; a++) {
        WV d[FD_WINOGRAD_MAX_POINTS];
        const FD_REAL *in = origin + a * x_row;
        FD_UNROLL for (int b = 0; b < nx; b++) {
            d[b] = FD_ISA_FN(wv_load)(interior ? in : pix[a * nx + b] + c, n);
            if (b + 1 < nx) in += x_pixel;   /* never a pointer past the tile (C allows one past the array) */
        }
        FD_UNROLL for (int q = 0; q < nx; q++) WV_COMBINE(t[a][q], nx, BTx + q * nx, d);
    }
    FD_REAL *out = V + c;
    FD_UNROLL for (int p = 0; p < ny; p++) {
        FD_UNROLL for (int q = 0; q < nx; q++) {
            WV column[FD_WINOGRAD_MAX_POINTS], v;
            FD_UNROLL for (int a = 0; a < ny; a++) column[a] = t[a][q];
            WV_COMBINE(v, ny, BTy + p * ny, column);
            FD_ISA_FN(wv_store)(out, v, n);
            if (p + 1 < ny || q + 1 < nx) out += v_point;
        }
    }
}

/* One tile's output transform for the channels [c, c + n): rows x cols of its my x mx outputs lie in
 * the phase. guard accumulates out * 0: NaN once any output is not finite. */
FD_WINLINE void FD_ISA_FN(win_out)(const int ny, const int nx, const int my, const int mx, const double *ATy,
                                   const double *ATx, const FD_REAL *M, ptrdiff_t m_point, FD_REAL *y,
                                   ptrdiff_t y_row, ptrdiff_t y_col, ptrdiff_t rows, ptrdiff_t cols,
                                   const FD_REAL *bias, ptrdiff_t c, ptrdiff_t n, WV *guard) {
    WV m[FD_WINOGRAD_MAX_POINTS][FD_WINOGRAD_MAX_POINTS], b0;
    b0 = bias != NULL ? FD_ISA_FN(wv_load)(bias + c, n) : FD_ISA_FN(wv_zero)();
    const FD_REAL *in = M + c;
    FD_UNROLL for (int p = 0; p < ny; p++)
        FD_UNROLL for (int q = 0; q < nx; q++) {
            m[p][q] = FD_ISA_FN(wv_load)(in, n);
            if (p + 1 < ny || q + 1 < nx) in += m_point;
        }
    FD_UNROLL for (int a = 0; a < my && a < rows; a++) {
        WV t[FD_WINOGRAD_MAX_POINTS]; /* row a of the output, still nx points along columns */
        FD_UNROLL for (int q = 0; q < nx; q++) {
            WV column[FD_WINOGRAD_MAX_POINTS];
            FD_UNROLL for (int p = 0; p < ny; p++) column[p] = m[p][q];
            WV_COMBINE(t[q], ny, ATy + a * ny, column);
        }
        FD_REAL *row = y + a * y_row + c;
        FD_UNROLL for (int b = 0; b < mx && b < cols; b++) {
            WV out;
            WV_COMBINE(out, nx, ATx + b * nx, t);
            out += b0;
            FD_ISA_FN(wv_store)(row, out, n);
            if (b + 1 < mx && b + 1 < cols) row += y_col;
            *guard += out * (FD_REAL)0;
        }
    }
}

FD_WINLINE void FD_ISA_FN(win_input_tiles)(const fd_winograd_phase *ph, const fd_winograd_tile *tiles,
                                           ptrdiff_t count, FD_REAL *V, const int ny, const int nx,
                                           const double *BTy, const double *BTx) {
    const FD_REAL *x = (const FD_REAL *)ph->x, *zeros = (const FD_REAL *)ph->zeros;
    const ptrdiff_t C = ph->channels, v_point = count * C, x_row = ph->W * ph->x_pixel;
    for (ptrdiff_t t = 0; t < count; t++) {
        const ptrdiff_t iy0 = tiles[t].jy + ph->y0, ix0 = tiles[t].jx + ph->x0;
        if (iy0 >= 0 && iy0 + ny <= ph->H && ix0 >= 0 && ix0 + nx <= ph->W) {
            const FD_REAL *origin = x + tiles[t].n * ph->x_image + iy0 * x_row + ix0 * ph->x_pixel;
            ptrdiff_t c = 0;
            for (; c + WL <= C; c += WL)
                FD_ISA_FN(win_in)(ny, nx, BTy, BTx, 1, origin + c, x_row, ph->x_pixel, NULL, c, V + t * C, v_point, WL);
            if (c < C)
                FD_ISA_FN(win_in)(ny, nx, BTy, BTx, 1, origin + c, x_row, ph->x_pixel, NULL, c, V + t * C, v_point, C - c);
            continue;
        }
        const FD_REAL *pix[FD_WINOGRAD_MAX_POINTS * FD_WINOGRAD_MAX_POINTS];
        FD_UNROLL for (int a = 0; a < ny; a++) {
            const ptrdiff_t iy = iy0 + a;
            const int row_inside = iy >= 0 && iy < ph->H;
            const FD_REAL *row = row_inside ? x + tiles[t].n * ph->x_image + iy * x_row : zeros;
            FD_UNROLL for (int b = 0; b < nx; b++) {
                const int inside = row_inside && ix0 + b >= 0 && ix0 + b < ph->W;
                pix[a * nx + b] = inside ? row + (ix0 + b) * ph->x_pixel : zeros;
            }
        }
        for (ptrdiff_t c = 0; c < C; c += WL)
            FD_ISA_FN(win_in)(ny, nx, BTy, BTx, 0, x, 0, 0, pix, c, V + t * C, v_point, C - c < WL ? C - c : WL);
    }
}

FD_WINLINE int FD_ISA_FN(win_output_tiles)(const fd_winograd_phase *ph, const fd_winograd_tile *tiles,
                                           ptrdiff_t count, const FD_REAL *M, const int ny, const int nx,
                                           const int my, const int mx, const double *ATy, const double *ATx) {
    const ptrdiff_t cols = ph->cols, m_point = count * cols;
    const FD_REAL *bias = (const FD_REAL *)ph->bias;
    WV guard = FD_ISA_FN(wv_zero)();
    for (ptrdiff_t t = 0; t < count; t++) {
        FD_REAL *y = (FD_REAL *)ph->y + tiles[t].n * ph->y_image + tiles[t].jy * ph->y_row + tiles[t].jx * ph->y_col;
        const ptrdiff_t rows = ph->Jy - tiles[t].jy, columns = ph->Jx - tiles[t].jx;
        ptrdiff_t c = 0;
        for (; c + WL <= cols; c += WL)
            FD_ISA_FN(win_out)(ny, nx, my, mx, ATy, ATx, M + t * cols, m_point, y, ph->y_row, ph->y_col, rows,
                               columns, bias, c, WL, &guard);
        if (c < cols)
            FD_ISA_FN(win_out)(ny, nx, my, mx, ATy, ATx, M + t * cols, m_point, y, ph->y_row, ph->y_col, rows,
                               columns, bias, c, cols - c, &guard);
    }
    FD_REAL lanes[sizeof(WV) / sizeof(FD_REAL)];
    memcpy(lanes, &guard, sizeof guard);
    for (ptrdiff_t l = 0; l < WL; l++)
        if (lanes[l] != lanes[l]) return 1;
    return 0;
}

/* The tiles the algorithm uses (winograd_tiles.h) get a function each, with their tables as constants
 * (one function per kind keeps each small enough for good register allocation); any other pair runs
 * with run-time coefficients. The k4 s2 tiles (F(3, 2), its last tiles F(2, 2) and F(1, 2)) and the k3 s1
 * tile F(2, 3) with its last tile F(1, 3): the benchmark suite's layers. */
#define WIN_CASES(CASE)                                                                  \
    CASE(3, 2, 3, 2) CASE(3, 2, 2, 2) CASE(3, 2, 1, 2) CASE(2, 2, 3, 2) CASE(2, 2, 2, 2) \
    CASE(2, 2, 1, 2) CASE(1, 2, 3, 2) CASE(1, 2, 2, 2) CASE(1, 2, 1, 2)                  \
    CASE(2, 3, 2, 3) CASE(2, 3, 1, 3) CASE(1, 3, 2, 3) CASE(1, 3, 1, 3)
#define WIN_IS(f, M, T) ((f)->m == (M) && (f)->r == (T))
#define WIN_TABLE(M, T, X) FD_CAT(FD_CAT(FD_CAT(fd_winograd_f, M), FD_CAT(_, T)), X)
#define WIN_KIND_FN(name, MY, TY, MX, TX) FD_ISA_FN(FD_CAT(name, FD_CAT(FD_CAT(_##MY##_##TY, _), MX##_##TX)))

#define WIN_DEFINE(MY, TY, MX, TX)                                                                                 \
    static FD_TARGET __attribute__((noinline)) void WIN_KIND_FN(win_in, MY, TY, MX, TX)(                          \
        const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, FD_REAL *V) {                \
        FD_ISA_FN(win_input_tiles)(ph, tiles, count, V, (MY) + (TY) - 1, (MX) + (TX) - 1,                         \
                                   &WIN_TABLE(MY, TY, _BT)[0][0], &WIN_TABLE(MX, TX, _BT)[0][0]);                  \
    }                                                                                                              \
    static FD_TARGET __attribute__((noinline)) int WIN_KIND_FN(win_out, MY, TY, MX, TX)(                          \
        const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, const FD_REAL *M) {          \
        return FD_ISA_FN(win_output_tiles)(ph, tiles, count, M, (MY) + (TY) - 1, (MX) + (TX) - 1, MY, MX,          \
                                           &WIN_TABLE(MY, TY, _AT)[0][0], &WIN_TABLE(MX, TX, _AT)[0][0]);          \
    }
WIN_CASES(WIN_DEFINE)

#define WIN_IN_CASE(MY, TY, MX, TX)                                                       \
    if (WIN_IS(ph->fy, MY, TY) && WIN_IS(ph->fx, MX, TX)) {                               \
        WIN_KIND_FN(win_in, MY, TY, MX, TX)(ph, tiles, count, V);                         \
        return;                                                                           \
    }
#define WIN_OUT_CASE(MY, TY, MX, TX) \
    if (WIN_IS(ph->fy, MY, TY) && WIN_IS(ph->fx, MX, TX)) return WIN_KIND_FN(win_out, MY, TY, MX, TX)(ph, tiles, count, M);

static FD_TARGET void FD_ISA_FN(winograd_input)(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count,
                                                FD_REAL *V) {
    WIN_CASES(WIN_IN_CASE)
    FD_ISA_FN(win_input_tiles)(ph, tiles, count, V, ph->fy->n, ph->fx->n, ph->fy->BT, ph->fx->BT);
}

static FD_TARGET int FD_ISA_FN(winograd_output)(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count,
                                                const FD_REAL *M) {
    WIN_CASES(WIN_OUT_CASE)
    return FD_ISA_FN(win_output_tiles)(ph, tiles, count, M, ph->fy->n, ph->fx->n, ph->fy->m, ph->fx->m, ph->fy->AT,
                                       ph->fx->AT);
}

#undef WIN_DEFINE
#undef WIN_KIND_FN
#undef WIN_TABLE
#undef WIN_CASES
#undef WIN_IN_CASE
#undef WIN_OUT_CASE
#undef WIN_IS
#undef WV_COMBINE
#undef WV
#undef WL
