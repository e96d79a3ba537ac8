"""One bounded, thread-safe cache for every cache in the package.

Each cache (a layer's geometries and runners per input shape, the CPU runners, the function API's
layers, the Dask workers' packed kernels, the compiled MPSGraphs) holds at most ``max_entries``
values and evicts the least recently used first, so that a stream of ever-new keys cannot grow it
without bound.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import Callable, Hashable, Iterator

_MISSING = object()
_ALL: weakref.WeakSet = weakref.WeakSet()


class BoundedCache:
    """A least-recently-used mapping of at most ``max_entries`` values; every method is thread-safe."""

    def __init__(self, max_entries: int):
        if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        #: ``peek(key, default=None)``: the value under ``key`` without making it the most recently used
        #: (a plain dict lookup, for a hot path whose misses file the value again with :meth:`put`).
        self.peek = self._entries.get
        _ALL.add(self)

    def get(self, key: Hashable, default=None):
        """The value filed under ``key`` (now the most recently used), else ``default``.

        A lookup takes no lock (it is on every layer call's path). Under the GIL the OrderedDict stays
        consistent whatever other threads file or evict meanwhile (its methods are C code; a key's
        own ``__eq__`` may let another thread run, never corrupt it), and a key evicted between the
        lookup and the move is simply not moved."""
        entries = self._entries
        value = entries.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            entries.move_to_end(key)
        except KeyError:
            pass
        return value

    def put(self, key: Hashable, value):
        """File ``value`` under ``key``, evicting the least recently used beyond ``max_entries``;
        returns ``value``."""
        with self._lock:
            self._entries[key] = value
            self._file_last(key)
        return value

    def _file_last(self, key) -> None:
        # with the lock held: key becomes the most recently used, and the bound is kept
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get_or_make(self, key: Hashable, make: Callable[[], object]):
        """The value under ``key``, or ``make()`` filed there. ``make`` runs outside the lock (it may be
        slow, or use another cache): two threads that miss at once may both make one; the first filed
        is kept and returned to both."""
        value = self.get(key, _MISSING)
        if value is not _MISSING:
            return value
        made = make()
        with self._lock:
            value = self._entries.setdefault(key, made)
            self._file_last(key)
        return value

    def pop_oldest(self):
        """Remove the least recently used entry; (key, value), or None when empty."""
        with self._lock:
            return self._entries.popitem(last=False) if self._entries else None

    def _snapshot(self, view) -> list:
        # a lock-free get() may reorder the entries while they are copied: copy again
        with self._lock:
            while True:
                try:
                    return list(view())
                except RuntimeError:   # "OrderedDict mutated during iteration"
                    continue

    def values(self) -> list:
        """A snapshot of the values, least recently used first."""
        return self._snapshot(self._entries.values)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator:
        return iter(self._snapshot(self._entries.keys))


def _after_fork_in_child():
    # a lock that another thread of the parent held at fork() stays held in the child: start afresh
    for cache in list(_ALL):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
