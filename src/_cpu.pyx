# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython shim between the Python API and the C kernels in src/.

It owns allocation (packed weights, per-thread workspace), errors, the GIL
(released around every kernel call) and threading: the output is cut into
disjoint bands of rows, and an OpenMP ``prange`` hands the bands to threads.
Each C kernel is single-threaded; nothing here nests threads.

Callers pass C-contiguous arrays of the compute dtype (float32 or float64) and
a resolved :class:`fastdeconv._params.ConvGeometry`; the Python layer has
already validated everything.
"""

import numpy as np
cimport numpy as cnp
from cython.parallel cimport prange, threadid

from libc.stdlib cimport malloc, calloc, free

cnp.import_array()

cdef extern from "threads.h" nogil:
    int fd_openmp_enabled()
    int fd_omp_max_threads()
    int fd_omp_version()

cdef extern from "conv_geometry.h" nogil:
    enum: FD_MAX_PHASE_TAPS
    ctypedef struct fd_geometry:
        Py_ssize_t batch, in_h, in_w, in_channels
        Py_ssize_t out_h, out_w, out_channels
        Py_ssize_t kernel_h, kernel_w
        Py_ssize_t stride_h, stride_w
        Py_ssize_t dilation_h, dilation_w
        Py_ssize_t pad_top, pad_left
        Py_ssize_t groups

cdef extern from "gemm.h" nogil:
    enum: FD_GEMM_COLUMN_ALIGN
    size_t fd_sgemm_packed_size(size_t K, size_t N)
    size_t fd_dgemm_packed_size(size_t K, size_t N)
    void fd_sgemm_pack_b(size_t K, size_t N, const float *b, Py_ssize_t stride_k, Py_ssize_t stride_n, float *packed)
    void fd_dgemm_pack_b(size_t K, size_t N, const double *b, Py_ssize_t stride_k, Py_ssize_t stride_n, double *packed)
    void fd_sgemm_pack_b_rows(size_t K, size_t N, const float *const *rows, float *packed)
    void fd_dgemm_pack_b_rows(size_t K, size_t N, const double *const *rows, double *packed)
    int fd_gemm_isa_supported(int isa)
    int fd_gemm_get_isa()
    int fd_gemm_set_isa(int isa)
    const char *fd_gemm_isa_name(int isa)

cdef extern from "kernels.h" nogil:
    int fd_sdeconv_col2im_band(const fd_geometry *geo, const float *x, const float *const *packed_w,
                               const float *bias, float *y, Py_ssize_t n, Py_ssize_t oy_begin, Py_ssize_t oy_end,
                               float *col, Py_ssize_t col_pixels, const float **a_rows, float **c_rows)
    int fd_ddeconv_col2im_band(const fd_geometry *geo, const double *x, const double *const *packed_w,
                               const double *bias, double *y, Py_ssize_t n, Py_ssize_t oy_begin, Py_ssize_t oy_end,
                               double *col, Py_ssize_t col_pixels, const double **a_rows, double **c_rows)
    int fd_sconv_im2col_band(const fd_geometry *geo, const float *x, const float *const *packed_w,
                             const float *bias, float *y, Py_ssize_t n, Py_ssize_t oy_begin, Py_ssize_t oy_end,
                             const float *zeros, Py_ssize_t chunk_pixels, const float **a_rows, float **c_rows)
    int fd_dconv_im2col_band(const fd_geometry *geo, const double *x, const double *const *packed_w,
                             const double *bias, double *y, Py_ssize_t n, Py_ssize_t oy_begin, Py_ssize_t oy_end,
                             const double *zeros, Py_ssize_t chunk_pixels, const double **a_rows, double **c_rows)

    int fd_sdeconv_phase_rows(const fd_geometry *geo, const Py_ssize_t *taps_y, const Py_ssize_t *taps_x,
                              const float *x, const float *const *packed_w, const float *bias, float *y,
                              Py_ssize_t ry, Py_ssize_t row_begin, Py_ssize_t row_end, Py_ssize_t col_begin,
                              Py_ssize_t col_end, const float *zeros,
                              Py_ssize_t chunk_pixels, const float **a_rows, float **c_rows)
    int fd_ddeconv_phase_rows(const fd_geometry *geo, const Py_ssize_t *taps_y, const Py_ssize_t *taps_x,
                              const double *x, const double *const *packed_w, const double *bias, double *y,
                              Py_ssize_t ry, Py_ssize_t row_begin, Py_ssize_t row_end, Py_ssize_t col_begin,
                              Py_ssize_t col_end, const double *zeros,
                              Py_ssize_t chunk_pixels, const double **a_rows, double **c_rows)
    int fd_sdeconv_depthwise_rows(const fd_geometry *geo, const Py_ssize_t *taps_y, const Py_ssize_t *taps_x,
                                  const float *x, const float *wr, const float *bias, float *y,
                                  Py_ssize_t row_begin, Py_ssize_t row_end)
    int fd_ddeconv_depthwise_rows(const fd_geometry *geo, const Py_ssize_t *taps_y, const Py_ssize_t *taps_x,
                                  const double *x, const double *wr, const double *bias, double *y,
                                  Py_ssize_t row_begin, Py_ssize_t row_end)

ctypedef fused real:
    float
    double

# Workspace bounds, per thread:
# - col2im's column buffer: COL2IM_WORKSPACE_BYTES, or one input row's columns
#   (in_w * kH*kW*Cog elements) if that is larger;
# - indirect GEMMs (phase, im2col): chunk * (kH*kW + 1) pointers. A chunk of output pixels is
#   sized so that its A rows (chunk * K elements) take GEMM_CHUNK_BYTES of cache next to the B
#   panel (512 KiB was the best of 128 KiB to 2 MiB on the suite), in multiples of 48 rows
#   (MR = 6, 8, 12, 16 all divide 48), between 48 and 1536 pixels.
COL2IM_WORKSPACE_BYTES = 1 << 20
GEMM_CHUNK_BYTES = 512 << 10
# Below this many FLOPs a call runs on one thread: waking a second costs more than it saves.
cdef long long _serial_flops = 400_000


def set_serial_flops(long long flops):
    """Calls below `flops` run on one thread; returns the previous value. Tests set 0 so that
    tiny problems exercise the threaded paths."""
    global _serial_flops
    previous = _serial_flops
    _serial_flops = flops
    return previous

# The phase and depthwise kernels keep per-phase tap tables on the stack.
MAX_PHASE_TAPS = FD_MAX_PHASE_TAPS

cdef int _requested_threads = 0   # 0: follow OpenMP (OMP_NUM_THREADS)


def set_num_threads(int n):
    """Threads used by every later call (n >= 1); 0 restores the OpenMP default."""
    global _requested_threads
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _requested_threads = n


def get_num_threads():
    """Threads the next call will use (always 1 without OpenMP)."""
    if not fd_openmp_enabled():
        return 1
    return _requested_threads if _requested_threads > 0 else fd_omp_max_threads()


def build_info():
    """Compile-time and run-time facts for show_config()."""
    isas = {fd_gemm_isa_name(i).decode(): bool(fd_gemm_isa_supported(i)) for i in range(3)}
    return {
        "openmp": bool(fd_openmp_enabled()),
        "openmp_version": fd_omp_version(),
        "gemm_isa": fd_gemm_isa_name(fd_gemm_get_isa()).decode(),
        "gemm_isa_supported": isas,
    }


def set_gemm_isa(str name):
    """Force a GEMM ISA path ("portable", "avx2", "avx512"); for tests and benchmarks."""
    for i in range(3):
        if fd_gemm_isa_name(i).decode() == name:
            if fd_gemm_set_isa(i) != 0:
                raise ValueError(f"the {name} GEMM path is not supported on this CPU/build")
            return
    raise ValueError(f"unknown GEMM ISA {name!r}; choose portable, avx2 or avx512")


def get_gemm_isa():
    return fd_gemm_isa_name(fd_gemm_get_isa()).decode()


cdef fd_geometry _c_geometry(g) except *:
    cdef fd_geometry geo
    geo.batch = g.batch
    geo.in_h, geo.in_w = g.input_hw
    geo.in_channels = g.in_channels
    geo.out_h, geo.out_w = g.output_hw
    geo.out_channels = g.out_channels
    geo.kernel_h, geo.kernel_w = g.kernel_hw
    geo.stride_h, geo.stride_w = g.stride
    geo.dilation_h, geo.dilation_w = g.dilation
    geo.pad_top = g.pad[0][0]
    geo.pad_left = g.pad[1][0]
    geo.groups = g.groups
    return geo


cdef object _pack(const real[::1] b, Py_ssize_t offset, Py_ssize_t K, Py_ssize_t N, Py_ssize_t stride_k,
                  Py_ssize_t stride_n):
    """Pack the K x N matrix whose (k, n) element is b[offset + k*stride_k + n*stride_n]."""
    cdef object packed
    if real is float:
        packed = np.empty(max(<Py_ssize_t>fd_sgemm_packed_size(K, N), 1), dtype=np.float32)
        fd_sgemm_pack_b(K, N, &b[offset], stride_k, stride_n, <float *>cnp.PyArray_DATA(packed))
    else:
        packed = np.empty(max(<Py_ssize_t>fd_dgemm_packed_size(K, N), 1), dtype=np.float64)
        fd_dgemm_pack_b(K, N, &b[offset], stride_k, stride_n, <double *>cnp.PyArray_DATA(packed))
    return packed


cdef class PackedWeights:
    """Per-group packed GEMM operands, and the pointer table the C kernels take."""
    cdef readonly list arrays
    cdef object pointers      # uintp array, one pointer per packed matrix
    cdef public object taps_y, taps_x   # phase tap tables (deconv_phase only)

    def __init__(self, list arrays, taps_y=None, taps_x=None):
        self.arrays = arrays
        self.taps_y = taps_y
        self.taps_x = taps_x
        self.pointers = np.array([a.ctypes.data for a in arrays], dtype=np.uintp)

    cdef const void *const *table(self):
        return <const void *const *>cnp.PyArray_DATA(self.pointers)


def pack_deconv_col2im(weight, geometry):
    """Pack each group's (Cig, kH*kW*Cog) slice of a (C_in, kH, kW, Cog) weight."""
    flat = weight.reshape(-1)
    cig, taps_cols = geometry.in_per_group, geometry.kernel_hw[0] * geometry.kernel_hw[1] * geometry.out_per_group
    return PackedWeights([_pack_dispatch(flat, g * cig * taps_cols, cig, taps_cols, taps_cols, 1)
                          for g in range(geometry.groups)])


def pack_conv_im2col(weight, geometry):
    """Pack each group's (kH*kW*Cig, Cog) matrix: the (C_out, kH, kW, Cig) slice, transposed."""
    flat = weight.reshape(-1)
    cog, k = geometry.out_per_group, geometry.kernel_hw[0] * geometry.kernel_hw[1] * geometry.in_per_group
    return PackedWeights([_pack_dispatch(flat, g * cog * k, k, cog, 1, k) for g in range(geometry.groups)])


def _pack_dispatch(flat, Py_ssize_t offset, Py_ssize_t K, Py_ssize_t N, Py_ssize_t sk, Py_ssize_t sn):
    if K == 0 or N == 0:
        return np.zeros(1, dtype=flat.dtype)
    if flat.dtype == np.float32:
        return _pack[float](flat, offset, K, N, sk, sn)
    return _pack[double](flat, offset, K, N, sk, sn)


cdef inline Py_ssize_t _ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """ceil(a / b) for a >= 0, b > 0 (the module uses C division: -(-a // b) would truncate)."""
    return (a + b - 1) // b


cdef Py_ssize_t _gemm_chunk(Py_ssize_t K, Py_ssize_t itemsize):
    cdef Py_ssize_t rows = GEMM_CHUNK_BYTES // max(K * itemsize, 1)
    return min(max(rows // 48 * 48, 48), 1536)


def phase_taps(Py_ssize_t stride, Py_ssize_t kernel, Py_ssize_t dilation, Py_ssize_t pad_begin):
    """(stride, 1 + kernel) table: per output phase r, the count of taps k with
    (r + pad_begin - k*dilation) divisible by stride, then those k."""
    table = np.zeros((stride, 1 + kernel), dtype=np.intp)
    for r in range(stride):
        taps = [k for k in range(kernel) if (r + pad_begin - k * dilation) % stride == 0]
        table[r, 0] = len(taps)
        table[r, 1:1 + len(taps)] = taps
    return table


def pack_deconv_phase(weight, geometry):
    """Pack the (Ty*Tx*Cig, Cog) sub-kernel of every (group, row phase, column phase): row
    (ty*Tx + tx)*Cig + i of B is the Cog-vector weight[g*Cig + i, ky_ty, kx_tx, :]."""
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_hw, geometry.stride, geometry.dilation
    taps_y = phase_taps(sh, kh, dh, geometry.pad[0][0])
    taps_x = phase_taps(sw, kw, dw, geometry.pad[1][0])
    flat = np.ascontiguousarray(weight).reshape(-1)
    if flat.dtype == np.float32:
        arrays = _pack_phase[float](flat, taps_y, taps_x, geometry.groups, geometry.in_per_group,
                                    geometry.out_per_group, kh, kw, sh, sw)
    else:
        arrays = _pack_phase[double](flat, taps_y, taps_x, geometry.groups, geometry.in_per_group,
                                     geometry.out_per_group, kh, kw, sh, sw)
    return PackedWeights(arrays, taps_y, taps_x)


cdef list _pack_phase(const real[::1] w, Py_ssize_t[:, ::1] taps_y, Py_ssize_t[:, ::1] taps_x, Py_ssize_t groups,
                      Py_ssize_t cig, Py_ssize_t cog, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw):
    cdef list arrays = []
    cdef Py_ssize_t g, ry, rx, ty, tx, i, K
    no_taps = np.zeros(1, dtype=np.asarray(w).dtype)   # shared by every phase that no tap reaches
    rows = np.empty(max(kh * kw * cig, 1), dtype=np.intp)
    cdef Py_ssize_t[::1] row_view = rows
    cdef const real *base = &w[0]
    for g in range(groups):
        for ry in range(sh):
            for rx in range(sw):
                K = taps_y[ry, 0] * taps_x[rx, 0] * cig
                if K == 0 or cog == 0:
                    arrays.append(no_taps)
                    continue
                for ty in range(taps_y[ry, 0]):
                    for tx in range(taps_x[rx, 0]):
                        for i in range(cig):
                            row_view[(ty * taps_x[rx, 0] + tx) * cig + i] = <Py_ssize_t>(
                                base + (((g * cig + i) * kh + taps_y[ry, 1 + ty]) * kw + taps_x[rx, 1 + tx]) * cog)
                if real is float:
                    packed = np.empty(fd_sgemm_packed_size(K, cog), dtype=np.float32)
                    fd_sgemm_pack_b_rows(K, cog, <const float *const *>&row_view[0], <float *>cnp.PyArray_DATA(packed))
                else:
                    packed = np.empty(fd_dgemm_packed_size(K, cog), dtype=np.float64)
                    fd_dgemm_pack_b_rows(K, cog, <const double *const *>&row_view[0], <double *>cnp.PyArray_DATA(packed))
                arrays.append(packed)
    return arrays


def pack_deconv_depthwise(weight, geometry):
    """Reorder a (C_in, kH, kW, Cog) depthwise weight to (kH, kW, C_out), plus the phase tap tables."""
    if geometry.in_per_group != 1:
        raise ValueError(f"the depthwise algorithm needs groups == C_in, got groups={geometry.groups}, "
                         f"C_in={geometry.in_channels}")
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_hw, geometry.stride, geometry.dilation
    reordered = np.ascontiguousarray(weight.transpose(1, 2, 0, 3)).reshape(-1)
    return PackedWeights([reordered], phase_taps(sh, kh, dh, geometry.pad[0][0]),
                         phase_taps(sw, kw, dw, geometry.pad[1][0]))



# ---------------------------------------------------------------------------------------------
# Running: a Runner binds packed weights to one geometry (one input shape), cuts the output
# into tasks and runs them on threads. It is built once per input shape (the plan object
# caches it), so a call only allocates the per-thread workspace and runs.

cdef enum Kind:
    KIND_COL2IM, KIND_PHASE, KIND_DEPTHWISE, KIND_IM2COL

_KINDS = {"col2im": KIND_COL2IM, "phase": KIND_PHASE, "depthwise": KIND_DEPTHWISE, "im2col": KIND_IM2COL}


# Every task is a row of 5 numbers (a, row_begin, row_end, col_begin, col_end); `a` is the image
# (col2im, im2col) or the row phase (phase); the column range is used by phase only.

def _band_tasks(Py_ssize_t batch, Py_ssize_t rows, int threads):
    """(n, row_begin, row_end) tasks over each image's output rows; about 2 per thread."""
    cdef Py_ssize_t bands = 1
    if batch == 0:
        return []
    if threads > 1 and batch < 2 * threads:
        bands = min(_ceil_div(2 * threads, batch), rows)
    cdef Py_ssize_t band_rows = _ceil_div(rows, bands)
    return [(n, r0, min(r0 + band_rows, rows), 0, 0) for n in range(batch) for r0 in range(0, rows, band_rows)]


def _row_range_tasks(Py_ssize_t rows, int threads, Py_ssize_t phase=0, Py_ssize_t split=1):
    """(phase, row_begin, row_end) tasks over `rows` rows; about 4 per thread overall, where the
    rows are one of `split` equal parts of the work."""
    cdef Py_ssize_t per_task = max(1, _ceil_div(rows * split, 4 * threads)) if threads > 1 else max(rows, 1)
    return [(phase, r0, min(r0 + per_task, rows), 0, 0) for r0 in range(0, rows, per_task)]


def _phase_tasks(Py_ssize_t ry, Py_ssize_t rows, Py_ssize_t pixels, Py_ssize_t cols, Py_ssize_t stride_h,
                 int threads):
    """Tasks for the `rows` rows (`pixels` output pixels per group) of row phase ry. Threads split
    the operand that is larger, so the other is the one read twice: B's columns (`cols` output
    channels per group, in aligned blocks) when there are fewer pixels than channels, else the rows."""
    cdef Py_ssize_t parts, per_part
    if threads > 1 and pixels < cols and cols > FD_GEMM_COLUMN_ALIGN:
        parts = min(_ceil_div(threads, stride_h), _ceil_div(cols, FD_GEMM_COLUMN_ALIGN))
        per_part = _ceil_div(_ceil_div(cols, parts), FD_GEMM_COLUMN_ALIGN) * FD_GEMM_COLUMN_ALIGN
        return [(ry, 0, rows, c0, min(c0 + per_part, cols)) for c0 in range(0, cols, per_part)]
    return [(ry, r0, r1, 0, cols) for (_, r0, r1, _, _) in _row_range_tasks(rows, threads, ry, stride_h)]


cdef class Runner:
    """One algorithm, bound to packed weights and one geometry, ready to run."""
    cdef fd_geometry geo
    cdef Kind kind
    cdef bint is_double
    cdef readonly str algorithm
    cdef readonly int threads
    cdef PackedWeights packed
    cdef object bias, zeros, task_array, taps_y, taps_x
    cdef Py_ssize_t ntasks, chunk, ws_reals, ws_pointers

    def __init__(self, str algorithm, PackedWeights packed, bias, geometry, dtype):
        self.algorithm = algorithm
        self.kind = _KINDS[algorithm]
        self.is_double = np.dtype(dtype) == np.float64
        self.packed = packed
        self.bias = bias
        self.geo = _c_geometry(geometry)
        cdef Py_ssize_t itemsize = 8 if self.is_double else 4
        cdef Py_ssize_t cig = self.geo.in_channels // self.geo.groups
        cdef Py_ssize_t taps = self.geo.kernel_h * self.geo.kernel_w
        cdef Py_ssize_t taps_cols = taps * (self.geo.out_channels // self.geo.groups)
        cdef int threads = 1 if geometry.flops < _serial_flops else get_num_threads()
        self.zeros = np.zeros(max(cig, 1), dtype=dtype)
        self.taps_y, self.taps_x = packed.taps_y, packed.taps_x
        self.ws_reals = 0
        self.ws_pointers = 0
        self.chunk = 0
        if self.kind == KIND_COL2IM:
            tasks = _band_tasks(self.geo.batch, self.geo.out_h, threads)
            self.chunk = max(self.geo.in_w, COL2IM_WORKSPACE_BYTES // (itemsize * max(taps_cols, 1)))
            self.ws_reals = self.chunk * taps_cols
            self.ws_pointers = 2 * self.chunk
        elif self.kind == KIND_IM2COL:
            tasks = _band_tasks(self.geo.batch, self.geo.out_h, threads)
            self.chunk = _gemm_chunk(taps * cig, itemsize)
            self.ws_pointers = self.chunk * (taps + 1)
        elif self.kind == KIND_PHASE:
            tasks = []
            for ry in range(min(self.geo.stride_h, self.geo.out_h)):
                rows = self.geo.batch * _ceil_div(self.geo.out_h - ry, self.geo.stride_h)
                tasks += _phase_tasks(ry, rows, rows * _ceil_div(self.geo.out_w, self.geo.stride_w),
                                      self.geo.out_channels // self.geo.groups, self.geo.stride_h, threads)
            self.chunk = _gemm_chunk(taps * cig, itemsize)
            self.ws_pointers = self.chunk * (taps + 1)
        else:
            tasks = _row_range_tasks(self.geo.batch * self.geo.out_h, threads)
        if self.geo.batch == 0 or self.geo.out_channels == 0:   # an empty result: nothing to compute
            tasks = []
        self.ntasks = len(tasks)
        self.threads = max(1, min(threads, self.ntasks))
        self.task_array = np.array(tasks, dtype=np.intp).reshape(-1, 5)

    def run(self, x, y):
        """Fill y (C-contiguous, the runner's dtype and geometry) from x (C-contiguous)."""
        if self.ntasks == 0:
            return y
        # Per-thread slices, rounded to cache lines so that threads never share one.
        cdef Py_ssize_t ws_bytes = (self.ws_reals * (8 if self.is_double else 4) + self.ws_pointers * sizeof(void *)
                                    + 63) // 64 * 64
        cdef char *workspace = <char *>malloc(max(ws_bytes, 1) * self.threads)
        if workspace == NULL:
            raise MemoryError(f"could not allocate {ws_bytes * self.threads} bytes of workspace")
        cdef int *status = <int *>calloc(self.ntasks, sizeof(int))
        if status == NULL:
            free(workspace)
            raise MemoryError("could not allocate the task status array")
        cdef RunArgs args
        args.geo = &self.geo
        args.kind = self.kind
        args.is_double = self.is_double
        args.x = cnp.PyArray_DATA(x)
        args.y = cnp.PyArray_DATA(y)
        args.bias = cnp.PyArray_DATA(self.bias) if self.bias is not None else NULL
        args.zeros = cnp.PyArray_DATA(self.zeros)
        args.weights = self.packed.table()
        args.taps_y = <const Py_ssize_t *>cnp.PyArray_DATA(self.taps_y) if self.taps_y is not None else NULL
        args.taps_x = <const Py_ssize_t *>cnp.PyArray_DATA(self.taps_x) if self.taps_x is not None else NULL
        args.tasks = <const Py_ssize_t *>cnp.PyArray_DATA(self.task_array)
        args.chunk = self.chunk
        args.ws_reals = self.ws_reals
        args.ws_bytes = ws_bytes
        args.workspace = workspace
        cdef Py_ssize_t task, failed = -1
        cdef int code = 0
        with nogil:
            if self.threads == 1:
                for task in range(self.ntasks):
                    status[task] = _run_task(&args, task, 0)
            else:
                for task in prange(self.ntasks, num_threads=self.threads, schedule="dynamic"):
                    status[task] = _run_task(&args, task, threadid())
            for task in range(self.ntasks):
                if status[task] != 0 and failed < 0:
                    failed = task
                    code = status[task]
        free(workspace)
        free(status)
        if failed >= 0:
            raise RuntimeError(f"fastdeconv kernel {self.algorithm} failed with status {code} on task "
                               f"{failed} (a bug: please report it)")
        return y


cdef struct RunArgs:
    const fd_geometry *geo
    Kind kind
    bint is_double
    const void *x
    void *y
    const void *bias
    const void *zeros
    const void *const *weights
    const Py_ssize_t *taps_y
    const Py_ssize_t *taps_x
    const Py_ssize_t *tasks
    Py_ssize_t chunk, ws_reals, ws_bytes
    char *workspace


cdef int _run_task(const RunArgs *a, Py_ssize_t task, int tid) noexcept nogil:
    """Run one task on this thread's slice of the workspace."""
    cdef const Py_ssize_t *t = a.tasks + 5 * task
    cdef char *ws = a.workspace + tid * a.ws_bytes
    cdef Py_ssize_t reals_bytes = a.ws_reals * (8 if a.is_double else 4)
    cdef void **pointers = <void **>(ws + reals_bytes)
    cdef Py_ssize_t taps = a.geo.kernel_h * a.geo.kernel_w
    if a.kind == KIND_COL2IM:
        if a.is_double:
            return fd_ddeconv_col2im_band(a.geo, <const double *>a.x, <const double *const *>a.weights,
                                          <const double *>a.bias, <double *>a.y, t[0], t[1], t[2], <double *>ws,
                                          a.chunk, <const double **>pointers, <double **>(pointers + a.chunk))
        return fd_sdeconv_col2im_band(a.geo, <const float *>a.x, <const float *const *>a.weights,
                                      <const float *>a.bias, <float *>a.y, t[0], t[1], t[2], <float *>ws,
                                      a.chunk, <const float **>pointers, <float **>(pointers + a.chunk))
    if a.kind == KIND_PHASE:
        if a.is_double:
            return fd_ddeconv_phase_rows(a.geo, a.taps_y, a.taps_x, <const double *>a.x,
                                         <const double *const *>a.weights, <const double *>a.bias, <double *>a.y,
                                         t[0], t[1], t[2], t[3], t[4], <const double *>a.zeros, a.chunk,
                                         <const double **>pointers, <double **>(pointers + a.chunk * taps))
        return fd_sdeconv_phase_rows(a.geo, a.taps_y, a.taps_x, <const float *>a.x,
                                     <const float *const *>a.weights, <const float *>a.bias, <float *>a.y,
                                     t[0], t[1], t[2], t[3], t[4], <const float *>a.zeros, a.chunk,
                                     <const float **>pointers, <float **>(pointers + a.chunk * taps))
    if a.kind == KIND_DEPTHWISE:
        if a.is_double:
            return fd_ddeconv_depthwise_rows(a.geo, a.taps_y, a.taps_x, <const double *>a.x,
                                             (<const double *const *>a.weights)[0], <const double *>a.bias,
                                             <double *>a.y, t[1], t[2])
        return fd_sdeconv_depthwise_rows(a.geo, a.taps_y, a.taps_x, <const float *>a.x,
                                         (<const float *const *>a.weights)[0], <const float *>a.bias,
                                         <float *>a.y, t[1], t[2])
    if a.is_double:
        return fd_dconv_im2col_band(a.geo, <const double *>a.x, <const double *const *>a.weights,
                                    <const double *>a.bias, <double *>a.y, t[0], t[1], t[2],
                                    <const double *>a.zeros, a.chunk, <const double **>pointers,
                                    <double **>(pointers + a.chunk * taps))
    return fd_sconv_im2col_band(a.geo, <const float *>a.x, <const float *const *>a.weights,
                                <const float *>a.bias, <float *>a.y, t[0], t[1], t[2],
                                <const float *>a.zeros, a.chunk, <const float **>pointers,
                                <float **>(pointers + a.chunk * taps))
