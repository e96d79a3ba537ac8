"""The function API's layer cache: ``conv_transpose2d(x, w, ...)`` and ``conv2d(x, w, ...)`` pack the
weights once per distinct weight *content*, not once per call.

Each call looks up a :class:`~fastdeconv.ConvTranspose2d` / :class:`~fastdeconv.Conv2d` layer by a
key made of

* the weight's and the bias's :func:`fastdeconv._cpu.array_key`: XXH3-128 of the bytes the array
  spans, with its first element's offset in that span, its shape and strides, and its dtype: together
  these determine every element, so an array modified in place, or a new array
  allocated where a freed one was, gives a new key and is packed afresh; equal contents in
  different arrays share one layer;
* (weight and bias must be numpy arrays; other array-likes take the uncached path)
* the other arguments (stride, padding, output_padding, dilation, groups, algorithm, backend), when
  they are plain ints, strings, None or (nested) tuples of ints: anything else (numpy integers,
  lists, ...) takes the uncached path, which validates and packs as every call once did.

Hashing reads the weights once at memory speed, where packing them reads and rewrites them, and a
layer call then skips validation too.

Memory: the cache holds at most :data:`MAX_ENTRIES` layers, and evicts the least recently used ones
while the bytes they hold (their weight copies and packed weights, :meth:`nbytes`) exceed the budget
set by :func:`set_weight_cache_size` (default :data:`DEFAULT_BYTES`); a layer larger than the whole
budget is used for its call and not kept. Thread-safe: insertions hold a lock, lookups need none
(:class:`fastdeconv._cache.BoundedCache`); a layer is built outside it (two threads missing at once may both build; one is kept).

As for every numpy function, arrays must not be modified while a call is running (that call's result is
then undefined); but such a race never reaches later calls: a layer is filed only if the weight and
bias still have the key's contents once it has copied them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _cpu
from ._cache import BoundedCache
from ._params import is_int

if TYPE_CHECKING:
    from ._layers import _Layer

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


class LayerCache:
    """Layers by content-and-arguments key, least recently used first (see the module docstring)."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES):
        self.max_bytes = max_bytes
        self._entries = BoundedCache(MAX_ENTRIES)   # key -> layer, or None: it could not be built
        # a layer inserted since the last trim, whose first call may pack (backend="auto" packs lazily)
        self.untrimmed = False

    def layer(self, kind: type[_Layer], weight: Any, bias: Any, params: dict[str, Any], algorithm: Any,
              backend: Any) -> _Layer | None:
        """The cached ``kind(weight, bias, **params, algorithm=, backend=)`` layer, built on a miss; None
        when the call cannot be cached (the caller then takes the uncached path, which also raises
        the errors of invalid arguments)."""
        # every call of the function API passes here: the common case (plain ints, arrays) first
        if self.max_bytes <= 0:
            return None
        for value in params.values():
            if type(value) is not int and not _exact(value):
                return None
        if not ((algorithm is None or type(algorithm) is str) and type(backend) is str) and \
                not (_exact(algorithm) and _exact(backend)):
            return None
        weight_key = _cpu.array_key(weight)
        if weight_key is None:
            return None
        bias_key = None
        if bias is not None:
            bias_key = _cpu.array_key(bias)
            if bias_key is None:
                return None
        key = (kind, weight_key, bias_key, tuple(params.values()), algorithm, backend)
        layer = self._entries.get(key, _MISSING)
        if layer is not _MISSING:
            return layer
        try:
            layer = kind(weight, bias, **params, algorithm=algorithm, backend=backend)
        except Exception:
            layer = None   # remembered, so that a call that cannot be cached does not try again each time
        # Filed only if the arrays still hold the contents of the key: another thread that wrote to
        # them while the layer copied them would otherwise file other contents' layer under this key.
        if _cpu.array_key(weight) == weight_key and (bias is None or _cpu.array_key(bias) == bias_key):
            self._insert(key, layer)
        return layer

    def _insert(self, key, layer) -> None:
        self._entries.put(key, layer)
        self.untrimmed = True

    def trim(self) -> None:
        """Evict the least recently used layers until the rest fit the budget. Called after the
        first call of a new layer: layers pack lazily (one packed copy per result dtype), so sizes
        are read then."""
        self.untrimmed = False
        total = sum(0 if layer is None else layer.nbytes() for layer in self._entries.values())
        while total > self.max_bytes:
            oldest = self._entries.pop_oldest()
            if oldest is None:
                break
            total -= 0 if oldest[1] is None else oldest[1].nbytes()

    def clear(self) -> None:
        self._entries.clear()

    def nbytes(self) -> int:
        """Bytes held by the cached layers now."""
        return sum(layer.nbytes() for layer in self._entries.values() if layer is not None)


CACHE = LayerCache()


def set_weight_cache_size(max_bytes: int) -> int:
    """Bytes of packed weights that :func:`conv_transpose2d` and :func:`conv2d` keep between calls
    (default 256 MiB; 0 turns the cache off: every call packs its weights); returns the previous
    size. ``max_bytes`` is an integer (Python's or numpy's) >= 0. Shrinking evicts at the next insertion;
    :func:`clear_weight_cache` empties it now.
    The cache is keyed by the weights' contents, so it never returns a stale result (see
    :mod:`fastdeconv._weight_cache`).

    Examples
    --------
    >>> import fastdeconv
    >>> previous = fastdeconv.set_weight_cache_size(64 * 2**20)      # 64 MiB
    >>> previous
    268435456
    >>> _ = fastdeconv.set_weight_cache_size(previous)
    """
    if not is_int(max_bytes) or max_bytes < 0:
        raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    previous, CACHE.max_bytes = CACHE.max_bytes, int(max_bytes)
    return previous


def clear_weight_cache() -> None:
    """Drop every layer that :func:`conv_transpose2d` and :func:`conv2d` keep between calls.

    Examples
    --------
    >>> import fastdeconv
    >>> fastdeconv.clear_weight_cache()
    """
    CACHE.clear()
