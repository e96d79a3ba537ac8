/* The tile transforms' bodies (see winograd_tiles.template.c), included twice per ISA and type:
 * FD_WIN_BODY = fixed with FD_UNROLL unrolling the point loops (the kinds whose sizes and tables are
 * constants), FD_WIN_BODY = any without (run-time sizes: unrolling those nested loops 8 ways each made
 * the file take minutes to compile). */
/* One tile's input transform for the channels [c, c + n). Inside the image (interior != 0) the tile's
 * pixels are read from `origin` (its first pixel's channel c) by stepping x_row and x_pixel; at the
 * border from pix[a*nx + b] (a pixel, or a row of zeros outside the image) at channel c. The outputs go
 * to V + c, v_point apart. Pointers are stepped rather than indexed: a tile has up to 36 points, more
 * addresses than registers. */
FD_WINLINE void FD_ISA_FN(FD_CAT(win_in_, FD_WIN_BODY))(const int ny, const int nx, const double *BTy, const double *BTx, const int interior,
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

/* One tile's output transform for the channels [c, c + n): of its my x mx outputs, rows [skip_rows, rows)
 * and columns [skip_cols, cols) lie in the phase; y is output (skip_rows, skip_cols). guard accumulates
 * out * 0: NaN once any output is not finite. */
FD_WINLINE void FD_ISA_FN(FD_CAT(win_out_, FD_WIN_BODY))(const int ny, const int nx, const int my, const int mx, const double *ATy,
                                   const double *ATx, const FD_REAL *M, ptrdiff_t m_point, FD_REAL *y,
                                   ptrdiff_t y_row, ptrdiff_t y_col, ptrdiff_t skip_rows, ptrdiff_t skip_cols,
                                   ptrdiff_t rows, ptrdiff_t cols, const FD_REAL *bias, ptrdiff_t c, ptrdiff_t n,
                                   WV *guard, int stream) {
    WV m[FD_WINOGRAD_MAX_POINTS][FD_WINOGRAD_MAX_POINTS], b0;
    b0 = bias != NULL ? FD_ISA_FN(wv_load)(bias + c, n) : FD_ISA_FN(wv_zero)();
    const FD_REAL *in = M + c;
    FD_UNROLL for (int p = 0; p < ny; p++)
        FD_UNROLL for (int q = 0; q < nx; q++) {
            m[p][q] = FD_ISA_FN(wv_load)(in, n);
            if (p + 1 < ny || q + 1 < nx) in += m_point;
        }
    FD_UNROLL for (int a = 0; a < my; a++) {
        if (a >= rows) break;
        if (a < skip_rows) continue;
        WV t[FD_WINOGRAD_MAX_POINTS]; /* row a of the output, still nx points along columns */
        FD_UNROLL for (int q = 0; q < nx; q++) {
            WV column[FD_WINOGRAD_MAX_POINTS];
            FD_UNROLL for (int p = 0; p < ny; p++) column[p] = m[p][q];
            WV_COMBINE(t[q], ny, ATy + a * ny, column);
        }
        FD_REAL *row = y + (a - skip_rows) * y_row + c;
        FD_UNROLL for (int b = 0; b < mx; b++) {
            if (b >= cols) break;
            if (b < skip_cols) continue;
            WV out;
            WV_COMBINE(out, nx, ATx + b * nx, t);
            WV_ACC(out, b0);
            FD_ISA_FN(wv_stream)(row + (b - skip_cols) * y_col, out, n, stream);
            WV_ACC(*guard, WV_TIMES(out, (FD_REAL)0));
        }
    }
}

FD_WINLINE void FD_ISA_FN(FD_CAT(win_input_tiles_, FD_WIN_BODY))(const fd_winograd_phase *ph, const fd_winograd_tile *tiles,
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
                FD_ISA_FN(FD_CAT(win_in_, FD_WIN_BODY))(ny, nx, BTy, BTx, 1, origin + c, x_row, ph->x_pixel, NULL, c, V + t * C, v_point, WL);
            if (c < C)
                FD_ISA_FN(FD_CAT(win_in_, FD_WIN_BODY))(ny, nx, BTy, BTx, 1, origin + c, x_row, ph->x_pixel, NULL, c, V + t * C, v_point, C - c);
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
            FD_ISA_FN(FD_CAT(win_in_, FD_WIN_BODY))(ny, nx, BTy, BTx, 0, x, 0, 0, pix, c, V + t * C, v_point, C - c < WL ? C - c : WL);
    }
}

FD_WINLINE int FD_ISA_FN(FD_CAT(win_output_tiles_, FD_WIN_BODY))(const fd_winograd_phase *ph, const fd_winograd_tile *tiles,
                                           ptrdiff_t count, const FD_REAL *M, const int ny, const int nx,
                                           const int my, const int mx, const double *ATy, const double *ATx) {
    const ptrdiff_t cols = ph->cols, m_point = count * cols;
    const FD_REAL *bias = (const FD_REAL *)ph->bias;
    const int stream = ph->stream;
    WV guard = FD_ISA_FN(wv_zero)();
    for (ptrdiff_t t = 0; t < count; t++) {
        /* a tile of shared phases (algorithms/deconv_winograd.template.c) may start before the phase or end
           past it */
        const ptrdiff_t jy = tiles[t].jy, jx = tiles[t].jx, rows = ph->Jy - jy, columns = ph->Jx - jx;
        const ptrdiff_t skip_rows = jy < 0 ? -jy : 0, skip_cols = jx < 0 ? -jx : 0;
        if (rows <= skip_rows || columns <= skip_cols) continue;
        FD_REAL *y = (FD_REAL *)ph->y + tiles[t].n * ph->y_image + (jy + skip_rows) * ph->y_row + (jx + skip_cols) * ph->y_col;
        ptrdiff_t c = 0;
        for (; c + WL <= cols; c += WL)
            FD_ISA_FN(FD_CAT(win_out_, FD_WIN_BODY))(ny, nx, my, mx, ATy, ATx, M + t * cols, m_point, y, ph->y_row,
                               ph->y_col, skip_rows, skip_cols, rows, columns, bias, c, WL, &guard, stream);
        if (c < cols)
            FD_ISA_FN(FD_CAT(win_out_, FD_WIN_BODY))(ny, nx, my, mx, ATy, ATx, M + t * cols, m_point, y, ph->y_row, ph->y_col,
                               skip_rows, skip_cols, rows, columns, bias, c, cols - c, &guard, stream);
    }
    FD_ISA_FN(wv_stream_fence)(stream);
    FD_REAL lanes[sizeof(WV) / sizeof(FD_REAL)];
    memcpy(lanes, &guard, sizeof guard);
    for (ptrdiff_t l = 0; l < WL; l++)
        if (lanes[l] != lanes[l]) return 1;
    return 0;
}

