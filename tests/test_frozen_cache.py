"""The elmo component's memory of frozen layers: bounded in MB, LRU, exact hits."""
import warnings

import numpy as np
import pytest
import spacy

from spacy_elmo.frozen_cache import MB, CacheFullWarning, FrozenLayerCache, doc_key

# evictions warn once per cache: the tests that evict on purpose check that elsewhere
evicting = pytest.mark.filterwarnings("ignore::spacy_elmo.frozen_cache.CacheFullWarning")


def arr(n_tokens: int, value: float = 0.0) -> np.ndarray:
    return np.full((3, n_tokens, 1024), value, dtype=np.float32)  # 12 KiB per token


@evicting
def test_never_holds_more_than_the_bound_and_evicts_the_oldest() -> None:
    cache = FrozenLayerCache(cache_mb=0.5)  # 512 KiB: 42 tokens of 12 KiB
    for i in range(20):
        cache.put(i, arr(5, i))  # 60 KiB each
        assert cache.nbytes <= 0.5 * MB
        assert cache.nbytes == sum(cache.get(k).nbytes for k in range(20) if k in cache)
    assert len(cache) == 8 and all(k in cache for k in range(12, 20)) and 11 not in cache


@evicting
def test_a_hit_is_the_stored_array_and_refreshes_it() -> None:
    cache = FrozenLayerCache(cache_mb=0.25)
    first = arr(5, 1.0)
    cache.put("a", first)
    cache.put("b", arr(5, 2.0))
    assert cache.get("a") is first  # identical array, now the most recently used
    cache.put("c", arr(5, 3.0))
    cache.put("d", arr(5, 4.0))
    cache.put("e", arr(5, 5.0))  # 5 x 60 KiB > 256 KiB: the least recently used ("b") goes
    assert "b" not in cache and cache.get("a") is first
    assert cache.get("missing") is None


def test_too_large_or_zero_stores_nothing() -> None:
    assert not FrozenLayerCache(0).put("a", arr(1))
    cache = FrozenLayerCache(cache_mb=0.01)
    assert not cache.put("big", arr(10)) and len(cache) == 0 and cache.nbytes == 0
    with pytest.raises(ValueError, match="cache_mb"):
        FrozenLayerCache(-1)


def test_replacing_a_key_keeps_the_count_right() -> None:
    cache = FrozenLayerCache(cache_mb=1)
    cache.put("a", arr(5))
    cache.put("a", arr(10))
    assert len(cache) == 1 and cache.nbytes == arr(10).nbytes
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


def test_doc_key_sees_text_tokens_and_sentence_starts() -> None:
    nlp = spacy.blank("en")
    a, b = nlp("A bank. A river."), nlp("A bank. A river.")
    assert doc_key(a) == doc_key(b)
    b[3].is_sent_start = True
    assert doc_key(a) != doc_key(b)
    assert doc_key(nlp("A bank.")) != doc_key(nlp("A  bank."))


@evicting
def test_without_evict_only_free_room_is_taken() -> None:
    cache = FrozenLayerCache(cache_mb=0.25)  # room for 4 arrays of 60 KiB
    for key in "abc":
        assert cache.put(key, arr(5))
    assert cache.put("d", arr(5), evict=False)  # fits into the free room
    assert not cache.put("e", arr(5), evict=False)  # full: nothing is pushed out
    assert all(k in cache for k in "abcd") and "e" not in cache
    assert cache.put("a", arr(5, 9.0), evict=False)  # replacing a key needs no new room
    assert cache.get("a")[0, 0, 0] == 9.0 and cache.nbytes == 4 * arr(5).nbytes
    assert cache.put("e", arr(5))  # with eviction the oldest ("b") goes
    assert "b" not in cache and "e" in cache


def test_stored_arrays_are_read_only() -> None:
    cache = FrozenLayerCache(cache_mb=1)
    cache.put("a", arr(2))
    with pytest.raises(ValueError, match="read-only"):
        cache.get("a")[0, 0, 0] = 1.0


def test_the_first_eviction_warns_once_with_the_memory_a_token_needs() -> None:
    cache = FrozenLayerCache(cache_mb=0.25)  # room for 4 arrays of 60 KiB
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # filling the free room, or refusing a doc without evict, is silent
        for key in "abcd":
            cache.put(key, arr(5))
        assert not cache.put("x", arr(5), evict=False)
    with pytest.warns(CacheFullWarning, match=r"cache_mb = 0.25.* 12.0 KiB, 1,172 MB per 100,000 tokens"):
        cache.put("e", arr(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put("f", arr(5))  # once per cache
    cache.clear()
    for key in "abcd":
        cache.put(key, arr(5))
    with pytest.warns(CacheFullWarning):  # a cleared cache (new weights, a new run) warns again
        cache.put("e", arr(5))
