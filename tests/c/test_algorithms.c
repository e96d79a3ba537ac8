/* Standalone test of every CPU algorithm (src/algorithms/algorithms.c's table) without Python: each
 * algorithm, for convolutions and transposed convolutions, float32 and float64, on every GEMM ISA path
 * this CPU and build support (fd_gemm_set_isa: the depthwise and Winograd kernels follow that choice),
 * on small layers against a naive reference written here (double accumulation, straight from the
 * definitions in src/runtime/conv_geometry.h).
 *
 * It drives the algorithm protocol (src/algorithms/algorithm.h) the way fastdeconv/_cpu.pyx does:
 * unsupported(), pack() measuring then writing into a 64-byte aligned blob, workspace(), tasks() for a
 * few threads' cut, and run() of every task in turn with one aligned workspace. The output starts as NaN,
 * so an output that no task writes fails. A layer an algorithm does not support is skipped; every
 * algorithm must run some layer, or the test fails.
 *   test_algorithms          every layer below
 *   test_algorithms quick    the first few layers (for valgrind and the sanitizers)
 * Exit status is non-zero on any mismatch. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms/algorithm.h"
#include "kernels/gemm.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double rng_uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* bytes of memory starting on an FD_BLOB_ALIGN boundary: *raw receives what to free */
static void *aligned(size_t bytes, void **raw) {
    char *p = xmalloc(bytes + FD_BLOB_ALIGN);
    *raw = p;
    return p + (FD_BLOB_ALIGN - (uintptr_t)p % FD_BLOB_ALIGN) % FD_BLOB_ALIGN;
}

/* One layer: batch, input size, channels, kernel, stride, dilation, pads (begin = end), groups, and for a
 * transposed convolution its output padding (added to the output size, < max(stride, dilation)). */
typedef struct {
    ptrdiff_t n, h, w, cin, cout, kh, kw, sh, sw, dh, dw, ph, pw, groups, oph, opw;
} layer;

static const layer layers[] = {
    /* n  h   w  cin cout kh kw sh sw dh dw ph pw  g  oph opw */
    {2, 5, 7, 3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0},    /* k3 s1: winograd (both kinds) */
    {1, 4, 5, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},    /* k3 s2, output padding */
    {2, 6, 4, 6, 6, 4, 4, 2, 2, 1, 1, 1, 1, 1, 0, 0},    /* k4 s2: a decoder's upsampling; conv winograd */
    {1, 5, 6, 16, 3, 2, 2, 2, 2, 1, 1, 0, 0, 1, 0, 0},   /* k2 s2, 3 outputs: the GEMM's dot panels */
    {1, 6, 5, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, 0, 0},    /* depthwise */
    {2, 7, 6, 4, 8, 3, 3, 2, 2, 1, 1, 1, 1, 4, 1, 0},    /* depthwise, channel multiplier 2, stride 2 */
    {1, 6, 7, 4, 6, 3, 3, 2, 1, 2, 2, 2, 1, 2, 1, 0},    /* groups 2, dilation 2 */
    {1, 26, 25, 4, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 0, 0},  /* dilation 2, stride 1: conv winograd's 13x12 phases */
    {1, 3, 4, 17, 33, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0},  /* 1x1, 33 outputs: a 32-wide panel and a dot panel */
    {1, 9, 11, 4, 4, 5, 5, 1, 1, 1, 1, 2, 2, 1, 0, 0},   /* k5 s1 */
    {1, 12, 12, 32, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0}, /* wider: full GEMM panels, dense Winograd GEMMs */
    {1, 8, 8, 64, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0},  /* Kc = 64 */
    {1, 7, 9, 5, 7, 2, 3, 1, 2, 1, 1, 0, 1, 1, 0, 1},    /* rectangular kernel and strides */
    {3, 3, 3, 2, 3, 3, 3, 3, 3, 1, 1, 0, 0, 1, 2, 2},    /* k3 s3 */
    {1, 10, 6, 12, 20, 6, 6, 2, 2, 1, 1, 2, 2, 1, 0, 0}, /* k6 s2: conv winograd's 3 taps per phase */
    {1, 5, 5, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16, 0, 0}, /* depthwise over 16 channels: full vectors */
    {1, 4, 37, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6, 0, 0},   /* depthwise, rows of whole 16-pixel tiles, part vectors */
    {1, 5, 40, 3, 9, 5, 5, 2, 2, 1, 1, 2, 2, 3, 1, 1},   /* depthwise, multiplier 3, k5 s2 */
    {1, 3, 21, 5, 5, 3, 3, 1, 1, 2, 2, 2, 2, 5, 0, 0},   /* depthwise, dilation 2: the generic tiles */
    {2, 9, 13, 3, 7, 3, 4, 2, 3, 2, 1, 2, 2, 1, 0, 0},   /* 3 inputs, dilation along H only: im2col's row taps */
    {1, 3, 2, 3, 5, 3, 5, 1, 3, 1, 1, 2, 3, 1, 0, 0},    /* kernel wider than the image: no row tap in place */
    {1, 6, 9, 20, 17, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},  /* 20 inputs: row taps with copied edges of whole taps */
    {1, 12, 14, 40, 5, 11, 11, 1, 1, 1, 1, 5, 5, 1, 0, 0}, /* 40 inputs, k11: no row taps (4840 > 4096 elements) */
    {2, 7, 9, 12, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0},   /* k2 s2 to 1 output, cropped: col2im's exact cover */
    {1, 5, 6, 8, 6, 3, 2, 3, 2, 1, 1, 1, 0, 2, 0, 0},    /* the same over 2 groups, a 3x2 kernel */
    {1, 6, 20, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 8, 0, 0}, /* 8 groups of 4: conv "grouped", permuted vectors */
};

static fd_geometry geometry_of(const layer *l, int transposed) {
    fd_geometry g;
    g.batch = l->n;
    g.in_h = l->h;
    g.in_w = l->w;
    g.in_channels = l->cin;
    g.out_channels = l->cout;
    g.kernel_h = l->kh;
    g.kernel_w = l->kw;
    g.stride_h = l->sh;
    g.stride_w = l->sw;
    g.dilation_h = l->dh;
    g.dilation_w = l->dw;
    g.pad_top = l->ph;
    g.pad_left = l->pw;
    g.groups = l->groups;
    if (transposed) {
        g.out_h = (l->h - 1) * l->sh - 2 * l->ph + l->dh * (l->kh - 1) + 1 + l->oph;
        g.out_w = (l->w - 1) * l->sw - 2 * l->pw + l->dw * (l->kw - 1) + 1 + l->opw;
    } else {
        g.out_h = (l->h + 2 * l->ph - l->dh * (l->kh - 1) - 1) / l->sh + 1;
        g.out_w = (l->w + 2 * l->pw - l->dw * (l->kw - 1) - 1) / l->sw + 1;
    }
    return g;
}

/* The naive reference (conv_geometry.h's definitions), in double; mag receives the sum of the terms'
 * magnitudes per output, for the tolerance. */
static void reference(const fd_geometry *g, int transposed, const double *x, const double *w, const double *bias,
                      double *y, double *mag) {
    const ptrdiff_t Cig = g->in_channels / g->groups, Cog = g->out_channels / g->groups;
    const size_t out = (size_t)(g->batch * g->out_h * g->out_w * g->out_channels);
    ptrdiff_t n, iy, ix, oy, ox, ky, kx, grp, i, o;
    for (size_t e = 0; e < out; e++) {
        const ptrdiff_t c = (ptrdiff_t)(e % (size_t)g->out_channels);
        y[e] = bias ? bias[c] : 0.0;
        mag[e] = bias ? fabs(bias[c]) : 0.0;
    }
    for (n = 0; n < g->batch; n++)
        for (ky = 0; ky < g->kernel_h; ky++)
            for (kx = 0; kx < g->kernel_w; kx++)
                for (grp = 0; grp < g->groups; grp++)
                    for (i = 0; i < Cig; i++)
                        for (o = 0; o < Cog; o++) {
                            if (transposed) { /* every input pixel scatters */
                                const double wv = w[(((grp * Cig + i) * g->kernel_h + ky) * g->kernel_w + kx) * Cog + o];
                                for (iy = 0; iy < g->in_h; iy++) {
                                    oy = iy * g->stride_h - g->pad_top + ky * g->dilation_h;
                                    if (oy < 0 || oy >= g->out_h) continue;
                                    for (ix = 0; ix < g->in_w; ix++) {
                                        ox = ix * g->stride_w - g->pad_left + kx * g->dilation_w;
                                        if (ox < 0 || ox >= g->out_w) continue;
                                        const double p =
                                            x[((n * g->in_h + iy) * g->in_w + ix) * g->in_channels + grp * Cig + i] * wv;
                                        const size_t at = (size_t)(((n * g->out_h + oy) * g->out_w + ox) * g->out_channels +
                                                                   grp * Cog + o);
                                        y[at] += p;
                                        mag[at] += fabs(p);
                                    }
                                }
                            } else { /* every output pixel gathers */
                                const double wv = w[(((grp * Cog + o) * g->kernel_h + ky) * g->kernel_w + kx) * Cig + i];
                                for (oy = 0; oy < g->out_h; oy++) {
                                    iy = oy * g->stride_h - g->pad_top + ky * g->dilation_h;
                                    if (iy < 0 || iy >= g->in_h) continue;
                                    for (ox = 0; ox < g->out_w; ox++) {
                                        ix = ox * g->stride_w - g->pad_left + kx * g->dilation_w;
                                        if (ix < 0 || ix >= g->in_w) continue;
                                        const double p =
                                            x[((n * g->in_h + iy) * g->in_w + ix) * g->in_channels + grp * Cig + i] * wv;
                                        const size_t at = (size_t)(((n * g->out_h + oy) * g->out_w + ox) * g->out_channels +
                                                                   grp * Cog + o);
                                        y[at] += p;
                                        mag[at] += fabs(p);
                                    }
                                }
                            }
                        }
}

static int failures = 0, cases = 0;

/* Run algorithm `alg` on layer l in dtype (FD_FLOAT32/FD_FLOAT64): 1 if it ran, 0 if unsupported. */
static int check(const fd_algorithm *alg, const layer *l, int dtype, int with_bias, const char *isa) {
    const int transposed = alg->transposed;
    const fd_geometry g = geometry_of(l, transposed);
    if (alg->unsupported(&g) != NULL) return 0;
    const size_t isz = fd_itemsize(dtype);
    const size_t nx = (size_t)(g.batch * g.in_h * g.in_w * g.in_channels);
    const size_t ny = (size_t)(g.batch * g.out_h * g.out_w * g.out_channels);
    const size_t nw = (size_t)(g.in_channels * g.kernel_h * g.kernel_w * g.out_channels / g.groups);
    double *x = xmalloc(nx * sizeof(double)), *w = xmalloc(nw * sizeof(double));
    double *b = xmalloc((size_t)g.out_channels * sizeof(double));
    double *ref = xmalloc(ny * sizeof(double)), *mag = xmalloc(ny * sizeof(double));
    char *xt = xmalloc(nx * isz), *wt = xmalloc(nw * isz), *bt = xmalloc((size_t)g.out_channels * isz);
    void *y_raw, *blob_raw, *ws_raw;
    char *yt = aligned(ny * isz, &y_raw);
    size_t e, bytes = 0;
    ptrdiff_t t, ntasks;
    int status = FD_OK, bad = 0;
    /* values exactly representable in float32, so both dtypes see the same layer */
    for (e = 0; e < nx; e++) x[e] = (double)(float)rng_uniform();
    for (e = 0; e < nw; e++) w[e] = (double)(float)rng_uniform();
    for (e = 0; e < (size_t)g.out_channels; e++) b[e] = (double)(float)rng_uniform();
#define FD_CONVERT(dst, src, count)                                                                     \
    for (e = 0; e < (count); e++) {                                                                     \
        if (dtype == FD_FLOAT32) ((float *)(dst))[e] = (float)(src)[e];                                 \
        else ((double *)(dst))[e] = (src)[e];                                                           \
    }
    FD_CONVERT(xt, x, nx)
    FD_CONVERT(wt, w, nw)
    FD_CONVERT(bt, b, (size_t)g.out_channels)
#undef FD_CONVERT
    for (e = 0; e < ny; e++) {
        if (dtype == FD_FLOAT32) ((float *)yt)[e] = NAN;
        else ((double *)yt)[e] = NAN;
    }
    reference(&g, transposed, x, w, with_bias ? b : NULL, ref, mag);

    status = alg->pack[dtype](&g, NULL, NULL, &bytes);
    char *blob = aligned(bytes, &blob_raw);
    if (status == FD_OK) status = alg->pack[dtype](&g, wt, blob, &bytes);
    const fd_workspace ws = alg->workspace(&g, dtype);
    char *workspace = aligned(ws.bytes, &ws_raw);
    ntasks = alg->tasks(&g, 3, NULL);
    fd_task *tasks = xmalloc((size_t)(ntasks > 0 ? ntasks : 1) * sizeof(fd_task));
    alg->tasks(&g, 3, tasks);
    fd_operands op;
    op.geo = &g;
    op.x = xt;
    op.y = yt;
    op.bias = with_bias ? bt : NULL;
    op.packed = blob;
    op.chunk = ws.chunk;
    for (t = 0; t < ntasks && status == FD_OK; t++) status = alg->run[dtype](&op, &tasks[t], workspace);

    const double tol = dtype == FD_FLOAT32 ? 2e-5 : 1e-13;
    if (status != FD_OK) {
        fprintf(stderr, "FAIL %s %s %s status %d\n", isa, alg->name, transposed ? "transposed" : "conv", status);
        bad = 1;
    }
    for (e = 0; e < ny && !bad; e++) {
        const double got = dtype == FD_FLOAT32 ? (double)((float *)yt)[e] : ((double *)yt)[e];
        if (!(fabs(got - ref[e]) <= tol * (mag[e] + 1.0))) { /* NaN (an output never written) fails too */
            fprintf(stderr,
                    "FAIL %s %s %s %s bias=%d layer n%td %tdx%td %td->%td k%tdx%td s%tdx%td d%tdx%td p%tdx%td g%td: "
                    "y[%zu] = %.9g, reference %.9g\n",
                    isa, transposed ? "conv_transpose" : "conv", alg->name, dtype == FD_FLOAT32 ? "f32" : "f64",
                    with_bias, l->n, l->h, l->w, l->cin, l->cout, l->kh, l->kw, l->sh, l->sw, l->dh, l->dw, l->ph,
                    l->pw, l->groups, e, got, ref[e]);
            bad = 1;
        }
    }
    failures += bad;
    cases++;
    free(tasks);
    free(ws_raw);
    free(blob_raw);
    free(y_raw);
    free(x), free(w), free(b), free(ref), free(mag), free(xt), free(wt), free(bt);
    return 1;
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    const size_t nlayers = quick ? 8 : sizeof layers / sizeof layers[0];
    int isa, a, dtype;
    size_t i;
    for (isa = FD_ISA_PORTABLE; isa < FD_ISA_COUNT; isa++) {
        if (!fd_gemm_isa_supported(isa)) {
            printf("  %-8s not supported here, skipped\n", fd_gemm_isa_name(isa));
            continue;
        }
        if (fd_gemm_set_isa(isa) != 0) {
            fprintf(stderr, "FAIL could not select %s\n", fd_gemm_isa_name(isa));
            failures++;
            continue;
        }
        const int failures_before = failures, cases_before = cases;
        printf("  %-8s", fd_gemm_isa_name(isa));
        for (a = 0; a < fd_algorithm_count; a++) {
            const fd_algorithm *alg = fd_algorithms[a];
            int ran = 0;
            for (i = 0; i < nlayers; i++)
                for (dtype = FD_FLOAT32; dtype < FD_NUM_DTYPES; dtype++)
                    ran += check(alg, &layers[i], dtype, (int)(i + (size_t)dtype) % 2 == 0, fd_gemm_isa_name(isa));
            if (ran == 0) {
                fprintf(stderr, "FAIL %s %s (%s) ran on no layer\n", fd_gemm_isa_name(isa), alg->name,
                        alg->transposed ? "transposed" : "conv");
                failures++;
            }
            printf(" %s%s %d,", alg->transposed ? "" : "conv_", alg->name, ran);
        }
        printf(" %d cases %s\n", cases - cases_before,
               failures == failures_before ? "ok" : "FAILED");
    }
    if (failures) {
        printf("%d of %d cases FAILED\n", failures, cases);
        return 1;
    }
    printf("all %d cases passed\n", cases);
    return 0;
}
