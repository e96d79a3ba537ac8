"""Dask: conv_transpose2d, conv2d and the layer objects over dask arrays, lazily and exactly.

The ``dask`` extra (dask[array], distributed, zarr): from a clone ``pip install -e ".[dask]"``, or the
packages alone, ``pip install "dask[array]>=2025.1" "distributed>=2025.1" "zarr>=3.0.8"`` (fastdeconv is not
on PyPI). Then the ordinary functions take a
``dask.array.Array`` and return one::

    import dask.array as da, fastdeconv
    x = da.from_zarr("image.zarr")                     # (N, H, W, C_in), chunked over N, H and W
    y = fastdeconv.conv_transpose2d(x, w, b, stride=2, padding=1)   # lazy, nothing computed yet
    fastdeconv.dask.to_zarr(y, "upsampled.zarr")       # computed block by block, on any scheduler;
                                                       # all or nothing (y.to_zarr leaves partial arrays)

``fastdeconv.ConvTranspose2d(w, b, ...)(x)`` does the same. numpy in, numpy out is unchanged, and
``import fastdeconv`` never imports dask: this module is imported on the first dask array.

Blocks
------
The result has the shape and dtype of the in-memory call and equals it to float rounding (each block
is computed by the same C kernels, on the same algorithm, chosen once from the whole layer):

* the batch axis keeps x's chunks, one to one;
* the channel axis is one chunk: x is rechunked to a single C_in chunk (a block needs every input
  channel of its groups), and C_out is one chunk;
* height and width: output block boundaries are x's chunk boundaries times the stride (transposed
  convolution) or divided by it, rounded up (convolution), so regular chunks give regular output
  chunks (``to_zarr`` needs them); rechunk the result for others.

Each output block is computed from exactly the input rows and columns that reach it, read from
the block of x it lies over and from thin slices of its neighbours (only the slices travel between
workers): no overlap-add, no seams, and chunks smaller than the halo work. Along one axis (rows;
columns likewise), with kd = d·(k − 1) + 1, output block [a, b):

* transposed convolution: output row oy receives input row iy through tap ky when
  oy = iy·s − pad_begin + ky·d, so the block needs input rows
  ``iy ∈ [⌈(a + pad_begin − d·(k − 1)) / s⌉, ⌊(b − 1 + pad_begin) / s⌋] ∩ [0, H − 1]``;
  none (rows that no tap reaches) gives a block of just the bias. The block is the in-memory kernel
  on that window [lo, hi] with pads (a + pad_begin − lo·s, f − b) or, where f = hi·s − pad_begin + kd
  falls short of b, output_padding b − f: the window's full result covers [lo·s − pad_begin, f), and
  the pads crop it to exactly [a, b). (lo is lowered, if needed, to ⌊(a + pad_begin) / s⌋ so that the
  leading pad is never negative; that row reaches no output of the block.)
* convolution: the block needs ``[a·s − pad_begin, (b − 1)·s − pad_begin + d·(k − 1)] ∩ [0, H − 1]``,
  and its pads are the parts of that range outside the image (zeros, as in the in-memory call; a
  block entirely in the padding is computed on zeros, so non-finite weights still propagate as the
  formula says).

Weights travel once per worker, not once per block: the graph holds one node with the weights,
bias and parameters (:class:`BlockKernel`), which pickles to those numpy arrays and names (never to
packed data). Each process packs the weights on first use and keeps them (at most
``_KERNEL_CACHE_SIZE`` layers, least recently used first out), so a worker packs a layer once
however many blocks and graphs use it.

Threads: every block runs the C kernels on ``fastdeconv.get_num_threads()`` threads of its worker;
:func:`configure_workers` shares each machine's cores between a cluster's worker threads and
fastdeconv's (README, "Dask"). This adapter sits below the API that hands it dask arrays: it imports
only the call contract, the parameters and the backends.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import threading

import numpy as np

try:
    import dask
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    try:
        from dask.task_spec import DataNode, List, Task, TaskRef
    except ImportError:   # dask < 2025: the same classes, before they were public
        from dask._task_spec import DataNode, List, Task, TaskRef
except ImportError as error:
    raise ImportError(
        "fastdeconv got a dask array, and its Dask support needs dask, distributed and zarr (the dask extra): "
        "pip install \"dask[array]>=2025.1\" \"distributed>=2025.1\" \"zarr>=3.0.8\" (from a clone of fastdeconv "
        "the same is pip install -e \".[dask]\", which rebuilds the extension; fastdeconv is not on PyPI). "
        f"({error})") from error

from . import _config
from ._backends import registry
from ._cache import BoundedCache
from ._call import prepare_conv2d, prepare_conv_transpose2d
from ._params import ConvGeometry, forward_output_size, is_int, kernel_extent

__all__ = ["conv_transpose2d", "conv2d", "apply_layer", "configure_workers", "to_zarr", "BlockKernel"]

# Layers (weights, bias, parameters) whose packed weights a process keeps, most recently used last.
_KERNEL_CACHE_SIZE = 8
_kernels = BoundedCache(_KERNEL_CACHE_SIZE)   # token -> BlockKernel
#: How many times this process packed a layer's weights for a dask block (what the tests count).
packings = 0


# ----------------------------------------------------------------------------------------------
# The public entry points (reached from fastdeconv.conv_transpose2d / conv2d / the layer objects)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, *, output_padding=0, dilation=1, groups=1,
                     output_size=None, backend="auto", algorithm=None, out=None):
    """:func:`fastdeconv.conv_transpose2d` of a dask array: a lazy dask array of the result.

    The arguments and the result's shape and dtype are the in-memory call's, and so are its errors,
    raised here rather than at compute time. The channel axis of x is rechunked to one chunk; the
    result's chunks are x's, times the stride along H and W (see the module docstring). ``out=`` is
    not accepted (store the result with :func:`to_zarr` or ``dask.array.store``).
    """
    x = _dask_input(x, out)
    call = prepare_conv_transpose2d(_stand_in(x), weight, bias, None, stride, padding, output_padding, dilation,
                                    groups, output_size)
    return _apply(x, call, backend, algorithm)


def conv2d(x, weight, bias=None, stride=1, padding=0, *, dilation=1, groups=1, backend="auto", algorithm=None,
           out=None):
    """:func:`fastdeconv.conv2d` of a dask array: a lazy dask array of the result.

    As :func:`conv_transpose2d`; the result's chunks are x's divided by the stride (rounded up).
    """
    x = _dask_input(x, out)
    call = prepare_conv2d(_stand_in(x), weight, bias, None, stride, padding, dilation, groups)
    return _apply(x, call, backend, algorithm)


def apply_layer(layer, x, *, output_size=None, out=None):
    """``layer(x)`` for a layer object (``fastdeconv.ConvTranspose2d`` or ``fastdeconv.Conv2d``) and a
    dask array x.

    The same as the function with the layer's weights, bias, parameters, algorithm and backend; the
    workers pack the weights themselves (once per process), the layer's own packed weights stay here.
    """
    transposed = getattr(layer, "_transposed", None)
    if transposed is True:
        return conv_transpose2d(x, layer.weight, layer.bias, **layer._kwargs, output_size=output_size,
                                backend=layer.backend, algorithm=layer.algorithm, out=out)
    if transposed is False:   # a Conv2d (output_size is not one of its arguments: always None here)
        return conv2d(x, layer.weight, layer.bias, **layer._kwargs, backend=layer.backend,
                      algorithm=layer.algorithm, out=out)
    raise TypeError(f"layer must be a fastdeconv.ConvTranspose2d or Conv2d, got {type(layer).__name__}")


# ----------------------------------------------------------------------------------------------
# Validation: the in-memory call's, on a stand-in of x's shape and dtype


def _dask_input(x, out):
    if not isinstance(x, da.Array):
        raise TypeError(f"x must be a numpy array or a dask.array.Array, got {type(x).__module__}."
                        f"{type(x).__name__}")
    if out is not None:
        raise TypeError("out= is not supported for a dask array x: the result is lazy; write it with "
                        "fastdeconv.dask.to_zarr(result, path) or dask.array.store(result, target)")
    if any(math.isnan(c) for chunks in x.chunks for c in chunks):
        raise ValueError(f"x has unknown chunk sizes {x.chunks}: call x.compute_chunk_sizes() first")
    dtype = np.dtype(x.dtype)
    if dtype.kind == "f" and not dtype.isnative:   # byte-swapped floats: the same values, native order
        x = x.astype(dtype.newbyteorder("="))
    return x


def _stand_in(x):
    """A zero-stride numpy stand-in of x's shape and dtype: the in-memory call's validation runs on it
    (the same checks and error messages), with no memory."""
    return np.broadcast_to(np.empty((), dtype=np.dtype(x.dtype)), x.shape)


def _snapshot(array):
    """A read-only private copy of an array (None stays None)."""
    if array is None:
        return None
    copy = np.array(array, copy=True)
    copy.flags.writeable = False
    return copy


def _apply(x, call, backend, algorithm):
    """The lazy result of a validated call (x: the caller's dask array)."""
    # decided once for the whole layer, as the in-memory call does: every block runs its backend and
    # algorithm
    chosen = registry.choose(call, registry.get(backend), algorithm)
    algorithm = chosen.resolve_algorithm(algorithm, call.geometry)
    g = call.geometry
    # The graph keeps the weights as they are now, in read-only private copies that its token is taken
    # from: a caller that reuses its buffers after building the graph changes neither.
    kernel = _kernel(_snapshot(call.weight), _snapshot(call.bias), call.dtype, g.transposed, chosen.name, algorithm,
                     (g.in_channels, g.out_channels, g.kernel_hw, g.stride, g.dilation, g.groups))
    if call.unbatched:
        x = x[np.newaxis]
    if x.numblocks[3] > 1:
        x = x.rechunk({3: -1})
    y = _blockwise(x, kernel, call.geometry)
    return y[0] if call.unbatched else y


# ----------------------------------------------------------------------------------------------
# The layer on its way to the workers


class BlockKernel:
    """A layer's weights, bias (in the result dtype) and parameters, as one node of a dask graph.

    It pickles to those numpy arrays and names; a process that unpickles it (a worker) looks its
    token up in the process's cache first, so the weights are packed once per process (per distinct
    leading pad modulo the stride, which the packed tap tables depend on: one for the blocks this
    module makes), however many blocks and graphs use the layer.
    """

    def __init__(self, weight, bias, dtype, transposed, backend, algorithm, layer_shape, token):
        self.weight, self.bias, self.dtype = weight, bias, np.dtype(dtype)
        self.transposed, self.backend, self.algorithm, self.token = transposed, backend, algorithm, token
        # (C_in, C_out, kernel, stride, dilation, groups): what the packing depends on besides the pads
        self.layer_shape = layer_shape
        self._layers = {}
        self._lock = threading.Lock()

    def __reduce__(self):
        return _kernel, (self.weight, self.bias, self.dtype.str, self.transposed, self.backend, self.algorithm,
                         self.layer_shape, self.token)

    def __repr__(self):
        kind = "conv_transpose2d" if self.transposed else "conv2d"
        return (f"BlockKernel({kind}, weight {self.weight.shape} {self.weight.dtype}, result {self.dtype}, "
                f"backend={self.backend!r}, algorithm={self.algorithm!r})")

    def layer(self, geometry: ConvGeometry):
        """The backend's layer (packed weights) that runs blocks of this geometry."""
        global packings
        # The phase and depthwise kernels pack their tap tables from pad mod stride (src/algorithms/algorithm.h,
        # fd_phase_taps); im2col's packing reads no pad. Blocks that agree there share the packing.
        key = (geometry.pad[0][0] % geometry.stride[0], geometry.pad[1][0] % geometry.stride[1]) \
            if self.transposed else ()
        layer = self._layers.get(key)
        if layer is None:
            with self._lock:
                layer = self._layers.get(key)
                if layer is None:
                    layer = registry.get(self.backend).layer(self.weight, self.bias, self.dtype, geometry,
                                                              self.algorithm)
                    self._layers[key] = layer
                    packings += 1
        return layer


def _kernel(weight, bias, dtype, transposed, backend, algorithm, layer_shape, token=None):
    """The process's BlockKernel for these weights and parameters (made, or found in its cache)."""
    if token is None:
        token = tokenize(weight, bias, np.dtype(dtype).str, transposed, backend, algorithm, layer_shape)
    return _kernels.get_or_make(token, lambda: BlockKernel(weight, bias, dtype, transposed, backend, algorithm,
                                                           layer_shape, token))


# ----------------------------------------------------------------------------------------------
# Windows: which input rows (columns) each output block needs, and the pads that crop to it


@dataclasses.dataclass(frozen=True)
class _Window:
    """One output block's input range along one axis.

    kind "data": input rows [begin, end) with the block's pads and output_padding; "bias"
    (transposed): no input row reaches the block; "zeros" (convolution): the block lies entirely in
    the padding, computed on ``length`` zero rows.
    """

    kind: str
    begin: int
    end: int
    length: int
    pads: tuple
    output_padding: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _transposed_window(a, b, size_in, kernel, stride, dilation, pad_begin) -> _Window:
    reach = dilation * (kernel - 1)
    lo = max(0, _ceil_div(a + pad_begin - reach, stride))
    hi = min(size_in - 1, (b - 1 + pad_begin) // stride)
    if lo > hi:
        return _Window("bias", 0, 0, 0, (0, 0), 0)
    lo = min(lo, (a + pad_begin) // stride)   # keeps the leading pad >= 0; row lo then reaches no output >= a
    full_end = hi * stride - pad_begin + reach + 1   # the window's uncropped result is [lo·s − pad_begin, full_end)
    return _Window("data", lo, hi + 1, hi + 1 - lo, (a + pad_begin - lo * stride, max(full_end - b, 0)),
                   max(b - full_end, 0))


def _forward_window(a, b, size_in, kernel, stride, dilation, pad_begin) -> _Window:
    last = (b - 1) * stride - pad_begin + dilation * (kernel - 1)
    lo, hi = max(0, a * stride - pad_begin), min(size_in - 1, last)
    if lo > hi:
        return _Window("zeros", 0, 0, (b - a - 1) * stride + kernel_extent(kernel, dilation), (0, 0), 0)
    return _Window("data", lo, hi + 1, hi + 1 - lo, (lo + pad_begin - a * stride, last - hi), 0)


def _output_bounds(in_chunks, size_out: int, stride: int, transposed: bool) -> list:
    """Output block boundaries along one axis: x's chunk boundaries times the stride (divided by it,
    rounded up, for a convolution), within (0, size_out), then size_out."""
    bounds, edge = [0], 0
    for chunk in in_chunks:
        edge += chunk
        bound = edge * stride if transposed else _ceil_div(edge, stride)
        if bounds[-1] < bound < size_out:
            bounds.append(bound)
    bounds.append(size_out)
    return bounds


def _block_output(geometry: ConvGeometry, axis: int) -> int:
    """One axis of a block geometry's output size, from its own pads (the check of the windows)."""
    m, k, s, d = geometry.input_hw[axis], geometry.kernel_hw[axis], geometry.stride[axis], geometry.dilation[axis]
    p0, p1 = geometry.pad[axis]
    if geometry.transposed:
        return (m - 1) * s - p0 - p1 + kernel_extent(k, d) + geometry.output_padding[axis]
    return forward_output_size(m, k, s, d, p0, p1)


# ----------------------------------------------------------------------------------------------
# The graph


def _row_segments(a, b, window: _Window, chunks, geometry: ConvGeometry, window_of) -> list:
    """Output rows [a, b) of a block, cut where the input rows they need change block of x:
    [(row_begin, row_end, window)] with each part's own window. A part whose window lies in one
    block of x runs on that block's rows directly (no copy of the input); the parts across a block
    edge on windows assembled from the pieces. A transposed convolution's cuts fall on multiples of
    the stride, so that every part has the block's leading pad modulo the stride (one packing of the
    weights)."""
    size_in, k, s, d, pad_begin = (geometry.input_hw[0], geometry.kernel_hw[0], geometry.stride[0],
                                   geometry.dilation[0], geometry.pad[0][0])
    reach = d * (k - 1)
    rows = np.arange(a, b)
    if geometry.transposed:
        lo, hi = np.maximum(0, -((reach - rows - pad_begin) // s)), np.minimum(size_in - 1, (rows + pad_begin) // s)
    else:
        lo, hi = np.maximum(0, rows * s - pad_begin), np.minimum(size_in - 1, rows * s - pad_begin + reach)
    edges = np.cumsum((0,) + tuple(chunks))
    block_lo, block_hi = np.searchsorted(edges, lo, "right") - 1, np.searchsorted(edges, hi, "right") - 1
    # the block of x each row reads (-1: two or more; rows that read nothing go with their neighbours)
    kind = np.where(lo > hi, -2, np.where(block_lo == block_hi, block_lo, -1))
    cuts, current = {a, b}, None
    for row, row_kind in zip(rows.tolist(), kind.tolist()):
        if row_kind == -2 or row_kind == current:
            continue
        if current is not None:
            if geometry.transposed and row % s:
                # onto a multiple of the stride (as a and b are), the part that reads one block shrinking
                row = min(row - row % s + (s if current < 0 else 0), b)
            cuts.add(row)
        current = row_kind
    cuts = sorted(cuts)
    parts = []
    for begin, end in zip(cuts, cuts[1:]):
        part = window_of(begin, end, size_in, k, s, d, pad_begin)
        if part.kind != "data" or not window.begin <= part.begin < part.end <= window.end:
            return [(a, b, window)]
        parts.append((begin, end, part))
    return parts


def _pieces(begin, end, chunks):
    """The parts of input blocks that cover rows [begin, end): (block index, start, stop within the
    block, whether that is the whole block, offset in the window)."""
    parts, edge = [], 0
    for index, size in enumerate(chunks):
        start, stop = max(begin, edge), min(end, edge + size)
        if start < stop:
            parts.append((index, start - edge, stop - edge, stop - start == size, start - begin))
        edge += size
    return parts


def _blockwise(x, kernel: BlockKernel, geometry: ConvGeometry):
    """The lazy result of ``kernel`` over x (N, H, W, C_in, one chunk along C_in) for ``geometry``
    (the whole call's). The machinery is the same for every layer kind: the geometry says which.

    Graph: one node for the kernel; per output block one task, which depends on the kernel, on the
    blocks of x that its window covers completely, and on slices of those it covers in part (tasks of
    their own, so that only the slice travels to another worker).
    """
    transposed = geometry.transposed
    window_of = _transposed_window if transposed else _forward_window
    axes = []
    for axis in (0, 1):
        bounds = _output_bounds(x.chunks[1 + axis], geometry.output_hw[axis], geometry.stride[axis], transposed)
        windows = [window_of(a, b, geometry.input_hw[axis], geometry.kernel_hw[axis], geometry.stride[axis],
                             geometry.dilation[axis], geometry.pad[axis][0]) for a, b in zip(bounds, bounds[1:])]
        axes.append((bounds, windows))
    (row_bounds, row_windows), (col_bounds, col_windows) = axes
    out_chunks = (x.chunks[0], tuple(np.diff(row_bounds).tolist()), tuple(np.diff(col_bounds).tolist()),
                  (geometry.out_channels,))

    operation = "conv_transpose2d" if transposed else "conv2d"
    x_keys = x.__dask_keys__()
    while isinstance(x_keys, list):
        x_keys = x_keys[0]
    x_name = x_keys[0]   # x.name, except under array query planning, whose graph names its keys anew
    name = f"{operation}-{tokenize(x_name, kernel.token, geometry)}"
    slice_name = f"{operation}-halo-{tokenize(name)}"
    kernel_key = f"fastdeconv-kernel-{kernel.token}"
    kernel_ref = TaskRef(kernel_key)
    layer = {kernel_key: DataNode(kernel_key, kernel)}
    row_pieces = [_pieces(w.begin, w.end, x.chunks[1]) for w in row_windows]
    col_pieces = [_pieces(w.begin, w.end, x.chunks[2]) for w in col_windows]
    row_segments = [_row_segments(a, b, w, x.chunks[1], geometry, window_of) if w.kind == "data" else None
                    for a, b, w in zip(row_bounds, row_bounds[1:], row_windows)]
    geometries = {}
    for ib, nb in enumerate(x.chunks[0]):
        for jr, (rw, r0, r1) in enumerate(zip(row_windows, row_bounds, row_bounds[1:])):
            for jc, (cw, c0, c1) in enumerate(zip(col_windows, col_bounds, col_bounds[1:])):
                key = (name, ib, jr, jc, 0)
                if "bias" in (rw.kind, cw.kind):
                    layer[key] = Task(key, _bias_block, kernel_ref, (nb, r1 - r0, c1 - c0, geometry.out_channels))
                    continue
                # Rows cut into parts that read one block of x each (no copy), where the output rows
                # of a part are contiguous in memory: one image, and columns from one whole block of x.
                whole_columns = cw.kind == "data" and len(col_pieces[jc]) == 1 and col_pieces[jc][0][3]
                parts = row_segments[jr] if nb == 1 and whole_columns and rw.kind == "data" else [(r0, r1, rw)]
                segments = tuple((a - r0, b - r0, part.begin - rw.begin, part.end - rw.begin,
                                  _block_geometry(geometries, geometry, nb, part, cw, b - a, c1 - c0))
                                 for a, b, part in parts)
                refs, offsets = [], []
                if "zeros" not in (rw.kind, cw.kind):
                    for rb, rs, re, r_whole, r_at in row_pieces[jr]:
                        for cb, cs, ce, c_whole, c_at in col_pieces[jc]:
                            source = (x_name, ib, rb, cb, 0)
                            if r_whole and c_whole:
                                refs.append(TaskRef(source))
                            else:
                                part = (slice_name, ib, rb, cb, rs, re, cs, ce)
                                if part not in layer:
                                    layer[part] = Task(part, _slice, TaskRef(source), rs, re, cs, ce)
                                refs.append(TaskRef(part))
                            offsets.append((r_at, c_at))
                layer[key] = Task(key, _run_block, kernel_ref, List(*refs), tuple(offsets),
                                  (nb, r1 - r0, c1 - c0, geometry.out_channels), segments)
    meta = np.empty((0, 0, 0, 0), dtype=kernel.dtype)
    if _array_expr_enabled():   # dask's array query planning (opt-in, experimental): from the whole graph
        from dask.array._array_expr._collection import from_graph

        keys = [(name, *index) for index in np.ndindex(*(len(c) for c in out_chunks))]
        return from_graph({**dict(x.__dask_graph__()), **layer}, meta, out_chunks, keys, operation)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x])
    return da.Array(graph, name, out_chunks, meta=meta)


def _array_expr_enabled() -> bool:
    enabled = getattr(da, "array_expr_enabled", None)
    return bool(enabled and enabled())


def _block_geometry(cache: dict, geometry: ConvGeometry, batch, rows: _Window, cols: _Window, height, width):
    """The geometry that computes exactly one block (or part of one) from its window."""
    key = (batch, rows.length, cols.length, rows.pads, cols.pads, rows.output_padding, cols.output_padding)
    block = cache.get(key)
    if block is None:
        block = cache[key] = dataclasses.replace(
            geometry, batch=batch, input_hw=(rows.length, cols.length), pad=(rows.pads, cols.pads),
            output_padding=(rows.output_padding, cols.output_padding), output_hw=(height, width))
    # the windows' pads give exactly the block's size (the check of _transposed_window / _forward_window)
    assert (_block_output(block, 0), _block_output(block, 1)) == (height, width), (block, height, width)
    return block


# ----------------------------------------------------------------------------------------------
# The tasks


def _slice(block, row_start, row_stop, col_start, col_stop):
    """Part of a neighbour's block, copied: only it travels, and the block can be freed early."""
    return block[:, row_start:row_stop, col_start:col_stop].copy()


def _bias_block(kernel: BlockKernel, shape):
    """A block that no tap reaches: the bias (zero without one)."""
    block = np.empty(shape, dtype=kernel.dtype)
    block[...] = 0 if kernel.bias is None else kernel.bias
    return block


def _run_block(kernel: BlockKernel, pieces, offsets, shape, segments):
    """One output block of ``shape``, in parts (usually one) of rows [row_begin, row_end) computed
    from window rows [window_begin, window_end) by the in-memory kernel with the part's geometry.
    A part's window is a view of one piece when it lies in one (no copy), else it is assembled from
    the pieces; with no pieces at all (a convolution block in the padding) it is zeros."""
    if len(segments) == 1:   # the whole block at once: its output is the kernel's own buffer
        (_, _, begin, end, geometry), = segments
        layer = kernel.layer(geometry)
        return _run(layer, geometry, _window(pieces, offsets, begin, end, geometry.input_shape, layer.dtype),
                    None).astype(kernel.dtype, copy=False)
    block = None
    for row_begin, row_end, begin, end, geometry in segments:
        layer = kernel.layer(geometry)
        if block is None:
            block = np.empty(shape, dtype=layer.dtype)
        # one image: its rows [row_begin, row_end) are C-contiguous, as the kernel writes them
        _run(layer, geometry, _window(pieces, offsets, begin, end, geometry.input_shape, layer.dtype),
             block[:, row_begin:row_end])
    return block.astype(kernel.dtype, copy=False)


def _window(pieces, offsets, begin, end, shape, dtype):
    """Rows [begin, end) of a block's window (N, rows, W, C_in), C-contiguous, in ``dtype``."""
    for piece, (row, col) in zip(pieces, offsets):
        if row <= begin and end <= row + piece.shape[1] and col == 0 and piece.shape[2] == shape[2]:
            return np.ascontiguousarray(piece[:, begin - row:end - row], dtype=dtype)   # a view when it can be
    window = np.empty(shape, dtype=dtype) if pieces else np.zeros(shape, dtype=dtype)
    for piece, (row, col) in zip(pieces, offsets):
        first, last = max(begin, row), min(end, row + piece.shape[1])
        if first < last:
            window[:, first - begin:last - begin, col:col + piece.shape[2]] = piece[:, first - row:last - row]
    return window


def _run(layer, geometry, window, buffer):
    """The backend's run on a window; the result in ``buffer`` when given (a backend that returns an
    array of its own, as the reference does, is copied there)."""
    result = layer.bind(geometry)(window, buffer)
    if buffer is not None and result is not buffer:
        buffer[...] = result
    return result


# ----------------------------------------------------------------------------------------------
# dask.distributed


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def peak_memory() -> int:
    """This process's peak resident memory in bytes: VmHWM on Linux, which starts afresh at exec (a
    spawned worker's ru_maxrss also counts its parent's pages from the fork before the exec),
    ru_maxrss on other POSIX systems (kilobytes on Linux, bytes on macOS), the peak working set on
    Windows (which has no `resource` module); 0 where none of these can be read."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import sys

    try:
        import resource
    except ImportError:   # Windows
        return _windows_peak_working_set()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _windows_peak_working_set() -> int:
    """PeakWorkingSetSize of GetProcessMemoryInfo (psapi, in kernel32 since Windows 7), or 0 off Windows
    or on failure."""
    import ctypes
    from ctypes import wintypes

    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return 0

    class Counters(ctypes.Structure):   # PROCESS_MEMORY_COUNTERS
        _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD)] + [
            (name, ctypes.c_size_t) for name in (
                "PeakWorkingSetSize", "WorkingSetSize", "QuotaPeakPagedPoolUsage", "QuotaPagedPoolUsage",
                "QuotaPeakNonPagedPoolUsage", "QuotaNonPagedPoolUsage", "PagefileUsage", "PeakPagefileUsage")]

    counters = Counters()
    counters.cb = ctypes.sizeof(Counters)
    get_info = windll.kernel32.K32GetProcessMemoryInfo
    get_info.argtypes = [wintypes.HANDLE, ctypes.POINTER(Counters), wintypes.DWORD]
    get_info.restype = wintypes.BOOL
    process = windll.kernel32.GetCurrentProcess
    process.restype = wintypes.HANDLE
    if not get_info(process(), ctypes.byref(counters), counters.cb):
        return 0
    return int(counters.PeakWorkingSetSize)


def _host() -> str:
    import socket

    return socket.gethostname()


def configure_workers(client, threads=None) -> dict:
    """Set fastdeconv's thread count in every worker of a ``dask.distributed`` client.

    By default each machine's cores are shared out: threads = max(1, cores // the dask threads of all
    workers on that machine), so that workers × their threads × fastdeconv's threads ≤ cores (the
    cores are the worker process's CPU affinity). ``threads=n`` sets n everywhere instead. Registered
    as a worker plugin, so workers that join or restart later get the same setting (a machine not seen
    here: cores // that worker's threads). Returns {worker address: fastdeconv threads}.

    1 worker × 2 threads on 2 cores: 1 fastdeconv thread per block, 2 blocks at a time;
    2 workers × 1 thread: the same; 1 worker × 1 thread: 2 fastdeconv threads.

    Examples
    --------
    >>> import fastdeconv.dask
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
    ...     with Client(cluster) as client:
    ...         threads = fastdeconv.dask.configure_workers(client, threads=2)
    >>> list(threads.values())
    [2]
    >>> fastdeconv.set_num_threads(0)    # the in-process worker shared this process's setting
    """
    from distributed.diagnostics.plugin import WorkerPlugin

    if threads is not None and (not is_int(threads) or threads < 1):
        raise ValueError(f"threads must be None or an int >= 1, got {threads!r}")
    hosts = client.run(_host)
    cores = client.run(_cores)
    busy = collections.Counter()
    for address, nthreads in client.nthreads().items():
        if address in hosts:
            busy[hosts[address]] += nthreads
    per_host = {hosts[a]: threads or max(1, cores[a] // max(1, busy[hosts[a]])) for a in hosts}

    class FastdeconvThreads(WorkerPlugin):
        """fastdeconv.set_num_threads in each worker (see fastdeconv.dask.configure_workers)."""

        def __init__(self, per_host, threads):
            self.per_host, self.threads = per_host, threads

        def setup(self, worker):
            from fastdeconv._config import set_num_threads
            from fastdeconv.dask import _cores, _host

            n = self.threads or self.per_host.get(_host()) or max(1, _cores() // max(1, worker.state.nthreads))
            set_num_threads(n)

    client.register_plugin(FastdeconvThreads(per_host, threads), name="fastdeconv-threads")
    return client.run(_config.get_num_threads)


# ----------------------------------------------------------------------------------------------
# Writing a result: all or nothing


def to_zarr(array, path, *, overwrite=False, compressors="auto") -> str:
    """Compute a dask array into a new zarr array at ``path``, all or nothing.

    The blocks are written into a staging array beside ``path`` (``<path>.partial-<random>``), on
    whatever scheduler is active (a ``distributed.Client``, or dask's default), and the staging array
    is renamed to ``path`` only once every block is written. If the computation fails (a task raises,
    a worker dies too often: ``distributed.KilledWorker``), the staging array is removed and the
    exception propagates: ``path`` never holds a zarr array that opens at its full shape but reads
    as fill values where blocks were never written, as ``array.to_zarr(path)`` leaves behind. Only a
    process killed while writing leaves its staging array (its name says it is partial).

    Parameters
    ----------
    array : dask.array.Array
        Regular chunks (every chunk of an axis the same size but the last), which become the zarr
        chunks: two blocks never write one zarr chunk.
    path : str or os.PathLike
        A directory path on a file system every worker can write (local, NFS, Lustre, ...): the final
        rename needs one. Object stores (``s3://``...) have no rename: use ``array.to_zarr(url)``.
    overwrite : bool
        Replace an existing ``path``; it is kept until the new array is complete.
    compressors
        zarr's ``compressors`` argument of ``zarr.create_array`` ("auto": zarr's default; None: none).

    Returns
    -------
    str
        The absolute path written.

    Examples
    --------
    >>> import dask.array as da, numpy as np, tempfile, zarr, fastdeconv, fastdeconv.dask
    >>> x = da.ones((1, 8, 8, 2), chunks=(1, 4, 4, 2), dtype=np.float32)
    >>> y = fastdeconv.conv_transpose2d(x, np.ones((2, 2, 2, 2), np.float32), stride=2)
    >>> path = fastdeconv.dask.to_zarr(y, tempfile.mkdtemp() + "/y.zarr")
    >>> zarr.open_array(path).shape
    (1, 16, 16, 2)
    """
    import dask

    if not isinstance(array, da.Array):
        raise TypeError(f"array must be a dask.array.Array, got {type(array).__module__}.{type(array).__name__}")
    with _staged_zarr(path, array.shape, _zarr_chunks(array), array.dtype, overwrite=overwrite,
                      compressors=compressors) as target:
        dask.compute(da.store(array, target, lock=False, compute=False))
    return os.path.abspath(os.fspath(path))


def _zarr_chunks(array) -> tuple:
    """The zarr chunk shape of a dask array's blocks (ValueError where the blocks are irregular)."""
    chunks = []
    for axis, sizes in enumerate(array.chunks):
        if len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0]):
            raise ValueError(
                f"array has irregular chunks along axis {axis}: {sizes}. A zarr array has one chunk size per "
                f"axis (all chunks equal but the last, which may be smaller), and blocks that share a zarr "
                f"chunk would overwrite each other: rechunk first, e.g. array.rechunk({{{axis}: {max(sizes)}}})")
        chunks.append(max(1, max(sizes, default=1)))
    return tuple(chunks)


class _staged_zarr:
    """``with _staged_zarr(path, shape, chunks, dtype) as target:`` a new zarr array in a staging
    directory beside path, renamed to path when the block ends without an exception and removed when
    it raises (see :func:`to_zarr`)."""

    def __init__(self, path, shape, chunks, dtype, *, overwrite=False, compressors="auto"):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        text = os.fspath(path)
        if "://" in text:
            raise ValueError(f"path must be a file-system path, got {text!r}: an object store has no rename to "
                             f"finish the write atomically; write there with array.to_zarr({text!r}), which "
                             f"leaves a partial array if the computation fails")
        self.path = os.path.abspath(text.rstrip("/\\") or text)
        if os.path.lexists(self.path) and not overwrite:
            raise FileExistsError(f"path {self.path!r} exists: pass overwrite=True to replace it (it is kept "
                                  f"until the new array is complete)")
        self.shape, self.chunks, self.dtype = shape, chunks, dtype
        self.overwrite, self.compressors = overwrite, compressors
        self.staging = None

    def __enter__(self):
        import uuid

        import zarr

        self.staging = f"{self.path}.partial-{uuid.uuid4().hex[:12]}"
        return zarr.create_array(self.staging, shape=self.shape, chunks=self.chunks, dtype=self.dtype,
                                 compressors=self.compressors)

    def __exit__(self, kind, error, traceback):
        if error is not None:
            _remove(self.staging)
            if hasattr(error, "add_note"):   # Python >= 3.11
                error.add_note(f"fastdeconv.dask.to_zarr: nothing was written to {self.path!r} (the partial "
                               f"array was removed)")
            return False
        replaced = None
        if os.path.lexists(self.path):
            if not self.overwrite:   # created by someone else while this one was computed
                _remove(self.staging)
                raise FileExistsError(f"path {self.path!r} appeared while the array was computed: pass "
                                      f"overwrite=True to replace it")
            replaced = f"{self.path}.replaced-{os.path.basename(self.staging).rsplit('-', 1)[1]}"
            os.rename(self.path, replaced)
        os.rename(self.staging, self.path)
        if replaced is not None:
            _remove(replaced)
        return False


def _remove(path):
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)
