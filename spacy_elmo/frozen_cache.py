"""The ``elmo`` component's memory of frozen-biLM layers for training docs.

With a frozen biLM the layers of a training Doc never change, so they are computed in
the first epoch and looked up in later ones; so do those of the dev Docs that the training
loop evaluates again and again. The memory holds at most ``cache_mb`` megabytes of arrays;
past that, the least recently used Docs are forgotten to make room for training Docs, while
dev Docs only take free room (they never push training Docs out). The first time a training
Doc is forgotten, a warning says how much memory would hold them all.
"""
import warnings
from collections import OrderedDict
from typing import Any, Callable, Hashable, List, Optional, Sequence, Tuple

import numpy as np
from spacy.tokens import Doc
from thinc.api import Ops
from thinc.types import Floats3d

from .layers.elmo_model import layers_to_numpy

MB = 2**20


class CacheFullWarning(UserWarning):
    """The frozen-layer memory forgot a training Doc: its layers will be computed again."""


def doc_key(doc: Doc) -> Tuple:
    """What the layers of a Doc depend on: its text, its tokens and its sentence starts."""
    starts = doc.to_array("SENT_START").tobytes() if doc.has_annotation("SENT_START") else None
    return (doc.text, tuple(t.idx for t in doc), starts)


class FrozenLayerCache:
    """A least-recently-used map from Doc keys to layer arrays, bounded in bytes.

    cache_mb: the bound in megabytes (2**20 bytes) of the arrays held; 0 keeps nothing.
    A hit returns the very array that was stored. ``training`` is set by the component once
    it serves training docs from here (predicted docs are remembered from then on) and
    cleared with the arrays. The first eviction warns (``CacheFullWarning``) once per cache.
    """

    def __init__(self, cache_mb: float) -> None:
        if cache_mb < 0:
            raise ValueError(f"cache_mb must be >= 0, got {cache_mb}")
        self.max_bytes = int(cache_mb * MB)
        self.nbytes = 0
        self.training = False
        self._warned = False
        self._arrays: "OrderedDict[Hashable, np.ndarray]" = OrderedDict()

    def __len__(self) -> int:
        return len(self._arrays)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._arrays

    def get(self, key: Hashable) -> Optional[np.ndarray]:
        """The array stored under ``key`` (now the most recently used), or None."""
        arr = self._arrays.get(key)
        if arr is not None:
            self._arrays.move_to_end(key)
        return arr

    def put(self, key: Hashable, arr: np.ndarray, evict: bool = True) -> bool:
        """Store ``arr`` under ``key``, forgetting the least recently used arrays until
        it fits (with ``evict``; without, only into free room). An array that does not
        fit is not stored (returns False)."""
        if arr.nbytes > self.max_bytes:
            return False
        if not evict and key not in self._arrays and self.nbytes + arr.nbytes > self.max_bytes:
            return False
        old = self._arrays.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        while self.nbytes + arr.nbytes > self.max_bytes:
            _, evicted = self._arrays.popitem(last=False)
            self.nbytes -= evicted.nbytes
            if not self._warned:
                self._warn_full(arr)
        arr.flags.writeable = False  # a hit hands out this very array: nobody may change it
        self._arrays[key] = arr
        self.nbytes += arr.nbytes
        return True

    def _warn_full(self, arr: np.ndarray) -> None:
        self._warned = True
        per_token = arr.nbytes / max(arr.shape[1], 1) if arr.ndim == 3 else float(arr.nbytes)
        warnings.warn(
            f"elmo: the memory of frozen layers is full (cache_mb = {self.max_bytes / MB:g}), so the "
            f"layers of the training docs it forgets are computed again in every later epoch, which "
            f"can make training several times slower. Here a token takes {per_token / 1024:.1f} KiB, "
            f"{1e5 * per_token / MB:,.0f} MB per 100,000 tokens: to compute each doc once, set "
            f"[components.elmo] cache_mb to what the training and dev docs need, memory permitting.",
            CacheFullWarning,
            stacklevel=3,
        )

    def layers(self, docs: Sequence[Doc], predict: Callable[[List[Doc]], List[Floats3d]], ops: Ops,
               evict: bool = True) -> List[Floats3d]:
        """The layers of each Doc: looked up, or computed with ``predict`` (all misses
        in one call, copied to the host once) and remembered (``evict``: as ``put``)."""
        if self.max_bytes == 0:
            return predict(list(docs))
        keys = [doc_key(doc) for doc in docs]
        outputs: List[Any] = [None] * len(keys)
        missing: List[int] = []
        for i, key in enumerate(keys):
            arr = self.get(key)
            if arr is None:
                missing.append(i)
            else:
                outputs[i] = ops.asarray(arr)
        if missing:
            fresh = predict([docs[i] for i in missing])
            for i, layers, arr in zip(missing, fresh, layers_to_numpy(fresh)):
                self.put(keys[i], arr, evict=evict)
                outputs[i] = layers
        return outputs

    def clear(self) -> None:
        self._arrays.clear()
        self.nbytes = 0
        self.training = False
        self._warned = False
