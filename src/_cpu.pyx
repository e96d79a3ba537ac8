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

cnp.import_array()

cdef extern from "threads.h" nogil:
    int fd_openmp_enabled()
    int fd_omp_max_threads()
    int fd_omp_version()

cdef extern from "conv_geometry.h" nogil:
    ctypedef struct fd_geometry:
        Py_ssize_t batch, in_h, in_w, in_channels
        Py_ssize_t out_h, out_w, out_channels
        Py_ssize_t kernel_h, kernel_w
        Py_ssize_t stride_h, stride_w
        Py_ssize_t dilation_h, dilation_w
        Py_ssize_t pad_top, pad_left
        Py_ssize_t groups

cdef extern from "gemm.h" nogil:
    size_t fd_sgemm_packed_size(size_t K, size_t N)
    size_t fd_dgemm_packed_size(size_t K, size_t N)
    void fd_sgemm_pack_b(size_t K, size_t N, const float *b, Py_ssize_t stride_k, Py_ssize_t stride_n, float *packed)
    void fd_dgemm_pack_b(size_t K, size_t N, const double *b, Py_ssize_t stride_k, Py_ssize_t stride_n, double *packed)
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
                              Py_ssize_t ry, Py_ssize_t row_begin, Py_ssize_t row_end, const float *zeros,
                              Py_ssize_t chunk_pixels, const float **a_rows, float **c_rows)
    int fd_ddeconv_phase_rows(const fd_geometry *geo, const Py_ssize_t *taps_y, const Py_ssize_t *taps_x,
                              const double *x, const double *const *packed_w, const double *bias, double *y,
                              Py_ssize_t ry, Py_ssize_t row_begin, Py_ssize_t row_end, const double *zeros,
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

# Workspace bound per thread for the col2im column buffer: 1 MiB (it stays in the
# 2 MiB L2), or one input row's columns (in_w * kH*kW*Cog elements) if that is larger.
COL2IM_WORKSPACE_BYTES = 1 << 20
# Output pixels per indirect-GEMM call in im2col: bounds the pointer buffers to
# IM2COL_CHUNK_PIXELS * (kH*kW + 1) pointers per thread.
IM2COL_CHUNK_PIXELS = 512

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


cdef object _pack(real[::1] b, Py_ssize_t offset, Py_ssize_t K, Py_ssize_t N, Py_ssize_t stride_k,
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


cdef Py_ssize_t _bands_per_image(Py_ssize_t batch, Py_ssize_t rows, int threads):
    """Split each image's output rows so that there are about 2 bands per thread."""
    cdef Py_ssize_t want
    if threads <= 1 or batch >= 2 * threads:
        return 1
    want = (2 * threads + batch - 1) // batch
    return min(want, rows)


def deconv_col2im(x, PackedWeights packed, bias, geometry, y):
    """y = conv_transpose2d(x) by GEMM + col2im; x, y C-contiguous of one float dtype."""
    if x.dtype == np.float32:
        _deconv_col2im[float](x.reshape(-1), packed, bias, geometry, y.reshape(-1))
    else:
        _deconv_col2im[double](x.reshape(-1), packed, bias, geometry, y.reshape(-1))
    return y


cdef _deconv_col2im(real[::1] x, PackedWeights packed, object bias, object geometry, real[::1] y):
    cdef fd_geometry geo = _c_geometry(geometry)
    cdef int threads = get_num_threads()
    cdef Py_ssize_t taps_cols = geo.kernel_h * geo.kernel_w * (geo.out_channels // geo.groups)
    cdef Py_ssize_t col_pixels = max(geo.in_w, COL2IM_WORKSPACE_BYTES // (sizeof(real) * max(taps_cols, 1)))
    cdef Py_ssize_t bands = _bands_per_image(geo.batch, geo.out_h, threads)
    cdef Py_ssize_t band_rows = (geo.out_h + bands - 1) // bands
    bands = (geo.out_h + band_rows - 1) // band_rows
    cdef Py_ssize_t tasks = geo.batch * bands
    if tasks == 0:
        return
    threads = min(threads, tasks)
    col = np.empty((threads, col_pixels * taps_cols), dtype=np.asarray(x).dtype)
    pointers = np.empty((threads, 2 * col_pixels), dtype=np.intp)
    status = np.zeros(tasks, dtype=np.intc)
    cdef real[:, ::1] col_view = col
    cdef Py_ssize_t[:, ::1] ptr_view = pointers
    cdef int[::1] status_view = status
    cdef real[::1] bias_view = bias if bias is not None else None
    cdef const real *bias_ptr = &bias_view[0] if bias is not None else NULL
    cdef const real *const *w_table = <const real *const *>packed.table()
    cdef Py_ssize_t task, n, oy0, oy1, tid
    for task in prange(tasks, nogil=True, num_threads=threads, schedule="dynamic"):
        tid = threadid()
        n = task // bands
        oy0 = (task % bands) * band_rows
        oy1 = min(oy0 + band_rows, geo.out_h)
        if real is float:
            status_view[task] = fd_sdeconv_col2im_band(
                &geo, &x[0], w_table, bias_ptr, &y[0], n, oy0, oy1, &col_view[tid, 0], col_pixels,
                <const float **>&ptr_view[tid, 0], <float **>&ptr_view[tid, col_pixels])
        else:
            status_view[task] = fd_ddeconv_col2im_band(
                &geo, &x[0], w_table, bias_ptr, &y[0], n, oy0, oy1, &col_view[tid, 0], col_pixels,
                <const double **>&ptr_view[tid, 0], <double **>&ptr_view[tid, col_pixels])
    _check(status, "deconv_col2im")


def conv_im2col(x, PackedWeights packed, bias, geometry, y):
    """y = conv2d(x) by im2col (an indirection buffer) + GEMM."""
    if x.dtype == np.float32:
        _conv_im2col[float](x.reshape(-1), packed, bias, geometry, y.reshape(-1))
    else:
        _conv_im2col[double](x.reshape(-1), packed, bias, geometry, y.reshape(-1))
    return y


cdef _conv_im2col(real[::1] x, PackedWeights packed, object bias, object geometry, real[::1] y):
    cdef fd_geometry geo = _c_geometry(geometry)
    cdef int threads = get_num_threads()
    cdef Py_ssize_t taps = geo.kernel_h * geo.kernel_w
    cdef Py_ssize_t chunk = IM2COL_CHUNK_PIXELS
    cdef Py_ssize_t bands = _bands_per_image(geo.batch, geo.out_h, threads)
    cdef Py_ssize_t band_rows = (geo.out_h + bands - 1) // bands
    bands = (geo.out_h + band_rows - 1) // band_rows
    cdef Py_ssize_t tasks = geo.batch * bands
    if tasks == 0:
        return
    threads = min(threads, tasks)
    zeros = np.zeros(max(geo.in_channels // geo.groups, 1), dtype=np.asarray(x).dtype)
    cdef real[::1] zero_view = zeros
    pointers = np.empty((threads, chunk * (taps + 1)), dtype=np.intp)
    status = np.zeros(tasks, dtype=np.intc)
    cdef Py_ssize_t[:, ::1] ptr_view = pointers
    cdef int[::1] status_view = status
    cdef real[::1] bias_view = bias if bias is not None else None
    cdef const real *bias_ptr = &bias_view[0] if bias is not None else NULL
    cdef const real *const *w_table = <const real *const *>packed.table()
    cdef Py_ssize_t task, n, oy0, oy1, tid
    for task in prange(tasks, nogil=True, num_threads=threads, schedule="dynamic"):
        tid = threadid()
        n = task // bands
        oy0 = (task % bands) * band_rows
        oy1 = min(oy0 + band_rows, geo.out_h)
        if real is float:
            status_view[task] = fd_sconv_im2col_band(
                &geo, &x[0], w_table, bias_ptr, &y[0], n, oy0, oy1, &zero_view[0], chunk,
                <const float **>&ptr_view[tid, 0], <float **>&ptr_view[tid, chunk * taps])
        else:
            status_view[task] = fd_dconv_im2col_band(
                &geo, &x[0], w_table, bias_ptr, &y[0], n, oy0, oy1, &zero_view[0], chunk,
                <const double **>&ptr_view[tid, 0], <double **>&ptr_view[tid, chunk * taps])
    _check(status, "conv_im2col")


cdef _check(status, str kernel):
    bad = status[status != 0]
    if bad.size:
        raise RuntimeError(f"fastdeconv kernel {kernel} failed with status {int(bad[0])} (a bug: please report it)")


# Indirect-GEMM row chunks are sized so that the A rows of one chunk (chunk * K
# elements) stay in about 1 MiB of L2 next to the B panel; a multiple of 48 rows
# keeps whole register tiles (MR = 6, 8, 12, 16 all divide 48).
GEMM_CHUNK_BYTES = 1 << 20


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
    """Pack the (Ty*Tx*Cig, Cog) sub-kernel of every (group, row phase, column phase)."""
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_hw, geometry.stride, geometry.dilation
    taps_y = phase_taps(sh, kh, dh, geometry.pad[0][0])
    taps_x = phase_taps(sw, kw, dw, geometry.pad[1][0])
    cig, cog = geometry.in_per_group, geometry.out_per_group
    w = weight.reshape(geometry.groups, cig, kh, kw, cog)
    arrays = []
    for g in range(geometry.groups):
        for ry in range(sh):
            kys = taps_y[ry, 1:1 + taps_y[ry, 0]]
            for rx in range(sw):
                kxs = taps_x[rx, 1:1 + taps_x[rx, 0]]
                sub = np.ascontiguousarray(w[g][:, kys][:, :, kxs].transpose(1, 2, 0, 3)).reshape(-1, cog)
                arrays.append(_pack_dispatch(sub.reshape(-1), 0, sub.shape[0], cog, cog, 1))
    return PackedWeights(arrays, taps_y, taps_x)


def deconv_phase(x, PackedWeights packed, bias, geometry, y):
    """y = conv_transpose2d(x) by stride-phase decomposition."""
    if x.dtype == np.float32:
        _deconv_phase[float](x.reshape(-1), packed, bias, geometry, y.reshape(-1))
    else:
        _deconv_phase[double](x.reshape(-1), packed, bias, geometry, y.reshape(-1))
    return y


cdef _deconv_phase(real[::1] x, PackedWeights packed, object bias, object geometry, real[::1] y):
    cdef fd_geometry geo = _c_geometry(geometry)
    cdef int threads = get_num_threads()
    cdef Py_ssize_t sh = geo.stride_h, taps_max = geo.kernel_h * geo.kernel_w
    cdef Py_ssize_t cig = geo.in_channels // geo.groups
    cdef Py_ssize_t chunk = _gemm_chunk(taps_max * cig, sizeof(real))
    # Units of work: (row phase, range of rows across the batch), about 4 per thread.
    task_list = []
    cdef Py_ssize_t ry, rows, per_task
    for ry in range(min(sh, geo.out_h)):
        rows = geo.batch * ((geo.out_h - ry + sh - 1) // sh)
        per_task = max(1, _ceil_div(rows * sh, 4 * threads)) if threads > 1 else rows
        task_list += [(ry, r0, min(r0 + per_task, rows)) for r0 in range(0, rows, per_task)]
    cdef Py_ssize_t tasks = len(task_list)
    if tasks == 0:
        return
    threads = min(threads, tasks)
    task_array = np.array(task_list, dtype=np.intp)
    cdef Py_ssize_t[:, ::1] task_view = task_array
    zeros = np.zeros(max(cig, 1), dtype=np.asarray(x).dtype)
    cdef real[::1] zero_view = zeros
    pointers = np.empty((threads, chunk * (taps_max + 1)), dtype=np.intp)
    status = np.zeros(tasks, dtype=np.intc)
    cdef Py_ssize_t[:, ::1] ptr_view = pointers
    cdef int[::1] status_view = status
    cdef Py_ssize_t[:, ::1] taps_y = packed.taps_y
    cdef Py_ssize_t[:, ::1] taps_x = packed.taps_x
    cdef real[::1] bias_view = bias if bias is not None else None
    cdef const real *bias_ptr = &bias_view[0] if bias is not None else NULL
    cdef const real *const *w_table = <const real *const *>packed.table()
    cdef Py_ssize_t task, tid
    for task in prange(tasks, nogil=True, num_threads=threads, schedule="dynamic"):
        tid = threadid()
        if real is float:
            status_view[task] = fd_sdeconv_phase_rows(
                &geo, &taps_y[0, 0], &taps_x[0, 0], &x[0], w_table, bias_ptr, &y[0], task_view[task, 0],
                task_view[task, 1], task_view[task, 2], &zero_view[0], chunk,
                <const float **>&ptr_view[tid, 0], <float **>&ptr_view[tid, chunk * taps_max])
        else:
            status_view[task] = fd_ddeconv_phase_rows(
                &geo, &taps_y[0, 0], &taps_x[0, 0], &x[0], w_table, bias_ptr, &y[0], task_view[task, 0],
                task_view[task, 1], task_view[task, 2], &zero_view[0], chunk,
                <const double **>&ptr_view[tid, 0], <double **>&ptr_view[tid, chunk * taps_max])
    _check(status, "deconv_phase")


def pack_deconv_depthwise(weight, geometry):
    """Reorder a (C_in, kH, kW, Cog) depthwise weight to (kH, kW, C_out), plus the phase tap tables."""
    if geometry.in_per_group != 1:
        raise ValueError(f"the depthwise algorithm needs groups == C_in, got groups={geometry.groups}, "
                         f"C_in={geometry.in_channels}")
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_hw, geometry.stride, geometry.dilation
    reordered = np.ascontiguousarray(weight.transpose(1, 2, 0, 3)).reshape(-1)
    return PackedWeights([reordered], phase_taps(sh, kh, dh, geometry.pad[0][0]),
                         phase_taps(sw, kw, dw, geometry.pad[1][0]))


def deconv_depthwise(x, PackedWeights packed, bias, geometry, y):
    """y = conv_transpose2d(x) for groups == C_in, by the direct depthwise kernel."""
    if x.dtype == np.float32:
        _deconv_depthwise[float](x.reshape(-1), packed.arrays[0], packed, bias, geometry, y.reshape(-1))
    else:
        _deconv_depthwise[double](x.reshape(-1), packed.arrays[0], packed, bias, geometry, y.reshape(-1))
    return y


cdef _deconv_depthwise(real[::1] x, real[::1] wr, PackedWeights packed, object bias, object geometry,
                       real[::1] y):
    cdef fd_geometry geo = _c_geometry(geometry)
    cdef int threads = get_num_threads()
    cdef Py_ssize_t rows = geo.batch * geo.out_h
    cdef Py_ssize_t per_task = max(1, _ceil_div(rows, 4 * threads)) if threads > 1 else max(rows, 1)
    cdef Py_ssize_t tasks = _ceil_div(rows, per_task)
    if tasks == 0:
        return
    threads = min(threads, tasks)
    status = np.zeros(tasks, dtype=np.intc)
    cdef int[::1] status_view = status
    cdef Py_ssize_t[:, ::1] taps_y = packed.taps_y
    cdef Py_ssize_t[:, ::1] taps_x = packed.taps_x
    cdef real[::1] bias_view = bias if bias is not None else None
    cdef const real *bias_ptr = &bias_view[0] if bias is not None else NULL
    cdef Py_ssize_t task
    for task in prange(tasks, nogil=True, num_threads=threads, schedule="dynamic"):
        if real is float:
            status_view[task] = fd_sdeconv_depthwise_rows(
                &geo, &taps_y[0, 0], &taps_x[0, 0], &x[0], &wr[0], bias_ptr, &y[0], task * per_task,
                min((task + 1) * per_task, rows))
        else:
            status_view[task] = fd_ddeconv_depthwise_rows(
                &geo, &taps_y[0, 0], &taps_x[0, 0], &x[0], &wr[0], bias_ptr, &y[0], task * per_task,
                min((task + 1) * per_task, rows))
    _check(status, "deconv_depthwise")
