"""The function API's layer cache: ``conv_transpose2d(x, w, ...)`` and ``conv2d(x, w, ...)`` pack the
weights once per distinct weight *content*, not once per call.

Each call looks up a :class:`~fastdeconv.ConvTranspose2d` / :class:`~fastdeconv.Conv2d` layer by a
key made of

* the weight's and the bias's fingerprint (:func:`fastdeconv._cpu.fingerprint`: XXH3-128 of the
  bytes the array spans, with its first element's offset in that span) plus their shape, strides and
  dtype: together these determine every element, so an array modified in place, or a new array
  allocated where a freed one was, gives a new key and is packed afresh; equal contents in
  different arrays share one layer;
* (weight and bias must be numpy arrays; other array-likes take the uncached path)
* the other arguments (stride, padding, output_padding, dilation, groups, algorithm, backend), when
  they are plain ints, strings, None or (nested) tuples of ints: anything else (numpy integers,
  lists, ...) takes the uncached path, which validates and packs as every call once did.

Hashing reads the weights once at memory speed (about 0.1 ms for 8 MiB on one core), where packing
them reads and rewrites them (about 0.9 ms), and a layer call then skips validation too.

Memory: the cache holds at most :data:`MAX_ENTRIES` layers, and evicts the least recently used ones
while the bytes they hold (their weight copies and packed weights, :meth:`nbytes`) exceed the budget
set by :func:`set_weight_cache_size` (default :data:`DEFAULT_BYTES`); a layer larger than the whole
budget is used for its call and not kept. Thread-safe: lookups and insertions hold a lock; a
layer is built outside it (two threads missing at once may both build; one is kept).

As for every numpy function, arrays must not be modified while a call is running: a weight changed
between its fingerprint and its packing is packed as changed but filed under the old content.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

from . import _cpu

DEFAULT_BYTES = 256 << 20
MAX_ENTRIES = 64
_MISSING = object()


def _exact(value) -> bool:
    """Whether a parameter can be part of a key: its equality must imply the same validation and
    result (1 == True == 1.0 == np.int64(1) would otherwise share a key with different outcomes)."""
    kind = type(value)
    if kind is int or kind is str or value is None:
        return True
    return kind is tuple and all(_exact(item) for item in value)


def _array_key(array):
    """(fingerprint, shape, strides, dtype) of an ndarray, or None when it has none."""
    if type(array) is not np.ndarray:
        return None
    fingerprint = _cpu.fingerprint(array)
    return None if fingerprint is None else (fingerprint, array.shape, array.strides, array.dtype)


class LayerCache:
    """Layers by content-and-arguments key, least recently used first (see the module docstring)."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES):
        self.max_bytes = max_bytes
        self._entries: OrderedDict = OrderedDict()   # key -> layer, or None: it could not be built
        self._lock = threading.Lock()
        # a layer inserted since the last trim, whose first call may pack (backend="auto" packs lazily)
        self.untrimmed = False

    def layer(self, kind, weight, bias, params: tuple, algorithm, backend):
        """The cached ``kind(weight, bias, *params, algorithm=, backend=)`` layer, built on a miss; None
        when the call cannot be cached (the caller then takes the uncached path, which also raises
        the errors of invalid arguments)."""
        # every call of the function API passes here: the common case (plain ints, arrays) first
        if self.max_bytes <= 0 or type(weight) is not np.ndarray:
            return None
        for value in params:
            if type(value) is not int and not _exact(value):
                return None
        if not (_exact(algorithm) and _exact(backend)):
            return None
        weight_key = _cpu.fingerprint(weight)
        if weight_key is None:
            return None
        bias_key = None
        if bias is not None:
            bias_key = _array_key(bias)
            if bias_key is None:
                return None
        key = (kind, weight_key, weight.shape, weight.strides, weight.dtype, bias_key, params, algorithm, backend)
        entries = self._entries
        with self._lock:
            layer = entries.get(key, _MISSING)
            if layer is not _MISSING:
                entries.move_to_end(key)
                return layer
        try:
            layer = kind(weight, bias, *params, algorithm=algorithm, backend=backend)
        except Exception:
            layer = None   # remembered, so that a call that cannot be cached does not try again each time
        self._insert(key, layer)
        return layer

    def _insert(self, key, layer) -> None:
        with self._lock:
            self._entries[key] = layer
            self.untrimmed = True

    def trim(self) -> None:
        """Evict the least recently used layers until the rest fit the budget. Called after the
        first call of a new layer: layers pack lazily (one packed copy per result dtype), so sizes
        are read then."""
        with self._lock:
            self.untrimmed = False
            sizes = {k: (0 if v is None else v.nbytes()) for k, v in self._entries.items()}
            total = sum(sizes.values())
            while self._entries and (total > self.max_bytes or len(self._entries) > MAX_ENTRIES):
                oldest, _ = self._entries.popitem(last=False)
                total -= sizes[oldest]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def nbytes(self) -> int:
        """Bytes held by the cached layers now."""
        with self._lock:
            layers = [layer for layer in self._entries.values() if layer is not None]
        return sum(layer.nbytes() for layer in layers)


CACHE = LayerCache()


def _after_fork_in_child():
    # a lock that another thread of the parent held at fork() stays held in the child: start afresh
    CACHE._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def set_weight_cache_size(max_bytes: int) -> int:
    """Bytes of packed weights that :func:`conv_transpose2d` and :func:`conv2d` keep between calls
    (default 256 MiB; 0 turns the cache off: every call packs its weights); returns the previous
    size. Shrinking evicts at the next insertion; :func:`clear_weight_cache` empties it now.
    The cache is keyed by the weights' contents, so it never returns a stale result (see
    :mod:`fastdeconv._weight_cache`)."""
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
        raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    previous, CACHE.max_bytes = CACHE.max_bytes, max_bytes
    return previous


def clear_weight_cache() -> None:
    """Drop every layer that :func:`conv_transpose2d` and :func:`conv2d` keep between calls."""
    CACHE.clear()
