"""fastdeconv._cache.BoundedCache, the one cache behind every cache of the package: least recently
used out first, never more than its bound, safe under threads and fork; and each cache uses it."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import fastdeconv
from fastdeconv import _cache, _layers
from fastdeconv._backends import cpu as _cpu_backend
from fastdeconv.metal import engine


def test_least_recently_used_goes_first():
    cache = _cache.BoundedCache(3)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"          # a is now the most recently used
    cache.put("d", "D")
    assert list(cache) == ["c", "a", "d"] and "b" not in cache
    assert cache.get("b", "missing") == "missing"
    assert cache.pop_oldest() == ("c", "C")
    assert len(cache) == 2


def test_peek_finds_without_touching_the_order():
    cache = _cache.BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1 and cache.peek("c") is None
    cache.put("c", 3)           # a stays the least recently used: peek did not touch it
    assert list(cache) == ["b", "c"]


def test_get_or_make_keeps_the_first_value_filed():
    cache = _cache.BoundedCache(2)
    calls = []

    def make():
        calls.append(1)
        if len(calls) == 1:   # a second thread files its value while the first one is still making
            cache.put("k", "theirs")
        return "mine"

    assert cache.get_or_make("k", make) == "theirs"
    assert cache.get_or_make("k", make) == "theirs" and len(calls) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_bound_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_entries"):
        _cache.BoundedCache(bad)


def test_never_above_its_bound_under_threads():
    """(The bound holds between calls: a lock-free len() read during another thread's put may see the
    entry that put is about to evict, so it is checked once the threads are done.)"""
    cache = _cache.BoundedCache(8)
    errors = []

    def hammer(seed):
        rng = np.random.default_rng(seed)
        try:
            for key in rng.integers(0, 40, 3000):
                value = cache.get_or_make(int(key), lambda key=key: int(key) * 2)
                assert value == int(key) * 2
        except Exception as error:   # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(cache) <= 8


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_lock_held_at_fork_is_fresh_in_the_child():
    cache = _cache.BoundedCache(2)
    cache.put("k", 1)
    with cache._lock:   # held by this thread while forking: the child must not inherit it held
        pid = os.fork()
        if pid == 0:
            os._exit(0 if cache.get("k") == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_every_cache_of_a_layer_is_bounded():
    """A stream of new input shapes never grows a layer's caches (or its CPU runners) past the bound."""
    w = np.ones((2, 1, 1, 2), np.float32)
    layer = fastdeconv.ConvTranspose2d(w)
    for height in range(1, _layers.CACHE_SHAPES + 20):
        layer(np.ones((1, height, 1, 2), np.float32))
    packed = next(iter(layer._layers.values()))
    assert len(layer._geometries) == len(layer._ready) == _layers.CACHE_SHAPES
    assert len(packed._runners) == _cpu_backend.CACHE_SHAPES


def test_the_caches_are_bounded_caches():
    assert isinstance(engine._graph_cache, _cache.BoundedCache)
    assert isinstance(fastdeconv._weight_cache.CACHE._entries, _cache.BoundedCache)
