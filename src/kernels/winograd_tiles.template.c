/* The Winograd tile transforms (see winograd_tiles.h), instantiated per ISA (FD_ISA, FD_TARGET,
 * FD_WVEC_BYTES) and per element type (FD_REAL, FD_PREFIX) by winograd_tiles.c (portable) and
 * winograd_tiles_<isa>.c, after winograd_tiles_internal.h.
 *
 * Channels are processed one vector at a time (WV: a GCC/clang vector of FD_WVEC_BYTES: one zmm, one ymm
 * or one xmm register; on MSVC the ISA's intrinsic vector, or a scalar in the portable clone:
 * winograd_tiles_internal.h); a tile's ny*nx points of one channel vector stay in registers through both
 * passes. The transform matrices are static tables: for the tiles the algorithm uses, the always-inline
 * bodies are instantiated with the table itself, so the compiler unrolls the loops, drops the zero
 * coefficients and turns the +-1 ones into additions. Other tiles run the same code with the coefficients
 * read at run time. */

#define WV FD_ISA_FN(wvec)
#define WL ((ptrdiff_t)(sizeof(WV) / sizeof(FD_REAL)))
/* For a scalar c: WV_SCALED(c, v) = c*v and WV_TIMES(v, c) = v*c; WV_ACC(acc, x): acc += x, and
 * WV_ACC_SCALED(acc, c, v): acc += c*v. With vector extensions (and scalars) these are the operators
 * themselves, in the very statements the transforms were written with (clang compiles `acc = acc + x` to
 * different code than `acc += x`). */
#if FD_WINOGRAD_VECTORS
typedef FD_REAL WV __attribute__((vector_size(FD_WVEC_BYTES)));
#elif defined(FD_WV_TYPE_s)
typedef FD_CAT(FD_WV_TYPE_, FD_PREFIX) WV;
#else
typedef FD_REAL WV;
#endif
#if FD_WINOGRAD_VECTORS || !defined(FD_WV_TYPE_s)
#define WV_SCALED(c, v) ((c) * (v))
#define WV_TIMES(v, c) ((v) * (c))
#define WV_ACC(acc, x) (acc) += (x)
#define WV_ACC_SCALED(acc, c, v) (acc) += (c) * (v)
#else
/* (the coefficients +-1, constants once the tile loops are unrolled, as an addition or a subtraction and
 * no multiply: with vector operators the compiler does that itself) */
#define WV_SET1(c) FD_CAT(FD_WV_SET1_, FD_PREFIX)(c)
#define WV_SCALED(c, v) ((c) == 1 ? (v) : FD_CAT(FD_WV_MUL_, FD_PREFIX)(WV_SET1(c), (v)))
#define WV_TIMES(v, c) FD_CAT(FD_WV_MUL_, FD_PREFIX)((v), WV_SET1(c))
#define WV_ACC(acc, x) (acc) = FD_CAT(FD_WV_ADD_, FD_PREFIX)((acc), (x))
#define WV_ACC_SCALED(acc, c, v)                                                        \
    (acc) = (c) == 1    ? FD_CAT(FD_WV_ADD_, FD_PREFIX)((acc), (v))                    \
            : (c) == -1 ? FD_CAT(FD_WV_SUB_, FD_PREFIX)((acc), (v))                    \
                        : FD_CAT(FD_WV_FMA_, FD_PREFIX)(WV_SET1(c), (v), (acc))
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

/* An output vector to p: with `stream` (ph->stream, winograd_tiles.h) on the AVX-512 path, a whole vector
 * that starts on a cache line by a non-temporal store (one full line, not read first); anything else
 * wv_store. A function that streams ends with wv_stream_fence. */
FD_WINLINE void FD_ISA_FN(wv_stream)(FD_REAL *p, WV v, ptrdiff_t n, int stream) {
#if FD_WVEC_BYTES == 64
    if (stream && n >= WL && (uintptr_t)p % sizeof(WV) == 0) {
#if FD_WINOGRAD_VECTORS
        if (sizeof(FD_REAL) == sizeof(float))
            _mm512_stream_ps((float *)(void *)p, (__m512)v);
        else
            _mm512_stream_pd((double *)(void *)p, (__m512d)v);
#else
        FD_CAT(FD_WV_STREAM_, FD_PREFIX)(p, v);
#endif
        return;
    }
#else
    (void)stream;
#endif
    FD_ISA_FN(wv_store)(p, v, n);
}

/* Orders this thread's non-temporal stores before its later stores (and so before the thread pool's
 * "task done"): they are weakly ordered. */
FD_WINLINE void FD_ISA_FN(wv_stream_fence)(int stream) {
#if FD_WVEC_BYTES == 64
    if (stream) _mm_sfence();
#else
    (void)stream;
#endif
}

/* out = sum_j coef[j] * in[j] over the nonzero coefficients (no term: zero). */
#define WV_COMBINE(out, count, coef, in)                                                 \
    do {                                                                                 \
        int first_ = 1;                                                                  \
        FD_UNROLL for (int j_ = 0; j_ < (count); j_++) {                                           \
            const FD_REAL c_ = (FD_REAL)(coef)[j_];                                      \
            if (c_ == 0) continue;                                                       \
            if (first_) (out) = WV_SCALED(c_, (in)[j_]);                                 \
            else WV_ACC_SCALED(out, c_, (in)[j_]);                                       \
            first_ = 0;                                                                  \
        }                                                                                \
        if (first_) (out) = FD_ISA_FN(wv_zero)();                                        \
    } while (0)

#define FD_WIN_BODY fixed
#include "winograd_tile_body.template.c"
#undef FD_WIN_BODY
#pragma push_macro("FD_UNROLL")
#undef FD_UNROLL
#define FD_UNROLL
#define FD_WIN_BODY any
#include "winograd_tile_body.template.c"
#undef FD_WIN_BODY
#pragma pop_macro("FD_UNROLL")

/* The tiles the algorithm uses most (winograd_tiles.h) get a function each, with their tables as
 * constants (one function per kind keeps each small enough for good register allocation); any other
 * pair, such as an image's last tile F(1, r), runs the same code with run-time coefficients. The kinds:
 * k4 s2's F(3, 2) with its last tiles of 2, and F(2, 2); k3 s1's F(2, 3). Each kind adds to the compile
 * time (3 ISAs x 2 types, fully unrolled), so the list stays short. */
#define WIN_CASES(CASE) CASE(3, 2, 3, 2) CASE(3, 2, 2, 2) CASE(2, 2, 3, 2) CASE(2, 2, 2, 2) CASE(2, 3, 2, 3)
#define WIN_IS(f, M, T) ((f)->m == (M) && (f)->r == (T))
#define WIN_TABLE(M, T, X) FD_CAT(FD_CAT(FD_CAT(fd_winograd_f, M), FD_CAT(_, T)), X)
#define WIN_KIND_FN(name, MY, TY, MX, TX) FD_ISA_FN(FD_CAT(name, FD_CAT(FD_CAT(_##MY##_##TY, _), MX##_##TX)))

#define WIN_DEFINE(MY, TY, MX, TX)                                                                                 \
    static FD_TARGET FD_NOINLINE void WIN_KIND_FN(win_in, MY, TY, MX, TX)(                          \
        const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, FD_REAL *V) {                \
        FD_ISA_FN(win_input_tiles_fixed)(ph, tiles, count, V, (MY) + (TY) - 1, (MX) + (TX) - 1,                         \
                                   &WIN_TABLE(MY, TY, _BT)[0][0], &WIN_TABLE(MX, TX, _BT)[0][0]);                  \
    }                                                                                                              \
    static FD_TARGET FD_NOINLINE int WIN_KIND_FN(win_out, MY, TY, MX, TX)(                          \
        const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count, const FD_REAL *M) {          \
        return FD_ISA_FN(win_output_tiles_fixed)(ph, tiles, count, M, (MY) + (TY) - 1, (MX) + (TX) - 1, MY, MX,          \
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

FD_TARGET void FD_ISA_FN(winograd_input)(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count,
                                                FD_REAL *V) {
    WIN_CASES(WIN_IN_CASE)
    FD_ISA_FN(win_input_tiles_any)(ph, tiles, count, V, ph->fy->n, ph->fx->n, ph->fy->BT, ph->fx->BT);
}

FD_TARGET int FD_ISA_FN(winograd_output)(const fd_winograd_phase *ph, const fd_winograd_tile *tiles, ptrdiff_t count,
                                                const FD_REAL *M) {
    WIN_CASES(WIN_OUT_CASE)
    return FD_ISA_FN(win_output_tiles_any)(ph, tiles, count, M, ph->fy->n, ph->fx->n, ph->fy->m, ph->fx->m, ph->fy->AT,
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
#undef WV_SET1
#undef WV_SCALED
#undef WV_TIMES
#undef WV_ACC
#undef WV_ACC_SCALED
#undef WV
#undef WL
