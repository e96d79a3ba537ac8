# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython shim between the Python API and the C kernels in src/.

It reads the algorithm table (src/algorithms/algorithms.c, protocol in
src/algorithms/algorithm.h) by name and owns what the C side does not:
allocation (the packed-weight blob, the per-thread workspace), errors, the GIL
(released around every kernel call) and threading: an algorithm cuts the output
into disjoint tasks, and the package's own thread pool (src/runtime/pool.c)
hands them to the calling thread and its helpers.
Each C kernel is single-threaded; nothing here nests threads. Nothing here
depends on which algorithm runs.

Between tasks the calling thread looks for Ctrl-C (``Runner.run``).

Callers pass C-contiguous arrays of the compute dtype (float32 or float64) and
a resolved :class:`fastdeconv._params.ConvGeometry`; the Python layer has
already validated everything.
"""

import math
import os
import threading
import warnings

import numpy as np
cimport numpy as cnp

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, calloc, free

cnp.import_array()

cdef extern from "runtime/pool.h" nogil:
    ctypedef int (*fd_pool_task_fn)(void *context, Py_ssize_t task, int slot) noexcept nogil
    enum: FD_POOL_DONE, FD_POOL_STOPPED
    int fd_pool_run(Py_ssize_t ntasks, int participants, fd_pool_task_fn fn, void *context)
    int fd_pool_helpers()
    int fd_pool_others_running()
    const char *fd_pool_backend()
    long long fd_monotonic_ns()

cdef extern from "Python.h":
    unsigned long PyThread_get_thread_ident() nogil
    # Declared without an exception value on purpose: the pool's task function calls it without the
    # GIL's exception machinery and Runner.run carries the KeyboardInterrupt it sets out by hand.
    int PyErr_CheckSignals()

cdef extern from "runtime/conv_geometry.h" nogil:
    enum: FD_MAX_PHASE_TAPS
    ctypedef struct fd_geometry:
        Py_ssize_t batch, in_h, in_w, in_channels
        Py_ssize_t out_h, out_w, out_channels
        Py_ssize_t kernel_h, kernel_w
        Py_ssize_t stride_h, stride_w
        Py_ssize_t dilation_h, dilation_w
        Py_ssize_t pad_top, pad_left
        Py_ssize_t groups

cdef extern from "kernels/gemm.h" nogil:
    enum: FD_ISA_COUNT
    int fd_gemm_isa_supported(int isa)
    int fd_gemm_isa_compiled(int isa)
    int fd_gemm_get_isa()
    int fd_gemm_set_isa(int isa)
    size_t fd_gemm_panel_budget()
    void fd_gemm_set_panel_budget(long long nbytes)
    const char *fd_gemm_isa_name(int isa)

cdef extern from "kernels/winograd_tiles.h" nogil:
    enum: FD_WINOGRAD_STREAM_AUTO
    size_t fd_winograd_stream_min_bytes()
    int fd_winograd_set_stream_output(int mode)
    int fd_winograd_isa_compiled(int isa)

cdef extern from "kernels/depthwise_rows.h" nogil:
    int fd_depthwise_isa_compiled(int isa)

cdef extern from "kernels/planar_rows.h" nogil:
    int fd_planar_isa_compiled(int isa)
    int fd_planar_block_outputs()

cdef extern from "algorithms/algorithm.h" nogil:
    enum: FD_FLOAT32, FD_FLOAT64, FD_BLOB_ALIGN, FD_GEMM_CHUNK_MAX_PIXELS, FD_COL2IM_WORKSPACE_BYTES, FD_COL2IM_MIN_PIXELS
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
    ctypedef const char *(*fd_delegate_fn)(const fd_geometry *geo) noexcept nogil
    ctypedef struct fd_algorithm:
        const char *name
        int transposed
        fd_unsupported_fn unsupported
        fd_pack_fn pack[2]
        fd_workspace_fn workspace
        fd_tasks_fn tasks
        fd_run_fn run[2]
        fd_delegate_fn delegate
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
# The indirect GEMMs' chunk of output pixels is at most this (src/algorithms/algorithm.h).
GEMM_CHUNK_MAX_PIXELS = FD_GEMM_CHUNK_MAX_PIXELS
# col2im's column buffer per thread: this many bytes, or COL2IM_MIN_PIXELS input pixels' columns
# (kH*kW*C_out/groups elements each) if that is larger (src/algorithms/algorithm.h).
COL2IM_WORKSPACE_BYTES = FD_COL2IM_WORKSPACE_BYTES
COL2IM_MIN_PIXELS = FD_COL2IM_MIN_PIXELS

# ---------------------------------------------------------------------------------------------
# Threads.

# The most threads a call uses: set_num_threads refuses more, OMP_NUM_THREADS is capped to it.
# A fixed number, so that a script's set_num_threads(n) does not work on one machine and fail on
# another; raised to the CPU count on machines with more CPUs.
MAX_THREADS = max(256, os.cpu_count() or 1)

THREADS_ENV = "OMP_NUM_THREADS"


def _default_threads():
    """The default thread count, read once at import: $OMP_NUM_THREADS (its first entry, as OpenMP
    reads "4,2"), honoured because scripts and job schedulers set it to limit every library's threads;
    else the CPUs this process may run on (its affinity mask, as OpenMP counts them), else the CPU count.
    Capped to MAX_THREADS. A value that is not a positive integer warns and is ignored."""
    text = os.environ.get(THREADS_ENV, "").split(",")[0].strip()
    if text:
        try:
            value = int(text)
            if value < 1:
                raise ValueError
            return min(value, MAX_THREADS)
        except ValueError:
            warnings.warn(f"{THREADS_ENV}={os.environ[THREADS_ENV]!r} ignored: not a positive integer; using "
                          f"the CPU count", RuntimeWarning, stacklevel=2)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_THREADS))


_DEFAULT_THREADS = _default_threads()
cdef int _requested_threads = 0   # 0: _DEFAULT_THREADS


def _cpu_counts():
    """(CPUs this process may run on, CPUs online): the first bounds a call's threads, the second is what
    /proc/loadavg's running count spreads over."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return max(1, usable), max(1, os.cpu_count() or 1, usable)


# A default-threads call (set_num_threads never called, or 0) runs on fewer threads when other threads
# already take the CPUs: a helper that the OS deschedules while it holds a task makes the caller wait
# for it (asv_benches/NOTES.md has the measurement). fd_pool_others_running counts them machine-wide
# (Linux; elsewhere, or with an explicit set_num_threads(n), n threads are used); when this process may run on only some of the
# CPUs, the others are assumed spread evenly. Re-read at most once per millisecond (the smaller of the
# last two readings).
cdef int _usable_cpus, _online_cpus
_usable_cpus, _online_cpus = _cpu_counts()


cdef int _participants(int threads) noexcept nogil:
    """Threads for a call bound to `threads`: all of them when set explicitly, else at most the CPUs
    not taken by other running threads (at least 1)."""
    if threads <= 1 or _requested_threads != 0:
        return threads
    cdef int others = fd_pool_others_running()
    if others < 0:
        return threads
    cdef long long taken_here = (<long long>others * _usable_cpus + _online_cpus - 1) // _online_cpus
    cdef long long spare = _usable_cpus - taken_here
    return <int>max(1, min(<long long>threads, spare))


def participants(int threads):
    """The threads a call bound to `threads` would use now (see _participants); for tests."""
    return _participants(threads)

# Python runs signal handlers in its main thread only: Runner.run looks for them there alone.
# The thread that forked is the child's main thread.
cdef unsigned long _main_thread = threading.main_thread().ident


def _main_thread_after_fork():
    global _main_thread
    _main_thread = PyThread_get_thread_ident()


os.register_at_fork(after_in_child=_main_thread_after_fork)


def set_num_threads(n):
    """Threads used by every later call, 1 to MAX_THREADS; 0 restores the default (OMP_NUM_THREADS,
    else the CPUs this process may use, capped to MAX_THREADS). Forked children keep their threads:
    the pool starts fresh helpers there (src/runtime/pool.c)."""
    global _requested_threads
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"n must be an int, got {n!r}")
    if not 0 <= n <= MAX_THREADS:
        raise ValueError(f"n must be between 0 and MAX_THREADS={MAX_THREADS} (0: the default), got {n}")
    _requested_threads = n


def get_num_threads():
    """Threads the next call will use: set_num_threads's n, or the default (OMP_NUM_THREADS, else the
    CPUs this process may use), at most MAX_THREADS. Calls below a size threshold use 1 thread
    regardless."""
    return _requested_threads if _requested_threads > 0 else _DEFAULT_THREADS


def pool_helpers():
    """Helper threads the pool has started in this process (0 until a threaded call; 0 again in a
    forked child, which starts its own); they sleep between calls."""
    return fd_pool_helpers()


def _gemm_isa_names():
    """The GEMM ISA paths by name, in the order of their ids (src/kernels/gemm_dispatch.c's table)."""
    return [fd_gemm_isa_name(i).decode() for i in range(FD_ISA_COUNT)]


def build_info():
    """Compile-time and run-time facts for show_config()."""
    names = _gemm_isa_names()
    isas = {name: bool(fd_gemm_isa_supported(i)) for i, name in enumerate(names)}
    # Per ISA path, the kernel families that have code of their own for it in this build (compiled in,
    # whatever this CPU supports); a family not listed runs its portable code on that path (every
    # family on a path that is not compiled in; the Winograd transforms on neon).
    compiled = {name: [family for family, has in (("gemm", fd_gemm_isa_compiled(i)),
                                                 ("winograd", fd_winograd_isa_compiled(i)),
                                                 ("depthwise", fd_depthwise_isa_compiled(i)),
                                                 ("planar", fd_planar_isa_compiled(i))) if has]
                for i, name in enumerate(names)}
    return {
        "thread_pool": fd_pool_backend().decode(),
        "gemm_isa": fd_gemm_isa_name(fd_gemm_get_isa()).decode(),
        "gemm_isa_supported": isas,
        "isa_kernels_compiled": compiled,
        "winograd_stream_min_bytes": get_winograd_stream_min_bytes(),
        "gemm_panel_budget_bytes": get_gemm_panel_budget(),
    }


def set_gemm_isa(str name):
    """Force a GEMM ISA path by name (one of build_info()["gemm_isa_supported"]: "portable", "avx2",
    "avx512", "neon"); for tests and benchmarks."""
    names = _gemm_isa_names()
    if name not in names:
        *others, last = names
        raise ValueError(f"unknown GEMM ISA {name!r}; choose {', '.join(others)} or {last}")
    if fd_gemm_set_isa(names.index(name)) != 0:
        raise ValueError(f"the {name} GEMM path is not supported on this CPU/build")


def get_gemm_isa():
    return fd_gemm_isa_name(fd_gemm_get_isa()).decode()


def planar_block_outputs():
    """Outputs the "planar" kernel of the current ISA computes over one load of its input vectors: 8 with
    32 vector registers (AVX-512, NEON), 4 with 16 (AVX2, SSE2)."""
    return fd_planar_block_outputs()


def set_gemm_panel_budget(nbytes):
    """Force the GEMM's panel budget (src/kernels/gemm.h: B panels of more bytes run in blocks of taps,
    which changes the order of their sums; 0: never cut; rounded down to whole KiB), or restore the
    automatic choice (None: half of one core's L2 on Intel, a quarter on AMD, 256 KiB where the L2 size
    is unknown). For tests and benchmarks."""
    if nbytes is None:
        fd_gemm_set_panel_budget(-1)
        return
    if not isinstance(nbytes, int) or isinstance(nbytes, bool):
        raise TypeError(f"nbytes must be an int or None, got {nbytes!r}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0 (0: never cut a panel), got {nbytes}; pass None for the automatic budget")
    fd_gemm_set_panel_budget(min(nbytes, 1 << 40))


def get_gemm_panel_budget():
    """The GEMM's panel budget in bytes (0: panels are never cut)."""
    return int(fd_gemm_panel_budget())


def set_winograd_stream_output(mode):
    """Force the "winograd" algorithm's non-temporal output stores on (True: every output) or off (False),
    or restore the automatic choice (None: every output on Intel CPUs with AVX-512, outputs of a third of
    the last-level cache or more on other CPUs with AVX-512; src/kernels/winograd_tiles.h). For tests and
    benchmarks; results are the same bits either way."""
    if mode is not None and not isinstance(mode, bool):
        raise TypeError(f"mode must be True, False or None, got {mode!r}")
    fd_winograd_set_stream_output(FD_WINOGRAD_STREAM_AUTO if mode is None else int(mode))


def get_winograd_stream_min_bytes():
    """The smallest layer output (bytes, all images) that the "winograd" algorithm writes with
    non-temporal stores on the AVX-512 path: 0 for every output, None for none."""
    cdef size_t least = fd_winograd_stream_min_bytes()
    return None if least == <size_t>-1 else least


ISA_ENV = "FASTDECONV_ISA"


def _gemm_isa_from_environment():
    """$FASTDECONV_ISA (portable, avx2, avx512 or neon) forces the GEMM path; parsed once, at import. A
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
# The algorithm table (src/algorithms/algorithms.c), read by name.

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


def delegate(str name, geometry):
    """The algorithm whose kernel runs this geometry for `name`, on its own packing (which `name`'s
    packing holds), or None where `name`'s own kernel runs it."""
    cdef const fd_algorithm *alg = _algorithm(name, geometry.transposed)
    if alg.delegate == NULL:
        return None
    cdef fd_geometry geo = _c_geometry(geometry)
    cdef const char *other = alg.delegate(&geo)
    return None if other == NULL else other.decode()


cdef int _dtype_index(dtype) except -1:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return FD_FLOAT32
    if dtype == np.float64:
        return FD_FLOAT64
    raise TypeError(f"the CPU kernels compute in float32 or float64, not {dtype}")


# One spare workspace kept between calls (taken and given back under the GIL; a call made while another
# holds it allocates its own): a fresh allocation above glibc's mmap threshold (32 MiB: a few MiB per
# thread at 12-16 threads) was mapped, faulted in and unmapped on every call, with TLB shootdowns across
# every thread (asv_benches/NOTES.md). The largest workspace up to _SPARE_WORKSPACE_MAX_BYTES is kept.
cdef char *_spare_workspace = NULL
cdef size_t _spare_workspace_bytes = 0
cdef size_t _SPARE_WORKSPACE_MAX_BYTES = 256 << 20


cdef char *_take_workspace(size_t *nbytes):
    """At least *nbytes bytes: the spare when it is free and large enough (*nbytes becomes its size), else
    a new allocation (NULL when that fails)."""
    global _spare_workspace, _spare_workspace_bytes
    cdef char *memory = _spare_workspace
    if memory != NULL and _spare_workspace_bytes >= nbytes[0]:
        _spare_workspace = NULL
        nbytes[0] = _spare_workspace_bytes
        return memory
    return <char *>malloc(nbytes[0])


cdef void _give_back_workspace(char *memory, size_t nbytes):
    """Keep `memory` (nbytes) as the spare when it is larger than the spare and within the bound; else free it."""
    global _spare_workspace, _spare_workspace_bytes
    if nbytes <= _SPARE_WORKSPACE_MAX_BYTES and (_spare_workspace == NULL or nbytes > _spare_workspace_bytes):
        free(_spare_workspace)
        _spare_workspace = memory
        _spare_workspace_bytes = nbytes
    else:
        free(memory)


def spare_workspace_bytes():
    """Bytes of the spare workspace kept between calls (0 when none is kept)."""
    return _spare_workspace_bytes if _spare_workspace != NULL else 0


cdef inline char *_line_up(char *p) noexcept nogil:
    """p rounded up to the next FD_BLOB_ALIGN (64-byte) boundary."""
    return p + (FD_BLOB_ALIGN - <size_t>p % FD_BLOB_ALIGN) % FD_BLOB_ALIGN


def _packing_of(geometry):
    """What the size and layout of packed weights depend on (algorithm.h): the kind, channels, groups,
    kernel, stride and dilation. The leading pads pick entries of the phase tables, within their bounds
    whatever the pads (a Dask block runs its layer with its own pads)."""
    return (geometry.transposed, geometry.in_channels, geometry.out_channels, geometry.groups, geometry.kernel_hw,
            geometry.stride, geometry.dilation)


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
    cdef readonly tuple packing   # what the blob depends on (_packing_of): a Runner's geometry must match

    def __init__(self, str algorithm, weight, geometry):
        self.packing = _packing_of(geometry)
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
        cdef void *blob = _line_up(<char *>cnp.PyArray_DATA(self.storage))
        with nogil:
            status = pack(&geo, w, blob, &nbytes)
        if status != 0:
            raise MemoryError(f"packing the {algorithm} weights failed with status {status}")
        self.blob = blob

    @property
    def nbytes(self):
        return self.storage.nbytes


def all_finite(cnp.ndarray x):
    """Whether every element of a C-contiguous float32 or float64 array is finite (no Inf, no NaN): its
    exponent bits, read as integers (a loop the compiler vectorises), never all ones."""
    if not cnp.PyArray_IS_C_CONTIGUOUS(x) or x.dtype.char not in "fd":
        raise ValueError(f"x must be a C-contiguous float32 or float64 array, got {x.dtype} "
                         f"{'C-contiguous' if cnp.PyArray_IS_C_CONTIGUOUS(x) else 'strided'}")
    cdef Py_ssize_t i, n = cnp.PyArray_SIZE(x)
    cdef const uint32_t *words = <const uint32_t *>cnp.PyArray_DATA(x)
    cdef const uint64_t *longs = <const uint64_t *>cnp.PyArray_DATA(x)
    cdef uint32_t bad32 = 0
    cdef uint64_t bad64 = 0
    cdef bint single = x.dtype.char == "f"
    with nogil:
        if single:
            for i in range(n):
                bad32 |= (words[i] & 0x7f800000u) == 0x7f800000u
        else:
            for i in range(n):
                bad64 |= (longs[i] & 0x7ff0000000000000u) == 0x7ff0000000000000u
    return bad32 == 0 and bad64 == 0


def empty_result(shape, dtype):
    """A new C-contiguous array, uninitialised, whose data starts on an FD_BLOB_ALIGN (64-byte)
    boundary: a view into a slightly larger array of the same dtype. numpy's own large arrays start
    16 bytes past a cache line, which puts every 64-byte vector store of a kernel across two lines."""
    dtype = np.dtype(dtype)
    cdef Py_ssize_t itemsize = dtype.itemsize
    count = math.prod(shape)
    cdef cnp.ndarray buffer = np.empty(count + FD_BLOB_ALIGN // itemsize, dtype)
    cdef char *data = <char *>cnp.PyArray_DATA(buffer)
    cdef Py_ssize_t start = (_line_up(data) - data) // itemsize
    return buffer[start:start + count].reshape(shape)


# ---------------------------------------------------------------------------------------------
# Running: a Runner binds packed weights to one geometry (one input shape), cuts the output
# into tasks and runs them on threads. It is built once per input shape (the CPU backend's packed
# layer caches it), so a call only allocates the per-thread workspace and runs.

# How a call is cut into tasks (_count_tasks). Threads claim tasks one at a time (src/runtime/pool.c), so a
# thread that the OS deschedules on a busy machine delays only the task it holds while the others take
# the rest: the finer the cut, the better that balances, as long as a task keeps enough work for the
# GEMM to stay efficient (each task re-reads its part of the packed weights and pays a claim).
# A threaded call is cut into at least _tasks_per_thread tasks per thread, each of at least
# _min_task_flops FLOPs, as far as the algorithm's tasks rule can cut (rows of one image, images).
# 1 MFLOP is far above what a claim costs, and the GEMM keeps its packed weights per task
# (asv_benches/NOTES.md: how the suite's cases are cut, and a finer cut measured).
cdef int _tasks_per_thread = 4
cdef double _min_task_flops = 1e6

# A task is also the unit between two looks for Ctrl-C: a call's tasks are cut finer (as for 2x, 4x, ...
# the threads) until each has at most _task_flops FLOPs (float64 counts double) and _task_elements
# output elements (tens of ms of work). Only calls of several GFLOPs or 16M output elements are
# affected. col2im's bands recompute the input rows they share (asv_benches/NOTES.md: the cost
# measured; its automatic choices are far smaller). The cut stops before its tasks would hold fewer than
# _task_min_chunks of the algorithm's chunks on average (the workspace's `chunk`: output pixels of an
# indirect GEMM, input pixels of col2im, tiles of winograd): each chunk reads all of the packed weights,
# so smaller tasks read large weights again and again (PSPNet's 72 MiB bottleneck, cut into its 60
# output rows for Ctrl-C, read them 60 times a call).
cdef double _task_flops = 4e9
cdef double _task_elements = 1 << 24
cdef int _task_min_chunks = 1
# How often the calling thread looks for signals during a call.
cdef long long _poll_ns = 20_000_000


def set_task_flops(double flops):
    """Cut tasks until each is at most `flops` FLOPs (the Ctrl-C granularity); returns the previous
    value. For tests and benchmarks (1e300: the algorithms' own cut)."""
    global _task_flops
    previous = _task_flops
    _task_flops = flops
    return previous


def set_task_min_chunks(int chunks):
    """Stop the Ctrl-C cut before the tasks would hold fewer than `chunks` of their algorithm's chunks on
    average (output pixels per task against `chunks` times the chunk); returns the previous value. For
    tests (0: cut down to tiny tasks)."""
    global _task_min_chunks
    if chunks < 0:
        raise ValueError(f"chunks must be at least 0, got {chunks}")
    previous = _task_min_chunks
    _task_min_chunks = chunks
    return previous


def set_task_cut(int tasks_per_thread, double min_task_flops):
    """Cut threaded calls into at least `tasks_per_thread` tasks per thread of at least `min_task_flops`
    FLOPs each (where the algorithm can); returns the previous pair. For tests and benchmarks
    (1, inf: the algorithms' own cut)."""
    global _tasks_per_thread, _min_task_flops
    if tasks_per_thread < 1:
        raise ValueError(f"tasks_per_thread must be at least 1, got {tasks_per_thread}")
    previous = (_tasks_per_thread, _min_task_flops)
    _tasks_per_thread, _min_task_flops = tasks_per_thread, min_task_flops
    return previous


cdef Py_ssize_t _count_tasks(const fd_algorithm *alg, const fd_geometry *geo, int threads, double flops,
                             Py_ssize_t chunk, int *cut) noexcept nogil:
    """The task count for `threads`: the algorithm's own cut, made finer for a threaded call while it has
    fewer than _tasks_per_thread tasks per thread and its tasks stay above _min_task_flops, then finer
    while tasks are too large for Ctrl-C and keep _task_min_chunks chunks of `chunk` pixels on average
    (0: no chunk). *cut receives the `threads` argument that alg.tasks needs to reproduce them (the rules cut
    finer for more threads; the result does not depend on the cut)."""
    cdef double pixels = <double>geo.batch * geo.out_h * geo.out_w
    cdef double elements = pixels * geo.out_channels
    cut[0] = threads
    cdef Py_ssize_t n = alg.tasks(geo, threads, NULL), finer
    cdef int doubled = threads
    if threads > 1:
        # A rule may need several doublings before it cuts finer (images before bands), so an unchanged
        # count does not end the search; a finer cut whose tasks would be too small does.
        while n < <double>_tasks_per_thread * threads and doubled < 4096:
            doubled *= 2
            finer = alg.tasks(geo, doubled, NULL)
            if finer > n:
                if flops / finer < _min_task_flops:
                    break
                n = finer
                cut[0] = doubled
    while n > 0 and (flops / n > _task_flops or elements / n > _task_elements) and cut[0] < 4096:
        finer = alg.tasks(geo, cut[0] * 2, NULL)
        if finer > n and pixels / finer < <double>_task_min_chunks * chunk:
            break
        cut[0] *= 2
        n = finer
    return n


cdef int _check_signals() noexcept nogil:
    """PyErr_CheckSignals under the GIL: -1 when a handler raised (the exception stays set for
    Runner.run to propagate)."""
    with gil:
        return PyErr_CheckSignals()


cdef int _raise_pending() except -1:
    """Propagate the exception that _check_signals left set."""
    return -1


# One call of Runner.run, as the pool's task function sees it (on the caller's stack).
ctypedef struct _call:
    fd_operands op
    const fd_task *tasks
    fd_run_fn run_task
    char *workspace          # one ws_bytes slice per participant slot, each FD_BLOB_ALIGN-aligned
    size_t ws_bytes
    int *status              # per task
    bint watch               # the caller is Python's main thread: it looks for signals
    long long poll_ns
    long long next_poll      # the caller's (slot 0) alone
    bint interrupted


cdef int _run_task(void *context, Py_ssize_t task, int slot) noexcept nogil:
    """The pool's task function: run one task in the workspace slice of participant `slot`. The caller
    (slot 0, on Python's main thread) first looks for signals if _poll_ns has passed; when a handler
    raised, the task is not run and the pool stops the call (nonzero)."""
    cdef _call *call = <_call *>context
    if slot == 0 and call.watch and fd_monotonic_ns() >= call.next_poll:
        if _check_signals() != 0:
            call.interrupted = True
            return 1
        call.next_poll = fd_monotonic_ns() + call.poll_ns
    call.status[task] = call.run_task(&call.op, &call.tasks[task], call.workspace + <size_t>slot * call.ws_bytes)
    return 0


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
        if _packing_of(geometry) != packed.packing:
            raise ValueError(f"the packed weights serve layers of {packed.packing} (kind, channels, groups, kernel, "
                             f"stride, dilation), got a geometry of {_packing_of(geometry)}: pack "
                             f"the weights for this geometry")
        if bias is not None and np.shape(bias) != (geometry.out_channels,):
            raise ValueError(f"bias must have shape ({geometry.out_channels},), got {np.shape(bias)}")
        self.algorithm = packed.algorithm
        self.packed = packed
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=packed.dtype)
        self.geo = _c_geometry(geometry)
        cdef const fd_algorithm *alg = packed.alg
        cdef int threads = 1 if geometry.flops < _serial_flops else get_num_threads()
        cdef int cut = threads
        cdef fd_workspace ws = alg.workspace(&self.geo, packed.dtype_index)
        # Per-thread slices, rounded to cache lines so that threads never share one.
        self.ws_bytes = (ws.bytes + 63) // 64 * 64
        self.ntasks = 0
        if self.geo.batch > 0 and self.geo.out_channels > 0:   # else an empty result: nothing to compute
            self.ntasks = _count_tasks(alg, &self.geo, threads,
                                       geometry.flops * (2.0 if packed.dtype_index == FD_FLOAT64 else 1.0),
                                       ws.chunk, &cut)
        self.task_array = np.zeros((max(self.ntasks, 1), 5), dtype=np.intp)
        if self.ntasks > 0:
            alg.tasks(&self.geo, cut, <fd_task *>cnp.PyArray_DATA(self.task_array))
        self.threads = max(1, min(threads, self.ntasks))
        self.run_task = alg.run[packed.dtype_index]
        self.operands.geo = &self.geo
        self.operands.packed = packed.blob
        self.operands.bias = cnp.PyArray_DATA(self.bias) if self.bias is not None else NULL
        self.operands.chunk = ws.chunk

    @property
    def workspace_bytes(self):
        """Bytes of workspace each thread gets (the algorithm's workspace rule, in whole cache lines)."""
        return self.ws_bytes

    @property
    def tasks(self):
        """The tasks as an (ntasks, 5) array of (part, row_begin, row_end, col_begin, col_end)."""
        return self.task_array[:self.ntasks].copy()

    def run(self, x, y):
        """Fill y (C-contiguous, the packed dtype, this geometry's output shape) from x (C-contiguous).

        The tasks run on the pool (src/runtime/pool.c): this thread and up to self.threads - 1 helpers claim
        them one at a time (fewer helpers at the default thread count when other threads take the
        CPUs: _participants); this thread returns once every claimed task has ended. Another thread's
        call already running on the pool makes this one run its tasks on this thread alone.

        Ctrl-C: when called from the main thread, that thread looks for signals between its tasks
        every _poll_ns; if a handler raises (KeyboardInterrupt), no further task starts, the running
        ones finish and the exception propagates, y partly written.
        """
        if self.ntasks == 0:
            return y
        cdef _call call
        # Aligned slices (ws_bytes is a multiple of 64): malloc's 16-byte alignment put every 64-byte
        # vector of the Winograd V and M across two cache lines.
        cdef size_t workspace_bytes = max(self.ws_bytes, 1) * self.threads + FD_BLOB_ALIGN
        cdef char *workspace_memory = _take_workspace(&workspace_bytes)
        if workspace_memory == NULL:
            raise MemoryError(f"could not allocate {self.ws_bytes * self.threads} bytes of workspace")
        call.workspace = _line_up(workspace_memory)
        call.status = <int *>calloc(self.ntasks, sizeof(int))
        if call.status == NULL:
            _give_back_workspace(workspace_memory, workspace_bytes)
            raise MemoryError("could not allocate the task status array")
        call.op = self.operands
        call.op.x = cnp.PyArray_DATA(x)
        call.op.y = cnp.PyArray_DATA(y)
        call.tasks = <const fd_task *>cnp.PyArray_DATA(self.task_array)
        call.run_task = self.run_task
        call.ws_bytes = self.ws_bytes
        # Only the main thread runs Python's signal handlers; elsewhere looking would only take the GIL.
        call.watch = PyThread_get_thread_ident() == _main_thread
        call.poll_ns = _poll_ns
        call.next_poll = fd_monotonic_ns() + _poll_ns
        call.interrupted = False
        cdef Py_ssize_t task, failed = -1
        cdef int code = 0
        with nogil:
            fd_pool_run(self.ntasks, _participants(self.threads), _run_task, &call)
            for task in range(self.ntasks):
                if call.status[task] != 0 and failed < 0:
                    failed = task
                    code = call.status[task]
        _give_back_workspace(workspace_memory, workspace_bytes)
        free(call.status)
        if call.interrupted:
            _raise_pending()
        if failed >= 0:
            raise RuntimeError(f"fastdeconv kernel {self.algorithm} failed with status {code} on task "
                               f"{failed} (a bug: please report it)")
        return y


# ---------------------------------------------------------------------------------------------
# Fingerprints: the function API's packed-weight cache (fastdeconv/_weight_cache.py) is keyed by
# what an array holds, not where it lives.


cdef extern from "runtime/fingerprint.h" nogil:
    size_t FD_FINGERPRINT_PART
    int fd_fingerprint(const void *data, size_t bytes, int participants, uint64_t out[2])

# Arrays whose memory span is more than this many times their own size (a sparse view of a larger
# array) get no fingerprint: hashing the whole span would cost more than it saves.
cdef Py_ssize_t _FINGERPRINT_MAX_SPAN_RATIO = 4


cdef int _fingerprint_into(cnp.ndarray array, uint64_t hash[2], Py_ssize_t *offset) except -1:
    """1 with the XXH3-128 hash of the bytes ``array`` spans in ``hash`` and its first element's byte
    offset in that span in ``offset``; 0 when the span is more than _FINGERPRINT_MAX_SPAN_RATIO times
    the array's size (see fingerprint)."""
    cdef int axis
    cdef Py_ssize_t extent, low = 0, high = 0
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(array)
    cdef Py_ssize_t size = cnp.PyArray_SIZE(array)
    cdef const char *start
    cdef size_t span
    if size == 0:
        span = 0
    else:
        for axis in range(cnp.PyArray_NDIM(array)):
            extent = (cnp.PyArray_DIM(array, axis) - 1) * cnp.PyArray_STRIDE(array, axis)
            if extent < 0:
                low += extent
            else:
                high += extent
        span = <size_t>(high - low + itemsize)
        if span > <size_t>(size * itemsize * _FINGERPRINT_MAX_SPAN_RATIO):
            return 0
    start = <const char *>cnp.PyArray_DATA(array) + low
    cdef int status
    cdef int participants = _participants(get_num_threads()) if span >= 2 * FD_FINGERPRINT_PART else 1
    if span >= 65536:
        with nogil:
            status = fd_fingerprint(start, span, participants, hash)
    else:
        status = fd_fingerprint(start, span, 1, hash)
    if status != 0:
        raise MemoryError(f"could not allocate the fingerprint of a {span}-byte array")
    offset[0] = -low
    return 1


def fingerprint(cnp.ndarray array):
    """(low, high, offset): the XXH3-128 hash of the bytes ``array`` spans, and the byte offset of
    its first element from the start of that span; or None when the span is more than 4 times the
    array's size.

    The span is the memory from the array's lowest to its highest element address, whatever its
    strides (negative and zero included). Its bytes, together with ``offset``, ``shape``, ``strides``
    and ``dtype``, determine every element, so two arrays with equal tuples and equal
    (shape, strides, dtype) hold equal values (up to a 2**-128 chance of collision). The GIL is
    released for spans of 64 KiB or more; spans of 512 KiB or more are hashed in 256 KiB parts on the
    call's threads (src/runtime/fingerprint.h: the value does not depend on the thread count)."""
    cdef uint64_t hash[2]
    cdef Py_ssize_t offset
    if not _fingerprint_into(array, hash, &offset):
        return None
    return hash[0], hash[1], offset


# array_key's words: the span's hash (2), offset, ndim, shape and strides of up to 64 axes (numpy's limit)
cdef enum:
    _KEY_MAX_AXES = 64
    _KEY_WORDS = 4 + 2 * _KEY_MAX_AXES


def array_key(array):
    """(low, high, dtype), or None: a key that determines every element of an ndarray, for the
    function API's weight cache (fastdeconv/_weight_cache.py). low and high are the XXH3-128 hash of
    :func:`fingerprint`'s (low, high, offset) together with the array's shape and strides, so equal
    keys mean equal (fingerprint, shape, strides, dtype), up to a 2**-128 chance of collision: one
    call and a small tuple, where that 4-tuple of tuples costs several attribute reads and a slower
    hash on every function call. None for anything but an exact ndarray (a subclass may override
    indexing) and where fingerprint gives None."""
    if type(array) is not np.ndarray:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>array
    cdef int64_t words[_KEY_WORDS]
    cdef uint64_t hash[2]
    cdef Py_ssize_t offset
    cdef int axis, ndim = cnp.PyArray_NDIM(a)
    if ndim > _KEY_MAX_AXES or not _fingerprint_into(a, hash, &offset):
        return None
    words[0] = <int64_t>hash[0]
    words[1] = <int64_t>hash[1]
    words[2] = offset
    words[3] = ndim
    for axis in range(ndim):
        words[4 + axis] = cnp.PyArray_DIM(a, axis)
        words[4 + ndim + axis] = cnp.PyArray_STRIDE(a, axis)
    fd_fingerprint(words, (4 + 2 * ndim) * sizeof(int64_t), 1, hash)   # under FD_FINGERPRINT_PART: never fails
    return hash[0], hash[1], a.dtype
