"""The function API's packed-weight cache (fastdeconv/_weight_cache.py): never a stale result,
bounded, thread-safe, and keyed by content (src/runtime/fingerprint.c)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import fastdeconv
from fastdeconv import _cpu, _weight_cache
from fastdeconv import reference as ref


@pytest.fixture(autouse=True)
def fresh_cache():
    fastdeconv.clear_weight_cache()
    previous = fastdeconv.set_weight_cache_size(_weight_cache.DEFAULT_BYTES)
    yield
    fastdeconv.set_weight_cache_size(previous)
    fastdeconv.clear_weight_cache()


def _arrays(seed=0, c_in=6, c_out=4, k=3, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 5, 6, c_in)).astype(dtype)
    w = rng.standard_normal((c_in, k, k, c_out)).astype(dtype)
    b = rng.standard_normal(c_out).astype(dtype)
    return x, w, b


def _close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=2e-5)


def _entries():
    """Cached layers (an entry of None remembers a call that could not be cached: not counted)."""
    return sum(layer is not None for layer in _weight_cache.CACHE._entries.values())


@pytest.mark.parametrize("op", ["conv_transpose2d", "conv2d"])
def test_weight_modified_in_place_gives_the_new_answer(op):
    x, w, b = _arrays()
    function, oracle = getattr(fastdeconv, op), getattr(ref, op)
    if op == "conv2d":   # (C_out, kH, kW, C_in): a conv2d weight for x's 6 channels
        w = np.ascontiguousarray(w.transpose(3, 1, 2, 0))
    first = function(x, w, b, stride=2, padding=1)
    _close(first, oracle(x, w, b, stride=2, padding=1))
    w[0, 1, 1, 0] += 10.0           # one element, in place: same array, same address
    second = function(x, w, b, stride=2, padding=1)
    _close(second, oracle(x, w, b, stride=2, padding=1))
    assert not np.allclose(first, second)
    w *= -1.0                       # every element
    _close(function(x, w, b, stride=2, padding=1), oracle(x, w, b, stride=2, padding=1))


def test_bias_modified_in_place_gives_the_new_answer():
    x, w, b = _arrays()
    fastdeconv.conv_transpose2d(x, w, b)
    b[2] = 100.0
    _close(fastdeconv.conv_transpose2d(x, w, b), ref.conv_transpose2d(x, w, b))


def test_new_array_at_a_freed_arrays_address_gives_its_own_answer():
    """A weight freed and a new one allocated at the same address (same shape, strides and dtype)
    must not be mistaken for the old one."""
    x, w, _ = _arrays()
    address = w.__array_interface__["data"][0]
    fastdeconv.conv_transpose2d(x, w)
    del w
    gc.collect()
    rng = np.random.default_rng(1)
    for attempt in range(1000):
        w2 = np.empty((6, 3, 3, 4), np.float32)
        if w2.__array_interface__["data"][0] == address:
            break
        del w2
    else:
        pytest.skip("the allocator did not reuse the freed address in 1000 allocations")
    w2[...] = rng.standard_normal(w2.shape)
    _close(fastdeconv.conv_transpose2d(x, w2), ref.conv_transpose2d(x, w2))


def test_views_of_one_buffer_are_told_apart():
    """Permuted and reversed views share a span; shape, strides and offset separate them."""
    x, _, _ = _arrays()
    rng = np.random.default_rng(2)
    torch_layout = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)   # (C_in, C_out, kH, kW)
    views = [torch_layout.transpose(0, 2, 3, 1), torch_layout.transpose(0, 3, 2, 1),
             torch_layout.transpose(0, 2, 3, 1)[:, ::-1], torch_layout.transpose(0, 2, 3, 1)[:, :, ::-1, ::-1]]
    for view in views:
        _close(fastdeconv.conv_transpose2d(x, view), ref.conv_transpose2d(x, view))
    assert _entries() == len(views)
    torch_layout[1] += 1.0          # through the base: every view changes
    for view in views:
        _close(fastdeconv.conv_transpose2d(x, view), ref.conv_transpose2d(x, view))


def test_equal_contents_share_one_layer_and_repeated_calls_pack_once():
    x, w, b = _arrays()
    for _ in range(3):
        fastdeconv.conv_transpose2d(x, w, b, stride=2)
        fastdeconv.conv_transpose2d(x, w.copy(), b.copy(), stride=2)
    assert _entries() == 1
    fastdeconv.conv_transpose2d(x, w, b, stride=1)           # other arguments: another layer
    fastdeconv.conv_transpose2d(x.astype(np.float64), w, b)  # another x dtype: the same layer
    assert _entries() == 2


@pytest.mark.parametrize("stride", [np.int64(2), True, [2, 2], 2.0], ids=["numpy-int", "bool", "list", "float"])
def test_arguments_that_are_not_plain_ints_take_the_uncached_path(stride):
    """1 == True == np.int64(1) == 1.0 must not share a key: each keeps the validation it gets today."""
    x, w, b = _arrays()
    try:
        expected = fastdeconv.conv_transpose2d(x, w, b, stride=stride)
    except (TypeError, ValueError) as error:
        with pytest.raises(type(error)):
            fastdeconv.conv_transpose2d(x, w, b, stride=stride)
    else:
        _close(expected, ref.conv_transpose2d(x, w, b, stride=stride))
    assert _entries() == 0


def test_invalid_arguments_raise_the_same_error_every_time():
    x, w, b = _arrays()
    for _ in range(2):
        with pytest.raises(ValueError, match="groups"):
            fastdeconv.conv_transpose2d(x, w, b, groups=4)
        with pytest.raises(ValueError, match="stride"):
            fastdeconv.conv_transpose2d(x, w, b, stride=0)


def test_out_overlapping_the_callers_weight_is_rejected_on_a_cache_hit():
    x = np.ones((1, 3, 3, 2))
    buf = np.ones(200)
    w = buf[:2 * 3 * 3 * 2].reshape(2, 3, 3, 2)
    fastdeconv.conv2d(x, w.copy(), padding=1)            # the same contents, cached
    with pytest.raises(ValueError, match="out.*overlap.*weight"):
        fastdeconv.conv2d(x, w, padding=1, out=buf[:18].reshape(1, 3, 3, 2))


def test_cache_is_bounded_in_bytes_and_entries():
    x, _, _ = _arrays()
    budget = 64 << 10
    fastdeconv.set_weight_cache_size(budget)
    rng = np.random.default_rng(3)
    for i in range(40):
        w = rng.standard_normal((6, 3, 3, 200)).astype(np.float32)   # 43 KiB, packed and copied: > budget / 2
        _close(fastdeconv.conv_transpose2d(x, w), ref.conv_transpose2d(x, w))
        assert _weight_cache.CACHE.nbytes() <= budget
    for i in range(_weight_cache.MAX_ENTRIES + 10):
        fastdeconv.conv_transpose2d(x[:, :2, :2, :1], np.full((1, 1, 1, 1), float(i), np.float32))
    assert _entries() <= _weight_cache.MAX_ENTRIES


def test_size_zero_turns_the_cache_off():
    x, w, b = _arrays()
    fastdeconv.set_weight_cache_size(0)
    _close(fastdeconv.conv_transpose2d(x, w, b), ref.conv_transpose2d(x, w, b))
    assert _entries() == 0
    with pytest.raises(ValueError, match="max_bytes.*-1"):
        fastdeconv.set_weight_cache_size(-1)


def test_concurrent_calls_with_evictions_are_correct():
    """Threads sharing a cache too small for their layers: every result still matches."""
    fastdeconv.set_weight_cache_size(48 << 10)
    rng = np.random.default_rng(4)
    layers = [(rng.standard_normal((2, 7, 7, 8)).astype(np.float32),
               rng.standard_normal((8, 3, 3, 300)).astype(np.float32)) for _ in range(6)]
    expected = [ref.conv_transpose2d(x, w, stride=2) for x, w in layers]
    errors = []

    def worker(offset):
        try:
            for i in range(30):
                k = (i + offset) % len(layers)
                x, w = layers[k]
                _close(fastdeconv.conv_transpose2d(x, w, stride=2), expected[k])
        except BaseException as error:   # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]


def test_fingerprint_is_a_function_of_the_content():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 3, 3, 5)).astype(np.float32)
    assert _cpu.fingerprint(a) == _cpu.fingerprint(a.copy())
    b = a.copy()
    b.view(np.uint32)[2, 1, 1, 3] ^= 1    # one bit
    assert _cpu.fingerprint(b) != _cpu.fingerprint(a)
    reversed_view = a[::-1, :, ::-1]
    low, high, offset = _cpu.fingerprint(reversed_view)
    assert (low, high) == _cpu.fingerprint(a)[:2] and offset == (3 * a.strides[0] + 2 * a.strides[2])
    assert _cpu.fingerprint(np.empty((0, 3), np.float32))[2] == 0
    assert _cpu.fingerprint(rng.standard_normal(100)[::10]) is None     # a sparse view: span 91, size 10
    assert _cpu.fingerprint(np.broadcast_to(np.float32(1), (4, 4))) is not None   # zero strides: span 1


def test_array_key_tells_apart_every_layout_of_the_same_bytes():
    """array_key folds the offset, shape and strides into its hash and keeps the dtype: the same bytes
    seen as another shape, order, view or dtype give another key; equal arrays give the same one."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 3, 3, 6)).astype(np.float32)
    key = _cpu.array_key(a)
    assert key == _cpu.array_key(a.copy()) and key[2] == np.float32
    others = [a.reshape(4, 3, 6, 3), a.reshape(12, 18), a[::-1], a[:, :, :, ::-1], a[1:], a[:, :, :, :5],
              a.view(np.int32), a.view(np.dtype(">f4")), np.asfortranarray(a), a.transpose(0, 2, 1, 3)]
    keys = {_cpu.array_key(view) for view in others}
    assert len(keys) == len(others) and key not in keys
    changed = a.copy()
    changed.view(np.uint32)[3, 2, 2, 5] ^= 1     # the last bit
    assert _cpu.array_key(changed) != key
    assert _cpu.array_key(a.tolist()) is None and _cpu.array_key(np.ma.masked_array(a)) is None   # not ndarrays
    assert _cpu.array_key(rng.standard_normal(100)[::10]) is None     # a sparse view, as fingerprint
    assert _cpu.array_key(np.empty((0, 3), np.float32)) != _cpu.array_key(np.empty((3, 0), np.float32))


def test_fingerprint_of_a_large_array_is_the_same_on_any_thread_count():
    """Spans of 512 KiB or more are hashed in parts on the pool: same value at 1 and 3 threads, and a
    change in any part (the last, partial one included) changes it."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3 << 20) // 8 + 5)          # 3 MiB + 40 bytes: 13 parts, the last partial
    previous = fastdeconv.get_num_threads()
    try:
        fastdeconv.set_num_threads(1)
        serial = _cpu.fingerprint(a)
        fastdeconv.set_num_threads(3)
        assert _cpu.fingerprint(a) == serial
        for index in (0, (1 << 20) // 8, a.size - 1):
            b = a.copy()
            b[index] = np.nextafter(b[index], np.inf)
            assert _cpu.fingerprint(b) != serial
        assert _cpu.fingerprint(a[:-1])[:2] != serial[:2]   # one element shorter
    finally:
        fastdeconv.set_num_threads(previous)


def test_a_weight_written_while_its_layer_is_built_never_reaches_later_calls(monkeypatch):
    """The race of a writer thread, made deterministic: the caller's weight changes after the cache took
    its fingerprint and before the layer copied it. That call's result is undefined (a race, as for any
    numpy function), but the layer built from the new contents must not be filed under the old ones."""
    x, w1, b = _arrays(seed=5)
    w2 = -w1
    w = w1.copy()
    construct = fastdeconv.ConvTranspose2d.__init__

    def written_during_construction(self, weight, *args, **kwargs):
        weight[...] = w2   # another thread's write, between the fingerprint and the copy
        construct(self, weight, *args, **kwargs)

    monkeypatch.setattr(fastdeconv.ConvTranspose2d, "__init__", written_during_construction)
    fastdeconv.conv_transpose2d(x, w, b, stride=2)
    monkeypatch.setattr(fastdeconv.ConvTranspose2d, "__init__", construct)
    w[...] = w1   # the old contents again: later calls must compute them
    for _ in range(2):
        _close(fastdeconv.conv_transpose2d(x, w, b, stride=2), ref.conv_transpose2d(x, w1, b, stride=2))


def test_writers_racing_calls_leave_no_wrong_entry():
    """Threads flip a weight between two contents while others call; afterwards every single-threaded
    call with either contents equals the reference."""
    x, w1, b = _arrays(seed=6)
    w2 = w1[::-1].copy()
    w = w1.copy()
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            w[...] = w2
            w[...] = w1

    def caller():
        for _ in range(200):
            fastdeconv.conv_transpose2d(x, w, b, padding=1)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads[1:]:
        thread.join()
    stop.set()
    threads[0].join()
    for contents in (w1, w2, w1):
        w[...] = contents
        _close(fastdeconv.conv_transpose2d(x, w, b, padding=1), ref.conv_transpose2d(x, contents, b, padding=1))
