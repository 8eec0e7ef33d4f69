"""The elmo component's memory of frozen layers: bounded in MB, keeps what came first, exact hits."""
import random
import warnings

import numpy as np
import pytest
import spacy
from thinc.api import NumpyOps

from spacy_elmo.frozen_cache import MB, CacheFullWarning, FrozenLayerCache, doc_key


def arr(n_tokens: int, value: float = 0.0) -> np.ndarray:
    return np.full((3, n_tokens, 1024), value, dtype=np.float32)  # 12 KiB per token


def test_never_holds_more_than_the_bound_and_keeps_the_first() -> None:
    cache = FrozenLayerCache(cache_mb=0.5)  # 512 KiB: 42 tokens of 12 KiB
    stored = [cache.put(i, arr(5, i)) for i in range(20)]  # 60 KiB each
    assert stored == [True] * 8 + [False] * 12
    assert cache.nbytes == 8 * arr(5).nbytes <= 0.5 * MB and len(cache) == 8
    assert all(k in cache for k in range(8)) and 8 not in cache
    assert cache.put(9, arr(2))  # a smaller array still fits into what is left


def test_a_hit_is_the_stored_array() -> None:
    cache = FrozenLayerCache(cache_mb=0.25)
    first = arr(5, 1.0)
    cache.put("a", first)
    assert cache.get("a") is first
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
    full = FrozenLayerCache(cache_mb=0.25)  # room for 4 arrays of 60 KiB
    for key in "abcd":
        assert full.put(key, arr(5))
    assert full.put("a", arr(5, 9.0))  # replacing a key needs no new room
    assert full.get("a")[0, 0, 0] == 9.0 and full.nbytes == 4 * arr(5).nbytes
    assert not full.put("a", arr(8))  # a larger replacement must fit too
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


def test_doc_key_sees_text_tokens_and_sentence_starts() -> None:
    nlp = spacy.blank("en")
    a, b = nlp("A bank. A river."), nlp("A bank. A river.")
    assert doc_key(a) == doc_key(b)
    b[3].is_sent_start = True
    assert doc_key(a) != doc_key(b)
    assert doc_key(nlp("A bank.")) != doc_key(nlp("A  bank."))


def test_stored_arrays_are_read_only() -> None:
    cache = FrozenLayerCache(cache_mb=1)
    cache.put("a", arr(2))
    with pytest.raises(ValueError, match="read-only"):
        cache.get("a")[0, 0, 0] = 1.0


def test_layers_computes_the_misses_once_and_warns_once_when_full() -> None:
    nlp = spacy.blank("en")
    docs = [nlp(f"sentence number {i} .") for i in range(6)]  # 4 tokens, 48 KiB each
    calls = []

    def predict(batch):
        calls.append([doc.text for doc in batch])
        return [arr(len(doc), float(doc[2].text)) for doc in batch]

    cache, ops = FrozenLayerCache(cache_mb=0.2), NumpyOps()  # room for 4 of them
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # filling the free room, or a doc that misses it without warn, is silent
        out = cache.layers(docs[:4], predict, ops)
        assert len(calls) == 1 and len(cache) == 4
        cache.layers(docs[4:5], predict, ops, warn=False)
    with pytest.warns(CacheFullWarning, match=r"cache_mb = 0.2.* 12.0 KiB, 1,172 MB per 100,000 tokens"):
        cache.layers(docs[4:], predict, ops)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = cache.layers(docs[::-1], predict, ops)  # once per cache
    assert calls[-1] == [docs[5].text, docs[4].text]  # only the two that did not fit, in one call
    assert all(a is b for a, b in zip(again[::-1][:4], out))  # hits: the very arrays stored
    assert [float(a[0, 0, 0]) for a in again] == [5, 4, 3, 2, 1, 0]
    cache.clear()
    cache.layers(docs[:4], predict, ops)
    with pytest.warns(CacheFullWarning):  # a cleared cache (new weights, a new run) warns again
        cache.layers(docs[4:], predict, ops)


def hit_rate(keep_first: bool, n_docs: int = 2000, room: int = 1000, epochs: int = 6) -> float:
    """Hits of epochs 2.. when each epoch visits every doc in a new random order."""
    cache = FrozenLayerCache(cache_mb=room * arr(1).nbytes / MB)
    rng, hits = random.Random(0), 0
    recent: dict = {}  # the least-recently-used policy, for comparison
    for epoch in range(epochs):
        order = list(range(n_docs))
        rng.shuffle(order)
        for key in order:
            if keep_first:
                hit = cache.get(key) is not None
                if not hit:
                    cache.put(key, arr(1))
            else:
                hit = key in recent
                recent.pop(key, None)
                recent[key] = True
                if len(recent) > room:
                    del recent[next(iter(recent))]
            hits += hit and epoch > 0
    return hits / (n_docs * (epochs - 1))


def test_keeping_the_first_docs_hits_more_than_lru_in_shuffled_epochs() -> None:
    kept, lru = hit_rate(True), hit_rate(False)
    assert kept == pytest.approx(0.5)  # the half that fits, every epoch
    assert lru < 0.25, lru
