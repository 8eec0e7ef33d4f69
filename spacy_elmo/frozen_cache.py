"""The ``elmo`` component's memory of frozen-biLM layers for training docs.

With a frozen biLM the layers of a training Doc never change, so they are computed in
the first epoch and looked up in later ones; so do those of the dev Docs that the training
loop evaluates again and again. The memory holds at most ``cache_mb`` megabytes of arrays
and keeps the Docs that came first: a Doc that finds it full is computed again each time.
Training visits its Docs once an epoch in a new random order, and there keeping a fixed
fraction r of them hits r of the time, where forgetting the least recently used one hits
less often (a simulation of 14,000 Docs over 10 epochs: 30% of the time at r = 2/3, 15% at
1/2). The first training Doc that does not fit brings a warning, with the memory a token takes.
"""
import warnings
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import numpy as np
from spacy.tokens import Doc
from thinc.api import Ops
from thinc.types import Floats3d

from .layers.elmo_model import layers_to_numpy

MB = 2**20


class CacheFullWarning(UserWarning):
    """A training Doc did not fit into the frozen-layer memory: its layers are computed
    again in every epoch."""


def doc_key(doc: Doc) -> Tuple:
    """What the layers of a Doc depend on: its text, its tokens and its sentence starts."""
    starts = doc.to_array("SENT_START").tobytes() if doc.has_annotation("SENT_START") else None
    return (doc.text, tuple(t.idx for t in doc), starts)


class FrozenLayerCache:
    """A map from Doc keys to layer arrays, bounded in bytes, that keeps what came first.

    cache_mb: the bound in megabytes (2**20 bytes) of the arrays held; 0 keeps nothing.
    A hit returns the very array that was stored. ``training`` is set by the component once
    it serves training docs from here (predicted docs are remembered from then on) and
    cleared with the arrays.
    """

    def __init__(self, cache_mb: float) -> None:
        if cache_mb < 0:
            raise ValueError(f"cache_mb must be >= 0, got {cache_mb}")
        self.max_bytes = int(cache_mb * MB)
        self.nbytes = 0
        self.training = False
        self._warned = False
        self._arrays: Dict[Hashable, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._arrays)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._arrays

    def get(self, key: Hashable) -> Optional[np.ndarray]:
        """The array stored under ``key``, or None."""
        return self._arrays.get(key)

    def put(self, key: Hashable, arr: np.ndarray) -> bool:
        """Store ``arr`` under ``key`` if it fits into the free room (or into the room of
        the array it replaces); returns whether it was stored."""
        old = self._arrays.get(key)
        if self.nbytes - (old.nbytes if old is not None else 0) + arr.nbytes > self.max_bytes:
            return False
        if old is not None:
            self.nbytes -= old.nbytes
        arr.flags.writeable = False  # a hit hands out this very array: nobody may change it
        self._arrays[key] = arr
        self.nbytes += arr.nbytes
        return True

    def _warn_full(self, arr: np.ndarray) -> None:
        self._warned = True
        per_token = arr.nbytes / max(arr.shape[1], 1)  # (layers, tokens, width)
        warnings.warn(
            f"elmo: the memory of frozen layers is full (cache_mb = {self.max_bytes / MB:g}), so the "
            f"layers of the training docs that do not fit are computed again in every epoch, which "
            f"can make training several times slower. Here a token takes {per_token / 1024:.1f} KiB, "
            f"{1e5 * per_token / MB:,.0f} MB per 100,000 tokens: to compute each doc once, set "
            f"[components.elmo] cache_mb to what the training and dev docs need, memory permitting.",
            CacheFullWarning,
            stacklevel=4,
        )

    def layers(self, docs: Sequence[Doc], predict: Callable[[List[Doc]], List[Floats3d]], ops: Ops,
               warn: bool = True) -> List[Floats3d]:
        """The layers of each Doc: looked up, or computed with ``predict`` (all misses
        in one call, copied to the host once) and remembered while they fit. ``warn``:
        the first Doc that does not fit brings a ``CacheFullWarning`` (training docs)."""
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
                if not self.put(keys[i], arr) and warn and not self._warned:
                    self._warn_full(arr)
                outputs[i] = layers
        return outputs

    def clear(self) -> None:
        self._arrays.clear()
        self.nbytes = 0
        self.training = False
        self._warned = False
