# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython shim between the Python API and the C kernels in src/.

It reads the algorithm table (src/algorithms.c, protocol in src/algorithm.h) by
name and owns what the C side does not: allocation (the packed-weight blob, the
per-thread workspace), errors, the GIL (released around every kernel call) and
threading: an algorithm cuts the output into disjoint tasks, and an OpenMP
``prange`` hands them to threads. Each C kernel is single-threaded; nothing
here nests threads. Nothing here depends on which algorithm runs.

Callers pass C-contiguous arrays of the compute dtype (float32 or float64) and
a resolved :class:`fastdeconv._params.ConvGeometry`; the Python layer has
already validated everything.
"""

import os
import warnings

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
    int fd_gemm_isa_supported(int isa)
    int fd_gemm_get_isa()
    int fd_gemm_set_isa(int isa)
    const char *fd_gemm_isa_name(int isa)

cdef extern from "algorithm.h" nogil:
    enum: FD_FLOAT32, FD_FLOAT64, FD_BLOB_ALIGN, FD_GEMM_CHUNK_MAX_PIXELS, FD_COL2IM_WORKSPACE_BYTES
    ctypedef struct fd_task:
        Py_ssize_t part, row_begin, row_end, col_begin, col_end
    ctypedef struct fd_operands:
        const fd_geometry *geo
        const void *x
        void *y
        const void *bias
        const void *packed
        Py_ssize_t chunk
    ctypedef struct fd_workspace:
        size_t bytes
        Py_ssize_t chunk
    ctypedef const char *(*fd_unsupported_fn)(const fd_geometry *geo) noexcept nogil
    ctypedef int (*fd_pack_fn)(const fd_geometry *geo, const void *weight, void *blob, size_t *bytes) noexcept nogil
    ctypedef fd_workspace (*fd_workspace_fn)(const fd_geometry *geo, int dtype) noexcept nogil
    ctypedef Py_ssize_t (*fd_tasks_fn)(const fd_geometry *geo, int threads, fd_task *tasks) noexcept nogil
    ctypedef int (*fd_run_fn)(const fd_operands *op, const fd_task *task, void *workspace) noexcept nogil
    ctypedef struct fd_algorithm:
        const char *name
        int transposed
        fd_unsupported_fn unsupported
        fd_pack_fn pack[2]
        fd_workspace_fn workspace
        fd_tasks_fn tasks
        fd_run_fn run[2]
    const fd_algorithm *const fd_algorithms[]
    const int fd_algorithm_count

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
# The indirect GEMMs' chunk of output pixels is at most this (src/algorithm.h).
GEMM_CHUNK_MAX_PIXELS = FD_GEMM_CHUNK_MAX_PIXELS
# col2im's column buffer per thread: this many bytes, or one input row if that is larger.
COL2IM_WORKSPACE_BYTES = FD_COL2IM_WORKSPACE_BYTES

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


ISA_ENV = "FASTDECONV_ISA"


def _gemm_isa_from_environment():
    """$FASTDECONV_ISA (portable, avx2 or avx512) forces the GEMM path; parsed once, at import. A
    bad or unsupported value warns and keeps the best path (a warning, not an import error, so that
    a stale variable cannot make the package unimportable)."""
    requested = os.environ.get(ISA_ENV, "").strip()
    if not requested:
        return
    try:
        set_gemm_isa(requested)
    except ValueError as exc:
        warnings.warn(f"{ISA_ENV}={requested!r} ignored: {exc}; using {get_gemm_isa()}", RuntimeWarning,
                      stacklevel=2)


_gemm_isa_from_environment()


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


# ---------------------------------------------------------------------------------------------
# The algorithm table (src/algorithms.c), read by name.

cdef const fd_algorithm *_algorithm(str name, bint transposed) except NULL:
    cdef int i
    for i in range(fd_algorithm_count):
        if fd_algorithms[i].transposed == transposed and fd_algorithms[i].name.decode() == name:
            return fd_algorithms[i]
    raise ValueError(f"algorithm must be one of {algorithms(transposed)}, got {name!r}")


def algorithms(bint transposed):
    """The names of the algorithms for transposed convolutions (True) or convolutions (False),
    in table order."""
    return [fd_algorithms[i].name.decode() for i in range(fd_algorithm_count)
            if fd_algorithms[i].transposed == transposed]


def unsupported(str name, geometry):
    """None when the algorithm can run this layer, else a sentence saying why not."""
    cdef const fd_algorithm *alg = _algorithm(name, geometry.transposed)
    cdef fd_geometry geo = _c_geometry(geometry)
    cdef const char *reason = alg.unsupported(&geo)
    return None if reason == NULL else reason.decode()


cdef int _dtype_index(dtype) except -1:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return FD_FLOAT32
    if dtype == np.float64:
        return FD_FLOAT64
    raise TypeError(f"the CPU kernels compute in float32 or float64, not {dtype}")


cdef class PackedWeights:
    """One layer's weights packed by one algorithm for one compute dtype (float32 or float64).

    ``weight`` is in fastdeconv's layout for ``geometry`` (transposed: (C_in, kH, kW, C_out/g);
    convolution: (C_out, kH, kW, C_in/g)). The packed form serves every input shape whose
    geometry has the same channels, groups, kernel, stride, dilation and leading pads.
    """
    cdef const fd_algorithm *alg
    cdef readonly str algorithm
    cdef readonly object dtype
    cdef int dtype_index
    cdef object storage        # uint8 array holding the blob
    cdef const void *blob      # FD_BLOB_ALIGN-aligned start inside storage

    def __init__(self, str algorithm, weight, geometry):
        self.alg = _algorithm(algorithm, geometry.transposed)
        self.algorithm = algorithm
        self.dtype_index = _dtype_index(weight.dtype)
        self.dtype = np.dtype(weight.dtype)
        reason = unsupported(algorithm, geometry)
        if reason is not None:
            raise ValueError(f"algorithm {algorithm!r} cannot run this layer: {reason}")
        weight = np.ascontiguousarray(weight)
        if weight.shape != geometry.weight_shape:
            raise ValueError(f"weight has shape {weight.shape}, the geometry needs {geometry.weight_shape}")
        cdef fd_geometry geo = _c_geometry(geometry)
        cdef size_t nbytes = 0
        cdef int status
        cdef fd_pack_fn pack = self.alg.pack[self.dtype_index]
        cdef const void *w = cnp.PyArray_DATA(weight)
        with nogil:
            status = pack(&geo, NULL, NULL, &nbytes)
        if status != 0:
            raise MemoryError(f"packing the {algorithm} weights failed with status {status}")
        self.storage = np.empty(nbytes + FD_BLOB_ALIGN, dtype=np.uint8)
        cdef size_t address = <size_t>cnp.PyArray_DATA(self.storage)
        cdef void *blob = <void *>((address + FD_BLOB_ALIGN - 1) // FD_BLOB_ALIGN * FD_BLOB_ALIGN)
        with nogil:
            status = pack(&geo, w, blob, &nbytes)
        if status != 0:
            raise MemoryError(f"packing the {algorithm} weights failed with status {status}")
        self.blob = blob

    @property
    def nbytes(self):
        return self.storage.nbytes


# ---------------------------------------------------------------------------------------------
# Running: a Runner binds packed weights to one geometry (one input shape), cuts the output
# into tasks and runs them on threads. It is built once per input shape (the plan object
# caches it), so a call only allocates the per-thread workspace and runs.

cdef class Runner:
    """Packed weights bound to one geometry, ready to run on threads."""
    cdef fd_geometry geo
    cdef fd_operands operands
    cdef fd_run_fn run_task
    cdef readonly str algorithm
    cdef readonly int threads
    cdef PackedWeights packed
    cdef object bias, task_array
    cdef Py_ssize_t ntasks
    cdef size_t ws_bytes

    def __init__(self, PackedWeights packed, bias, geometry):
        self.algorithm = packed.algorithm
        self.packed = packed
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=packed.dtype)
        self.geo = _c_geometry(geometry)
        cdef const fd_algorithm *alg = packed.alg
        cdef int threads = 1 if geometry.flops < _serial_flops else get_num_threads()
        cdef fd_workspace ws = alg.workspace(&self.geo, packed.dtype_index)
        # Per-thread slices, rounded to cache lines so that threads never share one.
        self.ws_bytes = (ws.bytes + 63) // 64 * 64
        self.ntasks = 0
        if self.geo.batch > 0 and self.geo.out_channels > 0:   # else an empty result: nothing to compute
            self.ntasks = alg.tasks(&self.geo, threads, NULL)
        self.task_array = np.zeros((max(self.ntasks, 1), 5), dtype=np.intp)
        if self.ntasks > 0:
            alg.tasks(&self.geo, threads, <fd_task *>cnp.PyArray_DATA(self.task_array))
        self.threads = max(1, min(threads, self.ntasks))
        self.run_task = alg.run[packed.dtype_index]
        self.operands.geo = &self.geo
        self.operands.packed = packed.blob
        self.operands.bias = cnp.PyArray_DATA(self.bias) if self.bias is not None else NULL
        self.operands.chunk = ws.chunk

    @property
    def tasks(self):
        """The tasks as an (ntasks, 5) array of (part, row_begin, row_end, col_begin, col_end)."""
        return self.task_array[:self.ntasks].copy()

    def run(self, x, y):
        """Fill y (C-contiguous, the packed dtype, this geometry's output shape) from x (C-contiguous)."""
        if self.ntasks == 0:
            return y
        cdef char *workspace = <char *>malloc(max(self.ws_bytes, 1) * self.threads)
        if workspace == NULL:
            raise MemoryError(f"could not allocate {self.ws_bytes * self.threads} bytes of workspace")
        cdef int *status = <int *>calloc(self.ntasks, sizeof(int))
        if status == NULL:
            free(workspace)
            raise MemoryError("could not allocate the task status array")
        cdef fd_operands op = self.operands
        op.x = cnp.PyArray_DATA(x)
        op.y = cnp.PyArray_DATA(y)
        cdef const fd_task *tasks = <const fd_task *>cnp.PyArray_DATA(self.task_array)
        cdef fd_run_fn run_task = self.run_task
        cdef size_t ws_bytes = self.ws_bytes
        cdef Py_ssize_t task, failed = -1
        cdef int code = 0
        with nogil:
            if self.threads == 1:
                for task in range(self.ntasks):
                    status[task] = run_task(&op, &tasks[task], workspace)
            else:
                for task in prange(self.ntasks, num_threads=self.threads, schedule="dynamic"):
                    status[task] = run_task(&op, &tasks[task], workspace + threadid() * ws_bytes)
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
