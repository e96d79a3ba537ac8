/* The CPU algorithm protocol.
 *
 * src/ is layered: algorithms/ (this protocol, the table algorithms.c and one template per algorithm)
 * uses kernels/ (the GEMM with its run-time ISA dispatch, the depthwise rows, the Winograd tiles), which
 * uses runtime/ (conv_geometry.h, templating.h and instantiate_types.h, which every layer shares, and the
 * thread pool and the fingerprint that the Cython shim runs on); never the other way. A header of another
 * folder is included by its path from src/ ("kernels/gemm.h"), one of the same folder plainly.
 *
 * ADDING AN ALGORITHM is its template file plus its entry in algorithms.c:
 *   - <kind>_<name>.template.c in this folder (deconv_ for a transposed convolution, conv_ for a
 *     convolution), which includes what it uses in its FD_ALGORITHM_SHARED part: this header and the
 *     kernels' it calls ("kernels/gemm.h", "kernels/depthwise_rows.h", "kernels/winograd_tiles.h");
 *   - in algorithms.c, the two lines that instantiate it (FD_TEMPLATE names it by its path from src/,
 *     since runtime/instantiate_types.h includes it) and its row in fd_algorithms[], whose order is the
 *     listing order. A template may use what one instantiated before it defines (deconv_winograd falls
 *     back on deconv_phase's kernel and packs its blob), so it comes after that one.
 * fastdeconv/_cpu.pyx reads the table by name; no other C or Cython code names an algorithm.
 *
 * The template is included three times (instantiate_algorithm.h): once with FD_ALGORITHM_SHARED
 * defined for its type-independent parts, once per element type with FD_REAL/FD_PREFIX defined
 * (runtime/templating.h) for packing and running, and once with FD_ALGORITHM_DESCRIPTOR defined to emit
 * its descriptor, `const fd_algorithm fd_algorithm_<name>`:
 *
 *   unsupported(geo)        NULL when the algorithm can run this layer, else a sentence saying why not
 *   pack[dtype](geo, w, blob, &bytes)
 *                           the layer's weights, prepared once: w is the weight (fastdeconv's layout,
 *                           C-contiguous, the compute dtype); the packed form is written into `blob`
 *                           (FD_BLOB_ALIGN-aligned) as parts (fd_blob_*). With blob == NULL it only
 *                           measures: `bytes` receives the size. Depends only on the geometry's
 *                           channels, groups, kernel, stride, dilation and leading pads.
 *   workspace(geo, dtype)   per-thread scratch bytes, and the `chunk` its run takes (a bound that does
 *                           not grow with the image unless the algorithm's row says so)
 *   tasks(geo, threads, t)  cuts the output into disjoint tasks (t == NULL: count them)
 *   run[dtype](op, task, workspace)
 *                           computes one task; threads run distinct tasks concurrently; `workspace`
 *                           (the bytes workspace() asked for) starts on an FD_BLOB_ALIGN boundary
 *
 * workspace and tasks may be shared rules defined below (fd_no_workspace, fd_indirect_gemm_workspace,
 * fd_image_band_tasks, fd_output_row_tasks), which the template names by a #define (FD_DEFINE_ALGORITHM).
 * Every function returns FD_OK or a negative status and touches only its arguments.
 * The kernels trust the geometry: fastdeconv/_params.py validated it.
 */
#ifndef FASTDECONV_ALGORITHM_H
#define FASTDECONV_ALGORITHM_H

#include "runtime/conv_geometry.h"
#include "runtime/templating.h"

enum { FD_FLOAT32 = 0, FD_FLOAT64 = 1, FD_NUM_DTYPES = 2 };

/* One disjoint part of the output. What the fields count is the algorithm's (its template says):
 * `part` is an image or a row phase, then a range of rows and a range of output channels. */
typedef struct {
    ptrdiff_t part, row_begin, row_end, col_begin, col_end;
} fd_task;

/* What one call reads and writes, in the compute dtype; x and y are C-contiguous NHWC. */
typedef struct {
    const fd_geometry *geo;
    const void *x;      /* (N, H, W, C_in) */
    void *y;            /* (N, H_out, W_out, C_out) */
    const void *bias;   /* (C_out,) or NULL */
    const void *packed; /* the blob the algorithm's pack wrote */
    ptrdiff_t chunk;    /* fd_workspace.chunk */
} fd_operands;

typedef struct {
    size_t bytes;    /* per thread */
    ptrdiff_t chunk; /* passed to run in fd_operands.chunk */
} fd_workspace;

typedef const char *(*fd_unsupported_fn)(const fd_geometry *geo);
typedef int (*fd_pack_fn)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes);
typedef fd_workspace (*fd_workspace_fn)(const fd_geometry *geo, int dtype);
typedef ptrdiff_t (*fd_tasks_fn)(const fd_geometry *geo, int threads, fd_task *tasks);
typedef int (*fd_run_fn)(const fd_operands *op, const fd_task *task, void *workspace);
/* The name of the algorithm (of the same kind) whose kernel runs this geometry instead, on its own
 * packing, which this algorithm's blob holds and passes it unchanged; NULL where this one's kernel runs it.
 * A caller may pack just that algorithm until a geometry that needs this one's own packing comes. */
typedef const char *(*fd_delegate_fn)(const fd_geometry *geo);

typedef struct {
    const char *name;
    int transposed; /* 1: conv_transpose2d, weight (C_in, kH, kW, C_out/g); 0: conv2d, (C_out, kH, kW, C_in/g) */
    fd_unsupported_fn unsupported;
    fd_pack_fn pack[FD_NUM_DTYPES];
    fd_workspace_fn workspace;
    fd_tasks_fn tasks;
    fd_run_fn run[FD_NUM_DTYPES];
    fd_delegate_fn delegate; /* NULL: never delegates */
} fd_algorithm;

/* The table (algorithms.c). */
extern const fd_algorithm *const fd_algorithms[];
extern const int fd_algorithm_count;

/* ------------------------------------------------------------------ packed blobs
 * A blob is a table of `parts` byte offsets followed by the parts, each starting on a
 * FD_BLOB_ALIGN boundary (a cache line: the GEMM's packed panels load faster aligned). */
#define FD_BLOB_ALIGN 64

typedef struct {
    char *base; /* NULL while measuring */
    size_t size;
} fd_blob;

static inline size_t fd_round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static inline void fd_blob_begin(fd_blob *b, void *base, size_t parts) {
    b->base = (char *)base;
    b->size = fd_round_up(parts * sizeof(size_t), FD_BLOB_ALIGN);
}

/* Reserve part `index` of `bytes` bytes; returns where to write it, or NULL while measuring. */
static inline void *fd_blob_add(fd_blob *b, size_t index, size_t bytes) {
    const size_t at = b->size;
    b->size += fd_round_up(bytes, FD_BLOB_ALIGN);
    if (b->base == NULL) return NULL;
    ((size_t *)b->base)[index] = at;
    return b->base + at;
}

static inline const void *fd_blob_part(const void *blob, size_t index) {
    return (const char *)blob + ((const size_t *)blob)[index];
}

/* Whether all `count` values are finite, which a pack function records in its blob: kernels that
 * multiply zeros by the weights (padding, border taps) are exact only then, since 0 * Inf is NaN.
 * v - v is 0 for a finite v and NaN for Inf or NaN, and a NaN term makes the sum NaN. Called per type
 * as FD_FN(values_finite). */
#define FD_DEFINE_VALUES_FINITE(prefix, real)                                   \
    static inline int fd_##prefix##values_finite(const real *v, ptrdiff_t count) { \
        real sum = 0;                                                           \
        for (ptrdiff_t i = 0; i < count; i++) sum += v[i] - v[i];               \
        return sum == 0;                                                        \
    }
FD_DEFINE_VALUES_FINITE(s, float)
FD_DEFINE_VALUES_FINITE(d, double)
#undef FD_DEFINE_VALUES_FINITE

/* ------------------------------------------------------------------ workspace rules */

/* An indirect GEMM's chunk of output pixels: its A rows (chunk * K elements) take
 * FD_GEMM_CHUNK_BYTES of cache next to the B panel (a size chosen on the benchmark suite), in
 * multiples of 48 rows (MR = 6, 8, 12, 16 all divide 48), between 48 and FD_GEMM_CHUNK_MAX_PIXELS.
 * Each chunk's GEMM reads all of the packed B (K * N elements), so a B of over FD_GEMM_CHUNK_B_BYTES,
 * which comes from L3 or memory, takes chunks of at least FD_GEMM_CHUNK_B_PIXELS (a 3x3 layer of 2048
 * channels had chunks of 48 pixels, each reading its 36 MiB of weights again; 576 pixels ran 3x3 layers of
 * 2048-4096 channels 3-8 % faster than 192 on 1 and 2 threads). N = 0: A's budget alone. */
#define FD_GEMM_CHUNK_BYTES (512 << 10)
#define FD_GEMM_CHUNK_MAX_PIXELS 1536
#define FD_GEMM_CHUNK_B_BYTES (2 << 20)
#define FD_GEMM_CHUNK_B_PIXELS 576

static inline ptrdiff_t fd_gemm_chunk(ptrdiff_t K, ptrdiff_t N, size_t itemsize) {
    const size_t row_bytes = K > 0 ? (size_t)K * itemsize : 1;
    ptrdiff_t rows = (ptrdiff_t)(FD_GEMM_CHUNK_BYTES / row_bytes) / 48 * 48;
    if (rows < 48) rows = 48;
    if (N > 0 && (double)K * (double)N * (double)itemsize > (double)FD_GEMM_CHUNK_B_BYTES && rows < FD_GEMM_CHUNK_B_PIXELS)
        rows = FD_GEMM_CHUNK_B_PIXELS;
    return rows < FD_GEMM_CHUNK_MAX_PIXELS ? rows : FD_GEMM_CHUNK_MAX_PIXELS;
}

/* col2im's column buffer per thread: this many bytes, or FD_COL2IM_MIN_PIXELS input pixels' columns
 * (kH*kW*C_out/g elements each) if that is larger, up to this many bytes again: a pixel's columns
 * beyond that are computed in blocks, and a row longer than the buffer in pieces, so the buffer grows
 * with neither the image nor the weight. The minimum keeps a few GEMM row tiles per pass over the
 * packed weights when one pixel's column alone is large. */
#define FD_COL2IM_WORKSPACE_BYTES (1 << 20)
#define FD_COL2IM_MIN_PIXELS 48

static inline size_t fd_itemsize(int dtype) { return dtype == FD_FLOAT64 ? sizeof(double) : sizeof(float); }

/* A workspace rule (fd_workspace_fn) for algorithms that need none. */
static inline fd_workspace fd_no_workspace(const fd_geometry *geo, int dtype) {
    fd_workspace ws = {0, 0};
    (void)geo;
    (void)dtype;
    return ws;
}

/* An indirect GEMM over `taps` taps of K elements in all, against N columns (fd_gemm_chunk): a chunk of
 * output pixels with `taps` A-row pointers and one C-row pointer each. */
static inline fd_workspace fd_gemm_pointers_workspace(ptrdiff_t taps, ptrdiff_t K, ptrdiff_t N, int dtype) {
    fd_workspace ws;
    ws.chunk = fd_gemm_chunk(K, N, fd_itemsize(dtype));
    ws.bytes = (size_t)ws.chunk * (size_t)(taps + 1) * sizeof(void *);
    return ws;
}

/* A workspace rule (fd_workspace_fn) for an indirect GEMM over kH*kW taps of C_in/groups channels into
 * C_out/groups columns (fd_gemm_pointers_workspace). */
static inline fd_workspace fd_indirect_gemm_workspace(const fd_geometry *geo, int dtype) {
    const ptrdiff_t taps = geo->kernel_h * geo->kernel_w;
    return fd_gemm_pointers_workspace(taps, taps * (geo->in_channels / geo->groups),
                                      geo->out_channels / geo->groups, dtype);
}

/* ------------------------------------------------------------------ task rules
 * Each appends to `tasks` (when not NULL) from index *count and advances *count. */

static inline void fd_task_add(fd_task *tasks, ptrdiff_t *count, ptrdiff_t part, ptrdiff_t r0, ptrdiff_t r1,
                               ptrdiff_t c0, ptrdiff_t c1) {
    if (tasks != NULL) {
        fd_task t = {part, r0, r1, c0, c1};
        tasks[*count] = t;
    }
    (*count)++;
}

/* (image n, output rows [r0, r1)) for every image; images cut into bands of at least `least` rows
 * when there are fewer than two images per thread. */
static inline ptrdiff_t fd_image_bands(const fd_geometry *geo, int threads, ptrdiff_t least, fd_task *tasks) {
    const ptrdiff_t batch = geo->batch, rows = geo->out_h;
    ptrdiff_t bands = 1, count = 0;
    if (batch <= 0 || rows <= 0) return 0;
    if (threads > 1 && batch < 2 * (ptrdiff_t)threads) {
        bands = fd_ceil_div(2 * (ptrdiff_t)threads, batch);
        const ptrdiff_t most = least > 1 ? rows / least : rows;
        if (bands > most) bands = most > 1 ? most : 1;
    }
    const ptrdiff_t band_rows = fd_ceil_div(rows, bands);
    for (ptrdiff_t n = 0; n < batch; n++)
        for (ptrdiff_t r0 = 0; r0 < rows; r0 += band_rows)
            fd_task_add(tasks, &count, n, r0, r0 + band_rows < rows ? r0 + band_rows : rows, 0, 0);
    return count;
}

/* A tasks rule (fd_tasks_fn): fd_image_bands of any height. */
static inline ptrdiff_t fd_image_band_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    return fd_image_bands(geo, threads, 1, tasks);
}

/* (part, rows [r0, r1), columns [0, cols)) over `rows` rows that are one of `split` equal parts of
 * the work: about 4 tasks per thread overall, one task when serial. */
static inline void fd_row_range_tasks(ptrdiff_t rows, int threads, ptrdiff_t part, ptrdiff_t split, ptrdiff_t cols,
                                      fd_task *tasks, ptrdiff_t *count) {
    ptrdiff_t per_task = threads > 1 ? fd_ceil_div(rows * split, 4 * (ptrdiff_t)threads) : rows;
    if (per_task < 1) per_task = 1;
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += per_task)
        fd_task_add(tasks, count, part, r0, r0 + per_task < rows ? r0 + per_task : rows, 0, cols);
}

/* A tasks rule (fd_tasks_fn): ranges of the N*H_out output rows, counted across the batch
 * (fd_row_range_tasks, part 0, no columns). */
static inline ptrdiff_t fd_output_row_tasks(const fd_geometry *geo, int threads, fd_task *tasks) {
    ptrdiff_t count = 0;
    fd_row_range_tasks(geo->batch * geo->out_h, threads, 0, 1, 0, tasks, &count);
    return count;
}

/* ------------------------------------------------------------------ stride phases
 * Output row oy of a transposed convolution receives tap ky exactly when (oy + pad_begin - ky*d) is
 * divisible by s, which depends only on the phase r = oy mod s. The table has `stride` rows of
 * (1 + kernel) entries: the count of such taps for phase r, then their k in ascending order.
 * Computed with residues only, so no product can overflow (kernel <= FD_MAX_PHASE_TAPS). */
static inline void fd_phase_taps(ptrdiff_t stride, ptrdiff_t kernel, ptrdiff_t dilation, ptrdiff_t pad_begin,
                                 ptrdiff_t *table) {
    const ptrdiff_t pad_mod = pad_begin % stride, d_mod = dilation % stride;
    for (ptrdiff_t r = 0; r < stride; r++) {
        ptrdiff_t *row = table + r * (1 + kernel), count = 0;
        const ptrdiff_t target = (r + pad_mod) % stride;
        for (ptrdiff_t k = 0; k < kernel; k++)
            if (k * d_mod % stride == target) row[1 + count++] = k;
        row[0] = count;
        for (ptrdiff_t k = count; k < kernel; k++) row[1 + k] = 0;
    }
}

/* The descriptor of the algorithm `name`, from its template's functions: name##_unsupported,
 * name##_workspace and name##_tasks (functions, or #defines naming a shared rule above), and per
 * type FD_FN(name##_pack) and FD_FN(name##_run). */
#define FD_DEFINE_ALGORITHM(name, is_transposed) FD_DEFINE_NAMED_ALGORITHM(name, #name, is_transposed)

/* The same, listed under another name: names are per kind (a convolution and a transposed
 * convolution may share one), C symbols are not. */
#define FD_DEFINE_NAMED_ALGORITHM(name, listed_name, is_transposed)                                          \
    FD_DEFINE_DELEGATING_ALGORITHM(name, listed_name, is_transposed, NULL)

/* The same, with an fd_delegate_fn: small calls that another algorithm's kernel runs on its own packing. */
#define FD_DEFINE_DELEGATING_ALGORITHM(name, listed_name, is_transposed, delegate_fn)                         \
    const fd_algorithm fd_algorithm_##name = {listed_name,                                                   \
                                              is_transposed,                                                 \
                                              name##_unsupported,                                            \
                                              {fd_s##name##_pack, fd_d##name##_pack},                        \
                                              name##_workspace,                                              \
                                              name##_tasks,                                                  \
                                              {fd_s##name##_run, fd_d##name##_run},                          \
                                              delegate_fn};

#endif
