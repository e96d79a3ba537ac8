/* Algorithm "winograd": transposed convolution by stride-phase decomposition (as "phase",
 * deconv_phase.template.c) with each phase's stride-1 correlation computed by Winograd's minimal
 * filtering algorithm (an algorithm template, see algorithm.h).
 *
 * With dilation 1, the Ty taps of row phase ry read Ty adjacent input rows: output row
 * oy = ry + jy*sH reads rows jy + y0 + u (u < Ty, y0 = the phase's smallest input offset) with the
 * sub-kernel row g[u] = w[ky_(Ty-1-u)] (the phase's taps in ascending ky, reversed); likewise columns.
 * So each phase is the correlation of kernels/winograd_tiles.h, computed in tiles of my x mx outputs by
 * F(my, Ty) x F(mx, Tx) (the tile per tap count: FD_WINOGRAD_M<T>):
 *   input transform  V[p, q] (Cig-vectors per tile)                     ny*nx points per tile
 *   GEMMs            M[p, q] = V[p, q] @ U[p, q]    one per point: (tiles, Cig) @ (Cig, Cog), B packed once
 *   output transform y = bias + ATy M ATx^T, written once per output (no zero fill, no accumulation),
 *                    with non-temporal stores on Intel CPUs, and elsewhere for outputs of a third of
 *                    the last-level cache or more (AVX-512 path; kernels/winograd_tiles.h)
 * Multiplies per output: ny*nx/(my*mx) * Cig * Cog instead of Ty*Tx * Cig * Cog: for k4 s2 (Ty = Tx = 2)
 * F(2, 2) needs 9/4 against 4 (1.78x fewer), for k3 s1 F(2, 3) needs 16/4 against 9 (2.25x).
 *
 * Exactness. The transforms reassociate the sums, so results differ from the direct sum by rounding
 * (measured bounds: README). Non-finite values are another matter: a transform mixes a tile's inputs
 * (0 * Inf, Inf - Inf), so one Inf would turn its whole tile into NaN where the formula keeps Inf or
 * leaves other pixels finite. So every output is checked as it is written: a task that produced any
 * non-finite value is recomputed by the phase kernel (whose packed weights the blob also holds), and
 * layers with a non-finite weight run the phase kernel directly. NaN and Inf land where the formula puts
 * them; only finite results carry Winograd's rounding.
 *
 * Shared tiles (winograd_shared). Where every phase has the same taps and tile and at least
 * FD_WINOGRAD_SHARED_MIN_OUTPUTS outputs per axis (k4 s2 on images of 24 pixels and more), the phases'
 * tilings are shifted (by at most one output) so that their tiles read the same input windows: one input
 * transform then serves all sH*sW phases, whose GEMMs and output transforms follow.
 *
 * Groups: with shared tiles, every group of a task runs for a chunk's tiles before the next chunk, so
 * that a chunk's outputs are written whole (all channels of its pixels) while close in time. On several
 * threads, groups whose output slices are whole cache lines get tasks of their own (winograd_tasks).
 *
 * Work unit: tile rows of one row phase ry, counted across the batch (row q in [0, N*TJy) is image
 * q / TJy, tile row q % TJy, TJy = ceil(Jy/my)), and the output channels [col_begin, col_end)
 * (col_begin a multiple of FD_GEMM_COLUMN_ALIGN); with shared tiles, rows of shared tiles, every phase,
 * every group (part WINOGRAD_ALL_PHASES) or group g (part WINOGRAD_GROUP(g)).
 * Workspace per thread: a chunk of tiles' V (points*tiles*Cig), M (points*tiles*Cog), the GEMMs' row
 * pointers (2*points*tiles), two tile lists and Cig zeros (the pixels outside the image): about
 * FD_WINOGRAD_CHUNK_BYTES, at most FD_WINOGRAD_MAX_CHUNK_BYTES unless one tile alone is larger; or the
 * phase kernel's, whichever is larger (the phase kernel, run for 1-tap phases and as the fallback, uses
 * the same memory).
 */
#if defined(FD_ALGORITHM_SHARED)

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* deconv_phase.template.c is instantiated before this one (algorithms.c): its rules, its blob (packed
 * into this one's) and its kernel (the fallback) are used here. */
#include "algorithm.h"
#include "kernels/gemm.h"
#include "kernels/winograd_tiles.h"

/* Bytes of V and M per chunk of tiles: their GEMMs' A rows and results stay in L2 between the
 * transforms and the GEMMs. */
#ifndef FD_WINOGRAD_CHUNK_BYTES
#define FD_WINOGRAD_CHUNK_BYTES (256 << 10)
#endif
#define FD_WINOGRAD_MAX_CHUNK_TILES 768
/* ... and never more than this for the minimum tile counts below (wide layers: one tile of F(2, 2) with
 * 4096 channels in and out is 288 KiB), down to one tile, whose V and M are a few of U's rows. */
#define FD_WINOGRAD_MAX_CHUNK_BYTES (8 << 20)

static const char *winograd_unsupported(const fd_geometry *geo) {
    const char *phase = phase_unsupported(geo);
    if (phase != NULL) return phase;
    if (geo->dilation_h != 1 || geo->dilation_w != 1)
        return "it needs dilation 1 (a stride phase's taps must read adjacent input pixels)";
    if (fd_ceil_div(geo->kernel_h, geo->stride_h) > 3 || fd_ceil_div(geo->kernel_w, geo->stride_w) > 3)
        return "its stride phases are limited to 3 taps per side (kernel <= 3*stride)";
    return NULL;
}

/* Taps of phase r along an axis (dilation 1): the k < kernel with k = r + pad (mod stride). */
static ptrdiff_t winograd_taps(ptrdiff_t kernel, ptrdiff_t stride, ptrdiff_t pad, ptrdiff_t r) {
    const ptrdiff_t first = (r + pad % stride) % stride;
    return first < kernel ? fd_ceil_div(kernel - first, stride) : 0;
}

/* The tile whose U the blob holds for an axis of `taps` taps: the largest (fd_winograd_for_taps), but
 * F(2, 2) for two taps in layers with more than 64 input channels per group. Those are GEMM-bound and
 * their U is large: F(3, 2)'s 16 points of Cig x Cog stream from the outer caches where F(2, 2)'s 9 stay
 * closer. NULL without taps. */
static const fd_winograd_1d *winograd_packed_tile(ptrdiff_t taps, ptrdiff_t in_per_group) {
    if (taps <= 0) return NULL;
    return taps == 2 && in_per_group > 64 ? fd_winograd_find(2, 2) : fd_winograd_for_taps(taps);
}

/* The tile along an axis of `taps` taps and `outputs` outputs (the phase's rows or columns): the packed
 * one, or F(2, 2) in place of F(3, 2) (its points are a subset) for fewer than 12 outputs, where more of
 * F(3, 2)'s tiles would be the shorter last ones. */
static const fd_winograd_1d *winograd_tile(ptrdiff_t taps, ptrdiff_t outputs, ptrdiff_t in_per_group) {
    const fd_winograd_1d *packed = winograd_packed_tile(taps, in_per_group);
    return packed != NULL && taps == 2 && outputs < 12 ? fd_winograd_find(2, 2) : packed;
}

/* Outputs per tile side (1 for a phase without taps: it only gets the bias). */
static ptrdiff_t winograd_tile_side(ptrdiff_t taps, ptrdiff_t outputs, ptrdiff_t in_per_group) {
    return taps > 0 ? winograd_tile(taps, outputs, in_per_group)->m : 1;
}

/* The most points per tile side of any phase along an axis. */
static ptrdiff_t winograd_max_points(ptrdiff_t kernel, ptrdiff_t stride, ptrdiff_t in_per_group) {
    ptrdiff_t most = 1;
    for (ptrdiff_t taps = 1; taps <= fd_ceil_div(kernel, stride) && taps <= 3; taps++)
        if (winograd_packed_tile(taps, in_per_group)->n > most) most = winograd_packed_tile(taps, in_per_group)->n;
    return most;
}

/* Shared tiles. When every phase along an axis has the same taps T >= 2 and tile side m, phase r's
 * origin o_r = (r + pad - its last tap) / stride differs from the smallest origin o by d_r in [0, m), and
 * each phase has at least FD_WINOGRAD_SHARED_MIN_OUTPUTS outputs, then one tiling of the input serves
 * every phase: tile u reads input from o + u*m and gives phase r its outputs [u*m - d_r, (u+1)*m - d_r)
 * (those inside the phase). One input transform then feeds the GEMMs of all sH*sW phases (k4 s2: 4),
 * where per-phase tiling transforms each input pixel once per phase. The price: a tile at each edge
 * whose outputs fall partly outside its phase (computed, not written), hence the minimum size. */
#define FD_WINOGRAD_SHARED_MIN_OUTPUTS 24

typedef struct {
    ptrdiff_t taps, m;   /* per phase */
    ptrdiff_t origin;    /* o: tile u reads input from o + u*m */
    ptrdiff_t tiles;     /* per image: max_r ceil((J_r + d_r) / m) */
} winograd_shared_axis;

static ptrdiff_t winograd_phase_origin(ptrdiff_t kernel, ptrdiff_t stride, ptrdiff_t pad, ptrdiff_t r) {
    const ptrdiff_t first = (r + pad % stride) % stride, taps = winograd_taps(kernel, stride, pad, r);
    return (r + pad - (first + (taps - 1) * stride)) / stride;   /* exact: r + pad = last tap (mod stride) */
}

/* The first phase row (counted across the batch) of shared tile row q (likewise counted) of a phase
 * of J rows whose origin is `shift` above the shared one: tile u of an image gives that phase its rows
 * [u*m - shift, (u+1)*m - shift), those inside [0, J). The phase kernel's rows for a task. */
static ptrdiff_t winograd_phase_row(ptrdiff_t q, ptrdiff_t tiles, ptrdiff_t m, ptrdiff_t shift, ptrdiff_t J) {
    const ptrdiff_t j = q % tiles * m - shift;
    return q / tiles * J + (j < 0 ? 0 : j < J ? j : J);
}

/* Calls with fewer input pixels (all images) than this run the phase kernel, whose blob this one
 * holds: on a 1x1 to 7x7 input the tiles are mostly padding and the call is bound by reading the
 * transformed weights (1.78x to 4x the phase weights). Decided per call, by tasks and run alike. */
#define FD_WINOGRAD_MIN_INPUT_PIXELS 64
/* Likewise below this many for a strided layer of several groups: each group's tiles of each phase are
 * transformed on their own, with C_in/g (16-64) channels, so on few tiles the transforms outweigh the
 * multiplies saved (asv_benches/NOTES.md, 2026-12-06: 14x14 inputs ran 1.45x faster as "phase"). With
 * stride 1 (k3 s1, and the bands that conv_winograd runs through this kernel) the two were even. */
#define FD_WINOGRAD_MIN_GROUPED_INPUT_PIXELS 512

static int winograd_direct(const fd_geometry *geo) {
    const ptrdiff_t pixels = geo->batch * geo->in_h * geo->in_w;
    return pixels < FD_WINOGRAD_MIN_INPUT_PIXELS ||
           (geo->groups > 1 && geo->stride_h * geo->stride_w > 1 && pixels < FD_WINOGRAD_MIN_GROUPED_INPUT_PIXELS);
}

/* 1 and *axis when the phases along an axis (out outputs) can share their tiles, else 0. */
static int winograd_share_axis(ptrdiff_t kernel, ptrdiff_t stride, ptrdiff_t pad, ptrdiff_t out, ptrdiff_t in_per_group,
                               winograd_shared_axis *axis) {
    const ptrdiff_t taps = winograd_taps(kernel, stride, pad, 0);
    if (taps < 2 || out < stride) return 0;
    const ptrdiff_t m = winograd_packed_tile(taps, in_per_group)->m;
    ptrdiff_t low = winograd_phase_origin(kernel, stride, pad, 0), high = low;
    for (ptrdiff_t r = 1; r < stride; r++) {
        if (winograd_taps(kernel, stride, pad, r) != taps) return 0;
        const ptrdiff_t o = winograd_phase_origin(kernel, stride, pad, r);
        low = o < low ? o : low;
        high = o > high ? o : high;
    }
    if (high - low >= m) return 0;
    ptrdiff_t tiles = 0;
    for (ptrdiff_t r = 0; r < stride; r++) {
        const ptrdiff_t J = fd_ceil_div(out - r, stride), d = winograd_phase_origin(kernel, stride, pad, r) - low;
        if (J < FD_WINOGRAD_SHARED_MIN_OUTPUTS) return 0;
        if (fd_ceil_div(J + d, m) > tiles) tiles = fd_ceil_div(J + d, m);
    }
    axis->taps = taps;
    axis->m = m;
    axis->origin = low;
    axis->tiles = tiles;
    return 1;
}

/* 1 when all phases share their tiles (both axes, more than one phase), else 0. */
static int winograd_shared(const fd_geometry *geo, winograd_shared_axis *ay, winograd_shared_axis *ax) {
    const ptrdiff_t Cig = geo->in_channels / geo->groups;
    return geo->stride_h * geo->stride_w > 1 && Cig > 0 &&
           winograd_share_axis(geo->kernel_h, geo->stride_h, geo->pad_top, geo->out_h, Cig, ay) &&
           winograd_share_axis(geo->kernel_w, geo->stride_w, geo->pad_left, geo->out_w, Cig, ax);
}

/* Tiles per chunk: V, M and their row pointers take FD_WINOGRAD_CHUNK_BYTES, in multiples of 12 tiles (whole
 * GEMM row tiles where MR is 4, 6 or 12; MR 5, 8 and 24 end a chunk on a partial one); at least 48 when one
 * point's U is over 32 KiB, so that each GEMM reads its B for enough rows, else at least 12 (smaller chunks suit
 * the smaller layers). */
static ptrdiff_t winograd_chunk_tiles(const fd_geometry *geo, int dtype) {
    const ptrdiff_t Cig = geo->in_channels / geo->groups, Cog = geo->out_channels / geo->groups;
    const ptrdiff_t points = winograd_max_points(geo->kernel_h, geo->stride_h, Cig) *
                             winograd_max_points(geo->kernel_w, geo->stride_w, Cig);
    const size_t per_tile = (size_t)points * ((size_t)(Cig + Cog) * fd_itemsize(dtype) + 2 * sizeof(void *));
    const ptrdiff_t least = (size_t)Cig * (size_t)Cog * fd_itemsize(dtype) > (32 << 10) ? 48 : 12;
    ptrdiff_t tiles = (ptrdiff_t)(FD_WINOGRAD_CHUNK_BYTES / per_tile) / 12 * 12;
    if (tiles < least) {
        const ptrdiff_t most = (ptrdiff_t)(FD_WINOGRAD_MAX_CHUNK_BYTES / per_tile);
        tiles = least < most ? least : most > 1 ? most : 1;
    }
    return tiles < FD_WINOGRAD_MAX_CHUNK_TILES ? tiles : FD_WINOGRAD_MAX_CHUNK_TILES;
}

/* The workspace of a chunk: its tile list (and, with shared tiles, a phase's copy), the A and C row
 * pointers of every point, V and M (each from a cache line: winograd_space_at). */
static size_t winograd_chunk_bytes(const fd_geometry *geo, int dtype, ptrdiff_t tiles) {
    const size_t points = (size_t)(winograd_max_points(geo->kernel_h, geo->stride_h, geo->in_channels / geo->groups) *
                                   winograd_max_points(geo->kernel_w, geo->stride_w, geo->in_channels / geo->groups));
    const size_t channels = (size_t)((geo->in_channels + geo->out_channels) / geo->groups);
    return (size_t)tiles * (2 * sizeof(fd_winograd_tile) + points * (2 * sizeof(void *) + channels * fd_itemsize(dtype))) +
           (size_t)(geo->in_channels / geo->groups) * fd_itemsize(dtype) + 2 * FD_BLOB_ALIGN;
}

/* p rounded up to the next FD_BLOB_ALIGN boundary. */
static void *winograd_line_up(void *p) {
    return (char *)p + (fd_round_up((uintptr_t)p, FD_BLOB_ALIGN) - (uintptr_t)p);
}

/* The chunk of fd_operands is the phase kernel's (its fallback); the tile chunk is recomputed in run. */
static fd_workspace winograd_workspace(const fd_geometry *geo, int dtype) {
    fd_workspace ws = phase_workspace(geo, dtype);
    const size_t own = winograd_chunk_bytes(geo, dtype, winograd_chunk_tiles(geo, dtype));
    if (own > ws.bytes) ws.bytes = own;
    return ws;
}

/* Tiles a task should get at least: every task reads the U of all its points (ny*nx times the phase
 * weights of its columns), so one that has few tiles is bound by reading it. One GEMM row tile (12):
 * with 48, small images (16 4x4 images, 192 -> 64) got 2 tasks at any thread count and ran no faster
 * from 2 threads to 16 (asv_benches/NOTES.md, 2026-12-06). A build may override it to measure another
 * value. */
#ifndef FD_WINOGRAD_MIN_TASK_TILES
#define FD_WINOGRAD_MIN_TASK_TILES 12
#endif

/* Tasks of `part` over `rows` tile rows of tiles_per_row tiles each, about `want` of them: row_parts
 * ranges of rows of at least FD_WINOGRAD_MIN_TASK_TILES tiles, as even as whole rows allow, times blocks
 * of output channels when there are fewer such ranges than wanted. Even, not ceil(rows/row_parts) each:
 * grouped at 16 threads (44 rows, 40 ranges) got 22 ranges of 2 rows that way, two rounds of 2 rows
 * where 40 ranges of 1-2 rows take about 3 rows' time. */
static void winograd_cut(ptrdiff_t part, ptrdiff_t rows, ptrdiff_t tiles_per_row, ptrdiff_t want, ptrdiff_t cols,
                         fd_task *tasks, ptrdiff_t *count) {
    if (rows <= 0) return;
    ptrdiff_t row_parts = rows * tiles_per_row / FD_WINOGRAD_MIN_TASK_TILES;
    if (row_parts > want) row_parts = want;
    if (row_parts > rows) row_parts = rows;
    if (row_parts < 1) row_parts = 1;
    ptrdiff_t col_parts = fd_ceil_div(want, row_parts);
    if (col_parts > fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN)) col_parts = fd_ceil_div(cols, FD_GEMM_COLUMN_ALIGN);
    if (col_parts < 1) col_parts = 1;
    const ptrdiff_t per_cols = fd_ceil_div(fd_ceil_div(cols, col_parts), FD_GEMM_COLUMN_ALIGN) * FD_GEMM_COLUMN_ALIGN;
    for (ptrdiff_t i = 0; i < row_parts; i++)   /* row_parts <= rows: every range has a row */
        for (ptrdiff_t c0 = 0; c0 < cols || c0 == 0; c0 += per_cols)
            fd_task_add(tasks, count, part, i * rows / row_parts, (i + 1) * rows / row_parts, c0,
                        c0 + per_cols < cols ? c0 + per_cols : cols);
}

/* Shared tiles: part WINOGRAD_ALL_PHASES (every group), about 4*threads tasks over the shared tile rows
 * (counted across the batch); on several threads, with groups whose output slices are whole cache lines
 * (C_out/g a multiple of 16), part WINOGRAD_GROUP(g) per group g instead, about 4*threads/G tasks each:
 * grouped (4 groups) at 16 threads had 40 tasks of one tile row of 11 tiles and every group, so
 * GEMMs of 11 rows; one group per task gives it 2-3 rows. Otherwise per row phase ry, about
 * 4*threads/sH tasks over its tile rows. */
#define WINOGRAD_ALL_PHASES (-1)
#define WINOGRAD_GROUP(g) (-2 - (g))
static ptrdiff_t winograd_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    const ptrdiff_t sH = geo->stride_h, sW = geo->stride_w, G = geo->groups, cols = geo->out_channels / G;
    const ptrdiff_t Cig = geo->in_channels / G;
    ptrdiff_t count = 0;
    winograd_shared_axis ay, ax;
    if (winograd_direct(geo)) return phase_tasks(geo, threads, tasks);
    if (winograd_shared(geo, &ay, &ax)) {
        const ptrdiff_t want = threads > 1 ? 4 * (ptrdiff_t)threads : 1;
        if (G > 1 && threads > 1 && cols % 16 == 0)
            for (ptrdiff_t g = 0; g < G; g++)
                winograd_cut(WINOGRAD_GROUP(g), geo->batch * ay.tiles, ax.tiles * sH * sW, fd_ceil_div(want, G), cols,
                             tasks, &count);
        else
            winograd_cut(WINOGRAD_ALL_PHASES, geo->batch * ay.tiles, ax.tiles * sH * sW, want, cols, tasks, &count);
        return count;
    }
    for (ptrdiff_t ry = 0; ry < sH && ry < geo->out_h; ry++) {
        const ptrdiff_t Jy = fd_ceil_div(geo->out_h - ry, sH);
        const ptrdiff_t my = winograd_tile_side(winograd_taps(geo->kernel_h, sH, geo->pad_top, ry), Jy, Cig);
        ptrdiff_t tiles_per_row = 0;
        for (ptrdiff_t rx = 0; rx < sW && rx < geo->out_w; rx++) {
            const ptrdiff_t Jx = fd_ceil_div(geo->out_w - rx, sW);
            tiles_per_row += fd_ceil_div(Jx, winograd_tile_side(winograd_taps(geo->kernel_w, sW, geo->pad_left, rx), Jx, Cig));
        }
        winograd_cut(ry, geo->batch * fd_ceil_div(Jy, my), tiles_per_row,
                     threads > 1 ? fd_ceil_div(4 * (ptrdiff_t)threads, sH) : 1, cols, tasks, &count);
    }
    return count;
}

/* Whether the layer's outputs are written with non-temporal stores (kernels/winograd_tiles.h): by the
 * size of the whole output, so that every task of a call makes the same choice. */
static int winograd_streams(const fd_geometry *geo, size_t itemsize) {
    return (size_t)geo->batch * (size_t)geo->out_h * (size_t)geo->out_w * (size_t)geo->out_channels * itemsize >=
           fd_winograd_stream_min_bytes();
}

/* Blob parts: whether every weight is finite, the phase algorithm's own blob (the fallback, and its
 * tap tables), then per (group, row phase, column phase) the packed U of each point, one after another. */
enum { WINOGRAD_WEIGHTS_FINITE, WINOGRAD_PHASE_BLOB, WINOGRAD_MATRICES };

#elif defined(FD_ALGORITHM_DESCRIPTOR)

static const char *winograd_delegate(const fd_geometry *geo) { return winograd_direct(geo) ? "phase" : NULL; }

FD_DEFINE_DELEGATING_ALGORITHM(winograd, "winograd", 1, winograd_delegate)

#else

/* Point (p, q) of group g's sub-kernel for phase (ry, rx): U = sum_{u,v} Gy[p,u] Gx[q,v] g[u,v], with
 * g[u, v] = w[g*Cig + i, ky_(Ty-1-u), kx_(Tx-1-v), :] (a Cig x Cog matrix), summed in double and rounded
 * once; then packed for the GEMM (fd_?gemm_pack_b). */
static int FD_FN(winograd_pack)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes)
{
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, sH = geo->stride_h, sW = geo->stride_w;
    const ptrdiff_t G = geo->groups, Cig = geo->in_channels / G, Cog = geo->out_channels / G;
    const size_t point_size = Cig > 0 && Cog > 0 ? FD_FN(gemm_packed_size)((size_t)Cig, (size_t)Cog) : 0;
    size_t phase_bytes = 0;
    int status = FD_FN(phase_pack)(geo, weight, NULL, &phase_bytes);
    if (status != FD_OK) return status;

    fd_blob b;
    fd_blob_begin(&b, blob, WINOGRAD_MATRICES + (size_t)(G * sH * sW));
    int *finite = (int *)fd_blob_add(&b, WINOGRAD_WEIGHTS_FINITE, sizeof(int));
    void *phase_blob = fd_blob_add(&b, WINOGRAD_PHASE_BLOB, phase_bytes);
    FD_REAL **parts = NULL;
    double *sum = NULL;
    FD_REAL *rounded = NULL;
    if (blob != NULL) {
        parts = (FD_REAL **)malloc((size_t)(G * sH * sW) * sizeof(*parts));
        sum = (double *)malloc((size_t)(Cig * Cog + 1) * sizeof(double));
        rounded = (FD_REAL *)malloc((size_t)(Cig * Cog + 1) * sizeof(FD_REAL));
        if (parts == NULL || sum == NULL || rounded == NULL) {
            free(parts);
            free(sum);
            free(rounded);
            return FD_ERR_WORKSPACE;
        }
    }
    for (ptrdiff_t g = 0; g < G; g++)
        for (ptrdiff_t ry = 0; ry < sH; ry++)
            for (ptrdiff_t rx = 0; rx < sW; rx++) {
                const ptrdiff_t Ty = winograd_taps(kH, sH, geo->pad_top, ry), Tx = winograd_taps(kW, sW, geo->pad_left, rx);
                const size_t points = Ty > 0 && Tx > 0 ? (size_t)(winograd_packed_tile(Ty, Cig)->n * winograd_packed_tile(Tx, Cig)->n) : 0;
                FD_REAL *part = (FD_REAL *)fd_blob_add(&b, WINOGRAD_MATRICES + (size_t)((g * sH + ry) * sW + rx),
                                                       points * point_size * sizeof(FD_REAL));
                if (parts != NULL) parts[(g * sH + ry) * sW + rx] = part;
            }
    *bytes = b.size;
    if (blob == NULL) return FD_OK;

    status = FD_FN(phase_pack)(geo, weight, phase_blob, &phase_bytes);
    const FD_REAL *w = (const FD_REAL *)weight;
    *finite = FD_FN(values_finite)(w, geo->in_channels * kH * kW * Cog);
    const ptrdiff_t *taps_y = (const ptrdiff_t *)fd_blob_part(phase_blob, PHASE_TAPS_Y);
    const ptrdiff_t *taps_x = (const ptrdiff_t *)fd_blob_part(phase_blob, PHASE_TAPS_X);
    for (ptrdiff_t g = 0; status == FD_OK && g < G; g++)
        for (ptrdiff_t ry = 0; ry < sH; ry++)
            for (ptrdiff_t rx = 0; rx < sW; rx++) {
                const ptrdiff_t *ky = taps_y + ry * (1 + kH) + 1, *kx = taps_x + rx * (1 + kW) + 1;
                const ptrdiff_t Ty = ky[-1], Tx = kx[-1];
                if (Ty == 0 || Tx == 0 || point_size == 0) continue;
                const fd_winograd_1d *fy = winograd_packed_tile(Ty, Cig), *fx = winograd_packed_tile(Tx, Cig);
                FD_REAL *part = parts[(g * sH + ry) * sW + rx];
                for (ptrdiff_t p = 0; p < fy->n; p++)
                    for (ptrdiff_t q = 0; q < fx->n; q++) {
                        memset(sum, 0, (size_t)(Cig * Cog) * sizeof(double));
                        for (ptrdiff_t u = 0; u < Ty; u++)
                            for (ptrdiff_t v = 0; v < Tx; v++) {
                                const double c = fy->G[p * Ty + u] * fx->G[q * Tx + v];
                                if (c == 0) continue;
                                for (ptrdiff_t i = 0; i < Cig; i++) {
                                    const FD_REAL *g_row = w + (((g * Cig + i) * kH + ky[Ty - 1 - u]) * kW + kx[Tx - 1 - v]) * Cog;
                                    double *s_row = sum + i * Cog;
                                    for (ptrdiff_t o = 0; o < Cog; o++) s_row[o] += c * (double)g_row[o];
                                }
                            }
                        for (ptrdiff_t e = 0; e < Cig * Cog; e++) rounded[e] = (FD_REAL)sum[e];
                        FD_FN(gemm_pack_b)((size_t)Cig, (size_t)Cog, rounded, Cog, 1,
                                           part + (size_t)(p * fx->n + q) * point_size);
                    }
            }
    free(parts);
    free(sum);
    free(rounded);
    return status;
}

/* A task's workspace (winograd_chunk_bytes): the chunk's tile list and a phase's copy of it (shared
 * tiles), the GEMMs' row pointers, V, M and the zero pixel. */
typedef struct {
    ptrdiff_t chunk;   /* tiles per chunk */
    ptrdiff_t rows;    /* row pointers of each kind: the most points per tile times chunk */
    fd_winograd_tile *tiles, *phase_tiles;
    const FD_REAL **a_rows;
    FD_REAL **c_rows, *V, *M, *zeros;
} FD_FN(winograd_space);

/* Sets the zero pixel (Cig zeros) and the GEMMs' row pointers: a_rows[i] = V + i*Cig and
 * c_rows[i] = M + i*cols for every point of every tile of a chunk, whatever its count and kind. Again
 * after the phase kernel ran in the same memory. */
static void FD_FN(winograd_space_reset)(const FD_FN(winograd_space) *ws, ptrdiff_t Cig, ptrdiff_t cols)
{
    memset(ws->zeros, 0, (size_t)Cig * sizeof(FD_REAL));
    for (ptrdiff_t i = 0; i < ws->rows; i++) {
        ws->a_rows[i] = ws->V + i * Cig;
        ws->c_rows[i] = ws->M + i * cols;
    }
}

static FD_FN(winograd_space) FD_FN(winograd_space_at)(const fd_geometry *geo, void *workspace, ptrdiff_t cols)
{
    const ptrdiff_t Cig = geo->in_channels / geo->groups, Cog = geo->out_channels / geo->groups;
    const int dtype = sizeof(FD_REAL) == sizeof(double) ? FD_FLOAT64 : FD_FLOAT32;
    FD_FN(winograd_space) ws;
    ws.chunk = winograd_chunk_tiles(geo, dtype);
    ws.rows = winograd_max_points(geo->kernel_h, geo->stride_h, Cig) *
              winograd_max_points(geo->kernel_w, geo->stride_w, Cig) * ws.chunk;
    ws.tiles = (fd_winograd_tile *)workspace;
    ws.phase_tiles = ws.tiles + ws.chunk;
    ws.a_rows = (const FD_REAL **)(ws.phase_tiles + ws.chunk);
    ws.c_rows = (FD_REAL **)(ws.a_rows + ws.rows);
    /* V and M from cache lines (the workspace starts on one): their GEMM rows and transform vectors
       are 64-byte loads and stores, which cost two accesses each across a line boundary */
    ws.V = (FD_REAL *)winograd_line_up(ws.c_rows + ws.rows);
    ws.M = (FD_REAL *)winograd_line_up(ws.V + ws.rows * Cig);
    ws.zeros = ws.M + ws.rows * Cog;
    FD_FN(winograd_space_reset)(&ws, Cig, cols);
    return ws;
}

/* The GEMMs of a chunk of `count` tiles of one kind (ph->fy x ph->fx, whose points are a subset of the
 * packed tiles fy x fx: the blob holds their U), one per point: M[point] = V[point] @ U[point], through
 * the row pointers of winograd_space_reset, which are evenly spaced (Cig and cols apart: FD_GEMM_DENSE). */
static void FD_FN(winograd_gemms)(const fd_winograd_phase *ph, const fd_winograd_1d *fy, const fd_winograd_1d *fx,
                                  ptrdiff_t count, const FD_REAL *U, size_t point_size, const FD_REAL **a_rows,
                                  FD_REAL **c_rows)
{
    for (ptrdiff_t p = 0; p < ph->fy->n; p++)
        for (ptrdiff_t q = 0; q < ph->fx->n; q++) {
            const ptrdiff_t point = p * ph->fx->n + q;
            const ptrdiff_t packed = fd_winograd_point(ph->fy, fy, p) * fx->n + fd_winograd_point(ph->fx, fx, q);
            FD_FN(gemm_indirect)((size_t)count, (size_t)ph->cols, 1, (size_t)ph->channels, a_rows + point * count,
                                 U + (size_t)packed * point_size, NULL, c_rows + point * count, FD_GEMM_DENSE);
        }
}

/* One chunk of tiles of one kind: input transform, GEMMs, output transform. Returns 1 if an output is
 * not finite. */
static int FD_FN(winograd_chunk)(const fd_winograd_phase *ph, const fd_winograd_1d *fy, const fd_winograd_1d *fx,
                                 const fd_winograd_tile *tiles, ptrdiff_t count, const FD_REAL *U,
                                 size_t point_size, const FD_FN(winograd_space) *ws)
{
    FD_FN(winograd_input)(ph, tiles, count, ws->V);
    FD_FN(winograd_gemms)(ph, fy, fx, count, U, point_size, ws->a_rows, ws->c_rows);
    return FD_FN(winograd_output)(ph, tiles, count, ws->M);
}

/* A task of shared tiles (winograd_shared): rows [r0, r1) of shared tiles across the batch, every
 * phase, every group (part WINOGRAD_ALL_PHASES) or one (WINOGRAD_GROUP(g)). Per chunk of tiles and
 * group, one input transform, then per phase its GEMMs and output transform. */
static int FD_FN(winograd_run_shared)(const fd_operands *op, const fd_task *task, void *workspace,
                                      const winograd_shared_axis *ay, const winograd_shared_axis *ax)
{
    const fd_geometry *geo = op->geo;
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, sH = geo->stride_h, sW = geo->stride_w;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const ptrdiff_t c0 = task->col_begin, c1 = task->col_end, cols = c1 - c0, r0 = task->row_begin, r1 = task->row_end;
    const ptrdiff_t g0 = task->part == WINOGRAD_ALL_PHASES ? 0 : WINOGRAD_GROUP(task->part);
    const ptrdiff_t g1 = task->part == WINOGRAD_ALL_PHASES ? G : g0 + 1;   /* WINOGRAD_GROUP is its own inverse */
    if (c0 < 0 || c1 > Cog || cols < 0 || c0 % FD_GEMM_COLUMN_ALIGN != 0 || r0 < 0 || r0 > r1 ||
        r1 > geo->batch * ay->tiles || g0 < 0 || g1 > G)
        return FD_ERR_ARGUMENT;
    const FD_REAL *x = (const FD_REAL *)op->x, *bias = (const FD_REAL *)op->bias;
    FD_REAL *y = (FD_REAL *)op->y;
    const void *phase_blob = fd_blob_part(op->packed, WINOGRAD_PHASE_BLOB);
    const FD_FN(winograd_space) ws = FD_FN(winograd_space_at)(geo, workspace, cols);
    fd_winograd_tile *tiles = ws.tiles, *phase_tiles = ws.phase_tiles;
    const size_t point_size = FD_FN(gemm_packed_size)((size_t)Cig, (size_t)Cog);
    const fd_winograd_1d *fy = winograd_packed_tile(ay->taps, Cig), *fx = winograd_packed_tile(ax->taps, Cig);
    const ptrdiff_t my = ay->m, mx = ax->m;
    const int stream = winograd_streams(geo, sizeof(FD_REAL));

    int nonfinite = !*(const int *)fd_blob_part(op->packed, WINOGRAD_WEIGHTS_FINITE);
    ptrdiff_t count = 0;
    for (ptrdiff_t q = r0; q < r1 && !nonfinite; q++)
        for (ptrdiff_t u = 0; u < ax->tiles && !nonfinite; u++) {
            tiles[count].n = q / ay->tiles;
            tiles[count].jy = q % ay->tiles * my;
            tiles[count].jx = u * mx;
            if (++count < ws.chunk && !(q + 1 == r1 && u + 1 == ax->tiles)) continue;
            /* every group of the task (all of them, or one) for the chunk's tiles before the next chunk:
               the chunk's outputs (all those channels) are written while their cache lines are close */
            for (ptrdiff_t g = g0; g < g1 && !nonfinite; g++) {
                /* the input side of every phase: tiles in shared coordinates, read from (origin + u*m) */
                const fd_winograd_phase input = {fy, fx, x + g * Cig, H, W, H * W * Cin, Cin, ay->origin, ax->origin, Cig,
                                                 ws.zeros, NULL, 0, 0, 0, 0, 0, 0, NULL, 0};
                FD_FN(winograd_input)(&input, tiles, count, ws.V);
                for (ptrdiff_t ry = 0; ry < sH && !nonfinite; ry++)
                    for (ptrdiff_t rx = 0; rx < sW && !nonfinite; rx++) {
                        const ptrdiff_t dy = winograd_phase_origin(kH, sH, geo->pad_top, ry) - ay->origin;
                        const ptrdiff_t dx = winograd_phase_origin(kW, sW, geo->pad_left, rx) - ax->origin;
                        for (ptrdiff_t t = 0; t < count; t++) {
                            phase_tiles[t].n = tiles[t].n;
                            phase_tiles[t].jy = tiles[t].jy - dy;
                            phase_tiles[t].jx = tiles[t].jx - dx;
                        }
                        const fd_winograd_phase ph = {fy, fx, NULL, H, W, H * W * Cin, Cin, ay->origin + dy, ax->origin + dx,
                                                      Cig, ws.zeros, y + (ry * Wo + rx) * Cout + g * Cog + c0,
                                                      fd_ceil_div(Ho - ry, sH), fd_ceil_div(Wo - rx, sW), Ho * Wo * Cout,
                                                      sH * Wo * Cout, sW * Cout, cols, bias ? bias + g * Cog + c0 : NULL, stream};
                        const FD_REAL *U = (const FD_REAL *)fd_blob_part(op->packed, WINOGRAD_MATRICES +
                                                                         (size_t)((g * sH + ry) * sW + rx)) + Cig * c0;
                        FD_FN(winograd_gemms)(&ph, fy, fx, count, U, point_size, ws.a_rows, ws.c_rows);
                        nonfinite = FD_FN(winograd_output)(&ph, phase_tiles, count, ws.M);
                    }
            }
            count = 0;
        }
    if (!nonfinite) return FD_OK;
    /* Some output is NaN or infinite (or the layer has a non-finite weight): every phase's rows of the
       task again, by the phase kernel. */
    const FD_REAL **phase_a = (const FD_REAL **)workspace;
    FD_REAL **phase_c = (FD_REAL **)(phase_a + op->chunk * kH * kW);
    for (ptrdiff_t ry = 0; ry < sH; ry++) {
        const ptrdiff_t Jy = fd_ceil_div(Ho - ry, sH), dy = winograd_phase_origin(kH, sH, geo->pad_top, ry) - ay->origin;
        const int status = FD_FN(deconv_phase_rows)(geo, phase_blob, x, bias, y, ry,
                                                    winograd_phase_row(r0, ay->tiles, my, dy, Jy),
                                                    winograd_phase_row(r1, ay->tiles, my, dy, Jy), c0, c1, g0, g1, 0,
                                                    sW, op->chunk, phase_a, phase_c);
        if (status != FD_OK) return status;
    }
    return FD_OK;
}

/* Task: (row phase ry, its tile rows [row_begin, row_end), output channels [col_begin, col_end)).
 * Tiles are taken a kind at a time (full tiles, then each axis's last, shorter tile), so that a
 * chunk's tiles share their transforms. `whole` makes the choices that depend on the rows (the phase
 * kernel or tiles; F(3, 2) or F(2, 2); streamed stores): op->geo itself, or, for conv_winograd's bands,
 * a layer of more rows of which op->geo holds rows starting on whole's tile grid, so that a band's
 * outputs have the bits of the whole layer's (the other fields must be op->geo's). */
static int FD_FN(winograd_run_rows_of)(const fd_operands *op, const fd_geometry *whole, const fd_task *task,
                                       void *workspace)
{
    const fd_geometry *geo = op->geo;
    const ptrdiff_t H = geo->in_h, W = geo->in_w, Cin = geo->in_channels;
    const ptrdiff_t Ho = geo->out_h, Wo = geo->out_w, Cout = geo->out_channels;
    const ptrdiff_t kH = geo->kernel_h, kW = geo->kernel_w, sH = geo->stride_h, sW = geo->stride_w;
    const ptrdiff_t G = geo->groups, Cig = Cin / G, Cog = Cout / G;
    const ptrdiff_t ry = task->part, c0 = task->col_begin, c1 = task->col_end, cols = c1 - c0;
    const ptrdiff_t r0 = task->row_begin, r1 = task->row_end;
    winograd_shared_axis ay, ax;
    if (whole->in_w != geo->in_w || whole->out_w != geo->out_w || whole->in_channels != geo->in_channels ||
        whole->out_channels != geo->out_channels || whole->groups != geo->groups || whole->kernel_h != kH ||
        whole->kernel_w != kW || whole->stride_h != sH || whole->stride_w != sW || whole->pad_top != geo->pad_top ||
        whole->pad_left != geo->pad_left || whole->out_h < Ho)
        return FD_ERR_ARGUMENT;
    if (winograd_direct(whole)) {   /* a phase task (winograd_tasks) */
        const FD_REAL **a_rows = (const FD_REAL **)workspace;
        return FD_FN(deconv_phase_rows)(geo, fd_blob_part(op->packed, WINOGRAD_PHASE_BLOB), (const FD_REAL *)op->x,
                                        (const FD_REAL *)op->bias, (FD_REAL *)op->y, ry, r0, r1, c0, c1, 0, G, 0, sW,
                                        op->chunk, a_rows, (FD_REAL **)(a_rows + op->chunk * kH * kW));
    }
    if (ry <= WINOGRAD_ALL_PHASES)
        return whole == geo && winograd_shared(geo, &ay, &ax) ? FD_FN(winograd_run_shared)(op, task, workspace, &ay, &ax)
                                                              : FD_ERR_ARGUMENT;
    const FD_REAL *x = (const FD_REAL *)op->x, *bias = (const FD_REAL *)op->bias;
    FD_REAL *y = (FD_REAL *)op->y;
    const void *phase_blob = fd_blob_part(op->packed, WINOGRAD_PHASE_BLOB);
    const ptrdiff_t *taps_y = (const ptrdiff_t *)fd_blob_part(phase_blob, PHASE_TAPS_Y);
    const ptrdiff_t *taps_x = (const ptrdiff_t *)fd_blob_part(phase_blob, PHASE_TAPS_X);
    if (ry < 0 || ry >= sH || ry >= Ho || c0 < 0 || c1 > Cog || cols < 0 || c0 % FD_GEMM_COLUMN_ALIGN != 0)
        return FD_ERR_ARGUMENT;
    const ptrdiff_t *ky = taps_y + ry * (1 + kH) + 1, Ty = ky[-1];
    const ptrdiff_t Jy = (Ho - ry + sH - 1) / sH, Jy_whole = (whole->out_h - ry + sH - 1) / sH;
    const ptrdiff_t my = winograd_tile_side(Ty, Jy_whole, Cig), TJy = (Jy + my - 1) / my;
    if (r0 < 0 || r1 > geo->batch * TJy || r0 > r1) return FD_ERR_ARGUMENT;
    /* the task's phase rows, for the phase kernel */
    const ptrdiff_t pr0 = r0 / TJy * Jy + (r0 % TJy * my < Jy ? r0 % TJy * my : Jy);
    const ptrdiff_t pr1 = r1 / TJy * Jy + (r1 % TJy * my < Jy ? r1 % TJy * my : Jy);
    const FD_REAL **phase_a = (const FD_REAL **)workspace;
    FD_REAL **phase_c = (FD_REAL **)(phase_a + op->chunk * kH * kW);

    int nonfinite = 0;
    if (Ty < 2 || Cig == 0 || !*(const int *)fd_blob_part(op->packed, WINOGRAD_WEIGHTS_FINITE))
        nonfinite = 1;   /* the phase kernel: no row phase with fewer multiplies, or non-finite weights */
    const FD_FN(winograd_space) ws = FD_FN(winograd_space_at)(geo, workspace, cols);
    fd_winograd_tile *tiles = ws.tiles;
    const size_t point_size = FD_FN(gemm_packed_size)((size_t)Cig, (size_t)Cog);
    const ptrdiff_t y0 = Ty > 0 ? winograd_phase_origin(kH, sH, geo->pad_top, ry) : 0;
    const fd_winograd_1d *fy = winograd_tile(Ty, Jy_whole, Cig), *fy_packed = winograd_packed_tile(Ty, Cig);
    const ptrdiff_t last_y = Jy % my;   /* outputs of each image's last tile row when shorter, else 0 */
    const int stream = winograd_streams(whole, sizeof(FD_REAL));

    for (ptrdiff_t g = 0; g < G && !nonfinite; g++) {
        for (ptrdiff_t rx = 0; rx < sW && rx < Wo && !nonfinite; rx++) {
            const ptrdiff_t *kx = taps_x + rx * (1 + kW) + 1, Tx = kx[-1];
            if (Ty < 2 || Tx < 2) {   /* no axis with fewer multiplies (k3 s2's odd phases): direct */
                const int status = g > 0 ? FD_OK :   /* every group at once */
                    FD_FN(deconv_phase_rows)(geo, phase_blob, x, bias, y, ry, pr0, pr1, c0, c1, 0, G, rx, rx + 1, op->chunk,
                                             phase_a, phase_c);
                if (status != FD_OK) return status;
                FD_FN(winograd_space_reset)(&ws, Cig, cols);   /* the phase kernel ran in the same memory */
                continue;
            }
            const ptrdiff_t Jx = (Wo - rx + sW - 1) / sW;
            const fd_winograd_1d *fx = winograd_tile(Tx, Jx, Cig), *fx_packed = winograd_packed_tile(Tx, Cig);
            const ptrdiff_t mx = fx->m, TJx = (Jx + mx - 1) / mx, last_x = Jx % mx;
            fd_winograd_phase ph = {fy, fx, x + g * Cig, H, W, H * W * Cin, Cin,
                                    y0, winograd_phase_origin(kW, sW, geo->pad_left, rx), Cig, ws.zeros,
                                    y + (ry * Wo + rx) * Cout + g * Cog + c0, Jy, Jx,
                                    Ho * Wo * Cout, sH * Wo * Cout, sW * Cout, cols,
                                    bias ? bias + g * Cog + c0 : NULL, stream};
            const FD_REAL *U = (const FD_REAL *)fd_blob_part(op->packed, WINOGRAD_MATRICES + (size_t)((g * sH + ry) * sW + rx)) +
                               Cig * c0;
            for (int short_row = 0; short_row <= (last_y != 0) && !nonfinite; short_row++) {
                ph.fy = short_row ? fd_winograd_find(last_y, Ty) : fy;
                for (int short_col = 0; short_col <= (last_x != 0) && !nonfinite; short_col++) {
                    ph.fx = short_col ? fd_winograd_find(last_x, Tx) : fx;
                    const ptrdiff_t col_begin = short_col ? TJx - 1 : 0, col_end = short_col || !last_x ? TJx : TJx - 1;
                    ptrdiff_t count = 0;
                    for (ptrdiff_t q = r0; q < r1 && !nonfinite; q++) {
                        if ((last_y != 0 && q % TJy == TJy - 1) != short_row) continue;
                        for (ptrdiff_t tx = col_begin; tx < col_end; tx++) {
                            tiles[count].n = q / TJy;
                            tiles[count].jy = q % TJy * my;
                            tiles[count].jx = tx * mx;
                            if (++count == ws.chunk) {
                                nonfinite = FD_FN(winograd_chunk)(&ph, fy_packed, fx_packed, tiles, count, U, point_size,
                                                                  &ws);
                                count = 0;
                                if (nonfinite) break;
                            }
                        }
                    }
                    if (count > 0 && !nonfinite)
                        nonfinite = FD_FN(winograd_chunk)(&ph, fy_packed, fx_packed, tiles, count, U, point_size, &ws);
                }
            }
        }
    }
    if (!nonfinite) return FD_OK;
    /* Some output is NaN or infinite (or the layer has a non-finite weight): the whole task again,
       by the phase kernel, whose sums have no cross terms. */
    return FD_FN(deconv_phase_rows)(geo, phase_blob, x, bias, y, ry, pr0, pr1, c0, c1, 0, G, 0, sW, op->chunk, phase_a,
                                    phase_c);
}

static int FD_FN(winograd_run)(const fd_operands *op, const fd_task *task, void *workspace)
{
    return FD_FN(winograd_run_rows_of)(op, op->geo, task, workspace);
}

#endif
